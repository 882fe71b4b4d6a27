"""Ingest on a Dask cluster (``--scheduler``): a real local Dask cluster (two worker processes)
parses the files, and the events, stats and tables equal those of a local run exactly."""

from __future__ import annotations

import gzip
import operator
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import cli, exitcodes
from nodewarden.analysis import cluster
from nodewarden.analysis import ingest as ingest_mod
from nodewarden.analysis.ingest import ingest
from nodewarden.analysis.simulate import simulate
from nodewarden.logfiles import open_log, parallel

from test_ingest_parallel import _run  # noqa: E402  (events as JSON lines, stats with errors)

distributed = envneeds.module("distributed", "analyze --scheduler, the [dask] extra")
envneeds.module("pyarrow", "the event cache, the [analysis] extra")


@pytest.fixture(scope="module")
def scheduler() -> str:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as lc:
        yield lc.scheduler_address


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated fleet, copies of one file under two names on several nodes, one
    truncated archive and one file that cannot be read."""
    out = tmp_path_factory.mktemp("fleet")
    simulate(out, nodes=10, days=45, seed=5, fault_scale=1.0)  # the default fleet's faults on 10 nodes
    nodes = sorted(p for p in out.iterdir() if p.is_dir())
    for node in nodes[:6]:
        if (node / "kern.log.1").exists():
            shutil.copyfile(node / "kern.log.1", node / "syslog.1")
    data = gzip.compress(b"[   10.000000] NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus\n" * 50)
    (nodes[1] / "kern.log.99.gz").write_bytes(data[: len(data) // 2])
    (nodes[2] / "kern.log.98").symlink_to(nodes[2] / "gone")
    return out


def test_dask_gives_the_local_result_exactly(fleet: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    local, local_stats = _run([str(fleet)], jobs=1)

    def not_here(*a, **kw):
        raise AssertionError("a file was parsed in this process, not on the cluster")

    monkeypatch.setattr(ingest_mod, "iter_file", not_here)  # the workers have their own module
    remote, remote_stats = _run([str(fleet)], scheduler=scheduler)
    assert len(local) > 100 and local_stats["copies_dropped"] > 0
    assert [e for e in local_stats["errors"] if "kern.log.99.gz" in e or "kern.log.98" in e] == local_stats["errors"]
    assert len(local_stats["errors"]) == 2
    assert remote == local
    assert remote_stats == local_stats


def test_dask_parses_large_files_on_a_worker(fleet: Path, scheduler: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Files the local run splits across processes (here: above a lowered size) are one task
    each on the cluster, with the same events."""
    big = tmp_path / "big"
    big.mkdir()
    node = sorted(p for p in fleet.iterdir() if p.is_dir())[3]
    with open(big / "node03.log", "wb") as out:
        for f in sorted(node.iterdir()):
            with open_log(f) as src:
                out.write(src.read())
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 64 << 10)
    monkeypatch.setattr(parallel, "WARMUP", 16 << 10)
    monkeypatch.setattr(parallel, "LOOKAHEAD", 16 << 10)
    paths = [str(big / "node03.log"), str(fleet / sorted(p.name for p in fleet.iterdir() if p.is_dir())[0])]
    local = _run(paths, jobs=2)
    assert _run(paths, scheduler=scheduler) == local
    assert len(local[0]) > 10


def test_cli_analyze_tables_are_the_same(fleet: Path, scheduler: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    outs = {}
    for name, extra in (("local", ["--jobs", "2"]), ("dask", ["--scheduler", scheduler])):
        rc = cli.main(["analyze", str(fleet), "--no-cache", "--out", str(tmp_path / name)] + extra)
        assert rc == exitcodes.INCOMPLETE  # the truncated archive and the dangling link
        outs[name] = capsys.readouterr().out
    csvs = sorted(p.name for p in (tmp_path / "local").glob("*.csv"))
    assert "table6_xid_counts.csv" in csvs
    for name in csvs:
        assert (tmp_path / "dask" / name).read_text() == (tmp_path / "local" / name).read_text(), name
    assert outs["dask"].replace(str(tmp_path / "dask"), "OUT") == outs["local"].replace(str(tmp_path / "local"), "OUT")


def test_dask_with_a_shared_cache(fleet: Path, scheduler: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _run([str(fleet)], scheduler=scheduler, cache_dir=cache)
    assert list(cache.glob("*.parquet"))
    assert _run([str(fleet)], scheduler=scheduler, cache_dir=cache) == first == _run([str(fleet)], jobs=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_a_usage_error(fleet: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    address = f"tcp://127.0.0.1:{_free_port()}"
    assert cli.main(["analyze", str(fleet), "--no-cache", "--scheduler", address]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert f"cannot reach the Dask scheduler at {address}" in err


def test_without_the_extra_the_error_names_it(fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(cluster.ClusterError, match=r"\[dask\] extra"):
        ingest([str(fleet)], scheduler="tcp://127.0.0.1:1")


def test_a_task_the_cluster_fails_is_a_cluster_error(scheduler: str) -> None:
    pool = cluster.DaskPool(scheduler)
    try:
        assert pool.slots == 2
        assert pool.result(pool.submit(operator.add, 2, 3)) == 5
        with pytest.raises(cluster.ClusterError, match="lost a parsing task: ZeroDivisionError"):
            pool.result(pool.submit(operator.truediv, 1, 0))
    finally:
        pool.close(True)


def test_relative_paths_are_ours_not_the_workers(fleet: Path, scheduler: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers started elsewhere (their working directory is not ours): relative paths and a
    relative cache directory still name our files, and events name them as given."""
    monkeypatch.chdir(fleet.parent)
    rel = fleet.name
    local = _run([rel], jobs=1)
    assert any(f'"origin":"{rel}/' in line for line in local[0])
    assert _run([rel], scheduler=scheduler) == local
    cache = os.path.join(os.path.relpath(tmp_path, fleet.parent), "cache")
    assert _run([rel], scheduler=scheduler, cache_dir=cache) == local
    assert list((tmp_path / "cache").glob("*.parquet"))


def test_a_server_that_is_not_dask_fails_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener that accepts and never answers (an HTTP server, say) never completes Dask's
    handshake: a Client alone waits for ever; the probe gives up after the connect timeout."""
    import threading
    import time
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    held = []
    threading.Thread(target=lambda: held.append(srv.accept()), daemon=True).start()
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(cluster.ClusterError, match="no Dask scheduler answered .* within 1 s"):
            cluster.DaskPool(f"tcp://127.0.0.1:{srv.getsockname()[1]}")
    finally:
        srv.close()
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("address", ["bogus://x", "tcp://", "http://127.0.0.1:8786"])
def test_a_malformed_address_ends_at_once(fleet: Path, address: str) -> None:
    """No Client is made for it (a half-made Client stalls the exit for a minute)."""
    import subprocess
    import time
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "nodewarden", "events", str(fleet), "--no-cache", "--scheduler", address],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == exitcodes.USAGE
    assert f"cannot reach the Dask scheduler at {address}" in r.stderr
    assert "Exception ignored" not in r.stderr and r.stdout == ""
    assert time.monotonic() - t0 < 20

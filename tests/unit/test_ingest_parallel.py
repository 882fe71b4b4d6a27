"""Parallel ingest (--jobs) gives the sequential result exactly; the Parquet event cache
round-trips events, is reused while files are unchanged, and survives corruption."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import cli
from nodewarden.analysis import ingest as ingest_mod
from nodewarden.analysis.cache import EventCache
from nodewarden.analysis.ingest import ingest
from nodewarden.analysis.simulate import simulate
from nodewarden.events import FaultEvent

envneeds.module("pyarrow", "the event cache, the [analysis] extra")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated fleet plus copies across files: each node's kern.log.1 is also kept as
    syslog.1 (the same records through two files), and one truncated archive."""
    out = tmp_path_factory.mktemp("fleet")
    simulate(out, nodes=12, days=40, seed=3)
    copied = 0
    for node in sorted(p for p in out.iterdir() if p.is_dir()):
        src = node / "kern.log.1"
        if src.exists():
            shutil.copyfile(src, node / "syslog.1")
            copied += 1
    assert copied >= 5
    nodes = sorted(p for p in out.iterdir() if p.is_dir())
    data = gzip.compress(b"[   10.000000] NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus\n" * 50)
    (nodes[1] / "kern.log.99.gz").write_bytes(data[: len(data) // 2])
    return out


def _run(paths: list[str], **kw) -> tuple[list[str], dict]:
    errors: list[str] = []
    events, stats = ingest(paths, on_error=errors.append, **kw)
    lines = [e.to_json() for e in events]
    d = dict(vars(stats))
    assert d.pop("errors") == errors
    return lines, {**d, "errors": errors}


def test_jobs_give_the_sequential_result_exactly(fleet: Path) -> None:
    seq, seq_stats = _run([str(fleet)], jobs=1)
    par, par_stats = _run([str(fleet)], jobs=2)
    assert seq_stats["copies_dropped"] > 0  # the copies across files were de-duplicated
    assert len(seq_stats["errors"]) == 1 and "kern.log.99.gz" in seq_stats["errors"][0]
    assert par == seq
    assert par_stats == seq_stats


def test_cli_events_jobs_1_and_2_print_the_same_lines(fleet: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for jobs in ("1", "2"):
        rc = cli.main(["events", str(fleet), "--jobs", jobs, "--no-cache"])
        assert rc == 3  # the truncated archive
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0].count("\n") > 10


def test_several_inputs_and_stdin_keep_their_order(fleet: Path) -> None:
    import io
    nodes = sorted(str(p) for p in fleet.iterdir() if p.is_dir())
    paths = [nodes[2], "-", nodes[0], str(fleet / "missing"), nodes[2]]
    line = b"[   10.000000] NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus\n"
    seq = _run(paths, jobs=1, stdin=io.BytesIO(line))
    par = _run(paths, jobs=2, stdin=io.BytesIO(line))
    assert par == seq
    assert len(seq[1]["errors"]) == 1 and seq[1]["files"] > 3


def test_cache_round_trip_and_reuse(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    parsed = _run([str(fleet)], jobs=1)
    first = _run([str(fleet)], jobs=2, cache_dir=cache)
    assert first == parsed
    assert list(cache.glob("*.parquet"))

    def no_parsing(*a, **kw):
        raise AssertionError("parsed a file that is in the cache")

    # Unchanged files come from the cache (only the truncated archive, never cached, is read).
    calls: list[str] = []
    real = ingest_mod.iter_file

    def counting(f, **kw):
        calls.append(f.path.name)
        return real(f, **kw)

    monkeypatch.setattr(ingest_mod, "iter_file", counting)
    second = _run([str(fleet)], jobs=1, cache_dir=cache)
    assert second == parsed
    assert calls == ["kern.log.99.gz"]

    # A changed file is parsed again, and only it.
    node = sorted(p for p in fleet.iterdir() if p.is_dir())[3]
    target = next(p for p in sorted(node.iterdir()) if not p.name.endswith(".gz") and p.name != "syslog.1")
    saved = target.read_bytes()
    try:
        with open(target, "ab") as f:
            f.write(b"[99999.000000] NVRM: Xid (PCI:0000:07:00): 48, An uncorrectable double bit error\n")
        calls.clear()
        third = _run([str(fleet)], jobs=1, cache_dir=cache)
        assert sorted(calls) == sorted([target.name, "kern.log.99.gz"])
        assert len(third[0]) == len(parsed[0]) + 1
        assert third == _run([str(fleet)], jobs=1)
    finally:
        target.write_bytes(saved)


def test_other_parse_options_do_not_share_the_cache(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    node = str(sorted(p for p in fleet.iterdir() if p.is_dir())[0])
    utc = _run([node], cache_dir=cache)
    tokyo = _run([node], cache_dir=cache, tz="Asia/Tokyo")
    assert tokyo == _run([node], tz="Asia/Tokyo")
    assert _run([node], cache_dir=cache) == utc


def test_a_changed_parser_does_not_read_the_events_cached_by_the_old_one(tmp_path: Path) -> None:
    # Same version, other parser code (a source checkout, a patched install): other cache files.
    from nodewarden.analysis import cache as cache_mod

    a = cache_mod.EventCache(tmp_path).path_for(tmp_path, tmp_path / "kern.log")
    digest = cache_mod.parser_digest()
    assert len(digest) == 16
    cache_mod.parser_digest.cache_clear()
    try:
        real = cache_mod._PARSER_FILES
        cache_mod._PARSER_FILES = real[:-1]  # as if one of the files had other content
        b = cache_mod.EventCache(tmp_path).path_for(tmp_path, tmp_path / "kern.log")
        assert cache_mod.parser_digest() != digest and a != b
    finally:
        cache_mod._PARSER_FILES = real
        cache_mod.parser_digest.cache_clear()
    assert cache_mod.parser_digest() == digest


def test_corrupt_cache_is_ignored_and_rebuilt(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    node = str(sorted(p for p in fleet.iterdir() if p.is_dir())[0])
    parsed = _run([node])
    assert _run([node], cache_dir=cache) == parsed
    (path,) = cache.glob("*.parquet")
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    assert _run([node], cache_dir=cache) == parsed
    assert path.read_bytes() != good[: len(good) // 2]  # written again
    path.write_bytes(b"not parquet at all")
    assert _run([node], cache_dir=cache) == parsed


def test_cache_rebuilds_events_exactly(tmp_path: Path) -> None:
    import datetime as dt
    events = [
        FaultEvent(kind="xid", message="NVRM: Xid 79", raw="raw line\nsecond", code=79,
                   time=dt.datetime(2024, 3, 1, 12, 0, 0, 470068, tzinfo=dt.timezone.utc), time_kind="wall",
                   raw_time="Fri Mar  1 12:00:00 2024", monotonic=93297.027938, host="node07", device="0000:04:00.0",
                   category="hardware", attrs={"pci_bus_id": "0000:04:00.0", "pid": 2183, "process": "python",
                                               "channel": 3, "regs": [1, 2, {"a": None}], "ü": "é"}),
        FaultEvent(kind="cpu_ecc", message="mce", raw="mce", code=9),  # a code that is not an Xid
        FaultEvent(kind="gpu_ecc", message="", raw=""),
    ]
    cache = EventCache(tmp_path, tz="UTC")
    key = (str(tmp_path / "log"), 10, 123, "node07")
    path = tmp_path / "x.parquet"
    now = time.time_ns()
    racy = (str(tmp_path / "racy"), 5, now - 1000, None)  # modified as it was parsed: never trusted
    assert cache.store(path, [(key, events, 7, 1, now), ((str(tmp_path / "empty"), 0, 1, None), [], 3, 0, now),
                              (racy, events, 1, 0, now)])
    loaded = cache.load(path)
    got, records, unparsed, _ = loaded[key]
    assert (records, unparsed) == (7, 1)
    assert [e.to_json() for e in got] == [e.to_json() for e in events]
    assert got == events
    assert loaded[(str(tmp_path / "empty"), 0, 1, None)] == ([], 3, 0, now)
    assert key[:3] + (None,) not in loaded  # the same file read with another host hint
    assert racy not in loaded
    assert EventCache(tmp_path, tz="Asia/Tokyo").load(path) == {}


def test_cli_cache_flags(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    node = str(sorted(p for p in fleet.iterdir() if p.is_dir())[0])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cli.main(["events", node, "--no-cache"]) == 0
    assert not (tmp_path / "xdg").exists()
    assert cli.main(["events", node]) == 0
    assert list((tmp_path / "xdg" / "nodewarden").glob("*.parquet"))
    assert cli.main(["events", node, "--cache", str(tmp_path / "mine"), "--jobs", "1"]) == 0
    assert list((tmp_path / "mine").glob("*.parquet"))
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["events", node, "--jobs", "0"])


def test_relative_and_absolute_paths_keep_their_own_origin(fleet: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    node = sorted(p for p in fleet.iterdir() if p.is_dir())[0]
    absolute = _run([str(node)], cache_dir=cache)
    monkeypatch.chdir(fleet)
    relative = _run([node.name], cache_dir=cache)
    assert relative == _run([node.name])
    assert absolute == _run([str(node)], cache_dir=cache)


# -- inputs named in several ways ---------------------------------------------------------------

XID79 = "NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus."


def _hostless_nodes(root: Path) -> list[str]:
    """Three nodes' dmesg -T logs (no host in the lines) with the same fault at the same second."""
    out = []
    for n in ("node01", "node02", "node03"):
        d = root / n
        d.mkdir(parents=True)
        (d / "dmesg.log").write_text(f"[Fri Mar  1 10:00:00 2024] {XID79}\n")
        out.append(str(d))
    return out


def test_host_less_logs_of_different_nodes_are_not_copies(tmp_path: Path) -> None:
    nodes = _hostless_nodes(tmp_path)
    for paths in (nodes, [n + "/dmesg.log" for n in nodes], [str(tmp_path)]):
        lines, stats = _run(paths, jobs=1)
        assert (len(lines), stats["copies_dropped"]) == (3, 0), paths
    # two host-less files side by side are one log's copies
    (tmp_path / "node01" / "kern.log").write_text(f"[Fri Mar  1 10:00:00 2024] {XID79}\n")
    lines, stats = _run([str(tmp_path)], jobs=1)
    assert (len(lines), stats["copies_dropped"]) == (3, 1)


def test_a_file_reached_twice_is_read_once(tmp_path: Path) -> None:
    nodes = _hostless_nodes(tmp_path)
    once = _run([str(tmp_path)], jobs=1)
    for paths in ([str(tmp_path), str(tmp_path)], [str(tmp_path), nodes[0] + "/dmesg.log"],
                  [str(tmp_path), str(tmp_path) + "/"], [nodes[0], nodes[0] + "/dmesg.log", str(tmp_path)]):
        lines, stats = _run(paths, jobs=1)
        assert len(lines) == 3 and stats["files"] == 3 and stats["copies_dropped"] == 0, paths


def test_cache_keeps_the_host_the_path_gave(tmp_path: Path) -> None:
    nodes = _hostless_nodes(tmp_path / "fleet")
    cache = tmp_path / "cache"
    alone = _run([nodes[0] + "/dmesg.log"], cache_dir=cache)
    assert '"host":null' in alone[0][0]
    through_fleet = _run([str(tmp_path / "fleet")], cache_dir=cache)
    assert through_fleet == _run([str(tmp_path / "fleet")])  # as without a cache
    assert '"host":"node01"' in through_fleet[0][0]
    assert _run([nodes[0] + "/dmesg.log"], cache_dir=cache) == alone


def test_the_host_does_not_depend_on_argument_order(tmp_path: Path) -> None:
    nodes = _hostless_nodes(tmp_path)
    a = _run([nodes[1] + "/dmesg.log", str(tmp_path)], jobs=1)
    b = _run([str(tmp_path), nodes[1] + "/dmesg.log"], jobs=1)
    hosts = sorted(json.loads(line)["host"] for line in a[0])
    assert hosts == ["node01", "node02", "node03"]
    assert sorted(json.loads(line)["host"] for line in b[0]) == hosts


def test_stale_temporary_cache_files_are_removed(tmp_path: Path) -> None:
    import subprocess
    from nodewarden.analysis.cache import remove_stale_tmp
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f"abc.{dead.pid}.tmp.parquet").write_bytes(b"")
    (tmp_path / f"abc.{os.getpid()}.tmp.parquet").write_bytes(b"")  # a live writer's: kept
    (tmp_path / "abc.parquet").write_bytes(b"")
    assert remove_stale_tmp(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["abc.parquet", f"abc.{os.getpid()}.tmp.parquet"])

"""``events``/ingest stream: memory is bounded by the files being read, not by their events
(an Xid storm of a million lines in a 360 KB gzip once took 1.1 GB). The events and counts are
the same as when a file's events are collected whole."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest

from nodewarden.analysis import ingest as ingest_mod
from nodewarden.analysis.ingest import ingest
from nodewarden.logfiles import LogFile, drain, iter_file

N = 40_000
LINE = (b"[ 1234.567890] NVRM: Xid (PCI:0000:07:00): 13, pid=1234, name=python3, "
        b"Graphics Exception: ESR 0x50c730=0x1f\n")


def _peak_while_consuming(paths: list[str], **kw) -> tuple[int, int, object]:
    """(events, peak bytes traced while they were read, stats)."""
    tracemalloc.start()
    try:
        it, stats = ingest(paths, jobs=1, **kw)
        n = sum(1 for _ in it)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return n, peak, stats


@pytest.mark.parametrize("compress", [False, True], ids=["plain-streamed", "gzip-read-whole"])
def test_a_storm_is_read_in_bounded_memory(tmp_path: Path, compress: bool) -> None:
    p = tmp_path / ("storm.log.gz" if compress else "storm.log")
    data = LINE * N
    p.write_bytes(gzip.compress(data, 6) if compress else data)
    n, peak, stats = _peak_while_consuming([str(p)])
    assert n == N == stats.events and stats.errors == []
    # Held whole, 40k events took over 40 MB; streamed, what is held is the read buffers (and
    # for a small gzip its inflated text, here 4.2 MB).
    bound = len(data) + (12 << 20) if compress else 12 << 20
    assert peak < bound, f"peak {peak / 1e6:.1f} MB"


def test_a_file_with_more_events_than_the_cache_holds_is_streamed_and_not_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_mod, "CACHE_MAX_EVENTS", 1000)
    p = tmp_path / "storm.log"
    p.write_bytes(LINE * 5000)
    small = tmp_path / "other.log"
    small.write_bytes(LINE * 10)
    cache = tmp_path / "cache"
    it, stats = ingest([str(p)], jobs=1, cache_dir=cache)
    assert sum(1 for _ in it) == 5000
    assert list(cache.glob("*.parquet")) == []  # too many events to hold: not cached
    it, stats = ingest([str(small)], jobs=1, cache_dir=cache)
    assert sum(1 for _ in it) == 10
    assert len(list(cache.glob("*.parquet"))) == 1


def test_pool_tasks_past_their_event_bound_are_read_in_the_main_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for node in ("n1", "n2", "n3"):
        d = tmp_path / node
        d.mkdir()
        for k in range(3):
            (d / f"kern.log.{k}").write_bytes(LINE.replace(b"13,", f"{10 + k},".encode()) * 7)

    def run(jobs: int) -> tuple[list, int, int]:
        it, stats = ingest([str(tmp_path)], jobs=jobs, dedupe=False)
        return [(e.host, e.code, e.attrs.get("origin")) for e in it], stats.files, stats.records

    whole = run(1)
    monkeypatch.setattr(ingest_mod, "TASK_MAX_EVENTS", 8)  # each task returns its first 2 files
    assert run(2) == whole
    assert len(whole[0]) == 63 and whole[1] == 9


def test_iter_file_yields_before_the_file_ends_and_returns_counts(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_bytes(LINE * 3)
    it = iter_file(LogFile(p, "node01"))
    assert next(it).code == 13
    rest, (parser, error) = drain(it)
    assert len(rest) == 2 and error is None and parser.stats.records == 3

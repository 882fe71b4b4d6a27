"""Large plain files parsed by several processes, one byte range each, with the events of the
sequential parse, in file order.

A worker first reads WARMUP bytes before its range (the events found there are dropped) so
that its parser holds the state the sequential parser would have (a split Xid 79, an MCE
record, the 94/95 summary, the PCI->UUID map), and reads LOOKAHEAD bytes past its range so that
events started inside it complete. Each worker keeps exactly the events whose first record lies
in its range. Ranges are cut at record heads (a line start not indented).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import IO

from nodewarden.events import FaultEvent
from nodewarden.logfiles.paths import LogFile, printable
from nodewarden.logfiles.stream import FileEvents, RangeReader, events_from_stream
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

PARALLEL_MIN_BYTES = 128 << 20  # a plain file this large or larger is split (iter_file)
WARMUP = 4 << 20
LOOKAHEAD = 4 << 20


def _record_start_after(f: IO[bytes], offset: int, size: int) -> int:
    """The first record head at or after ``offset`` (a line start not indented)."""
    if offset <= 0:
        return 0
    f.seek(offset - 1)
    data = f.read(1 << 20)
    i = 0
    while True:
        nl = data.find(b"\n", i)
        if nl == -1 or nl + 1 >= len(data):
            return min(offset - 1 + len(data), size)
        c = data[nl + 1:nl + 2]
        if c not in (b" ", b"\t"):
            return offset - 1 + nl + 1
        i = nl + 1


def _parse_range(path: str, host: str | None, source: str, tz: str | dt.tzinfo | None,
                 boot_time: dt.datetime | None, warm: int, start: int, end: int, stop: int,
                 last: bool) -> tuple[list[FaultEvent], int, int]:
    """Worker: events whose first record is in [start, end) of ``path``, JSON pre-rendered."""
    mtime = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc)
    ctx = TimeContext.make(tz=tz, reference=mtime, boot_time=boot_time)
    parser = KernelLogParser(host=host, source=source, origin=printable(path))
    kept: list[FaultEvent] = []
    offsets: list[int] = []
    with open(path, "rb") as f:
        f.seek(warm)
        reader = RangeReader(f, stop - warm)
        for e in events_from_stream(reader, parser, ctx, base_offset=warm, offsets=offsets,  # type: ignore[arg-type]
                                    detect=False):
            if e.origin is not None and start <= e.origin < end:
                kept.append(e)
            elif e.origin is None and last:
                kept.append(e)
    # Rendered only now: a later record may still have folded into an event (Xid 94/95 channels).
    for e in kept:
        e.json_cache = e.to_json()
    unparsed = sum(1 for e in kept if e.kind == "unparsed")
    # Records of the warm-up and look-ahead belong to the neighbouring ranges: count ours only.
    return kept, sum(1 for o in offsets if start <= o < end), unparsed


def read_parallel(f: LogFile, size: int, workers: int, tz: str | dt.tzinfo | None,
                  boot_time: dt.datetime | None, source: str) -> FileEvents:
    """The events of a large plain file, parsed by ``workers`` processes, one byte range each,
    yielded in file order as the ranges complete. Returns ``(parser, None)``. Raises OSError
    when a worker dies."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    # Twice as many ranges as workers: the parent takes in the first ranges' events while the
    # workers parse the last ones.
    ranges = 2 * workers
    with open(f.path, "rb") as fh:
        cuts = [0] + [_record_start_after(fh, size * k // ranges, size) for k in range(1, ranges)] + [size]
    jobs = []
    for k in range(ranges):
        start, end = cuts[k], cuts[k + 1]
        if start >= end:
            continue
        warm = 0 if start == 0 else max(0, start - WARMUP)
        if warm:
            with open(f.path, "rb") as fh:
                warm = _record_start_after(fh, warm, size)
        stop = size if k == ranges - 1 else min(size, end + LOOKAHEAD)
        jobs.append((str(f.path), f.host, source, tz, boot_time, warm, start, end, stop, k == ranges - 1))
    parser = KernelLogParser(host=f.host, source=source, origin=printable(str(f.path)))
    from nodewarden.workers import init_worker, stop, wait
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"), initializer=init_worker,
                               initargs=(os.getpid(),))
    try:
        futures = [pool.submit(_parse_range, *job) for job in jobs]
        for fut in futures:
            kept, records, unparsed = wait(fut)
            yield from kept
            parser.stats.records += records
            parser.stats.unparsed += unparsed
            parser.stats.events += len(kept)
    except BrokenProcessPool as e:
        stop(pool)
        raise OSError(f"a process parsing it died (killed, or out of memory?): {e}") from None
    except BaseException:
        stop(pool)
        raise
    pool.shutdown(wait=True)
    return parser, None

"""Read many inputs (log files, directories of nodes' logs, stdin, agent journals) into one
stream of FaultEvents, with cross-file copies counted once and time/kind filters applied.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Generator, Iterable, Iterator

from nodewarden.collectors.kernel_log import InputError, LogFile, drain, events_from_stream, expand_paths, iter_file
from nodewarden import events as ev
from nodewarden.events import KINDS, FaultEvent
from nodewarden.parsing.dedupe import CopyDeduper
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser


@dataclasses.dataclass
class IngestStats:
    """What the inputs held: files read, records looked at, events, unparsed lines, errors."""

    files: int = 0
    records: int = 0
    events: int = 0
    unparsed: int = 0
    copies_dropped: int = 0
    journal_duplicates: int = 0  # agent-journal records seen before (same host, boot id, seq, kind, Xid)
    injected: int = 0  # events of records user space wrote (facility not kern), left out by Filters.kernel_only
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Filters:
    """Selection applied after parsing. Events without a time pass time filters only when no
    bound is set (an unknown time is never silently placed inside a window)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    kinds: frozenset[str] | None = None
    hosts: frozenset[str] | None = None
    # IB link down/up events up to this many seconds past ``until`` pass too: a flash cut that
    # begins inside the window may end after it (analyze derives the cuts, then drops them).
    link_grace_s: float = 0.0
    # Leave out events of records user space wrote into the kernel log (``attrs["injected"]``:
    # a syslog facility other than kern, e.g. ``echo ... > /dev/kmsg``); counted in stats.injected.
    kernel_only: bool = False

    def match(self, e: FaultEvent) -> bool:
        if self.kinds is not None and e.kind not in self.kinds:
            return False
        if self.hosts is not None and e.host not in self.hosts:
            return False
        if self.since is not None or self.until is not None:
            if e.time is None:
                return False
            if self.since is not None and e.time < self.since:
                return False
            if self.until is not None and e.time >= self.until:
                grace = self.link_grace_s if e.kind in (ev.IB_LINK_DOWN, ev.IB_LINK_UP) else 0.0
                if not grace or e.time >= self.until + dt.timedelta(seconds=grace):
                    return False
        return True


def _is_journal(path: Path) -> bool:
    """An agent event journal (JSON lines of FaultEvent.to_dict()), by name."""
    return path.name.startswith("events-") and path.name.endswith((".jsonl", ".jsonl.gz"))


def journal_record_key(e: FaultEvent) -> tuple[Any, ...] | None:
    """Identity of an agent-journal record of a kernel-log event: (host, boot id, seq of its first
    /dev/kmsg record, kind, Xid). The agent writes boot id and seq into every such record; two
    agents on one state directory, a restart that re-journaled, or a copy of the file give the
    same key, and the record counts once. Kind and Xid are part of it because one kernel record
    may begin more than one event. None (never de-duplicated) without a boot id or seq: polled
    events, and records of a boot whose id was unknown (sequence numbers restart every boot)."""
    seq, boot = e.attrs.get("seq"), e.attrs.get("boot_id")
    if boot is None or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return (e.host, str(boot), seq, e.kind, e.code if e.kind == ev.XID else None)


def _read_kmsg(f: LogFile, tz: str | None) -> tuple[list[FaultEvent], KernelLogParser]:
    """The records now in the kernel ring buffer (``nodewarden events /dev/kmsg``), not followed."""
    from nodewarden.collectors.kernel_log import KmsgReader, boot_time_now, kmsg_events
    import socket
    reader = KmsgReader(str(f.path))
    try:
        reader.open()
    except OSError as e:
        raise InputError(f"{f.path}: {e.strerror or e}") from e
    try:
        records = reader.read_available(limit=10_000_000)
    finally:
        reader.close()
    parser = KernelLogParser(host=socket.gethostname(), source="kmsg")
    ctx = TimeContext.make(tz=tz, boot_time=boot_time_now())
    events = list(kmsg_events(records, parser, ctx, reader.boot_id))
    events += parser.flush()
    return events, parser


_JOURNAL_STR = ("host", "message", "raw", "device", "category", "source", "time", "raw_time", "time_kind",
                "pci_bus_id", "process")
_JOURNAL_INT = ("xid", "code", "pid")
_ATTRS_STR = ("pci_bus_id", "process", "origin")


def _int_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31)


def _str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def journal_event(d: Any) -> FaultEvent | None:
    """The event of one agent-journal record (a decoded JSON line), or None when it is not one:
    not an object, an unknown kind, a field of the wrong type or out of range, a bad time."""
    if not isinstance(d, dict) or d.get("kind") not in KINDS:
        return None
    if not all(_str_or_none(d.get(k)) for k in _JOURNAL_STR) or not all(_int_or_none(d.get(k)) for k in _JOURNAL_INT):
        return None
    mono = d.get("monotonic")
    if mono is not None and (isinstance(mono, bool) or not isinstance(mono, (int, float)) or not math.isfinite(mono)):
        return None
    attrs = d.get("attrs") or {}
    if not isinstance(attrs, dict) or not all(_str_or_none(attrs.get(k)) for k in _ATTRS_STR) \
            or not _int_or_none(attrs.get("pid")):
        return None
    try:
        json.dumps(d, ensure_ascii=False).encode("utf-8")  # a lone surrogate ("\ud800") is no text
        return FaultEvent.from_dict(d)
    except (ValueError, KeyError, TypeError, OverflowError, UnicodeError):
        return None


def _journal_events(f: LogFile) -> tuple[list[FaultEvent], KernelLogParser]:
    """Events of an agent journal (JSON lines, maybe gzipped) and a parser holding only its
    counts (``stats.records`` lines, ``stats.unparsed`` lines that are no event: counted and
    skipped, never fatal), as a log read gives. Raises InputError, with the events read, when
    the file cannot be read to its end."""
    from nodewarden.collectors.kernel_log import open_log
    events: list[FaultEvent] = []
    counts = KernelLogParser(source="journal")  # nothing is fed to it: its stats are the journal's
    try:
        with io.BufferedReader(open_log(f.path)) as stream:
            for line in stream:
                line = line.strip()
                if not line:
                    continue
                counts.stats.records += 1
                try:
                    e = journal_event(json.loads(line))
                except ValueError:  # not JSON (a cut last line, garbage)
                    e = None
                if e is None:
                    counts.stats.unparsed += 1
                else:
                    events.append(e)
    except (OSError, EOFError) as e:
        raise InputError(f"{f.path}: cannot read past the part kept ({len(events)} event(s)): {e}",
                         events, counts) from e
    return events, counts


_Result = tuple  # (input_id, events, records | None, unparsed | None, error | None, counted)

GROUP_MAX_FILES = 256  # files of one directory read as one task (one cache file)


def _run_source(input_id: str, read: Callable[[], tuple[Iterable[FaultEvent], KernelLogParser | None]]) -> _Result:
    """Read one input; its error is returned (to be reported in input order), never raised."""
    try:
        events, parser = read()
        error = None
    except InputError as e:
        if not e.events:
            return (input_id, [], None, None, str(e), False)
        events, parser, error = e.events, e.parser, str(e)  # the readable part is kept
    except OSError as e:
        return (input_id, [], None, None, f"{input_id}: {e.strerror or e}", False)
    records = parser.stats.records if parser is not None else None
    unparsed = parser.stats.unparsed if parser is not None else None
    return (input_id, list(events), records, unparsed, error, True)


# A file's events read in this process are streamed: a generator yielding them and returning
# (records, unparsed, error, counted) once done. Results of a pool task are lists.
Streamed = Generator[FaultEvent, None, "tuple[int | None, int | None, str | None, bool]"]
CACHE_MAX_EVENTS = 50_000  # a group with more events than this is not cached (memory)
TASK_MAX_EVENTS = 50_000  # a pool task returns at most this many events; later files are read here


def _stream_file(f: LogFile, tz: str | None, boot_time: dt.datetime | None, split: bool,
                 done: Callable[[list[FaultEvent], tuple], None] | None = None) -> Streamed:
    """The events of one kernel-log file as they are parsed. ``done``, when given, gets the
    events (held for it, up to CACHE_MAX_EVENTS: past that, ``done`` is not called) and the
    outcome once the file is read to its end."""
    keep: list[FaultEvent] = []
    n = 0
    try:
        it = iter_file(f, tz=tz, boot_time=boot_time, split=split)
        while True:
            try:
                e = next(it)
            except StopIteration as stop:
                parser, error = stop.value
                break
            n += 1
            if done is not None:
                if n > CACHE_MAX_EVENTS:  # too many to hold for the cache: this file is not cached
                    keep, done = [], None
                else:
                    keep.append(e)
            yield e
    except InputError as e:  # the file could not be opened: nothing read
        return None, None, str(e), False
    except OSError as e:
        return None, None, f"{f.path}: {e.strerror or e}", False
    # A file that could be read in part counts as read; one whose error left no event does not.
    outcome = (parser.stats.records, parser.stats.unparsed, error, error is None or n > 0)
    if done is not None:
        done(keep, outcome)
    return outcome


def _group_results(files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                   cache_dir: str | None, split: bool = True) -> Iterator[_Result]:
    """Results of ``files`` in order, each to be consumed before the next is asked for; a
    kernel log not in the cache streams its events (see :data:`Streamed`). Kernel logs come from
    the cache when their size and mtime are unchanged; parsed ones are stored once the group is
    done, unless it held more than CACHE_MAX_EVENTS events. ``split``: a large plain file may be
    parsed by several local processes."""
    cache = cache_path = None
    stored: dict = {}
    entries: list = []
    if cache_dir is not None and any(not _is_journal(f.path) for f in files):
        from nodewarden.analysis.cache import EventCache
        cache = EventCache(cache_dir, tz=tz, boot_time=boot_time)
        cache_path = cache.path_for(files[0].path.parent, files[0].path)
        stored = cache.load(cache_path)
    parsed = [0, 0]  # files parsed into entries, events held for them

    def store(key: tuple, parsed_ns: int) -> Callable[[list[FaultEvent], tuple], None]:
        def done(events: list[FaultEvent], outcome: tuple) -> None:
            records, unparsed, error, _ = outcome
            parsed[1] += len(events)
            if error is None and parsed[1] <= CACHE_MAX_EVENTS:
                entries.append((key, events, records, unparsed, parsed_ns))
                parsed[0] += 1
        return done

    for f in files:
        input_id = str(f.path)
        if _is_journal(f.path):
            yield _run_source(input_id, lambda f=f: _journal_events(f))
            continue
        key = None
        if cache is not None:
            from nodewarden.analysis.cache import file_key
            try:
                key = file_key(f.path, f.host)
            except OSError:
                key = None
            hit = stored.get(key) if key is not None else None
            if hit is not None:
                events, records, unparsed, parsed_ns = hit
                entries.append((key, events, records, unparsed, parsed_ns))
                yield (input_id, events, records, unparsed, None, True)
                continue
        done = store(key, time.time_ns()) if key is not None and parsed[1] <= CACHE_MAX_EVENTS else None
        yield (input_id, _stream_file(f, tz, boot_time, split, done), None, None, None, True)
    if cache is not None and parsed[0] and parsed[1] <= CACHE_MAX_EVENTS:
        cache.store(cache_path, entries)


def _read_group(files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                cache_dir: str | None, split: bool = True, max_events: int | None = None) -> list[_Result]:
    """:func:`_group_results` as lists (a task of the process pool or the Dask cluster). Once
    ``max_events`` events are held, the files after that one come back with events None: the
    caller streams those itself."""
    out: list[_Result] = []
    n = 0
    for input_id, events, records, unparsed, error, counted in _group_results(files, tz, boot_time, cache_dir, split):
        if max_events is not None and n >= max_events:
            if not isinstance(events, list):
                events.close()
            out.append((input_id, None, None, None, None, True))
            continue
        if not isinstance(events, list):
            events, (records, unparsed, error, counted) = drain(events)
        n += len(events)
        out.append((input_id, events, records, unparsed, error, counted))
    return out


def _read_group_from(cwd: str, files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                     cache_dir: str | None, split: bool) -> list[_Result]:
    """:func:`_read_group` on a Dask worker, whose working directory is not ours: relative paths
    are opened from ``cwd``, and the results name every file as it was given (input ids, error
    messages, events' ``attrs["origin"]``), as a local run does."""
    given = {}
    opened = []
    for f in files:
        if f.path.is_absolute():
            opened.append(f)
            continue
        a = LogFile(Path(cwd) / f.path, f.host, f.stat)
        given[str(a.path)] = str(f.path)
        opened.append(a)
    results = _read_group(opened, tz, boot_time, cache_dir, split)
    if not given:
        return results
    out: list[_Result] = []
    for input_id, events, records, unparsed, error, counted in results:
        name = given.get(input_id)
        if name is not None:
            if error is not None:
                error = error.replace(input_id, name)
            for e in events:
                if e.attrs.get("origin") == input_id:
                    e.attrs["origin"] = name
                    e.json_cache = None
            input_id = name
        out.append((input_id, events, records, unparsed, error, counted))
    return out


def _is_kmsg(st: os.stat_result) -> bool:
    """The kernel's /dev/kmsg (character device 1:11, under any name): /dev/zero is endless."""
    return os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 11


def _stat(f: LogFile) -> os.stat_result | None:
    if f.stat is not None:
        return f.stat
    try:
        return os.stat(f.path)
    except OSError:
        return None  # the reader reports it


def _small_file(st: os.stat_result | None) -> bool:
    """Read in a pool worker: not a device, and below the size read_file splits across processes."""
    from nodewarden.collectors.kernel_log import PARALLEL_MIN_BYTES
    return st is None or (stat.S_ISREG(st.st_mode) and st.st_size < PARALLEL_MIN_BYTES)


def ingest(paths: Iterable[str], filters: Filters | None = None, tz: str | None = None,
           boot_time: dt.datetime | None = None, dedupe: bool = True, stdin: IO[bytes] | None = None,
           on_error: Callable[[str], None] | None = None, jobs: int | None = 1,
           cache_dir: str | os.PathLike[str] | None = None,
           scheduler: str | None = None,
           exclude: Iterable[str | os.PathLike[str]] = ()) -> tuple[Iterator[FaultEvent], IngestStats]:
    """Events from ``paths`` (``-`` is stdin) and the stats, filled as the iterator is consumed.

    Unreadable inputs are reported through ``on_error`` (and ``stats.errors``) and skipped; the
    other inputs are still read.

    ``jobs`` > 1 reads files in that many processes (None: all CPUs), a directory's files per
    task; results are taken in input order, so events, copies dropped and errors are the same as
    with ``jobs=1``. ``cache_dir`` keeps each file's parsed events (Parquet) for the next run.

    ``scheduler``: the address of a Dask scheduler (``tcp://host:8786``); the files are then
    parsed on its workers instead (``jobs`` is ignored), with the same results (see
    nodewarden.analysis.cluster). Raises ClusterError at once when it cannot be reached, and
    from the iterator when the cluster loses a task. Directories in ``exclude`` are not read
    (a report directory inside the logs' directory).
    """
    stats = IngestStats()
    filters = filters or Filters()
    paths = list(paths)
    jobs = (os.cpu_count() or 1) if jobs is None else max(1, int(jobs))
    cache = str(cache_dir) if cache_dir is not None else None
    dask = None
    if scheduler is not None:
        from nodewarden.analysis.cluster import DaskPool
        dask = DaskPool(scheduler)

    def report(msg: str) -> None:
        stats.errors.append(msg)
        if on_error is not None:
            on_error(msg)

    def gen() -> Iterator[FaultEvent]:
        file_paths = [p for p in paths if p != "-"]
        files, errors = expand_paths(file_paths, exclude=list(exclude))
        # Copies exist only across inputs: with one input there is nothing to de-duplicate.
        deduper = CopyDeduper() if dedupe and len(files) + ("-" in paths) > 1 else None
        journal_seen: set[tuple[Any, ...]] = set()  # journal_record_key of every journal record yielded
        for err in errors:
            report(str(err))
        # Units in input order: (True, files) for a pool task, (False, read) read here.
        units: list[tuple[bool, object]] = []
        if "-" in paths:
            def read_stdin() -> Streamed:
                parser = KernelLogParser(source="stdin")
                ctx = TimeContext.make(tz=tz, boot_time=boot_time)
                stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
                if stream is None:
                    return None, None, "-: standard input is closed", False
                try:
                    yield from events_from_stream(stream, parser, ctx)
                except (OSError, EOFError) as e:
                    return parser.stats.records, parser.stats.unparsed, f"-: {e}", True
                return parser.stats.records, parser.stats.unparsed, None, True
            units.append((False, lambda: [("-", read_stdin(), None, None, None, True)]))
        group: list[LogFile] = []

        def close_group() -> None:
            if group:
                units.append((True, list(group)))
                group.clear()

        for f in files:
            st = _stat(f)
            if st is not None and stat.S_ISCHR(st.st_mode) and not _is_kmsg(st):
                close_group()
                units.append((False, lambda f=f: [(str(f.path), [], None, None,
                                                  f"{f.path}: a device other than /dev/kmsg, not read", False)]))
            elif st is not None and stat.S_ISCHR(st.st_mode):
                close_group()
                units.append((False, lambda f=f: [_run_source(str(f.path), lambda: _read_kmsg(f, tz))]))
            elif not _small_file(st) and dask is None:
                close_group()  # read_file splits it across processes itself
                # --jobs 1: one process, a large file included
                units.append((False, lambda f=f: _group_results([f], tz, boot_time, cache, jobs > 1)))
            else:
                if group and (group[0].path.parent != f.path.parent or len(group) >= GROUP_MAX_FILES):
                    close_group()
                group.append(f)
        close_group()

        def select(events: Iterable[FaultEvent], input_id: str, scope: str) -> Generator[FaultEvent, None, Any]:
            """The events of one input that are no copy and pass the filters; returns what a
            streamed input returns."""
            from_journal = dedupe and input_id != "-" and _is_journal(Path(input_id))
            it = iter(events)
            while True:
                try:
                    e = next(it)
                except StopIteration as stop:
                    return stop.value
                if from_journal:  # an agent-journal record counts once (host, boot id, seq)
                    key = journal_record_key(e)
                    if key is not None:
                        if key in journal_seen:
                            stats.journal_duplicates += 1
                            continue
                        journal_seen.add(key)
                if deduper is not None and not deduper.accept(e, input_id, scope):
                    stats.copies_dropped += 1
                    continue
                if filters.kernel_only and e.attrs.get("injected"):
                    stats.injected += 1
                    continue
                if filters.match(e):
                    stats.events += 1
                    yield e

        pooled = [i for i, (in_pool, _) in enumerate(units) if in_pool]
        pool = dask
        if pool is None and jobs > 1 and len(pooled) > 1:
            from nodewarden.analysis.cluster import ProcessPool
            pool = ProcessPool(min(jobs, len(pooled)))
        split = dask is None  # a Dask worker parses a large file by itself
        # Tasks submitted ahead of the one consumed: bounds the events held.
        window = 4 * (pool.slots if pool is not None else 1)
        inflight: dict[int, object] = {}
        next_task = 0
        finished = False
        try:
            for i, (in_pool, unit) in enumerate(units):
                if in_pool and pool is not None:
                    while next_task < len(pooled) and (len(inflight) < window or pooled[next_task] <= i):
                        j = pooled[next_task]
                        if dask is not None:
                            inflight[j] = pool.submit(_read_group_from, os.getcwd(), units[j][1], tz, boot_time,
                                                      cache and os.path.abspath(cache), split)
                        else:
                            inflight[j] = pool.submit(_read_group, units[j][1], tz, boot_time, cache, split,
                                                      TASK_MAX_EVENTS)
                        next_task += 1
                    results = pool.result(inflight.pop(i))
                elif in_pool:
                    results = _group_results(unit, tz, boot_time, cache)  # type: ignore[arg-type]
                else:
                    results = unit()  # type: ignore[operator]
                for input_id, events, records, unparsed, error, counted in results:
                    if events is None:  # held back by a pool task at its event bound: read here
                        f = next(f for f in unit if str(f.path) == input_id)  # type: ignore[attr-defined]
                        events = _stream_file(f, tz, boot_time, False)
                    scope = input_id if input_id == "-" else os.path.dirname(os.path.abspath(input_id))
                    if isinstance(events, list):
                        yield from select(events, input_id, scope)
                    else:  # streamed: each event written out as it is parsed
                        records, unparsed, error, counted = yield from select(events, input_id, scope)
                    if error is not None:
                        report(error)
                    if not counted:
                        continue
                    stats.files += 1
                    if records is not None:
                        stats.records += records
                        stats.unparsed += unparsed
            finished = True
        finally:
            if pool is not None:
                pool.close(finished)
            if cache is not None and not finished and dask is None:
                from nodewarden.analysis.cache import remove_stale_tmp
                remove_stale_tmp(cache)  # what workers stopped mid-write left

    return gen(), stats

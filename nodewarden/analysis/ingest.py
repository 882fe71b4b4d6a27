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
from typing import IO, Any, Callable, Generator, Iterable, Iterator, NamedTuple

from nodewarden import events as ev
from nodewarden import kmsg
from nodewarden.events import KINDS, FaultEvent
from nodewarden.logfiles import (InputError, LogFile, drain, events_from_stream, expand_paths, iter_file, open_log,
                                 parallel)
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
    # nodewarden's own outputs found among the inputs and not read, one line each saying why
    # (expand_paths' ``left_out``: a simulated fleet's ground truth, a report directory)
    left_out: list[str] = dataclasses.field(default_factory=list)
    # The hosts whose inputs were read, with or without events (see :meth:`hosts`)
    path_hosts: dict[str | None, set[str]] = dataclasses.field(default_factory=dict)

    def hosts(self) -> set[str]:
        """The fleet's nodes: the hosts whose inputs were read, whether or not they logged an
        event. Each input read counts its events' hosts (copies and events outside the time or
        kind filters included); a host named only by its path (``logs/node07/...``,
        ``node07.log``) counts when none of its inputs' events named a host (it logged nothing),
        so that a path's name and the name its lines give are not counted twice. With a host
        filter (``Filters.hosts``) only the hosts it selects."""
        out: set[str] = set()
        for path_host, named in self.path_hosts.items():
            out |= named
            if path_host is not None and not named:
                out.add(path_host)
        return out


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
    import socket
    reader = kmsg.KmsgReader(str(f.path))
    try:
        reader.open()
    except OSError as e:
        raise InputError(f"{f.path}: {e.strerror or e}") from e
    try:
        records = reader.read_available(limit=10_000_000)
    finally:
        reader.close()
    parser = KernelLogParser(host=socket.gethostname(), source="kmsg")
    ctx = TimeContext.make(tz=tz, boot_time=kmsg.boot_wall_time())
    events = list(kmsg.kmsg_events(records, parser, ctx, reader.boot_id))
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


class Outcome(NamedTuple):
    """How the reading of one input ended."""

    records: int | None  # candidate records looked at; None: not known (nothing was read)
    unparsed: int | None  # of those, the ones no parser read
    error: str | None  # why the input could not be read (to its end), naming it; None: it could
    counted: bool  # the input counts as read (stats.files): read whole, or in part with events


# A file's events read in this process are streamed: a generator yielding them and returning
# its Outcome once done. Results of a pool task are lists.
Streamed = Generator[FaultEvent, None, Outcome]


class Result(NamedTuple):
    """One input's events, in input order. ``events``: a list (parsed by a pool task, or taken
    from the cache) with its ``outcome``; a :data:`Streamed` generator (``outcome`` None: the
    generator returns it); or None, with ``outcome`` None: a pool task stopped at its event
    bound before this file, which the caller then reads itself."""

    input_id: str
    events: list[FaultEvent] | Streamed | None
    outcome: Outcome | None


GROUP_MAX_FILES = 256  # files of one directory read as one task (one cache file)


def _run_source(input_id: str, read: Callable[[], tuple[Iterable[FaultEvent], KernelLogParser | None]]) -> Result:
    """Read one input; its error is returned (to be reported in input order), never raised."""
    try:
        events, parser = read()
        error = None
    except InputError as e:
        if not e.events:
            return Result(input_id, [], Outcome(None, None, str(e), False))
        events, parser, error = e.events, e.parser, str(e)  # the readable part is kept
    except OSError as e:
        return Result(input_id, [], Outcome(None, None, f"{input_id}: {e.strerror or e}", False))
    records = parser.stats.records if parser is not None else None
    unparsed = parser.stats.unparsed if parser is not None else None
    return Result(input_id, list(events), Outcome(records, unparsed, error, True))


CACHE_MAX_EVENTS = 50_000  # a group with more events than this is not cached (memory)
TASK_MAX_EVENTS = 50_000  # a pool task returns at most this many events; later files are read here


def _stream_file(f: LogFile, tz: str | None, boot_time: dt.datetime | None, split: bool,
                 done: Callable[[list[FaultEvent], Outcome], None] | None = None) -> Streamed:
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
        return Outcome(None, None, str(e), False)
    except OSError as e:
        return Outcome(None, None, f"{f.path}: {e.strerror or e}", False)
    # A file that could be read in part counts as read; one whose error left no event does not.
    outcome = Outcome(parser.stats.records, parser.stats.unparsed, error, error is None or n > 0)
    if done is not None:
        done(keep, outcome)
    return outcome


class _GroupCache:
    """The event cache of one group of files (one Parquet file, :mod:`nodewarden.analysis.cache`):
    the files it holds unchanged (same size and mtime), and the files parsed now, stored once
    the group is done unless the group held more than CACHE_MAX_EVENTS events."""

    def __init__(self, files: list[LogFile], tz: str | None, boot_time: dt.datetime | None, cache_dir: str) -> None:
        from nodewarden.analysis.cache import EventCache
        self.cache = EventCache(cache_dir, tz=tz, boot_time=boot_time)
        self.path = self.cache.path_for(files[0].path.parent, files[0].path)
        self.stored = self.cache.load(self.path)
        self.entries: list = []  # EventCache.store's entries: the group's files, in order
        self.files_parsed = 0
        self.events_held = 0  # events of the files parsed now

    def lookup(self, f: LogFile) -> tuple[tuple | None, Result | None]:
        """(the file's cache key, None when it cannot be stat'ed; its result when the cache has it)."""
        from nodewarden.analysis.cache import file_key
        try:
            key = file_key(f.path, f.host)
        except OSError:
            return None, None
        hit = self.stored.get(key)
        if hit is None:
            return key, None
        events, records, unparsed, parsed_ns = hit
        self.entries.append((key, events, records, unparsed, parsed_ns))
        return key, Result(str(f.path), events, Outcome(records, unparsed, None, True))

    def recorder(self, key: tuple | None) -> Callable[[list[FaultEvent], Outcome], None] | None:
        """What :func:`_stream_file` calls with a file's events once parsed (None: the file is not
        to be cached: no key, or the group holds too many events already)."""
        if key is None or self.events_held > CACHE_MAX_EVENTS:
            return None
        parsed_ns = time.time_ns()  # before the parse: a file changed meanwhile is parsed again

        def done(events: list[FaultEvent], outcome: Outcome) -> None:
            self.events_held += len(events)
            if outcome.error is None and self.events_held <= CACHE_MAX_EVENTS:
                self.entries.append((key, events, outcome.records, outcome.unparsed, parsed_ns))
                self.files_parsed += 1
        return done

    def save(self) -> None:
        """Store the group when files were parsed and its events are few enough to hold."""
        if self.files_parsed and self.events_held <= CACHE_MAX_EVENTS:
            self.cache.store(self.path, self.entries)


def _group_results(files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                   cache_dir: str | None, split: bool = True) -> Iterator[Result]:
    """Results of ``files`` in order, each to be consumed before the next is asked for; a
    kernel log not in the cache streams its events (see :data:`Streamed`). Kernel logs come from
    the cache when their size and mtime are unchanged; parsed ones are stored once the group is
    done, unless it held more than CACHE_MAX_EVENTS events. ``split``: a large plain file may be
    parsed by several local processes."""
    cache = None
    if cache_dir is not None and any(not _is_journal(f.path) for f in files):
        cache = _GroupCache(files, tz, boot_time, cache_dir)
    for f in files:
        if _is_journal(f.path):
            yield _run_source(str(f.path), lambda f=f: _journal_events(f))
            continue
        done = None
        if cache is not None:
            key, hit = cache.lookup(f)
            if hit is not None:
                yield hit
                continue
            done = cache.recorder(key)
        yield Result(str(f.path), _stream_file(f, tz, boot_time, split, done), None)
    if cache is not None:
        cache.save()


def _read_group(files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                cache_dir: str | None, split: bool = True, max_events: int | None = None) -> list[Result]:
    """:func:`_group_results` as lists (a task of the process pool or the Dask cluster). Once
    ``max_events`` events are held, the files after that one come back with events None: the
    caller streams those itself."""
    out: list[Result] = []
    n = 0
    for r in _group_results(files, tz, boot_time, cache_dir, split):
        if max_events is not None and n >= max_events:
            if not isinstance(r.events, list):
                r.events.close()  # type: ignore[union-attr]
            out.append(Result(r.input_id, None, None))
            continue
        if not isinstance(r.events, list):
            events, outcome = drain(r.events)  # type: ignore[arg-type]
            r = Result(r.input_id, events, outcome)
        n += len(r.events)  # type: ignore[arg-type]
        out.append(r)
    return out


def _read_group_from(cwd: str, files: list[LogFile], tz: str | None, boot_time: dt.datetime | None,
                     cache_dir: str | None, split: bool) -> list[Result]:
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
    return [_named_as_given(r, given[r.input_id]) if r.input_id in given else r for r in results]


def _named_as_given(r: Result, name: str) -> Result:
    """``r`` (read whole) with its input id ``name``, in its error message and in the origin of
    its events that name the opened path."""
    outcome = r.outcome
    if outcome is not None and outcome.error is not None:
        outcome = outcome._replace(error=outcome.error.replace(r.input_id, name))
    for e in r.events:  # type: ignore[union-attr]
        if e.attrs.get("origin") == r.input_id:
            e.attrs["origin"] = name
            e.json_cache = None
    return Result(name, r.events, outcome)


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
    return st is None or (stat.S_ISREG(st.st_mode) and st.st_size < parallel.PARALLEL_MIN_BYTES)


def _stdin_events(stdin: IO[bytes] | None, tz: str | None, boot_time: dt.datetime | None) -> Streamed:
    """The events of standard input (``stdin``, else the process's), as they are parsed."""
    parser = KernelLogParser(source="stdin")
    ctx = TimeContext.make(tz=tz, boot_time=boot_time)
    stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
    if stream is None:
        return Outcome(None, None, "-: standard input is closed", False)
    try:
        yield from events_from_stream(stream, parser, ctx)
    except (OSError, EOFError) as e:
        return Outcome(parser.stats.records, parser.stats.unparsed, f"-: {e}", True)
    return Outcome(parser.stats.records, parser.stats.unparsed, None, True)


@dataclasses.dataclass
class _Unit:
    """One step of a run, in input order: ``files``, a group of one directory's files (a pool
    task's, or read here when there is no pool), or ``read``: an input read here, giving its
    results."""

    files: list[LogFile] = dataclasses.field(default_factory=list)
    read: Callable[[], Iterable[Result]] | None = None

    @property
    def pooled(self) -> bool:
        return self.read is None


class ReadProgress(NamedTuple):
    """Where an :func:`ingest` run stands once one more input is taken, in input order (with a
    pool or a Dask cluster: as its results come back to this process)."""

    input_id: str  # the input just taken (a path, or - for stdin)
    host: str | None  # the host its lines belong to when they do not say (from the path)
    inputs_done: int
    inputs: int  # inputs of the run: files found under the paths, and stdin
    bytes_done: int  # size on disk of the inputs taken (a compressed file's compressed size)
    bytes_total: int  # of every regular file of the run (stdin and devices count 0)
    events: int  # events selected so far (stats.events)


def _not_read(input_id: str, why: str) -> list[Result]:
    return [Result(input_id, [], Outcome(None, None, why, False))]


class _Tasks:
    """The pooled units' tasks, submitted in input order ahead of the one consumed: up to four
    per pool slot in flight, which bounds the events held."""

    def __init__(self, pool: Any, units: list[_Unit], submit: Callable[[list[LogFile]], Any]) -> None:
        self.pool = pool
        self.units = units
        self.submit = submit
        self.pooled = [i for i, u in enumerate(units) if u.pooled]
        self.window = 4 * pool.slots
        self.inflight: dict[int, Any] = {}
        self.next = 0  # index into pooled of the next task to submit

    def result(self, i: int) -> list[Result]:
        """The results of unit ``i`` (pooled), once its task is done; later tasks submitted first."""
        while self.next < len(self.pooled) and (len(self.inflight) < self.window or self.pooled[self.next] <= i):
            j = self.pooled[self.next]
            self.inflight[j] = self.submit(self.units[j].files)
            self.next += 1
        return self.pool.result(self.inflight.pop(i))


class _Run:
    """One :func:`ingest` run: its options, the stats it fills, and the copies seen so far."""

    def __init__(self, filters: Filters, tz: str | None, boot_time: dt.datetime | None, dedupe: bool,
                 stdin: IO[bytes] | None, on_error: Callable[[str], None] | None, jobs: int,
                 cache: str | None, dask: Any, progress: Callable[[ReadProgress], None] | None = None) -> None:
        self.stats = IngestStats()
        self.progress = progress
        self.sizes: dict[str, tuple[int, str | None]] = {}  # input id: (bytes on disk, host)
        self.bytes_total = self.bytes_done = self.inputs_done = self.inputs = 0
        self.filters, self.tz, self.boot_time, self.dedupe = filters, tz, boot_time, dedupe
        self.stdin, self.on_error, self.jobs, self.cache, self.dask = stdin, on_error, jobs, cache, dask
        self.deduper: CopyDeduper | None = None
        self.host_of: dict[str, str | None] = {}  # input id: the host its path names (expand_paths)
        self.journal_seen: set[tuple[Any, ...]] = set()  # journal_record_key of every journal record yielded

    def report(self, msg: str) -> None:
        self.stats.errors.append(msg)
        if self.on_error is not None:
            self.on_error(msg)

    def events(self, paths: list[str], exclude: Iterable[str | os.PathLike[str]]) -> Iterator[FaultEvent]:
        """The selected events of ``paths`` in input order; a pool's tasks run ahead."""
        files, errors = expand_paths([p for p in paths if p != "-"], exclude=list(exclude),
                                     left_out=self.stats.left_out)
        self.host_of = {str(f.path): f.host for f in files}  # input id: the host its path names
        # Copies exist only across inputs: with one input there is nothing to de-duplicate.
        self.deduper = CopyDeduper() if self.dedupe and len(files) + ("-" in paths) > 1 else None
        self.inputs = len(files) + ("-" in paths)
        for err in errors:
            self.report(str(err))
        units = self._plan(paths, files)
        if self.progress is not None:
            for f in files:
                st = _stat(f)
                self.sizes[str(f.path)] = (st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0, f.host)
            self.bytes_total = sum(size for size, _ in self.sizes.values())
        pool = self._pool(units)
        tasks = _Tasks(pool, units, self._submitter(pool)) if pool is not None else None
        finished = False
        try:
            for i, unit in enumerate(units):
                if unit.read is not None:
                    results: Iterable[Result] = unit.read()
                elif tasks is not None:
                    results = tasks.result(i)
                else:
                    results = _group_results(unit.files, self.tz, self.boot_time, self.cache)
                for r in results:
                    yield from self._take(r, unit)
            finished = True
        finally:
            if pool is not None:
                pool.close(finished)
            if self.cache is not None and not finished and self.dask is None:
                from nodewarden.analysis.cache import remove_stale_tmp
                remove_stale_tmp(self.cache)  # what workers stopped mid-write left

    def _plan(self, paths: list[str], files: list[LogFile]) -> list[_Unit]:
        """The units of a run: stdin first, then the files in order, a directory's small files
        grouped (up to GROUP_MAX_FILES), devices and large files each a unit read here."""
        tz, boot_time, cache = self.tz, self.boot_time, self.cache
        units: list[_Unit] = []
        if "-" in paths:
            units.append(_Unit(read=lambda: [Result("-", _stdin_events(self.stdin, tz, boot_time), None)]))
        group: list[LogFile] = []

        def close_group() -> None:
            if group:
                units.append(_Unit(files=list(group)))
                group.clear()

        for f in files:
            st = _stat(f)
            if st is not None and stat.S_ISCHR(st.st_mode) and not _is_kmsg(st):
                close_group()
                units.append(_Unit(read=lambda f=f: _not_read(str(f.path), f"{f.path}: a device other than /dev/kmsg, not read")))
            elif st is not None and stat.S_ISCHR(st.st_mode):
                close_group()
                units.append(_Unit(read=lambda f=f: [_run_source(str(f.path), lambda: _read_kmsg(f, tz))]))
            elif not _small_file(st) and self.dask is None:
                close_group()  # read_file splits it across processes itself
                # --jobs 1: one process, a large file included
                units.append(_Unit(read=lambda f=f: _group_results([f], tz, boot_time, cache, self.jobs > 1)))
            else:
                if group and (group[0].path.parent != f.path.parent or len(group) >= GROUP_MAX_FILES):
                    close_group()
                group.append(f)
        close_group()
        return units

    def _pool(self, units: list[_Unit]) -> Any:
        """The Dask cluster; else a process pool when ``jobs`` > 1 and more than one unit is pooled."""
        if self.dask is not None:
            return self.dask
        pooled = sum(1 for u in units if u.pooled)
        if self.jobs > 1 and pooled > 1:
            from nodewarden.analysis.cluster import ProcessPool
            return ProcessPool(min(self.jobs, pooled))
        return None

    def _submitter(self, pool: Any) -> Callable[[list[LogFile]], Any]:
        """How a group becomes a task: on Dask, read from our working directory, each large file
        parsed by the worker itself; locally, bounded by TASK_MAX_EVENTS."""
        tz, boot_time, cache = self.tz, self.boot_time, self.cache
        if self.dask is not None:
            return lambda files: pool.submit(_read_group_from, os.getcwd(), files, tz, boot_time,
                                             cache and os.path.abspath(cache), False)
        return lambda files: pool.submit(_read_group, files, tz, boot_time, cache, True, TASK_MAX_EVENTS)

    def _take(self, r: Result, unit: _Unit) -> Iterator[FaultEvent]:
        """The selected events of one result; then its error reported and its counts added."""
        events, outcome = r.events, r.outcome
        if events is None:  # held back by a pool task at its event bound: read here
            f = next(f for f in unit.files if str(f.path) == r.input_id)
            events = _stream_file(f, self.tz, self.boot_time, False)
        named: set[str] = set()  # the hosts its events name
        if isinstance(events, list):
            yield from self._select(events, r.input_id, named)
        else:  # streamed: each event written out as it is parsed
            outcome = yield from self._select(events, r.input_id, named)
        assert outcome is not None
        if outcome.error is not None:
            self.report(outcome.error)
        if outcome.counted:
            self.stats.files += 1
            path_host, selected = self.host_of.get(r.input_id), self.filters.hosts
            if selected is not None:
                named &= selected
                path_host = path_host if path_host in selected else None
            self.stats.path_hosts.setdefault(path_host, set()).update(named)
            if outcome.records is not None:
                self.stats.records += outcome.records
                self.stats.unparsed += outcome.unparsed  # type: ignore[operator]
        if self.progress is not None:
            size, host = self.sizes.get(r.input_id, (0, None))
            self.inputs_done += 1
            self.bytes_done += size
            self.progress(ReadProgress(r.input_id, host, self.inputs_done, self.inputs,
                                       self.bytes_done, self.bytes_total, self.stats.events))

    def _select(self, events: Iterable[FaultEvent], input_id: str,
                named: set[str]) -> Generator[FaultEvent, None, Any]:
        """The events of one input that are no copy and pass the filters; returns what a
        streamed input returns. The hosts of all its events (selected or not) go into ``named``."""
        scope = input_id if input_id == "-" else os.path.dirname(os.path.abspath(input_id))
        from_journal = self.dedupe and input_id != "-" and _is_journal(Path(input_id))
        stats = self.stats
        it = iter(events)
        while True:
            try:
                e = next(it)
            except StopIteration as stop:
                return stop.value
            if e.host is not None:
                named.add(e.host)
            if from_journal and self._journal_repeat(e):
                continue
            if self.deduper is not None and not self.deduper.accept(e, input_id, scope):
                stats.copies_dropped += 1
                continue
            if self.filters.kernel_only and e.attrs.get("injected"):
                stats.injected += 1
                continue
            if self.filters.match(e):
                stats.events += 1
                yield e

    def _journal_repeat(self, e: FaultEvent) -> bool:
        """True (counted in stats.journal_duplicates) when an agent-journal record was yielded
        before (same host, boot id, seq, kind, Xid)."""
        key = journal_record_key(e)
        if key is None:
            return False
        if key in self.journal_seen:
            self.stats.journal_duplicates += 1
            return True
        self.journal_seen.add(key)
        return False


def ingest(paths: Iterable[str], filters: Filters | None = None, tz: str | None = None,
           boot_time: dt.datetime | None = None, dedupe: bool = True, stdin: IO[bytes] | None = None,
           on_error: Callable[[str], None] | None = None, jobs: int | None = 1,
           cache_dir: str | os.PathLike[str] | None = None,
           scheduler: str | None = None,
           exclude: Iterable[str | os.PathLike[str]] = (),
           progress: Callable[[ReadProgress], None] | None = None) -> tuple[Iterator[FaultEvent], IngestStats]:
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

    ``progress``, when given, is called with a :class:`ReadProgress` each time an input's events
    have been taken (the events of the runs with and without it are the same).
    """
    paths = list(paths)
    jobs = (os.cpu_count() or 1) if jobs is None else max(1, int(jobs))
    cache = str(cache_dir) if cache_dir is not None else None
    dask = None
    if scheduler is not None:
        from nodewarden.analysis.cluster import DaskPool
        dask = DaskPool(scheduler)
    run = _Run(filters or Filters(), tz, boot_time, dedupe, stdin, on_error, jobs, cache, dask, progress)
    return run.events(paths, exclude), run.stats

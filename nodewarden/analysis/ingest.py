"""Read many inputs (log files, directories of nodes' logs, stdin, agent journals) into one
stream of FaultEvents, with cross-file copies counted once and time/kind filters applied.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import stat
import sys
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator

from nodewarden.collectors.kernel_log import InputError, LogFile, events_from_stream, expand_paths, read_file
from nodewarden.events import FaultEvent
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
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Filters:
    """Selection applied after parsing. Events without a time pass time filters only when no
    bound is set (an unknown time is never silently placed inside a window)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    kinds: frozenset[str] | None = None
    hosts: frozenset[str] | None = None

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
                return False
        return True


def _is_journal(path: Path) -> bool:
    """An agent event journal (JSON lines of FaultEvent.to_dict()), by name."""
    return path.name.startswith("events-") and path.name.endswith((".jsonl", ".jsonl.gz"))


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


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


def _journal_events(f: LogFile) -> Iterator[FaultEvent]:
    from nodewarden.collectors.kernel_log import open_log
    with open_log(f.path) as stream:
        for n, line in enumerate(stream, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield FaultEvent.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue


def ingest(paths: Iterable[str], filters: Filters | None = None, tz: str | None = None,
           boot_time: dt.datetime | None = None, dedupe: bool = True, stdin: IO[bytes] | None = None,
           on_error: Callable[[str], None] | None = None) -> tuple[Iterator[FaultEvent], IngestStats]:
    """Events from ``paths`` (``-`` is stdin) and the stats, filled as the iterator is consumed.

    Unreadable inputs are reported through ``on_error`` (and ``stats.errors``) and skipped; the
    other inputs are still read.
    """
    stats = IngestStats()
    filters = filters or Filters()
    paths = list(paths)

    def report(msg: str) -> None:
        stats.errors.append(msg)
        if on_error is not None:
            on_error(msg)

    def gen() -> Iterator[FaultEvent]:
        file_paths = [p for p in paths if p != "-"]
        files, errors = expand_paths(file_paths)
        # Copies exist only across inputs: with one input there is nothing to de-duplicate.
        deduper = CopyDeduper() if dedupe and len(files) + ("-" in paths) > 1 else None
        for err in errors:
            report(str(err))
        sources: list[tuple[str, Callable[[], tuple[Iterable[FaultEvent], KernelLogParser | None]]]] = []
        if "-" in paths:
            def read_stdin() -> tuple[Iterable[FaultEvent], KernelLogParser]:
                parser = KernelLogParser(source="stdin")
                ctx = TimeContext.make(tz=tz, boot_time=boot_time)
                stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
                if stream is None:
                    raise InputError("-: standard input is closed")
                return list(events_from_stream(stream, parser, ctx)), parser
            sources.append(("-", read_stdin))
        for f in files:
            if _is_char_device(f.path):
                sources.append((str(f.path), lambda f=f: _read_kmsg(f, tz)))
            elif _is_journal(f.path):
                sources.append((str(f.path), lambda f=f: (list(_journal_events(f)), None)))
            else:
                sources.append((str(f.path), lambda f=f: read_file(f, tz=tz, boot_time=boot_time)))
        for input_id, read in sources:
            try:
                events, parser = read()
            except InputError as e:
                report(str(e))
                if not e.events:
                    continue
                events, parser = e.events, e.parser  # the readable part is kept
            except OSError as e:
                report(f"{input_id}: {e.strerror or e}")
                continue
            stats.files += 1
            if parser is not None:
                stats.records += parser.stats.records
                stats.unparsed += parser.stats.unparsed
            for e in events:
                if deduper is not None and not deduper.accept(e, input_id):
                    stats.copies_dropped += 1
                    continue
                if filters.match(e):
                    stats.events += 1
                    yield e

    return gen(), stats

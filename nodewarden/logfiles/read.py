"""One log file's events: a small file read whole, a larger one streamed, a large plain one
split across processes (:mod:`nodewarden.logfiles.parallel`); compressed and re-encoded text
read through :mod:`~nodewarden.logfiles.compressed` and :mod:`~nodewarden.logfiles.encoding`.
"""

from __future__ import annotations

import datetime as dt
import io
import lzma
import os
import stat
from pathlib import Path
from typing import IO

from nodewarden.events import FaultEvent
from nodewarden.logfiles import parallel
from nodewarden.logfiles.compressed import GzipText, compression, corrupt_member, gunzip, open_log
from nodewarden.logfiles.encoding import DETECT_BYTES, text_encoding, to_utf8
from nodewarden.logfiles.paths import InputError, LogFile, printable
from nodewarden.logfiles.stream import FileEvents, RangeReader, drain, events_from_bytes, events_from_stream
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

COMPRESSED_READ = 8 << 10  # bytes decompressed per read: what a truncated archive can lose
# A fleet's logs are mostly small rotated files: a plain file up to SMALL_FILE bytes, or a gzip
# archive up to SMALL_FILE compressed bytes that expands to at most SMALL_TEXT, is read whole.
SMALL_FILE = 1 << 20
SMALL_TEXT = 64 << 20

_CPUS = os.cpu_count() or 1


def _read_small(path: Path) -> tuple[bytes, str | None] | None:
    """(text, error) of a small plain or gzip file read whole; None when it must be streamed
    (bzip2/xz, or an archive that expands past SMALL_TEXT). Raises InputError."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()  # all of it, also what was appended since the stat
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from e
    kind = compression(data[:6])
    if kind == "gzip":
        whole = gunzip(data, SMALL_TEXT)
        return None if whole is None else (to_utf8(whole[0]), whole[1])
    return (to_utf8(data), None) if kind is None else None


def read_file(f: LogFile, tz: str | dt.tzinfo | None = None, boot_time: dt.datetime | None = None,
              source: str = "file", split: bool = True) -> tuple[list[FaultEvent], KernelLogParser]:
    """All events of one file (:func:`iter_file` collected). Raises InputError naming the file
    when it cannot be read, with the events of the part kept."""
    events, (parser, error) = drain(iter_file(f, tz=tz, boot_time=boot_time, source=source, split=split))
    if error is not None:
        raise InputError(error, events, parser)
    return events, parser


def iter_file(f: LogFile, tz: str | dt.tzinfo | None = None, boot_time: dt.datetime | None = None,
              source: str = "file", split: bool = True) -> FileEvents:
    """The events of one file, yielded as they are parsed: memory is bounded by the file's read
    buffers (a small file's text, a chunk of a large one; a byte range's events when
    ``split``), never by its events. Returns ``(parser, error)``: the parser's counts, and None
    or the message (naming the file) of why the file could not be read to its end, all events
    of the part kept having been yielded. Raises InputError before the first event when the
    file cannot be opened at all.

    A gzip member that fails its integrity check gives no events (see :class:`GzipText`): a
    small archive is inflated whole before parsing; a larger one is inflated once first to
    find where its sound text ends. ``split``: a plain file of PARALLEL_MIN_BYTES or more is
    parsed by several processes, one byte range each (False: by this one);
    see :mod:`nodewarden.logfiles.parallel`."""
    try:
        st = os.stat(f.path)
    except OSError as e:
        raise InputError(f"{f.path}: {e.strerror or e}") from e
    mtime = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
    ctx = TimeContext.make(tz=tz, reference=mtime, boot_time=boot_time)
    parser = KernelLogParser(host=f.host, source=source, origin=printable(str(f.path)))
    if stat.S_ISREG(st.st_mode) and st.st_size <= SMALL_FILE:
        whole = _read_small(f.path)
        if whole is not None:
            return (yield from _text_events(f, whole, parser, ctx))
    stream = open_log(f.path)
    plain = isinstance(stream, io.BufferedReader)
    if plain and text_encoding(stream.peek(DETECT_BYTES)[:DETECT_BYTES]) is not None:  # type: ignore[attr-defined]
        plain = False  # UTF-16/32: decoded as read (events_from_stream), by this process
    if split and plain:
        size = os.fstat(stream.fileno()).st_size
        workers = _range_workers(size)
        if workers > 1:
            stream.close()
            try:
                return (yield from parallel.read_parallel(f, size, workers, tz, boot_time, source))
            except OSError as e:
                return parser, f"{f.path}: cannot read: {e}"
    return (yield from _stream_events(f, stream, plain, parser, ctx))


def _range_workers(size: int) -> int:
    """Processes to parse a plain file of ``size`` bytes by byte ranges: at most 8 and the CPUs,
    one per half PARALLEL_MIN_BYTES; 0 below PARALLEL_MIN_BYTES or with one CPU (not split)."""
    workers = min(_CPUS, 8)
    if workers <= 1 or size < parallel.PARALLEL_MIN_BYTES:
        return 0
    return min(workers, size // (parallel.PARALLEL_MIN_BYTES // 2))


def _text_events(f: LogFile, whole: tuple[bytes, str | None], parser: KernelLogParser,
                 ctx: TimeContext) -> FileEvents:
    """The events of a file's text read whole (:func:`_read_small`); returns as :func:`iter_file`."""
    text, error = whole
    n = 0
    for e in events_from_bytes(text, parser, ctx):
        n += 1
        yield e
    if error is not None:
        return parser, f"{f.path}: cannot read past the part kept ({n} event(s)): {error}"
    return parser, None


def _stream_events(f: LogFile, stream: IO[bytes], plain: bool, parser: KernelLogParser,
                   ctx: TimeContext) -> FileEvents:
    """The events of an opened log read in chunks by this process (``plain``: uncompressed
    UTF-8); returns as :func:`iter_file`. A gzip archive with a corrupt member is first inflated
    once (:func:`~nodewarden.logfiles.compressed.corrupt_member`) and read up to that member."""
    n = 0
    gz = stream if isinstance(stream, GzipText) else None
    cut: tuple[int, str] | None = None
    if gz is not None:
        cut = corrupt_member(f.path)
        if cut is not None:  # parse only the text before the corrupt member
            stream.close()
            stream = RangeReader(open_log(f.path), cut[0])  # type: ignore[assignment]
    try:
        with stream:  # type: ignore[attr-defined]
            # bzip2/xz input is read in small steps: a truncated file then loses at most one step.
            small = None if plain or gz is not None else COMPRESSED_READ
            for e in events_from_stream(stream, parser, ctx, max_read=small, flush=False):  # type: ignore[arg-type]
                n += 1
                yield e
    except (OSError, EOFError, lzma.LZMAError) as e:
        reason: str | None = str(e)
    else:
        reason = cut[1] if cut is not None else None
    for e in parser.flush():
        n += 1
        yield e
    if reason is None:
        return parser, None
    return parser, f"{f.path}: cannot read past the part kept ({n} event(s)): {reason}"

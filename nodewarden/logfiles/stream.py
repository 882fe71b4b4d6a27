"""Log text to events: a stream read in chunks of whole records, or a whole text in memory.

A chunk ends at a record's end, never inside one: the last record head of a chunk is carried
over to the next, since its continuation lines (indented, as dmesg prints a multi-line record)
may follow there. Candidate records are found by a byte scan (:mod:`nodewarden.parsing.scan`)
before any line is decoded, so a log of noise is mostly skipped unread.
"""

from __future__ import annotations

import lzma
from typing import IO, Any, Generator, Iterator

from nodewarden.events import FaultEvent
from nodewarden.logfiles.encoding import Utf8Text
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.scan import candidate_records, split_carry
from nodewarden.parsing.stream import KernelLogParser, group_records, join_record

CHUNK = 1 << 20  # bytes read at a time: small enough that the scan reads it from cache
MAX_CARRY = 64 << 20  # a "record" longer than this is cut (a file of indented lines only)

# The events of one file, yielded as parsed; returns (the parser's counts, None or why the file
# could not be read to its end).
FileEvents = Generator[FaultEvent, None, "tuple[KernelLogParser, str | None]"]


def iter_regions(stream: IO[bytes], chunk: int = CHUNK, max_read: int | None = None) -> Iterator[tuple[bytearray, int]]:
    """(buf, hi) pairs: ``buf[:hi]`` holds whole records. ``buf`` is reused between pairs (read
    it before asking for the next). The last record head of each chunk is carried over to the
    next chunk, since continuation lines may follow it there."""
    buf = bytearray(chunk)
    filled = 0
    while True:
        view = memoryview(buf)
        eof = False
        try:
            while filled < len(buf):
                end = len(buf) if max_read is None else min(len(buf), filled + max_read)
                n = stream.readinto(view[filled:end])  # type: ignore[attr-defined]
                if not n:
                    eof = True
                    break
                filled += n
        except (OSError, EOFError, lzma.LZMAError):
            # A truncated or corrupt compressed file: hand over the whole lines read, then fail.
            # The line the fault cut is not one ("Xid (PCI:0000:07:00): 7" of an Xid 79).
            view.release()
            whole = buf.rfind(b"\n", 0, filled) + 1
            if whole:
                yield buf, whole
            raise
        view.release()
        if eof:
            if filled:
                yield buf, filled
            return
        cut = split_carry(buf, filled)
        if cut == 0:
            if len(buf) >= MAX_CARRY:  # one giant "record": cut it rather than grow forever
                yield buf, filled
                filled = 0
            else:  # a record longer than the buffer: grow and read on
                buf.extend(bytes(len(buf)))
            continue
        yield buf, cut
        carry = filled - cut
        buf[:carry] = buf[cut:filled]
        filled = carry


def _buffer_records(buf: bytes | bytearray, hi: int, ctx: TimeContext, base_offset: int) -> Iterator:
    """The parsed envelopes of the candidate records in ``buf[:hi]`` (whole records), one at a
    time (a whole file's text holds millions in a storm): consume them before ``buf`` changes."""
    for start, end in candidate_records(buf, hi=hi):
        # One rule for the ends of lines and records (stream.group_records): a CR, NEL or U+2028
        # inside the scanned range ends a line too.
        for group in group_records([buf[start:end].decode("utf-8", "replace")]):
            rec = join_record(group, ctx)
            if rec is not None:
                rec.offset = base_offset + start
                yield rec


def events_from_stream(stream: IO[bytes], parser: KernelLogParser, ctx: TimeContext,
                       base_offset: int = 0, flush: bool = True, max_read: int | None = None,
                       offsets: list[int] | None = None, detect: bool = True) -> Iterator[FaultEvent]:
    """Events from a binary stream of log text, scanning for candidate records first.

    Invalid UTF-8 is replaced (never fatal); the parser's stats count records and unparsed lines.
    ``base_offset`` is the stream's position in its file (records carry absolute offsets);
    ``offsets``, when given, receives the offset of every candidate record fed to the parser.
    Raises OSError/EOFError from the stream (truncated gzip, I/O error) to the caller.
    ``detect``: the stream is the start of a text, whose first bytes tell its encoding (UTF-16 and
    UTF-32 are decoded, see :class:`Utf8Text`); False for a range from the middle of a file.
    """
    pos = base_offset
    if detect:
        stream = Utf8Text(stream)  # type: ignore[assignment]
    for buf, hi in iter_regions(stream, max_read=max_read):
        # Every record of a region is parsed before the next read reuses the buffer.
        base, pos = pos, pos + hi
        for rec in _buffer_records(buf, hi, ctx, base):
            if offsets is not None:
                offsets.append(rec.offset)
            yield from parser.feed(rec)
    if flush:
        yield from parser.flush()



def events_from_bytes(data: bytes | bytearray, parser: KernelLogParser, ctx: TimeContext) -> Iterator[FaultEvent]:
    """Events of a whole log text held in memory, then the parser's held events."""
    for rec in _buffer_records(data, len(data), ctx, 0):
        yield from parser.feed(rec)
    yield from parser.flush()



class RangeReader:
    """``readinto`` over ``f`` limited to ``remaining`` bytes (a file object for iter_regions);
    as a context manager it closes ``f``."""

    def __init__(self, f: IO[bytes], remaining: int) -> None:
        self.f, self.remaining = f, remaining

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()

    def read(self, size: int = -1) -> bytes:
        n = self.remaining if size is None or size < 0 else min(size, self.remaining)
        data = self.f.read(n) if n > 0 else b""
        self.remaining -= len(data)
        return data

    def readinto(self, b: memoryview) -> int:
        n = min(len(b), self.remaining)
        if n <= 0:
            return 0
        k = self.f.readinto(b[:n])  # type: ignore[attr-defined]
        self.remaining -= k or 0
        return k or 0



def drain(it: Generator[FaultEvent, None, Any]) -> tuple[list[FaultEvent], Any]:
    """All the events a generator yields, and what it returns."""
    out: list[FaultEvent] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration as stop:
            return out, stop.value

"""Kernel-log collector: the live ``/dev/kmsg`` and log files (plain, gzip, bzip2, xz; whole
rotated sets; directories of many nodes' logs; stdin), turned into FaultEvents.

Sources are parameters: the kmsg path, the boot-id path and the file paths are passed in, so
tests point the same code at real files and at the real ``/dev/kmsg``.
"""

from __future__ import annotations

import bz2
import dataclasses
import datetime as dt
import errno
import io
import logging
import lzma
import os
import re
import select
import stat
import time
import zlib
from pathlib import Path
from typing import IO, Any, Generator, Iterable, Iterator

from nodewarden.events import FaultEvent
from nodewarden.parsing.envelope import TimeContext, ascii_uint, parse_kmsg_record
from nodewarden.parsing.scan import candidate_records, split_carry
from nodewarden.parsing.stream import KernelLogParser, group_records, join_record

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes read at a time: small enough that the scan reads it from cache
COMPRESSED_READ = 8 << 10  # bytes decompressed per read: what a truncated archive can lose
MAX_CARRY = 64 << 20  # a "record" longer than this is cut (a file of indented lines only)
# A fleet's logs are mostly small rotated files: a plain file up to SMALL_FILE bytes, or a gzip
# archive up to SMALL_FILE compressed bytes that expands to at most SMALL_TEXT, is read whole.
SMALL_FILE = 1 << 20
SMALL_TEXT = 64 << 20
GUNZIP_STEP = 64 << 10  # compressed bytes inflated per call

# Base names of kernel/system logs: a file so named tells nothing about its host.
_LOG_BASENAMES = ("kern", "syslog", "messages", "dmesg", "journal", "kmsg", "daemon", "warn", "all", "log")
_ROTATED = re.compile(r"^(?P<base>.+?)(?:[.-](?P<num>\d{1,4}|\d{8}))?(?P<comp>\.(?:gz|bz2|xz))?$")


class InputError(Exception):
    """An input could not be read (message names it); other inputs go on.

    ``events`` holds what was read before the error (a truncated .gz keeps its readable part);
    ``parser`` the parser's counts for it.
    """

    def __init__(self, message: str, events: list[FaultEvent] | None = None,
                 parser: KernelLogParser | None = None) -> None:
        super().__init__(message)
        self.events = events or []
        self.parser = parser


@dataclasses.dataclass(frozen=True)
class LogFile:
    """One input file and the host its lines belong to when the lines do not say; ``stat`` is
    its ``os.stat`` when the directory walk took it (None: not taken, or the stat failed)."""

    path: Path
    host: str | None
    stat: os.stat_result | None = dataclasses.field(default=None, compare=False, repr=False)


def printable(name: str) -> str:
    """A file name as text that any UTF-8 output takes: bytes of a name that are not UTF-8 (held
    as surrogates by Python) are written as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _host_from_name(name: str) -> str | None:
    stem = name.split(".")[0]
    if not stem or stem.lower() in _LOG_BASENAMES or stem.lower().startswith(_LOG_BASENAMES):
        return None
    return stem


def _rotation_key(name: str) -> tuple[str, int, int, str]:
    """Oldest first within a rotated set: kern.log.3.gz, kern.log.2.gz, kern.log.1, kern.log;
    with dateext, messages-20240101.gz, messages-20240108, messages. The live file comes last."""
    m = _ROTATED.match(name)
    base = m.group("base") if m else name
    num = m.group("num") if m else None
    if num is None:
        return base, 1, 0, name
    if len(num) == 8:  # dateext: a later date is newer
        return base, 0, int(num), name
    return base, 0, -int(num), name  # numbered: a higher number is older


def _walk(top: str, errors: list[InputError], skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, list[os.DirEntry]]]:
    """(directory, its files) depth first, sub-directories in name order, hidden entries skipped.
    Symbolic links to directories are followed (a fleet directory of links to each node's logs),
    each real directory walked once: a second link to it, or a link back up, is not entered."""
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            st = os.stat(d)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as e:
            errors.append(InputError(f"{d}: cannot list directory: {e.strerror or e}"))
            continue
        files, subdirs = [], []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir and skip and os.path.realpath(e.path) in skip:
                continue
            (subdirs if is_dir else files).append(e.path if is_dir else e)
        yield d, files
        stack.extend(sorted(subdirs, reverse=True))


def expand_paths(paths: Iterable[str | os.PathLike[str]],
                 exclude: Iterable[str | os.PathLike[str]] = ()) -> tuple[list[LogFile], list[InputError]]:
    """Files to read, in order, with their host hints; plus the inputs that cannot be read.

    A directory is walked recursively; a file directly under a given directory is named after
    its host (``node07.log`` -> node07) unless it has a log's base name (``kern.log``); a file in a
    sub-directory takes the sub-directory's name (``logs/node07/kern.log`` -> node07). Directories
    are read depth first in name order, a directory's files before its sub-directories; rotated
    sets oldest first; symbolic links to directories are followed, each directory read once.
    Hidden files and the Parquet cache are skipped; FIFOs, sockets and devices found in a
    directory are reported and skipped (given by name, ``/dev/kmsg`` or a pipe is read). A file
    reached twice (given twice, inside a directory also given, or through a link) is read once.
    Directories in ``exclude`` (analyze's own --out) are not walked into.
    """
    files: list[LogFile] = []
    errors: list[InputError] = []
    seen: dict[tuple[int, int], int] = {}  # (device, inode) of the files taken -> index: each read once

    def first_time(st: os.stat_result | None, host: str | None = None) -> bool:
        if st is None:
            return True
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            i = seen[ident]
            if files[i].host is None and host is not None:  # reached again where its path names the host
                files[i] = dataclasses.replace(files[i], host=host)
            return False
        seen[ident] = len(files)
        return True

    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            top = os.fspath(p)
            for dirpath, entries in _walk(top, errors, frozenset(os.path.realpath(x) for x in exclude)):
                rel = os.path.relpath(dirpath, top)
                sub = None if rel == os.curdir else rel.split(os.sep, 1)[0]
                entries.sort(key=lambda e: _rotation_key(e.name))
                for e in entries:
                    name = e.name
                    if name.endswith((".parquet", ".json.tmp")):
                        continue
                    try:
                        st = e.stat()
                    except OSError:
                        st = None  # reported when read
                    if st is not None and not stat.S_ISREG(st.st_mode):
                        # A FIFO would block the read for ever; a device or socket is no log file.
                        errors.append(InputError(f"{e.path}: not a regular file (FIFO, socket or device), skipped"))
                        continue
                    host = sub if sub is not None else _host_from_name(name)
                    host = printable(host) if host is not None else None
                    if first_time(st, host):
                        files.append(LogFile(Path(e.path), host, st))
        elif p.exists() or p.is_symlink():
            try:
                st = os.stat(p)
            except OSError:
                st = None
            if first_time(st if st is not None and stat.S_ISREG(st.st_mode) else None):
                files.append(LogFile(p, None))
        else:
            errors.append(InputError(f"{p}: no such file or directory"))
    return files, errors


class GzipText(io.RawIOBase):
    """The text of a gzip stream of any number of members (zero padding between and after them
    allowed, as gzip(1) and the gzip module allow), inflated as it is read.

    ``member_start`` is the text offset at which the member being read began: when a member
    turns out corrupt (bad deflate data, CRC or length mismatch, found at the latest at its
    end), the text from there on may hold inflated damage and the caller drops it. Raises
    EOFError when the stream ends inside a member (truncated: the text read is sound) and
    OSError when a member is corrupt or garbage follows the last one."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._d = zlib.decompressobj(wbits=31)
        self._fed = False  # the current member has had input
        self._in = b""  # compressed bytes read, not yet inflated
        self._out = b""  # inflated text not yet returned
        self._done = False
        self._error: BaseException | None = None
        self._pos = 0  # text returned so far
        self.member_start = 0
        self.members = 1

    def readable(self) -> bool:
        return True

    def tell_text(self) -> int:
        """Text bytes inflated so far (returned or not)."""
        return self._pos + len(self._out)

    @property
    def error(self) -> BaseException | None:
        """The error that ended the text (EOFError: truncated; OSError: corrupt), once reached."""
        return self._error

    def read_text(self, limit: int) -> bytes | None:
        """All the text (up to an error, kept in :attr:`error`); None past ``limit`` bytes."""
        parts = []
        while not self._done:
            try:
                self._step()
            except (OSError, EOFError) as e:
                self._error, self._done = e, True
            if self._out:
                parts.append(self._out)
                self._pos += len(self._out)
                self._out = b""
                if self._pos > limit:
                    return None
        return b"".join(parts)

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._out and not self._done:
            try:
                self._step()
            except (OSError, EOFError) as e:  # raised once the text before it has been read
                self._error, self._done = e, True
        if not self._out and self._error is not None:
            raise self._error
        k = min(len(b), len(self._out))
        b[:k] = self._out[:k]
        self._out = self._out[k:]
        self._pos += k
        return k

    def _step(self) -> None:
        if not self._in:
            self._in = self._raw.read(GUNZIP_STEP)
            if not self._in:
                if self._d.eof or not self._fed:
                    self._done = True
                    return
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
        if self._d.eof:  # between members: zero padding, the next member, or garbage
            self._in = self._in.lstrip(b"\x00")
            if not self._in:
                return
            if len(self._in) < 2:
                self._in += self._raw.read(1)
            if self._in[:2] != b"\x1f\x8b":
                self.member_start = self._pos + len(self._out)  # every member so far is sound
                raise OSError("not a gzip member after the last one (trailing garbage)")
            self._d, self._fed = zlib.decompressobj(wbits=31), False
            self.member_start = self._pos + len(self._out)
            self.members += 1
        try:
            self._out += self._d.decompress(self._in)
        except zlib.error as e:
            raise OSError(f"corrupt gzip data in member {self.members} ({e})") from None
        self._fed = True
        self._in = self._d.unused_data if self._d.eof else b""

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def compression(magic: bytes) -> str | None:
    """``gzip``, ``bzip2`` or ``xz`` from a file's first 6 bytes; None for plain text."""
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic[:3] == b"BZh":
        return "bzip2"
    if magic[:6] == b"\xfd7zXZ\x00":
        return "xz"
    return None


# Text encodings other than UTF-8 that a log file is found in: Windows tools and PowerShell
# redirection write UTF-16 (LE, with a byte-order mark); UTF-32 is rare. Read right, never as 0 events.
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
DETECT_BYTES = 4096  # bytes of a text's start looked at to tell its encoding


def text_encoding(head: bytes) -> tuple[str, int] | None:
    """(codec, bytes of byte-order mark) when the text starting with ``head`` is UTF-16 or UTF-32;
    None for UTF-8 (or any ASCII-compatible text, or binary). A BOM decides; without one, NUL
    bytes at every other (UTF-16) or three of every four (UTF-32) positions, and not elsewhere,
    do: at least 90% of those positions NUL and at most 10% of the others, over 16 bytes or more
    (a log padded with NUL blocks after a crash has NULs everywhere: it stays UTF-8)."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    sample = head[:DETECT_BYTES]
    n = len(sample) - len(sample) % 4
    if n < 16 or sample.count(0) * 3 < n:
        return None
    sample = sample[:n]
    zero = [sample[i::4].count(0) / (n // 4) for i in range(4)]
    hi, lo = 0.9, 0.1
    if zero[0] <= lo and min(zero[1:]) >= hi:
        return "utf-32-le", 0
    if zero[3] <= lo and max(zero[:3]) >= hi and min(zero[:3]) >= hi:
        return "utf-32-be", 0
    if max(zero[0], zero[2]) <= lo and min(zero[1], zero[3]) >= hi:
        return "utf-16-le", 0
    if max(zero[1], zero[3]) <= lo and min(zero[0], zero[2]) >= hi:
        return "utf-16-be", 0
    return None


def to_utf8(data: bytes) -> bytes:
    """``data`` as UTF-8: UTF-16/UTF-32 text (:func:`text_encoding`) decoded (bad units become
    U+FFFD) and re-encoded, a UTF-8 byte-order mark dropped; other data as it is."""
    enc = text_encoding(data[:DETECT_BYTES])
    if enc is not None:
        codec, bom = enc
        return data[bom:].decode(codec, "replace").encode("utf-8", "replace")
    if data[:3] == b"\xef\xbb\xbf":
        return data[3:]
    return data


class Utf8Text(io.RawIOBase):
    """UTF-8 text of a binary stream whose encoding is told by its first bytes (see
    :func:`text_encoding`): UTF-16/UTF-32 is decoded as it is read, anything else passed on as
    read (one call more per read). ``encoding`` is the codec found (None: passed on)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._started = False
        self._dec = None
        self._out = b""
        self._eof = False
        self._error: BaseException | None = None  # raised once the text before it is handed over
        self.encoding: str | None = None

    def readable(self) -> bool:
        return True

    def _start(self) -> None:
        self._started = True
        head = b""
        while len(head) < DETECT_BYTES:
            try:
                part = self._raw.read(DETECT_BYTES - len(head))
            except (OSError, EOFError, lzma.LZMAError) as e:  # truncated/corrupt: keep what came
                self._error = e
                break
            if not part:
                break
            head += part
        enc = text_encoding(head)
        if enc is None:
            self._out = head
            return
        codec, bom = enc
        self.encoding = codec
        import codecs
        self._dec = codecs.getincrementaldecoder(codec)("replace")
        self._out = self._dec.decode(head[bom:]).encode("utf-8", "replace")

    def readinto(self, b) -> int:  # type: ignore[override]
        if not self._started:
            self._start()
        if not self._out and self._error is not None:
            e, self._error = self._error, None
            raise e
        if not self._out and self._dec is None:
            return self._raw.readinto(b)  # type: ignore[attr-defined]
        while not self._out and not self._eof:
            data = self._raw.read(max(len(b), 4))
            if not data:
                self._eof = True
                self._out = self._dec.decode(b"", final=True).encode("utf-8", "replace")
            else:
                self._out = self._dec.decode(data).encode("utf-8", "replace")
        k = min(len(b), len(self._out))
        b[:k] = self._out[:k]
        self._out = self._out[k:]
        return k

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def open_log(path: Path) -> IO[bytes]:
    """Open a log for binary reading, decompressing gzip/bzip2/xz by their magic bytes (gzip as
    an unbuffered GzipText: wrap it in io.BufferedReader to read lines).

    Raises InputError (naming the path) when it cannot be opened.
    """
    try:
        f = open(path, "rb")
        magic = f.read(6)
        f.seek(0)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from e
    kind = compression(magic)
    if kind == "gzip":
        return GzipText(f)  # unbuffered: all the text before a fault is handed over before the error
    if kind == "bzip2":
        return bz2.BZ2File(f)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(f)  # type: ignore[return-value]
    return f


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


def gunzip(data: bytes, limit: int = SMALL_TEXT) -> tuple[bytes, str | None] | None:
    """The text of a whole gzip file (every member), and why its end could not be read (None
    when it all could). None when the text would exceed ``limit`` bytes (the caller streams it).

    A truncated archive keeps every whole line it inflated (the line the cut ends inside is not
    kept: ``...): 7`` of an Xid 79 line is no Xid 7). A member that
    fails its integrity check (corrupt deflate data, CRC or length mismatch) gives no text at
    all, since inflate turns damage into plausible-looking lines up to the point where zlib
    notices; the members before it, each checked by its own CRC, are kept (see GzipText)."""
    r = GzipText(io.BytesIO(data))
    text = r.read_text(limit)
    if text is None:
        return None
    if r.error is None:
        return text, None
    if isinstance(r.error, EOFError):  # whole lines only: the cut line is not one
        return text[:text.rfind(b"\n") + 1], str(r.error)
    return text[:r.member_start], drop_note(r.error, len(text) - r.member_start)


def drop_note(e: BaseException, dropped: int) -> str:
    """Why a corrupt member's text was dropped (for the message naming the file)."""
    if "trailing garbage" in str(e):
        return str(e)
    return f"{e}; its {dropped} bytes of text inflated before the error are not used"


# ---------------------------------------------------------------------------------------------
# Large plain files are parsed by several processes, one byte range each. A worker first reads
# WARMUP bytes before its range (the events found there are dropped) so that its parser holds
# the state the sequential parser would have (a split Xid 79, an MCE record, the 94/95 summary,
# the PCI->UUID map), and reads LOOKAHEAD bytes past its range so that events started inside
# it complete. Each worker keeps exactly the events whose first record lies in its range.
PARALLEL_MIN_BYTES = 128 << 20
WARMUP = 4 << 20
LOOKAHEAD = 4 << 20


class _RangeReader:
    """``readinto`` over ``f`` limited to ``remaining`` bytes (a file object for iter_regions);
    as a context manager it closes ``f``."""

    def __init__(self, f: IO[bytes], remaining: int) -> None:
        self.f, self.remaining = f, remaining

    def __enter__(self) -> _RangeReader:
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
        reader = _RangeReader(f, stop - warm)
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


def _read_parallel(f: LogFile, size: int, workers: int, tz: str | dt.tzinfo | None,
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
    from nodewarden.workers import ignore_sigint, stop, wait
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"), initializer=ignore_sigint)
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


FileEvents = Generator[FaultEvent, None, "tuple[KernelLogParser, str | None]"]


def drain(it: Generator[FaultEvent, None, Any]) -> tuple[list[FaultEvent], Any]:
    """All the events a generator yields, and what it returns."""
    out: list[FaultEvent] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration as stop:
            return out, stop.value


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
    parsed by several processes, one byte range each (False: by this one)."""
    try:
        st = os.stat(f.path)
    except OSError as e:
        raise InputError(f"{f.path}: {e.strerror or e}") from e
    mtime = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
    ctx = TimeContext.make(tz=tz, reference=mtime, boot_time=boot_time)
    parser = KernelLogParser(host=f.host, source=source, origin=printable(str(f.path)))
    n = 0
    if stat.S_ISREG(st.st_mode) and st.st_size <= SMALL_FILE:
        whole = _read_small(f.path)
        if whole is not None:
            text, error = whole
            for e in events_from_bytes(text, parser, ctx):
                n += 1
                yield e
            if error is not None:
                return parser, f"{f.path}: cannot read past the part kept ({n} event(s)): {error}"
            return parser, None
    stream = open_log(f.path)
    workers = min(_CPUS, 8)
    gz = stream if isinstance(stream, GzipText) else None
    plain = isinstance(stream, io.BufferedReader)
    if plain and text_encoding(stream.peek(DETECT_BYTES)[:DETECT_BYTES]) is not None:  # type: ignore[attr-defined]
        plain = False  # UTF-16/32: decoded as read (events_from_stream), by this process
    if split and plain and workers > 1:
        size = os.fstat(stream.fileno()).st_size
        if size >= PARALLEL_MIN_BYTES:
            stream.close()
            try:
                return (yield from _read_parallel(f, size, min(workers, size // (PARALLEL_MIN_BYTES // 2)),
                                                  tz, boot_time, source))
            except OSError as e:
                return parser, f"{f.path}: cannot read: {e}"
    cut: tuple[int, str] | None = None
    if gz is not None:
        cut = _gzip_corrupt_member(f.path)
        if cut is not None:  # parse only the text before the corrupt member
            stream.close()
            stream = _RangeReader(open_log(f.path), cut[0])  # type: ignore[assignment]
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


def events_from_bytes(data: bytes | bytearray, parser: KernelLogParser, ctx: TimeContext) -> Iterator[FaultEvent]:
    """Events of a whole log text held in memory, then the parser's held events."""
    for rec in _buffer_records(data, len(data), ctx, 0):
        yield from parser.feed(rec)
    yield from parser.flush()


def _gzip_corrupt_member(path: Path) -> tuple[int, str] | None:
    """Inflate a gzip file, keeping none of its text: (text offset where the first corrupt
    member begins, why its text is not used), or None when no member is corrupt (a truncated
    last member is not: its text is sound). Constant memory; raises InputError when the file
    cannot be opened."""
    r = GzipText(open_log_raw(path))
    buf = bytearray(CHUNK)
    try:
        with r:
            while r.readinto(buf):
                pass
    except EOFError:
        return None
    except OSError as e:
        return r.member_start, drop_note(e, r.tell_text() - r.member_start)
    return None


def open_log_raw(path: Path) -> IO[bytes]:
    """``path`` opened for binary reading, as it is on disk. Raises InputError naming it."""
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from e


# ---------------------------------------------------------------------------------------------
# /dev/kmsg

def read_boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str | None:
    """The kernel's boot id (a UUID, new at each boot), or None when unreadable."""
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def boot_time_now() -> dt.datetime:
    """Wall time of boot: now minus CLOCK_BOOTTIME (the clock /dev/kmsg stamps follow)."""
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=time.clock_gettime(time.CLOCK_BOOTTIME))


@dataclasses.dataclass
class KmsgCursor:
    """Position in the kernel ring buffer: the last record handled, per boot."""

    boot_id: str | None
    seq: int


class KmsgReader:
    """Reads records from ``/dev/kmsg`` (Documentation/ABI/testing/dev-kmsg).

    Each ``read()`` on the device returns one record. A reader that falls behind the ring
    buffer gets EPIPE once: the overrun is counted and logged and reading resumes at the
    oldest record still there. Records at or before ``cursor.seq`` of the same boot are skipped,
    so a restarted reader neither loses nor repeats a record still in the buffer.
    """

    def __init__(self, path: str = "/dev/kmsg", boot_id_path: str = "/proc/sys/kernel/random/boot_id",
                 cursor: KmsgCursor | None = None) -> None:
        self.path = path
        self.boot_id = read_boot_id(boot_id_path)
        self.overruns = 0
        self.records = 0
        self.skipped = 0
        self.last_seq: int | None = None
        self.skip_until = cursor.seq if cursor is not None and cursor.boot_id == self.boot_id else -1
        self._fd: int | None = None

    def open(self) -> None:
        """Open the device (non-blocking). Raises OSError (e.g. EACCES without CAP_SYSLOG)."""
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> KmsgReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_available(self, limit: int = 100_000) -> list[str]:
        """Records readable now without blocking (at most ``limit``), already-seen ones skipped."""
        assert self._fd is not None, "open() first"
        out: list[str] = []
        while len(out) < limit:
            try:
                data = os.read(self._fd, 16384)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:
                    self.overruns += 1
                    log.warning("/dev/kmsg overrun: records were lost before they could be read (%d so far)",
                                self.overruns)
                    continue
                if e.errno == errno.EINVAL:  # record larger than the buffer: cannot happen at 16 KiB
                    continue
                raise
            if not data:
                break
            text = data.decode("utf-8", "replace")
            seq = _kmsg_seq(text)
            if seq is not None:
                if seq <= self.skip_until:
                    self.skipped += 1
                    continue
                self.last_seq = seq
            self.records += 1
            out.append(text)
        return out

    def wait(self, timeout: float) -> bool:
        """Block until a record is readable or ``timeout`` seconds pass. True when readable."""
        assert self._fd is not None, "open() first"
        r, _, _ = select.select([self._fd], [], [], timeout)
        return bool(r)

    def cursor(self) -> KmsgCursor | None:
        if self.last_seq is None:
            return None
        return KmsgCursor(self.boot_id, self.last_seq)


def _kmsg_seq(text: str) -> int | None:
    a = text.find(",")
    b = text.find(",", a + 1)
    if a == -1 or b == -1:
        return None
    return ascii_uint(text[a + 1:b])  # ASCII digits, at most a u64: else no seq


def kmsg_events(records: Iterable[str], parser: KernelLogParser, ctx: TimeContext,
                boot_id: str | None) -> Iterator[FaultEvent]:
    """Events from raw kmsg records (as returned by :meth:`KmsgReader.read_available`)."""
    for text in records:
        rec = parse_kmsg_record(text, ctx, boot_id)
        if rec is not None:
            yield from parser.feed(rec)

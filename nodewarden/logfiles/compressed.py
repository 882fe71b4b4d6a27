"""Compressed logs, told by their magic bytes and inflated as they are read: gzip (any number
of members, RFC 1952), bzip2 and xz; and the open that names the file when it fails.

A gzip member's text is used only once the member has passed its CRC and length check: inflate
turns damaged deflate data into plausible-looking lines until zlib notices, so the text of a
corrupt member is dropped (see :class:`GzipText`); a truncated archive keeps its whole lines.
"""

from __future__ import annotations

import bz2
import io
import lzma
import sys
import zlib
from pathlib import Path
from typing import IO

from nodewarden.logfiles.paths import InputError

GUNZIP_STEP = 64 << 10  # compressed bytes inflated per call
INFLATE_BUFFER = 1 << 20  # text bytes taken per read when inflating only to check the members


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



def open_log(path: Path) -> IO[bytes]:
    """Open a log for binary reading, decompressing gzip/bzip2/xz by their magic bytes (gzip as
    an unbuffered GzipText: wrap it in io.BufferedReader to read lines).

    Raises InputError (naming the path) when it cannot be opened.
    """
    try:
        f = open(path, "rb")
        magic = f.peek(6)[:6]  # not read(): a pipe given by name (/dev/stdin, <(...)) cannot seek back
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


def gunzip(data: bytes, limit: int | None = None) -> tuple[bytes, str | None] | None:
    """The text of a whole gzip file (every member), and why its end could not be read (None
    when it all could). None when the text would exceed ``limit`` bytes (the caller streams it;
    None: no bound).

    A truncated archive keeps every whole line it inflated (the line the cut ends inside is not
    kept: ``...): 7`` of an Xid 79 line is no Xid 7). A member that
    fails its integrity check (corrupt deflate data, CRC or length mismatch) gives no text at
    all, since inflate turns damage into plausible-looking lines up to the point where zlib
    notices; the members before it, each checked by its own CRC, are kept (see GzipText)."""
    r = GzipText(io.BytesIO(data))
    text = r.read_text(limit if limit is not None else sys.maxsize)
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


def corrupt_member(path: Path) -> tuple[int, str] | None:
    """Inflate a gzip file, keeping none of its text: (text offset where the first corrupt
    member begins, why its text is not used), or None when no member is corrupt (a truncated
    last member is not: its text is sound). Constant memory; raises InputError when the file
    cannot be opened."""
    r = GzipText(open_log_raw(path))
    buf = bytearray(INFLATE_BUFFER)
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

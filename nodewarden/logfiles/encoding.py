"""Text encodings of log files other than UTF-8, told by a text's first bytes and re-encoded
to UTF-8 for the parser: UTF-16 and UTF-32 (with or without a byte-order mark), and a UTF-8
byte-order mark dropped. Windows tools and PowerShell redirection write UTF-16 LE with a BOM.
"""

from __future__ import annotations

import codecs
import io
import lzma
from typing import IO

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

"""Find the candidate records in a large buffer of log text without a Python loop over lines.

A kernel log is mostly noise: fault lines are one in thousands. The scanner looks for the few
byte strings every fault line contains (:data:`KEYWORDS`) with a multi-pattern matcher
(Hyperscan when installed, else one ``bytes.find`` pass per keyword), then cuts out only the
records around the hits, gluing indented continuation lines to their head line. Only those
records are decoded and parsed.
"""

from __future__ import annotations

from typing import Iterator

# Every line a parser in nodewarden.parsing can turn into an event contains one of these.
KEYWORDS: tuple[bytes, ...] = (b"NVRM", b"Xid", b"EDAC", b"mce: ", b"Port: ", b"mlx")

try:  # optional accelerator: Intel Hyperscan (the [analysis] extra on x86_64)
    import hyperscan as _hs
except Exception:  # pragma: no cover - depends on the platform
    _hs = None

_db = None


def _hs_db():
    global _db
    if _db is None:
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        db.compile(expressions=list(KEYWORDS), ids=list(range(len(KEYWORDS))), elements=len(KEYWORDS),
                   flags=[0] * len(KEYWORDS))
        _db = db
    return _db


def backend() -> str:
    """``hyperscan`` or ``find``: which matcher :func:`hit_offsets` uses."""
    return "hyperscan" if _hs is not None else "find"


def hit_offsets(buf: bytes | memoryview, force_find: bool = False) -> list[int]:
    """Sorted offsets in ``buf`` at which a keyword occurs (start of the match, or its end with
    Hyperscan: any offset inside the line is enough)."""
    if _hs is not None and not force_find:
        hits: list[int] = []
        append = hits.append

        def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            append(end - 1)

        _hs_db().scan(bytes(buf) if isinstance(buf, memoryview) else buf, match_event_handler=on_match)
        hits.sort()
        return hits
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    hits = []
    for kw in KEYWORDS:
        find = data.find
        p = find(kw)
        while p != -1:
            hits.append(p)
            # Skip to the end of this line: one hit per line and keyword is enough.
            nl = find(b"\n", p)
            if nl == -1:
                break
            p = find(kw, nl)
    hits.sort()
    return hits


def _is_cont(buf: bytes, start: int, end: int) -> bool:
    """Is the line starting at ``start`` a continuation (indented, not blank)?"""
    if start >= end:
        return False
    c = buf[start]
    if c != 0x20 and c != 0x09:
        return False
    # Blank (whitespace-only) lines are separators, not continuations.
    nl = buf.find(b"\n", start, end)
    line = buf[start:nl if nl != -1 else end]
    return bool(line.strip())


def candidate_records(buf: bytes, force_find: bool = False) -> Iterator[tuple[int, int]]:
    """(start, end) byte ranges of the records in ``buf`` that contain a keyword, in order.

    A record is a head line plus the indented continuation lines after it; ``end`` excludes the
    final newline. Each record is yielded once however many keywords it holds.
    """
    n = len(buf)
    last_end = -1
    for h in hit_offsets(buf, force_find):
        if h <= last_end:
            continue
        start = buf.rfind(b"\n", 0, h) + 1
        # Walk back over continuation lines to the head line of the record.
        while start > 0 and _is_cont(buf, start, n):
            prev = buf.rfind(b"\n", 0, start - 1) + 1
            start = prev
        end = buf.find(b"\n", h)
        if end == -1:
            end = n
        # Walk forward over the continuation lines that follow.
        while end < n and _is_cont(buf, end + 1, n):
            nxt = buf.find(b"\n", end + 1)
            end = n if nxt == -1 else nxt
        last_end = end
        yield start, end


def split_carry(buf: bytes) -> int:
    """Offset at which to cut a chunk so that no record is split: the start of the last head
    line (it may get continuation lines from the next chunk). Returns len(buf) when the buffer
    ends exactly at a record boundary is unknown, so the tail is always carried."""
    n = len(buf)
    p = buf.rfind(b"\n", 0, n - 1 if n and buf[-1:] == b"\n" else n)
    while p != -1:
        start = p + 1
        if not _is_cont(buf, start, n):
            return start
        p = buf.rfind(b"\n", 0, p)
    return 0

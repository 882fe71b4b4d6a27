"""Find the candidate records in a large buffer of log text without a Python loop over lines.

A kernel log is mostly noise: fault lines are one in thousands. The scanner looks for the few
byte strings every fault line contains (:data:`KEYWORDS`) with a multi-pattern matcher
(Hyperscan when installed, else one ``bytes.find`` pass per keyword), then cuts out only the
records around the hits, gluing indented continuation lines to their head line. Only those
records are decoded and parsed.
"""

from __future__ import annotations

import os
import re
from typing import Iterator

# Every record a parser in nodewarden.parsing turns into an event, or keeps state from, holds one
# of these. They are as narrow as the parsers allow: a fleet's logs are full of driver chatter
# (``NVRM: Persistence mode is deprecated``, mlx5 health polls and firmware traces) that no parser
# uses, and every candidate costs a decode and an envelope parse. tests/unit/test_scan.py checks
# that the scanned file gives the events of a loop over every line, on the real cases too. The
# scan finds keywords anywhere (a quoted fault too): the parsers decide where a message starts.
KEYWORDS: tuple[bytes, ...] = (
    b"Xid",                    # Xid lines, NVSwitch SXid lines, unparsed Xid mentions, XidCriticalError
    b"NVRM: GPU at",           # PCI -> UUID map
    b"NVRM: The NVIDIA GPU",   # text-only Xid 79, first line
    b"fallen off the bus",     # text-only Xid 79, last line and one-line forms
    b"NVRM: loading NVIDIA",   # driver load: per-GPU rate limits start afresh
    b"NVRM: Rate limiting",    # sampled GSP RPC Xids
    b"Assertion failed",       # NVRM assertions: reset-required (NV_ERR_RESET_REQUIRED) and driver_assertion
    b"Check failed",           # NVRM checks (nvassert.c nvCheckOkFailed[NoLog]): the same two kinds
    b"EDAC",                   # EDAC error lines and their machine-check decode
    b"mce: [Hardware Error]",  # machine-check records
    b"Hardware Error",         # GHES/CPER records "{N}[Hardware Error]: ...", the AMD MCA decoder
    b"AER",                    # PCIe AER records and recovery lines (drivers/pci/pcie/aer.c, err.c)
    b"Bus Error",              # "PCIe Bus Error:" where the kernel prints no "AER:"
    b"error status/mask",      # its "device [vvvv:dddd] error status/mask=" line
    b":    [",                 # its error bit lines "<drv> <bdf>:    [14] CmpltTO" (v4.x+; v3.x ":  [")
    b":  [",
    b"TLP Header",
    b"Error of this Agent",
    b"link has been reset",    # aer_root_reset / the downstream-port reset, older kernels without "AER:"
    b"aer_",                   # pci_print_aer: aer_status/aer_layer/aer_uncor_severity (firmware-first)
    b"Port: ",                 # IB core port state
    b": Link up",              # mlx5 netdev carrier
    b": Link down",
    b"Port module event",      # mlx5 cable/module events
    b", status: ",             # FreeBSD mlx5en module events
    b'"MESSAGE":[',            # journalctl -o json: a message with control or non-UTF-8 bytes, as numbers
    b'"MESSAGE": [',
)

try:  # optional accelerator: Intel Hyperscan (the [analysis] extra on x86_64)
    import hyperscan as _hs
except Exception:  # pragma: no cover - depends on the platform
    _hs = None
if os.environ.get("NODEWARDEN_SCANNER") == "find":  # force the portable matcher (benchmarks)
    _hs = None

_db = None


def _hs_db():
    global _db
    if _db is None:
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        db.compile(expressions=[re.escape(k) for k in KEYWORDS],  # literals, not patterns
                   ids=list(range(len(KEYWORDS))), elements=len(KEYWORDS),
                   flags=[0] * len(KEYWORDS))
        _db = db
    return _db


def backend() -> str:
    """``hyperscan`` or ``find``: which matcher :func:`hit_offsets` uses."""
    return "hyperscan" if _hs is not None else "find"


def hit_offsets(buf: bytes | bytearray, lo: int = 0, hi: int | None = None, force_find: bool = False) -> list[int]:
    """Sorted offsets in ``buf[lo:hi]`` at which a keyword occurs (start of the match, or its last
    byte with Hyperscan: any offset inside the line is enough). No copy of ``buf`` is made."""
    hi = len(buf) if hi is None else hi
    if _hs is not None and not force_find:
        hits: list[int] = []
        append = hits.append

        def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            append(lo + end - 1)

        view = memoryview(buf)[lo:hi]
        try:
            _hs_db().scan(view, match_event_handler=on_match)
        finally:
            view.release()
        hits.sort()
        return hits
    hits = []
    find = buf.find
    for kw in KEYWORDS:
        p = find(kw, lo, hi)
        while p != -1:
            hits.append(p)
            # Skip to the end of this line: one hit per line and keyword is enough.
            nl = find(b"\n", p, hi)
            if nl == -1:
                break
            p = find(kw, nl, hi)
    hits.sort()
    return hits


def _is_cont(buf: bytes | bytearray, start: int, end: int) -> bool:
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


def candidate_records(buf: bytes | bytearray, force_find: bool = False, lo: int = 0,
                      hi: int | None = None) -> Iterator[tuple[int, int]]:
    """(start, end) byte ranges of the records in ``buf[lo:hi]`` that contain a keyword, in order.

    A record is a head line plus the indented continuation lines after it; ``end`` excludes the
    final newline. Each record is yielded once however many keywords it holds. ``lo`` must be
    the start of a record and ``hi`` the start of one (or the end of the data).
    """
    n = len(buf) if hi is None else hi
    last_end = -1
    for h in hit_offsets(buf, lo, n, force_find):
        if h <= last_end:
            continue
        start = buf.rfind(b"\n", lo, h) + 1 or lo
        # Walk back over continuation lines to the head line of the record.
        while start > lo and _is_cont(buf, start, n):
            prev = buf.rfind(b"\n", lo, start - 1) + 1 or lo
            start = prev
        end = buf.find(b"\n", h, n)
        if end == -1:
            end = n
        # Walk forward over the continuation lines that follow.
        while end < n and _is_cont(buf, end + 1, n):
            nxt = buf.find(b"\n", end + 1, n)  # never past hi: what follows is not ours
            end = n if nxt == -1 else nxt
        last_end = end
        yield start, end


def split_carry(buf: bytes | bytearray, hi: int | None = None) -> int:
    """Offset at which to cut ``buf[:hi]`` so that no record is split: the start of the last head
    line (it may still get continuation lines from the data that follows). 0 when ``buf[:hi]``
    holds a single record."""
    n = len(buf) if hi is None else hi
    complete = n > 0 and buf[n - 1] == 0x0A
    p = buf.rfind(b"\n", 0, n - 1 if complete else n)
    last = True
    while p != -1:
        start = p + 1
        if last and not complete:
            # The last line is cut by the read: if it starts with a blank it may be a continuation
            # line whose text has not been read yet ("   " + "NVRM: ..."), so it is no place to cut.
            cont = start < n and buf[start] in (0x20, 0x09)
        else:
            cont = _is_cont(buf, start, n)
        if not cont:
            return start
        last = False
        p = buf.rfind(b"\n", 0, p)
    return 0

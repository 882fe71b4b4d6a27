"""EDAC memory-controller error lines (Linux ``drivers/edac/edac_mc.c`` ``edac_raw_mc_handle_error``).

``EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923
offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)``
and the legacy ``EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (...)`` grammar.

Every pattern is matched at the start of the driver's message (``re.match`` on the text that
:func:`nodewarden.parsing.lines.driver_message` gives), never searched for inside other text:
a message quoting a driver line (``segfault ... in NVRM: Xid ...``) is no fault. Numbers are
ASCII digits, bounded (at most 9 decimal digits): a longer run does not match.
"""

from __future__ import annotations

import re
from typing import Any

EDAC_RE = re.compile(
    r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): (?P<count>[0-9]{1,9}) (?P<type>CE|UE|Fatal|Deferred)\b(?P<what>[^()\[\]:]*?)"
    r" on (?P<label>[^\s()]+)(?:\s*\((?P<details>.*)\))?\s*$")
MAX_COUNT = 1 << 31  # the kernel reports a u16 error count per line: past this a line is mangled
EDAC_HINT_RE = re.compile(r"EDAC\b.*\bMC[0-9]+: [0-9]+ (?:CE|UE)\b")
# The machine-check decode some EDAC drivers (sb_edac, skx_common) print before the error line:
# "EDAC sbridge MC0: CPU 0: Machine Check Event: 0 Bank 5: 8c00004000010092", then "ADDR 849923380",
# "MISC 42525286", "TSC 0" (hex, with or without 0x).
_EDAC_MCE_HEAD = re.compile(
    r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): CPU (?P<cpu>[0-9]{1,9}): Machine Check (?:Event|Exception): "
    r"(?:0x)?(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>[0-9]{1,9}): (?:0x)?(?P<status>[0-9a-fA-F]{1,16})\b")
_EDAC_MCE_REG = re.compile(r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): (?P<key>TSC|ADDR|MISC) (?:0x)?(?P<v>[0-9a-fA-F]{1,16})\s*$")
_LABEL_SBRIDGE = re.compile(r"CPU_SrcID#(?P<socket>[0-9]{1,9})_(?P<kind>Ha|MC)#(?P<mc>[0-9]{1,9})_Chan#(?P<ch>[0-9]{1,9})_DIMM#(?P<dimm>[0-9]{1,9})")
_LABEL_LEGACY = re.compile(r"CPU#(?P<socket>[0-9]{1,9})Channel#(?P<ch>[0-9]{1,9})_DIMM#(?P<dimm>[0-9]{1,9})")
_LABEL_CSROW = re.compile(r"mc#(?P<mc>[0-9]{1,9})csrow#(?P<csrow>[0-9]{1,9})channel#(?P<ch>[0-9]{1,9})")


def parse_label(label: str) -> dict[str, int]:
    """Socket/HA-or-iMC/channel/DIMM numbers from an EDAC location label (empty when unknown)."""
    m = _LABEL_SBRIDGE.fullmatch(label)
    if m:
        key = "ha" if m.group("kind") == "Ha" else "imc"
        return {"socket": int(m.group("socket")), key: int(m.group("mc")),
                "channel": int(m.group("ch")), "dimm": int(m.group("dimm"))}
    m = _LABEL_LEGACY.fullmatch(label)
    if m:
        return {"socket": int(m.group("socket")), "channel": int(m.group("ch")), "dimm": int(m.group("dimm"))}
    m = _LABEL_CSROW.fullmatch(label)
    if m:
        return {"mc": int(m.group("mc")), "csrow": int(m.group("csrow")), "channel": int(m.group("ch"))}
    return {}


def _details(text: str) -> tuple[dict[str, str], list[str]]:
    """``channel:2 slot:0 ... -  area:DRAM err_code:0001:0092`` -> ({key: value}, [flags])."""
    fields: dict[str, str] = {}
    flags: list[str] = []
    for tok in text.split():
        if tok == "-":
            continue
        k, sep, v = tok.partition(":")
        if sep:
            fields[k] = v
        else:
            flags.append(tok)
    return fields, flags


def parse_edac(message: str) -> dict[str, Any] | None:
    """Fields of an EDAC CE/UE line, or None.

    Returns ``mc`` (int), ``count`` (errors this line reports, >= 1), ``type`` (``corrected`` or
    ``uncorrected``; ``Fatal`` counts as uncorrected, ``Deferred`` as corrected), ``operation``
    (e.g. ``memory read`` or None), ``label``, the label's ``socket``/``ha``/``imc``/``channel``/``dimm``,
    ``details`` (the key:value list, strings as printed) and ``flags`` (e.g. ``OVERFLOW``).
    """
    m = EDAC_RE.match(message)
    if not m or int(m.group("count")) > MAX_COUNT:  # a count no controller reports: mangled (unparsed)
        return None
    typ = m.group("type")
    what = m.group("what").strip()
    op = what[: -len("error")].strip() if what.endswith("error") else what or None
    out: dict[str, Any] = {
        "mc": int(m.group("mc")),
        "count": int(m.group("count")),
        "type": "uncorrected" if typ in ("UE", "Fatal") else "corrected",
        "edac_type": typ,
        "operation": op or None,
        "label": m.group("label"),
    }
    out.update(parse_label(m.group("label")))
    if m.group("details"):
        fields, flags = _details(m.group("details"))
        out["details"] = fields
        if flags:
            out["flags"] = flags
        for key in ("page", "offset", "syndrome"):
            if key in fields and fields[key].startswith("0x"):
                try:
                    out[key] = int(fields[key], 16)
                except ValueError:
                    pass
        if "grain" in fields and fields["grain"].isascii() and fields["grain"].isdigit() and len(fields["grain"]) < 10:
            out["grain"] = int(fields["grain"])
    return out


def parse_edac_mce(message: str) -> tuple[int, dict[str, int]] | None:
    """One line of an EDAC driver's machine-check decode: (mc, fields), else None.

    The ``CPU N: Machine Check Event`` line gives ``mce_cpu``, ``mce_mcg_status``, ``mce_bank`` and
    ``mce_status``; the ``ADDR``/``MISC``/``TSC`` lines give ``mce_addr``/``mce_misc``/``mce_tsc``.
    """
    m = _EDAC_MCE_HEAD.match(message)
    if m:
        return int(m.group("mc")), {"mce_cpu": int(m.group("cpu")), "mce_mcg_status": int(m.group("mcg"), 16),
                                    "mce_bank": int(m.group("bank")), "mce_status": int(m.group("status"), 16)}
    m = _EDAC_MCE_REG.match(message)
    if m:
        return int(m.group("mc")), {"mce_" + m.group("key").lower(): int(m.group("v"), 16)}
    return None

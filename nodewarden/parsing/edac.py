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

# "%d CE %s%son %s (%s page:0x%lx offset:0x%lx grain:%ld syndrome:0x%lx%s%s)" (edac_ce_error; UE:
# no syndrome): count, type, the driver's message (any text: "memory read error", skx's "memory
# scrubbing error", amd64_edac's "Cannot decode normalized address", ghes_edac's "Single-bit ECC"),
# the label (ghes_edac's DMI labels hold blanks: "unknown memory", "NODE 0 DIMM_A1"), details.
EDAC_RE = re.compile(
    r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): (?P<count>[0-9]{1,9}) (?P<type>CE|UE|Fatal|Deferred)\b"
    r"(?P<what>[^()\[\]:]{0,160}?) on (?P<label>[^()\s](?:[^()]{0,126}[^()\s])?)(?:\s*\((?P<details>.*)\))?\s*$")
TYPES = {"CE": "corrected", "UE": "uncorrected", "Fatal": "uncorrected", "Deferred": "deferred"}
# The count a line reports is a u16 (include/linux/edac.h, struct edac_raw_error_desc: ``u16
# error_count``; edac_mc_handle_error takes it as u16): a count past 65535 is a mangled line.
MAX_COUNT = 0xFFFF
EDAC_HINT_RE = re.compile(r"EDAC\b.*\bMC[0-9]+: [0-9]+ (?:CE|UE)\b")
# The machine-check decode some EDAC drivers (sb_edac, skx_common) print before the error line:
# "EDAC sbridge MC0: CPU 0: Machine Check Event: 0 Bank 5: 8c00004000010092", then "ADDR 849923380",
# "MISC 42525286", "TSC 0" (hex, with or without 0x).
_EDAC_MCE_HEAD = re.compile(
    r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): CPU (?P<cpu>[0-9]{1,9}): Machine Check (?:Event|Exception): "
    r"(?:0x)?(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>[0-9]{1,9}): (?:0x)?(?P<status>[0-9a-fA-F]{1,16})\b")
_EDAC_MCE_REG = re.compile(r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): (?P<key>TSC|ADDR|MISC) (?:0x)?(?P<v>[0-9a-fA-F]{1,16})\s*$")
# "PROCESSOR %u:%x TIME %llu SOCKET %u APIC %x" (sb_edac.c sbridge_mce_check_error; skx_common.c
# prints the same fields with "0x").
_EDAC_MCE_PROC = re.compile(
    r"EDAC (?:[\w-]+ )?MC(?P<mc>[0-9]{1,9}): PROCESSOR (?P<vendor>[0-9]{1,3}):(?:0x)?(?P<cpuid>[0-9a-fA-F]{1,8}) "
    r"TIME (?P<time>[0-9]{1,20}) SOCKET (?P<socket>[0-9]{1,9}) APIC (?:0x)?(?P<apic>[0-9a-fA-F]{1,8})\s*$")
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


# skx_common.c's register dumps in the driver detail: "retry_rd_err_log[0000a20d 00000000 ...]",
# "correrrcnt[0000 0000 0000 0000 a9b4 0000 0000 0000]" (hex words); ghes_edac's
# "status(0x0000000000000400): Storage error in DRAM memory" (CPER error status and its meaning).
_REGS = re.compile(r"(?P<name>[a-z_]{1,32})\[(?P<words>[0-9a-fA-F]{1,16}(?: [0-9a-fA-F]{1,16}){0,31})\]")
_GHES_STATUS = re.compile(r"status\((?P<v>0x[0-9a-fA-F]{1,16})\): (?P<text>[^:]*?)(?=\s+\w+: |\s*$)")


def _details(text: str) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    """``channel:2 slot:0 ... -  OVERFLOW area:DRAM err_code:0001:0092`` -> ({key: value},
    [flags], {extras}). Flags are the words that open the driver's detail (after `` - ``);
    extras the register dumps (lists of ints) and ghes_edac's ``error_status``/``error_status_text``."""
    fields: dict[str, str] = {}
    flags: list[str] = []
    extras: dict[str, Any] = {}
    for m in _REGS.finditer(text):
        fields[m.group("name")] = m.group("words")
        extras[m.group("name")] = [int(w, 16) for w in m.group("words").split()]
    text = _REGS.sub(" ", text)
    m = _GHES_STATUS.search(text)
    if m:
        extras["error_status"], extras["error_status_text"] = int(m.group("v"), 16), m.group("text")
        text = text[:m.start()] + text[m.end():]
    main, _dash, other = text.partition(" - ")
    other = other.replace("APEI location:", " ")  # ghes_edac (v3.10-5.x): its location again, as key:value
    for part, detail in ((main, False), (other, True)):
        leading = detail
        for tok in part.split():
            k, sep, v = tok.partition(":")
            if sep:
                fields[k] = v
                leading = False
            elif leading:  # "%s%s err_code:..." (skx_common, sb_edac): " OVERFLOW", " recoverable" first
                flags.append(tok)
    return fields, flags, extras


def parse_edac(message: str) -> dict[str, Any] | None:
    """Fields of an EDAC CE/UE line, or None.

    Returns ``mc`` (int), ``count`` (errors this line reports, >= 1), ``type`` (``corrected``,
    ``uncorrected`` -- ``Fatal`` counts as uncorrected -- or ``deferred``), ``operation`` (``memory
    read``, ``memory scrubbing``... for the ``memory <op> error`` message, else None) or
    ``description`` (any other message: ``Cannot decode normalized address``, ``Single-bit ECC``),
    ``label``, the label's ``socket``/``ha``/``imc``/``channel``/``dimm`` (or ``mc``/``csrow``/
    ``channel``), ``details`` (the key:value list, strings as printed), ``flags`` (``OVERFLOW``),
    ``page``/``offset``/``syndrome``/``grain`` (ints), register dumps (``retry_rd_err_log``,
    ``correrrcnt``: lists of ints from hex), ``address`` (page * 4096 + offset, None for 0/0) and
    ``via`` (``edac``).
    """
    m = EDAC_RE.match(message)
    if not m or int(m.group("count")) > MAX_COUNT:  # a count no controller reports: mangled (unparsed)
        return None
    typ = m.group("type")
    what = " ".join(m.group("what").split())
    # "memory read error", "memory scrubbing error" (sb/skx/i10nm optype strings): the operation;
    # any other message is the driver's description of the error.
    op = what[: -len(" error")] if what.startswith("memory ") and what.endswith(" error") else None
    out: dict[str, Any] = {
        "mc": int(m.group("mc")),
        "count": int(m.group("count")),
        "type": TYPES[typ],
        "edac_type": typ,
        "operation": op,
        "label": m.group("label"),
        "via": "edac",
    }
    if what and op is None:
        out["description"] = what
    out.update(parse_label(m.group("label")))
    if m.group("details"):
        fields, flags, extras = _details(m.group("details"))
        out["details"] = fields
        if flags:
            out["flags"] = flags
        out.update(extras)
        for key in ("page", "offset", "syndrome"):
            if key in fields and fields[key].startswith("0x"):
                try:
                    out[key] = int(fields[key], 16)
                except ValueError:
                    pass
        if "grain" in fields and fields["grain"].isascii() and fields["grain"].isdigit() and len(fields["grain"]) < 10:
            out["grain"] = int(fields["grain"])
    # page is a page frame number: 4 KiB pages (the x86 EDAC drivers); 0/0 is "no address".
    page, offset = out.get("page"), out.get("offset")
    known = page is not None and offset is not None and (page or offset) and offset < 1 << 12
    out["address"] = (page << 12) + offset if known else None
    return out


# ghes_edac (drivers/edac/ghes_edac.c ghes_edac_report_mem_error) reports a firmware-first (CPER)
# memory error through edac_raw_mc_handle_error: its driver message is the CPER memory error type,
# from its own table (v3.10-5.x: "Single-bit ECC", "Single-symbol ChipKill ECC"...) or from
# cper_mem_err_type_str (drivers/firmware/efi/cper.c mem_err_type_strs: "single-bit ECC"...), or
# "unknown error"; its detail opens with the CPER location "node:%d card:%d module:%d rank:%d
# bank:%d ... row:%d col:%d bit_pos:%d" and holds "status(0x%016llx): ..." / "APEI location: ...".
GHES_EDAC_MESSAGES = frozenset((
    "unknown", "no error", "single-bit ecc", "multi-bit ecc", "single-symbol chipkill ecc",
    "multi-symbol chipkill ecc", "master abort", "target abort", "parity error", "watchdog timeout",
    "invalid address", "mirror broken", "memory sparing", "scrub corrected error", "scrub uncorrected error",
    "physical memory map-out event", "unknown error"))
# ghes_edac's location keys -> the names cper_mem_err_location prints (nodewarden.parsing.ghes "location").
CPER_LOCATION_KEYS = {"node": "node", "card": "card", "module": "module", "rank": "rank", "bank": "bank",
                      "bank_group": "bank_group", "bank_address": "bank_address", "device": "device", "row": "row",
                      "col": "column", "column": "column", "bit_pos": "bit_position", "bit_position": "bit_position"}
# Labels that name no DIMM: ghes_edac's "unknown label" (v3.10-5.x) and "unknown memory", edac_mc's "any memory".
NO_DIMM_LABELS = frozenset(("unknown label", "unknown memory", "any memory"))


def from_ghes_edac(fields: dict[str, Any]) -> bool:
    """Is this EDAC line (:func:`parse_edac` fields) ghes_edac's report of a CPER memory error? True
    when its message is a CPER memory error type, or it carries ghes_edac's ``status(0x...)`` or the
    CPER ``node``/``card``/``module`` location (no other EDAC driver prints those)."""
    if (fields.get("description") or "").lower() in GHES_EDAC_MESSAGES or "error_status" in fields:
        return True
    return any(k in (fields.get("details") or {}) for k in ("node", "card", "module"))


def cper_location(fields: dict[str, Any]) -> dict[str, int]:
    """The CPER memory location in a ghes_edac line's detail (``node:0 card:1 ... col:8``) as ints,
    keyed as :mod:`nodewarden.parsing.ghes` keys a record's ``location`` (``col`` -> ``column``,
    ``bit_pos`` -> ``bit_position``); values that are no bounded number are left out."""
    out: dict[str, int] = {}
    for k, v in (fields.get("details") or {}).items():
        name = CPER_LOCATION_KEYS.get(k)
        if name is None or not v.isascii() or len(v) > 18:
            continue
        try:
            out[name] = int(v, 16) if v.lower().startswith("0x") else int(v, 10)
        except ValueError:
            continue
    return out


def parse_edac_mce(message: str) -> tuple[int, dict[str, int]] | None:
    """One line of an EDAC driver's machine-check decode: (mc, fields), else None.

    The ``CPU N: Machine Check Event`` line gives ``mce_cpu``, ``mce_mcg_status``, ``mce_bank`` and
    ``mce_status``; the ``ADDR``/``MISC``/``TSC`` lines give ``mce_addr``/``mce_misc``/``mce_tsc``; the
    ``PROCESSOR v:cpuid TIME t SOCKET s APIC a`` line ``mce_cpu_vendor``, ``mce_cpuid``, ``mce_time``
    (epoch seconds, as printed), ``mce_socket`` and ``mce_apic``.
    """
    m = _EDAC_MCE_HEAD.match(message)
    if m:
        return int(m.group("mc")), {"mce_cpu": int(m.group("cpu")), "mce_mcg_status": int(m.group("mcg"), 16),
                                    "mce_bank": int(m.group("bank")), "mce_status": int(m.group("status"), 16)}
    m = _EDAC_MCE_REG.match(message)
    if m:
        return int(m.group("mc")), {"mce_" + m.group("key").lower(): int(m.group("v"), 16)}
    m = _EDAC_MCE_PROC.match(message)
    if m:
        return int(m.group("mc")), {"mce_cpu_vendor": int(m.group("vendor")), "mce_cpuid": int(m.group("cpuid"), 16),
                                    "mce_time": int(m.group("time")), "mce_socket": int(m.group("socket")),
                                    "mce_apic": int(m.group("apic"), 16)}
    return None

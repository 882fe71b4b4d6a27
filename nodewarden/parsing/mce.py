"""Machine-check records printed by the kernel (``arch/x86/kernel/cpu/mce/core.c`` ``print_mce``).

One record is ``mce: [Hardware Error]: CPU N: Machine Check[ Exception]: MCGSTATUS Bank B: STATUS``
followed by ``TSC ... [ADDR ...] [MISC ...]``, ``PROCESSOR v:cpuid TIME t SOCKET s APIC a microcode m``
lines; the ``Machine check events logged`` notice before it carries no data.

AMD's decoder (``drivers/edac/mce_amd.c``) prints its own lines instead, ``[Hardware Error]: ...``
without ``mce: ``: :func:`parse_amd_line` reads them, :func:`decode_amd_status` takes the
severity (corrected / uncorrected / deferred) from the status register.

Every pattern is matched at the start of the driver's message (``re.match`` on the text that
:func:`nodewarden.parsing.lines.driver_message` gives), never searched for inside other text:
a message quoting a driver line (``segfault ... in NVRM: Xid ...``) is no fault. Numbers are
ASCII digits, bounded (at most 9 decimal digits): a longer run does not match.
"""

from __future__ import annotations

import re
from typing import Any

from nodewarden.parsing.lines import matched_fields

MCE_HEAD_RE = re.compile(
    r"mce: \[Hardware Error\]: CPU (?P<cpu>[0-9]{1,9}): Machine Check(?P<exc> Exception)?: "
    r"(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>[0-9]{1,9}): (?P<status>[0-9a-fA-F]{1,16})\b")
MCE_DETAIL_RE = re.compile(r"mce: \[Hardware Error\]: (?P<rest>(?:TSC|PROCESSOR|RIP|ADDR|MISC|SYND|IPID|PPIN)\b.*)")
MCE_HINT_RE = re.compile(r"mce: \[Hardware Error\]: CPU [0-9]+: Machine Check")
_KV = re.compile(r"\b(TSC|ADDR|MISC|SYND|IPID|PPIN|TIME|SOCKET|APIC|microcode)\s+([0-9a-fA-Fx]+)")
_PROCESSOR = re.compile(r"\bPROCESSOR (?P<vendor>[0-9]{1,9}):(?P<cpuid>[0-9a-fA-F]+)")

# IA32_MCi_STATUS bits (Intel SDM vol. 3B 16.3.2.2; AMD uses the same positions).
_VAL, _OVER, _UC, _EN, _MISCV, _ADDRV, _PCC = 63, 62, 61, 60, 59, 58, 57


def decode_status(status: int) -> dict[str, Any]:
    """Severity bits of an MCi_STATUS value: ``uncorrected`` (UC), ``processor_context_corrupt``
    (PCC), ``overflow`` (OVER), ``valid`` (VAL) and ``type`` (``uncorrected``/``corrected``)."""
    bit = lambda n: bool(status >> n & 1)  # noqa: E731
    uc = bit(_UC)
    return {"valid": bit(_VAL), "overflow": bit(_OVER), "uncorrected": uc, "processor_context_corrupt": bit(_PCC),
            "type": "uncorrected" if uc else "corrected"}


def parse_mce_head(message: str) -> dict[str, Any] | None:
    """The first line of a record: ``cpu``, ``bank``, ``mcg_status``, ``status`` (ints), ``exception``
    (bool: the fatal ``Machine Check Exception`` form) and the decoded status bits; else None."""
    m = MCE_HEAD_RE.match(message)
    if not m:
        return None
    status = int(m.group("status"), 16)
    out: dict[str, Any] = {"cpu": int(m.group("cpu")), "bank": int(m.group("bank")),
                           "mcg_status": int(m.group("mcg"), 16), "status": status,
                           "exception": bool(m.group("exc"))}
    out.update(decode_status(status))
    if out["exception"]:
        out["type"] = "uncorrected"
    return out


def parse_mce_detail(message: str) -> dict[str, Any] | None:
    """A follow-up line of a record (TSC/ADDR/MISC/PROCESSOR ...) as a dict, or None.

    Hex registers (TSC, ADDR, MISC, SYND, IPID, PPIN, microcode) become ints; TIME (epoch
    seconds), SOCKET and APIC are decimal ints; PROCESSOR gives ``cpu_vendor`` and ``cpuid``.
    """
    m = MCE_DETAIL_RE.match(message)
    if not m:
        return None
    rest = m.group("rest")
    out: dict[str, Any] = {}
    for key, val in _KV.findall(rest):
        base = 10 if key in ("TIME", "SOCKET", "APIC") else 16
        try:
            out[key.lower()] = int(val, base)
        except ValueError:
            continue
    mp = _PROCESSOR.search(rest)
    if mp:
        out["cpu_vendor"] = int(mp.group("vendor"))
        out["cpuid"] = int(mp.group("cpuid"), 16)
    return out


# -- AMD MCA decoder (drivers/edac/mce_amd.c amd_decode_mce, decode_error_status, decode_smca_error,
# amd_decode_err_code) ----------------------------------------------------------------------------
# One decode, each line "[Hardware Error]: " + (v4.20+):
#   Corrected error, no action required.                      (decode_error_status: the words only)
#   CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b
#   Error Addr: 0x0000000313c7a020
#   IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01
#   Unified Memory Controller Ext. Error Code: 0[, DRAM ECC error.]     (decode_smca_error)
#   cache level: L3/GEN, mem/io: MEM, mem-tx: RD, part-proc: SRC (no timeout)   (amd_decode_err_code)
# Older decoders printed "CPU:%d\tMC%d_STATUS[...]" or "MC%d_STATUS[...]" without the first line,
# "MC%d_ADDR: 0x...", "<unit> Error: <description>", "Northbridge Error (node N): ...".
AMD_PREFIX_RE = re.compile(r"\[Hardware Error\]: ?\s*")
AMD_HINT_RE = re.compile(r"\[Hardware Error\]: ?\s*(?:CPU:[0-9]+\s|MC[0-9]+_STATUS\[)")
_AMD_LINES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p + r"\s*$")) for k, p in (
    ("status_text", r"(?P<status_text>Corrected error, no action required|Deferred error(?:, no action required)?"
                    r"|Uncorrected, software (?:restartable|containable) error|System Fatal error)\."),
    ("status", r"(?:CPU:(?P<cpu>[0-9]{1,5})\s*(?:\((?P<family>[0-9a-fA-F]{1,3}):(?P<model>[0-9a-fA-F]{1,3})"
               r":(?P<stepping>[0-9a-fA-F]{1,3})\)\s*)?)?MC(?P<bank>[0-9]{1,3})_STATUS\[(?P<flags>[\w|\-]{0,120})\]: "
               r"0x(?P<status>[0-9a-fA-F]{16})"),
    ("addr", r"(?:Error Addr|MC[0-9]{1,3}_ADDR): 0x(?P<addr>[0-9a-fA-F]{1,16})"),
    ("ppin", r"PPIN: 0x(?P<ppin>[0-9a-fA-F]{1,16})"),
    ("ipid", r"IPID: 0x(?P<ipid>[0-9a-fA-F]{1,16})(?:, Syndrome: 0x(?P<synd>[0-9a-fA-F]{1,16}))?"),
    ("synd12", r"Syndrome1: 0x(?P<synd1>[0-9a-fA-F]{1,16}), Syndrome2: 0x(?P<synd2>[0-9a-fA-F]{1,16})"),
    ("fru_text", r"FRU Text: (?P<fru_text>[^\n]{0,16})"),
    ("tsc", r"TSC: (?P<tsc>[0-9]{1,20})"),
    ("ext_error", r"(?P<bank_name>[A-Za-z][\w ./\-]{0,60}?) Ext\. Error Code: (?P<ext_error_code>[0-9]{1,3})"
                  r"(?:, (?P<description>[^\n]{0,120}?))?\.?"),
    ("bank_reserved", r"Bank (?P<reserved_bank>[0-9]{1,3}) is reserved\."),
    ("err_code", r"(?P<err_code>(?:cache level|internal): [^\n]{0,160}?)"),
    ("unit_error", r"(?P<bank_name>[A-Z][\w ./\-]{0,60}?) Error(?: \(node (?P<node>[0-9]{1,4})\))?: "
                   r"(?P<description>[^\n]{0,160}?)"),
))
_AMD_HEX = frozenset({"status", "addr", "ppin", "ipid", "synd", "synd1", "synd2", "family", "model", "stepping"})
_AMD_DEC = frozenset({"cpu", "bank", "tsc", "ext_error_code", "reserved_bank", "node"})
_AMD_BASES = {**dict.fromkeys(_AMD_HEX, 16), **dict.fromkeys(_AMD_DEC, 10)}
# MCA_STATUS bits AMD adds (AMD64 APM vol. 2, "MCA_STATUS"; mce_amd.c MCI_STATUS_*).
_DEFERRED, _POISON = 44, 43
SMCA_UMC_HWID = 0x96  # MCA_IPID[43:32] HardwareID of the Unified Memory Controller (arch/x86/kernel/cpu/mce/amd.c)


def parse_amd_line(message: str) -> tuple[str, dict[str, Any]] | None:
    """One line of the AMD MCA decoder (``[Hardware Error]: ...``) -> ``(kind, fields)``, else None.

    Kinds: ``status_text`` (the severity words: kept as printed, never read as the severity),
    ``status`` (``cpu``, ``family``/``model``/``stepping``, ``bank``, ``flags`` -- the names printed
    between the brackets, ``-`` dropped -- and ``status``), ``addr``, ``ppin``, ``ipid`` (and
    ``synd``), ``synd12``, ``fru_text``, ``tsc``, ``ext_error`` (``bank_name``, ``ext_error_code``,
    ``description``), ``bank_reserved``, ``unit_error`` and ``err_code`` (``cache level: ...`` or
    ``internal: ...``, the decode's last line). Registers are ints."""
    m = AMD_PREFIX_RE.match(message)
    if m is None:
        return None
    rest = message[m.end():]
    for kind, pat in _AMD_LINES:
        g = pat.match(rest)
        if g is None:
            continue
        f = matched_fields(g, _AMD_BASES)
        if kind == "status":
            f["flags"] = [x for x in f["flags"].split("|") if x and x != "-"]
        return kind, f
    return None


def decode_amd_status(status: int, family: int | None = None, flags: list[str] | None = None) -> dict[str, Any]:
    """:func:`decode_status` plus AMD's ``deferred`` (bit 44, family 15h and later; the printed
    ``Deferred`` flag when the family is not printed) and ``poison`` (bit 43). ``type`` is
    ``uncorrected`` (UC), else ``deferred``, else ``corrected``: from the register, not the words."""
    out = decode_status(status)
    if family is not None:
        deferred = family >= 0x15 and bool(status >> _DEFERRED & 1)
        poison = family >= 0x15 and bool(status >> _POISON & 1)
    else:
        deferred, poison = "Deferred" in (flags or ()), "Poison" in (flags or ())
    out.update(deferred=deferred, poison=poison)
    if not out["uncorrected"] and deferred:
        out["type"] = "deferred"
    return out


def amd_is_memory(f: dict[str, Any]) -> bool:
    """Is this decode (folded fields) a DRAM error of a memory controller? The bank is the UMC
    (IPID HardwareID 0x96, or the decoder's ``Unified Memory Controller`` name), or the decoder
    said ``DRAM ECC error`` (older families' northbridge)."""
    ipid = f.get("ipid")
    if ipid is not None and (ipid >> 32) & 0xFFF == SMCA_UMC_HWID:
        return True
    if str(f.get("bank_name") or "").startswith("Unified Memory Controller"):
        return True
    return "DRAM ECC error" in str(f.get("description") or "")

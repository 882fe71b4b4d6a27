"""Machine-check records printed by the kernel (``arch/x86/kernel/cpu/mce/core.c`` ``print_mce``).

One record is ``mce: [Hardware Error]: CPU N: Machine Check[ Exception]: MCGSTATUS Bank B: STATUS``
followed by ``TSC ... [ADDR ...] [MISC ...]``, ``PROCESSOR v:cpuid TIME t SOCKET s APIC a microcode m``
lines; the ``Machine check events logged`` notice before it carries no data.

Every pattern is matched at the start of the driver's message (``re.match`` on the text that
:func:`nodewarden.parsing.lines.driver_message` gives), never searched for inside other text:
a message quoting a driver line (``segfault ... in NVRM: Xid ...``) is no fault. Numbers are
ASCII digits, bounded (at most 9 decimal digits): a longer run does not match.
"""

from __future__ import annotations

import re
from typing import Any

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

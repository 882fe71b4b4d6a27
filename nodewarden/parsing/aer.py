"""PCIe Advanced Error Reporting (AER) lines of the kernel log: the AER driver's error records
(``drivers/pci/pcie/aer.c``) and the recovery that follows them (``drivers/pci/pcie/err.c``).

Every line starts with the device prefix ``dev_printk`` writes (``<driver> <DDDD:BB:DD.F>: ``,
``pci`` when no driver is bound), then, on most lines and kernels, ``AER: ``. One error record::

    pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0      (aer_print_port_info)
    pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)
    pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000        (aer_print_error)
    pcieport 0000:00:03.0:    [ 5] SDES                                                   (__aer_print_error)
    pcieport 0000:00:03.0:    [14] CmpltTO                (First)
    pcieport 0000:00:03.0: AER:   TLP Header: 34000000 08000052 00000000 00000000        (__print_tlp_header)

then, for an uncorrected error, ``pcie_do_recovery`` (err.c): ``nvidia 0000:03:00.0: AER: can't
recover (no error_detected callback)``, ``AER: Root Port link has been reset (0)``, ``AER: device
recovery failed`` / ``successful``.

Spellings by kernel generation (each read as printed; versions as far as the sources read show):

* received line: ``AER: Corrected error received: id=00e0`` (``aerdrv_errprint.c``, v3.x-4.x: the
  Requester ID, no BDF), ``... error received: 0000:00:1c.0`` (aer.c, v4.19-6.7), ``... error
  message received from 0000:00:1c.5`` (v6.8+; later with `` (no details found)``), each with
  ``Multiple `` before the severity when the root port collected several;
* severity words (``aer_error_severity_string``): ``Corrected`` / ``Uncorrected (Non-Fatal)`` /
  ``Uncorrected (Fatal)``, ``Correctable`` / ``Uncorrectable (...)`` since v6.8;
* bus error line: ``PCIe Bus Error: severity=S, type=T, id=00e5(Agent)`` (``aerdrv_errprint.c``),
  ``..., (Agent)`` (aer.c), ``CXL Bus Error`` (``aer_err_bus``, newest), ``type=Unaccessible`` /
  ``Inaccessible, (Unregistered Agent ID)`` when the status register read as 0;
* error bits: short names (``RxErr``, ``CmpltTO``) or the long ones of ``aerdrv_errprint.c``
  (``Receiver Error``, ``Completion Timeout``: :data:`LONG_NAMES`), ``Unknown Error Bit``;
* recovery (err.c ``report_error_detected``, ``pcie_do_recovery``): ``Can't recover`` / ``Device
  recovery failed`` (v5.x, capitalized) and lower case later; ``Root Port link has been reset``
  (``(%d)`` added later), ``Downstream Port link has been reset (%d)``, ``downstream link has been
  reset`` (``default_reset_link``, debug level);
* the firmware-first path (``pci_print_aer``, after a GHES ``PCIe error`` record): ``aer_status:
  0x%08x, aer_mask: 0x%08x``, the bit lines, ``aer_layer=T, aer_agent=A``, ``aer_uncor_severity:``.

:func:`parse_line` is pure and matched at the start of the driver message (``re.match``); numbers
are ASCII hex of bounded width. The folding of lines into one record is
:mod:`nodewarden.parsing.stream`'s; the pure helpers it uses are here (:func:`new_record`,
:func:`fold`, :func:`finish`).
"""

from __future__ import annotations

import re
from typing import Any

from nodewarden.parsing.pci import normalize_pci

# aer_correctable_error_string / aer_uncorrectable_error_string (drivers/pci/pcie/aer.c, v6.x):
# bit position in the Correctable / Uncorrectable Error Status register -> short name.
CORRECTABLE_ERRORS: dict[int, str] = {
    0: "RxErr", 6: "BadTLP", 7: "BadDLLP", 8: "Rollover", 12: "Timeout", 13: "NonFatalErr", 14: "CorrIntErr",
    15: "HeaderOF",
}
UNCORRECTABLE_ERRORS: dict[int, str] = {
    0: "Undefined", 4: "DLP", 5: "SDES", 12: "TLP", 13: "FCP", 14: "CmpltTO", 15: "CmpltAbrt", 16: "UnxCmplt",
    17: "RxOF", 18: "MalfTLP", 19: "ECRC", 20: "UnsupReq", 21: "ACSViol", 22: "UncorrIntErr", 23: "BlockedTLP",
    24: "AtomicOpBlocked", 25: "TLPBlockedErr", 26: "PoisonTLPBlocked",
}
# The long names the same tables held in drivers/pci/pcie/aer/aerdrv_errprint.c (v3.x-4.x kernels)
# -> the short name. The sysfs aer_dev_* files of kernels with long names print them too.
LONG_NAMES: dict[str, str] = {
    "Receiver Error": "RxErr", "Bad TLP": "BadTLP", "Bad DLLP": "BadDLLP", "RELAY_NUM Rollover": "Rollover",
    "Replay Timer Timeout": "Timeout", "Advisory Non-Fatal": "NonFatalErr",
    "Corrected Internal Error": "CorrIntErr", "Header Log Overflow": "HeaderOF",
    "Data Link Protocol": "DLP", "Surprise Down Error": "SDES", "Poisoned TLP": "TLP",
    "Flow Control Protocol": "FCP", "Completion Timeout": "CmpltTO", "Completer Abort": "CmpltAbrt",
    "Unexpected Completion": "UnxCmplt", "Receiver Overflow": "RxOF", "Malformed TLP": "MalfTLP",
    "Unsupported Request": "UnsupReq", "ACS Violation": "ACSViol",
    "Uncorrectable Internal Error": "UncorrIntErr", "MC Blocked TLP": "BlockedTLP",
    "AtomicOp Egress Blocked": "AtomicOpBlocked", "TLP Prefix Blocked Error": "TLPBlockedErr",
}

# aer_error_severity_string, old and new spellings -> the event's severity word.
SEVERITIES = {
    "Corrected": "corrected", "Correctable": "corrected",
    "Uncorrected (Non-Fatal)": "non_fatal", "Uncorrectable (Non-Fatal)": "non_fatal",
    "Uncorrected (Fatal)": "fatal", "Uncorrectable (Fatal)": "fatal",
}
EVENT_SEVERITIES = ("corrected", "non_fatal", "fatal")  # the event's ``severity`` values, mildest first
UNCORRECTED = EVENT_SEVERITIES[1:]
OUTCOMES = ("no_error_detected_callback", "recovery_failed", "recovered", "link_reset")
PRECURSOR = "gpu_lost_precursor"
NVIDIA_VENDOR = 0x10DE

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_SEV = r"Corrected|Correctable|Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\)"
# dev_printk's "<driver> <device>: " and the "AER: " dev_fmt/pr_fmt most kernels add.
PREFIX_RE = re.compile(rf"(?P<driver>[A-Za-z0-9_][\w.\-]{{0,63}}) (?P<bdf>{_BDF}): (?P<aer>AER: ?)?\s*")
_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("received", re.compile(
        rf"(?P<multiple>Multiple )?(?P<sev>{_SEV}) error (?:received: (?:id=(?P<id>[0-9a-fA-F]{{4}})|(?P<src>{_BDF}))"
        rf"|message received from (?P<src2>{_BDF})(?P<nodetails> \(no details found\))?)\s*$")),
    ("bus_error", re.compile(
        rf"(?P<bus>PCI[Ee]|CXL) Bus Error: severity=(?P<sev>{_SEV}), type=(?P<type>[A-Za-z][A-Za-z ]{{0,40}}?), "
        r"(?:id=(?P<id>[0-9a-fA-F]{4}))?\((?P<agent>[A-Za-z][A-Za-z ]{0,40})\)\s*$")),
    ("device", re.compile(
        r"device \[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\] error status/mask="
        r"(?P<status>[0-9a-fA-F]{8})/(?P<mask>[0-9a-fA-F]{8})\s*$")),
    ("bit", re.compile(r"\[ ?(?P<bit>[0-9]{1,2})\] (?P<name>[A-Za-z][\w /.\-]{0,40}?)\s*(?P<first>\(First\))?\s*$")),
    ("tlp", re.compile(r"(?:TLP Header(?: \(Flit\))?|aer_tlp_header):(?P<words>(?: (?:0x)?[0-9a-fA-F]{8}){1,14})"
                       r"(?:\s+E2E TLP Prefix:.*)?\s*$")),
    ("reported_first", re.compile(r"Error of this Agent(?:\((?P<id>[0-9a-fA-F]{4})\))? is reported first\s*$")),
    ("no_details", re.compile(rf"(?:can't find device of ID(?P<id>[0-9a-fA-F]{{4}})|found no error details for "
                              rf"(?P<src>{_BDF}))\s*$")),
    ("recovery", re.compile(
        r"(?:(?P<cant>[Cc]an't recover \(no error_detected callback\))|[Dd]evice recovery (?P<res>successful|failed)"
        r"|(?P<port>Root|Downstream) Port link has been reset(?: \((?P<rc>-?[0-9]{1,9})\))?"
        r"|(?P<ds>downstream link has been reset))\s*$")),
    # pci_print_aer (firmware-first, after a GHES PCIe error section)
    ("aer_status", re.compile(r"aer_status: 0x(?P<status>[0-9a-fA-F]{8}), aer_mask: 0x(?P<mask>[0-9a-fA-F]{8})\s*$")),
    ("aer_layer", re.compile(r"aer_layer=(?P<type>[A-Za-z][A-Za-z ]{0,40}?), aer_agent=(?P<agent>[A-Za-z][A-Za-z ]{0,40}?)"
                             r"\s*$")),
    ("aer_uncor_severity", re.compile(r"aer_uncor_severity: 0x(?P<sev>[0-9a-fA-F]{8})\s*$")),
)
# Text that marks a line as the AER driver's (for the unparsed count): the prefix and one of these.
HINT_RE = re.compile(rf"[\w.\-]+ {_BDF}: (?:AER: ?)?\s*(?:(?:Multiple )?(?:{_SEV}) error|PCI[Ee] Bus Error:|CXL Bus Error:"
                     r"|device \[[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\] error status|\[ ?[0-9]{1,2}\] \S|TLP Header"
                     r"|[Cc]an't recover|[Dd]evice recovery|aer_status:|aer_layer=|aer_uncor_severity:)")
ANYWHERE_RE = re.compile(rf"{_BDF}: (?:AER: ?)?\s*(?:(?:Multiple )?(?:{_SEV}) error received|PCI[Ee] Bus Error: severity="
                         r"|device \[[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\] error status/mask=|\[ ?[0-9]{1,2}\] [A-Za-z])")


def pci_id(text: str) -> str:
    """A bus id as the event keeps it: normalized (``DDDD:BB:DD.F``), else lower-case as printed
    (a VMD domain such as ``10000`` has five digits)."""
    return normalize_pci(text) or text.lower()


def parse_line(message: str) -> tuple[str, dict[str, Any]] | None:
    """One AER/recovery line -> ``(kind, fields)``, else None.

    ``kind`` is one of ``received``, ``bus_error``, ``device``, ``bit``, ``tlp``,
    ``reported_first``, ``no_details``, ``recovery``, ``aer_status``, ``aer_layer``,
    ``aer_uncor_severity``. ``fields`` always hold ``driver`` and ``pci`` (the line's prefix) and
    the kind's values: ints for ids, status and mask registers, bits and TLP words; severity
    (``corrected``/``non_fatal``/``fatal``) with ``severity_text`` as printed; names as printed.
    """
    m = PREFIX_RE.match(message)
    if m is None:
        return None
    rest = message[m.end():]
    for kind, pat in _LINES:
        g = pat.match(rest)
        if g is None:
            continue
        f: dict[str, Any] = {"driver": m.group("driver"), "pci": pci_id(m.group("bdf"))}
        d = g.groupdict()
        if kind == "received":
            f.update(severity=SEVERITIES[d["sev"]], severity_text=d["sev"], multiple=bool(d["multiple"]),
                     source_device=_source(m.group("bdf"), d["id"], d["src"] or d["src2"]),
                     details_found=not d["nodetails"])
        elif kind == "bus_error":
            f.update(severity=SEVERITIES[d["sev"]], severity_text=d["sev"], type=d["type"], agent=d["agent"],
                     bus=d["bus"])
        elif kind == "device":
            f.update(vendor_id=int(d["vendor"], 16), device_id=int(d["device"], 16), status=int(d["status"], 16),
                     mask=int(d["mask"], 16))
        elif kind == "bit":
            bit = int(d["bit"])
            if bit > 31:  # a 32-bit register: no such bit
                return None
            name = d["name"]
            f.update(bit=bit, name=LONG_NAMES.get(name, name), first=bool(d["first"]))
        elif kind == "tlp":
            f["tlp_header"] = [int(w, 16) for w in d["words"].split()]
        elif kind == "no_details":
            f["source_device"] = _source(m.group("bdf"), d["id"], d["src"])
        elif kind == "recovery":
            if d["cant"]:
                f["outcome"] = "no_error_detected_callback"
            elif d["res"]:
                f["outcome"] = "recovered" if d["res"] == "successful" else "recovery_failed"
            else:
                f["outcome"] = "link_reset"
                f["port"] = d["port"] or "Downstream"
                if d["rc"] is not None:
                    f["reset_status"] = int(d["rc"])
        elif kind == "aer_status":
            f.update(status=int(d["status"], 16), mask=int(d["mask"], 16))
        elif kind == "aer_layer":
            f.update(type=d["type"], agent=d["agent"])
        elif kind == "aer_uncor_severity":
            f["uncor_severity"] = int(d["sev"], 16)
        elif kind == "reported_first":
            pass
        return kind, f
    return None


def _source(prefix_bdf: str, requester_id: str | None, bdf: str | None) -> str | None:
    """The error source: the BDF printed, or the 16-bit Requester ID of older kernels (bus << 8 |
    devfn) in the reporting port's PCI domain (aer_print_port_info printed that domain later)."""
    if bdf:
        return pci_id(bdf)
    if requester_id is None:
        return None
    rid = int(requester_id, 16)
    domain = prefix_bdf.split(":", 1)[0].lower()
    return pci_id(f"{domain}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}")


def decode_status(status: int, mask: int, severity: str, first_bit: int | None = None) -> list[dict[str, Any]]:
    """The error bits set in ``status & ~mask`` as the kernel names them (``Unknown Error Bit``
    for a bit without a name): ``[{"bit", "name", "first"}]``. ``severity`` picks the table."""
    names = CORRECTABLE_ERRORS if severity == "corrected" else UNCORRECTABLE_ERRORS
    bits = status & ~mask & 0xFFFFFFFF
    return [{"bit": b, "name": names.get(b, "Unknown Error Bit"), "first": b == first_bit}
            for b in range(32) if bits >> b & 1]


def new_record(bus_error: dict[str, Any] | None, received: dict[str, Any] | None, via: str = "kernel") -> dict[str, Any]:
    """The attrs of a ``pcie_aer`` event started by a ``PCIe Bus Error`` line (``bus_error``
    fields, None for a record with no such line) after the ``received`` line's fields (or None)."""
    src = bus_error or received or {}
    pci = src.get("pci") if bus_error else (received or {}).get("source_device") or src.get("pci")
    attrs: dict[str, Any] = {
        "severity": src.get("severity"), "severity_text": src.get("severity_text"),
        "multiple": bool(received and received.get("multiple")),
        "type": bus_error.get("type") if bus_error else None, "agent": bus_error.get("agent") if bus_error else None,
        "reporting_device": received.get("pci") if received else None,
        "source_device": received.get("source_device") if received else None,
        "pci_bus_id": pci, "driver": bus_error.get("driver") if bus_error else None,
        "vendor_id": None, "device_id": None, "status": None, "mask": None, "errors": [], "first_error": None,
        "affected_devices": [], "via": via,
    }
    if received and not received.get("details_found", True):
        attrs["details_found"] = False
    if bus_error and bus_error.get("bus") == "CXL":
        attrs["bus"] = "CXL"
    return attrs


def fold(attrs: dict[str, Any], kind: str, f: dict[str, Any]) -> None:
    """Fold one detail line (``device``, ``bit``, ``tlp``, ``reported_first``, ``aer_status``,
    ``aer_layer``, ``aer_uncor_severity``) into a record's ``attrs`` (in place)."""
    if kind == "device":
        attrs.update(vendor_id=f["vendor_id"], device_id=f["device_id"], status=f["status"], mask=f["mask"])
    elif kind == "aer_status":
        attrs.update(status=f["status"], mask=f["mask"])
    elif kind == "bit":
        attrs["errors"].append({"bit": f["bit"], "name": f["name"], "first": f["first"]})
    elif kind == "tlp":
        attrs["tlp_header"] = f["tlp_header"]
    elif kind == "reported_first":
        attrs["reported_first"] = True
    elif kind == "aer_layer":
        attrs.update(type=f["type"], agent=f["agent"])
    elif kind == "aer_uncor_severity":
        attrs["uncor_severity"] = f["uncor_severity"]


def finish(attrs: dict[str, Any], nvidia_cant_recover: bool = False) -> str:
    """Complete a record's attrs (in place) and return the event's category.

    Without bit lines the errors are decoded from ``status & ~mask``; ``first_error`` is the bit
    line marked ``(First)``. A ``pci_print_aer`` record (firmware-first) prints no severity: an
    ``aer_uncor_severity`` line makes it uncorrectable, fatal when an unmasked status bit is set
    in that Uncorrectable Error Severity register, else it is correctable. An uncorrected error
    on an NVIDIA function (driver ``nvidia``, vendor 0x10de) or one the NVIDIA driver could not
    recover from (``nvidia_cant_recover``) is a ``gpu_lost_precursor`` (:func:`is_precursor`);
    else the category is the severity.
    """
    if attrs.get("severity") is None:
        sev_reg = attrs.get("uncor_severity")
        if sev_reg is None:
            attrs["severity"] = "corrected"
        else:
            unmasked = (attrs.get("status") or 0) & ~(attrs.get("mask") or 0)
            attrs["severity"] = "fatal" if unmasked & sev_reg else "non_fatal"
    if not attrs["errors"] and attrs.get("status") is not None:
        attrs["errors"] = decode_status(attrs["status"], attrs.get("mask") or 0, attrs["severity"])
    first = [e["name"] for e in attrs["errors"] if e["first"]]
    attrs["first_error"] = first[0] if first else None
    sev = attrs["severity"]
    if is_precursor(sev, attrs.get("driver"), attrs.get("vendor_id"), nvidia_cant_recover):
        return PRECURSOR
    return sev


def is_precursor(severity: str | None, driver: str | None, vendor_id: int | None,
                 nvidia_cant_recover: bool = False) -> bool:
    """Is an AER error record a GPU-lost precursor? ``severity``: the record's (``corrected``,
    ``non_fatal``, ``fatal``; anything else, ``unknown`` or None, is no known uncorrected error);
    ``driver``: the dev_printk prefix word of the device the error is about (None when not
    printed); ``vendor_id``: its PCI vendor (int, None when not printed); ``nvidia_cant_recover``:
    an ``nvidia`` function printed ``can't recover (no error_detected callback)`` (or ``device
    recovery failed``) for the record: a recovery line :func:`recovery_category` would call a
    precursor alone.

    True for an uncorrected error (``non_fatal`` or ``fatal``) on an NVIDIA function (driver
    ``nvidia`` or vendor :data:`NVIDIA_VENDOR`, 0x10de) or one the nvidia driver could not recover
    from: the driver registers no AER error_detected callback (drivers/pci/pcie/err.c
    ``report_error_detected``), so the GPU is left unrecovered. Pure; never raises."""
    return severity in UNCORRECTED and (nvidia_cant_recover or driver == "nvidia" or vendor_id == NVIDIA_VENDOR)


def recovery_category(f: dict[str, Any], in_record: bool = False) -> str:
    """A ``pcie_aer_recovery`` event's category (``f``: :func:`parse_line`'s ``recovery`` fields).

    A line that joined an AER record (``in_record``) has its ``outcome``: the record carries the
    precursor (:func:`finish`), so one error is one precursor. A line with no record (its record
    not in the log, or printed before it) is ``gpu_lost_precursor`` when the NVIDIA driver could
    not recover (``no_error_detected_callback``) or its recovery failed (``recovery_failed``),
    else its outcome."""
    if (not in_record and f["driver"] == "nvidia"
            and f["outcome"] in ("no_error_detected_callback", "recovery_failed")):
        return PRECURSOR
    return f["outcome"]

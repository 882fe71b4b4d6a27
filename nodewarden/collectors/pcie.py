"""PCIe AER error counters and link state of the GPUs' and NICs' functions, from
``/sys/bus/pci/devices``.

Kernel ABI: ``Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats`` (``aer_dev_correctable``,
``aer_dev_fatal``, ``aer_dev_nonfatal``: one ``<error> <count>`` line per error bit, then
``TOTAL_ERR_COR``/``TOTAL_ERR_FATAL``/``TOTAL_ERR_NONFATAL``) and ``Documentation/ABI/testing/
sysfs-bus-pci`` (``current_link_speed``, ``max_link_speed``, ``current_link_width``,
``max_link_width``, ``vendor``, ``device``, ``class``).

Only NVIDIA (vendor 0x10de: GPUs, NVSwitches) and Mellanox/NVIDIA networking (0x15b3) physical
functions are read; SR-IOV virtual functions (a ``physfn`` link) are left out to bound the
series count, as in :mod:`nodewarden.validator.checks.links`. Series:

* ``nodewarden_pcie_aer_errors_total{pci_bus_id,severity="correctable|fatal|nonfatal",error}``:
  ``error`` is the kernel's short name (``RxErr``, ``BadTLP``, ``CmpltTO``…); kernels 4.19-5.x
  printed long names (``Receiver Error``, ``Completion Timeout``…), which are mapped to the
  short ones so that one error keeps one label across kernels. The ``TOTAL_*`` lines are not
  exported: they count error *messages* (one message may carry several bits) and would break
  ``sum by (pci_bus_id)``.
* ``nodewarden_pcie_link_generation{pci_bus_id,which="current|max"}``,
  ``nodewarden_pcie_link_width{pci_bus_id,which}`` (a width of 0, a link that is down, is 0).
* ``nodewarden_pcie_device_info{pci_bus_id,vendor,device,class} 1``.
* ``nodewarden_collector_unreadable_files{collector="pcie"}``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot, SysfsReader
from nodewarden.parsing.pci import normalize_pci
from nodewarden.validator.checks.links import MELLANOX, NVIDIA, listdir, pcie_generation, pcie_width

NAME = "pcie"
UNREADABLE = "nodewarden_collector_unreadable_files"
VENDORS = (NVIDIA, MELLANOX)
AER_FILES = (("aer_dev_correctable", "correctable"), ("aer_dev_fatal", "fatal"), ("aer_dev_nonfatal", "nonfatal"))
# Long names printed before drivers/pci/pcie/aer.c switched to the short ones (the ABI
# document's sample output) -> the short names printed since.
LONG_NAMES = {
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
HELP = {
    "nodewarden_pcie_aer_errors_total": "PCIe AER errors reported by this function, by severity and error bit (sysfs aer_dev_*).",
    "nodewarden_pcie_link_generation": "PCIe link generation (1-7) from current/max_link_speed.",
    "nodewarden_pcie_link_width": "PCIe link width in lanes from current/max_link_width (0: link down).",
    "nodewarden_pcie_device_info": "NVIDIA/Mellanox PCI function identity; always 1.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll.",
}
_LINE = re.compile(r"^(?P<name>\S(?:.*\S)?)\s+(?P<count>\d+)$")


# ---- pure ------------------------------------------------------------------------------------

def parse_aer(text: str) -> tuple[dict[str, int], int]:
    """An ``aer_dev_*`` file -> ({error: count} without the TOTAL_* line, bad lines).

    ``RxErr 0\\nBadTLP 3\\n...TOTAL_ERR_COR 3`` -> {"RxErr": 0, "BadTLP": 3, ...}; long names
    (``Bad TLP 3``) become short ones (``BadTLP``)."""
    out: dict[str, int] = {}
    bad = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            bad += 1
            continue
        name = m.group("name")
        if name.startswith("TOTAL_"):
            continue
        name = LONG_NAMES.get(name, name)
        out[name] = out.get(name, 0) + int(m.group("count"))
    return out, bad


def parse_hex(text: str | None) -> int | None:
    """``0x10de`` -> 0x10de; None or garbage -> None."""
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def link_width(text: str | None) -> int | None:
    """``16`` -> 16, ``0`` (link down) -> 0, unreadable -> None."""
    width = pcie_width(text)
    if width is None and text is not None and text.strip().lstrip("x") == "0":
        return 0
    return width


# ---- collector -------------------------------------------------------------------------------

class PcieCollector:
    """Polls ``<sysfs>/bus/pci/devices``. No NVIDIA/Mellanox function: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys") -> None:
        self.sysfs = Path(sysfs)

    def collect(self) -> Snapshot:
        snap = Snapshot()
        root = self.sysfs / "bus" / "pci" / "devices"
        r = SysfsReader()
        found = False
        for bdf in sorted(listdir(root), key=lambda b: normalize_pci(b) or b):  # bus order
            d = root / bdf
            vendor = parse_hex(r.text(d / "vendor"))
            if vendor not in VENDORS or os.path.lexists(d / "physfn"):
                continue
            found = True
            try:
                self._function(snap, r, d, normalize_pci(bdf) or bdf, vendor)
            except OSError:  # hot-removed while being read (a GPU that fell off the bus)
                r.unreadable += 1
        if found:
            snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        return snap

    @staticmethod
    def _function(snap: Snapshot, r: SysfsReader, d: Path, pci: str, vendor: int) -> None:
        bus = (("pci_bus_id", pci),)
        device, cls = r.text(d / "device") or "", r.text(d / "class") or ""
        snap.add("nodewarden_pcie_device_info", bus + (("vendor", f"0x{vendor:04x}"), ("device", device),
                                                      ("class", cls)), 1, GAUGE, HELP["nodewarden_pcie_device_info"])
        for which, speed_f, width_f in (("current", "current_link_speed", "current_link_width"),
                                        ("max", "max_link_speed", "max_link_width")):
            gen = pcie_generation(r.text(d / speed_f))
            if gen is not None:
                snap.add("nodewarden_pcie_link_generation", bus + (("which", which),), gen, GAUGE,
                         HELP["nodewarden_pcie_link_generation"])
            width = link_width(r.text(d / width_f))
            if width is not None:
                snap.add("nodewarden_pcie_link_width", bus + (("which", which),), width, GAUGE,
                         HELP["nodewarden_pcie_link_width"])
        for fname, severity in AER_FILES:
            text = r.text(d / fname)
            if text is None:
                continue  # no AER capability, or a kernel before 4.19
            counts, bad = parse_aer(text)
            if bad:
                r.unreadable += 1  # a line that is not '<error> <count>'
            for error, value in counts.items():
                snap.add("nodewarden_pcie_aer_errors_total", bus + (("severity", severity), ("error", error)),
                         value, COUNTER, HELP["nodewarden_pcie_aer_errors_total"])

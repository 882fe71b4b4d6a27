"""PCIe AER error counters and link state of the GPUs' and NICs' functions, from
``/sys/bus/pci/devices``.

Kernel ABI: ``Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats`` (``aer_dev_correctable``,
``aer_dev_fatal``, ``aer_dev_nonfatal``: one ``<error> <count>`` line per error bit, then
``TOTAL_ERR_COR``/``TOTAL_ERR_FATAL``/``TOTAL_ERR_NONFATAL``) and ``Documentation/ABI/testing/
sysfs-bus-pci`` (``current_link_speed``, ``max_link_speed``, ``current_link_width``,
``max_link_width``, ``vendor``, ``device``, ``class``).

Only NVIDIA (vendor 0x10de: GPUs, NVSwitches) and Mellanox/NVIDIA networking (0x15b3) physical
functions are read, by :func:`nodewarden.sysfs.pci.read_functions` (the records the links check
judges too); SR-IOV virtual functions (a ``physfn`` link) are left out to bound the series
count. Series:

* ``nodewarden_pcie_aer_errors_total{pci_bus_id,severity="correctable|fatal|nonfatal"}``: per
  function and ``aer_dev_<severity>`` file, the sum of that file's error-bit counts (the bit
  lines that parse; a line that does not counts in ``unreadable_files``). Exported from the
  first poll for every function that has the file, 0 included, so that ``increase()`` and the
  mixin's ``window_increase`` see the first error as a rise of a series that was already there.
  The ``TOTAL_ERR_*`` line is not this sum and is not exported: it counts error *messages* (one
  message may carry several bits; the ``pcie_aer`` events below count those).
* ``nodewarden_pcie_aer_bit_errors_total{pci_bus_id,severity,error}``: the count of one error
  bit, only for the bits whose count is non-zero now or was at any poll since the agent started.
  ``error`` is the kernel's short name (``RxErr``, ``BadTLP``, ``CmpltTO``…); kernels 4.19-5.x
  printed long names (``Receiver Error``, ``Completion Timeout``…), which are mapped to the
  short ones so that one error keeps one label across kernels. A bit whose count is 0 carries no
  fact (on the 8-GPU HGX H100 tree h100-hgx-ndr-aer, 965 of the 968 bit lines are 0: a series
  for each was almost half of the node's series), so a bit's series is born at its first count,
  which the mixin's ``increase_with_first`` counts as new (and the totals above, through
  ``window_increase``). A bit once exported stays exported while its function is
  present, also when its count drops to 0 (the kernel zeroes the counters of a function it
  removes and adds again, a reset), so that Prometheus sees the counter reset; a function gone
  from a poll is forgotten, and its bits are born again at their next count.
* ``nodewarden_pcie_link_generation{pci_bus_id,which="current|max"}``,
  ``nodewarden_pcie_link_width{pci_bus_id,which}`` (:func:`~nodewarden.sysfs.pci.pcie_generation`,
  :func:`~nodewarden.sysfs.pci.pcie_width`: a width of 0, a link that is down, is 0).
* ``nodewarden_pcie_device_info{pci_bus_id,vendor,device,class} 1``.
* ``nodewarden_collector_unreadable_files{collector="pcie"}``.

Events: a ``pcie_aer`` event (source ``sysfs``, ``attrs.via="sysfs"``) per function and
severity whose error *records* rose since the previous poll (the ``TOTAL_ERR_*`` line: the
kernel adds one per record it handled, in ``pci_dev_aer_stats_incr()`` of
drivers/pci/pcie/aer.c, before it decides whether to print it). The first poll of a function is
its baseline (no event); a count that went down (the function was removed and added again)
starts a new baseline. These events are *candidates*: the same record is usually in the kernel
log too, and the agent keeps only the records the log did not print
(:mod:`nodewarden.agent.aer`), so that one error is one event.
"""

from __future__ import annotations

from pathlib import Path

from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.events import PCIE_AER, FaultEvent
from nodewarden.parsing import aer
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs
from nodewarden.sysfs.pci import AER_FILES, TOTAL_LINE, AerStats, Function, parse_hex, read_functions

NAME = "pcie"
UNREADABLE = "nodewarden_collector_unreadable_files"
HELP = {
    "nodewarden_pcie_aer_errors_total": "PCIe AER errors reported by this function, by severity: the sum of the "
                                        "error-bit counts of its sysfs aer_dev_* file.",
    "nodewarden_pcie_aer_bit_errors_total": "PCIe AER errors reported by this function, by severity and error bit "
                                            "(sysfs aer_dev_*); only the bits that counted since the agent started.",
    "nodewarden_pcie_link_generation": "PCIe link generation (1-7) from current/max_link_speed.",
    "nodewarden_pcie_link_width": "PCIe link width in lanes from current/max_link_width (0: link down).",
    "nodewarden_pcie_device_info": "NVIDIA/Mellanox PCI function identity; always 1.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll.",
}
# aer_dev_* file severity -> the pcie_aer event's severity (the kernel-log events' words)
EVENT_SEVERITY = {"correctable": "corrected", "nonfatal": "non_fatal", "fatal": "fatal"}

Reading = tuple[int | None, dict[str, int]]  # one aer_dev_* file: (TOTAL_ERR_* or None, {error: count})


# ---- pure ------------------------------------------------------------------------------------

def aer_rise(before: Reading | None, now: Reading) -> tuple[int, dict[str, int]] | None:
    """(records, {error: rise}) between two readings ``(total, {error: count})`` of one
    ``aer_dev_*`` file, or None: no earlier reading (a baseline), nothing rose, or a count went
    down (the function was removed and added again: a new baseline). ``records`` is the
    ``TOTAL_ERR_*`` rise; without that line, 1 when any error bit rose."""
    if before is None:
        return None
    t0, c0 = before
    t1, c1 = now
    if t0 is not None and t1 is not None and t1 < t0:
        return None
    if any(c1.get(k, 0) < v for k, v in c0.items()):
        return None
    bits = {k: v - c0.get(k, 0) for k, v in c1.items() if v > c0.get(k, 0)}
    if t0 is not None and t1 is not None:
        records = t1 - t0
    else:
        records = 1 if bits else 0
    if records <= 0:
        return None
    return records, bits


# ---- collector -------------------------------------------------------------------------------

class PcieCollector:
    """Polls ``<sysfs>/bus/pci/devices``. No NVIDIA/Mellanox function: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys") -> None:
        self.sysfs = Path(sysfs)
        self._static = StaticAttrs()  # vendor, device, class, max link: read once per function directory
        # (pci_bus_id, aer file severity) -> (TOTAL_ERR_* or None, {error: count}): the last poll's
        # readings (_aer) and this poll's (_seen)
        self._aer: dict[tuple[str, str], Reading] = {}
        self._seen: dict[tuple[str, str], Reading] = {}
        # pci_bus_id -> {(severity, error)}: the error bits seen non-zero since the agent started
        # (or since the function came back), exported from then on while the function is present
        self._bits: dict[str, set[tuple[str, str]]] = {}

    def collect(self) -> Snapshot:
        snap = Snapshot()
        self._seen = {}
        r = AttrReader()
        # NVIDIA and Mellanox, in bus order; the ports above them are the links check's, not exported here
        functions = read_functions(self.sysfs, r, static=self._static, upstream=False)
        for f in functions:
            self._function(snap, f)
        present = {f.pci_bus_id for f in functions}
        self._bits = {pci: bits for pci, bits in self._bits.items() if pci in present}  # gone: forgotten
        if functions or r.unreadable:  # files found unreadable count even when no function survived them
            snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        self._aer = self._seen  # a function gone this poll starts a new baseline when it is back
        return snap

    def _aer_event(self, snap: Snapshot, f: Function, severity: str, reading: Reading) -> None:
        pci = f.pci_bus_id
        key = (pci, severity)
        self._seen[key] = reading
        rise = aer_rise(self._aer.get(key), reading)
        if rise is None:
            return
        records, bits = rise
        sev = EVENT_SEVERITY[severity]
        # An uncorrected error on an NVIDIA function precedes a GPU falling off the bus (the
        # nvidia driver has no AER recovery callbacks), as for the kernel-log pcie_aer events.
        category = aer.PRECURSOR if aer.is_precursor(sev, None, f.vendor) else sev
        names = ", ".join(f"{k} +{v}" for k, v in sorted(bits.items())) or "no error bit"
        snap.events.append(FaultEvent(
            kind=PCIE_AER, source="sysfs", device=pci, category=category,
            message=f"{pci}: {records} {sev} AER error record(s) counted in sysfs ({names})",
            raw=f"{pci} aer_dev_{severity} {TOTAL_LINE[severity]} +{records}",
            attrs={"pci_bus_id": pci, "severity": sev, "via": "sysfs", "count": records,
                   "error_counts": dict(sorted(bits.items())), "vendor_id": f.vendor,
                   "device_id": parse_hex(f.device or "")}))

    def _function(self, snap: Snapshot, f: Function) -> None:
        pci = f.pci_bus_id
        bus = (("pci_bus_id", pci),)
        snap.add("nodewarden_pcie_device_info", bus + (("vendor", f"0x{f.vendor:04x}"), ("device", f.device or ""),
                                                      ("class", f.pci_class or "")), 1, GAUGE,
                 HELP["nodewarden_pcie_device_info"])
        for which, gen, width in (("current", f.link.generation, f.link.lanes),
                                  ("max", f.link.max_generation, f.link.max_lanes)):
            if gen is not None:
                snap.add("nodewarden_pcie_link_generation", bus + (("which", which),), gen, GAUGE,
                         HELP["nodewarden_pcie_link_generation"])
            if width is not None:
                snap.add("nodewarden_pcie_link_width", bus + (("which", which),), width, GAUGE,
                         HELP["nodewarden_pcie_link_width"])
        for _fname, severity in AER_FILES:
            stats: AerStats | None = f.aer.get(severity)
            if stats is None:
                if (pci, severity) in self._aer:  # unreadable this once: the last reading stays the baseline
                    self._seen[(pci, severity)] = self._aer[(pci, severity)]
                continue  # no AER capability, or a kernel before 4.19
            self._aer_event(snap, f, severity, (stats.records, dict(stats.counts)))
            snap.add("nodewarden_pcie_aer_errors_total", bus + (("severity", severity),), sum(stats.counts.values()),
                     COUNTER, HELP["nodewarden_pcie_aer_errors_total"])
            seen = self._bits.setdefault(pci, set())
            for error, value in stats.counts.items():
                if value or (severity, error) in seen:
                    seen.add((severity, error))
                    snap.add("nodewarden_pcie_aer_bit_errors_total",
                             bus + (("severity", severity), ("error", error)), value, COUNTER,
                             HELP["nodewarden_pcie_aer_bit_errors_total"])

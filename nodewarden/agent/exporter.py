"""The agent's Prometheus series: what each FaultEvent adds, the counter store, and the
custom collector that renders a snapshot of it on each scrape.

Series (prefix ``nodewarden_``, base units; ``P`` = persisted in ``state.json`` across restarts,
so a counter only resets when the state directory is lost):

===========================================================  =======  =====  ======================================================
series                                                       type     P      meaning / source
===========================================================  =======  =====  ======================================================
``gpu_xid_errors_total{gpu,pci_bus_id,xid,category}``        counter  yes    one per Xid event (NVRM ``Xid (PCI:...): N`` or the
                                                                             text-only "fallen off the bus" form, counted as 79).
                                                                             ``gpu``: NVIDIA device minor from
                                                                             ``<procfs>/driver/nvidia/gpus/<pci_bus_id>/information``
                                                                             ("Device Minor:"), ``""`` when absent; ``category``:
                                                                             the Xid group from :func:`nodewarden.catalog.group_of`.
``edac_correctable_errors_total{controller,dimm}``           counter  yes    EDAC ``N CE`` lines (and ``Deferred``): adds N.
                                                                             ``controller`` ``mc<N>``, ``dimm`` the EDAC label.
``edac_uncorrectable_errors_total{controller,dimm}``         counter  yes    EDAC ``N UE`` lines (and ``Fatal``): adds N.
``mce_events_total{type}``                                   counter  yes    one per machine-check record; ``type``
                                                                             ``corrected``/``uncorrected`` (MCi_STATUS.UC, or the
                                                                             ``Machine Check Exception`` form).
``ib_link_events_total{device,port,state}``                  counter  yes    IB core ``<rdma dev>: Port: P Link <STATE>`` lines;
                                                                             ``state`` as printed (DOWN, ACTIVE, INIT, ARMED,
                                                                             ACTIVE_DEFER).
``collector_events_total{collector,kind}``                   counter  yes    every event the kernel-log collector emitted, by
                                                                             :data:`nodewarden.events.KINDS` kind (incl. kinds
                                                                             without a series of their own: ``net_link_down``,
                                                                             ``nic_module_event``, ``unparsed``...).
``collector_unparsed_lines_total{collector}``                counter  yes    fault-looking records the parsers could not read
                                                                             (kept raw in the journal).
``collector_kmsg_overruns_total``                            counter  yes    times the reader fell behind the ring buffer
                                                                             (``read()`` gave EPIPE: records were lost).
``collector_kmsg_lost_records_total``                        counter  yes    records known lost: gaps in ``/dev/kmsg`` sequence
                                                                             numbers (an overrun, or the ring buffer wrapped past
                                                                             the saved cursor while the agent was down).
``collector_state_write_errors_total``                       counter  no     failed writes of ``state.json`` or of the event
                                                                             journal (read-only or full state directory).
``collector_success{collector}``                             gauge    no     1 when the collector's last run worked, else 0
                                                                             (``kernel_log``: ``/dev/kmsg`` open and readable).
``collector_duration_seconds{collector}``                    gauge    no     seconds the collector's last run took
                                                                             (``kernel_log``: read, parse, count, journal, persist
                                                                             one batch of records).
``build_info{version}``                                      gauge    no     1; ``version`` is :data:`nodewarden.__version__`.
===========================================================  =======  =====  ======================================================

Cardinality is bounded by the hardware: GPUs x Xid codes seen, DIMMs, IB ports, event kinds.

The exporter follows prometheus/client_python's custom-collector pattern: no global metric
objects; :class:`Counters` holds plain numbers under a lock, and :class:`AgentCollector` yields
fresh metric families from a snapshot on each scrape, samples sorted by label values.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from nodewarden import __version__
from nodewarden import events as ev
from nodewarden.events import FaultEvent

log = logging.getLogger(__name__)

PREFIX = "nodewarden_"
KERNEL_LOG = "kernel_log"  # the collector name: registry key and `collector` label value


@dataclasses.dataclass(frozen=True)
class Family:
    """One metric family: its full name (counters end in ``_total``), type, help, label names,
    and whether its values survive a restart (stored in ``state.json``)."""

    name: str
    type: str  # "counter" or "gauge"
    help: str
    labels: tuple[str, ...] = ()
    persist: bool = True


XID = Family(PREFIX + "gpu_xid_errors_total", "counter",
             "NVIDIA Xid errors reported in the kernel log.", ("gpu", "pci_bus_id", "xid", "category"))
EDAC_CE = Family(PREFIX + "edac_correctable_errors_total", "counter",
                 "Corrected memory errors reported by EDAC in the kernel log.", ("controller", "dimm"))
EDAC_UE = Family(PREFIX + "edac_uncorrectable_errors_total", "counter",
                 "Uncorrected memory errors reported by EDAC in the kernel log.", ("controller", "dimm"))
MCE = Family(PREFIX + "mce_events_total", "counter",
             "Machine-check records in the kernel log, by severity.", ("type",))
IB_LINK = Family(PREFIX + "ib_link_events_total", "counter",
                 "InfiniBand port state changes reported in the kernel log.", ("device", "port", "state"))
EVENTS = Family(PREFIX + "collector_events_total", "counter",
                "Fault events emitted by a collector, by kind.", ("collector", "kind"))
UNPARSED = Family(PREFIX + "collector_unparsed_lines_total", "counter",
                  "Fault-looking log records a collector could not parse (kept raw in the journal).", ("collector",))
OVERRUNS = Family(PREFIX + "collector_kmsg_overruns_total", "counter",
                  "Times the /dev/kmsg reader fell behind the kernel ring buffer (EPIPE).")
LOST = Family(PREFIX + "collector_kmsg_lost_records_total", "counter",
              "Kernel log records known lost (gaps in /dev/kmsg sequence numbers).")
STATE_ERRORS = Family(PREFIX + "collector_state_write_errors_total", "counter",
                      "Failed writes of the agent state file or event journal.", (), persist=False)
SUCCESS = Family(PREFIX + "collector_success", "gauge",
                 "Whether the collector's last run succeeded (1) or failed (0).", ("collector",), persist=False)
DURATION = Family(PREFIX + "collector_duration_seconds", "gauge",
                  "Duration of the collector's last run.", ("collector",), persist=False)
BUILD_INFO = Family(PREFIX + "build_info", "gauge", "nodewarden version; always 1.", ("version",), persist=False)

FAMILIES: tuple[Family, ...] = (XID, EDAC_CE, EDAC_UE, MCE, IB_LINK, EVENTS, UNPARSED, OVERRUNS, LOST,
                                STATE_ERRORS, SUCCESS, DURATION, BUILD_INFO)
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}

Increment = tuple[Family, tuple[str, ...], float]
SeriesKey = tuple[str, tuple[str, ...]]


# ---------------------------------------------------------------------------------------------
# GPU minor numbers

class GpuMinors:
    """NVIDIA device minor numbers (``/dev/nvidia<minor>``) by PCI bus id, read from the
    driver's procfs files ``<procfs>/driver/nvidia/gpus/<DDDD:BB:DD.F>/information``
    (line ``Device Minor: 	 3``). ``procfs`` is a parameter so tests use a fixture tree."""

    def __init__(self, procfs: str | os.PathLike[str] = "/proc") -> None:
        self.root = Path(procfs) / "driver" / "nvidia" / "gpus"

    def __call__(self, pci_bus_id: str | None) -> str:
        """The minor as a string, or ``""`` when the file or the line is absent (no driver,
        a GPU that fell off the bus, a bus id the driver does not know). Never raises."""
        if not pci_bus_id or "/" in pci_bus_id:
            return ""
        try:
            text = (self.root / pci_bus_id.lower() / "information").read_text(errors="replace")
        except OSError:
            return ""
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "Device Minor":
                return value.strip()
        return ""


# ---------------------------------------------------------------------------------------------
# Events -> increments (pure)

def increments(event: FaultEvent, gpu_of: Callable[[str | None], str], collector: str = KERNEL_LOG) -> list[Increment]:
    """The counter increments one event makes: always one in ``collector_events_total`` by kind,
    plus its own series (see the module table). ``gpu_of`` maps a PCI bus id to the ``gpu`` label."""
    out: list[Increment] = [(EVENTS, (collector, event.kind), 1.0)]
    a = event.attrs
    if event.kind == ev.XID and event.code is not None:
        pci = event.pci_bus_id or ""
        category = event.category or _group(event.code)
        out.append((XID, (gpu_of(pci) if pci else "", pci, str(event.code), category), 1.0))
    elif event.kind == ev.CPU_ECC and "mc" in a:
        fam = EDAC_UE if a.get("type") == "uncorrected" else EDAC_CE
        out.append((fam, (f"mc{a['mc']}", str(a.get("label", ""))), float(a.get("count", 1))))
    elif event.kind == ev.MCE:
        out.append((MCE, (str(a.get("type") or event.category or "corrected"),), 1.0))
    elif event.kind in (ev.IB_LINK_DOWN, ev.IB_LINK_UP, ev.IB_PORT_STATE) and "rdma_device" in a:
        out.append((IB_LINK, (str(a["rdma_device"]), str(a.get("port", "")), str(a.get("state", ""))), 1.0))
    elif event.kind == ev.UNPARSED:
        out.append((UNPARSED, (collector,), 1.0))
    return out


def _group(code: int) -> str:
    try:
        from nodewarden import catalog
        return catalog.group_of(code)
    except Exception:  # the catalog is data shipped with the package; a broken one costs a label only
        return "unknown"


# ---------------------------------------------------------------------------------------------
# The store

class Counters:
    """Thread-safe values of every series, keyed by (family name, label values in the family's
    label order). The follower adds; scrapes read a copy (:meth:`snapshot`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[SeriesKey, float] = {}

    def add(self, family: Family, labels: tuple[str, ...] = (), value: float = 1.0) -> None:
        """Add ``value`` (>= 0 for counters) to one series. Raises ValueError on a label mismatch."""
        if len(labels) != len(family.labels):
            raise ValueError(f"{family.name}: expected labels {family.labels}, got {labels}")
        key = (family.name, labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value

    def set(self, family: Family, labels: tuple[str, ...] = (), value: float = 0.0) -> None:
        """Set a gauge series."""
        if len(labels) != len(family.labels):
            raise ValueError(f"{family.name}: expected labels {family.labels}, got {labels}")
        with self._lock:
            self._values[(family.name, labels)] = value

    def add_all(self, incs: Iterable[Increment]) -> None:
        for fam, labels, value in incs:
            self.add(fam, labels, value)

    def get(self, family: Family, labels: tuple[str, ...] = ()) -> float:
        with self._lock:
            return self._values.get((family.name, labels), 0.0)

    def snapshot(self) -> dict[SeriesKey, float]:
        with self._lock:
            return dict(self._values)

    def to_json(self) -> list[dict[str, Any]]:
        """The persisted series as ``[{"name", "labels": {..}, "value"}]``, sorted."""
        snap = self.snapshot()
        out = []
        for (name, labels), value in sorted(snap.items()):
            fam = BY_NAME[name]
            if fam.persist:
                out.append({"name": name, "labels": dict(zip(fam.labels, labels)), "value": value})
        return out

    def load_json(self, items: Iterable[Mapping[str, Any]]) -> int:
        """Add persisted series (from :meth:`to_json`). Entries of unknown families or with other
        label names (a file from another version) are skipped and logged. Returns entries loaded."""
        n = 0
        for item in items:
            try:
                fam = BY_NAME[item["name"]]
                labels = item.get("labels") or {}
                if not fam.persist or set(labels) != set(fam.labels):
                    raise KeyError(item["name"])
                self.add(fam, tuple(str(labels[k]) for k in fam.labels), float(item["value"]))
                n += 1
            except (KeyError, TypeError, ValueError):
                log.warning("state: skipping a stored series this version does not know: %r", item)
        return n


# ---------------------------------------------------------------------------------------------
# The collector

class AgentCollector(Collector):
    """prometheus_client custom collector: one fresh family per :data:`FAMILIES` entry per scrape,
    from ``snapshot()`` (a :meth:`Counters.snapshot`). Families without samples are still
    yielded (HELP/TYPE only), so a scrape shows every series the agent can export.

    A snapshot that raises serves the last good one instead (a scrape never breaks)."""

    def __init__(self, snapshot: Callable[[], Mapping[SeriesKey, float]]) -> None:
        self._snapshot = snapshot
        self._last: Mapping[SeriesKey, float] = {}

    def collect(self) -> Iterator[Metric]:
        try:
            snap = self._snapshot()
            self._last = snap
        except Exception:
            log.exception("snapshot failed; serving the previous one")
            snap = self._last
        yield from families(snap)


def families(snap: Mapping[SeriesKey, float]) -> Iterator[Metric]:
    """Metric families for a snapshot, in :data:`FAMILIES` order, samples sorted by labels."""
    by_family: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for (name, labels), value in snap.items():
        by_family.setdefault(name, []).append((labels, value))
    for fam in FAMILIES:
        samples = sorted(by_family.get(fam.name, ()))
        if fam is BUILD_INFO:
            samples = [((__version__,), 1.0)]
        cls = CounterMetricFamily if fam.type == "counter" else GaugeMetricFamily
        metric = cls(fam.name, fam.help, labels=list(fam.labels))
        for labels, value in samples:
            metric.add_metric(list(labels), value)
        yield metric


def make_registry(snapshot: Callable[[], Mapping[SeriesKey, float]]) -> CollectorRegistry:
    """A registry holding only the agent's collector (no process/platform collectors)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(snapshot))
    return reg

"""The agent's Prometheus series: what each FaultEvent adds, the counter store, and the
custom collector that renders, on each scrape, a snapshot of it merged with the last snapshots
of the polled collectors (:mod:`nodewarden.agent.poller`).

The agent's own series (prefix ``nodewarden_``, base units; ``P`` = persisted in ``state.json``
across restarts, so a counter only resets when the state directory is lost):

===========================================================  =======  =====  ======================================================
series                                                       type     P      meaning / source
===========================================================  =======  =====  ======================================================
``gpu_xid_errors_total{gpu,pci_bus_id,xid,category}``        counter  yes    one per Xid event (NVRM ``Xid (PCI:...): N`` or the
                                                                             text-only "fallen off the bus" form, counted as 79).
                                                                             ``gpu``: NVIDIA device minor from
                                                                             ``<procfs>/driver/nvidia/gpus/<pci_bus_id>/information``
                                                                             ("Device Minor:"), ``""`` when absent; ``category``:
                                                                             the Xid group from :func:`nodewarden.catalog.group_of`.
``edac_logged_errors_total{controller,dimm,type}``           counter  yes    EDAC ``N CE``/``N UE`` lines of the kernel log (and
                                                                             ``Deferred``/``Fatal``): adds N. ``controller``
                                                                             ``mc<N>``, ``dimm`` the EDAC label, ``type``
                                                                             ``corrected``/``uncorrected``/``deferred`` (AMD
                                                                             deferred errors), ``unknown`` when the record gave
                                                                             no severity we know (a GHES/CPER record without one,
                                                                             or ``unknown``).
                                                                             Also a memory error seen without an
                                                                             EDAC line: a GHES/CPER memory-error section
                                                                             (``via=ghes``) or an AMD MCA decode of a UMC bank
                                                                             (``via=mca``), ``controller`` ``""`` (no memory
                                                                             controller named), ``dimm`` its label or ``""``; one
                                                                             error printed both ways is one event (the parser folds
                                                                             them). What the log said: the authoritative counts are
                                                                             the sysfs EDAC collector's
                                                                             ``edac_correctable_errors_total`` and
                                                                             ``edac_uncorrectable_errors_total`` (the kernel
                                                                             rate-limits its log; a full ring buffer drops lines).
``mce_events_total{type}``                                   counter  yes    one per machine-check record; ``type``
                                                                             ``corrected``/``uncorrected`` (MCi_STATUS.UC, or the
                                                                             ``Machine Check Exception`` form), ``deferred`` (AMD
                                                                             MCA status flag Deferred).
``nvswitch_sxid_errors_total{switch,pci_bus_id,sxid,severity}``  counter  yes  one per NVSwitch SXid error (``nvidia-nvswitchN:
                                                                             SXid (PCI:...): CODE, ...``, its ``Data``/description/
                                                                             ``Severity`` lines folded into one). ``switch`` as
                                                                             printed (``nvidia-nvswitch3``), ``pci_bus_id`` the
                                                                             switch's, ``severity`` ``fatal``/``non_fatal`` (from
                                                                             the text, else the SXid catalog) or ``unknown``.
``pcie_aer_logged_errors_total{pci_bus_id,severity}``        counter  yes    one per PCIe AER error record of the kernel log (the AER
                                                                             driver's ``PCIe Bus Error`` record with its lines, or a
                                                                             firmware-first GHES ``PCIe error`` section);
                                                                             ``pci_bus_id`` the device the error is about (the
                                                                             ``PCIe Bus Error`` line's), ``severity``
                                                                             ``corrected``/``non_fatal``/``fatal``, ``unknown``
                                                                             when the record gave none we know (a GHES/CPER record
                                                                             without one, or ``unknown``). The kernel
                                                                             counts every record in sysfs and rate-limits its log:
                                                                             the pcie collector's ``pcie_aer_errors_total`` (per
                                                                             function and severity; per error bit:
                                                                             ``pcie_aer_bit_errors_total``) is authoritative.
``pcie_aer_recovery_events_total{pci_bus_id,outcome}``       counter  yes    AER recovery lines: ``outcome``
                                                                             ``no_error_detected_callback`` (``can't recover``),
                                                                             ``recovery_failed``, ``recovered``, ``link_reset``.
``gpu_lost_precursor_events_total{gpu,pci_bus_id,reason}``   counter  yes    events that come before a GPU falls off the bus (Xid
                                                                             79), Xid or not: ``reason`` ``fatal_aer`` /
                                                                             ``non_fatal_aer`` (an uncorrected AER record on an
                                                                             NVIDIA function, or one the nvidia driver could not
                                                                             recover from: ``pci_bus_id`` that GPU,
                                                                             :func:`precursor_gpu`), ``aer_no_error_detected_callback``
                                                                             (``nvidia <bdf>: AER: can't recover``: the driver has
                                                                             no AER handler), ``aer_recovery_failed``: such a line
                                                                             with no AER record (category ``gpu_lost_precursor``);
                                                                             one that joined its record is that record's precursor.
                                                                             One error, one precursor.
``gpu_reset_required_events_total{gpu,pci_bus_id,action}``   counter  yes    the driver says a GPU must be reset or the node
                                                                             rebooted: an NVRM assertion with
                                                                             ``[NV_ERR_RESET_REQUIRED]`` (``action`` ``gpu_reset``;
                                                                             ``gpu``/``pci_bus_id`` ``""`` when the line names no
                                                                             GPU), an Xid 154 whose new recovery action is not
                                                                             ``none`` (``action`` that action: ``gpu_reset``,
                                                                             ``node_reboot``, ``drain_p2p``, ``drain_and_reset``...;
                                                                             the Xid counts in ``gpu_xid_errors_total`` too). NVML's
                                                                             current action is the nvml collector's gauge
                                                                             ``gpu_recovery_action{gpu,action}``.
``ib_link_events_total{device,port,state}``                  counter  yes    IB core ``<rdma dev>: Port: P Link <STATE>`` lines;
                                                                             ``state`` as printed (DOWN, ACTIVE, INIT, ARMED,
                                                                             ACTIVE_DEFER).
``ib_flash_cuts_total{device,port}``                         counter  yes    a port that left ACTIVE/LinkUp and was back within
                                                                             ``[flash_cut] max_seconds`` (kernel-log down/up pair,
                                                                             state change between polls, or a ``link_downed`` rise
                                                                             between two ACTIVE polls); from
                                                                             :class:`nodewarden.parsing.flashcut.FlashCutDetector`.
``ib_link_outages_total{device,port}``                       counter  yes    the same, back later than ``max_seconds``.
``collector_events_total{collector,kind}``                   counter  yes    every event a collector emitted, by
                                                                             :data:`nodewarden.events.KINDS` kind (incl. kinds
                                                                             without a series of their own: ``net_link_down``,
                                                                             ``nic_module_event``, ``unparsed``...). The series
                                                                             above count kernel-log events only; ``collector``
                                                                             ``flash_cut`` holds the detector's own events;
                                                                             ``collector="pcie",kind="pcie_aer"`` the AER records
                                                                             sysfs counted and the kernel log did not print
                                                                             (:mod:`nodewarden.agent.aer`: one error, one event).
``collector_unparsed_lines_total{collector}``                counter  yes    fault-looking records the parsers could not read
                                                                             (kept raw in the journal).
``collector_kmsg_overruns_total``                            counter  yes    times the reader fell behind the ring buffer
                                                                             (``read()`` gave EPIPE: records were lost).
``collector_kmsg_lost_records_total``                        counter  yes    records known lost: gaps in ``/dev/kmsg`` sequence
                                                                             numbers (an overrun, or the ring buffer wrapped past
                                                                             the saved cursor while the agent was down).
``collector_kmsg_injected_records_total{kind}``              counter  yes    records user space wrote into ``/dev/kmsg`` (syslog
                                                                             facility not ``kern``: ``echo ... > /dev/kmsg``,
                                                                             ``logger --kmsg``, a test suite) that read like a fault
                                                                             of ``kind``: one per event they would make. Never
                                                                             counted in the fault series above nor journaled, unless
                                                                             ``[kernel_log] accept_injected = true``.
``collector_state_write_errors_total``                       counter  no     failed writes of ``state.json`` or of the event
                                                                             journal (read-only or full state directory).
``collector_journal_bytes``                                  gauge    no     bytes in the event journal files (bounded by
                                                                             ``[journal] max_bytes``).
``collector_journal_dropped_records_total{reason}``          counter  no     records counted but not journaled: ``day_bytes``,
                                                                             ``total_bytes`` (``[journal] max_day_bytes``,
                                                                             ``max_bytes``), ``source_rate`` (one (kind, device)
                                                                             past its token bucket), ``write_error``.
``collector_success{collector}``                             gauge    no     1 when the collector's last run worked, else 0
                                                                             (``kernel_log``: ``/dev/kmsg`` open and readable; a
                                                                             polled collector: its last ``collect()`` returned in
                                                                             time, 0 while it raises or hangs).
``collector_duration_seconds{collector}``                    gauge    no     seconds the collector's last completed run took
                                                                             (``kernel_log``: read, parse, count, journal, persist
                                                                             one batch of records).
``collector_last_success_timestamp_seconds{collector}``      gauge    no     Unix time the polled collector last succeeded.
``validator_check_status{check,status}``                     gauge    no     1 for each check's status in the last report in the
                                                                             state directory (``validate.json``: the agent's
                                                                             scheduled run or any other), 0 for the other
                                                                             statuses (:mod:`nodewarden.agent.schedule`).
``validator_check_value{check,metric,unit,device}``          gauge    no     the report's numeric measurements.
``validator_check_threshold{check,metric,unit,device,bound}``  gauge  no     the threshold each measurement was held to;
                                                                             ``bound`` ``min`` (the value must be >= it) or
                                                                             ``max`` (<= it).
``validator_last_run_timestamp_seconds``                     gauge    no     ``finished`` time of the report exported.
``validator_last_exit_code``                                 gauge    no     exit code of the last run (0 healthy, 1 unhealthy,
                                                                             2 usage, 3 incomplete; 127 could not start;
                                                                             negative: killed by that signal, -15 or -9 after
                                                                             its timeout).
``validator_last_attempt_timestamp_seconds``                 gauge    no     Unix time the last run started.
``validator_next_run_timestamp_seconds``                     gauge    no     when the next run is due (or retried, GPUs busy).
``build_info{version}``                                      gauge    no     1; ``version`` is :data:`nodewarden.__version__`.
===========================================================  =======  =====  ======================================================

The validator series are not in ``state.json``: they are read back from ``validate.json`` and
``schedule.json`` at start.

Polled collectors' series (:class:`nodewarden.collectors.base.Sample`) are exported as given,
after a contract check (:func:`check_samples`): a name outside ``nodewarden_``, an invalid
metric or label name, a counter without ``_total`` (or a gauge with it), a name the agent
exports itself, a name given with two types, or a series (name and label set) given twice is
logged once and dropped, so that the output never holds the same series twice.

Cardinality is bounded by the hardware: GPUs x Xid codes seen, DIMMs, IB ports, event kinds,
validator checks and their measurements. Per node, for the kernel-log kinds of NVSwitch, PCIe and
reset faults: SXid, NVSwitches (4 on an HGX H100/H200 board) x SXid codes seen x 3 severities (one
in practice: a code has one severity); AER logged, PCI functions that reported an error x 3 severities
(root ports and endpoints: a few dozen on an 8-GPU node); AER recovery, those functions x 4
outcomes (+ ``other``); GPU-lost precursors and reset-required, GPUs x 4 reasons / x 5 actions
(+ ``unknown``), plus one ``gpu=""``/``pci_bus_id=""`` series for reset-required lines that
name no GPU.

The exporter follows prometheus/client_python's custom-collector pattern: no global metric
objects; :class:`Counters` holds plain numbers under a lock, and :class:`AgentCollector` builds
fresh families (:class:`~nodewarden.agent.textformat.Block`) from a snapshot, samples sorted by
label values. :class:`Exposition` writes them with :mod:`nodewarden.agent.textformat` (the bytes
of prometheus_client's encoders, without importing the library into the agent);
:meth:`AgentCollector.collect` yields them as prometheus_client families for a registry
(:func:`make_registry`, what the tests compare the bytes with).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import gzip
import logging
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Iterator, Mapping

from nodewarden import __version__
from nodewarden import events as ev
from nodewarden.agent import textformat as tf
from nodewarden.agent.textformat import Block
from nodewarden.catalog import sxid as sxid_catalog
from nodewarden.collectors.base import COUNTER, GAUGE, Sample
from nodewarden.events import FaultEvent
from nodewarden.parsing import aer
from nodewarden.parsing import xid as xid_parser

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

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
EDAC_LOGGED = Family(PREFIX + "edac_logged_errors_total", "counter",
                     "Memory errors reported by EDAC in the kernel log (the sysfs EDAC counters are authoritative).",
                     ("controller", "dimm", "type"))
MCE = Family(PREFIX + "mce_events_total", "counter",
             "Machine-check records in the kernel log, by severity.", ("type",))
SXID = Family(PREFIX + "nvswitch_sxid_errors_total", "counter",
              "NVSwitch SXid errors reported in the kernel log (one per error, its lines folded).",
              ("switch", "pci_bus_id", "sxid", "severity"))
AER_LOGGED = Family(PREFIX + "pcie_aer_logged_errors_total", "counter",
                    "PCIe AER error records in the kernel log (AER driver or firmware-first GHES), by the device "
                    "the error is about; the sysfs pcie_aer_errors_total counters are authoritative.",
                    ("pci_bus_id", "severity"))
AER_RECOVERY = Family(PREFIX + "pcie_aer_recovery_events_total", "counter",
                      "PCIe AER recovery outcomes reported in the kernel log.", ("pci_bus_id", "outcome"))
GPU_LOST_PRECURSOR = Family(PREFIX + "gpu_lost_precursor_events_total", "counter",
                            "Kernel-log events that precede a GPU falling off the bus: an uncorrected AER error on "
                            "an NVIDIA function, the nvidia driver unable to recover from one.",
                            ("gpu", "pci_bus_id", "reason"))
GPU_RESET_REQUIRED = Family(PREFIX + "gpu_reset_required_events_total", "counter",
                            "Kernel-log reports that a GPU needs a reset or the node a reboot (NV_ERR_RESET_REQUIRED "
                            "assertions, Xid 154 to an action other than none), by action.",
                            ("gpu", "pci_bus_id", "action"))
IB_LINK = Family(PREFIX + "ib_link_events_total", "counter",
                 "InfiniBand port state changes reported in the kernel log.", ("device", "port", "state"))
FLASH_CUTS = Family(PREFIX + "ib_flash_cuts_total", "counter",
                    "InfiniBand port drops shorter than the flash-cut limit (flash cuts).", ("device", "port"))
OUTAGES = Family(PREFIX + "ib_link_outages_total", "counter",
                 "InfiniBand port drops longer than the flash-cut limit.", ("device", "port"))
EVENTS = Family(PREFIX + "collector_events_total", "counter",
                "Fault events emitted by a collector, by kind.", ("collector", "kind"))
UNPARSED = Family(PREFIX + "collector_unparsed_lines_total", "counter",
                  "Fault-looking log records a collector could not parse (kept raw in the journal).", ("collector",))
OVERRUNS = Family(PREFIX + "collector_kmsg_overruns_total", "counter",
                  "Times the /dev/kmsg reader fell behind the kernel ring buffer (EPIPE).")
LOST = Family(PREFIX + "collector_kmsg_lost_records_total", "counter",
              "Kernel log records known lost (gaps in /dev/kmsg sequence numbers).")
INJECTED = Family(PREFIX + "collector_kmsg_injected_records_total", "counter",
                  "Records written into /dev/kmsg by user space (facility not kern) that read like faults; "
                  "not counted as faults.", ("kind",))
STATE_ERRORS = Family(PREFIX + "collector_state_write_errors_total", "counter",
                      "Failed writes of the agent state file or event journal.", (), persist=False)
JOURNAL_BYTES = Family(PREFIX + "collector_journal_bytes", "gauge",
                       "Bytes in the agent's event journal files.", (), persist=False)
JOURNAL_DROPPED = Family(PREFIX + "collector_journal_dropped_records_total", "counter",
                         "Event records counted but not journaled, by reason: day_bytes, total_bytes "
                         "(the journal's size bounds), source_rate (one source's token bucket), write_error.",
                         ("reason",), persist=False)
SUCCESS = Family(PREFIX + "collector_success", "gauge",
                 "Whether the collector's last run succeeded (1) or failed (0).", ("collector",), persist=False)
DURATION = Family(PREFIX + "collector_duration_seconds", "gauge",
                  "Duration of the collector's last completed run.", ("collector",), persist=False)
LAST_SUCCESS = Family(PREFIX + "collector_last_success_timestamp_seconds", "gauge",
                      "Unix time of the collector's last successful run.", ("collector",), persist=False)
VAL_STATUS = Family(PREFIX + "validator_check_status", "gauge",
                    "Status of each check in the last validator report (validate.json; 1 for the status it has).",
                    ("check", "status"), persist=False)
VAL_VALUE = Family(PREFIX + "validator_check_value", "gauge",
                   "Values measured by the last validator report (validate.json).", ("check", "metric", "unit", "device"),
                   persist=False)
VAL_THRESHOLD = Family(PREFIX + "validator_check_threshold", "gauge",
                       "Thresholds the last validator report (validate.json) held its measurements to (bound min: "
                       "the value must be at least this; max: at most this).", ("check", "metric", "unit", "device", "bound"),
                       persist=False)
VAL_LAST_RUN = Family(PREFIX + "validator_last_run_timestamp_seconds", "gauge",
                      "End of the validator run whose report is exported (Unix time).", (), persist=False)
VAL_EXIT = Family(PREFIX + "validator_last_exit_code", "gauge",
                  "Exit code of the last validator run: the agent's own (negative: killed by that signal) "
                  "or the exit_code of a report another runner wrote.", (),
                  persist=False)
VAL_ATTEMPT = Family(PREFIX + "validator_last_attempt_timestamp_seconds", "gauge",
                     "Start of the last scheduled validator run (Unix time).", (), persist=False)
VAL_NEXT = Family(PREFIX + "validator_next_run_timestamp_seconds", "gauge",
                  "When the next scheduled validator run is due or retried (Unix time).", (), persist=False)
BUILD_INFO = Family(PREFIX + "build_info", "gauge", "nodewarden version; always 1.", ("version",), persist=False)

FAMILIES: tuple[Family, ...] = (XID, EDAC_LOGGED, MCE, SXID, AER_LOGGED, AER_RECOVERY, GPU_LOST_PRECURSOR,
                                GPU_RESET_REQUIRED, IB_LINK, FLASH_CUTS, OUTAGES, EVENTS, UNPARSED, OVERRUNS,
                                LOST, INJECTED, STATE_ERRORS, JOURNAL_BYTES, JOURNAL_DROPPED, SUCCESS, DURATION, LAST_SUCCESS,
                                VAL_STATUS, VAL_VALUE, VAL_THRESHOLD, VAL_LAST_RUN, VAL_EXIT, VAL_ATTEMPT, VAL_NEXT, BUILD_INFO)
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}

# Series of earlier versions still found in state.json: name -> (family now, label values
# appended to the old ones). Loaded into the new series, so counters stay monotonic across an
# upgrade. 0.1.0 named the kernel-log EDAC counts like the sysfs EDAC counters.
LEGACY: dict[str, tuple[Family, tuple[str, ...]]] = {
    PREFIX + "edac_correctable_errors_total": (EDAC_LOGGED, ("corrected",)),
    PREFIX + "edac_uncorrectable_errors_total": (EDAC_LOGGED, ("uncorrected",)),
}

Increment = tuple[Family, tuple[str, ...], float]
SeriesKey = tuple[str, tuple[str, ...]]


# ---------------------------------------------------------------------------------------------
# Events -> increments (pure)

def increments(event: FaultEvent, gpu_of: Callable[[str | None], str], collector: str = KERNEL_LOG) -> list[Increment]:
    """The counter increments one event makes: always one in ``collector_events_total`` by
    collector and kind; a kernel-log event also its own series (see the module table).
    ``gpu_of`` maps a PCI bus id to the ``gpu`` label.

    Events of the polled collectors count in ``collector_events_total`` only: their hardware
    counters are exported as samples, and an Xid or a link change that NVML or sysfs also
    reports must not be counted twice in the kernel-log series (a ``pcie_aer`` event of the
    pcie collector is one the kernel log did not print: :mod:`nodewarden.agent.aer`).

    Label values are bounded: a severity, type, outcome or action outside its set becomes
    ``unknown`` (``other`` for an AER recovery outcome), a code that is not an int leaves the
    event out of its series (it still counts in ``collector_events_total``)."""
    out: list[Increment] = [(EVENTS, (collector, event.kind), 1.0)]
    if collector != KERNEL_LOG:
        return out
    a = event.attrs
    kind = event.kind
    if kind == ev.XID and event.code is not None:
        pci = event.pci_bus_id or ""
        gpu = gpu_of(pci) if pci else ""
        category = event.category or _group(event.code)
        out.append((XID, (gpu, pci, str(event.code), category), 1.0))
        action = recovery_action(a) if event.code == 154 else None
        if action is not None and action != "none":
            out.append((GPU_RESET_REQUIRED, (gpu, pci, action), 1.0))
    elif kind == ev.CPU_ECC and ("mc" in a or a.get("via") in ("ghes", "mca")):
        typ = _one_of(a.get("type"), ECC_TYPES, "unknown")
        mc = a.get("mc")
        controller = f"mc{mc}" if mc is not None and mc != "" else ""  # ghes/mca without an EDAC line: none
        out.append((EDAC_LOGGED, (controller, str(a.get("label") or ""), typ), _count(a.get("count"))))
    elif kind == ev.MCE:
        out.append((MCE, (str(a.get("type") or event.category or "corrected"),), 1.0))
    elif kind == ev.SXID:
        code = a.get("sxid", event.code)
        if _is_int(code):
            severity = _one_of(a.get("severity"), SXID_SEVERITIES, "unknown")
            pci = event.pci_bus_id or event.device or ""
            out.append((SXID, (str(a.get("switch") or ""), pci, str(code), severity), 1.0))
    elif kind == ev.PCIE_AER:
        pci = event.device or event.pci_bus_id or ""
        severity = _one_of(a.get("severity"), AER_SEVERITIES, "unknown")
        out.append((AER_LOGGED, (pci, severity), 1.0))
        if event.category == PRECURSOR and severity in ("fatal", "non_fatal"):
            gpu_pci = precursor_gpu(event, gpu_of)
            out.append((GPU_LOST_PRECURSOR, (gpu_of(gpu_pci) if gpu_pci else "", gpu_pci,
                                             "fatal_aer" if severity == "fatal" else "non_fatal_aer"), 1.0))
    elif kind == ev.PCIE_AER_RECOVERY:
        pci = event.device or event.pci_bus_id or ""
        outcome = _one_of(a.get("outcome"), AER_OUTCOMES, "other")
        out.append((AER_RECOVERY, (pci, outcome), 1.0))
        if event.category == PRECURSOR and outcome in PRECURSOR_OUTCOMES:
            out.append((GPU_LOST_PRECURSOR, (gpu_of(pci) if pci else "", pci, PRECURSOR_OUTCOMES[outcome]), 1.0))
    elif kind == ev.GPU_RESET_REQUIRED:
        pci = event.pci_bus_id or ""
        action = recovery_action(a, key="action") or "unknown"
        if action != "none":
            out.append((GPU_RESET_REQUIRED, (gpu_of(pci) if pci else "", pci, action), 1.0))
    elif kind in (ev.IB_LINK_DOWN, ev.IB_LINK_UP, ev.IB_PORT_STATE) and "rdma_device" in a:
        out.append((IB_LINK, (str(a["rdma_device"]), str(a.get("port", "")), str(a.get("state", ""))), 1.0))
    elif kind == ev.UNPARSED:
        out.append((UNPARSED, (collector,), 1.0))
    return out


# Label value sets of the kernel-log series (the event shapes of nodewarden.events' kinds; a value
# outside its set becomes ``unknown``, ``other`` for an outcome).
ECC_TYPES = ("corrected", "uncorrected", "deferred")
SXID_SEVERITIES = sxid_catalog.SEVERITIES
AER_SEVERITIES = aer.EVENT_SEVERITIES
AER_OUTCOMES = aer.OUTCOMES
PRECURSOR = aer.PRECURSOR  # the category of an AER event that precedes a lost GPU
PRECURSOR_OUTCOMES = {"no_error_detected_callback": "aer_no_error_detected_callback",
                      "recovery_failed": "aer_recovery_failed"}
_ACTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")


def recovery_action(attrs: Mapping[str, Any], key: str = "recovery_action") -> str | None:
    """The recovery action an event names: ``attrs[key]`` when it is a snake_case name (the
    parser's decoded ``to`` action of an Xid 154, the ``action`` of a ``gpu_reset_required``
    event), else the parser's decoding (:func:`nodewarden.parsing.xid.recovery_action`) of the
    number in ``recovery_to`` or of the name printed for it (``recovery_to_name``): ``unknown``
    for one the driver's and NVML's table lacks; None when there is none of these."""
    name = attrs.get(key)
    if isinstance(name, str) and _ACTION_NAME.match(name):
        return name
    to, to_name = attrs.get("recovery_to"), attrs.get("recovery_to_name")
    if _is_int(to) or isinstance(to_name, str):
        return xid_parser.recovery_action(to if _is_int(to) else None,
                                          to_name if isinstance(to_name, str) else None)
    return "unknown" if name is not None else None


def precursor_gpu(event: FaultEvent, gpu_of: Callable[[str | None], str]) -> str:
    """The PCI bus id of the GPU an uncorrected AER record is a precursor of: the device the
    error is about when it is the GPU (driver ``nvidia`` or vendor 0x10de), else the first of
    the functions that could not recover (``affected_devices``) that the NVIDIA driver knows
    (a device minor in procfs), else the first of them, else the device itself."""
    a = event.attrs
    pci = event.device or event.pci_bus_id or ""
    if aer.is_precursor(a.get("severity"), a.get("driver"), a.get("vendor_id")):  # the error is the GPU's own
        return pci
    affected = [str(d) for d in (a.get("affected_devices") or ()) if d]
    for d in affected:
        if gpu_of(d):
            return d
    return affected[0] if affected else pci


def _one_of(value: Any, allowed: tuple[str, ...], default: str) -> str:
    return value if isinstance(value, str) and value in allowed else default


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> float:
    """An EDAC error count: a non-negative int, 1 when absent or not one."""
    return float(v) if _is_int(v) and v >= 0 else 1.0


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

    def replace(self, family: Family, values: Mapping[tuple[str, ...], float]) -> None:
        """Replace every series of ``family`` with ``values`` at once (a scrape sees the old set or
        the new one): series that are gone disappear (a check no longer in the report)."""
        for labels in values:
            if len(labels) != len(family.labels):
                raise ValueError(f"{family.name}: expected labels {family.labels}, got {labels}")
        with self._lock:
            for key in [k for k in self._values if k[0] == family.name]:
                del self._values[key]
            for labels, value in values.items():
                self._values[(family.name, tuple(labels))] = float(value)

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
        """Add persisted series (from :meth:`to_json`); series of earlier versions (:data:`LEGACY`)
        go into the series that replaced them. Entries of unknown families or with other label
        names (a file from another version) are skipped and logged. Returns entries loaded."""
        n = 0
        for item in items:
            try:
                labels = dict(item.get("labels") or {})
                extra: tuple[str, ...] = ()
                if item["name"] in LEGACY:
                    fam, extra = LEGACY[item["name"]]
                else:
                    fam = BY_NAME[item["name"]]
                old = fam.labels[:len(fam.labels) - len(extra)]
                if not fam.persist or set(labels) != set(old):
                    raise KeyError(item["name"])
                self.add(fam, tuple(str(labels[k]) for k in old) + extra, float(item["value"]))
                n += 1
            except (KeyError, TypeError, ValueError, AttributeError):
                log.warning("state: skipping a stored series this version does not know: %r", item)
        return n


# ---------------------------------------------------------------------------------------------
# The collector

# The polled collectors' samples: the contract check and the merge

PolledSample = tuple[str, Sample]  # (collector name, sample)
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Sample names a family of the agent's occupies in the text format (a counter's TYPE line is
# written with and without ``_total`` depending on the client version).
RESERVED: frozenset[str] = frozenset(
    n for f in FAMILIES for n in ((f.name, f.name[:-len("_total")]) if f.type == "counter" else (f.name,)))


@dataclasses.dataclass
class PolledFamily:
    """The samples of one metric name from the polled collectors, after :func:`check_samples`."""

    name: str
    type: str
    help: str
    collector: str  # the first collector that gave the name
    samples: dict[tuple[tuple[str, str], ...], float] = dataclasses.field(default_factory=dict)


def check_samples(polled: Iterable[PolledSample],
                  reserved: frozenset[str] = RESERVED) -> tuple[dict[str, PolledFamily], list[str]]:
    """The contract check on the polled collectors' samples (pure): returns the families kept,
    by name, and one message per sample dropped. Dropped: a name without the ``nodewarden_``
    prefix or not a valid metric name; an invalid, reserved (``__``) or repeated label name; a
    counter whose name does not end in ``_total`` or a gauge whose name does; a name among
    ``reserved`` (the agent's own families); a name already given with the other type (the
    first type seen wins; collectors are given in a fixed order); a series (name and label set,
    whatever the label order) already given. Nothing is ever emitted twice."""
    fams: dict[str, PolledFamily] = {}
    base_of: dict[str, str] = {}  # text-format names occupied -> the family name occupying them
    problems: list[str] = []
    for collector, s in polled:
        why = _sample_problem(s, reserved)
        if why is None:
            base = s.name[:-len("_total")] if s.kind == COUNTER else s.name
            fam = fams.get(s.name)
            other = base_of.get(base) if fam is None else None
            if fam is not None and fam.type != s.kind:
                why = f"{collector}: {s.name} given as a {s.kind}, but {fam.collector} gave it as a {fam.type}"
            elif other is not None:
                why = f"{collector}: {s.name} clashes with {other} of {fams[other].collector}"
        if why is None:
            if fam is None:
                fam = fams[s.name] = PolledFamily(s.name, s.kind, s.help, collector)
                base_of[base] = base_of[s.name] = s.name
            key = tuple(sorted(s.labels))
            if key in fam.samples:
                why = f"{collector}: {s.name}{_fmt_labels(s.labels)} given twice"
            else:
                fam.samples[key] = s.value
                if not fam.help and s.help:
                    fam.help = s.help
                continue
        problems.append(f"{why}; dropped")
    return fams, problems


def _sample_problem(s: Sample, reserved: frozenset[str]) -> str | None:
    try:
        why = _shape_problem(s.name, s.kind, tuple(k for k, _ in s.labels), reserved)
    except TypeError:  # an unhashable name or label name: no cached verdict
        why = _shape_problem.__wrapped__(s.name, s.kind, tuple(k for k, _ in s.labels), reserved)
    if why is None and (not isinstance(s.value, (int, float)) or isinstance(s.value, bool)):
        return f"{s.name}: value {s.value!r} is not a number"
    return why


@functools.lru_cache(maxsize=4096)
def _shape_problem(name: Any, kind: Any, names: tuple[Any, ...], reserved: frozenset[str]) -> str | None:
    """What is wrong with a sample's name, type and label names (None: nothing); the same for
    every sample of one shape, so kept (a poll's samples have a few dozen shapes)."""
    if not isinstance(name, str) or not name.startswith(PREFIX) or not _METRIC_NAME.match(name):
        return f"{name!r} is not a metric name starting with {PREFIX!r}"
    if kind not in (COUNTER, GAUGE):
        return f"{name}: unknown type {kind!r}"
    if kind == COUNTER and not name.endswith("_total"):
        return f"{name}: a counter's name must end in _total"
    if kind == GAUGE and name.endswith("_total"):
        return f"{name}: a gauge's name must not end in _total (that is a counter's)"
    if name in reserved or (kind == COUNTER and name[:-len("_total")] in reserved):
        return f"{name}: the agent exports this name itself"
    bad = [k for k in names if not isinstance(k, str) or not _LABEL_NAME.match(k) or k.startswith("__")]
    if bad or len(set(names)) != len(names):
        return f"{name}: bad or repeated label name(s) {list(names)}"
    return None


def _fmt_labels(labels: tuple[tuple[str, str], ...]) -> str:
    return "{" + ",".join(f"{k}={v!r}" for k, v in labels) + "}"


# ---------------------------------------------------------------------------------------------
# The collector

class AgentCollector:
    """The agent's families: one fresh :class:`~nodewarden.agent.textformat.Block` per
    :data:`FAMILIES` entry, from ``snapshot()`` (a :meth:`Counters.snapshot`), then the polled
    collectors' families from ``polled()`` (``(collector, Sample)`` pairs, see
    :func:`check_samples`), by name. Families of the agent without samples are still yielded
    (HELP/TYPE only), so a scrape shows every series the agent can export; a counter without
    labels is 0 until it rises (``increase()`` sees its first loss or overrun).
    :meth:`collect` makes it a prometheus_client custom collector (``make_registry``).

    A snapshot that raises serves the last good one instead (a scrape never breaks). A contract
    problem in the polled samples is logged once (as a warning; after that at debug level)."""

    def __init__(self, snapshot: Callable[[], Mapping[SeriesKey, float]],
                 polled: Callable[[], Iterable[PolledSample]] | None = None) -> None:
        self._snapshot = snapshot
        self._polled = polled
        self._last: Mapping[SeriesKey, float] = {}
        self._last_polled: list[PolledSample] = []
        self._checked_in: list[PolledSample] | None = None
        self._checked: dict[str, PolledFamily] = {}
        self._polled_keyed: list[tuple[str, Hashable, Callable[[], Block]]] = []
        self._reported: set[str] = set()

    def collect(self) -> Iterator[Metric]:
        """The families as prometheus_client ``CounterMetricFamily``/``GaugeMetricFamily`` (what
        a ``CollectorRegistry`` reads; imports prometheus_client)."""
        for _name, _key, build in self.keyed_families():
            yield to_metric(build())

    def blocks(self) -> Iterator[Block]:
        """The families, in :meth:`collect`'s order."""
        for _name, _key, build in self.keyed_families():
            yield build()

    def keyed_families(self) -> Iterator[tuple[str, Hashable, Callable[[], Block]]]:
        """Every family :meth:`collect` yields, in its order, as (name, key, build): ``key`` equal
        between two calls exactly when the family's samples (and HELP, type) are, ``build()`` its
        Block. :class:`Exposition` re-renders a family only when its key changed."""
        try:
            snap = self._snapshot()
            self._last = snap
        except Exception:
            log.exception("snapshot failed; serving the previous one")
            snap = self._last
        polled: list[PolledSample] = []
        if self._polled is not None:
            try:
                polled = list(self._polled())
                self._last_polled = polled
            except Exception:
                log.exception("polled samples failed; serving the previous ones")
                polled = self._last_polled
        if polled != self._checked_in:  # the contract check (and the sort) run once per change of the samples
            self._checked_in = polled
            self._checked = self._check(polled)
            self._polled_keyed = list(keyed_polled_families(self._checked))
        yield from keyed_families(snap)
        yield from self._polled_keyed

    def _check(self, polled: list[PolledSample]) -> dict[str, PolledFamily]:
        fams, problems = check_samples(polled)
        for msg in problems:
            if msg not in self._reported:
                if len(self._reported) < 10_000:
                    self._reported.add(msg)
                log.warning("collector contract: %s", msg)
            else:
                log.debug("collector contract: %s", msg)
        return fams


def keyed_families(snap: Mapping[SeriesKey, float]) -> Iterator[tuple[str, Hashable, Callable[[], Block]]]:
    """The agent's families of a snapshot, in :data:`FAMILIES` order, as (name, key, build)
    (:meth:`AgentCollector.keyed_families`); samples sorted by labels."""
    by_family: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for (name, labels), value in snap.items():
        by_family.setdefault(name, []).append((labels, value))
    for fam in FAMILIES:
        samples = sorted(by_family.get(fam.name, ()))
        if fam is BUILD_INFO:
            samples = [((__version__,), 1.0)]
        elif not samples and not fam.labels and fam.type == "counter":
            samples = [((), 0.0)]  # a counter without labels exists from the start: its first rise is seen
        yield fam.name, tuple(samples), functools.partial(_agent_block, fam, samples)


def _agent_block(fam: Family, samples: list[tuple[tuple[str, ...], float]]) -> Block:
    return Block(fam.name, fam.type, fam.help,
                 tuple((tuple(zip(fam.labels, values)), value) for values, value in samples))


def families(snap: Mapping[SeriesKey, float]) -> Iterator[Block]:
    """The agent's families for a snapshot, in :data:`FAMILIES` order, samples sorted by labels."""
    for _name, _key, build in keyed_families(snap):
        yield build()


def keyed_polled_families(fams: Mapping[str, PolledFamily]) -> Iterator[tuple[str, Hashable, Callable[[], Block]]]:
    """The polled collectors' families (from :func:`check_samples`) sorted by name, as (name,
    key, build); samples sorted by their label pairs (labels written in name order)."""
    for name in sorted(fams):
        f = fams[name]
        items = tuple(sorted(f.samples.items()))
        yield name, (f.type, f.help, f.collector, items), functools.partial(_polled_block, f, items)


def _polled_block(f: PolledFamily, items: tuple[tuple[tuple[tuple[str, str], ...], float], ...]) -> Block:
    return Block(f.name, f.type, f.help or f"{f.name} (collector {f.collector}).", items)


def polled_families(fams: Mapping[str, PolledFamily]) -> Iterator[Block]:
    """The polled collectors' families (from :func:`check_samples`), sorted by name, samples
    sorted by their label pairs (labels written in name order)."""
    for _name, _key, build in keyed_polled_families(fams):
        yield build()


def to_metric(block: Block) -> Metric:
    """The family as prometheus_client's ``CounterMetricFamily`` or ``GaugeMetricFamily``
    (imports prometheus_client: tests and registries, never the agent's scrape path)."""
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
    metric: Metric = (CounterMetricFamily if block.type == COUNTER else GaugeMetricFamily)(block.name, block.help)
    for labels, value in block.samples:
        metric.add_sample(block.name, dict(labels), value)
    return metric


class Exposition:
    """The ``/metrics`` bodies of an :class:`AgentCollector`, in both formats a scraper can ask
    for, each also gzipped: the text format 0.0.4 and OpenMetrics 1.0.0, written by
    :mod:`nodewarden.agent.textformat` byte for byte as prometheus_client's
    ``exposition.generate_latest`` and ``openmetrics.exposition.generate_latest`` write
    ``make_registry(...)`` (tests hold it). Which one a request gets:
    :func:`~nodewarden.agent.textformat.negotiate` on ``Accept``,
    :func:`~nodewarden.agent.textformat.gzip_accepted` on ``Accept-Encoding``.

    Kept between changes, per format: a family whose samples did not change since that format's
    last render is not formatted again, a body whose families did not change is served as the
    same bytes object, and its gzip is compressed once (RFC 1952 member, ``mtime`` 0, level
    :data:`GZIP_LEVEL`). A format is rendered when first asked for after a change, so a scrape
    of an unchanged state formats and compresses nothing. Thread-safe (one render at a time)."""

    GZIP_LEVEL = 9  # gzip.compress's default, which prometheus_client's handler uses

    def __init__(self, collector: AgentCollector) -> None:
        self.collector = collector
        self._lock = threading.Lock()
        self._formats: dict[str, _KeptFormat] = {}
        self.families_rendered = 0  # families formatted since start, all formats (the rest came from the cache)
        self.bodies_compressed = 0  # gzip compressions since start

    def render(self) -> bytes:
        """The exposition in the text format (what a request without ``Accept`` gets,
        :meth:`serve`). Never raises for a collector or snapshot error (the collector serves
        its last good state)."""
        return self.serve(None, None)[0]

    def serve(self, accept: str | None, accept_encoding: str | None) -> tuple[bytes, str, str | None]:
        """(body, Content-Type, Content-Encoding or None) for a request with these ``Accept`` and
        ``Accept-Encoding`` header values (None: absent). The body is the kept bytes object while
        the state is unchanged. Never raises for a collector or snapshot error."""
        fmt, gz = self.negotiate(accept, accept_encoding)
        with self._lock:
            kept = self._formats.get(fmt.name)
            if kept is None:
                kept = self._formats[fmt.name] = _KeptFormat(fmt, body=fmt.trailer)
            self._update(kept)
            if not gz:
                return kept.body, fmt.content_type, None
            if kept.gzipped is None:
                kept.gzipped = gzip.compress(kept.body, compresslevel=self.GZIP_LEVEL, mtime=0)
                self.bodies_compressed += 1
            return kept.gzipped, fmt.content_type, "gzip"

    @staticmethod
    def negotiate(accept: str | None, accept_encoding: str | None) -> tuple[tf.Format, bool]:
        """The format and whether to gzip, for these ``Accept`` and ``Accept-Encoding`` values
        (None: absent); see :func:`~nodewarden.agent.textformat.negotiate`."""
        return tf.negotiate(accept), tf.gzip_accepted(accept_encoding)

    def _update(self, kept: _KeptFormat) -> None:
        blocks: dict[str, tuple[Hashable, bytes]] = {}
        changed = False
        for name, key, build in self.collector.keyed_families():
            cached = kept.blocks.get(name)
            if cached is None or cached[0] != key:
                cached = (key, kept.format.block(build()))
                self.families_rendered += 1
                changed = True
            blocks[name] = cached
        if changed or blocks.keys() != kept.blocks.keys():
            kept.body = b"".join(b for _, b in blocks.values()) + kept.format.trailer
            kept.gzipped = None
        kept.blocks = blocks


@dataclasses.dataclass
class _KeptFormat:
    """One format's kept state (:class:`Exposition`): the format, each family's bytes with the
    key they were formatted for, the body, and the body gzipped (None until asked for)."""

    format: tf.Format
    blocks: dict[str, tuple[Hashable, bytes]] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    gzipped: bytes | None = None


def make_registry(snapshot: Callable[[], Mapping[SeriesKey, float]],
                  polled: Callable[[], Iterable[PolledSample]] | None = None) -> CollectorRegistry:
    """A prometheus_client registry holding only the agent's collector (no process/platform
    collectors): what ``generate_latest`` and the tests read (imports prometheus_client)."""
    from prometheus_client.registry import CollectorRegistry
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(snapshot, polled))
    return reg

"""NVML collector: per-GPU fault counters and link state, read through :mod:`nodewarden.nvml`.

Every series and the NVML function it comes from (NVML API Reference Guide, ``nvml.h``); the
``gpu`` label is the NVML device index (``nvmlDeviceGetHandleByIndex``), as a string:

==============================================================================  ==========================================
``nodewarden_gpu_info{gpu,uuid,pci_bus_id,name,minor}`` 1                       nvmlDeviceGetUUID, nvmlDeviceGetPciInfo,
                                                                                nvmlDeviceGetName, nvmlDeviceGetMinorNumber
``nodewarden_gpu_ecc_errors_total{gpu,type,scope}`` counter                     nvmlDeviceGetTotalEccErrors
``nodewarden_gpu_retired_pages{gpu,cause}``                                     nvmlDeviceGetRetiredPages
``nodewarden_gpu_retired_pages_pending{gpu}``                                   nvmlDeviceGetRetiredPagesPendingStatus
``nodewarden_gpu_remapped_rows{gpu,cause}``                                     nvmlDeviceGetRemappedRows (corrRows, uncRows)
``nodewarden_gpu_row_remap_pending{gpu}``, ``..._row_remap_failure{gpu}``       nvmlDeviceGetRemappedRows (isPending,
                                                                                failureOccurred)
``nodewarden_gpu_nvlink_state{gpu,link}`` 1 active                              nvmlDeviceGetNvLinkState
``nodewarden_gpu_nvlink_errors_total{gpu,link,type}`` counter                   nvmlDeviceGetNvLinkErrorCounter
``nodewarden_gpu_pcie_link_generation{gpu,which}``                              nvmlDeviceGetCurrPcieLinkGeneration,
                                                                                nvmlDeviceGetMaxPcieLinkGeneration
``nodewarden_gpu_pcie_link_width{gpu,which}``                                   nvmlDeviceGetCurrPcieLinkWidth,
                                                                                nvmlDeviceGetMaxPcieLinkWidth
``nodewarden_gpu_pcie_replays_total{gpu}`` counter                              nvmlDeviceGetPcieReplayCounter
``nodewarden_gpu_clocks_event_reasons{gpu,reason}`` 1 active                    nvmlDeviceGetCurrentClocksEventReasons
                                                                                (ThrottleReasons before r535); ``reason``
                                                                                :data:`nodewarden.nvml.CLOCK_EVENT_REASONS`
``nodewarden_gpu_temperature_celsius{gpu}``                                     nvmlDeviceGetTemperature (NVML_TEMPERATURE_GPU)
``nodewarden_gpu_power_watts{gpu}``                                             nvmlDeviceGetPowerUsage (milliwatts / 1000)
``nodewarden_gpu_recovery_action{gpu,action}`` 1 current, 0 the others          nvmlDeviceGetFieldValues
                                                                                (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
``nodewarden_gpu_lost{gpu}`` 1 lost                                             any call returning NVML_ERROR_GPU_IS_LOST
==============================================================================  ==========================================

Calls: the functions named above give each value; the ones with an nvml.h field id (ECC totals,
retired pages, remapped rows, PCIe replays, the recovery action, the NVLink error counters of links
0-11 and every link's state) are read in one ``nvmlDeviceGetFieldValues`` call per GPU per poll
(ids in :mod:`nodewarden.nvml`), the named call being the fallback for a driver or GPU whose field
answers NOT_SUPPORTED. What does not change while the driver is loaded (identity, the links a GPU
has, the maximum PCIe link) is read at the first poll and again hourly. The NVLink error counters
(CRC flit, CRC data, replay, recovery: the bulk of the values, 72 per H100) are read at every
:data:`NVLINK_ERRORS_EVERY`-th poll (30 s at 10 s polls, dcgm-exporter's default interval),
the last values exported in between: they are rates over minutes to the alerts and panels, while
a link going down (its state) is read at every poll. An 8-GPU H100 node costs 31 calls per GPU at
such a poll and 7 at the others (:meth:`NvmlCollector.read_gpu`), not the ~120 of one call per value.

Every call goes through :mod:`nodewarden.nvml`'s session and call wrapper: a query that answers
``NVML_ERROR_NOT_SUPPORTED`` leaves its series out (retired pages on Ampere and later, which remap
rows instead; NVLink on a PCIe card): absent, never an error. A call that answers
``NVML_ERROR_GPU_IS_LOST`` ends that GPU's poll: it exports ``nodewarden_gpu_lost 1`` and its
``nodewarden_gpu_info`` (remembered from an earlier poll), nothing else. The clock-event
``reason`` labels are nvml.h's names (``sw_thermal_slowdown``, ``hw_power_brake_slowdown`` ...),
the same the validator's report uses.

The GPU recovery action (:mod:`nodewarden.nvml`: field 230, ``nvmlDeviceGpuRecoveryAction_t``)
is the driver's verdict on what the GPU needs before it can be trusted again. Its gauge has one
series per action of ``none gpu_reset node_reboot drain_p2p drain_and_reset``, 1 for the current
one and 0 for the others (a newer value, ``recover_imex_domain``, ``bus_reset``,
``system_reboot`` or ``unknown``, adds its own series while it is current). A driver without the
field (before r570: the value's nvmlReturn is ``NVML_ERROR_NOT_SUPPORTED``) exports no series;
that is logged once per GPU, not an error, and the field is asked again only every
:data:`RECOVERY_ACTION_REPROBE_SECONDS` (and after NVML is initialised again).

Events, by comparing a poll with the previous one (kept in memory only: after a restart the
first poll is a baseline and emits nothing; the journal already holds what was seen before):

* ``gpu_ecc``: an ECC counter rose. One event per error type and poll, so that one error that
  raises both the volatile and the aggregate counter is counted once: the volatile delta when the
  volatile counter rose, else the aggregate delta (the volatile counter restarts at 0 when the
  driver loads). ``attrs``: type, scope, delta, count, volatile_delta, aggregate_delta.
* ``row_remap``: remapped rows rose, or ``isPending``/``failureOccurred`` went 0 -> 1 (a pending
  remap needs a GPU reset; a failure means the bank is out of spare rows: RMA).
* ``gpu_lost``: once per loss, when a GPU that answered at the previous poll is lost.
* ``gpu_recovery_action``: the recovery action changed (compared with the last value read, so a
  poll whose read failed does not hide a change). ``category`` and ``attrs.action``: the new
  action; ``attrs``: gpu (NVML index), gpu_uuid, pci_bus_id, action, previous_action,
  action_code, previous_action_code.
* ``gpu_reset_required`` (with it, when the new action is not ``none``): the shape of the
  kernel-log event of the same kind (``attrs`` action, status, status_name, location, pci_bus_id,
  gpu; the NVRM-only status/status_name/location are None here) plus gpu_uuid, previous_action,
  action_code.

The pure part (:class:`GpuReading`, :func:`samples`, :func:`events_between` and the helpers
above it) needs no NVML; :class:`NvmlCollector` is the thin I/O around it. NVML is initialised
lazily and again after a failure (no driver: an empty snapshot, not an error). A poll's reads run
under :func:`nodewarden.nvml.call_with_timeout`: a poll that hangs in the driver raises
:class:`~nodewarden.nvml.NvmlTimeout` after ``timeout_s``, and a poll started while an NVML call
is still blocked raises it at once instead of queueing more threads behind the driver. A poll
that timed out changes no state the next poll compares with (the reads are committed only when
they return in time), so a counter rise it would have seen is an event of the next poll.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import socket
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from nodewarden import nvml
from nodewarden.sysfs import pci
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.events import (GPU_ECC, GPU_LOST, GPU_RECOVERY_ACTION, GPU_RESET_REQUIRED, ROW_REMAP, TIME_WALL,
                               FaultEvent)
from nodewarden.nvml import (CLOCK_EVENT_REASONS, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, RECOVERY_ACTION_LABELS,
                             RECOVERY_ACTIONS, RECOVERY_NONE, GpuLost, Session, driver_lacks_field,
                             recovery_action_name, return_name)

log = logging.getLogger(__name__)

NAME = "nvml"
SOURCE = "nvml"

# nvmlMemoryErrorType_t x nvmlEccCounterType_t, with our label values.
ECC_TYPES = {"corrected": 0, "uncorrected": 1}   # NVML_MEMORY_ERROR_TYPE_CORRECTED / _UNCORRECTED
ECC_SCOPES = {"volatile": 0, "aggregate": 1}     # NVML_VOLATILE_ECC / NVML_AGGREGATE_ECC
# nvmlPageRetirementCause_t
RETIREMENT_CAUSES = {"single_bit_ecc": 0, "double_bit_ecc": 1}
# nvmlNvLinkErrorCounter_t (the data-link-layer counters nvidia-smi nvlink -e prints)
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
NVML_TEMPERATURE_GPU = 0
# A GPU whose driver lacks the recovery-action field is asked again this rarely (seconds of the
# collector's clock): a driver upgrade needs a driver reload, which initialises NVML again anyway.
RECOVERY_ACTION_REPROBE_SECONDS = 3600.0
# A query a GPU answered NVML_ERROR_NOT_SUPPORTED is asked again this rarely (seconds), and what
# does not change while the driver is loaded (identity, links, max PCIe link) is read again this often.
UNSUPPORTED_REPROBE_SECONDS = 3600.0
STATIC_REREAD_SECONDS = 3600.0
# The NVLink error counters are read at every this many polls (the first one included); a GPU
# without a complete earlier reading of a link (the first poll, a new or reset GPU, a link that
# came back, a read that failed) has that link's read at once.
NVLINK_ERRORS_EVERY = 3
CLOSE_TIMEOUT_S = 5.0  # nvmlShutdown at the agent's stop waits at most this long (seconds)

P = "nodewarden_gpu_"
# name -> (kind, HELP); HELP names the NVML function.
SERIES: dict[str, tuple[str, str]] = {
    P + "info": (GAUGE, "GPU identity, value 1 (nvmlDeviceGetUUID, nvmlDeviceGetPciInfo, nvmlDeviceGetName, "
                        "nvmlDeviceGetMinorNumber)."),
    P + "ecc_errors_total": (COUNTER, "GPU memory ECC errors by type and scope (nvmlDeviceGetTotalEccErrors)."),
    P + "retired_pages": (GAUGE, "GPU memory pages retired, by cause (nvmlDeviceGetRetiredPages)."),
    P + "retired_pages_pending": (GAUGE, "1 when a page retirement waits for the next driver load "
                                         "(nvmlDeviceGetRetiredPagesPendingStatus)."),
    P + "remapped_rows": (GAUGE, "GPU memory rows remapped, by cause (nvmlDeviceGetRemappedRows)."),
    P + "row_remap_pending": (GAUGE, "1 when a row remap waits for a GPU reset (nvmlDeviceGetRemappedRows isPending)."),
    P + "row_remap_failure": (GAUGE, "1 when a row remap failed: no spare rows left "
                                     "(nvmlDeviceGetRemappedRows failureOccurred)."),
    P + "nvlink_state": (GAUGE, "1 when the NVLink link is active (nvmlDeviceGetNvLinkState)."),
    P + "nvlink_errors_total": (COUNTER, "NVLink data-link-layer error counters (nvmlDeviceGetNvLinkErrorCounter)."),
    P + "pcie_link_generation": (GAUGE, "PCIe link generation, current and max (nvmlDeviceGetCurrPcieLinkGeneration, "
                                        "nvmlDeviceGetMaxPcieLinkGeneration)."),
    P + "pcie_link_width": (GAUGE, "PCIe link width in lanes, current and max (nvmlDeviceGetCurrPcieLinkWidth, "
                                   "nvmlDeviceGetMaxPcieLinkWidth)."),
    P + "pcie_replays_total": (COUNTER, "PCIe replays (nvmlDeviceGetPcieReplayCounter)."),
    P + "clocks_event_reasons": (GAUGE, "1 when the reason holds the clocks down (nvmlDeviceGetCurrentClocksEventReasons)."),
    P + "temperature_celsius": (GAUGE, "GPU core temperature (nvmlDeviceGetTemperature)."),
    P + "power_watts": (GAUGE, "GPU board power draw (nvmlDeviceGetPowerUsage)."),
    P + "lost": (GAUGE, "1 when NVML reports the GPU lost, NVML_ERROR_GPU_IS_LOST (fallen off the bus)."),
    P + "recovery_action": (GAUGE, "1 for the GPU's current recovery action, 0 for the others (nvmlDeviceGetFieldValues "
                                   "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; none: healthy)."),
}


class RemappedRows(NamedTuple):
    """``nvmlDeviceGetRemappedRows``: corrRows, uncRows, isPending, failureOccurred."""

    correctable: int
    uncorrectable: int
    pending: int
    failure: int


@dataclasses.dataclass
class GpuReading:
    """What one poll read from one GPU. A value NVML did not give (not supported, or another
    error) is None or absent from its dict. ``lost``: a call answered NVML_ERROR_GPU_IS_LOST
    (``lost_call`` names it) and the values after it were not read."""

    index: int
    lost: bool = False
    lost_call: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None      # normalized, 0000:18:00.0
    name: str | None = None
    minor: int | None = None
    ecc: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)   # (type, scope)
    retired_pages: dict[str, int] = dataclasses.field(default_factory=dict)     # cause -> pages
    retired_pages_pending: int | None = None
    remapped_rows: RemappedRows | None = None
    nvlink_state: dict[int, int] = dataclasses.field(default_factory=dict)      # link -> 1 active
    nvlink_errors: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)  # (link, type)
    pcie_generation: dict[str, int] = dataclasses.field(default_factory=dict)   # current / max
    pcie_width: dict[str, int] = dataclasses.field(default_factory=dict)
    pcie_replays: int | None = None
    clocks_event_reasons: int | None = None
    temperature_celsius: float | None = None
    power_milliwatts: float | None = None
    recovery_action: int | None = None  # nvmlDeviceGpuRecoveryAction_t; None: not read (no field, an error)

    @property
    def gpu(self) -> str:
        return str(self.index)


# ---- pure: readings -> samples ------------------------------------------------------------------

def samples(r: GpuReading, snap: Snapshot) -> None:
    """Add one GPU's series to ``snap`` (see the module table): :func:`counter_samples`, then
    :func:`sensor_samples`."""
    counter_samples(r, snap)
    sensor_samples(r, snap)


def _adder(r: GpuReading, snap: Snapshot) -> Callable[[str, dict[str, str], float], None]:
    def add(name: str, labels: dict[str, str], value: float) -> None:
        kind, help_ = SERIES[name]
        snap.add(name, {"gpu": r.gpu, **labels}, value, kind, help_)
    return add


def sensor_samples(r: GpuReading, snap: Snapshot) -> None:
    """The series of one GPU that change with its load (temperature, power); none for a lost GPU."""
    if r.lost:
        return
    add = _adder(r, snap)
    if r.temperature_celsius is not None:
        add(P + "temperature_celsius", {}, r.temperature_celsius)
    if r.power_milliwatts is not None:
        add(P + "power_watts", {}, r.power_milliwatts / 1000.0)


def without_sensors(r: GpuReading) -> GpuReading:
    """``r`` without what :func:`sensor_samples` exports: equal for two polls exactly when their
    :func:`counter_samples` are."""
    return dataclasses.replace(r, temperature_celsius=None, power_milliwatts=None)


def counter_samples(r: GpuReading, snap: Snapshot) -> None:
    """One GPU's series but the sensors': identity, lost, ECC, pages, rows, links, PCIe, clock
    reasons, recovery action."""
    add = _adder(r, snap)

    if r.uuid is not None or r.pci_bus_id is not None:
        add(P + "info", {"uuid": r.uuid or "", "pci_bus_id": r.pci_bus_id or "", "name": r.name or "",
                         "minor": "" if r.minor is None else str(r.minor)}, 1)
    add(P + "lost", {}, 1 if r.lost else 0)
    if r.lost:
        return
    for (typ, scope), v in sorted(r.ecc.items()):
        add(P + "ecc_errors_total", {"type": typ, "scope": scope}, v)
    for cause, v in sorted(r.retired_pages.items()):
        add(P + "retired_pages", {"cause": cause}, v)
    if r.retired_pages_pending is not None:
        add(P + "retired_pages_pending", {}, r.retired_pages_pending)
    if r.remapped_rows is not None:
        rr = r.remapped_rows
        add(P + "remapped_rows", {"cause": "correctable"}, rr.correctable)
        add(P + "remapped_rows", {"cause": "uncorrectable"}, rr.uncorrectable)
        add(P + "row_remap_pending", {}, 1 if rr.pending else 0)
        add(P + "row_remap_failure", {}, 1 if rr.failure else 0)
    for link, up in sorted(r.nvlink_state.items()):
        add(P + "nvlink_state", {"link": str(link)}, 1 if up else 0)
    for (link, typ), v in sorted(r.nvlink_errors.items()):
        add(P + "nvlink_errors_total", {"link": str(link), "type": typ}, v)
    for which, v in sorted(r.pcie_generation.items()):
        add(P + "pcie_link_generation", {"which": which}, v)
    for which, v in sorted(r.pcie_width.items()):
        add(P + "pcie_link_width", {"which": which}, v)
    if r.pcie_replays is not None:
        add(P + "pcie_replays_total", {}, r.pcie_replays)
    if r.clocks_event_reasons is not None:
        for bit, reason in CLOCK_EVENT_REASONS.items():
            add(P + "clocks_event_reasons", {"reason": reason.name}, 1 if r.clocks_event_reasons & bit else 0)
    if r.recovery_action is not None:
        current = recovery_action_name(r.recovery_action)
        for action in RECOVERY_ACTION_LABELS:
            add(P + "recovery_action", {"action": action}, 1 if action == current else 0)
        if current not in RECOVERY_ACTION_LABELS:
            add(P + "recovery_action", {"action": current}, 1)


# ---- pure: two readings -> events ---------------------------------------------------------------

def ecc_increases(prev: Mapping[tuple[str, str], int], cur: Mapping[tuple[str, str], int]
                  ) -> list[dict[str, Any]]:
    """One entry per ECC error type whose counters rose between two polls: ``type``, ``scope``
    and ``delta`` (volatile when the volatile counter rose, else aggregate), ``count`` (that
    counter's new value), ``volatile_delta`` and ``aggregate_delta``. A counter missing from
    either poll, or that went down (volatile counters restart at driver load), counts 0."""
    out = []
    for typ in ECC_TYPES:
        deltas = {}
        for scope in ECC_SCOPES:
            a, b = prev.get((typ, scope)), cur.get((typ, scope))
            deltas[scope] = b - a if a is not None and b is not None and b > a else 0
        scope = "volatile" if deltas["volatile"] > 0 else "aggregate" if deltas["aggregate"] > 0 else None
        if scope is not None:
            out.append({"type": typ, "scope": scope, "delta": deltas[scope], "count": cur[(typ, scope)],
                        "volatile_delta": deltas["volatile"], "aggregate_delta": deltas["aggregate"]})
    return out


def remap_changes(prev: RemappedRows | None, cur: RemappedRows | None) -> list[str]:
    """What changed for the worse in ``nvmlDeviceGetRemappedRows`` between two polls, in this
    order: ``correctable``/``uncorrectable`` (rows rose), ``pending``/``failure`` (0 -> 1).
    Empty when either poll lacks the values."""
    if prev is None or cur is None:
        return []
    out = [c for c in ("correctable", "uncorrectable") if getattr(cur, c) > getattr(prev, c)]
    out += [c for c in ("pending", "failure") if getattr(cur, c) and not getattr(prev, c)]
    return out


def baseline(prev: GpuReading | None, cur: GpuReading) -> GpuReading:
    """What the next poll's events compare with: ``cur``, with the ECC counters and remapped rows
    it could not read (an error this poll) taken from ``prev``, so that a rise across a poll
    that failed to read the counter is still an event at the next poll."""
    if prev is None or cur.lost or prev.lost:
        return cur
    ecc = {**prev.ecc, **cur.ecc} if prev.ecc.keys() - cur.ecc.keys() else cur.ecc
    rows = cur.remapped_rows if cur.remapped_rows is not None else prev.remapped_rows
    if ecc is cur.ecc and rows is cur.remapped_rows:
        return cur
    return dataclasses.replace(cur, ecc=ecc, remapped_rows=rows)


def newly_lost(prev: GpuReading | None, cur: GpuReading) -> bool:
    """A GPU that answered at the previous poll and is lost now: one ``gpu_lost`` per loss."""
    return prev is not None and not prev.lost and cur.lost


def recovery_action_change(prev: int | None, cur: int | None) -> tuple[str, str] | None:
    """(previous, current) action names when the recovery action changed between two reads;
    None when it did not, or either read has no value (the baseline, a driver without the field)."""
    if prev is None or cur is None or prev == cur:
        return None
    return recovery_action_name(prev), recovery_action_name(cur)


def _nvml_action(code: int) -> str:
    name = RECOVERY_ACTIONS.get(code)
    return f"{code} (NVML_GPU_RECOVERY_ACTION_{name.upper()})" if name else str(code)


def recovery_action_events(prev: int, cur: GpuReading, now: dt.datetime, host: str | None) -> list[FaultEvent]:
    """The events of a recovery-action change from ``prev`` to ``cur.recovery_action``: one
    ``gpu_recovery_action``, and one ``gpu_reset_required`` when the new action is not none (see
    the module docstring for their attrs). Empty when nothing changed."""
    change = recovery_action_change(prev, cur.recovery_action)
    if change is None or cur.recovery_action is None:
        return []
    was, action = change
    raw = (f"nvmlDeviceGetFieldValues(gpu {cur.index}, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION "
           f"[{NVML_FI_DEV_GET_GPU_RECOVERY_ACTION}]) = {_nvml_action(cur.recovery_action)}, was {_nvml_action(prev)}")
    common = {"gpu": cur.index, "gpu_uuid": cur.uuid, "pci_bus_id": cur.pci_bus_id, "action": action,
              "previous_action": was, "action_code": cur.recovery_action}

    def event(kind: str, message: str, **attrs: Any) -> FaultEvent:
        return FaultEvent(kind=kind, message=message, raw=raw, time=now, time_kind=TIME_WALL,
                          raw_time=f"{now.timestamp():.6f}", host=host, source=SOURCE, device=cur.pci_bus_id,
                          category=action, attrs=attrs)

    out = [event(GPU_RECOVERY_ACTION, f"{_describe(cur)}: NVML recovery action {action} (was {was})",
                 **common, previous_action_code=prev)]
    if action != RECOVERY_NONE:
        out.append(event(GPU_RESET_REQUIRED, f"{_describe(cur)} needs {action}: NVML recovery action {action} "
                                             f"(was {was})",
                         **common, status=None, status_name=None, location=None))
    return out


def _describe(r: GpuReading) -> str:
    return f"GPU {r.index}" + (f" ({r.pci_bus_id})" if r.pci_bus_id else "")


def _event(kind: str, r: GpuReading, message: str, raw: str, now: dt.datetime, host: str | None,
           **attrs: Any) -> FaultEvent:
    base = {"gpu": r.index, "uuid": r.uuid}
    if r.pci_bus_id:
        base["pci_bus_id"] = r.pci_bus_id
    return FaultEvent(kind=kind, message=message, raw=raw, time=now, time_kind=TIME_WALL,
                      raw_time=f"{now.timestamp():.6f}", host=host,
                      source=SOURCE, device=r.pci_bus_id, category="uncorrectable" if kind == GPU_LOST else "memory_ecc",
                      attrs={**base, **attrs})


def events_between(prev: GpuReading | None, cur: GpuReading, now: dt.datetime, host: str | None = None
                   ) -> list[FaultEvent]:
    """The events one GPU's poll makes against its previous poll (None: the baseline, no events)."""
    if prev is None:
        return []
    out: list[FaultEvent] = []
    if newly_lost(prev, cur):
        out.append(_event(GPU_LOST, cur, f"{_describe(cur)} is lost: NVML_ERROR_GPU_IS_LOST",
                          f"{cur.lost_call}(gpu {cur.index}) = NVML_ERROR_GPU_IS_LOST", now, host))
    for inc in ecc_increases(prev.ecc, cur.ecc):
        typ, scope = inc["type"], inc["scope"]
        was = inc["count"] - inc["delta"]
        out.append(_event(
            GPU_ECC, cur, f"{_describe(cur)}: {inc['delta']} new {typ} ECC errors ({scope} count {inc['count']})",
            f"nvmlDeviceGetTotalEccErrors(gpu {cur.index}, NVML_MEMORY_ERROR_TYPE_{typ.upper()}, "
            f"NVML_{scope.upper()}_ECC) = {inc['count']}, was {was}", now, host, **inc))
    a, b = prev.remapped_rows, cur.remapped_rows
    changes = remap_changes(a, b)
    if changes and a is not None and b is not None:
        out.append(_event(
            ROW_REMAP, cur,
            f"{_describe(cur)}: remapped rows correctable {b.correctable}, uncorrectable {b.uncorrectable}, "
            f"pending {b.pending}, failure {b.failure} ({', '.join(changes)})",
            f"nvmlDeviceGetRemappedRows(gpu {cur.index}) = corrRows {b.correctable}, uncRows {b.uncorrectable}, "
            f"isPending {b.pending}, failureOccurred {b.failure}; was {a.correctable}, {a.uncorrectable}, "
            f"{a.pending}, {a.failure}", now, host,
            changes=changes, correctable=b.correctable, uncorrectable=b.uncorrectable,
            correctable_delta=max(0, b.correctable - a.correctable),
            uncorrectable_delta=max(0, b.uncorrectable - a.uncorrectable), pending=b.pending, failure=b.failure))
    if prev.recovery_action is not None:
        out.extend(recovery_action_events(prev.recovery_action, cur, now, host))
    return out


# ---- I/O: NVML -> readings ----------------------------------------------------------------------

class NvmlUnavailable(RuntimeError):
    """NVML cannot be initialised (its ``nvmlInit`` error in the message) on a node whose PCI bus
    holds NVIDIA GPUs: the GPUs are there and none can be read."""


class NvmlCollector:
    """The polled NVML collector (contract: :mod:`nodewarden.collectors.base`).

    ``hostname``: the ``host`` of events (default: this machine's name); ``clock``: the time of
    events and of the recovery-action re-probe (seconds since the epoch); ``timeout_s``: a poll's
    NVML reads that take longer raise :class:`~nodewarden.nvml.NvmlTimeout` (seconds,
    :func:`nodewarden.nvml.call_with_timeout`); ``nvlink_errors_every``: the NVLink error counters
    are read at every Nth poll (:data:`NVLINK_ERRORS_EVERY`). The previous poll of each GPU is
    kept in memory to turn counter changes into events. :meth:`collect` is not reentrant: the agent's poller
    never calls it while a call is running."""

    name = NAME

    def __init__(self, hostname: str | None = None, clock: Callable[[], float] = time.time,
                 timeout_s: float = nvml.DEFAULT_TIMEOUT_S, sysfs: str | Path | None = None,
                 nvlink_errors_every: int = NVLINK_ERRORS_EVERY) -> None:
        if isinstance(nvlink_errors_every, bool) or not isinstance(nvlink_errors_every, int) or nvlink_errors_every < 1:
            raise ValueError(f"nvlink_errors_every: a whole number of polls >= 1 (got {nvlink_errors_every!r})")
        self.nvlink_errors_every = nvlink_errors_every
        self._count: int | None = None  # GPUs the driver enumerated at the last poll
        self._polls = 0  # polls that read the GPUs: the NVLink error counters at every nvlink_errors_every-th
        self._link_errors_due = True
        self.host = hostname or socket.gethostname()
        self._sysfs = Path(sysfs) if sysfs is not None else None  # where NVIDIA GPUs are looked for without NVML
        self.clock = clock
        self.timeout_s = timeout_s
        self._session: Session | None = None  # once nvmlInit succeeded
        self._prev: dict[int, GpuReading] = {}
        self._identity: dict[int, nvml.GpuIdentity] = {}  # the last identity read, kept for a lost GPU
        self._counter_samples: dict[int, tuple[GpuReading, list[Any]]] = {}  # the last counter_samples per GPU
        self._static: dict[int, GpuStatic] = {}            # per session (cleared when NVML is initialised again)
        self._unsupported: dict[tuple[int, tuple[Any, ...]], float] = {}  # (gpu, query) -> clock of the next probe
        self._init_error: str | None = None
        # Recovery action: the last value read per GPU (events compare with it), and the GPUs
        # whose driver lacks the field -> (why, clock time of the next probe).
        self._last_action: dict[int, int] = {}
        self._no_recovery_field: dict[int, tuple[str, float]] = {}

    # -- NVML lifetime ----------------------------------------------------------------------------
    def _ensure_init(self) -> bool:
        """nvmlInit once, and again on a later poll after it failed (driver loaded late). A driver
        that is there and broken raises :class:`~nodewarden.nvml.NvmlCallError` (the poll fails:
        ``nodewarden_collector_success`` 0), never taken for a node without GPUs."""
        if self._session is not None:
            return True
        session, why = nvml.init()
        if session is not None:
            self._session, self._init_error = session, None
            return True
        if why != self._init_error:
            log.info("NVML not available (%s): no GPU series until it is", why)
            self._init_error = why
        return False

    @property
    def recovery_action_unsupported(self) -> dict[int, str]:
        """GPU index -> why its recovery action is not read (the nvmlReturn name), for the
        GPUs whose driver lacks ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``."""
        return {i: why for i, (why, _) in self._no_recovery_field.items()}

    def _reset(self) -> None:
        self._no_recovery_field.clear()  # a reloaded driver may have the field
        self._unsupported.clear()
        self._static.clear()
        session, self._session = self._session, None
        if session is not None:
            session.shutdown()

    def close(self) -> None:
        """nvmlShutdown (the agent calls it when it stops), under the session's timeout: a hung
        driver never holds up the agent's stop (it is then left to the process's exit)."""
        if self._session is None:
            return
        try:
            nvml.call_with_timeout(self._reset, min(self.timeout_s, CLOSE_TIMEOUT_S), what="nvmlShutdown")
        except nvml.NvmlTimeout as e:
            log.warning("NVML not shut down: %s", e)

    # -- one poll ---------------------------------------------------------------------------------
    def collect(self) -> Snapshot:
        """One poll: every GPU's series and the events against the previous poll. Raises
        :class:`~nodewarden.nvml.NvmlTimeout` when NVML does not answer within ``timeout_s`` (or
        an earlier call is still blocked in the driver)."""
        snap = Snapshot()
        readings = nvml.call_with_timeout(self._read_all, self.timeout_s, what="nvml collector poll")
        now = dt.datetime.fromtimestamp(self.clock(), tz=dt.timezone.utc)
        for r in readings:
            index = r.index
            key = without_sensors(r)
            cached = self._counter_samples.get(index)
            if cached is None or cached[0] != key:  # the same Sample objects while nothing changed
                part = Snapshot()
                counter_samples(r, part)
                cached = self._counter_samples[index] = (key, part.samples)
            snap.samples.extend(cached[1])
            sensor_samples(r, snap)
            prev = self._prev.get(index)
            if prev is not None and prev.recovery_action != self._last_action.get(index):
                # the previous poll did not read it (an error): compare with the last value read
                prev = dataclasses.replace(prev, recovery_action=self._last_action.get(index))
            snap.events.extend(events_between(prev, r, now, self.host))
            if r.lost or index in self._no_recovery_field:
                self._last_action.pop(index, None)
            elif r.recovery_action is not None:
                self._last_action[index] = r.recovery_action
            self._prev[index] = baseline(prev, r)
        return snap

    def _read_all(self) -> list[GpuReading]:
        """Every GPU's reading ([] without NVML on a node without NVIDIA GPUs); run under the
        session's timeout. Raises :class:`NvmlUnavailable` when NVML cannot be initialised while
        ``<sysfs>/bus/pci/devices`` holds NVIDIA GPUs (no driver, no library in the container):
        the poll fails, so that a GPU node whose GPUs cannot be read is not reported healthy."""
        if not self._ensure_init():
            gpus = self._gpus_on_the_bus()
            if gpus:
                raise NvmlUnavailable(f"{self._init_error}, while {len(gpus)} NVIDIA GPU(s) are on the PCI bus "
                                      f"({', '.join(gpus[:4])}{', ...' if len(gpus) > 4 else ''}): no GPU is read")
            return []
        assert self._session is not None
        self._link_errors_due = self._polls % self.nvlink_errors_every == 0
        self._polls += 1
        try:
            n = self._session.count()
        except nvml.NvmlCallError as e:
            if e.ret in nvml.NO_DRIVER:
                log.warning("NVML went away (%s): will initialise again", e)
                self._reset()
                return []
            raise
        if n != self._count:
            self._forget_beyond(n)
        return [r for r in (self.read_gpu(index) for index in range(n)) if r is not None]

    def _forget_beyond(self, n: int) -> None:
        """The driver enumerates ``n`` GPUs, not the earlier count: what was kept of the GPUs at
        index ``n`` and up is dropped (an index that comes back may be another GPU: no counter
        kept from, and no event against, the one before), and every GPU's static identity is
        read again at this poll."""
        for kept in (self._prev, self._counter_samples, self._identity, self._last_action):
            for index in [i for i in kept if i >= n]:
                del kept[index]
        self._static.clear()
        self._count = n

    def _gpus_on_the_bus(self) -> list[str]:
        """PCI bus ids of the NVIDIA GPUs (display class, not NVSwitches) under ``sysfs``; [] without one."""
        if self._sysfs is None:
            return []
        return [f.pci_bus_id for f in pci.read_functions(self._sysfs, vendors=(pci.NVIDIA,), upstream=False)
                if pci.is_gpu(f)]

    def read_gpu(self, index: int) -> GpuReading | None:
        """Everything one poll reads from GPU ``index``; None when it has no handle for a reason
        other than being lost. Blocks as long as the driver does.

        Calls per poll: the handle, one ``nvmlDeviceGetFieldValues`` (:meth:`_field_plan`: ECC,
        retired pages, remapped rows, PCIe replays, the recovery action and the NVLink counters
        of links 0-11), one ``nvmlDeviceGetNvLinkState`` per link the GPU has, the NVLink
        counters of links 12 and up (the NVLink counters at every ``nvlink_errors_every``-th
        poll only, :meth:`_kept_link_errors`), the current PCIe generation and width, the clock-event
        reasons, temperature and power. What does not change while the driver is loaded (the
        identity, the links a GPU has, its maximum PCIe generation and width) is read at the
        first poll and again every :data:`STATIC_REREAD_SECONDS`, after NVML is initialised
        again and after the GPU was lost. A query that answered NVML_ERROR_NOT_SUPPORTED (or a
        field value that did, with its call) is not asked again for
        :data:`UNSUPPORTED_REPROBE_SECONDS`."""
        s = self._session
        assert s is not None
        r = GpuReading(index)
        try:
            try:
                h = s.handle(index)
            except nvml.NvmlCallError as e:
                log.warning("GPU %d: no NVML handle (%s)", index, e)
                return None
            if h is None:
                log.warning("GPU %d: no NVML handle", index)
                return None
            now = self.clock()
            static = self._static.get(index)
            if static is None or now >= static.reread_at:
                static = self._read_static(index, s, h, now)
            r.uuid, r.pci_bus_id, r.name, r.minor = static.identity
            kept = self._kept_link_errors(index, static)
            plan = self._field_plan(index, static, now, kept)
            try:
                reads = dict(zip(plan, nvml.read_fields(s, h, plan, raise_call_error=True)))
            except nvml.NvmlCallError as e:
                # The whole call failed: a driver without it answers so at every poll (each field is
                # then remembered as unsupported); another error is this poll's only, and every value
                # comes from its per-counter call instead.
                reads = ({f: nvml.FieldRead(None, e.ret) for f in plan} if driver_lacks_field(e.ret) else {})
                if not driver_lacks_field(e.ret):
                    log.debug("GPU %d: nvmlDeviceGetFieldValues: %s; reading per counter", index, e)
            self._read_recovery_action(r, reads.get((NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0)), now)
            self._read_memory(r, s, h, reads, now)
            self._read_links(r, s, h, static, reads, now, kept)
            for fn in nvml.CLOCK_EVENT_REASONS_CALLS:  # r535 and later, else the older name (same bits)
                mask = self._call(index, s, now, fn, h)
                if mask is not None:
                    r.clocks_event_reasons = int(mask)
                    break
            temp = self._call(index, s, now, "nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)
            r.temperature_celsius = None if temp is None else float(temp)
            power = self._call(index, s, now, "nvmlDeviceGetPowerUsage", h)
            r.power_milliwatts = None if power is None else float(power)
        except GpuLost as e:
            # What was read before the loss is dropped: a lost GPU exports its identity and
            # nodewarden_gpu_lost only, and its counters get no baseline from a half-read poll.
            self._static.pop(index, None)  # read again when it answers again (a reset GPU)
            uuid, pci, name, minor = self._identity.get(index, (None, None, None, None))
            r = GpuReading(index, lost=True, lost_call=e.call, uuid=uuid, pci_bus_id=pci, name=name, minor=minor)
        return r

    # -- what does not change while the driver is loaded ------------------------------------------
    def _read_static(self, index: int, s: Session, h: Any, now: float) -> "GpuStatic":
        """The identity, the NVLink links the GPU answers for (a probe of every link) and its
        maximum PCIe generation and width; kept for STATIC_REREAD_SECONDS when every query
        answered (a value or NOT_SUPPORTED), read again at the next poll when one failed (an
        error is no answer: a link or a UUID is not dropped for an hour for it). Raises GpuLost."""
        complete = True

        def ask(fn: str, *args: Any) -> Any:
            nonlocal complete
            try:
                return s.call(fn, h, *args)
            except nvml.NvmlCallError as e:
                if e.ret != nvml.NVML_ERROR_INVALID_ARGUMENT or fn != "nvmlDeviceGetNvLinkState":
                    complete = False  # INVALID_ARGUMENT for a link: a link number beyond the GPU's
                log.debug("GPU %d: %s", index, e)
                return None

        ident = nvml.identity(s, h)
        complete = None not in (ident.uuid, ident.pci_bus_id)
        links = []
        for link in range(int(getattr(s.nv, "NVML_NVLINK_MAX_LINKS", nvml.NVLINK_MAX_LINKS))):
            state = ask("nvmlDeviceGetNvLinkState", link)
            if state is None and link == 0 and complete:
                break  # no NVLink at all: a PCIe card
            if state is not None:
                links.append(link)
        pcie_max = {}
        for key, fn in (("generation", "nvmlDeviceGetMaxPcieLinkGeneration"), ("width", "nvmlDeviceGetMaxPcieLinkWidth")):
            v = ask(fn)
            if v is not None:
                pcie_max[key] = int(v)
        static = GpuStatic(ident, tuple(links), pcie_max, now + STATIC_REREAD_SECONDS if complete else now)
        self._static[index] = static
        self._identity[index] = ident
        return static

    # -- NOT_SUPPORTED, remembered -------------------------------------------------------------------
    def _asked(self, index: int, key: tuple[Any, ...], now: float) -> bool:
        """False while ``key`` (a call and its arguments, or a field id) answered NOT_SUPPORTED on
        GPU ``index`` less than UNSUPPORTED_REPROBE_SECONDS ago."""
        until = self._unsupported.get((index, key))
        if until is None:
            return True
        if now < until:
            return False
        del self._unsupported[(index, key)]
        return True

    def _mark_unsupported(self, index: int, key: tuple[Any, ...], now: float) -> None:
        if (index, key) not in self._unsupported:
            log.debug("GPU %d: %s not supported; asked again in %gs", index, key, UNSUPPORTED_REPROBE_SECONDS)
        self._unsupported[(index, key)] = now + UNSUPPORTED_REPROBE_SECONDS

    def _call(self, index: int, s: Session, now: float, fn: str, *args: Any) -> Any:
        """:meth:`Session.value` of ``fn(h, *args)`` (``args[0]`` is the handle), None for this
        poll on an error, None and remembered (:meth:`_asked`) on NVML_ERROR_NOT_SUPPORTED or a
        binding without ``fn``. Raises GpuLost."""
        key = (fn, *args[1:])
        if not self._asked(index, key, now):
            return None
        try:
            v = s.call(fn, *args)
        except nvml.NvmlCallError as e:
            log.debug("%s", e)
            return None
        if v is None:
            self._mark_unsupported(index, key, now)
        return v

    def _kept_link_errors(self, index: int, static: "GpuStatic") -> dict[int, dict[tuple[int, str], int]]:
        """The links of GPU ``index`` whose NVLink error counters this poll takes from the
        previous reading instead of NVML: none at a poll that reads them; else each link with
        all four counters in the previous reading of the same GPU (same UUID, not lost)."""
        prev = self._prev.get(index)
        if self._link_errors_due or prev is None or prev.lost or prev.uuid != static.identity.uuid:
            return {}
        out = {}
        for link in static.links:
            values = {(link, typ): prev.nvlink_errors.get((link, typ)) for typ in NVLINK_COUNTERS}
            if None not in values.values():
                out[link] = values
        return out

    def _field_plan(self, index: int, static: "GpuStatic", now: float,
                    kept: Mapping[int, Any] | None = None) -> list[tuple[int, int]]:
        """The field ids of this poll's ``nvmlDeviceGetFieldValues`` call on GPU ``index``: the
        module's counters that have one (:data:`nodewarden.nvml.ECC_FIELDS` ...), the NVLink
        counters of the GPU's links below NVLINK_FIELD_LINKS, and the recovery action unless
        the driver lacks it (RECOVERY_ACTION_REPROBE_SECONDS); minus the fields remembered as
        not supported, and the counters of the links in ``kept`` (this poll keeps their earlier
        values). Each entry is (field id, scopeId): the scope is the link of
        :data:`nodewarden.nvml.NVLINK_STATE_FIELD`, 0 for the others."""
        ids = [*nvml.ECC_FIELDS.values(), *nvml.RETIRED_FIELDS.values(), nvml.RETIRED_PENDING_FIELD,
               *nvml.REMAPPED_FIELDS.values(), nvml.PCIE_REPLAY_FIELD]
        for link in static.links:
            if link < nvml.NVLINK_FIELD_LINKS and link not in (kept or {}):
                ids.extend(nvml.NVLINK_ERROR_FIELDS[typ][link] for typ in NVLINK_COUNTERS)
        known = self._no_recovery_field.get(index)
        if known is None or now >= known[1]:
            ids.append(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
        plan = [(f, 0) for f in ids] + [(nvml.NVLINK_STATE_FIELD, link) for link in static.links]
        return [f for f in plan if self._asked(index, ("field", *f), now)]

    def _field(self, index: int, reads: Mapping[tuple[int, int], nvml.FieldRead], fid: int, now: float,
               scope: int = 0) -> tuple[bool, int | None]:
        """(answered, value) of field ``fid`` (``scope``: its scopeId) in this poll's reads:
        answered False when the field was not read or the driver lacks it (then the caller asks
        the per-counter call, and the field is remembered as not supported); (True, None) for
        another error (this poll only)."""
        fr = reads.get((fid, scope))
        if fr is None:
            return False, None
        if fr.value is not None:
            return True, fr.value
        if driver_lacks_field(fr.ret):
            self._mark_unsupported(index, ("field", fid, scope), now)
            return False, None
        log.debug("GPU %d: nvmlDeviceGetFieldValues field %d scope %d: %s", index, fid, scope, return_name(fr.ret))
        return True, None

    def _read_recovery_action(self, r: GpuReading, fr: nvml.FieldRead | None, now: float) -> None:
        """``r.recovery_action`` from this poll's field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        (``fr``; None: not asked this poll), an nvmlDeviceGpuRecoveryAction_t. A driver without
        the field (:func:`~nodewarden.nvml.driver_lacks_field`) leaves it None: logged once per
        GPU, asked again after RECOVERY_ACTION_REPROBE_SECONDS. Another error leaves it None for
        this poll only (logged at debug level)."""
        if fr is None:
            return
        known = self._no_recovery_field.get(r.index)
        code, ret = fr
        if code is not None:
            if known is not None:
                log.info("GPU %d: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers now", r.index)
                del self._no_recovery_field[r.index]
            r.recovery_action = code
            return
        why = return_name(ret)
        if driver_lacks_field(ret):
            if known is None:
                log.info("GPU %d: the driver has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (%s): no "
                         "nodewarden_gpu_recovery_action series; asked again every %gs",
                         r.index, why, RECOVERY_ACTION_REPROBE_SECONDS)
            self._no_recovery_field[r.index] = (why, now + RECOVERY_ACTION_REPROBE_SECONDS)
        else:
            log.debug("GPU %d: nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): %s", r.index, why)

    def _read_memory(self, r: GpuReading, s: Session, h: Any, reads: Mapping[tuple[int, int], nvml.FieldRead],
                     now: float) -> None:
        """ECC totals, retired pages, remapped rows: from the field values, else (a driver without
        the field) nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRetiredPages,
        nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRemappedRows."""
        i = r.index
        for (typ, scope), fid in nvml.ECC_FIELDS.items():
            answered, v = self._field(i, reads, fid, now)
            if not answered:
                v = self._call(i, s, now, "nvmlDeviceGetTotalEccErrors", h, ECC_TYPES[typ], ECC_SCOPES[scope])
            if v is not None:
                r.ecc[(typ, scope)] = int(v)
        for cause, fid in nvml.RETIRED_FIELDS.items():
            answered, v = self._field(i, reads, fid, now)
            if not answered:
                pages = self._call(i, s, now, "nvmlDeviceGetRetiredPages", h, RETIREMENT_CAUSES[cause])
                v = None if pages is None else len(pages)
            if v is not None:
                r.retired_pages[cause] = int(v)
        answered, pending = self._field(i, reads, nvml.RETIRED_PENDING_FIELD, now)
        if not answered:
            pending = self._call(i, s, now, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        r.retired_pages_pending = None if pending is None else int(bool(pending))
        got = {name: self._field(i, reads, fid, now) for name, fid in nvml.REMAPPED_FIELDS.items()}
        if all(answered for answered, _ in got.values()):
            vals = {name: v for name, (_, v) in got.items()}
            if all(v is not None for v in vals.values()):
                r.remapped_rows = RemappedRows(int(vals["correctable"]), int(vals["uncorrectable"]),
                                               int(bool(vals["pending"])), int(bool(vals["failure"])))
            return
        rows = self._call(i, s, now, "nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corr, unc, pend, fail = (int(x) for x in rows)
            r.remapped_rows = RemappedRows(corr, unc, int(bool(pend)), int(bool(fail)))

    def _read_links(self, r: GpuReading, s: Session, h: Any, static: "GpuStatic",
                    reads: Mapping[tuple[int, int], nvml.FieldRead], now: float,
                    kept: Mapping[int, Mapping[tuple[int, str], int]] | None = None) -> None:
        """The state of each link the GPU has (field NVML_FI_DEV_NVLINK_GET_STATE of the link,
        else nvmlDeviceGetNvLinkState: a link that answers neither is left out) and its four
        error counters (field values for links 0-11, else nvmlDeviceGetNvLinkErrorCounter; a link
        in ``kept`` keeps those values, read at an earlier poll);
        nvmlDeviceGetCurrPcieLink{Generation,Width} (the max ones are static), PCIe replays
        (field value, else nvmlDeviceGetPcieReplayCounter)."""
        i = r.index
        for link in static.links:
            answered, up = self._field(i, reads, nvml.NVLINK_STATE_FIELD, now, scope=link)
            if not answered:
                up = self._call(i, s, now, "nvmlDeviceGetNvLinkState", h, link)
            if up is None:
                continue
            r.nvlink_state[link] = 1 if up else 0
            if kept and link in kept:
                r.nvlink_errors.update(kept[link])
                continue
            for typ, c in NVLINK_COUNTERS.items():
                answered, v = (self._field(i, reads, nvml.NVLINK_ERROR_FIELDS[typ][link], now)
                               if link < nvml.NVLINK_FIELD_LINKS else (False, None))
                if not answered:
                    v = self._call(i, s, now, "nvmlDeviceGetNvLinkErrorCounter", h, link, c)
                if v is not None:
                    r.nvlink_errors[(link, typ)] = int(v)
        for key, out, fn in (("generation", r.pcie_generation, "nvmlDeviceGetCurrPcieLinkGeneration"),
                             ("width", r.pcie_width, "nvmlDeviceGetCurrPcieLinkWidth")):
            v = self._call(i, s, now, fn, h)
            if v is not None:
                out["current"] = int(v)
            if key in static.pcie_max:
                out["max"] = static.pcie_max[key]
        answered, replays = self._field(i, reads, nvml.PCIE_REPLAY_FIELD, now)
        if not answered:
            replays = self._call(i, s, now, "nvmlDeviceGetPcieReplayCounter", h)
        r.pcie_replays = None if replays is None else int(replays)


class GpuStatic(NamedTuple):
    """What one GPU reports that does not change while the driver is loaded: its identity, the
    NVLink links it answers for, its maximum PCIe ``generation`` and ``width``; read again at
    ``reread_at`` (the collector's clock)."""

    identity: nvml.GpuIdentity
    links: tuple[int, ...]
    pcie_max: dict[str, int]
    reread_at: float

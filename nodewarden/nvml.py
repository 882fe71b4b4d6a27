"""The one NVML session: every NVML call nodewarden makes goes through this module.

NVML (``libnvidia-ml.so.1``, through :mod:`nodewarden.nvmllib`, a ctypes binding of the calls
made here under nvidia-ml-py's names and conventions) is read by the
agent's NVML collector, the validator's checks (their NVML snapshot), hardware-profile
auto-detection and the agent's GPU-busy probe. They share four rules, each written once here:

Session (:func:`init`, :meth:`Session.shutdown`)
    ``nvmlInit`` -> a :class:`Session`, or ``(None, why)`` without the
    library (``NVML_ERROR_LIBRARY_NOT_FOUND``) or without a loaded driver
    (``NVML_ERROR_DRIVER_NOT_LOADED``): no NVML is no data, never an error.
Call wrapper (:meth:`Session.call`)
    ``NVML_ERROR_NOT_SUPPORTED`` / ``NVML_ERROR_FUNCTION_NOT_FOUND`` (or a binding without the
    function): absent, ``None``. ``NVML_ERROR_GPU_IS_LOST``: :class:`GpuLost` (the GPU fell off
    the bus: the caller stops asking it). Any other nvmlReturn_t: :class:`NvmlCallError`.
Timeout (:func:`call_with_timeout`, :func:`query`)
    NVML calls block as long as the driver does; a wedged driver (after an Xid 79, a GPU in
    reset) blocks them for ever, and a thread blocked in C cannot be interrupted. So every caller
    runs its NVML work in a daemon worker thread (kept for the next call: a thread start costs
    about what a poll's NVML reads do) and waits ``timeout_s``: past it, :class:`NvmlTimeout`,
    the thread left blocked in the driver. While any such thread is still blocked, a new call
    raises :class:`NvmlTimeout` at once without handing it to a thread: one wedged driver costs
    one timeout per process, not one per caller, and blocked threads never pile up. Daemon
    threads (not ``concurrent.futures``, whose workers the interpreter joins at exit) so that a
    process can always exit.
Clock-event reasons (:data:`CLOCK_EVENT_REASONS`, :func:`decode_clock_event_reasons`)
    One table of the ``nvmlClocksEventReason*`` bits, with nvml.h's names; the JSON report and
    the ``reason`` label of ``nodewarden_gpu_clocks_event_reasons`` both use them.

Besides, the readers both the collector and the checks use (:func:`identity`,
:func:`clock_event_reasons`, :func:`nvlink_states`, :func:`read_recovery_action`) and the
NVIDIA device minor of a PCI function (:class:`GpuMinors`, from the driver's procfs files).

Clock-event reasons
-------------------
``nvmlDeviceGetCurrentClocksEventReasons`` (r535 and later; ``...ClocksThrottleReasons`` before,
same bits) returns a mask of why the clocks are below the maximum. nvml.h names
(``nvmlClocksEventReason*``, ``nvmlClocksThrottleReason*`` before r535) and our names
(nvidia-smi's wording in ``-q -d PERFORMANCE``, snake case)::

    0x001 GpuIdle                    gpu_idle
    0x002 ApplicationsClocksSetting  applications_clocks_setting
    0x004 SwPowerCap                 sw_power_cap
    0x008 HwSlowdown                 hw_slowdown               fault
    0x010 SyncBoost                  sync_boost
    0x020 SwThermalSlowdown          sw_thermal_slowdown       fault
    0x040 HwThermalSlowdown          hw_thermal_slowdown       fault
    0x080 HwPowerBrakeSlowdown       hw_power_brake_slowdown   fault
    0x100 DisplayClockSetting        display_clock_setting

A fault is a reason that holds a working GPU's clocks down because of its hardware or cooling
(slowdown, thermal, power brake); the others are policy or idleness.

GPU recovery action
-------------------
NVML field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (field id 230), read with
``nvmlDeviceGetFieldValues(device, 1, values)``: the driver's own verdict on what a GPU needs
before it can be trusted again, an ``nvmlDeviceGpuRecoveryAction_t`` (unitless enum)::

    0 NVML_GPU_RECOVERY_ACTION_NONE             none
    1 NVML_GPU_RECOVERY_ACTION_GPU_RESET        gpu_reset
    2 NVML_GPU_RECOVERY_ACTION_NODE_REBOOT      node_reboot
    3 NVML_GPU_RECOVERY_ACTION_DRAIN_P2P        drain_p2p
    4 NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET  drain_and_reset
    5 NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN  recover_imex_domain
    6 NVML_GPU_RECOVERY_ACTION_BUS_RESET        bus_reset      (NVML v615)
    7 NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT    system_reboot  (NVML v615)

Sources: ``nvml.h`` as mirrored by NVIDIA's nvidia-ml-py 13.615.71 (``pynvml.py``:
``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230``, ``_nvmlDeviceGpuRecoveryAction_t`` 0..7, the
deprecated fields 226 ``NVML_FI_DEV_RESET_STATUS`` / 227 ``NVML_FI_DEV_DRAIN_AND_RESET_STATUS``
it replaces); NVIDIA's cuda-python ``cuda.bindings.nvml.DeviceGpuRecoveryAction`` (generated from
nvml.h: 5 is RECOVER_IMEX_DOMAIN, 6 BUS_RESET, 7 SYSTEM_REBOOT); the NVML API Reference
"Change Log" (v610 -> v615 added BUS_RESET and SYSTEM_REBOOT) and "Field Value Queries" (the
call's own return says only whether the request was well formed: each value's ``nvmlReturn``
must be checked); NVIDIA's GPU memory error management guide, "Error Recovery and Response
Flags" (what each action asks of the operator, :data:`RECOVERY_ADVICE`). Values 0-4 are the
ones the Xid 154 text prints (``0x1 (GPU Reset Required)``, ``0x4 (Drain and Reset)``).

A driver without the field (before r570) answers the value's ``nvmlReturn`` with
``NVML_ERROR_NOT_SUPPORTED`` (``NVML_ERROR_INVALID_ARGUMENT`` for a field id it does not know is
treated alike), a very old one lacks ``nvmlDeviceGetFieldValues`` itself:
:func:`driver_lacks_field` says so; neither is an error.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import queue
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence, TypeVar

from nodewarden.parsing.pci import normalize_pci
from nodewarden.parsing.xid import RECOVERY_ACTIONS

log = logging.getLogger(__name__)

T = TypeVar("T")

# An NVML operation of the validator (a snapshot, profile auto-detection) that has not returned
# after this many seconds is taken as a hung driver (the checks' ``nvml_timeout_seconds``).
DEFAULT_TIMEOUT_S = 30.0

# nvmlReturn_t values (nvml.h) the callers act on.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
RETURN_NAMES = {
    0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED", 4: "NVML_ERROR_NO_PERMISSION", 6: "NVML_ERROR_NOT_FOUND",
    9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND", 15: "NVML_ERROR_GPU_IS_LOST", 999: "NVML_ERROR_UNKNOWN",
}
# A call answering one of these: the query does not exist on this driver/GPU/binding (absent).
_ABSENT = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)
# A call answering one of these: NVML itself went away (driver unloaded): initialise again.
NO_DRIVER = (NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND)
_LACKS_FIELD = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_FUNCTION_NOT_FOUND)

NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVLINK_MAX_LINKS = 18  # when the binding does not say (NVML_NVLINK_MAX_LINKS: 18 before r570, then 36)


def return_name(ret: int) -> str:
    """``3`` -> ``NVML_ERROR_NOT_SUPPORTED`` (``nvmlReturn_t N`` for a value not listed)."""
    return RETURN_NAMES.get(ret, f"nvmlReturn_t {ret}")


# ---- errors -----------------------------------------------------------------------------------

class GpuLost(Exception):
    """A call answered ``NVML_ERROR_GPU_IS_LOST`` (the GPU fell off the bus, Xid 79): ``call``
    names the NVML function. Nothing more can be read from that GPU until it is reset."""

    def __init__(self, call: str) -> None:
        super().__init__(f"{call}: NVML_ERROR_GPU_IS_LOST")
        self.call = call


class NvmlCallError(Exception):
    """A call answered an nvmlReturn_t that is neither success, absent nor lost: ``call`` (the
    NVML function), ``ret`` (the nvmlReturn_t)."""

    def __init__(self, call: str, ret: int) -> None:
        super().__init__(f"{call}: {return_name(ret)}")
        self.call = call
        self.ret = ret


class NvmlTimeout(Exception):
    """NVML did not answer: ``what`` did not return within ``seconds`` (its thread is left
    blocked in the driver), or (``blocked`` set) an earlier call, ``blocked``, is still blocked
    in the driver after its own timeout, so ``what`` was not started."""

    def __init__(self, what: str, seconds: float, blocked: str | None = None, blocked_s: float = 0.0) -> None:
        if blocked is None:
            text = f"NVML did not answer within {seconds:g} s ({what})"
        else:
            text = (f"NVML did not answer: {blocked} has been blocked in the driver for {blocked_s:.0f} s "
                    f"({what} not started)")
        super().__init__(text)
        self.what = what
        self.seconds = seconds
        self.blocked = blocked


# ---- the one timeout --------------------------------------------------------------------------

_lock = threading.Lock()
# Calls past their timeout whose thread is still blocked in the driver: thread id -> (what,
# time.monotonic() when the call started). Non-empty: the driver is taken as wedged.
_blocked: dict[int, tuple[str, float]] = {}
# Worker threads waiting for a call (guarded by _lock). A poll every few seconds would otherwise
# start a thread each time (a thread start costs about as much as the NVML reads of a poll).
_idle: list["_Worker"] = []
MAX_IDLE_WORKERS = 2


class _Call:
    """One call handed to a worker: ``fn(*args)``; ``done`` is held until it has returned."""

    __slots__ = ("fn", "args", "what", "value", "error", "finished", "done")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], what: str) -> None:
        self.fn, self.args, self.what = fn, args, what
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.done = threading.Lock()
        self.done.acquire()


class _Worker:
    """A daemon thread that runs the calls put to it, one at a time, and offers itself again
    (up to :data:`MAX_IDLE_WORKERS` idle) after each; a call blocked past its timeout keeps its
    worker out of the idle list until the driver lets it go."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="nvml worker", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        ident = threading.get_ident()
        while True:
            call = self.calls.get()
            try:
                call.value = call.fn(*call.args)
            except BaseException as e:  # handed to the caller's thread
                call.error = e
            with _lock:
                _blocked.pop(ident, None)
                call.finished = True
                call.done.release()
                if len(_idle) >= MAX_IDLE_WORKERS:
                    return
                _idle.append(self)
            del call


def blocked_calls() -> dict[str, float]:
    """The NVML calls still blocked in the driver after their timeout: what -> seconds since
    they started (time.monotonic). Empty when NVML answers."""
    now = time.monotonic()
    with _lock:
        return {what: now - t0 for what, t0 in _blocked.values()}


def call_with_timeout(fn: Callable[..., T], timeout_s: float, *args: Any, what: str = "NVML call") -> T:
    """``fn(*args)`` run in a daemon worker thread, waited for ``timeout_s`` seconds (finite,
    > 0); returns its value or raises its exception in the caller's thread.

    Raises :class:`NvmlTimeout` when it has not returned after ``timeout_s`` (the thread stays
    blocked; it is forgotten when it returns), and at once, handing nothing to a thread, while an
    earlier call is still blocked past its timeout. ``what`` names the call in the error.
    ValueError for a bad ``timeout_s``. Worker threads are kept for the next call (at most
    :data:`MAX_IDLE_WORKERS` idle); calls from several threads at once run side by side."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0 (got {timeout_s!r})")
    call = _Call(fn, args, what)
    with _lock:
        if _blocked:
            first, t0 = min(_blocked.values(), key=lambda v: v[1])
            raise NvmlTimeout(what, timeout_s, blocked=first, blocked_s=time.monotonic() - t0)
        worker = _idle.pop() if _idle else None
    started = time.monotonic()
    if worker is None:
        worker = _Worker()
    worker.calls.put(call)
    if not call.done.acquire(timeout=timeout_s):
        with _lock:
            if not call.finished:
                assert worker.thread.ident is not None
                _blocked[worker.thread.ident] = (what, started)
                raise NvmlTimeout(what, timeout_s)
    if call.error is not None:
        error, call.error = call.error, None
        raise error
    return call.value


# ---- the session ------------------------------------------------------------------------------

def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Session:
    """An initialised NVML (``nvmlInit`` done, by :func:`init`); ``nv`` is the binding
    (:mod:`nodewarden.nvmllib`, or any module-like object with nvidia-ml-py's functions and
    ``NVMLError``: pynvml itself reads the same).
    Its methods block as long as the driver does: run them under :func:`call_with_timeout`
    (or :func:`query`)."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv

    def _invoke(self, fn: str, *args: Any) -> Any:
        """``nv.<fn>(*args)``; raises GpuLost on NVML_ERROR_GPU_IS_LOST, NvmlCallError
        (NVML_ERROR_FUNCTION_NOT_FOUND for a binding without ``fn``) on any other error."""
        f = getattr(self.nv, fn, None)
        if f is None:
            raise NvmlCallError(fn, NVML_ERROR_FUNCTION_NOT_FOUND)
        try:
            return f(*args)
        except self.nv.NVMLError as e:
            ret = int(e.value)
            if ret == NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(fn) from None
            raise NvmlCallError(fn, ret) from None

    def call(self, fn: str, *args: Any) -> Any:
        """The call wrapper: ``nv.<fn>(*args)``'s value, or None when the query is absent
        (``NVML_ERROR_NOT_SUPPORTED``, ``NVML_ERROR_FUNCTION_NOT_FOUND``, a binding without
        ``fn``). Raises :class:`GpuLost` on ``NVML_ERROR_GPU_IS_LOST``, :class:`NvmlCallError` on
        any other nvmlReturn_t."""
        try:
            return self._invoke(fn, *args)
        except NvmlCallError as e:
            if e.ret in _ABSENT:
                return None
            raise

    def value(self, fn: str, *args: Any) -> Any:
        """:meth:`call`, with an error (:class:`NvmlCallError`) also None, logged at debug
        level: for a reading whose failure is no finding (a temperature, a clock). Raises
        :class:`GpuLost`."""
        try:
            return self.call(fn, *args)
        except NvmlCallError as e:
            log.debug("%s", e)
            return None

    def count(self) -> int:
        """``nvmlDeviceGetCount``: GPUs the driver enumerates. Raises NvmlCallError."""
        return int(self.call("nvmlDeviceGetCount") or 0)

    def handle(self, index: int) -> Any:
        """``nvmlDeviceGetHandleByIndex(index)``; None when not supported. Raises GpuLost,
        NvmlCallError."""
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def shutdown(self) -> None:
        """``nvmlShutdown`` (NVML counts nvmlInit/nvmlShutdown pairs); an error is ignored: the
        driver is going or gone, there is nothing to release."""
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


def init() -> tuple[Session | None, str]:
    """``nvmlInit``: ``(Session, "")``, or ``(None, why)`` where there is no NVML -- no
    ``libnvidia-ml.so.1`` (NVML_ERROR_LIBRARY_NOT_FOUND, or a library that is
    not NVML), no driver loaded (NVML_ERROR_DRIVER_NOT_LOADED, :data:`NO_DRIVER`). Any other
    nvmlInit failure is a driver that is there and broken (NVML_ERROR_RM_VERSION_MISMATCH after
    a driver upgrade without a reload, NVML_ERROR_UNKNOWN...): raises :class:`NvmlCallError`,
    never taken for a node without GPUs. Blocks as long as the driver does."""
    from nodewarden import nvmllib
    try:
        nvmllib.nvmlInit()
    except nvmllib.NVMLError as e:
        ret = int(e.value)
        if ret not in NO_DRIVER:
            raise NvmlCallError("nvmlInit", ret) from None
        return None, f"nvmlInit: {return_name(ret)} ({e})"
    except OSError as e:  # a library that loads but is not NVML
        return None, f"nvmlInit: {e}"
    return Session(nvmllib), ""


def query(fn: Callable[[Session], T], timeout_s: float, what: str) -> tuple[T | None, str]:
    """One NVML operation from init to shutdown, under :func:`call_with_timeout`: ``(fn(session),
    "")``, or ``(None, why)`` without NVML (:func:`init`). Raises :class:`NvmlTimeout` when it
    does not return within ``timeout_s``, :class:`NvmlCallError` for a broken driver's nvmlInit,
    ValueError for a ``timeout_s`` that is not a positive number; ``fn``'s own exceptions
    (GpuLost, NvmlCallError) propagate."""

    def run() -> tuple[T | None, str]:
        s, why = init()
        if s is None:
            return None, why
        try:
            return fn(s), ""
        finally:
            s.shutdown()

    return call_with_timeout(run, timeout_s, what=what)


# ---- readers the collector and the checks share -------------------------------------------------

class GpuIdentity(NamedTuple):
    """What names a GPU; None for a query it does not answer."""

    uuid: str | None         # nvmlDeviceGetUUID
    pci_bus_id: str | None   # nvmlDeviceGetPciInfo busId, normalized (0000:18:00.0)
    name: str | None         # nvmlDeviceGetName, the product name
    minor: int | None        # nvmlDeviceGetMinorNumber (/dev/nvidia<minor>)


def identity(s: Session, h: Any) -> GpuIdentity:
    """GPU ``h``'s identity (:meth:`Session.value` each). Raises GpuLost."""
    uuid, pci = s.value("nvmlDeviceGetUUID", h), s.value("nvmlDeviceGetPciInfo", h)
    name, minor = s.value("nvmlDeviceGetName", h), s.value("nvmlDeviceGetMinorNumber", h)
    return GpuIdentity(_text(uuid) if uuid is not None else None,
                       normalize_pci(_text(pci.busId)) if pci is not None else None,
                       _text(name) if name is not None else None,
                       int(minor) if minor is not None else None)


CLOCK_EVENT_REASONS_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def clock_event_reasons(s: Session, h: Any) -> tuple[int | None, str | None]:
    """``(mask, call)``: GPU ``h``'s nvmlClocksEventReason mask and the call that answered,
    ``nvmlDeviceGetCurrentClocksEventReasons`` (r535 and later), else
    ``nvmlDeviceGetCurrentClocksThrottleReasons`` (same bits); ``(None, None)`` when neither
    answers. Raises GpuLost."""
    for fn in CLOCK_EVENT_REASONS_CALLS:
        v = s.value(fn, h)
        if v is not None:
            return int(v), fn
    return None, None


def nvlink_states(s: Session, h: Any) -> dict[int, bool]:
    """link -> active (``nvmlDeviceGetNvLinkState``) for each NVLink link GPU ``h`` answers
    for, 0 .. ``NVML_NVLINK_MAX_LINKS``-1; {} for a GPU without NVLink (link 0 does not answer:
    a PCIe card). Raises GpuLost."""
    out: dict[int, bool] = {}
    for link in range(int(getattr(s.nv, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
        state = s.value("nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            if link == 0:  # no NVLink at all: the other links answer the same
                break
            continue
        out[link] = bool(state)
    return out


# ---- clock-event reasons ------------------------------------------------------------------------

class ClockEventReason(NamedTuple):
    """One nvmlClocksEventReason bit: our ``name`` (the report and the ``reason`` label) and
    whether it is a ``fault`` (hardware or cooling holds the clocks down)."""

    name: str
    fault: bool


# nvmlClocksEventReason* bits (nvml.h; see the module docstring).
CLOCK_EVENT_REASONS: dict[int, ClockEventReason] = {
    0x001: ClockEventReason("gpu_idle", False),                    # nvmlClocksEventReasonGpuIdle
    0x002: ClockEventReason("applications_clocks_setting", False),  # ...ApplicationsClocksSetting
    0x004: ClockEventReason("sw_power_cap", False),                # ...SwPowerCap
    0x008: ClockEventReason("hw_slowdown", True),                  # ...HwSlowdown
    0x010: ClockEventReason("sync_boost", False),                  # ...SyncBoost
    0x020: ClockEventReason("sw_thermal_slowdown", True),          # ...SwThermalSlowdown
    0x040: ClockEventReason("hw_thermal_slowdown", True),          # ...HwThermalSlowdown
    0x080: ClockEventReason("hw_power_brake_slowdown", True),      # ...HwPowerBrakeSlowdown
    0x100: ClockEventReason("display_clock_setting", False),       # ...DisplayClockSetting
}
_KNOWN_CLOCK_BITS = sum(CLOCK_EVENT_REASONS)


def decode_clock_event_reasons(mask: int) -> tuple[list[str], list[str]]:
    """``(faults, informational)``: the names of the reasons set in an nvmlClocksEventReason
    ``mask``, in bit order; bits the table lacks (a newer driver) as one ``0x..`` entry in
    informational. ``0x28`` -> ``(["hw_slowdown", "sw_thermal_slowdown"], [])``."""
    faults, info = [], []
    for bit, reason in CLOCK_EVENT_REASONS.items():
        if mask & bit:
            (faults if reason.fault else info).append(reason.name)
    unknown = mask & ~_KNOWN_CLOCK_BITS
    if unknown:
        info.append(f"0x{unknown:x}")
    return faults, info


# ---- GPU recovery action ------------------------------------------------------------------------

# nvmlDeviceGpuRecoveryAction_t -> our name (the ``action`` label and event attribute): NVML numbers
# the actions as the driver's Xid 154 prints them, so RECOVERY_ACTIONS is the parser's one table.
RECOVERY_NONE = "none"
RECOVERY_UNKNOWN = "unknown"  # a value this table lacks (a newer driver)
# The actions whose series are always exported (0 or 1); the others appear only while current.
RECOVERY_ACTION_LABELS: tuple[str, ...] = ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset")
# What the operator does for each action (NVIDIA, "Error Recovery and Response Flags").
RECOVERY_ADVICE: dict[str, str] = {
    "gpu_reset": "stop every process on the GPU, reset it (nvidia-smi -r -i N) and validate again",
    "node_reboot": "reboot the node: the fault may have left the OS inconsistent, a GPU reset is not enough",
    "drain_p2p": "stop peer-to-peer/NVLink traffic to the GPU, then query again (nvidia-smi -q): "
                 "the driver then names the action that remains",
    "drain_and_reset": "the GPU runs at reduced capacity: drain its work to a checkpoint, then reset it "
                       "(nvidia-smi -r -i N)",
    "recover_imex_domain": "recover the GPU's IMEX domain (restart the IMEX service of the NVLink domain)",
    "bus_reset": "reset the GPU's PCIe bus (a secondary bus reset of its upstream port) or reboot the node",
    "system_reboot": "reboot the system",
    "unknown": "the driver asks for a recovery action this version does not know: see nvidia-smi -q",
}


def recovery_action_name(code: int) -> str:
    """``nvmlDeviceGpuRecoveryAction_t`` value -> name (:data:`RECOVERY_ACTIONS`); ``unknown``
    for a value the table lacks."""
    return RECOVERY_ACTIONS.get(code, RECOVERY_UNKNOWN)


def driver_lacks_field(ret: int) -> bool:
    """True when ``ret`` (from :func:`read_recovery_action`) means this driver or GPU has no
    recovery-action field at all (not supported, a field id it does not know, no
    nvmlDeviceGetFieldValues): not an error, nothing to export."""
    return ret in _LACKS_FIELD


class FieldRead(NamedTuple):
    """One field value: ``value`` (int, None unless ``ret`` is NVML_SUCCESS) and ``ret``, the
    nvmlReturn_t of the call when the call failed, else the value's own ``nvmlReturn``."""

    value: int | None
    ret: int


def _field_value(v: Any) -> int:
    """A ``nvmlFieldValue_t``'s value by its ``valueType`` (nvmlValueType_t: 0 double,
    1 unsigned int, 2 unsigned long, 3 unsigned long long, 4 signed long long, 5 signed int,
    6 unsigned short)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        int(v.valueType), "uiVal")
    return int(getattr(v.value, member))


def read_recovery_action(s: Session, h: Any) -> FieldRead:
    """GPU ``h``'s recovery action: ``nvmlDeviceGetFieldValues(h,
    [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])``.

    Returns ``FieldRead(code, 0)``, code an ``nvmlDeviceGpuRecoveryAction_t`` (unitless), or
    ``FieldRead(None, ret)``: the call's error or the value's own ``nvmlReturn``
    (``NVML_ERROR_NOT_SUPPORTED`` on a driver without the field: :func:`driver_lacks_field`);
    ``NVML_ERROR_FUNCTION_NOT_FOUND`` when the binding or the library has no
    ``nvmlDeviceGetFieldValues``. Raises :class:`GpuLost` when the call or the value answers
    NVML_ERROR_GPU_IS_LOST (the call wrapper's rule)."""
    return read_fields(s, h, [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]


# ---- the counters one nvmlDeviceGetFieldValues call reads ------------------------------------------
# Field ids (nvml.h ``NVML_FI_DEV_*``; the same numbers in nvidia-ml-py, a test holds them). Each
# value is the one the named per-counter call answers.

# nvmlDeviceGetTotalEccErrors(type, NVML_VOLATILE_ECC / NVML_AGGREGATE_ECC): ECC_{SBE,DBE}_{VOL,AGG}_TOTAL
ECC_FIELDS: dict[tuple[str, str], int] = {
    ("corrected", "volatile"): 3, ("uncorrected", "volatile"): 4,     # ECC_SBE_VOL_TOTAL, ECC_DBE_VOL_TOTAL
    ("corrected", "aggregate"): 5, ("uncorrected", "aggregate"): 6,   # ECC_SBE_AGG_TOTAL, ECC_DBE_AGG_TOTAL
}
# len(nvmlDeviceGetRetiredPages(cause)): RETIRED_SBE, RETIRED_DBE; nvmlDeviceGetRetiredPagesPendingStatus
RETIRED_FIELDS: dict[str, int] = {"single_bit_ecc": 29, "double_bit_ecc": 30}
RETIRED_PENDING_FIELD = 31                      # NVML_FI_DEV_RETIRED_PENDING, 1 yes 0 no
PCIE_REPLAY_FIELD = 94                          # NVML_FI_DEV_PCIE_REPLAY_COUNTER (nvmlDeviceGetPcieReplayCounter)
# nvmlDeviceGetRemappedRows: corrRows, uncRows, isPending, failureOccurred
REMAPPED_FIELDS: dict[str, int] = {"correctable": 142, "uncorrectable": 143,  # NVML_FI_DEV_REMAPPED_COR, _UNC
                                   "pending": 144, "failure": 145}            # _PENDING, _FAILURE
# nvmlDeviceGetNvLinkErrorCounter(link, counter) for links 0-11: NVML_FI_DEV_NVLINK_<counter>_ERROR_COUNT_L<link>
# (ids 32-58 for links 0-5, 96-119 for links 6-11). nvml.h has no per-link id beyond link 11: the
# links of a GPU with more (H100: 18) are read with nvmlDeviceGetNvLinkErrorCounter.
NVLINK_FIELD_LINKS = 12
# nvmlDeviceGetNvLinkState(link) as a field: NVML_FI_DEV_NVLINK_GET_STATE with ``scopeId`` the link
# (as NCCL reads it on Hopper and later); 0 inactive, 1 active (NVML_NVLINK_STATE_ACTIVE), 2 a trained
# link in its low-power state (NVML_NVLINK_STATE_SLEEP, taken as active as nvmlDeviceGetNvLinkState has it).
NVLINK_STATE_FIELD = 165
NVLINK_ERROR_FIELDS: dict[str, tuple[int, ...]] = {
    "crc_flit": (32, 33, 34, 35, 36, 37, 96, 97, 98, 99, 100, 101),        # CRC_FLIT_ERROR_COUNT_L0..L11
    "crc_data": (39, 40, 41, 42, 43, 44, 102, 103, 104, 105, 106, 107),    # CRC_DATA_ERROR_COUNT_L0..L11
    "replay": (46, 47, 48, 49, 50, 51, 108, 109, 110, 111, 112, 113),      # REPLAY_ERROR_COUNT_L0..L11
    "recovery": (53, 54, 55, 56, 57, 58, 114, 115, 116, 117, 118, 119),    # RECOVERY_ERROR_COUNT_L0..L11
}


def read_fields(s: Session, h: Any, field_ids: Sequence[int | tuple[int, int]],
                raise_call_error: bool = False) -> list[FieldRead]:
    """GPU ``h``'s values of ``field_ids`` (a field id, or ``(field id, scopeId)`` for a scoped
    field such as :data:`NVLINK_STATE_FIELD` of one link) in one ``nvmlDeviceGetFieldValues``
    call, in their order: ``FieldRead(value, 0)`` (an int) or ``FieldRead(None, ret)`` with the value's own
    ``nvmlReturn`` (``NVML_ERROR_NOT_SUPPORTED`` for a field this driver or GPU lacks), or the
    call's error for every field when the call itself failed (``NVML_ERROR_FUNCTION_NOT_FOUND``
    without ``nvmlDeviceGetFieldValues``). Raises :class:`GpuLost` when the call or any value
    answers NVML_ERROR_GPU_IS_LOST (the call wrapper's rule); with ``raise_call_error``, raises
    :class:`NvmlCallError` when the call itself failed (instead of giving its error as every
    field's). Blocks as long as the driver does."""
    if not field_ids:
        return []
    try:
        values = s._invoke("nvmlDeviceGetFieldValues", h, list(field_ids))
    except NvmlCallError as e:
        if raise_call_error:
            raise
        return [FieldRead(None, e.ret)] * len(field_ids)
    raw = _raw_field_values(values)
    out = []
    if raw is not None:  # the C structs unpacked at once (ctypes' per-attribute access costs ~3 us a value)
        for value_type, ret, value in raw:
            if ret == NVML_ERROR_GPU_IS_LOST:
                raise GpuLost("nvmlDeviceGetFieldValues")
            out.append(FieldRead(_unpack_value(value_type, value), NVML_SUCCESS) if ret == NVML_SUCCESS
                       else FieldRead(None, ret))
        return out
    for v in values:
        ret = int(v.nvmlReturn)
        if ret == NVML_ERROR_GPU_IS_LOST:
            raise GpuLost("nvmlDeviceGetFieldValues")
        out.append(FieldRead(_field_value(v), NVML_SUCCESS) if ret == NVML_SUCCESS else FieldRead(None, ret))
    return out


# nvml.h nvmlFieldValue_t: fieldId, scopeId (unsigned int), timestamp, latencyUsec (long long),
# valueType (nvmlValueType_t), nvmlReturn (nvmlReturn_t), value (nvmlValue_t, an 8-byte union).
_FIELD_VALUE = struct.Struct("=IIqqII8s")
_VALUE_FORMS = {0: "=d", 1: "=I", 2: "=Q", 3: "=Q", 4: "=q", 5: "=i", 6: "=H"}  # nvmlValueType_t -> bytes


def _raw_field_values(values: Any) -> list[tuple[int, int, bytes]] | None:
    """(valueType, nvmlReturn, value bytes) of each struct of a ctypes array of
    ``nvmlFieldValue_t``; None when the array is not of nvml.h's 40-byte layout (then the values
    are read attribute by attribute)."""
    try:
        n = len(values)
        if n == 0 or ctypes.sizeof(values) != n * _FIELD_VALUE.size:
            return None
        buf = bytes(memoryview(values).cast("B"))
    except (TypeError, ValueError):
        return None
    return [(t, ret, v) for _f, _s, _ts, _lat, t, ret, v in _FIELD_VALUE.iter_unpack(buf)]


def _unpack_value(value_type: int, value: bytes) -> int:
    """An ``nvmlValue_t``'s bytes as an int, by its ``valueType`` (unknown types: unsigned int)."""
    form = _VALUE_FORMS.get(value_type, "=I")
    return int(struct.unpack_from(form, value)[0])


# ---- GPU minor numbers --------------------------------------------------------------------------

class GpuMinors:
    """NVIDIA device minor numbers (``/dev/nvidia<minor>``, NVML's nvmlDeviceGetMinorNumber) by
    PCI bus id, read from the driver's procfs files
    ``<procfs>/driver/nvidia/gpus/<DDDD:BB:DD.F>/information`` (line ``Device Minor: 	 3``), so
    that a kernel-log line naming a PCI function is labelled without an NVML call. ``procfs`` is
    a parameter so tests use a fixture tree."""

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

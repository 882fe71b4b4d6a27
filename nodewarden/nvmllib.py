"""The NVML C library (``libnvidia-ml.so.1``) through ctypes: the calls nodewarden makes, under
the names, arguments and return values of NVIDIA's nvidia-ml-py binding (``pynvml``), so that
:class:`nodewarden.nvml.Session` reads either.

Why not pynvml itself: importing it builds its ~250 ctypes structure classes and ~1,500
constants for the whole API, 1.9 MB of the agent's resident memory (measured, CPython 3.11),
to make the ~30 calls listed here. The ABI is nvml.h's; the tests hold every structure layout,
constant and symbol here equal to pynvml's (13.615), and run every call against the NVML
simulator (``tests/nvmlsim``), which pynvml also reads.

Conventions (as pynvml's):

* the library is loaded by the first :func:`nvmlInit` (``libnvidia-ml.so.1`` through the
  dynamic loader's search: the driver's, or the container toolkit's); not found:
  :class:`NVMLError` ``NVML_ERROR_LIBRARY_NOT_FOUND``;
* every call raises :class:`NVMLError` with the ``nvmlReturn_t`` in ``value`` when it does not
  answer ``NVML_SUCCESS``; a symbol the library lacks (an older driver, the simulator) is
  ``NVML_ERROR_FUNCTION_NOT_FOUND``;
* versioned symbols are the ones pynvml resolves (``nvmlInitWithFlags``,
  ``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetPciInfo_v3``,
  ``nvmlDeviceGetComputeRunningProcesses_v3``);
* strings come back as ``str``; a handle is an opaque pointer (``ctypes.c_void_p``).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_char, c_int, c_int64, c_uint, c_uint32, c_ulonglong, c_void_p
from typing import Any, Callable, NamedTuple, Sequence

# nvmlReturn_t (nvml.h)
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13

# Constants the callers pass (nvml.h; held equal to pynvml's by a test)
NVML_TEMPERATURE_GPU = 0                      # nvmlTemperatureSensors_t
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO = 0, 1, 2, 3  # nvmlClockType_t
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1       # nvmlMemoryErrorType_t
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1                                      # nvmlEccCounterType_t
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0                     # nvmlPageRetirementCause_t
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1                 # nvmlNvLinkErrorCounter_t
NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
NVML_NVLINK_MAX_LINKS = 36                    # nvml.h r570 and later (18 before)
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16
NVML_VALUE_NOT_AVAILABLE_ULONGLONG = 2**64 - 1  # usedGpuMemory when the driver cannot tell


class NVMLError(Exception):
    """An NVML call that did not answer ``NVML_SUCCESS``: ``value`` is its ``nvmlReturn_t``; the
    message is ``nvmlErrorString``'s when the library can give it."""

    def __init__(self, value: int) -> None:
        self.value = int(value)
        super().__init__(_error_string(self.value))


# ---- structures (nvml.h) ----------------------------------------------------------------------

class nvmlPciInfo_t(ctypes.Structure):  # noqa: N801  (nvml.h's name)
    """``nvmlPciInfo_t`` (as ``nvmlDeviceGetPciInfo_v3`` fills it): ``busId`` the
    ``DDDDDDDD:BB:DD.F`` bus id (bytes)."""

    _fields_ = [("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE), ("domain", c_uint),
                ("bus", c_uint), ("device", c_uint), ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint),
                ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE)]


class c_nvmlValue_t(ctypes.Union):  # noqa: N801
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", c_int),
                ("usVal", ctypes.c_ushort)]


class c_nvmlFieldValue_t(ctypes.Structure):  # noqa: N801
    """``nvmlFieldValue_t``: 40 bytes (fieldId, scopeId, timestamp, latencyUsec, valueType,
    nvmlReturn, value)."""

    _fields_ = [("fieldId", c_uint32), ("scopeId", c_uint32), ("timestamp", c_int64), ("latencyUsec", c_int64),
                ("valueType", c_uint), ("nvmlReturn", c_uint), ("value", c_nvmlValue_t)]


class c_nvmlProcessInfo_v2_t(ctypes.Structure):  # noqa: N801
    """``nvmlProcessInfo_v2_t`` (what ``nvmlDeviceGetComputeRunningProcesses_v3`` fills)."""

    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


class ProcessInfo(NamedTuple):
    """A process using a GPU: ``pid``, ``usedGpuMemory`` bytes (None when the driver cannot
    tell), MIG ``gpuInstanceId``/``computeInstanceId`` (0xFFFFFFFF without MIG)."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815  (pynvml's attribute name)
    gpuInstanceId: int  # noqa: N815
    computeInstanceId: int  # noqa: N815


# ---- the library --------------------------------------------------------------------------------

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_functions: dict[str, Any] = {}


def _load() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            try:
                _lib = ctypes.CDLL("libnvidia-ml.so.1")
            except OSError:
                raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND) from None
        return _lib


def _function(symbol: str, argtypes: Sequence[Any]) -> Any:
    """The library's ``symbol`` with nvmlReturn_t as its result; NVMLError
    NVML_ERROR_FUNCTION_NOT_FOUND when the library lacks it, NVML_ERROR_UNINITIALIZED before
    the library is loaded (:func:`nvmlInit`)."""
    fn = _functions.get(symbol)
    if fn is None:
        lib = _lib
        if lib is None:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND) from None
        fn.restype = c_int
        fn.argtypes = list(argtypes)
        _functions[symbol] = fn
    return fn


def _check(ret: int) -> None:
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)


def _error_string(ret: int) -> str:
    lib = _lib
    if lib is not None:
        try:
            fn = lib.nvmlErrorString
            fn.restype, fn.argtypes = ctypes.c_char_p, [c_int]
            text = fn(ret)
            if text:
                return text.decode("utf-8", "replace")
        except AttributeError:
            pass
    return {NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
            NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found"}.get(ret, f"nvmlReturn_t {ret}")


def _out(symbol: str, ctype: Any, *args: Any, argtypes: Sequence[Any]) -> Any:
    """Call ``symbol(*args, &out)`` with ``out`` a ``ctype``; its value."""
    out = ctype()
    _check(_function(symbol, [*argtypes, ctypes.POINTER(ctype)])(*args, byref(out)))
    return out.value


def _device_value(symbol: str, ctype: Any = c_uint) -> Callable[[Any], int]:
    """A call ``symbol(device, ctype *)`` returning the value (unsigned int or unsigned long long)."""
    def call(handle: Any) -> int:
        return int(_out(symbol, ctype, handle, argtypes=[c_void_p]))
    call.__name__ = symbol
    call.__doc__ = f"``{symbol}(device, {ctype.__name__} *)``: the value. Raises NVMLError."
    return call


def _device_uint_by(symbol: str) -> Callable[[Any, int], int]:
    def call(handle: Any, which: int) -> int:
        return int(_out(symbol, c_uint, handle, which, argtypes=[c_void_p, c_uint]))
    call.__name__ = symbol
    call.__doc__ = f"``{symbol}(device, enum, unsigned int *)``: the unsigned int. Raises NVMLError."
    return call


# ---- the calls ----------------------------------------------------------------------------------

def nvmlInit() -> None:  # noqa: N802  (NVML's names throughout)
    """Load the library (first call) and ``nvmlInitWithFlags(0)``. Raises NVMLError
    (NVML_ERROR_LIBRARY_NOT_FOUND without the library; NVML_ERROR_DRIVER_NOT_LOADED...)."""
    _load()
    _check(_function("nvmlInitWithFlags", [c_uint])(0))


def nvmlShutdown() -> None:  # noqa: N802
    """``nvmlShutdown``. Raises NVMLError."""
    _check(_function("nvmlShutdown", [])())


def nvmlDeviceGetCount() -> int:  # noqa: N802
    """``nvmlDeviceGetCount_v2``: GPUs the driver enumerates. Raises NVMLError."""
    return int(_out("nvmlDeviceGetCount_v2", c_uint, argtypes=[]))


def nvmlDeviceGetHandleByIndex(index: int) -> c_void_p:  # noqa: N802
    """``nvmlDeviceGetHandleByIndex_v2``: the opaque device handle. Raises NVMLError."""
    handle = c_void_p()
    _check(_function("nvmlDeviceGetHandleByIndex_v2", [c_uint, ctypes.POINTER(c_void_p)])(index, byref(handle)))
    return handle


def _device_string(symbol: str, size: int, handle: Any) -> str:
    buf = ctypes.create_string_buffer(size)
    _check(_function(symbol, [c_void_p, ctypes.c_char_p, c_uint])(handle, buf, size))
    return buf.value.decode("utf-8", "replace")


def nvmlDeviceGetName(handle: Any) -> str:  # noqa: N802
    """``nvmlDeviceGetName``: the product name (``NVIDIA H100 80GB HBM3``). Raises NVMLError."""
    return _device_string("nvmlDeviceGetName", NVML_DEVICE_NAME_V2_BUFFER_SIZE, handle)


def nvmlDeviceGetUUID(handle: Any) -> str:  # noqa: N802
    """``nvmlDeviceGetUUID``: ``GPU-<uuid>``. Raises NVMLError."""
    return _device_string("nvmlDeviceGetUUID", NVML_DEVICE_UUID_V2_BUFFER_SIZE, handle)


def nvmlDeviceGetPciInfo(handle: Any) -> nvmlPciInfo_t:  # noqa: N802
    """``nvmlDeviceGetPciInfo_v3``: the filled :class:`nvmlPciInfo_t`. Raises NVMLError."""
    info = nvmlPciInfo_t()
    _check(_function("nvmlDeviceGetPciInfo_v3", [c_void_p, ctypes.POINTER(nvmlPciInfo_t)])(handle, byref(info)))
    return info


nvmlDeviceGetMinorNumber = _device_value("nvmlDeviceGetMinorNumber")
nvmlDeviceGetPowerUsage = _device_value("nvmlDeviceGetPowerUsage")  # milliwatts
nvmlDeviceGetPerformanceState = _device_value("nvmlDeviceGetPerformanceState")  # nvmlPstates_t, 0 = P0
nvmlDeviceGetCurrPcieLinkGeneration = _device_value("nvmlDeviceGetCurrPcieLinkGeneration")
nvmlDeviceGetCurrPcieLinkWidth = _device_value("nvmlDeviceGetCurrPcieLinkWidth")
nvmlDeviceGetMaxPcieLinkGeneration = _device_value("nvmlDeviceGetMaxPcieLinkGeneration")
nvmlDeviceGetMaxPcieLinkWidth = _device_value("nvmlDeviceGetMaxPcieLinkWidth")
nvmlDeviceGetPcieReplayCounter = _device_value("nvmlDeviceGetPcieReplayCounter")
nvmlDeviceGetRetiredPagesPendingStatus = _device_value("nvmlDeviceGetRetiredPagesPendingStatus")  # nvmlEnableState_t
nvmlDeviceGetCurrentClocksEventReasons = _device_value("nvmlDeviceGetCurrentClocksEventReasons", c_ulonglong)
nvmlDeviceGetCurrentClocksThrottleReasons = _device_value("nvmlDeviceGetCurrentClocksThrottleReasons", c_ulonglong)
nvmlDeviceGetTemperature = _device_uint_by("nvmlDeviceGetTemperature")  # degrees C
nvmlDeviceGetClockInfo = _device_uint_by("nvmlDeviceGetClockInfo")  # MHz
nvmlDeviceGetMaxClockInfo = _device_uint_by("nvmlDeviceGetMaxClockInfo")  # MHz


def nvmlDeviceGetTotalEccErrors(handle: Any, error_type: int, counter_type: int) -> int:  # noqa: N802
    """``nvmlDeviceGetTotalEccErrors``: errors of ``error_type`` (nvmlMemoryErrorType_t) counted
    by ``counter_type`` (nvmlEccCounterType_t). Raises NVMLError."""
    return int(_out("nvmlDeviceGetTotalEccErrors", c_ulonglong, handle, error_type, counter_type,
                    argtypes=[c_void_p, c_uint, c_uint]))


def nvmlDeviceGetNvLinkState(handle: Any, link: int) -> int:  # noqa: N802
    """``nvmlDeviceGetNvLinkState``: 1 active, 0 not (nvmlEnableState_t). Raises NVMLError."""
    return int(_out("nvmlDeviceGetNvLinkState", c_uint, handle, link, argtypes=[c_void_p, c_uint]))


def nvmlDeviceGetNvLinkErrorCounter(handle: Any, link: int, counter: int) -> int:  # noqa: N802
    """``nvmlDeviceGetNvLinkErrorCounter``: ``counter`` (nvmlNvLinkErrorCounter_t) of ``link``.
    Raises NVMLError."""
    return int(_out("nvmlDeviceGetNvLinkErrorCounter", c_ulonglong, handle, link, counter,
                    argtypes=[c_void_p, c_uint, c_uint]))


def nvmlDeviceGetRemappedRows(handle: Any) -> tuple[int, int, int, int]:  # noqa: N802
    """``nvmlDeviceGetRemappedRows``: (correctable rows, uncorrectable rows, remapping pending
    0/1, remapping failure occurred 0/1). Raises NVMLError."""
    out = [c_uint() for _ in range(4)]
    fn = _function("nvmlDeviceGetRemappedRows", [c_void_p] + [ctypes.POINTER(c_uint)] * 4)
    _check(fn(handle, *(byref(o) for o in out)))
    corr, unc, pending, failure = (int(o.value) for o in out)
    return corr, unc, pending, failure


def _counted(symbol: str, argtypes: Sequence[Any], args: Sequence[Any], item: Any, none_on_success: bool) -> list[Any]:
    """NVML's two-call form: ``symbol(*args, &count, NULL)`` for the count
    (``NVML_ERROR_INSUFFICIENT_SIZE``, or success: none when ``none_on_success``), then again with
    an array of ``2 * count + 5`` ``item`` (room for entries added between the calls), as pynvml
    makes them."""
    fn = _function(symbol, [*argtypes, ctypes.POINTER(c_uint), c_void_p])
    count = c_uint(0)
    ret = fn(*args, byref(count), None)
    if ret == NVML_SUCCESS and none_on_success:
        return []
    if ret not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
        raise NVMLError(ret)
    count.value = count.value * 2 + 5
    arr = (item * count.value)()
    _check(fn(*args, byref(count), arr))
    return list(arr[:count.value])


def nvmlDeviceGetRetiredPages(handle: Any, cause: int) -> list[int]:  # noqa: N802
    """``nvmlDeviceGetRetiredPages``: the addresses of the pages retired for ``cause``
    (nvmlPageRetirementCause_t). Raises NVMLError."""
    return [int(a) for a in _counted("nvmlDeviceGetRetiredPages", [c_void_p, c_uint], [handle, cause], c_ulonglong,
                                               none_on_success=False)]


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[ProcessInfo]:  # noqa: N802
    """``nvmlDeviceGetComputeRunningProcesses_v3``: the compute processes on the GPU. Raises
    NVMLError."""
    return [ProcessInfo(int(p.pid), None if p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULONGLONG
                        else int(p.usedGpuMemory), int(p.gpuInstanceId), int(p.computeInstanceId))
            for p in _counted("nvmlDeviceGetComputeRunningProcesses_v3", [c_void_p], [handle],
                              c_nvmlProcessInfo_v2_t, none_on_success=True)]


def nvmlDeviceGetFieldValues(handle: Any, field_ids: Sequence[int | tuple[int, int]]) -> ctypes.Array[Any]:  # noqa: N802
    """``nvmlDeviceGetFieldValues``: an array of :class:`c_nvmlFieldValue_t`, one per id (a
    field id, or (field id, scopeId)), each with its own ``nvmlReturn``. Raises NVMLError when the
    call itself fails."""
    values = (c_nvmlFieldValue_t * len(field_ids))()
    for v, fid in zip(values, field_ids):
        if isinstance(fid, tuple):
            v.fieldId, v.scopeId = fid
        else:
            v.fieldId = fid
    fn = _function("nvmlDeviceGetFieldValues", [c_void_p, c_int, ctypes.POINTER(c_nvmlFieldValue_t)])
    _check(fn(handle, len(field_ids), values))
    return values

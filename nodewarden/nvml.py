"""NVML reads shared by the agent's NVML collector and the validator's checks.

Nothing here opens NVML (no ``nvmlInit``): each function takes the pynvml module its caller
initialised and a device handle, so that the collector's session (and its timeout path: the
agent's worker thread) and the validator's NVML snapshot (its daemon thread with a timeout) stay
the only places that talk to the driver.

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

from typing import Any, NamedTuple

from nodewarden.parsing.xid import RECOVERY_ACTIONS as _XID_RECOVERY_ACTIONS

NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230

# nvmlReturn_t values (nvml.h) the readers act on.
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
RETURN_NAMES = {
    0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED", 4: "NVML_ERROR_NO_PERMISSION", 6: "NVML_ERROR_NOT_FOUND",
    9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    15: "NVML_ERROR_GPU_IS_LOST", 999: "NVML_ERROR_UNKNOWN",
}
_LACKS_FIELD = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_FUNCTION_NOT_FOUND)

# nvmlDeviceGpuRecoveryAction_t -> our name (the ``action`` label and event attribute). NVML numbers
# the actions as the driver's Xid 154 prints them: one table, the parser's.
RECOVERY_ACTIONS = _XID_RECOVERY_ACTIONS
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


def return_name(ret: int) -> str:
    """``3`` -> ``NVML_ERROR_NOT_SUPPORTED`` (``nvmlReturn_t N`` for a value not listed)."""
    return RETURN_NAMES.get(ret, f"nvmlReturn_t {ret}")


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


def read_recovery_action(nv: Any, handle: Any) -> FieldRead:
    """GPU ``handle``'s recovery action: ``nv.nvmlDeviceGetFieldValues(handle,
    [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])`` (``nv``: the initialised pynvml module).

    Returns ``FieldRead(code, 0)``, code an ``nvmlDeviceGpuRecoveryAction_t`` (unitless), or
    ``FieldRead(None, ret)``: the call's error (``NVML_ERROR_GPU_IS_LOST``, ...) or the value's
    own ``nvmlReturn`` (``NVML_ERROR_NOT_SUPPORTED`` on a driver without the field:
    :func:`driver_lacks_field`); ``NVML_ERROR_FUNCTION_NOT_FOUND`` when pynvml or the library
    has no ``nvmlDeviceGetFieldValues``. Never raises an NVMLError; it blocks as long as the
    driver does (callers bound it with their own timeout)."""
    fn = getattr(nv, "nvmlDeviceGetFieldValues", None)
    if fn is None:
        return FieldRead(None, NVML_ERROR_FUNCTION_NOT_FOUND)
    try:
        values = fn(handle, [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    except nv.NVMLError as e:
        return FieldRead(None, int(e.value))
    v = values[0]
    ret = int(v.nvmlReturn)
    if ret != NVML_SUCCESS:
        return FieldRead(None, ret)
    return FieldRead(_field_value(v), NVML_SUCCESS)

"""The contract between the runner and the checks, and what a check may ask of its run.

A check is one module under ``nodewarden.validator.checks`` exposing:

* ``NAME`` (str) — also its ``--checks`` name and its metric label;
* ``NEEDS`` (tuple of str) — what it needs to run at all: ``"torch"``, ``"gpu"``, ``"nvml"``,
  ``"sysfs_ib"`` ...; :func:`RunContext.missing` turns absent needs into a ``skip`` reason;
* ``DEFAULTS`` (dict) — its parameters, with units in their names (``seconds``, ``bytes``);
* ``QUICK`` (dict) — parameter overrides for ``--quick`` (the prolog gate, under 45 s in all);
* ``run(ctx: RunContext, params: dict) -> CheckResult`` — which should not raise; the runner
  turns an exception into status ``error`` all the same.

Thresholds come from the hardware profile's table named after the check, merged over
``DEFAULTS``, then the config file's ``[checks.NAME]`` table, then ``--set NAME.key=value``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

from nodewarden import nvml
from nodewarden.sysfs import pci
from nodewarden.nvml import (RECOVERY_ADVICE, RECOVERY_NONE, driver_lacks_field, read_recovery_action,
                             recovery_action_name, return_name)

Progress = Callable[[str, float, str], None]  # (check, fraction 0..1, text)


def _noop(check: str, fraction: float, text: str) -> None:
    return None


DEVICES = ("auto", "cuda", "cpu")


@dataclasses.dataclass(frozen=True)
class Compute:
    """Where the compute checks (those that need ``torch``) run.

    ``requested``: the ``--device`` asked for (``auto``/``cuda``/``cpu``). ``device``: ``cuda`` or
    ``cpu`` when they can run, else None; then ``status`` is ``skip`` (auto on a node without an
    NVIDIA GPU: nothing to test) or ``error`` (a device that was asked for, or NVIDIA GPUs that are
    on the node, could not be used), with ``reason`` and ``action``. ``gpus``: CUDA devices
    (device ``cuda``) or NVIDIA GPUs found on the node (PCI bus, NVML) otherwise."""

    requested: str
    device: str | None
    status: str | None = None
    reason: str = ""
    action: str = ""
    gpus: int = 0


@dataclasses.dataclass
class RunContext:
    """What every check may read: the profile, the roots of /sys and /proc, the compute device
    asked for (``auto``/``cuda``/``cpu``), a progress callback and the run's mode.

    ``device`` stays what was asked for; :meth:`compute` resolves it once per run.
    """

    profile: dict[str, Any]
    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    device: str = "auto"
    quick: bool = False
    progress: Progress = _noop
    workdir: Path | None = None
    baseline: dict[str, Any] | None = None
    _compute: Compute | None = dataclasses.field(default=None, repr=False, compare=False)

    def compute(self) -> Compute:
        """The compute device of this run (:func:`resolve_compute`, resolved on first use)."""
        if self._compute is None:
            self._compute = resolve_compute(self.device, Path(self.sysfs))
        return self._compute

    @property
    def resolved_compute(self) -> Compute | None:
        """The compute device when some check has resolved it, else None (nothing imported)."""
        return self._compute

    def torch_device(self) -> str | None:
        """``cuda`` or ``cpu`` where the compute checks run, None when they cannot run here."""
        return self.compute().device

    def missing(self, needs: tuple[str, ...]) -> str | None:
        """Why a check with these needs cannot run here (a skip reason), or None."""
        for need in needs:
            if need == "torch" and self.compute().device is None:
                return self.compute().reason
            if need == "gpu" and self.compute().device != "cuda":
                return "no CUDA GPU visible to PyTorch"
            if need == "nvml":
                why = nvml_missing()
                if why is not None:
                    return why
        return None


_TORCH: tuple[Any, str | None] | None = None


def import_torch() -> tuple[Any, str | None]:
    """``(torch, None)``, or ``(None, why)`` when PyTorch is not installed or fails to import (a
    broken install, a CUDA build whose libraries are missing...). Never raises; the outcome is
    kept for the process."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch
            _TORCH = (torch, None)
        except ModuleNotFoundError as e:
            if e.name == "torch":
                _TORCH = (None, "PyTorch is not installed (install nodewarden[validate])")
            else:
                _TORCH = (None, f"PyTorch does not import: {type(e).__name__}: {e}")
        except Exception as e:  # OSError (a missing libcudart), RuntimeError, a syntax error...
            _TORCH = (None, f"PyTorch does not import: {type(e).__name__}: {str(e)[:300]}")
    return _TORCH


def cuda_devices(torch: Any) -> tuple[int, str]:
    """(CUDA devices PyTorch can use, why none when 0). Never raises."""
    import warnings
    build = f"PyTorch {getattr(torch, '__version__', '?')}"
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if not cuda:
        return 0, f"{build} is a CPU-only build (no CUDA)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception as e:  # a driver that answers with an error
            return 0, f"{build} (CUDA {cuda}) cannot use CUDA: {type(e).__name__}: {str(e)[:200]}"
    if n > 0:
        return n, ""
    said = "; ".join(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
    return 0, f"{build} (CUDA {cuda}) sees no CUDA device" + (f": {said[:200]}" if said else "")


def nvidia_gpus_on_pci(sysfs: Path) -> list[str]:
    """PCI addresses (``0000:18:00.0``) of the NVIDIA GPUs under ``sysfs/bus/pci/devices``
    (:func:`nodewarden.sysfs.pci.is_gpu`: the links check counts the same functions), in bus
    order; [] when the directory is absent. Needs neither the driver nor NVML."""
    return [f.pci_bus_id for f in pci.read_functions(Path(sysfs), vendors=(pci.NVIDIA,)) if pci.is_gpu(f)]


def nvml_gpu_count(timeout_s: float = nvml.DEFAULT_TIMEOUT_S) -> int | None:
    """GPUs the NVIDIA driver reports through NVML (``nvmlDeviceGetCount``), None without NVML,
    when the call fails, or when NVML does not answer within ``timeout_s`` seconds
    (:func:`nodewarden.nvml.query`). Never raises."""
    try:
        n, _ = nvml.query(lambda s: s.count(), timeout_s, "nvmlDeviceGetCount")
    except Exception:  # NvmlTimeout, NvmlCallError
        return None
    return n


def nvidia_gpu_count(sysfs: Path) -> int:
    """NVIDIA GPUs on this node: the larger of those on the PCI bus (sysfs) and NVML's count."""
    return max(len(nvidia_gpus_on_pci(sysfs)), nvml_gpu_count() or 0)


_FIX_CUDA = ("check the NVIDIA driver (nvidia-smi) and that PyTorch is a CUDA build "
             "(pip install nodewarden[validate] with your CUDA's torch); --device cpu runs the checks on "
             "host memory on purpose")


def resolve_compute(requested: str, sysfs: Path = Path("/sys")) -> Compute:
    """Where the compute checks run for ``--device requested``; never raises.

    * ``cpu``: on the host (``error`` when PyTorch cannot be imported);
    * ``cuda``: every CUDA device PyTorch sees; none (no torch, a broken or CPU-only torch, a
      driver that does not answer) is ``error``: the device asked for is absent;
    * ``auto``: CUDA when PyTorch sees a device; else, when NVIDIA GPUs are on the node (PCI
      bus under ``sysfs``, or NVML), ``error`` (GPUs that could not be tested); else ``skip``
      (no GPU here; the checks never pass on the CPU by default).
    """
    if requested not in DEVICES:
        return Compute(requested, None, "error", f"unknown device {requested!r} (auto, cuda, cpu)")
    torch, why = import_torch()
    if requested == "cpu":
        if torch is None:
            return Compute("cpu", None, "error", f"--device cpu: {why}",
                           "install PyTorch (nodewarden[validate]) or leave the compute checks out (--checks)")
        return Compute("cpu", "cpu")
    n, why_not = cuda_devices(torch) if torch is not None else (0, why or "")
    if n > 0:
        return Compute(requested, "cuda", gpus=n)
    if requested == "cuda":
        return Compute("cuda", None, "error", f"--device cuda: {why_not}", _FIX_CUDA)
    gpus = nvidia_gpu_count(sysfs)
    if gpus:
        return Compute("auto", None, "error", f"{gpus} NVIDIA GPU(s) on this node but {why_not}", _FIX_CUDA, gpus)
    return Compute("auto", None, "skip", "no NVIDIA GPU on this node (none on the PCI bus, none in NVML)",
                   "--device cpu runs the check on host memory on purpose")


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def nvml_missing(timeout_s: float = nvml.DEFAULT_TIMEOUT_S) -> str | None:
    """Why NVML cannot be used here (a check's ``skip`` reason), or None when nvmlInit succeeds
    within ``timeout_s`` seconds (:func:`nodewarden.nvml.query`). Never raises."""
    try:
        ok, why = nvml.query(lambda s: True, timeout_s, "nvmlInit")
    except nvml.NvmlTimeout as e:
        return f"{e} (driver hung? nvidia-smi would hang too)"
    except nvml.NvmlCallError as e:
        return f"NVML broken: {e}"
    return None if ok else f"NVML not available ({why}): no NVIDIA driver"


# ---- the NVML snapshot the checks share (links, gpu_memory) -------------------------------------

def _gpu_snapshot(s: nvml.Session, i: int) -> dict[str, Any]:
    """GPU ``i``'s entry of :func:`nvml_snapshot`. Raises GpuLost, NvmlCallError (no handle)."""
    h = s.handle(i)
    if h is None:
        raise nvml.NvmlCallError("nvmlDeviceGetHandleByIndex", nvml.NVML_ERROR_NOT_SUPPORTED)
    ident = nvml.identity(s, h)
    g: dict[str, Any] = {"index": i, "pci": ident.pci_bus_id, "name": ident.name, "uuid": ident.uuid}
    code, ret = read_recovery_action(s, h)
    g["recovery_action"] = recovery_action_name(code) if code is not None else None
    g["recovery_action_code"] = code
    g["recovery_action_read"] = ("ok" if code is not None else
                                 f"not_supported ({return_name(ret)})" if driver_lacks_field(ret) else
                                 f"error ({return_name(ret)})")
    g["pstate"] = s.value("nvmlDeviceGetPerformanceState", h)
    g["nvlink"] = nvml.nvlink_states(s, h)
    g["sm_clock_mhz"] = s.value("nvmlDeviceGetClockInfo", h, s.nv.NVML_CLOCK_SM)
    g["sm_clock_max_mhz"] = s.value("nvmlDeviceGetMaxClockInfo", h, s.nv.NVML_CLOCK_SM)
    g["mem_clock_mhz"] = s.value("nvmlDeviceGetClockInfo", h, s.nv.NVML_CLOCK_MEM)
    g["clock_reasons"], api = nvml.clock_event_reasons(s, h)
    if api is not None:
        g["clock_reasons_api"] = api
    return g


def _snapshot(s: nvml.Session) -> list[dict[str, Any]]:
    return [_gpu_snapshot(s, i) for i in range(s.count())]


def nvml_snapshot(timeout_s: float = nvml.DEFAULT_TIMEOUT_S) -> tuple[list[dict[str, Any]] | None, str]:
    """What NVML says of every GPU of this machine, or (None, why not). Per GPU: ``index``
    (NVML's), ``pci`` (normalized bus id), ``name``, ``uuid``, ``pstate``, ``nvlink`` (link ->
    active, :func:`nodewarden.nvml.nvlink_states`), ``sm_clock_mhz``/``sm_clock_max_mhz``/
    ``mem_clock_mhz`` (MHz), ``clock_reasons`` (the nvmlClocksEventReason mask) and
    ``clock_reasons_api`` (:func:`nodewarden.nvml.clock_event_reasons`), and the GPU recovery
    action (:func:`nodewarden.nvml.read_recovery_action`, field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION):
    ``recovery_action`` (name, ``none`` when healthy; None when not read), ``recovery_action_code``
    (nvmlDeviceGpuRecoveryAction_t) and ``recovery_action_read`` (``ok``, ``not_supported (...)``
    for a driver without the field, ``error (...)``). A query a GPU does not answer is None.
    A lost GPU (NVML_ERROR_GPU_IS_LOST) or a failed count/handle: (None, why). NVML that does
    not answer within ``timeout_s`` seconds: (None, why); :func:`nvml_with_timeout` says which
    of these are faults of the driver. Never raises."""
    gpus, why, _ = nvml_with_timeout(timeout_s)
    return gpus, why


class NvmlRead(NamedTuple):
    """What :func:`nvml_with_timeout` read: ``gpus`` (:func:`nvml_snapshot`'s entries, None when
    not read), ``why`` (why not), ``faulted`` (the driver showed a fault: the check fails)."""

    gpus: list[dict[str, Any]] | None
    why: str
    faulted: bool


def nvml_with_timeout(seconds: float) -> NvmlRead:
    """:func:`nvml_snapshot` as (gpus, why not, faulted), read under the one NVML timeout
    (:func:`nodewarden.nvml.query`). ``faulted`` is True when the driver is there and showed a
    fault, which fails a check instead of skipping it: NVML did not answer within ``seconds``
    (or an earlier NVML call of this process is still blocked in it), a GPU answered
    NVML_ERROR_GPU_IS_LOST, nvmlInit failed other than for a missing driver, the count or a
    GPU's handle was refused. Only without NVML (no library, no driver): (None, why, False).
    Never raises."""
    try:
        gpus, why = nvml.query(_snapshot, seconds, "validator NVML snapshot")
    except nvml.NvmlTimeout as e:
        return NvmlRead(None, f"{e} (driver hung? nvidia-smi would hang too)", True)
    except nvml.GpuLost as e:
        return NvmlRead(None, f"NVML reports a GPU lost (NVML_ERROR_GPU_IS_LOST in {e}): fallen off the bus or "
                        "lost by the driver", True)
    except nvml.NvmlCallError as e:  # a broken driver's nvmlInit, a count or a GPU's handle refused
        return NvmlRead(None, f"NVML query failed: {e}", True)
    except Exception as e:  # noqa: BLE001 - a check reports it, it does not crash
        return NvmlRead(None, f"NVML query failed: {type(e).__name__}: {e}", True)
    return NvmlRead(gpus, why, False)


NVML_MODES = ("auto", "true", "false", "1", "0", "yes", "no", "on", "off")


def check_nvml_params(p: dict[str, Any]) -> None:
    """A check's ``nvml`` (auto, true or false) and ``nvml_timeout_seconds`` (seconds in (0,
    3600]). Raises ValueError naming the key."""
    t = p.get("nvml_timeout_seconds")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 3600:
        raise ValueError(f"nvml_timeout_seconds must be a number of seconds in (0, 3600] (got {t!r})")
    mode = p.get("nvml")
    if not isinstance(mode, (bool, str)) or (isinstance(mode, str) and mode.strip().lower() not in NVML_MODES):
        raise ValueError(f"nvml must be auto, true or false (got {mode!r})")


def nvml_enabled(mode: Any, auto: bool) -> bool:
    """A check's ``nvml`` parameter: ``"auto"`` -> ``auto`` (the check's own rule); true/false,
    or the words ``true``/``false``/``1``/``0``/``yes``/``no``, -> that."""
    if isinstance(mode, str) and mode.strip().lower() == "auto":
        return auto
    return bool(mode) and str(mode).strip().lower() not in ("false", "0", "no", "off")


def reset_required(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs of an :func:`nvml_snapshot` that say they must be reset (or the node rebooted,
    drained...): recovery action read and not ``none``. Each: ``gpu`` (NVML index),
    ``pci_bus_id``, ``uuid``, ``action`` (name), ``action_code`` (nvmlDeviceGpuRecoveryAction_t).
    A GPU whose driver lacks the field, or whose read failed, is not listed."""
    return [{"gpu": g["index"], "pci_bus_id": g.get("pci"), "uuid": g.get("uuid"), "action": g["recovery_action"],
             "action_code": g.get("recovery_action_code")}
            for g in gpus if g.get("recovery_action") not in (None, RECOVERY_NONE)]


def reset_required_reason(bad: list[dict[str, Any]]) -> str:
    """``GPU 1 (0000:2a:00.0) must be recovered first: NVML recovery action gpu_reset`` for each."""
    return "; ".join(f"GPU {b['gpu']}" + (f" ({b['pci_bus_id']})" if b.get("pci_bus_id") else "")
                     + f" must be recovered first: NVML recovery action {b['action']}" for b in bad)


def reset_required_action(bad: list[dict[str, Any]]) -> str:
    """What to do, once per action named (NVIDIA's advice for each recovery action)."""
    out = []
    for action in dict.fromkeys(b["action"] for b in bad):
        gpus = ",".join(str(b["gpu"]) for b in bad if b["action"] == action)
        out.append(f"GPU {gpus} ({action}): " + RECOVERY_ADVICE.get(action, RECOVERY_ADVICE["unknown"]).replace(
            "-i N", f"-i {gpus}"))
    return "drain the node; " + "; ".join(out)


def cpu_count() -> int:
    """CPUs this process may run on (the scheduler's affinity, e.g. a Slurm allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - Linux only
        return os.cpu_count() or 1

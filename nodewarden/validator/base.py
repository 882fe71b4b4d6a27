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
import threading
from pathlib import Path
from typing import Any, Callable

from nodewarden.nvml import (RECOVERY_ADVICE, RECOVERY_NONE, driver_lacks_field, read_recovery_action,
                             recovery_action_name, return_name)
from nodewarden.parsing.pci import normalize_pci

Progress = Callable[[str, float, str], None]  # (check, fraction 0..1, text)


def _noop(check: str, fraction: float, text: str) -> None:
    return None


PCI_VENDOR_NVIDIA = 0x10DE
PCI_CLASS_DISPLAY = 0x03  # base class: VGA (0x0300), 3D controller (0x0302, the data-centre GPUs), other (0x0380)
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
            if need == "nvml" and not nvml_available():
                return "NVML (libnvidia-ml.so.1) not available: no NVIDIA driver"
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
    """PCI addresses (``0000:18:00.0``) of the NVIDIA GPUs under ``sysfs/bus/pci/devices``:
    functions of vendor 0x10de with a display base class (0x03: VGA, 3D controller, other),
    sorted; [] when the directory is absent. Needs neither the driver nor NVML."""
    root = Path(sysfs) / "bus" / "pci" / "devices"
    out = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    for bdf in entries:
        try:
            vendor = int((root / bdf / "vendor").read_text().strip(), 16)
            cls = int((root / bdf / "class").read_text().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor == PCI_VENDOR_NVIDIA and cls >> 16 == PCI_CLASS_DISPLAY:
            out.append(bdf)
    return out


def nvml_gpu_count() -> int | None:
    """GPUs the NVIDIA driver reports through NVML (``nvmlDeviceGetCount``), None without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


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


def nvml_available() -> bool:
    """True when nvidia-ml-py can initialise NVML (the driver's library is loadable)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


# ---- the NVML snapshot the checks share (links, gpu_memory) -------------------------------------

def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_snapshot() -> tuple[list[dict[str, Any]] | None, str]:
    """What NVML says of every GPU of this machine, or (None, why not). Per GPU: ``index``
    (NVML's), ``pci`` (normalized bus id), ``name``, ``pstate``, ``nvlink`` (link -> active),
    ``sm_clock_mhz``/``sm_clock_max_mhz``/``mem_clock_mhz`` (MHz), ``clock_reasons`` (the
    nvmlClocksEventReason mask) and ``clock_reasons_api``, and the GPU recovery action
    (:func:`nodewarden.nvml.read_recovery_action`, field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION):
    ``recovery_action`` (name, ``none`` when healthy; None when not read), ``recovery_action_code``
    (nvmlDeviceGpuRecoveryAction_t) and ``recovery_action_read`` (``ok``, ``not_supported (...)``
    for a driver without the field, ``error (...)``). A query a GPU does not answer is None.
    Opens and closes NVML itself; blocks as long as the driver does (:func:`nvml_with_timeout`)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML not available ({e})"

    def opt(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g: dict[str, Any] = {"index": i, "pci": normalize_pci(_text(pynvml.nvmlDeviceGetPciInfo(h).busId))}
            name = opt(pynvml.nvmlDeviceGetName, h)
            g["name"] = _text(name) if name is not None else None
            uuid = opt(pynvml.nvmlDeviceGetUUID, h)
            g["uuid"] = _text(uuid) if uuid is not None else None
            code, ret = read_recovery_action(pynvml, h)
            g["recovery_action"] = recovery_action_name(code) if code is not None else None
            g["recovery_action_code"] = code
            g["recovery_action_read"] = ("ok" if code is not None else
                                         f"not_supported ({return_name(ret)})" if driver_lacks_field(ret) else
                                         f"error ({return_name(ret)})")
            g["pstate"] = opt(pynvml.nvmlDeviceGetPerformanceState, h)
            links: dict[int, bool] = {}
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                state = opt(pynvml.nvmlDeviceGetNvLinkState, h, link)
                if state is not None:
                    links[link] = bool(state)
            g["nvlink"] = links
            g["sm_clock_mhz"] = opt(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
            g["sm_clock_max_mhz"] = opt(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM)
            g["mem_clock_mhz"] = opt(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM)
            g["clock_reasons"] = None
            # nvmlDeviceGetCurrentClocksEventReasons (drivers >= 535); the older name before.
            for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
                f = getattr(pynvml, fn, None)
                if f is None:
                    continue
                try:
                    g["clock_reasons"] = int(f(h))
                    g["clock_reasons_api"] = fn
                    break
                except pynvml.NVMLError:
                    continue
            gpus.append(g)
        return gpus, ""
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def nvml_with_timeout(seconds: float) -> tuple[list[dict[str, Any]] | None, str, bool]:
    """:func:`nvml_snapshot` in a daemon thread, waited for ``seconds``: (gpus, why not, hung).
    A driver that does not answer in time gives (None, "NVML did not answer within N s", True);
    the thread is left blocked in it. Never raises."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["v"] = nvml_snapshot()
        except Exception as e:  # an NVML call failed outside the per-call guards
            box["v"] = (None, f"NVML query failed: {type(e).__name__}: {e}")

    t = threading.Thread(target=target, name="nodewarden-nvml", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        return None, f"NVML did not answer within {seconds:g} s", True
    gpus, why = box["v"]
    return gpus, why, False


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

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
from typing import Any, Callable

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


def cpu_count() -> int:
    """CPUs this process may run on (the scheduler's affinity, e.g. a Slurm allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - Linux only
        return os.cpu_count() or 1

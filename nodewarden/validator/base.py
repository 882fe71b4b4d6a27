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


@dataclasses.dataclass
class RunContext:
    """What every check may read: the profile, the roots of /sys and /proc, the compute device
    (``cuda``/``cpu``), a progress callback and the run's mode.

    ``device`` is ``auto`` until resolved: CUDA when torch sees a GPU, else CPU.
    """

    profile: dict[str, Any]
    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    device: str = "auto"
    quick: bool = False
    progress: Progress = _noop
    workdir: Path | None = None
    baseline: dict[str, Any] | None = None

    def torch_device(self) -> str:
        """``cuda`` or ``cpu``: ``auto`` picks CUDA when torch reports a GPU."""
        if self.device != "auto":
            return self.device
        if not has_module("torch"):
            return "cpu"
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"

    def missing(self, needs: tuple[str, ...]) -> str | None:
        """Why a check with these needs cannot run here (a skip reason), or None."""
        for need in needs:
            if need == "torch" and not has_module("torch"):
                return "PyTorch is not installed (install nodewarden[validate])"
            if need == "gpu" and self.torch_device() != "cuda":
                return "no CUDA GPU visible to PyTorch"
            if need == "nvml" and not nvml_available():
                return "NVML (libnvidia-ml.so.1) not available: no NVIDIA driver"
        return None


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

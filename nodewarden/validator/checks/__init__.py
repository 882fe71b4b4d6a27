"""The validator's checks, one module each, in the order the suite runs them.

The list is explicit; a contract test keeps it and the modules of this package in step.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Cheap, decisive checks first: a node with a downed link fails in a second.
NAMES: tuple[str, ...] = ("links", "cpu", "host_memory_bandwidth", "gpu_memory", "gemm", "allreduce", "storage")
# The prolog gate (--quick): the checks that catch most broken nodes in well under 45 s.
QUICK_NAMES: tuple[str, ...] = ("links", "cpu", "host_memory_bandwidth", "gpu_memory", "gemm", "allreduce")


def get(name: str) -> ModuleType:
    """The module of check ``name``. Raises KeyError for an unknown name."""
    if name not in NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")

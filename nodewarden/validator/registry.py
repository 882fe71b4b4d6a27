"""The validator's checks (:mod:`nodewarden.validator.checks`, one module each), in the order the
suite runs them: the one list the runner, the command line and the profiles read.

The list is explicit and imported directly (no import by name: the import contracts see every
edge); a contract test keeps it and the modules of this package in step. The check modules
import nothing heavy at import (torch, numpy are imported when a check runs).
"""

from __future__ import annotations

from types import ModuleType

from nodewarden.validator.checks import allreduce, cpu, gemm, gpu_memory, host_memory_bandwidth, links, storage

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (links, cpu, host_memory_bandwidth, gpu_memory, gemm,
                                                        allreduce, storage)}
# Cheap, decisive checks first: a node with a downed link fails in a second.
NAMES: tuple[str, ...] = tuple(_MODULES)
# The prolog gate (--quick): the checks that catch most broken nodes in well under 45 s.
QUICK_NAMES: tuple[str, ...] = ("links", "cpu", "host_memory_bandwidth", "gpu_memory", "gemm", "allreduce")


def get(name: str) -> ModuleType:
    """The module of check ``name``. Raises KeyError for an unknown name."""
    return _MODULES[name]

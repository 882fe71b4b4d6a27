"""The agent's collectors, one module each (named after what it reads), in the order the agent
builds, polls and exports them.

The list is explicit (:data:`REGISTRY`); a contract test keeps it and the modules of this
package in step. An entry's ``name`` is the collector's ``name``, its ``[collectors]`` key in
the agent's configuration and the ``collector`` label of its health series. The kernel-log
collector is listed too, for its configuration key and label, but it is not polled: the agent's
follower (:mod:`nodewarden.agent.follower`) reads ``/dev/kmsg`` continuously, so its entry has
no ``build``. What the poller does beyond ``collect()`` follows what the collector declares
(:mod:`nodewarden.collectors.base`), never its name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from nodewarden.collectors.base import Collector
from nodewarden.collectors.edac import EdacCollector
from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.collectors.netclass import NetclassCollector
from nodewarden.collectors.nvml import NvmlCollector
from nodewarden.collectors.pcie import PcieCollector


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One collector the agent knows. ``build(sysfs, host)`` constructs it on the sysfs root
    ``sysfs`` with ``host`` the host name of its events; None for the kernel-log collector,
    which is the agent's follower, not a polled collector."""

    name: str
    build: Callable[[Path, str], Collector] | None

    @property
    def polled(self) -> bool:
        return self.build is not None


REGISTRY: tuple[Entry, ...] = (
    Entry("kernel_log", None),
    Entry("nvml", lambda sysfs, host: NvmlCollector(hostname=host, sysfs=sysfs)),
    Entry("infiniband", lambda sysfs, host: InfinibandCollector(sysfs)),
    Entry("edac", lambda sysfs, host: EdacCollector(sysfs)),
    Entry("pcie", lambda sysfs, host: PcieCollector(sysfs)),
    Entry("netclass", lambda sysfs, host: NetclassCollector(sysfs)),
)
NAMES: tuple[str, ...] = tuple(e.name for e in REGISTRY)
POLLED: tuple[str, ...] = tuple(e.name for e in REGISTRY if e.polled)
_BY_NAME = {e.name: e for e in REGISTRY}


def get(name: str) -> Entry:
    """The entry of collector ``name``. Raises KeyError for an unknown name."""
    return _BY_NAME[name]

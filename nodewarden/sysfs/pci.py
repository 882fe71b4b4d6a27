"""``/sys/bus/pci/devices/<bdf>/`` value forms (Documentation/ABI/testing/sysfs-bus-pci): vendor ids
of the functions a GPU node cares about, ``current_link_speed``/``max_link_speed`` and
``current_link_width``/``max_link_width``."""

from __future__ import annotations

import re

NVIDIA, MELLANOX = 0x10DE, 0x15B3
# PCIe transfer rate (GT/s) -> generation.
GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}

_GTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
_WIDTH = re.compile(r"^\s*x?(\d+)")


def pcie_generation(text: str | None) -> int | None:
    """``32.0 GT/s PCIe`` (kernels >= 5.x) or ``8 GT/s`` (older) -> 5 / 3; ``Unknown`` -> None."""
    m = _GTS.match(text or "")
    if not m:
        return None
    return GENERATIONS.get(float(m.group(1)))


def pcie_width(text: str | None) -> int | None:
    """``16`` or ``x16`` -> 16 lanes; 0 (an SR-IOV VF, a link down) -> None."""
    m = _WIDTH.match(text or "")
    if not m:
        return None
    return int(m.group(1)) or None

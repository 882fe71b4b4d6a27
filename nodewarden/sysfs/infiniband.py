"""``/sys/class/infiniband/<dev>/ports/<N>/`` value forms (Documentation/ABI/stable/sysfs-class-infiniband):
port ``state`` and ``phys_state`` codes and the ``rate`` text."""

from __future__ import annotations

import re

# ib_port_state / ib_port_phys_state (include/rdma/ib_verbs.h), as sysfs prints them: "N: NAME".
IB_ACTIVE, IB_LINKUP = 4, 5

_RATE = re.compile(r"^\s*(?P<gbit>\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((?P<width>\d+)X\s*(?P<speed>[A-Za-z0-9]*)\))?")


def parse_ib_rate(text: str | None) -> tuple[float | None, int | None, str | None]:
    """``rate``: ``400 Gb/sec (4X NDR)`` -> (400.0 Gbit/s, 4 lanes, "NDR"); ``2.5 Gb/sec (1X SDR)``
    -> (2.5, 1, "SDR"); unreadable -> (None, None, None)."""
    m = _RATE.match(text or "")
    if not m:
        return None, None, None
    return float(m.group("gbit")), int(m.group("width")) if m.group("width") else None, m.group("speed") or None

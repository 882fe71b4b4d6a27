"""InfiniBand / RoCE port events from the kernel log.

* IB core port state (``IB/cache: Add log messages for IB device state changes``, Linux 6.14+):
  ``mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE`` / ``Link DOWN`` / ``Link INIT``
* mlx5 netdev carrier: ``mlx5_core 0000:53:00.0 enp83s0f0np0: Link down`` / ``Link up``
* mlx5 port module events: ``mlx5_core 0000:01:00.0: Port module event: module 0, Cable plugged``

Every pattern is matched at the start of the driver's message (``re.match`` on the text that
:func:`nodewarden.parsing.lines.driver_message` gives), never searched for inside other text:
a message quoting a driver line (``segfault ... in NVRM: Xid ...``) is no fault. Numbers are
ASCII digits, bounded (at most 9 decimal digits): a longer run does not match.
"""

from __future__ import annotations

import re
from typing import Any

from nodewarden.parsing.pci import normalize_pci

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
IB_PORT_RE = re.compile(
    r"(?:(?P<drv>mlx[0-9]_core|[a-z_]+) (?P<bdf>" + _BDF + r"):? )?(?P<dev>[\w.-]+): Port: (?P<port>[0-9]{1,9}) "
    r"Link (?P<state>DOWN|INIT|ARMED|ACTIVE_DEFER|ACTIVE)\b")
NET_LINK_RE = re.compile(
    r"(?P<drv>mlx[0-9]_core) (?P<bdf>" + _BDF + r") (?P<netdev>[\w.-]+): Link (?P<state>up|down)\b")
MODULE_RE = re.compile(
    r"(?P<drv>mlx[0-9]_core) (?P<bdf>" + _BDF + r"): Port module event(?:\[error\])?: module (?P<module>[0-9]{1,9}), "
    r"(?P<status>[^,\n]+?)\s*(?:,|$)")
# FreeBSD mlx5en names the device by unit, without a PCI id (NVIDIA FreeBSD driver docs):
# "mlx5_core0: INFO: mlx5_port_module_event:710:(pid 11): Module 0, status: plugged and enabled".
MODULE_BSD_RE = re.compile(
    r"(?P<nic>mlx[0-9]_core[0-9]{1,9}): (?:[A-Z]+: )?(?:\w+:[0-9]{1,9}:\(pid [0-9]{1,9}\): )?Module (?P<module>[0-9]{1,9}), "
    r"status: (?P<status>[^,\n]+?)\s*(?:,|$)")
IB_HINT_RE = re.compile(r"Port: [0-9]{1,9} Link \S+")


def parse_ib_port(message: str) -> dict[str, Any] | None:
    """``rdma_device``, ``port`` (int), ``state`` (DOWN/INIT/ARMED/ACTIVE/ACTIVE_DEFER), ``pci_bus_id``."""
    m = IB_PORT_RE.match(message)
    if not m:
        return None
    return {"rdma_device": m.group("dev"), "port": int(m.group("port")), "state": m.group("state"),
            "pci_bus_id": normalize_pci(m.group("bdf"))}


def parse_net_link(message: str) -> dict[str, Any] | None:
    """``netdev``, ``state`` (up/down), ``pci_bus_id`` of an mlx5 Ethernet/RoCE carrier change."""
    m = NET_LINK_RE.match(message)
    if not m:
        return None
    return {"netdev": m.group("netdev"), "state": m.group("state"), "pci_bus_id": normalize_pci(m.group("bdf"))}


def parse_module_event(message: str) -> dict[str, Any] | None:
    """``module`` (int), ``status`` (e.g. ``Cable plugged``, ``Cable unplugged``), ``pci_bus_id``;
    on FreeBSD ``pci_bus_id`` is None and ``nic`` is the device unit (``mlx5_core0``)."""
    m = MODULE_RE.match(message)
    if m:
        return {"module": int(m.group("module")), "status": m.group("status").strip().rstrip("."),
                "pci_bus_id": normalize_pci(m.group("bdf"))}
    m = MODULE_BSD_RE.match(message)
    if m:
        return {"module": int(m.group("module")), "status": m.group("status").strip().rstrip("."),
                "pci_bus_id": None, "nic": m.group("nic")}
    return None

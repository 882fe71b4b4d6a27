"""``/sys/class/net``: network interfaces as typed records.

Kernel ABI: ``Documentation/ABI/testing/sysfs-class-net`` (``operstate``, ``carrier``, ``speed``
in Mb/s, ``type`` (``ARPHRD_*``), ``carrier_changes`` since 3.15, ``carrier_up_count``/
``carrier_down_count`` since 4.16), ``bonding/slaves`` (Documentation/networking/bonding.rst).
``carrier`` and ``speed`` answer EINVAL while an interface is down: by design, so those two
reads are not counted as unreadable. The rules for "a physical interface" and "its link is up"
are :func:`is_physical` and :func:`is_up`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from nodewarden.parsing.pci import normalize_pci
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs, listdir, printable, read_attr, visit

# include/uapi/linux/if_arp.h
ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 1, 32, 772
# drivers/net/bonding/bond_sysfs.c: a class attribute, a regular file in class/net once bonding is loaded
BONDING_MASTERS = "bonding_masters"


def parse_speed(text: str | None) -> int | None:
    """``speed``: ``100000`` -> 100000 (Mb/s); ``-1`` (unknown), ``0``, garbage, unreadable -> None."""
    if text is None or not re.fullmatch(r"-?\d+", text, re.ASCII):
        return None
    mbit = int(text)
    return mbit if mbit > 0 else None


def parse_carrier(text: str | None) -> int | None:
    """``carrier``: ``1`` -> 1, ``0`` -> 0; unreadable or anything else -> None."""
    return int(text) if text in ("0", "1") else None


def _speed(reader: AttrReader, path: str | Path) -> int | None:
    """``speed``: refused (EINVAL) while down, ``-1`` when unknown: neither is counted; text that
    is no number is."""
    text = read_attr(path)
    if text is not None and not re.fullmatch(r"-?\d+", text, re.ASCII):
        reader.unreadable += 1
    return parse_speed(text)


def _carrier(reader: AttrReader, path: str | Path) -> int | None:
    """``carrier``: refused (EINVAL) while down, not counted; text other than 0/1 is."""
    text = read_attr(path)
    return reader.parsed(text, parse_carrier(text))


@dataclasses.dataclass(frozen=True, slots=True)
class Netdev:
    """One network interface as read at one moment; a field whose file is absent or unreadable
    is None."""

    name: str                            # class/net/<name>
    operstate: str | None                # operstate (RFC 2863: up, down, lowerlayerdown, dormant, unknown)
    carrier: int | None                  # carrier (1/0; EINVAL while down)
    speed_mbit: int | None               # speed (Mb/s; -1, 0 or EINVAL: None)
    type: int | None                     # type (ARPHRD_*: 1 Ethernet, 32 IPoIB, 772 loopback)
    carrier_changes: int | None = None   # carrier_changes
    carrier_up_count: int | None = None  # carrier_up_count
    carrier_down_count: int | None = None  # carrier_down_count
    device: bool = False                 # device: a link to the bus device behind it
    pci_bus_id: str | None = None        # device -> its PCI function
    bridge: bool = False                 # bridge/ (the directory a bridge has)
    physfn: bool = False                 # device/physfn (the device is an SR-IOV VF)
    bond_slaves: tuple[str, ...] = ()    # bonding/slaves


def is_up(d: Netdev) -> bool:
    """The interface's link is up: RFC 2863 operstate ``up``; for a driver that leaves operstate
    ``unknown`` (or unreadable), the carrier (``carrier`` 1). The one rule of the links check,
    ``nodewarden_net_up`` and the ``net_link_down``/``net_link_up`` events."""
    if d.operstate in (None, "", "unknown"):
        return d.carrier == 1
    return d.operstate == "up"


def is_physical(d: Netdev) -> bool:
    """A physical interface: it has a ``device`` link (the kernel's own notion, as node_exporter's:
    ``lo``, veth, docker and other virtual interfaces have none), is not a bridge (``bridge/``)
    and not an SR-IOV VF (``device/physfn``). IPoIB interfaces (type 32) are physical."""
    return d.device and not d.bridge and not d.physfn


def present(sysfs: Path) -> bool:
    """Whether ``<sysfs>/class/net`` exists."""
    return (Path(sysfs) / "class" / "net").is_dir()


def _kind(d: Path, reader: AttrReader) -> dict[str, Any]:
    """What an interface directory says of the interface's kind, which does not change while it
    exists: ``device`` link and its PCI function, ``bridge/``, ``device/physfn``, ``type``."""
    has_device = os.path.lexists(d / "device")
    return {"device": has_device,
            "pci_bus_id": normalize_pci(os.path.basename(os.path.realpath(d / "device"))) if has_device else None,
            "bridge": (d / "bridge").is_dir(), "physfn": os.path.lexists(d / "device" / "physfn"),
            "type": reader.counter(d / "type")}


def read_netdev(d: Path, reader: AttrReader, static: StaticAttrs | None = None) -> Netdev:
    """The interface directory ``d`` (``class/net/<name>``) as a :class:`Netdev`. With ``static``
    (a poller's :class:`~nodewarden.sysfs.attrs.StaticAttrs`), what does not change while the
    interface exists (:func:`_kind`) is read once per interface directory."""
    return _read_netdev(d, reader, static.of(d) if static is not None else None)


def _read_netdev(d: Path, reader: AttrReader, kept: dict[str, Any] | None) -> Netdev:
    if kept is not None and "kind" in kept:
        kind = kept["kind"]
    else:
        kind = _kind(d, reader)
        if kept is not None and kind["type"] is not None:
            kept["kind"] = kind
    s = str(d)  # string joins: a Path join costs more than the read
    return Netdev(
        name=printable(d.name), operstate=reader.text(f"{s}/operstate"),
        carrier=_carrier(reader, f"{s}/carrier"), speed_mbit=_speed(reader, f"{s}/speed"),
        type=kind["type"], carrier_changes=reader.counter(f"{s}/carrier_changes"),
        carrier_up_count=reader.counter(f"{s}/carrier_up_count"),
        carrier_down_count=reader.counter(f"{s}/carrier_down_count"),
        device=kind["device"], pci_bus_id=kind["pci_bus_id"], bridge=kind["bridge"], physfn=kind["physfn"],
        bond_slaves=tuple((reader.text(f"{s}/bonding/slaves") or "").split()))


def read_netdevs(sysfs: Path, reader: AttrReader | None = None, static: StaticAttrs | None = None) -> list[Netdev]:
    """Every interface under ``<sysfs>/class/net`` (``eth2`` before ``eth10``); ``[]`` when the
    directory is absent. Never raises: an interface that is no directory (removed while read, a
    dangling link) is left out and counted. ``bonding_masters``, the bonding driver's control
    file beside the interfaces (Documentation/networking/bonding.rst), is no interface and no
    unreadable file: skipped. ``static``: see :func:`read_netdev`; the records are the same as
    without it."""
    reader = reader if reader is not None else AttrReader()
    root = Path(sysfs) / "class" / "net"
    out = []
    listed = set()
    for name in listdir(root):
        d = root / name
        if name == BONDING_MASTERS and not os.path.isdir(d):
            continue
        present, kept = visit(d, reader, static, listed)
        if present:
            out.append(_read_netdev(d, reader, kept))
    if static is not None:
        static.prune(listed)
    return out

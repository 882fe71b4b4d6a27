"""``/sys/class/infiniband``: RDMA devices and their ports as typed records.

Kernel ABI: ``Documentation/ABI/stable/sysfs-class-infiniband`` (the files) and
``drivers/infiniband/core/sysfs.c`` (their formats: ``state_show`` "4: ACTIVE",
``phys_state_show`` "5: LinkUp", ``rate_show`` "400 Gb/sec (4X NDR)", the PMA counters
``counters/*``, the driver's ``hw_counters/*``). One record per device and per port; the readers
take the sysfs root and an :class:`~nodewarden.sysfs.attrs.AttrReader` that counts the files
found but unreadable. The rules every reader of a port follows are here: :func:`port_active`
(is this port up?), :func:`read_link_layer` (a missing ``link_layer`` file is InfiniBand) and
:func:`link_layer` (an unreadable one is judged and labelled InfiniBand too).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from nodewarden.parsing.pci import normalize_pci
from nodewarden.sysfs.attrs import (AttrReader, CodeName, StaticAttrs, is_decimal, listdir, parse_code_name, printable,
                                    visit)

# ib_port_state / ib_port_phys_state (include/rdma/ib_verbs.h), as sysfs prints them: "N: NAME".
IB_ACTIVE, IB_LINKUP = 4, 5
INFINIBAND, ETHERNET = "InfiniBand", "Ethernet"
# The names drivers/infiniband/core/sysfs.c prints beside the numbers (state_show,
# phys_state_show): a text-only value is read as the number it names.
PORT_STATES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
PHYS_STATES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
               "LinkErrorRecovery": 6, "Phy Test Mode": 7}
# The ABI document names the file port_rcv_contraint_errors (sic); kernels create
# port_rcv_constraint_errors (Y-002/Y-003). Both read as the correct name.
COUNTER_ALIASES = {"port_rcv_contraint_errors": "port_rcv_constraint_errors"}
# hw_counters/lifespan is the counters' cache lifetime in ms: a setting, not a count.
NOT_COUNTERS = ("lifespan",)

_RATE = re.compile(r"^\s*(?P<gbit>\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((?P<width>\d+)X\s*(?P<speed>[A-Za-z0-9]*)\))?", re.ASCII)


# ---- value forms -------------------------------------------------------------------------------

class IbRate(NamedTuple):
    """A port ``rate``: ``gbit`` (Gbit/s), ``lanes`` (the active width) and ``speed`` (``NDR``)."""

    gbit: float | None
    lanes: int | None
    speed: str | None


def parse_ib_rate(text: str | None) -> IbRate:
    """``rate``: ``400 Gb/sec (4X NDR)`` -> (400.0 Gbit/s, 4 lanes, "NDR"); ``2.5 Gb/sec (1X SDR)``
    -> (2.5, 1, "SDR"); unreadable or another form -> (None, None, None)."""
    m = _RATE.match(text or "")
    if not m:
        return IbRate(None, None, None)
    return IbRate(float(m.group("gbit")), int(m.group("width")) if m.group("width") else None,
                  m.group("speed") or None)


def counter_name(filename: str) -> str:
    """The counter a ``counters/`` file holds, with the ABI document's misspelling corrected."""
    return COUNTER_ALIASES.get(filename, filename)


# ---- records -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Port:
    """One port of an RDMA device, as read at one moment. A field whose file is unreadable is
    None (and the file counted by the reader); ``counters`` holds None for a counter that reads
    ``N/A (no PMA)`` (iWARP ``i40iw``, Y-005)."""

    device: str                               # class/infiniband/<device>
    port: int                                 # ports/<port>
    state: int | None                         # ports/<port>/state: the number of "4: ACTIVE" (of "ACTIVE")
    state_name: str | None                    # ports/<port>/state: the name ("ACTIVE")
    phys_state: int | None                    # ports/<port>/phys_state: the number of "5: LinkUp" (of "LinkUp")
    phys_state_name: str | None               # ports/<port>/phys_state: the name ("LinkUp")
    rate: str | None                          # ports/<port>/rate ("400 Gb/sec (4X NDR)")
    link_layer: str | None                    # ports/<port>/link_layer (see read_link_layer)
    netdev: str | None = None                 # ports/<port>/gid_attrs/ndevs/0 (Ethernet link layer only)
    counters: Mapping[str, int | None] = dataclasses.field(default_factory=dict)     # ports/<port>/counters/<name>
    hw_counters: Mapping[str, int | None] = dataclasses.field(default_factory=dict)  # ports/<port>/hw_counters/<name>

    @property
    def key(self) -> str:
        """``mlx5_0/1``: the port's name in events, reports and the flash-cut detector."""
        return f"{self.device}/{self.port}"

    @property
    def active(self) -> bool | None:
        """:func:`port_active` of this port."""
        return port_active(self)

    @property
    def link_downed(self) -> int | None:
        """``counters/link_downed`` (PMA LinkDownedCounter); None when absent, N/A or unreadable."""
        return self.counters.get("link_downed")

    @property
    def rate_gbit(self) -> float | None:
        """The ``rate`` in Gbit/s (400.0 for ``400 Gb/sec (4X NDR)``); None when unreadable."""
        return parse_ib_rate(self.rate).gbit


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    """One RDMA device (HCA, RNIC, an mlx5 LAG device) and its ports."""

    name: str                          # class/infiniband/<name>
    pci_bus_id: str | None             # device -> the PCI function it is (None: no such link)
    hca_type: str | None               # hca_type ("MT4129")
    fw_ver: str | None                 # fw_ver
    board_id: str | None               # board_id
    netdevs: tuple[str, ...]           # device/net/<netdev>: the PCI function's network interfaces
    ports: tuple[Port, ...]            # ports/<n>, in port order


# ---- rules -------------------------------------------------------------------------------------

def port_active(port: Port) -> bool | None:
    """Is the port up? Logical state ACTIVE (code 4, or the text ``ACTIVE`` when the file has no
    number) and physical state LinkUp (code 5, or the text ``LinkUp``) or unreadable.

    IBTA vol. 1 7.2: PortState Active is reachable only with PortPhysicalState LinkUp, so an
    ACTIVE port whose ``phys_state`` cannot be read is still active (the reader counted the file;
    the links check warns about it). A readable ``phys_state`` other than LinkUp is not active.
    None when the logical ``state`` itself could not be read: the port is not judged."""
    if port.state is None and port.state_name is None:
        return None
    active = port.state == IB_ACTIVE or (port.state is None and (port.state_name or "").upper() == "ACTIVE")
    if port.phys_state is None and port.phys_state_name is None:
        return active
    linkup = port.phys_state == IB_LINKUP or (
        port.phys_state is None and (port.phys_state_name or "").lower() == "linkup")
    return active and linkup


def link_layer(port: Port) -> str:
    """The port's link layer as every reader names it: ``Ethernet`` (RoCE, iWARP) when its
    ``link_layer`` says so, else ``InfiniBand`` -- also when the file is unreadable (the reader
    counted it; the links check warns naming it): a fabric port whose layer cannot be read is
    held to the InfiniBand rules rather than let off as RoCE."""
    return ETHERNET if port.link_layer == ETHERNET else INFINIBAND


def read_link_layer(pdir: Path, reader: AttrReader) -> str | None:
    """``ports/<n>/link_layer``: ``InfiniBand`` or ``Ethernet`` (RoCE, iWARP). A missing file is
    ``InfiniBand``: kernels before ``link_layer`` existed had IB-only RDMA devices. A file that
    is there but unreadable (or empty) is None."""
    path = pdir / "link_layer"
    if not os.path.lexists(path):
        return INFINIBAND
    return reader.text(path) or None


# ---- readers -----------------------------------------------------------------------------------

def present(sysfs: Path) -> bool:
    """Whether ``<sysfs>/class/infiniband`` exists (the kernel has RDMA devices or support)."""
    return (Path(sysfs) / "class" / "infiniband").is_dir()


def _code_name(reader: AttrReader, path: str | Path, names: Mapping[str, int]) -> CodeName:
    """``state``/``phys_state``: ``N: NAME``, or a text-only name (its number from ``names``
    when it is one of the kernel's); empty or unreadable -> (None, None), counted."""
    text = reader.text(path)
    value = parse_code_name(text)
    reader.parsed(text, value.name)
    if value.code is None and value.name is not None:
        return CodeName(names.get(value.name), value.name)
    return value


def _listing(d: Path, kept: dict[str, Any] | None, key: str, make: Callable[[list[str]], list[Any]]) -> list[Any]:
    """``make(listdir(d))``, kept in ``kept`` while the directory's inode and mtime stay the same
    (one stat instead of a listing and a sort per poll). For listings fixed while their
    directory exists (a port's ``counters/``, a device's ``ports/``: the kernel creates them with
    the port or device, and sysfs does not touch a directory's mtime); the mtime is looked at
    for trees that are edited (a fixture), never relied on for sysfs."""
    if kept is None:
        return make(listdir(d))
    try:
        st = os.stat(d)
        ident: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
    except OSError:
        ident = None
    got = kept.get(key)
    if got is not None and ident is not None and got[0] == ident:
        return got[1]
    value = make(listdir(d))
    if ident is not None:
        kept[key] = (ident, value)
    return value


def read_port(device: str, port: int, pdir: Path, reader: AttrReader, static: StaticAttrs | None = None) -> Port | None:
    """One port directory (``class/infiniband/<device>/ports/<port>``) as a :class:`Port`; a
    ``state``/``phys_state`` that is empty, or a ``rate`` that is not ``N Gb/sec``, is None and
    counted as the unreadable files are. With ``static`` (a poller's
    :class:`~nodewarden.sysfs.attrs.StaticAttrs`), what does not change while the port exists
    (``link_layer``, the names of its ``counters/`` and ``hw_counters/`` files) is read once,
    and a port directory that is no directory now is None (counted)."""
    kept = static.of(pdir) if static is not None else None
    if static is not None and kept is None:
        reader.unreadable += 1  # vanished (as AttrReader.gone counts it)
        return None
    ps = str(pdir)  # string joins: a Path join costs more than the read
    state = _code_name(reader, f"{ps}/state", PORT_STATES)
    phys = _code_name(reader, f"{ps}/phys_state", PHYS_STATES)
    if kept is not None and "layer" in kept:
        layer = kept["layer"]
    else:
        layer = read_link_layer(pdir, reader)
        if kept is not None and layer is not None:
            kept["layer"] = layer
    cdir, hdir = pdir / "counters", pdir / "hw_counters"
    names = _listing(cdir, kept, "counters", lambda fs: [(counter_name(f), f) for f in fs])
    hw_names = _listing(hdir, kept, "hw_counters", lambda fs: [f for f in fs if f not in NOT_COUNTERS])
    counters: dict[str, int | None] = {}
    c, h = str(cdir), str(hdir)  # string joins: a Path join costs more than the read
    for name, fname in names:
        counters[name] = reader.counter(f"{c}/{fname}")
    hw = {fname: reader.counter(f"{h}/{fname}") for fname in hw_names}
    # The GID table's netdev (a bond for a LAG device); an InfiniBand port has none (EINVAL).
    netdev = reader.text(f"{ps}/gid_attrs/ndevs/0") if layer == ETHERNET else None
    rate = reader.text(f"{ps}/rate")
    if reader.parsed(rate, parse_ib_rate(rate).gbit) is None:
        rate = None
    return Port(device, port, state.code, state.name, phys.code, phys.name, rate, layer, netdev or None,
                counters, hw)


def _identity(ddir: Path, reader: AttrReader) -> tuple[str | None, str | None, str | None, str | None]:
    """(PCI function of ``device``, ``hca_type``, ``fw_ver``, ``board_id``) of a device directory."""
    try:
        pci = normalize_pci(os.path.basename(os.path.realpath(ddir / "device")))
    except OSError:
        pci = None
    return pci, reader.text(ddir / "hca_type"), reader.text(ddir / "fw_ver"), reader.text(ddir / "board_id")


def read_devices(sysfs: Path, reader: AttrReader | None = None, static: StaticAttrs | None = None) -> list[Device]:
    """Every RDMA device under ``<sysfs>/class/infiniband`` with its ports (``mlx5_2`` before
    ``mlx5_10``); ``[]`` when the directory is absent. Never raises: a device or a port that is
    no directory (vanished while read, a dangling link), or a port entry that is no port number,
    is left out and counted. ``static``: a poller's :class:`~nodewarden.sysfs.attrs.StaticAttrs`,
    so that what does not change while a device or port exists (the PCI function, ``hca_type``,
    ``fw_ver``, ``board_id``, :func:`read_port`'s) is read once per directory; the records are
    the same as without it."""
    reader = reader if reader is not None else AttrReader()
    root = Path(sysfs) / "class" / "infiniband"
    out = []
    listed: set[str] = set()
    for name in listdir(root):
        ddir = root / name
        present, kept = visit(ddir, reader, static, listed)
        if not present:
            continue
        if kept is not None and "identity" in kept:
            pci, hca, fw, board = kept["identity"]
        else:
            pci, hca, fw, board = _identity(ddir, reader)
            if kept is not None and None not in (hca, fw, board):
                kept["identity"] = (pci, hca, fw, board)
        ports = []
        for num in _listing(ddir / "ports", kept, "ports", list):
            pdir = ddir / "ports" / num
            if not is_decimal(num):
                reader.unreadable += 1
                continue
            if static is not None or not reader.gone(pdir):  # with static, read_port's stat tells
                port = read_port(printable(name), int(num), pdir, reader, static)
                if port is not None:
                    ports.append(port)
                    listed.add(str(pdir))
        netdevs = tuple(printable(n) for n in listdir(ddir / "device" / "net"))  # renamed at will: listed every time
        out.append(Device(printable(name), pci, hca, fw, board, netdevs, tuple(ports)))
    if static is not None:
        static.prune(listed)
    return out


def read_ports(sysfs: Path, reader: AttrReader | None = None, static: StaticAttrs | None = None) -> list[Port]:
    """The ports of :func:`read_devices`, in device then port order."""
    return [p for d in read_devices(sysfs, reader, static) for p in d.ports]

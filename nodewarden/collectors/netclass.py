"""Link state and carrier changes of the physical network interfaces, from ``/sys/class/net``.

Kernel ABI: ``Documentation/ABI/testing/sysfs-class-net`` (``operstate``, ``carrier``,
``carrier_changes`` since 3.15, ``carrier_up_count``/``carrier_down_count`` since 4.16,
``speed`` in Mb/s, -1 or EINVAL when unknown or down). Physical interfaces are those with a
``device`` link; ``lo``, ``veth*``, ``docker*``, bridges (a ``bridge/`` directory), bonds and
other virtual interfaces have none or are named so, and SR-IOV VF netdevs (``device/physfn``)
are left out to bound the series count. Series, per ``device`` (the interface name):

* ``nodewarden_net_carrier_changes_total`` (``carrier_changes``)
* ``nodewarden_net_carrier_up_changes_total``, ``nodewarden_net_carrier_down_changes_total``
  (``carrier_up_count``/``carrier_down_count``, when present)
* ``nodewarden_net_up`` (1 when ``operstate`` is ``up``), ``nodewarden_net_carrier`` (when readable)
* ``nodewarden_net_speed_bytes_per_second`` (when the speed is known)
* ``nodewarden_collector_unreadable_files{collector="netclass"}`` (``carrier`` and ``speed``
  refuse reads on a down interface by design: those are not counted)

Events between two polls (source ``sysfs``, device the interface): ``net_link_down`` /
``net_link_up`` when the link goes down or up (``operstate``; ``carrier`` when the driver leaves
operstate ``unknown``), and, when both polls saw the link up but ``carrier_changes`` rose by 2 or
more, one down/up pair per two changes (attrs ``flap`` true, ``detected_by``
``carrier_changes``): a flap shorter than the poll interval.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from pathlib import Path
from typing import Callable

from nodewarden import events as ev
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.parsing.pci import normalize_pci
from nodewarden.sysfs.attrs import AttrReader, listdir, read_attr

NAME = "netclass"
UNREADABLE = "nodewarden_collector_unreadable_files"
SKIP_PREFIXES = ("lo", "veth", "docker")
HELP = {
    "nodewarden_net_carrier_changes_total": "Carrier changes of the interface (carrier_changes).",
    "nodewarden_net_carrier_up_changes_total": "Carrier up transitions (carrier_up_count).",
    "nodewarden_net_carrier_down_changes_total": "Carrier down transitions (carrier_down_count).",
    "nodewarden_net_up": "1 when the interface's operstate is up.",
    "nodewarden_net_carrier": "Physical link carrier (1 present, 0 absent).",
    "nodewarden_net_speed_bytes_per_second": "Negotiated link speed.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll.",
}
COUNTERS = (("carrier_changes", "nodewarden_net_carrier_changes_total"),
            ("carrier_up_count", "nodewarden_net_carrier_up_changes_total"),
            ("carrier_down_count", "nodewarden_net_carrier_down_changes_total"))


@dataclasses.dataclass(frozen=True, slots=True)
class NetReading:
    """One interface at one poll."""

    name: str                      # class/net/<name>
    operstate: str | None          # operstate
    carrier: int | None            # carrier
    carrier_changes: int | None    # carrier_changes
    speed_mbit: int | None         # speed (Mb/s; None when -1 or unreadable)
    pci_bus_id: str | None = None  # device -> its PCI function

    @property
    def up(self) -> bool:
        return link_up(self.operstate, self.carrier)


# ---- pure ------------------------------------------------------------------------------------

def link_up(operstate: str | None, carrier: int | None) -> bool:
    """RFC 2863 operstate ``up``; drivers that leave it ``unknown`` are judged by the carrier."""
    if operstate in (None, "", "unknown"):
        return carrier == 1
    return operstate == "up"


def parse_speed(text: str | None) -> int | None:
    """``100000`` -> 100000 (Mb/s); ``-1``, ``0``, unreadable -> None."""
    try:
        mbit = int(text) if text is not None else None
    except ValueError:
        return None
    return mbit if mbit is not None and mbit > 0 else None


def parse_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def link_events(before: NetReading | None, after: NetReading, now: float,
                since: float | None = None) -> list[ev.FaultEvent]:
    """The events one interface's two consecutive readings imply (see the module doc); ``since``
    is the time of the ``before`` reading (flap events carry it as ``attrs.since``)."""
    if before is None:
        return []
    if before.up != after.up:
        return [net_event(ev.NET_LINK_UP if after.up else ev.NET_LINK_DOWN, before, after, now)]
    if after.up and before.carrier_changes is not None and after.carrier_changes is not None:
        flaps = (after.carrier_changes - before.carrier_changes) // 2
        out = []
        for _ in range(max(0, flaps)):
            out.append(net_event(ev.NET_LINK_DOWN, before, after, now, flap=True, since=since))
            out.append(net_event(ev.NET_LINK_UP, before, after, now, flap=True, since=since))
        return out
    return []


def net_event(kind: str, before: NetReading, after: NetReading, now: float, flap: bool = False,
              since: float | None = None) -> ev.FaultEvent:
    state = "up" if kind == ev.NET_LINK_UP else "down"
    what = " (flap between polls)" if flap else ""
    msg = f"{after.name}: Link {state}{what} (sysfs operstate {after.operstate}, carrier {after.carrier})"
    attrs = {"netdev": after.name, "state": state, "operstate": after.operstate, "carrier": after.carrier,
             "carrier_changes": after.carrier_changes, "previous_operstate": before.operstate,
             "pci_bus_id": after.pci_bus_id}
    if flap:
        attrs.update({"flap": True, "detected_by": "carrier_changes", "since": since,
                      "carrier_changes_delta": (after.carrier_changes or 0) - (before.carrier_changes or 0)})
    return ev.FaultEvent(kind=kind, message=msg, raw=msg, time=dt.datetime.fromtimestamp(now, tz=dt.timezone.utc),
                         time_kind=ev.TIME_WALL, raw_time=f"{now:.6f}", source="sysfs", device=after.name,
                         attrs=attrs)


def is_physical(d: Path, name: str) -> bool:
    """Has a ``device`` link, is not a bridge, a VF, or named like a virtual interface."""
    if name.startswith(SKIP_PREFIXES) or not os.path.lexists(d / "device"):
        return False
    return not (d / "bridge").is_dir() and not os.path.lexists(d / "device" / "physfn")


# ---- collector -------------------------------------------------------------------------------

class NetclassCollector:
    """Polls ``<sysfs>/class/net``. No physical interface: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys", clock: Callable[[], float] = time.time) -> None:
        self.sysfs = Path(sysfs)
        self.clock = clock
        self._last: dict[str, NetReading] = {}
        self._last_t: float | None = None

    def collect(self) -> Snapshot:
        snap = Snapshot()
        root = self.sysfs / "class" / "net"
        r = AttrReader()
        now = self.clock()
        current: dict[str, NetReading] = {}
        for name in listdir(root):
            d = root / name
            if not is_physical(d, name):
                continue
            try:
                current[name] = self._interface(snap, r, d, name)
            except OSError:
                r.unreadable += 1
        if not current:
            self._last = {}
            return snap
        snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        for name, reading in current.items():
            snap.events.extend(link_events(self._last.get(name), reading, now, self._last_t))
        self._last, self._last_t = current, now
        return snap

    @staticmethod
    def _interface(snap: Snapshot, r: AttrReader, d: Path, name: str) -> NetReading:
        lab = (("device", name),)
        operstate = r.text(d / "operstate")
        # carrier and speed answer EINVAL while the interface is down: not an error.
        carrier = parse_int(read_attr(d / "carrier"))
        speed = parse_speed(read_attr(d / "speed"))
        values: dict[str, int | None] = {}
        for fname, metric in COUNTERS:
            values[fname] = r.counter(d / fname)
            if values[fname] is not None:
                snap.add(metric, lab, values[fname], COUNTER, HELP[metric])
        if operstate is not None:
            snap.add("nodewarden_net_up", lab, 1 if operstate == "up" else 0, GAUGE, HELP["nodewarden_net_up"])
        if carrier is not None:
            snap.add("nodewarden_net_carrier", lab, carrier, GAUGE, HELP["nodewarden_net_carrier"])
        if speed is not None:
            snap.add("nodewarden_net_speed_bytes_per_second", lab, speed * 1e6 / 8, GAUGE,
                     HELP["nodewarden_net_speed_bytes_per_second"])
        pci = normalize_pci(os.path.basename(os.path.realpath(d / "device")))
        return NetReading(name, operstate, carrier, values["carrier_changes"], speed, pci)

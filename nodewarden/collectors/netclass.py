"""Link state and carrier changes of the physical network interfaces, from ``/sys/class/net``.

Kernel ABI: ``Documentation/ABI/testing/sysfs-class-net`` (``operstate``, ``carrier``,
``carrier_changes`` since 3.15, ``carrier_up_count``/``carrier_down_count`` since 4.16,
``speed`` in Mb/s, -1 or EINVAL when unknown or down), read by
:func:`nodewarden.sysfs.net.read_netdevs`. Only physical interfaces are exported
(:func:`nodewarden.sysfs.net.is_physical`, the rule the links check follows too: a ``device``
link, not a bridge, not an SR-IOV VF; ``lo``, ``veth*``, ``docker*``, bonds and other virtual
interfaces have no ``device`` link). Series, per ``device`` (the interface name):

* ``nodewarden_net_carrier_changes_total`` (``carrier_changes``)
* ``nodewarden_net_carrier_up_changes_total``, ``nodewarden_net_carrier_down_changes_total``
  (``carrier_up_count``/``carrier_down_count``, when present)
* ``nodewarden_net_up`` (1 when the link is up: :func:`nodewarden.sysfs.net.is_up`, the links check's rule), ``nodewarden_net_carrier`` (when readable)
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

import datetime as dt
import time
from pathlib import Path
from typing import Callable

from nodewarden import events as ev
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs
from nodewarden.sysfs.net import Netdev, is_physical, is_up, read_netdevs

NAME = "netclass"
UNREADABLE = "nodewarden_collector_unreadable_files"
HELP = {
    "nodewarden_net_carrier_changes_total": "Carrier changes of the interface (carrier_changes).",
    "nodewarden_net_carrier_up_changes_total": "Carrier up transitions (carrier_up_count).",
    "nodewarden_net_carrier_down_changes_total": "Carrier down transitions (carrier_down_count).",
    "nodewarden_net_up": "1 when the interface's link is up (operstate up; carrier 1 where operstate is unknown).",
    "nodewarden_net_carrier": "Physical link carrier (1 present, 0 absent).",
    "nodewarden_net_speed_bytes_per_second": "Negotiated link speed.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll.",
}


# ---- pure ------------------------------------------------------------------------------------

def link_events(before: Netdev | None, after: Netdev, now: float,
                since: float | None = None) -> list[ev.FaultEvent]:
    """The events one interface's two consecutive readings imply (see the module doc); ``since``
    is the time of the ``before`` reading (flap events carry it as ``attrs.since``)."""
    if before is None:
        return []
    if is_up(before) != is_up(after):
        return [net_event(ev.NET_LINK_UP if is_up(after) else ev.NET_LINK_DOWN, before, after, now)]
    if is_up(after) and before.carrier_changes is not None and after.carrier_changes is not None:
        flaps = (after.carrier_changes - before.carrier_changes) // 2
        out = []
        for _ in range(max(0, flaps)):
            out.append(net_event(ev.NET_LINK_DOWN, before, after, now, flap=True, since=since))
            out.append(net_event(ev.NET_LINK_UP, before, after, now, flap=True, since=since))
        return out
    return []


def net_event(kind: str, before: Netdev, after: Netdev, now: float, flap: bool = False,
              since: float | None = None) -> ev.FaultEvent:
    """The ``net_link_down``/``net_link_up`` event (``kind``) of interface ``after`` after
    ``before`` at Unix time ``now`` (seconds); ``flap``: one of a pair a ``carrier_changes``
    rise between two up polls implies, ``since`` the earlier poll's time."""
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


# ---- collector -------------------------------------------------------------------------------

class NetclassCollector:
    """Polls ``<sysfs>/class/net``. No physical interface: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys", clock: Callable[[], float] = time.time) -> None:
        self.sysfs = Path(sysfs)
        self.clock = clock
        self._static = StaticAttrs()  # device link, bridge, physfn, type: read once per interface directory
        self._last: dict[str, Netdev] = {}
        self._last_t: float | None = None

    def collect(self) -> Snapshot:
        snap = Snapshot()
        r = AttrReader()
        now = self.clock()
        current = {d.name: d for d in read_netdevs(self.sysfs, r, self._static) if is_physical(d)}
        if not current:
            self._last = {}
            if r.unreadable:  # files found unreadable count even when no interface survived them
                snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
            return snap
        for d in current.values():
            _samples(snap, d)
        snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        for name, reading in current.items():
            snap.events.extend(link_events(self._last.get(name), reading, now, self._last_t))
        self._last, self._last_t = current, now
        return snap


def _samples(snap: Snapshot, d: Netdev) -> None:
    """One physical interface's series."""
    lab = (("device", d.name),)
    for value, metric in ((d.carrier_changes, "nodewarden_net_carrier_changes_total"),
                          (d.carrier_up_count, "nodewarden_net_carrier_up_changes_total"),
                          (d.carrier_down_count, "nodewarden_net_carrier_down_changes_total")):
        if value is not None:
            snap.add(metric, lab, value, COUNTER, HELP[metric])
    if d.operstate is not None or d.carrier is not None:
        snap.add("nodewarden_net_up", lab, 1 if is_up(d) else 0, GAUGE, HELP["nodewarden_net_up"])
    if d.carrier is not None:
        snap.add("nodewarden_net_carrier", lab, d.carrier, GAUGE, HELP["nodewarden_net_carrier"])
    if d.speed_mbit is not None:
        snap.add("nodewarden_net_speed_bytes_per_second", lab, d.speed_mbit * 1e6 / 8, GAUGE,
                 HELP["nodewarden_net_speed_bytes_per_second"])

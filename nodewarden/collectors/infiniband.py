"""InfiniBand / RDMA port state and PMA counters from ``/sys/class/infiniband``.

Kernel ABI: ``Documentation/ABI/stable/sysfs-class-infiniband`` (files), the attribute formats
of ``drivers/infiniband/core/sysfs.c`` (``state_show`` "4: ACTIVE", ``phys_state_show``
"5: LinkUp", ``rate_show`` "400 Gb/sec (4X NDR)", the PMA counters ``counters/*`` and the
driver's ``hw_counters/*``). Per port ``class/infiniband/<device>/ports/<port>/``:

=================================================  ==============================================
file                                               series
=================================================  ==============================================
``state`` ("4: ACTIVE")                            ``nodewarden_ib_port_state`` (the number)
``phys_state`` ("5: LinkUp")                       ``nodewarden_ib_port_phys_state``
``rate`` ("400 Gb/sec (4X NDR)")                   ``nodewarden_ib_port_rate_bytes_per_second``
``link_layer``, ``../../board_id``, ``fw_ver``     ``nodewarden_ib_port_info`` 1
``counters/link_downed``                           ``nodewarden_ib_link_downed_total``
``counters/link_error_recovery``                   ``nodewarden_ib_link_error_recovery_total``
``counters/<error counter>``                       ``nodewarden_ib_port_errors_total{counter}``
``counters/port_{xmit,rcv}_data`` (4-byte words)   ``nodewarden_ib_port_data_bytes_total`` (x4)
``counters/port_{xmit,rcv}_packets``               ``nodewarden_ib_port_packets_total``
``counters/{unicast,multicast}_{xmit,rcv}_packets``  ``nodewarden_ib_port_{unicast,multicast}_packets_total``
``counters/port_xmit_wait``                        ``nodewarden_ib_port_xmit_wait_total``
``counters/<anything else>``                       ``nodewarden_ib_port_stat_total{counter}``
``hw_counters/<name>`` (names may hold commas)     ``nodewarden_ib_hw_stat_total{counter}``
=================================================  ==============================================

Saturation. The PMA PortCounters attribute (IBA vol. 1, 16.1.3.5; the widths in
``drivers/infiniband/core/sysfs.c``'s ``PORT_PMA_ATTR`` table) has narrow counters that stop at
their maximum instead of wrapping: ``link_downed`` and ``link_error_recovery`` 8 bits (255),
``symbol_error``, ``port_rcv_errors`` and the other error counters 16 bits (65535), the two
constraint-error counters 8 bits, ``local_link_integrity_errors`` and
``excessive_buffer_overrun_errors`` 4 bits (15), ``port_xmit_wait`` and, when the device lacks
the extended (64-bit) PortCountersExtended, the data and packet counters 32 bits. A counter at
its maximum can no longer show change: it is exported as read and flagged with
``nodewarden_ib_port_saturated{counter} 1`` (only saturated counters get that series). The
kernel publishes ``unicast_*``/``multicast_*`` only from the extended attribute, so their
presence says the data/packet counters are 64-bit.

A counter the driver cannot read prints ``N/A (no PMA)`` (iWARP ``i40iw``, Y-005): its series
is absent, never 0, and the file is counted in ``nodewarden_collector_unreadable_files
{collector="infiniband"}`` with any file whose read failed. Device-level ``hw_counters`` and
``hw_counters/lifespan`` (the counters' cache lifetime in ms, a setting, not a count) are not
exported.

The ports are read by :func:`nodewarden.sysfs.infiniband.read_devices` (the records the links
check judges too); ``link_layer`` of a port without that file is ``InfiniBand``
(:func:`~nodewarden.sysfs.infiniband.read_link_layer`; an unreadable one is labelled by
:func:`~nodewarden.sysfs.infiniband.link_layer`). Between two polls the collector emits
``ib_link_down`` when a port stops being active and ``ib_link_up`` when it is again (source
``sysfs``, device ``mlx5_0/1``), active as :func:`~nodewarden.sysfs.infiniband.port_active`
decides; :meth:`InfinibandCollector.ports` hands the latest records to the flash-cut detector.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Callable, Collection

from nodewarden import events as ev
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs, natural_key
from nodewarden.sysfs import infiniband
from nodewarden.sysfs.infiniband import Port, parse_ib_rate, read_devices

NAME = "infiniband"
UNREADABLE = "nodewarden_collector_unreadable_files"

# PMA PortCounters widths in bits (drivers/infiniband/core/sysfs.c PORT_PMA_ATTR, IBA 16.1.3.5).
PMA_WIDTHS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
    # 32 bits in PortCounters, 64 in PortCountersExtended (see extended_counters()).
    "port_xmit_data": 32,
    "port_rcv_data": 32,
    "port_xmit_packets": 32,
    "port_rcv_packets": 32,
}
WIDE = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
# Published only from PortCountersExtended: their presence means WIDE are 64-bit.
EXTENDED_ONLY = ("unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                 "multicast_rcv_packets")
ERROR_COUNTERS = ("symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
                  "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
                  "port_rcv_constraint_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "VL15_dropped")

HELP = {
    "nodewarden_ib_port_state": "IB port logical state as sysfs numbers it (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).",
    "nodewarden_ib_port_phys_state": "IB port physical state as sysfs numbers it (2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery).",
    "nodewarden_ib_port_rate_bytes_per_second": "IB port data rate (sysfs rate: active width x active speed).",
    "nodewarden_ib_port_info": "IB port identity; always 1.",
    "nodewarden_ib_link_downed_total": "PMA LinkDownedCounter: link error recovery failures that downed the link (8-bit, saturates at 255).",
    "nodewarden_ib_link_error_recovery_total": "PMA LinkErrorRecoveryCounter: successful link error recoveries (8-bit, saturates at 255).",
    "nodewarden_ib_port_errors_total": "PMA port error counters (saturate at their IBA width).",
    "nodewarden_ib_port_data_bytes_total": "PMA PortXmitData/PortRcvData in bytes (the counters count 4-byte words).",
    "nodewarden_ib_port_packets_total": "PMA PortXmitPkts/PortRcvPkts.",
    "nodewarden_ib_port_unicast_packets_total": "PMA unicast packets (PortCountersExtended).",
    "nodewarden_ib_port_multicast_packets_total": "PMA multicast packets (PortCountersExtended).",
    "nodewarden_ib_port_xmit_wait_total": "PMA PortXmitWait: ticks the port had data to send but no flow-control credits.",
    "nodewarden_ib_port_stat_total": "Other PMA counters under ports/*/counters.",
    "nodewarden_ib_hw_stat_total": "Driver hardware counters under ports/*/hw_counters.",
    "nodewarden_ib_port_saturated": "1 when a PMA counter sits at its maximum and can no longer show change.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll (N/A (no PMA), I/O errors).",
}

# counters/<file> -> (metric, extra labels, multiplier)
_DIRECT: dict[str, tuple[str, tuple[tuple[str, str], ...], int]] = {
    "link_downed": ("nodewarden_ib_link_downed_total", (), 1),
    "link_error_recovery": ("nodewarden_ib_link_error_recovery_total", (), 1),
    "port_xmit_data": ("nodewarden_ib_port_data_bytes_total", (("direction", "transmit"),), 4),
    "port_rcv_data": ("nodewarden_ib_port_data_bytes_total", (("direction", "receive"),), 4),
    "port_xmit_packets": ("nodewarden_ib_port_packets_total", (("direction", "transmit"),), 1),
    "port_rcv_packets": ("nodewarden_ib_port_packets_total", (("direction", "receive"),), 1),
    "unicast_xmit_packets": ("nodewarden_ib_port_unicast_packets_total", (("direction", "transmit"),), 1),
    "unicast_rcv_packets": ("nodewarden_ib_port_unicast_packets_total", (("direction", "receive"),), 1),
    "multicast_xmit_packets": ("nodewarden_ib_port_multicast_packets_total", (("direction", "transmit"),), 1),
    "multicast_rcv_packets": ("nodewarden_ib_port_multicast_packets_total", (("direction", "receive"),), 1),
    "port_xmit_wait": ("nodewarden_ib_port_xmit_wait_total", (), 1),
}


# ---- pure parsers ------------------------------------------------------------------------------

def extended_counters(names: Collection[str]) -> bool:
    """True when ``counters/`` (its counter names) comes from PortCountersExtended (64-bit
    data/packet counters)."""
    return any(n in names for n in EXTENDED_ONLY)


def saturation_max(counter: str, extended: bool) -> int | None:
    """The value at which a PMA counter stops counting, or None for 64-bit/unknown counters."""
    bits = PMA_WIDTHS.get(counter)
    if bits is None or (extended and counter in WIDE):
        return None
    return (1 << bits) - 1


def rate_bytes_per_second(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 5e10 (bytes/s); unparsable -> None."""
    gbit = parse_ib_rate(text).gbit
    return gbit * 1e9 / 8 if gbit is not None else None


# ---- collector ---------------------------------------------------------------------------------

class InfinibandCollector:
    """Polls ``<sysfs>/class/infiniband``. Absent directory: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys", clock: Callable[[], float] = time.time) -> None:
        self.sysfs = Path(sysfs)
        self.clock = clock
        self._static = StaticAttrs()  # link layer, counter names, HCA identity: read once per directory
        self._ports: dict[str, Port] = {}
        self._last_t: float | None = None

    def ports(self) -> list[Port]:
        """The latest port records (empty before the first :meth:`collect`)."""
        return list(self._ports.values())

    def collect(self) -> Snapshot:
        snap = Snapshot()
        if not infiniband.present(self.sysfs):
            self._ports = {}
            return snap
        reader = AttrReader()
        now = self.clock()
        current: dict[str, Port] = {}
        for dev in read_devices(self.sysfs, reader, self._static):
            for p in dev.ports:
                _port_samples(snap, p, dev.board_id, dev.fw_ver)
                current[p.key] = p
        snap.add(UNREADABLE, {"collector": NAME}, reader.unreadable, GAUGE, HELP[UNREADABLE])
        snap.events.extend(transitions(self._ports, current, now, self._last_t))
        self._ports, self._last_t = current, now
        return snap


def _port_samples(snap: Snapshot, p: Port, board: str | None, fw: str | None) -> None:
    """One port record's series."""
    labels = (("device", p.device), ("port", str(p.port)))
    if p.state is not None:
        snap.add("nodewarden_ib_port_state", labels, p.state, GAUGE, HELP["nodewarden_ib_port_state"])
    if p.phys_state is not None:
        snap.add("nodewarden_ib_port_phys_state", labels, p.phys_state, GAUGE, HELP["nodewarden_ib_port_phys_state"])
    rate = rate_bytes_per_second(p.rate)
    if rate is not None:
        snap.add("nodewarden_ib_port_rate_bytes_per_second", labels, rate, GAUGE,
                 HELP["nodewarden_ib_port_rate_bytes_per_second"])
    info = labels + (("link_layer", infiniband.link_layer(p)), ("board_id", board or ""), ("fw_ver", fw or ""))
    snap.add("nodewarden_ib_port_info", info, 1, GAUGE, HELP["nodewarden_ib_port_info"])
    extended = extended_counters(p.counters)
    for counter, value in p.counters.items():
        if value is None:
            continue
        metric, extra, mult = _DIRECT.get(counter, (None, (), 1))
        if metric is None:
            if counter in ERROR_COUNTERS:
                metric, extra = "nodewarden_ib_port_errors_total", (("counter", counter),)
            else:
                metric, extra = "nodewarden_ib_port_stat_total", (("counter", counter),)
        snap.add(metric, labels + extra, value * mult, COUNTER, HELP[metric])
        top = saturation_max(counter, extended)
        if top is not None and value >= top:
            snap.add("nodewarden_ib_port_saturated", labels + (("counter", counter),), 1, GAUGE,
                     HELP["nodewarden_ib_port_saturated"])
    for counter, value in p.hw_counters.items():
        if value is not None:
            snap.add("nodewarden_ib_hw_stat_total", labels + (("counter", counter),), value, COUNTER,
                     HELP["nodewarden_ib_hw_stat_total"])


# ---- events ------------------------------------------------------------------------------------

def transitions(before: dict[str, Port], after: dict[str, Port], now: float,
                since: float | None = None) -> list[ev.FaultEvent]:
    """``ib_link_down`` for each port active in ``before`` and not in ``after``, ``ib_link_up``
    for the reverse. Ports seen only once (first poll, hot-plug) make no event; a port whose
    state could not be read (``active`` None) is not judged. ``since``: the time of ``before``
    (``attrs.since``: the change happened after it)."""
    out = []
    for key in sorted(after, key=natural_key):
        new, old = after[key], before.get(key)
        if old is None or old.active is None or new.active is None or old.active == new.active:
            continue
        kind = ev.IB_LINK_UP if new.active else ev.IB_LINK_DOWN
        out.append(port_event(kind, new, old, now, since))
    return out


def port_event(kind: str, new: Port, old: Port, now: float,
               since: float | None = None) -> ev.FaultEvent:
    """The ``ib_link_down``/``ib_link_up`` event (``kind``) of port ``new`` after ``old`` at Unix
    time ``now`` (seconds), read from sysfs."""
    state = new.state_name or str(new.state)
    phys = new.phys_state_name or str(new.phys_state)
    msg = (f"{new.device}: Port: {new.port} state {old.state_name or old.state} -> {state}, "
           f"phys_state {phys} (sysfs)")
    t = dt.datetime.fromtimestamp(now, tz=dt.timezone.utc)
    return ev.FaultEvent(
        kind=kind, message=msg, raw=msg, time=t, time_kind=ev.TIME_WALL, raw_time=f"{now:.6f}",
        source="sysfs", device=new.key,
        attrs={"rdma_device": new.device, "port": new.port, "state": state, "state_code": new.state,
               "phys_state": phys, "phys_state_code": new.phys_state, "link_downed": new.link_downed,
               "previous_state": old.state_name or str(old.state), "link_layer": infiniband.link_layer(new),
               "since": since})

"""IB flash cuts: a port that leaves ACTIVE/LinkUp and is back within ``max_seconds``.

DESIGN.md "IB flash cut". Pure: no I/O, the caller passes the time. Three kinds of evidence,
each about one port (``device``, ``port``):

``log``
    kernel-log ``ib_link_down``/``ib_link_up`` events (``mlx5_0: Port: 1 Link DOWN``/``ACTIVE``,
    Linux 6.14+, I-005), ``ib_port_state`` INIT/ARMED as "not ACTIVE", and the RoCE netdev's
    ``net_link_down``/``net_link_up`` (``enp83s0f0np0: Link down``) once :meth:`map_netdev`
    tied the netdev to its RDMA port (unmapped netdevs count under ``(netdev, None)``). The
    event's own ``time`` is used when it has one.
``poll``
    :meth:`observe_port` with whether a sysfs poll saw the port active (the ``active`` of the
    caller's port record, :func:`nodewarden.sysfs.infiniband.port_active`, e.g. from
    ``InfinibandCollector.ports()``): a poll that sees the port not active after one that saw
    it active opens a drop, the next poll that sees it active closes it. Polls can miss a drop
    shorter than their interval.
``link_downed`` / ``carrier_changes``
    a rise of the PMA ``link_downed`` counter between two polls that both saw ACTIVE: one drop
    per increment, its duration unknown (``duration_s`` None). The netclass collector's flap
    events (``attrs.flap``, a ``carrier_changes`` rise of 2 between two up polls) count the same
    way. A saturated counter (255) cannot rise, so it never makes a drop; one that falls
    (reset, driver reload) only moves the baseline.

A drop back within ``max_seconds`` is an ``ib_flash_cut`` event, a longer one an
``ib_link_outage`` event (emitted when the port comes back); both carry ``duration_s``,
``detected_by`` (the evidence that saw it first) and ``seen_by`` (all that saw it).

Counting a drop once. Each recorded drop keeps the window its start can lie in: ``[lo, start]``
(a log line gives the exact time; a poll only says "after the last ACTIVE poll, by this one")
and its end. Evidence of another kind about the same port is the *same* drop when its time
falls within that drop's ``[lo - skew, end + skew]`` (for counter increments: when the window
between the two polls meets the drop's start window), and each drop absorbs at most one piece
of evidence of each kind. So the log's down/up pair and a poll that saw the port DOWN are one
cut; a ``link_downed`` +1 between two ACTIVE polls around a drop the log already reported adds
nothing, while +2 adds the one the log did not see; late log lines about a drop a poll or a
counter already counted add nothing. Two drops that no evidence can tell apart count once:
the detector undercounts rather than double counts. ``skew_seconds`` (default 1) covers the
gap between the kernel's timestamps and the poller's clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from nodewarden import events as ev

IB_LINK_OUTAGE = "ib_link_outage"  # a drop longer than max_seconds (to be listed in events.KINDS)
LOG, POLL, LINK_DOWNED, CARRIER_CHANGES = "log", "poll", "link_downed", "carrier_changes"
_NOT_ACTIVE_STATES = ("DOWN", "INIT", "ARMED")

Key = tuple[str, Any]


@dataclasses.dataclass
class _Drop:
    lo: float                 # earliest time the drop can have begun
    start: float              # latest: the first evidence of it
    end: float | None         # when it was seen back up
    detected_by: str
    source: str               # FaultEvent.source of the first evidence
    seen_by: set[str]
    duration_known: bool = True


@dataclasses.dataclass
class _Port:
    open: _Drop | None = None
    recent: list[_Drop] = dataclasses.field(default_factory=list)
    poll_up: bool | None = None
    poll_t: float | None = None
    poll_link_downed: int | None = None
    flash_cuts: int = 0
    outages: int = 0


class FlashCutDetector:
    """Turns port evidence into ``ib_flash_cut``/``ib_link_outage`` events and counts them."""

    def __init__(self, max_seconds: float = 60.0, skew_seconds: float = 1.0, memory_seconds: float = 3600.0) -> None:
        self.max_seconds = float(max_seconds)
        self.skew = float(skew_seconds)
        self.memory = max(float(memory_seconds), 2 * self.max_seconds)
        self._ports: dict[Key, _Port] = {}
        self._netdevs: dict[str, Key] = {}

    # ---- inputs ------------------------------------------------------------------------------

    def map_netdev(self, netdev: str, device: str, port: int) -> None:
        """Count ``net_link_*`` events of ``netdev`` as evidence about RDMA port device/port."""
        self._netdevs[netdev] = (device, int(port))

    def observe_event(self, e: ev.FaultEvent, now: float) -> list[ev.FaultEvent]:
        """Feed one link event (log or sysfs); returns the cut/outage events it completes."""
        if e.kind in (ev.IB_LINK_DOWN, ev.NET_LINK_DOWN):
            down = True
        elif e.kind in (ev.IB_LINK_UP, ev.NET_LINK_UP):
            down = False
        elif e.kind == ev.IB_PORT_STATE and str(e.attrs.get("state", "")).upper() in _NOT_ACTIVE_STATES:
            down = True
        else:
            return []
        key = self._key(e)
        if key is None:
            return []
        t = e.time.timestamp() if e.time is not None else now
        kind = POLL if e.source == "sysfs" else LOG
        if e.attrs.get("flap"):  # a carrier_changes rise between two up polls (netclass)
            if not down:
                return []
            since = e.attrs.get("since")
            return self._counted(key, float(since) if since is not None else t - self.skew, t, 1,
                                 str(e.attrs.get("detected_by") or CARRIER_CHANGES))
        if down:
            since = e.attrs.get("since")  # a poll's event: the drop began after the previous poll
            self._down(key, min(t, float(since)) if since is not None else t, t, kind, e.source)
            return []
        return self._up(key, t, kind)

    def observe_port(self, device: str, port: int, active: bool | None, link_downed: int | None,
                     now: float) -> list[ev.FaultEvent]:
        """Feed one poll of one port: ``active`` as the poll's record says (None: its state could
        not be read, the poll is not judged), ``link_downed`` the PMA counter (None: unreadable),
        ``now`` Unix time in seconds. Returns the cut/outage events it completes."""
        key = (device, int(port))
        up = active
        if up is None:
            return []
        p = self._port(key)
        out: list[ev.FaultEvent] = []
        if not up:
            if p.open is not None:
                p.open.seen_by.add(POLL)
                if p.poll_up and p.poll_t is not None:  # it began after the last ACTIVE poll
                    p.open.lo = min(p.open.lo, p.poll_t)
            elif p.poll_up:
                self._down(key, p.poll_t if p.poll_t is not None else now, now, POLL, "sysfs")
        elif p.open is not None:
            out += self._up(key, now, POLL)
        elif (p.poll_up and link_downed is not None and p.poll_link_downed is not None
              and link_downed > p.poll_link_downed and p.poll_t is not None):
            out += self._counted(key, p.poll_t, now, link_downed - p.poll_link_downed, LINK_DOWNED)
        p.poll_up, p.poll_t, p.poll_link_downed = up, now, link_downed
        self._forget(p, now)
        return out

    # ---- outputs -----------------------------------------------------------------------------

    def counts(self) -> dict[Key, dict[str, int]]:
        """``{(device, port): {"flash_cuts": n, "outages": n}}`` since this detector started, for
        every port it has heard of (zeros included, so that counters exist before the first cut)."""
        return {k: {"flash_cuts": p.flash_cuts, "outages": p.outages} for k, p in self._ports.items()}

    # ---- internals ---------------------------------------------------------------------------

    def _key(self, e: ev.FaultEvent) -> Key | None:
        # Events of journals and frames: a device or port that is no string or number (None, a
        # NaN, a list) names no port.
        a = e.attrs if isinstance(e.attrs, dict) else {}
        device = e.device if isinstance(e.device, str) else ""
        if e.kind in (ev.NET_LINK_DOWN, ev.NET_LINK_UP):
            netdev = a.get("netdev") if isinstance(a.get("netdev"), str) else device
            return self._netdevs.get(netdev, (netdev, None)) if netdev else None
        rdma, port_attr = a.get("rdma_device"), a.get("port")
        if isinstance(rdma, str) and rdma and (isinstance(port_attr, int) and not isinstance(port_attr, bool)
                                               or isinstance(port_attr, str) and port_attr.isascii()
                                               and port_attr.isdigit()):
            return rdma, int(port_attr)
        dev, sep, port = device.rpartition("/")
        return (dev, int(port)) if sep and dev and port.isascii() and port.isdigit() else None

    def _port(self, key: Key) -> _Port:
        p = self._ports.get(key)
        if p is None:
            p = self._ports[key] = _Port()
        return p

    def _down(self, key: Key, lo: float, t: float, kind: str, source: str) -> None:
        p = self._port(key)
        if p.open is not None:
            p.open.lo, p.open.start = min(p.open.lo, lo), min(p.open.start, t)
            p.open.seen_by.add(kind)
            return
        if kind == LOG:
            # A late log line about a drop a poll or a counter already counted.
            for d in p.recent:
                if LOG not in d.seen_by and _meets(lo, t, d.lo - self.skew, (d.end or d.start) + self.skew):
                    d.seen_by.add(LOG)
                    return
        p.open = _Drop(lo, t, None, kind, source, {kind})

    def _up(self, key: Key, t: float, kind: str) -> list[ev.FaultEvent]:
        p = self._port(key)
        d = p.open
        if d is None:
            return []  # up without a known drop: first sight, or the end of an absorbed one
        p.open = None
        d.end = max(t, d.start)
        d.seen_by.add(kind)
        if d.detected_by == POLL:
            # A drop only the polls saw: the log may have counted it already (its lines came first).
            for r in p.recent:
                if POLL not in r.seen_by and _meets(d.lo, d.start, r.lo - self.skew, (r.end or r.start) + self.skew):
                    r.seen_by.add(POLL)
                    return []
        return [self._record(key, p, d)]

    def _counted(self, key: Key, since: float, now: float, n: int, kind: str) -> list[ev.FaultEvent]:
        """``n`` drops known only from a counter's rise between ``since`` and ``now``."""
        p = self._port(key)
        out = []
        for _ in range(n):
            known = next((r for r in p.recent if kind not in r.seen_by
                          and _meets(since, now, r.lo - self.skew, r.start + self.skew)), None)
            if known is not None:
                known.seen_by.add(kind)
                continue
            out.append(self._record(key, p, _Drop(since, now, now, kind, "sysfs", {kind}, duration_known=False)))
        return out

    def _record(self, key: Key, p: _Port, d: _Drop) -> ev.FaultEvent:
        self._forget(p, d.end or d.start)
        p.recent.append(d)
        duration = (d.end or d.start) - d.start if d.duration_known else None
        cut = duration is None or duration <= self.max_seconds
        if cut:
            p.flash_cuts += 1
        else:
            p.outages += 1
        kind = ev.IB_FLASH_CUT if cut else IB_LINK_OUTAGE
        device, port = key
        name = f"{device}/{port}" if port is not None else device
        how = f"{duration:.3f} s" if duration is not None else "duration unknown"
        msg = f"{name}: {'flash cut' if cut else 'link outage'} ({how}, detected by {d.detected_by})"
        attrs: dict[str, Any] = {"rdma_device": device, "port": port, "duration_s": duration,
                                 "detected_by": d.detected_by, "seen_by": sorted(d.seen_by),
                                 "down_at": d.start, "up_at": d.end, "max_seconds": self.max_seconds}
        if not d.duration_known:
            attrs["window_start"] = d.lo
        t = d.start
        return ev.FaultEvent(kind=kind, message=msg, raw=msg, time=dt.datetime.fromtimestamp(t, tz=dt.timezone.utc),
                             time_kind=ev.TIME_WALL, raw_time=f"{t:.6f}", source=d.source, device=name,
                             category="ib", attrs=attrs)

    def _forget(self, p: _Port, now: float) -> None:
        horizon = now - self.memory
        p.recent = [d for d in p.recent if (d.end or d.start) >= horizon][-64:]


def _meets(a0: float, a1: float, b0: float, b1: float) -> bool:
    """Do the closed intervals [a0, a1] and [b0, b1] meet?"""
    return a0 <= b1 and b0 <= a1

"""The flash-cut detector (DESIGN.md "IB flash cut"): table-driven sequences of kernel-log
events and sysfs polls of one port, the I-005 flap sequence through the real kernel-log parser,
and the infiniband collector's readings of a fixture tree played through a flap."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from nodewarden import events as ev
from nodewarden.parsing.flashcut import IB_LINK_OUTAGE, FlashCutDetector
from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
T0 = 1_800_000_000.0
DEV, PORT = "mlx5_3", 1
# A poll's port, as its record's ``active`` says (nodewarden.sysfs.infiniband.port_active): up,
# not up (DOWN/Polling, INIT/LinkUp: no subnet manager), or unreadable (not judged).
UP, NOT_UP, UNREADABLE = True, False, None
CUT, OUT = ev.IB_FLASH_CUT, IB_LINK_OUTAGE


def log_event(state: str, t: float | None, source: str = "kmsg") -> ev.FaultEvent:
    """What the kernel-log parser makes of ``mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link <state>``."""
    kind = {"DOWN": ev.IB_LINK_DOWN, "ACTIVE": ev.IB_LINK_UP}.get(state, ev.IB_PORT_STATE)
    msg = f"mlx5_core 0000:53:00.0 {DEV}: Port: {PORT} Link {state}"
    return ev.FaultEvent(kind=kind, message=msg, raw=msg, source=source, device=f"{DEV}/{PORT}",
                         time=dt.datetime.fromtimestamp(T0 + t, tz=dt.timezone.utc) if t is not None else None,
                         time_kind=ev.TIME_WALL if t is not None else ev.TIME_MONO,
                         attrs={"rdma_device": DEV, "port": PORT, "state": state, "pci_bus_id": "0000:53:00.0"})


def run(steps, max_seconds: float = 60.0) -> tuple[list[ev.FaultEvent], FlashCutDetector]:
    """Steps: ("log", "DOWN"|"ACTIVE"|"INIT", t[, now]) or ("poll", active, link_downed, t);
    times in seconds after T0."""
    d = FlashCutDetector(max_seconds=max_seconds)
    out: list[ev.FaultEvent] = []
    for step in steps:
        if step[0] == "log":
            _, state, t, *rest = step
            now = rest[0] if rest else (t if t is not None else 0.0)
            out += d.observe_event(log_event(state, t), T0 + now)
        else:
            _, active, link_downed, t = step
            out += d.observe_port(DEV, PORT, active, link_downed, T0 + t)
    return out, d


def summary(events: list[ev.FaultEvent]) -> list[tuple[str, float | None, str]]:
    return [(e.kind, None if e.attrs["duration_s"] is None else round(e.attrs["duration_s"], 3),
             e.attrs["detected_by"]) for e in events]


CASES = {
    "log down/up 5 s: a cut": (
        [("log", "DOWN", 100), ("log", "ACTIVE", 105)],
        [(CUT, 5.0, "log")]),
    "log down/up 75 s: an outage": (
        [("log", "DOWN", 100), ("log", "ACTIVE", 175)],
        [(OUT, 75.0, "log")]),
    "poll down/up 5 s apart: a cut": (
        [("poll", UP, 0, 0), ("poll", NOT_UP, 1, 10), ("poll", UP, 1, 15)],
        [(CUT, 5.0, "poll")]),
    "poll down 75 s: an outage": (
        [("poll", UP, 0, 0), ("poll", NOT_UP, 1, 10), ("poll", NOT_UP, 1, 40),
         ("poll", NOT_UP, 1, 70), ("poll", UP, 1, 85)],
        [(OUT, 75.0, "poll")]),
    "link_downed 3 -> 5 between two ACTIVE polls: two cuts": (
        [("poll", UP, 3, 0), ("poll", UP, 5, 10)],
        [(CUT, None, "link_downed"), (CUT, None, "link_downed")]),
    "log down/up, the polls miss it but link_downed rises: one cut": (
        [("poll", UP, 0, 100), ("log", "DOWN", 103), ("log", "ACTIVE", 104),
         ("poll", UP, 1, 110)],
        [(CUT, 1.0, "log")]),
    "log and poll both see it: one cut": (
        [("poll", UP, 0, 100), ("log", "DOWN", 101), ("poll", NOT_UP, 1, 102),
         ("log", "ACTIVE", 104), ("poll", UP, 1, 110)],
        [(CUT, 3.0, "log")]),
    "poll first, log lines late: one cut": (
        [("poll", UP, 0, 100), ("poll", NOT_UP, 1, 102), ("poll", UP, 1, 110),
         ("log", "DOWN", 101, 111), ("log", "ACTIVE", 104, 111)],
        [(CUT, 8.0, "poll")]),
    "poll closes a drop the log opened (its up line lost)": (
        [("poll", UP, 0, 100), ("log", "DOWN", 101), ("poll", UP, 1, 110)],
        [(CUT, 9.0, "log")]),
    "log saw one of two link_downed increments: the other is a cut too": (
        [("poll", UP, 0, 100), ("log", "DOWN", 103), ("log", "ACTIVE", 104),
         ("poll", UP, 2, 110)],
        [(CUT, 1.0, "log"), (CUT, None, "link_downed")]),
    "link_downed cut, then the late log lines about it: one cut": (
        [("poll", UP, 0, 100), ("poll", UP, 1, 110),
         ("log", "DOWN", 105, 111), ("log", "ACTIVE", 106, 111)],
        [(CUT, None, "link_downed")]),
    "saturated link_downed 255 stays 255: nothing": (
        [("poll", UP, 255, 0), ("poll", UP, 255, 10), ("poll", UP, 255, 20)],
        []),
    "link_downed reset 255 -> 0, then 0 -> 1: one cut": (
        [("poll", UP, 255, 0), ("poll", UP, 0, 10), ("poll", UP, 1, 20)],
        [(CUT, None, "link_downed")]),
    "link_downed rises across a DOWN poll: counted by the state change only": (
        [("poll", UP, 0, 0), ("poll", NOT_UP, 1, 10), ("poll", UP, 2, 20)],
        [(CUT, 10.0, "poll")]),
    "first poll sees DOWN (agent start): never saw it leave ACTIVE": (
        [("poll", NOT_UP, 0, 0), ("poll", UP, 0, 10)],
        []),
    "INIT (no subnet manager) is not ACTIVE": (
        [("log", "INIT", 100), ("log", "ACTIVE", 102)],
        [(CUT, 2.0, "log")]),
    "two separate cuts": (
        [("log", "DOWN", 100), ("log", "ACTIVE", 101), ("log", "DOWN", 200), ("log", "ACTIVE", 202.5)],
        [(CUT, 1.0, "log"), (CUT, 2.5, "log")]),
    "up without a down: nothing": (
        [("log", "ACTIVE", 100), ("poll", UP, 0, 110)],
        []),
    "a log event without a time uses the caller's clock": (
        [("log", "DOWN", None, 100), ("log", "ACTIVE", None, 104)],
        [(CUT, 4.0, "log")]),
    "unknown state is not judged": (
        [("poll", UP, 0, 0), ("poll", UNREADABLE, None, 10), ("poll", UP, 0, 20)],
        []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sequences(name):
    steps, want = CASES[name]
    events, d = run(steps)
    assert summary(events) == want
    cuts = sum(1 for k, *_ in want if k == CUT)
    outages = sum(1 for k, *_ in want if k == OUT)
    assert d.counts().get((DEV, PORT), {"flash_cuts": 0, "outages": 0}) == {"flash_cuts": cuts, "outages": outages}
    for e in events:
        assert e.device == f"{DEV}/{PORT}" and e.attrs["rdma_device"] == DEV and e.attrs["port"] == PORT


def test_event_fields():
    events, _ = run(CASES["log and poll both see it: one cut"][0])
    (e,) = events
    assert e.kind == ev.IB_FLASH_CUT and e.source == "kmsg" and e.time.timestamp() == T0 + 101
    assert e.attrs["seen_by"] == ["log", "poll"] and e.attrs["down_at"] == T0 + 101 and e.attrs["up_at"] == T0 + 104
    events, _ = run(CASES["link_downed 3 -> 5 between two ACTIVE polls: two cuts"][0])
    assert all(x.source == "sysfs" and x.attrs["window_start"] == T0 and x.attrs["up_at"] == T0 + 10 for x in events)


def test_max_seconds_parameter():
    events, d = run([("log", "DOWN", 0), ("log", "ACTIVE", 15)], max_seconds=10)
    assert summary(events) == [(OUT, 15.0, "log")]
    events, _ = run([("log", "DOWN", 0), ("log", "ACTIVE", 60)])
    assert summary(events) == [(CUT, 60.0, "log")]  # "within" max_seconds: the bound is a cut


def test_counts_list_every_port_heard_of():
    d = FlashCutDetector()
    d.observe_port("mlx5_0", 1, UP, 0, T0)
    d.observe_port("mlx5_1", 1, UP, 255, T0)
    d.observe_port("mlx5_1", 1, UP, 255, T0 + 10)
    assert d.counts() == {("mlx5_0", 1): {"flash_cuts": 0, "outages": 0}, ("mlx5_1", 1): {"flash_cuts": 0, "outages": 0}}


I005 = """\
[ 4441.769587] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE
[ 4441.852238] bond0: (slave enp83s0f0np0): link status definitely up, 100000 Mbps full duplex
[ 4443.968257] mlx5_core 0000:53:00.0 enp83s0f0np0: Link down
[ 4443.974372] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN
[ 4443.975417] bond0: (slave enp83s0f0np0): speed changed to 0 on port 2
[ 4444.035309] bond0: (slave enp83s0f0np0): link status definitely down, disabling slave
[ 4450.318539] mlx5_core 0000:53:00.0 enp83s0f0np0: Link up
[ 4450.320122] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE
""".splitlines()


def parsed_i005() -> list[ev.FaultEvent]:
    boot = dt.datetime.fromtimestamp(T0, tz=dt.timezone.utc)
    return list(KernelLogParser(source="kmsg").feed_lines(I005, TimeContext.make(boot_time=boot)))


def test_i005_one_port_three_subsystems():
    """I-005: the netdev and the RDMA port report one drop of 6.35 s: once mapped, one cut."""
    d = FlashCutDetector()
    d.map_netdev("enp83s0f0np0", "mlx5_3", 1)
    out = []
    for e in parsed_i005():
        out += d.observe_event(e, e.time.timestamp())
    (cut,) = out
    assert cut.kind == ev.IB_FLASH_CUT and cut.device == "mlx5_3/1"
    assert cut.attrs["duration_s"] == pytest.approx(4450.318539 - 4443.968257, abs=1e-5)
    assert cut.attrs["seen_by"] == ["log"] and d.counts() == {("mlx5_3", 1): {"flash_cuts": 1, "outages": 0}}


def test_i005_unmapped_netdev_counts_apart():
    d = FlashCutDetector()
    out = []
    for e in parsed_i005():
        out += d.observe_event(e, e.time.timestamp())
    assert sorted(e.device for e in out) == ["enp83s0f0np0", "mlx5_3/1"]
    assert d.counts()[("enp83s0f0np0", None)] == {"flash_cuts": 1, "outages": 0}


def test_netclass_flap_events():
    """carrier_changes +4 between two up polls: the netclass collector's two down/up pairs."""
    d = FlashCutDetector()
    d.map_netdev("enp193s0f0np0", "mlx5_bond_0", 1)
    out = []
    for _ in range(2):
        for kind in (ev.NET_LINK_DOWN, ev.NET_LINK_UP):
            e = ev.FaultEvent(kind=kind, message="", raw="", source="sysfs", device="enp193s0f0np0",
                              time=dt.datetime.fromtimestamp(T0 + 30, tz=dt.timezone.utc),
                              attrs={"netdev": "enp193s0f0np0", "flap": True, "detected_by": "carrier_changes",
                                     "since": T0 + 20})
            out += d.observe_event(e, T0 + 30)
    assert summary(out) == [(CUT, None, "carrier_changes")] * 2
    assert d.counts()[("mlx5_bond_0", 1)] == {"flash_cuts": 2, "outages": 0}


def test_collector_readings_through_a_flap(tmp_path: Path):
    """The infiniband collector's ports() on a copy of the H100 tree, one port dropped for two
    polls (20 s: a cut), another whose link_downed rose while both polls saw it ACTIVE."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "h100-hgx-ndr", root, symlinks=True)
    t = [T0]
    c = InfinibandCollector(root, clock=lambda: t[0])
    d = FlashCutDetector()
    out = []

    def poll(now: float) -> None:
        t[0] = now
        snap = c.collect()
        for e in snap.events:  # the collector's own transitions: the same drops, seen by the poll
            out.extend(d.observe_event(e, now))
        for r in c.ports():
            out.extend(d.observe_port(r.device, r.port, r.active, r.link_downed, now))

    poll(T0)
    port = root / "class/infiniband/mlx5_2/ports/1"
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("2: Polling\n")
    (port / "counters/link_downed").write_text("1\n")
    (root / "class/infiniband/mlx5_6/ports/1/counters/link_downed").write_text("1\n")
    (root / "class/infiniband/mlx5_1/ports/1/counters/link_downed").write_text("255\n")  # saturated, unchanged
    poll(T0 + 10)
    poll(T0 + 20)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    poll(T0 + 30)
    assert sorted((e.device, e.kind, e.attrs["detected_by"]) for e in out) == [
        ("mlx5_2/1", ev.IB_FLASH_CUT, "poll"), ("mlx5_6/1", ev.IB_FLASH_CUT, "link_downed")]
    cut = next(e for e in out if e.device == "mlx5_2/1")
    assert cut.attrs["duration_s"] == 20.0 and cut.attrs["seen_by"] == ["poll"]
    # The kernel-log lines about that drop arrive late (journal lag): the same cut, not another.
    for state, at in (("DOWN", 5), ("ACTIVE", 25)):
        msg = f"mlx5_core 0000:3c:00.0 mlx5_2: Port: 1 Link {state}"
        late = ev.FaultEvent(kind=ev.IB_LINK_DOWN if state == "DOWN" else ev.IB_LINK_UP, message=msg, raw=msg,
                             source="kmsg", device="mlx5_2/1", time=dt.datetime.fromtimestamp(T0 + at, tz=dt.timezone.utc),
                             attrs={"rdma_device": "mlx5_2", "port": 1, "state": state})
        assert d.observe_event(late, T0 + 31) == []
    counts = d.counts()
    assert counts[("mlx5_2", 1)] == {"flash_cuts": 1, "outages": 0}
    assert counts[("mlx5_1", 1)] == {"flash_cuts": 0, "outages": 0}
    assert len(counts) == 9


def test_detector_takes_active_from_the_record(tmp_path: Path):
    """Divergence: the detector had its own "active" rule (numbers only), so a port whose state
    file prints ``ACTIVE`` without a number was never up for it; it now takes the record's
    ``active`` (nodewarden.sysfs.infiniband.port_active), the links check's rule too."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "h100-hgx-ndr", root, symlinks=True)
    t = [T0]
    c = InfinibandCollector(root, clock=lambda: t[0])
    d = FlashCutDetector()
    state = root / "class/infiniband/mlx5_5/ports/1/state"
    out = []
    for at, text in ((0, "ACTIVE"), (10, "DOWN"), (15, "ACTIVE")):
        state.write_text(text + "\n")
        t[0] = T0 + at
        c.collect()
        for r in c.ports():
            out.extend(d.observe_port(r.device, r.port, r.active, r.link_downed, t[0]))
    assert [(e.device, e.kind, e.attrs["duration_s"]) for e in out] == [("mlx5_5/1", ev.IB_FLASH_CUT, 5.0)]


@pytest.mark.parametrize("device, attrs", [
    (float("nan"), {}),                              # a journal's null device, through a pandas frame
    (None, {"rdma_device": "mlx5_0", "port": "x"}),  # a port that is no number
    ("mlx5_0/²", {}),                                # a digit int() refuses
    (None, {"rdma_device": ["mlx5_0"], "port": 1}),
])
def test_an_event_naming_no_port_is_left_out(device, attrs) -> None:
    """Bad input loses nothing else: the event names no port, the detector passes over it."""
    det = FlashCutDetector(max_seconds=60.0)
    e = ev.FaultEvent(kind=ev.IB_LINK_DOWN, message="m", raw="r", device=device, attrs=attrs)
    assert det.observe_event(e, 0.0) == []

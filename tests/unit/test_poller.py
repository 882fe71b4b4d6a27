"""The polled collectors' isolation, with real threads and real collectors that hang, raise
and recover, scraped over real HTTP, and a hung one that does not hold the process's exit;
their events counted and journaled; the flash-cut detector fed from port polls and from the
kernel log, its counts persisted; what a collector declares (ports, AER candidates among its
events) deciding what the agent does with it, never its name; the collectors built from the
registry."""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewarden import collectors as registry
from nodewarden import events as ev
from nodewarden.agent import exporter as ex
from nodewarden.agent import poller as pl
from nodewarden.agent import state as st
from nodewarden.agent.aer import AerReconciler
from nodewarden.agent.exporter import Counters, make_registry
from nodewarden.agent.follower import KmsgFollower
from nodewarden.agent.poller import EventSink, FlashCuts, Poller
from nodewarden.agent.server import AgentHTTPServer
from nodewarden.collectors.base import COUNTER, Snapshot
from nodewarden.events import FaultEvent
from nodewarden.parsing.flashcut import FlashCutDetector

T0 = 1_795_000_000.0  # a fixed Unix time for the fake clocks


def wait_for(what: str, check: Callable[[], object], deadline_s: float = 5.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------------------------
# collectors that misbehave for real

HANG_S = 30.0  # how long a Slow collector's hung call blocks unless released
WALL_S = HANG_S / 2  # a wall bound that tells "did not wait for the hung call" apart, however loaded


class Slow:
    """collect() sleeps HANG_S (until released) from the ``hang_from``-th call on; ``returned``
    counts the calls that have returned, so a test can tell that something did not wait for one."""

    name = "slow"

    def __init__(self, hang_from: int = 2) -> None:
        self.hang_from = hang_from
        self.calls = 0
        self.returned = 0
        self.release = threading.Event()

    def collect(self) -> Snapshot:
        self.calls += 1
        if self.calls >= self.hang_from:
            self.release.wait(HANG_S)
        self.returned += 1
        snap = Snapshot()
        snap.add("nodewarden_test_slow_calls", {"device": "gpu0"}, self.calls)
        return snap


class Flaky:
    """Raises while ``fail`` is set, like a sysfs read that gets EIO."""

    name = "flaky"

    def __init__(self) -> None:
        self.fail = False
        self.calls = 0

    def collect(self) -> Snapshot:
        self.calls += 1
        if self.fail:
            raise OSError(5, "Input/output error")
        snap = Snapshot()
        snap.add("nodewarden_test_flaky_reads_total", {"device": "mc0"}, 100 + self.calls, COUNTER, "reads")
        return snap


class Steady:
    name = "steady"

    def collect(self) -> Snapshot:
        snap = Snapshot()
        snap.add("nodewarden_test_steady", {}, 1)
        return snap


@pytest.fixture
def served() -> Iterator[Callable[[Poller, Counters], Callable[[], tuple[float, dict]]]]:
    """Serve a poller's registry over HTTP; returns a scrape function: (seconds, samples)."""
    servers: list[AgentHTTPServer] = []

    def serve(poller: Poller, counters: Counters) -> Callable[[], tuple[float, dict]]:
        srv = AgentHTTPServer(("127.0.0.1", 0), make_registry(counters.snapshot, poller.samples),
                              lambda: {"ok": True})
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"

        def scrape() -> tuple[float, dict]:
            t0 = time.monotonic()
            with urllib.request.urlopen(url, timeout=WALL_S) as r:
                text = r.read().decode()
            took = time.monotonic() - t0
            out = {}
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    out[(s.name, frozenset(s.labels.items()))] = s.value
            return took, out
        return scrape

    yield serve
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def k(name: str, **labels: str) -> tuple[str, frozenset]:
    return (name, frozenset(labels.items()))


# ---------------------------------------------------------------------------------------------
# isolation

def test_a_hanging_collector_is_abandoned_and_the_scrape_answers_at_once(served) -> None:
    slow, steady = Slow(hang_from=2), Steady()
    counters = Counters()
    poller = Poller([slow, steady], counters, interval=0.1, timeout=0.3)
    scrape = served(poller, counters)
    poller.start()
    try:
        # first call returns; the second sleeps 30 s
        wait_for("the slow collector to be marked failed",
                 lambda: counters.get(ex.SUCCESS, ("slow",)) == 0.0 and slow.calls == 2)
        took, s = scrape()
        # answered while the hung call still blocks: the scrape did not wait for it
        assert slow.returned == 1 and not slow.release.is_set() and took < WALL_S
        assert s[k("nodewarden_collector_success", collector="slow")] == 0
        assert s[k("nodewarden_collector_success", collector="steady")] == 1
        assert s[k("nodewarden_test_slow_calls", device="gpu0")] == 1  # its last snapshot
        assert s[k("nodewarden_test_steady")] == 1
        h = poller.health()["slow"]
        assert h["success"] is False and "did not return within 0.3s" in h["error"]
        runners = {t for t in threading.enumerate() if t.name == "collectors"}  # other tests' may linger
        assert poller._runner is not None and poller._runner._thread in runners
        time.sleep(0.5)  # several more polls while it hangs: no new call, no new thread
        assert slow.calls == 2
        # the runner blocked in the hung call, and the one calling the others: no thread per poll
        assert {t for t in threading.enumerate() if t.name == "collectors"} <= runners
        steady_polls = counters.get(ex.LAST_SUCCESS, ("steady",))
        wait_for("the steady collector to go on", lambda: counters.get(ex.LAST_SUCCESS, ("steady",)) > steady_polls)

        slow.release.set()  # the call returns at last: its result is taken, the collector recovers
        wait_for("recovery", lambda: counters.get(ex.SUCCESS, ("slow",)) == 1.0)
        wait_for("a new call", lambda: slow.calls >= 3)
        took, s = scrape()
        assert s[k("nodewarden_test_slow_calls", device="gpu0")] >= 2
        assert s[k("nodewarden_collector_duration_seconds", collector="slow")] > 0
        assert poller.health()["slow"]["success"] is True
    finally:
        slow.release.set()
        poller.stop()


def test_a_collector_that_raises_keeps_its_last_snapshot_and_recovers(served, caplog) -> None:
    flaky = Flaky()
    counters = Counters()
    poller = Poller([flaky, Steady()], counters, interval=10, timeout=1, wall=lambda: T0)
    scrape = served(poller, counters)
    poller.poll()
    _, s = scrape()
    assert s[k("nodewarden_collector_success", collector="flaky")] == 1
    assert s[k("nodewarden_test_flaky_reads_total", device="mc0")] == 101
    assert s[k("nodewarden_collector_last_success_timestamp_seconds", collector="flaky")] == T0

    flaky.fail = True
    with caplog.at_level(logging.ERROR, logger="nodewarden.agent.poller"):
        poller.poll()
        poller.poll()
    _, s = scrape()
    assert s[k("nodewarden_collector_success", collector="flaky")] == 0
    assert s[k("nodewarden_test_flaky_reads_total", device="mc0")] == 101  # the last good snapshot
    assert s[k("nodewarden_collector_success", collector="steady")] == 1
    assert "Input/output error" in poller.health()["flaky"]["error"]
    assert sum("collector flaky failed" in r.getMessage() for r in caplog.records) == 1  # once per spell

    flaky.fail = False
    poller.poll()
    _, s = scrape()
    assert s[k("nodewarden_collector_success", collector="flaky")] == 1
    assert s[k("nodewarden_test_flaky_reads_total", device="mc0")] == 104


def test_collect_returning_no_snapshot_is_a_failure() -> None:
    class Wrong:
        name = "wrong"

        def collect(self) -> Any:
            return {"samples": []}

    counters = Counters()
    poller = Poller([Wrong()], counters, timeout=1)
    poller.poll()
    assert counters.get(ex.SUCCESS, ("wrong",)) == 0
    assert "not a Snapshot" in poller.health()["wrong"]["error"]


def test_stop_closes_idle_collectors_and_leaves_a_hung_one() -> None:
    class Closing(Steady):
        closed = False

        def close(self) -> None:
            Closing.closed = True

    slow = Slow(hang_from=1)
    poller = Poller([Closing(), slow], Counters(), timeout=0.1)
    poller.poll()
    t0 = time.monotonic()
    poller.stop(join_s=1.0)
    assert slow.calls == 1 and slow.returned == 0  # stopped while the hung call still blocks
    assert time.monotonic() - t0 < WALL_S
    assert Closing.closed
    slow.release.set()


def test_polled_collectors_need_distinct_names() -> None:
    with pytest.raises(ValueError):
        Poller([Steady(), Steady()], Counters())


def test_a_late_return_is_taken_and_its_events_counted(tmp_path: Path) -> None:
    """A call that overran its timeout is not abandoned for good: when it returns, its snapshot
    is served and its events counted (a collector reports events since its previous call)."""
    class Late(Slow):
        name = "late"

        def collect(self) -> Snapshot:
            snap = super().collect()
            snap.events.append(FaultEvent(kind=ev.CPU_ECC, message="mc0/A1: 1 corrected", raw="", source="sysfs",
                                          device="mc0/A1"))
            return snap

    late = Late(hang_from=1)
    counters = Counters()
    sink, _ = sink_for(tmp_path, counters)
    poller = Poller([late, Steady()], counters, sink, timeout=0.2)
    try:
        t0 = time.monotonic()
        poller.poll()
        # the poll waited the timeout, not the call: it returned while the call still blocks
        assert late.calls == 1 and late.returned == 0 and time.monotonic() - t0 < WALL_S
        assert counters.get(ex.SUCCESS, ("late",)) == 0 and counters.get(ex.SUCCESS, ("steady",)) == 1
        assert poller.health()["late"]["running_for"] >= 0.2
        poller.poll()
        assert late.calls == 1  # not called again while hung
        late.release.set()
        wait_for("the late result", lambda: counters.get(ex.SUCCESS, ("late",)) == 1.0)
        wait_for("its event", lambda: counters.get(ex.EVENTS, ("late", "cpu_ecc")) == 1)
        assert [e["device"] for e in journal(tmp_path)] == ["mc0/A1"]
        assert poller.health()["late"]["running_for"] is None
    finally:
        late.release.set()
        poller.stop()


EXIT_WITH_A_HUNG_CALL = """
import threading, time
from nodewarden.agent.exporter import Counters
from nodewarden.agent.poller import Poller
from nodewarden.collectors.base import Snapshot

class Wedged:
    name = "wedged"
    def collect(self):
        threading.Event().wait(60)  # an NVML call on a GPU that fell off the bus
        return Snapshot()

poller = Poller([Wedged()], Counters(), timeout=0.2)
poller.poll()
poller.stop(join_s=0.5)
print("stopped", poller.health()["wedged"]["success"], flush=True)
"""

THREAD_POOL_WITH_A_HUNG_CALL = """
import concurrent.futures, threading, time
pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="collector-wedged")
call = pool.submit(threading.Event().wait, 2.0)
try:
    call.result(timeout=0.2)
except concurrent.futures.TimeoutError:
    pass
pool.shutdown(wait=False, cancel_futures=True)
print("stopped", flush=True)
"""


def run_python(code: str) -> tuple[float, str]:
    repo = Path(__file__).resolve().parents[2]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}, check=True).stdout
    return time.monotonic() - t0, out


def test_a_hung_call_does_not_hold_the_process_exit() -> None:
    """The agent stops on SIGTERM even while a collector is blocked in its driver: the worker
    thread is a daemon thread, not waited for at exit."""
    took, out = run_python(EXIT_WITH_A_HUNG_CALL)
    assert out.split() == ["stopped", "False"]
    assert took < 10  # the call blocks 60 s


def test_a_thread_pool_executor_would_hold_the_exit_for_the_hung_call() -> None:
    """Why the worker is not ``ThreadPoolExecutor(max_workers=1)``: the interpreter joins an
    executor's threads at exit, so a stopped agent would wait for the hung call (here 2 s, on
    a wedged driver minutes or forever), even after ``shutdown(wait=False)``."""
    took, out = run_python(THREAD_POOL_WITH_A_HUNG_CALL)
    assert out.split() == ["stopped"]
    assert took >= 1.8


# ---------------------------------------------------------------------------------------------
# events

def sink_for(tmp_path: Path, counters: Counters, flash: FlashCuts | None = None) -> tuple[EventSink, st.StateStore]:
    store = st.StateStore(tmp_path)
    lock = threading.RLock()

    def save() -> bool:
        return store.save(st.AgentState(kmsg=None, counters=counters.to_json()))
    return EventSink(counters, store, lock=lock, save=save, flash=flash, host="node01"), store


def journal(state_dir: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(state_dir.glob("events-*.jsonl")) for line in p.read_text().splitlines()]


def test_collector_events_are_counted_journaled_and_saved(tmp_path: Path) -> None:
    class Edac:
        name = "edac"

        def collect(self) -> Snapshot:
            snap = Snapshot()
            snap.events.append(FaultEvent(kind=ev.CPU_ECC, message="mc0/DIMM_A1: 2 corrected", raw="", source="sysfs",
                                          device="mc0/DIMM_A1", attrs={"mc": 0, "label": "DIMM_A1", "count": 2,
                                                                       "type": "corrected"}))
            return snap

    counters = Counters()
    sink, _ = sink_for(tmp_path, counters)
    poller = Poller([Edac()], counters, sink, timeout=1)
    poller.poll()
    assert counters.get(ex.EVENTS, ("edac", "cpu_ecc")) == 1
    # the kernel log's EDAC series is the log's alone: the sysfs counters are exported as samples
    assert not [key for key in counters.snapshot() if key[0] == ex.EDAC_LOGGED.name]
    (line,) = journal(tmp_path)
    assert line["kind"] == "cpu_ecc" and line["host"] == "node01" and line["source"] == "sysfs" and line["time"]
    saved = st.load_state(tmp_path).counters
    assert {"name": ex.EVENTS.name, "labels": {"collector": "edac", "kind": "cpu_ecc"}, "value": 1.0} in saved


class Port:
    def __init__(self, device: str, port: int, state: int, phys_state: int, link_downed: int,
                 netdev: str | None = None) -> None:
        self.device, self.port, self.state, self.phys_state = device, port, state, phys_state
        self.link_downed, self.link_layer, self.netdev = link_downed, "InfiniBand", netdev
        self.active = state == 4 and phys_state == 5  # ACTIVE and LinkUp


class FakeIb:
    """An InfiniBand collector whose ports follow a script of (state, phys_state, link_downed)."""

    name = "infiniband"

    def __init__(self, script: list[tuple[int, int, int]]) -> None:
        self.script = script
        self.i = -1

    def collect(self) -> Snapshot:
        self.i += 1
        return Snapshot()

    def ports(self) -> list[Port]:
        s, ps, ld = self.script[min(self.i, len(self.script) - 1)]
        return [Port("mlx5_0", 1, s, ps, ld)]


def test_port_polls_feed_the_detector_and_its_counts_persist(tmp_path: Path) -> None:
    now = [T0]
    counters = Counters()
    flash = FlashCuts(FlashCutDetector(max_seconds=60), counters, clock=lambda: now[0], host="node01")
    sink, _ = sink_for(tmp_path, counters, flash)
    # ACTIVE, DOWN (Polling), ACTIVE 10 s later: a flash cut; then DOWN for 5 min: an outage;
    # then a link_downed rise between two ACTIVE polls: another flash cut
    ib = FakeIb([(4, 5, 0), (1, 2, 1), (4, 5, 1), (1, 2, 2), (4, 5, 2), (4, 5, 3)])
    poller = Poller([ib], counters, sink, timeout=1)
    for step in (0, 10, 10, 10, 300, 10):
        now[0] += step
        poller.poll()
    key = ("mlx5_0", "1")
    assert counters.get(ex.FLASH_CUTS, key) == 2
    assert counters.get(ex.OUTAGES, key) == 1
    assert counters.get(ex.EVENTS, ("flash_cut", "ib_flash_cut")) == 2
    kinds = sorted(e["kind"] for e in journal(tmp_path))
    assert kinds == ["ib_flash_cut", "ib_flash_cut", "ib_link_outage"]
    assert all(e["host"] == "node01" for e in journal(tmp_path))

    # a restart: the persisted counters come back, a fresh detector adds to them
    restored = Counters()
    restored.load_json(st.load_state(tmp_path).counters)
    assert restored.get(ex.FLASH_CUTS, key) == 2 and restored.get(ex.OUTAGES, key) == 1
    flash2 = FlashCuts(FlashCutDetector(max_seconds=60), restored, clock=lambda: now[0])
    for s, ps in ((4, 5), (1, 2), (4, 5)):
        now[0] += 5
        flash2.observe_ports([Port("mlx5_0", 1, s, ps, 3)])
    assert restored.get(ex.FLASH_CUTS, key) == 3


def test_ports_are_shown_for_any_collector_that_gives_them_whatever_its_name(tmp_path: Path) -> None:
    """The capability is the ``ports()`` method (collectors.base.PortSource), not the name."""
    class Roce(FakeIb):
        name = "roce"

    class NoPorts(Steady):
        name = "infiniband"  # the name alone asks for nothing

    now = [T0]
    counters = Counters()
    flash = FlashCuts(FlashCutDetector(max_seconds=60), counters, clock=lambda: now[0], host="node01")
    sink, _ = sink_for(tmp_path, counters, flash)
    poller = Poller([Roce([(4, 5, 0), (1, 2, 1), (4, 5, 1)]), NoPorts()], counters, sink, timeout=1)
    for step in (0, 10, 10):
        now[0] += step
        poller.poll()
    assert counters.get(ex.FLASH_CUTS, ("mlx5_0", "1")) == 1
    assert counters.get(ex.SUCCESS, ("infiniband",)) == 1 and counters.get(ex.SUCCESS, ("roce",)) == 1
    assert [w.with_ports for w in poller.workers] == [True, False]


def sysfs_aer(pci: str, severity: str) -> FaultEvent:
    """A sysfs AER rise as the pcie collector gives it: a candidate the kernel log may also print."""
    return FaultEvent(kind=ev.PCIE_AER, message=f"{pci}: 1 {severity} AER error record(s)", raw="", source="sysfs",
                      device=pci, category=severity,
                      attrs={"severity": severity, "pci_bus_id": pci, "via": "sysfs", "count": 1})


def test_aer_candidates_are_reconciled_by_kind_and_counted_under_their_collector(tmp_path: Path) -> None:
    """Any polled collector's sysfs ``pcie_aer`` events wait for their kernel-log record; one
    released by another collector's poll, or at stop, is still counted under its own collector."""
    class Rises:
        name = "pci_functions"  # not "pcie": the rule is the event's kind

        def __init__(self) -> None:
            self.script: list[list[FaultEvent] | None] = [[], [sysfs_aer("0000:9b:00.0", "fatal")], None,
                                                          [sysfs_aer("0000:1a:00.0", "corrected")]]

        def collect(self) -> Snapshot:
            events = self.script.pop(0)
            if events is None:
                raise OSError(5, "Input/output error")  # no take of its own this poll
            snap = Snapshot()
            snap.events.extend(events)
            return snap

    clock = [T0]
    counters = Counters()
    store = st.StateStore(tmp_path)
    aer = AerReconciler(window_s=13, slack_s=3, clock=lambda: clock[0])
    sink = EventSink(counters, store, lock=threading.RLock(), save=lambda: True, host="node01", aer=aer,
                     clock=lambda: dt.datetime.fromtimestamp(clock[0], dt.timezone.utc))
    poller = Poller([Rises(), Steady()], counters, sink, timeout=1)
    events = lambda who: counters.get(ex.EVENTS, (who, "pcie_aer"))  # noqa: E731
    poller.poll()
    clock[0] += 10
    poller.poll()  # the fatal rise: held, waiting for its kernel-log record
    assert aer.pending() == 1 and events("pci_functions") == 0
    clock[0] += 10
    poller.poll()  # its wait is over; released by the steady collector's take (its own poll failed)
    assert aer.pending() == 0
    assert events("pci_functions") == 1 and events("steady") == 0
    clock[0] += 10
    poller.poll()  # the corrected rise: held
    assert aer.pending() == 1
    assert sink.flush() == 1  # at stop
    assert events("pci_functions") == 2 and events("steady") == 0
    assert [e["device"] for e in journal(tmp_path)] == ["0000:9b:00.0", "0000:1a:00.0"]


class FakeDetector:
    """Records what it is shown; reports one cut per ``ib_link_up`` event."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.cuts = 0
        self.mapped: dict[str, tuple[str, int]] = {}

    def map_netdev(self, netdev: str, device: str, port: int) -> None:
        self.mapped[netdev] = (device, port)

    def observe_event(self, e: FaultEvent, now: float) -> list[FaultEvent]:
        self.seen.append((e.kind, now))
        if e.kind == ev.IB_LINK_UP:
            self.cuts += 1
            return [FaultEvent(kind=ev.IB_FLASH_CUT, message="cut", raw="cut", device="mlx5_3/1",
                               time=e.time, source=e.source)]
        return []

    def observe_port(self, device: str, port: int, *state: Any, **kw: Any) -> list[FaultEvent]:
        self.seen.append(("port", (device, port)))
        return []

    def counts(self) -> dict:
        return {("mlx5_3", 1): {"flash_cuts": self.cuts, "outages": 0},
                ("eno1", None): {"flash_cuts": 4, "outages": 0}}  # an unmapped Ethernet netdev


def test_only_link_events_reach_the_detector_with_their_own_time() -> None:
    det = FakeDetector()
    counters = Counters()
    flash = FlashCuts(det, counters, clock=lambda: T0)
    when = dt.datetime.fromtimestamp(T0 - 100, dt.timezone.utc)
    out = flash.observe_events([
        FaultEvent(kind=ev.XID, message="x", raw="x", code=79),
        FaultEvent(kind=ev.IB_LINK_DOWN, message="d", raw="d", time=when, attrs={"rdma_device": "mlx5_3", "port": 1}),
        FaultEvent(kind=ev.NET_LINK_UP, message="u", raw="u"),
    ])
    assert det.seen == [(ev.IB_LINK_DOWN, T0 - 100), (ev.NET_LINK_UP, T0)]
    assert out == []
    flash.observe_ports([Port("mlx5_3", 1, 4, 5, 0, netdev="enp83s0f0np0")])
    assert det.mapped == {"enp83s0f0np0": ("mlx5_3", 1)}
    assert counters.get(ex.FLASH_CUTS, ("mlx5_3", "1")) == 0  # the series exists before the first cut
    assert not [key for key in counters.snapshot() if key[0] == ex.FLASH_CUTS.name and key[1][0] == "eno1"]


def test_a_failing_detector_costs_the_observation_only(caplog) -> None:
    class Broken(FakeDetector):
        def observe_event(self, e: FaultEvent, now: float) -> list[FaultEvent]:
            raise KeyError("boom")

    flash = FlashCuts(Broken(), Counters())
    with caplog.at_level(logging.ERROR):
        assert flash.observe_events([FaultEvent(kind=ev.IB_LINK_DOWN, message="d", raw="d")]) == []
    assert "observe_event failed" in caplog.text


class Records:
    """A /dev/kmsg stand-in: raw records, read once (KmsgReader's interface)."""

    boot_id = "6f0c2a1e-0000-4000-8000-000000000001"
    overruns = 0

    def __init__(self, records: list[str]) -> None:
        self.records = records

    def read_available(self, limit: int = 100_000) -> list[str]:
        out, self.records = self.records[:limit], self.records[limit:]
        return out

    def wait(self, timeout: float) -> bool:
        return bool(self.records)


def test_kernel_log_link_lines_go_through_the_detector(tmp_path: Path) -> None:
    det = FakeDetector()
    counters = Counters()
    flash = FlashCuts(det, counters, host="node01")
    boot = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.timezone.utc)
    recs = Records(["6,10,5000000,-;mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN\n",
                    "6,11,5900000,-;mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE\n"])
    f = KmsgFollower(recs, counters, st.StateStore(tmp_path), host="node01", gpu_of=lambda _p: "", boot_time=boot,
                     position=None, clock=lambda: 100.0, observer=flash.observe_events)
    f.catch_up()
    assert [kind for kind, _ in det.seen] == [ev.IB_LINK_DOWN, ev.IB_LINK_UP]
    assert det.seen[0][1] == (boot + dt.timedelta(seconds=5)).timestamp()  # the record's own time
    assert counters.get(ex.FLASH_CUTS, ("mlx5_3", "1")) == 1
    assert counters.get(ex.IB_LINK, ("mlx5_3", "1", "DOWN")) == 1
    kinds = [e["kind"] for e in journal(tmp_path)]
    assert kinds.count("ib_flash_cut") == 1 and kinds.count("ib_link_down") == 1
    saved = st.load_state(tmp_path).counters  # counted and saved with the cursor
    assert {"name": ex.FLASH_CUTS.name, "labels": {"device": "mlx5_3", "port": "1"}, "value": 1.0} in saved


# ---------------------------------------------------------------------------------------------
# building the collectors

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "h100-hgx-ndr"


def test_a_constructor_that_fails_disables_that_collector(monkeypatch, caplog) -> None:
    def broken(sysfs: Path, host: str) -> Any:
        raise OSError(13, "Permission denied")

    entries = tuple(registry.Entry(e.name, broken) if e.name == "edac" else e for e in registry.REGISTRY)
    monkeypatch.setattr(registry, "REGISTRY", entries)
    with caplog.at_level(logging.ERROR):
        built = pl.build_collectors(["edac", "netclass"], FIXTURE, "node01")
    assert [c.name for c in built] == ["netclass"]
    assert "collector edac disabled: its constructor failed" in caplog.text


def test_collectors_are_built_in_registry_order_from_the_enabled_list() -> None:
    built = pl.build_collectors(["netclass", "kernel_log", "infiniband", "edac"], str(FIXTURE), "node01")
    # kernel_log is the follower: listed in the registry, never built as a polled collector
    assert [c.name for c in built] == ["infiniband", "edac", "netclass"]
    assert pl.build_collectors([], FIXTURE, "node01") == []


def test_an_unknown_collector_name_is_refused() -> None:
    with pytest.raises(KeyError, match="dcgm"):
        pl.build_collectors(["edac", "dcgm"], FIXTURE, "node01")


# ---------------------------------------------------------------------------------------------
# one collector at a time

class Timed:
    """Records when each of its calls ran (monotonic start, end), busy for ``seconds``."""

    def __init__(self, name: str, spans: list[tuple[str, float, float]], seconds: float = 0.05) -> None:
        self.name = name
        self.spans = spans
        self.seconds = seconds

    def collect(self) -> Snapshot:
        t0 = time.monotonic()
        end = t0 + self.seconds
        while time.monotonic() < end:  # busy, as a collector reading files is
            pass
        self.spans.append((self.name, t0, time.monotonic()))
        return Snapshot()


def test_collectors_are_called_one_after_another_in_registry_order() -> None:
    spans: list[tuple[str, float, float]] = []
    p = Poller([Timed("a", spans), Timed("b", spans), Timed("c", spans)], Counters(), interval=10, timeout=2)
    p.poll()
    assert [n for n, _, _ in spans] == ["a", "b", "c"]
    assert all(spans[i][2] <= spans[i + 1][1] for i in range(len(spans) - 1)), spans  # no overlap
    p.stop()


def test_a_newly_hung_collector_delays_the_next_by_its_timeout_once_then_is_skipped() -> None:
    spans: list[tuple[str, float, float]] = []
    slow = Slow(hang_from=1)
    counters = Counters()
    p = Poller([slow, Timed("after", spans)], counters, interval=10, timeout=2.0)
    t0 = time.monotonic()
    p.poll()
    assert [n for n, _, _ in spans] == ["after"] and spans[0][1] - t0 >= 2.0  # called, after the timeout
    assert counters.get(ex.SUCCESS, ("slow",)) == 0.0 and counters.get(ex.SUCCESS, ("after",)) == 1.0
    t1 = time.monotonic()
    p.poll()  # the hung call is still running: not called again, and nothing waits for it
    assert slow.calls == 1 and len(spans) == 2 and spans[1][1] - t1 < 2.0  # not the hung call's timeout again
    slow.release.set()
    p.stop()


def test_a_runner_is_abandoned_only_while_the_call_runs() -> None:
    """The hand-off after a timeout is atomic with the runner's move to its next call: a call
    that returned just before is not marked hung, and no worker after it is called twice."""
    runner = pl.Runner("test-runner")
    release = threading.Event()

    class Blocking:
        name = "blocking"

        def collect(self) -> Snapshot:
            release.wait(10)
            return Snapshot()

    spans: list[tuple[str, float, float]] = []
    done: list[str] = []
    a = pl.Worker(Blocking(), "blocking", False, lambda w, *_: done.append(w.name))
    b = pl.Worker(Timed("after", spans), "after", False, lambda w, *_: done.append(w.name))
    assert a.begin() and b.begin()
    runner.go([a, b])
    wait_for("the first call to run", lambda: runner.current is a)
    assert not runner.abandon_if_in(b)  # not the running call
    release.set()
    runner.finished.wait(5)
    assert done == ["blocking", "after"] and not runner.abandon_if_in(a)  # returned: never hung
    assert len(spans) == 1
    runner.quit([a, b])
    runner.join(5)
    assert not runner._thread.is_alive()


def test_stopping_gives_back_the_calls_a_runner_will_not_make() -> None:
    closed: list[str] = []

    class Closing(Timed):
        def close(self) -> None:
            closed.append(self.name)

    spans: list[tuple[str, float, float]] = []
    p = Poller([Closing("a", spans, seconds=0.3), Closing("b", spans)], Counters(), interval=10, timeout=2)
    stopper = threading.Timer(0.1, p.stop)  # while a's call runs
    stopper.start()
    p.poll(p._stop)
    stopper.join()
    p._runner.join(3) if p._runner is not None else None
    assert [n for n, _, _ in spans] == ["a"] and sorted(closed) == ["a", "b"]
    assert not any(w.busy for w in p.workers)


class Counting:
    """Counts its calls; its snapshot carries the call number."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    def collect(self) -> Snapshot:
        self.calls += 1
        snap = Snapshot()
        snap.add("nodewarden_test_calls", {"collector": self.name}, self.calls)
        return snap


def test_a_collector_polled_every_nth_poll_serves_its_last_snapshot_in_between() -> None:
    every1, every3 = Counting("gpu"), Counting("pcie")
    p = Poller([every1, every3], Counters(), interval=10, timeout=2, every={"pcie": 3})
    served = []
    for _ in range(7):
        p.poll()
        served.append({name: s.value for name, s in p.samples()})
    assert (every1.calls, every3.calls) == (7, 3)  # polls 0, 3 and 6
    assert [s["pcie"] for s in served] == [1, 1, 1, 2, 2, 2, 3]
    assert [s["gpu"] for s in served] == [1, 2, 3, 4, 5, 6, 7]
    p.stop()


@pytest.mark.parametrize("every, why", [({"pcie": 0}, "whole number"), ({"pcie": 1.5}, "whole number"),
                                        ({"pcie": True}, "whole number"), ({"nvml": 2}, "no polled collector")])
def test_an_every_that_is_no_whole_number_of_polls_or_names_no_collector_is_refused(every, why) -> None:
    with pytest.raises(ValueError, match=why):
        Poller([Counting("pcie")], Counters(), interval=10, timeout=2, every=every)

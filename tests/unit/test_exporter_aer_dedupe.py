"""One PCIe AER error, one event: the pcie collector's sysfs AER rises (candidates) and the kernel
log's ``pcie_aer`` records reconciled by :class:`nodewarden.agent.aer.AerReconciler`, kmsg first,
sysfs first and sysfs only; pure, then through the real collector on a copy of the generated H100
fixture tree (tests/fixtures/sysfs/h100-hgx-ndr-aer), the agent's EventSink, counters and journal.

The kernel adds one to ``TOTAL_ERR_<severity>`` and to each error bit's count of the function's
``aer_dev_<severity>`` file for every record it handles, then prints the record unless rate-limited
(drivers/pci/pcie/aer.c: ``aer_print_error()`` calls ``pci_dev_aer_stats_incr()`` before its
``ratelimit_print`` test; ``pci_print_aer()`` likewise for GHES records).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from pathlib import Path

import pytest

from nodewarden import events as ev
from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent.aer import AerReconciler
from nodewarden.agent.daemon import kernel_observer
from nodewarden.agent.exporter import Counters
from nodewarden.agent.poller import EventSink, Poller
from nodewarden.collectors import pcie
from nodewarden.collectors.pcie import PcieCollector
from nodewarden.events import FaultEvent, iso_utc
from nodewarden.sysfs import pci as sysfs_pci
from sysfs_trees import copy_tree

T0 = 1_795_000_000.0
GPU = "0000:9b:00.0"  # an H100 of the fixture tree (vendor 0x10de, device 0x2330)
HCA = "0000:1a:00.0"  # a ConnectX-7 of it (0x15b3): RxErr 3, BadTLP 1, TOTAL_ERR_COR 4 as built


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t

    def dt(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.t, dt.timezone.utc)


def kmsg_aer(pci: str, severity: str, at: float | None) -> FaultEvent:
    """A kernel-log pcie_aer record of the parser's shape (what the follower hands its observer)."""
    return FaultEvent(kind=ev.PCIE_AER, message=f"{pci}: PCIe Bus Error", raw="", source="kmsg", device=pci,
                      time=dt.datetime.fromtimestamp(at, dt.timezone.utc) if at is not None else None,
                      category=severity, attrs={"severity": severity, "pci_bus_id": pci, "via": "kernel"})


def sysfs_aer(pci: str, severity: str, count: int = 1) -> FaultEvent:
    return FaultEvent(kind=ev.PCIE_AER, message="", raw="", source="sysfs", device=pci, category=severity,
                      attrs={"severity": severity, "pci_bus_id": pci, "via": "sysfs", "count": count})


# ---- the pcie collector's candidates -------------------------------------------------------------

def bump(root: Path, bdf: str, fname: str, error: str, by: int, total: str | None) -> None:
    f = root / "bus/pci/devices" / bdf / fname
    lines = []
    for line in f.read_text().splitlines():
        name, _, count = line.rpartition(" ")
        if name == error or (total is not None and name == total):
            line = f"{name} {int(count) + by}"
        lines.append(line)
    f.write_text("\n".join(lines) + "\n")


def test_rises_are_events_after_a_baseline(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr-aer", tmp_path)
    c = PcieCollector(root)
    assert c.collect().events == []  # the first poll is a baseline (the HCA's 4 old records are none)
    assert c.collect().events == []  # nothing rose
    bump(root, HCA, "aer_dev_correctable", "RxErr", 2, "TOTAL_ERR_COR")  # two records, RxErr each
    bump(root, HCA, "aer_dev_correctable", "BadTLP", 1, None)  # one of them with BadTLP too
    bump(root, GPU, "aer_dev_fatal", "CmpltTO", 1, "TOTAL_ERR_FATAL")
    events = {(e.device, e.attrs["severity"]): e for e in c.collect().events}
    assert sorted(events) == [(HCA, "corrected"), (GPU, "fatal")]
    hca, gpu = events[(HCA, "corrected")], events[(GPU, "fatal")]
    assert hca.kind == ev.PCIE_AER and hca.source == "sysfs" and hca.category == "corrected"
    assert hca.attrs == {"pci_bus_id": HCA, "severity": "corrected", "via": "sysfs", "count": 2,
                         "error_counts": {"BadTLP": 1, "RxErr": 2}, "vendor_id": 0x15B3, "device_id": 0x1021}
    # an uncorrected error on an NVIDIA function: the GPU-lost precursor category, as from the log
    assert gpu.category == "gpu_lost_precursor" and gpu.attrs["count"] == 1
    assert gpu.attrs["error_counts"] == {"CmpltTO": 1} and gpu.attrs["vendor_id"] == 0x10DE
    assert c.collect().events == []


def test_a_count_that_went_down_is_a_new_baseline(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr-aer", tmp_path)
    c = PcieCollector(root)
    c.collect()
    f = root / "bus/pci/devices" / HCA / "aer_dev_correctable"
    f.write_text(f.read_text().replace("RxErr 3", "RxErr 0").replace("BadTLP 1", "BadTLP 0")
                 .replace("TOTAL_ERR_COR 4", "TOTAL_ERR_COR 0"))  # removed and added again
    assert c.collect().events == []
    bump(root, HCA, "aer_dev_correctable", "RxErr", 1, "TOTAL_ERR_COR")
    (e,) = c.collect().events
    assert e.attrs["count"] == 1 and e.attrs["error_counts"] == {"RxErr": 1}


def test_a_file_unreadable_for_one_poll_keeps_its_baseline(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr-aer", tmp_path)
    c = PcieCollector(root)
    c.collect()
    f = Path(os.path.realpath(root / "bus/pci/devices" / GPU / "aer_dev_fatal"))
    text = f.read_text()
    f.unlink()
    f.mkdir()  # a read error
    assert c.collect().events == []
    f.rmdir()
    f.write_text(text)
    bump(root, GPU, "aer_dev_fatal", "SDES", 1, "TOTAL_ERR_FATAL")
    (e,) = c.collect().events
    assert e.attrs["count"] == 1 and e.attrs["error_counts"] == {"SDES": 1}


def test_without_a_total_line_a_rise_is_one_record(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr-aer", tmp_path)
    f = root / "bus/pci/devices" / HCA / "aer_dev_correctable"
    f.write_text("".join(line + "\n" for line in f.read_text().splitlines() if not line.startswith("TOTAL_")))
    c = PcieCollector(root)
    c.collect()
    bump(root, HCA, "aer_dev_correctable", "RxErr", 5, None)
    (e,) = c.collect().events
    assert e.attrs["count"] == 1 and e.attrs["error_counts"] == {"RxErr": 5}


@pytest.mark.parametrize("before, now, want", [
    (None, (4, {"RxErr": 3}), None),
    ((4, {"RxErr": 3}), (4, {"RxErr": 3}), None),
    ((4, {"RxErr": 3}), (6, {"RxErr": 5}), (2, {"RxErr": 2})),
    ((4, {"RxErr": 3, "BadTLP": 1}), (5, {"RxErr": 4, "BadTLP": 2}), (1, {"RxErr": 1, "BadTLP": 1})),
    ((4, {"RxErr": 3}), (0, {"RxErr": 0}), None),
    ((4, {"RxErr": 3}), (5, {"RxErr": 2}), None),  # one bit went down: a new baseline
    ((None, {"RxErr": 3}), (None, {"RxErr": 4}), (1, {"RxErr": 1})),
    ((4, {"RxErr": 3}), (5, {"RxErr": 3}), (1, {})),  # a record whose bit is masked in the counts
])
def test_aer_rise(before, now, want) -> None:
    assert pcie.aer_rise(before, now) == want


def test_parse_aer_total() -> None:
    text = "RxErr 0\nBadTLP 3\nTOTAL_ERR_COR 3\n"
    assert sysfs_pci.parse_aer(text, "correctable")[2] == 3
    assert sysfs_pci.parse_aer(text, "fatal")[2] is None
    assert sysfs_pci.parse_aer("DLP 0\nTOTAL_ERR_NONFATAL 12\n", "nonfatal")[2] == 12


# ---- the reconciler, pure -------------------------------------------------------------------------

def test_kmsg_first_then_the_rise_is_no_event() -> None:
    clock = Clock()
    r = AerReconciler(window_s=10 + 3, slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(GPU, "fatal", clock.t)])
    clock.t += 9.5  # the next poll
    assert r.from_sysfs([sysfs_aer(GPU, "fatal")]) == []
    assert r.pending() == 0
    clock.t += 20
    assert r.from_sysfs([]) == [] and r.flush() == []


def test_sysfs_first_then_the_record_is_no_sysfs_event() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    assert r.from_sysfs([sysfs_aer(GPU, "fatal")]) == []
    assert r.pending() == 1
    clock.t += 0.4  # the follower reads the record a little later
    r.observe_kernel([kmsg_aer(GPU, "fatal", clock.t - 0.5)])
    clock.t += 10
    assert r.from_sysfs([]) == [] and r.pending() == 0


def test_sysfs_only_is_one_event_once_its_wait_is_over() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    cand = sysfs_aer(GPU, "fatal", count=2)
    assert r.from_sysfs([cand]) == []
    clock.t += 2.9
    assert r.from_sysfs([]) == []
    clock.t += 0.1
    (e,) = r.from_sysfs([])
    assert e.source == "sysfs" and e.device == GPU and e.attrs["count"] == 2 and e.attrs["logged"] == 0
    assert cand.attrs["count"] == 2 and "logged" not in cand.attrs  # the collector's object is not changed
    assert r.from_sysfs([]) == [] and r.flush() == []


def test_records_the_log_did_not_print_are_one_sysfs_event() -> None:
    """A storm the kernel rate-limited: 5 records counted, 2 printed (one before, one after the poll)."""
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(HCA, "corrected", clock.t)])
    clock.t += 1
    assert r.from_sysfs([sysfs_aer(HCA, "corrected", count=5)]) == []
    r.observe_kernel([kmsg_aer(HCA, "corrected", clock.t)])
    clock.t += 3
    (e,) = r.from_sysfs([])
    assert e.attrs["count"] == 3 and e.attrs["logged"] == 2


def test_a_record_is_used_once_and_only_for_its_function_and_severity() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(GPU, "fatal", clock.t), kmsg_aer(HCA, "corrected", clock.t)])
    clock.t += 1
    assert r.from_sysfs([sysfs_aer(GPU, "fatal"), sysfs_aer(GPU, "non_fatal")]) == []
    clock.t += 10
    out = r.from_sysfs([sysfs_aer(GPU, "fatal")])  # a second rise: the record was used by the first
    assert [(e.attrs["severity"], e.attrs["count"]) for e in out] == [("non_fatal", 1)]
    clock.t += 3
    assert [(e.attrs["severity"], e.attrs["count"]) for e in r.from_sysfs([])] == [("fatal", 1)]
    # the HCA's record, never matched, is forgotten after the window
    clock.t += 14
    assert r.from_sysfs([sysfs_aer(HCA, "corrected")]) == []
    clock.t += 3
    assert len(r.from_sysfs([])) == 1


def test_records_older_than_the_window_do_not_match() -> None:
    """Records replayed from the ring buffer at start (logged while the agent was down) are older
    than any rise a poll can still see: the first poll is a baseline."""
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(GPU, "fatal", clock.t - 3600)])
    r.from_sysfs([sysfs_aer(GPU, "fatal")])
    clock.t += 3
    assert len(r.from_sysfs([])) == 1


def test_undated_records_are_taken_as_now_and_sysfs_events_are_never_records() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(GPU, "fatal", None), sysfs_aer(HCA, "corrected")])
    assert r.from_sysfs([sysfs_aer(GPU, "fatal"), sysfs_aer(HCA, "corrected")]) == []
    clock.t += 3
    assert [e.device for e in r.from_sysfs([])] == [HCA]


def test_other_events_pass_and_flush_emits_what_waits() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock)
    other = FaultEvent(kind=ev.NET_LINK_DOWN, message="", raw="", source="sysfs", device="eth0")
    assert r.from_sysfs([other, sysfs_aer(GPU, "fatal")]) == [other]
    (e,) = r.flush()
    assert e.attrs["count"] == 1 and r.pending() == 0


def test_the_remembered_records_are_bounded() -> None:
    clock = Clock()
    r = AerReconciler(window_s=13, slack_s=3, clock=clock, max_remembered=100)
    for i in range(1000):
        clock.t += 0.001
        r.observe_kernel([kmsg_aer(f"0000:{i % 256:02x}:00.0", "corrected", clock.t)])
    assert r._n_logged <= 100
    assert r._n_logged == sum(len(q) for q in r._logged.values())


# ---- through the agent: collector, EventSink, counters, journal --------------------------------

def journal(state_dir: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(state_dir.glob("events-*.jsonl")) for line in p.read_text().splitlines()]


class Rig:
    """The pcie collector on a copy of the H100 tree, polled by the agent's Poller into an
    EventSink with the reconciler; the follower's side is the daemon's observer."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = copy_tree("h100-hgx-ndr-aer", tmp_path / "sys")
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.clock = Clock()
        self.counters = Counters()
        self.store = st.StateStore(self.state)
        self.aer = AerReconciler(window_s=10 + 3, slack_s=3, clock=self.clock)
        self.observe = kernel_observer(None, self.aer)
        lock = threading.RLock()
        sink = EventSink(self.counters, self.store, lock=lock, host="node01", clock=self.clock.dt, aer=self.aer,
                         save=lambda: self.store.save(st.AgentState(kmsg=None, counters=self.counters.to_json())))
        self.sink = sink
        self.poller = Poller([PcieCollector(self.root)], self.counters, sink, interval=10, timeout=5)
        self.poller.workers[0].name = "pcie"
        self.poller.poll()  # the baseline

    def kmsg(self, pci: str, severity: str) -> None:
        """A kernel-log record counted by the follower (its increments, its journal line, its observer)."""
        e = kmsg_aer(pci, severity, self.clock.t)
        self.counters.add_all(ex.increments(e, lambda _p: ""))
        self.store.journal([e])
        assert self.observe is not None and self.observe([e]) == []

    def poll(self, after: float = 10.0) -> None:
        self.clock.t += after
        self.poller.poll()

    def events(self, collector: str) -> float:
        return self.counters.get(ex.EVENTS, (collector, "pcie_aer"))

    def fatal_on_gpu(self) -> None:
        bump(self.root, GPU, "aer_dev_fatal", "CmpltTO", 1, "TOTAL_ERR_FATAL")


def test_kmsg_first_one_event(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.fatal_on_gpu()
    rig.kmsg(GPU, "fatal")
    rig.poll(4)
    rig.poll()
    rig.poll()
    assert rig.events("kernel_log") == 1 and rig.events("pcie") == 0
    assert [(e["source"], e["device"]) for e in journal(rig.state)] == [("kmsg", GPU)]
    assert rig.counters.get(ex.AER_LOGGED, (GPU, "fatal")) == 1


def test_sysfs_first_one_event(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.fatal_on_gpu()
    rig.poll()  # the rise is seen before the follower has read the record
    assert rig.aer.pending() == 1
    rig.clock.t += 0.5
    rig.kmsg(GPU, "fatal")
    rig.poll()
    rig.poll()
    assert rig.events("kernel_log") == 1 and rig.events("pcie") == 0
    assert [(e["source"], e["device"]) for e in journal(rig.state)] == [("kmsg", GPU)]


def test_sysfs_only_one_event(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.fatal_on_gpu()
    rig.poll()
    assert rig.events("pcie") == 0  # waiting for its record
    rig.poll()
    rig.poll()
    assert rig.events("pcie") == 1 and rig.events("kernel_log") == 0
    (line,) = journal(rig.state)
    assert line["source"] == "sysfs" and line["device"] == GPU and line["host"] == "node01"
    assert line["category"] == "gpu_lost_precursor"
    assert line["attrs"]["count"] == 1 and line["attrs"]["logged"] == 0 and line["attrs"]["via"] == "sysfs"
    assert line["time"] == iso_utc(dt.datetime.fromtimestamp(T0 + 10, dt.timezone.utc))  # the poll that saw the rise
    # the kernel-log series count printed records only; the sysfs counter says 1 fatal CmpltTO
    assert rig.counters.get(ex.AER_LOGGED, (GPU, "fatal")) == 0
    saved = st.load_state(rig.state).counters
    assert {"name": ex.EVENTS.name, "labels": {"collector": "pcie", "kind": "pcie_aer"}, "value": 1.0} in saved


def test_a_rise_still_waiting_at_stop_is_counted(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.fatal_on_gpu()
    rig.poll()
    assert rig.sink.flush() == 1
    assert rig.events("pcie") == 1 and rig.sink.flush() == 0
    assert [e["source"] for e in journal(rig.state)] == ["sysfs"]


def test_kernel_observer_keeps_the_flash_cut_detectors_events() -> None:
    class Flash:
        def observe_events(self, events):
            return [FaultEvent(kind=ev.IB_FLASH_CUT, message="", raw="")] if events else []

    clock = Clock()
    aer = AerReconciler(window_s=13, clock=clock)
    observe = kernel_observer(Flash(), aer)  # type: ignore[arg-type]
    out = observe([kmsg_aer(GPU, "fatal", clock.t)])
    assert [e.kind for e in out] == [ev.IB_FLASH_CUT]
    assert aer.from_sysfs([sysfs_aer(GPU, "fatal")]) == [] and aer.pending() == 0
    assert kernel_observer(None, None) is None


def test_a_record_stays_matchable_until_the_pcie_collector_s_next_poll() -> None:
    """The pcie collector runs every third poll by default: a record printed just after one of
    its polls is matched by the rise its next poll sees, 30 s later at 10 s polls."""
    from nodewarden.agent.aer import window_for
    assert window_for(10, 3) == 33 and window_for(10, 1) == 13
    clock = Clock()
    r = AerReconciler(window_s=window_for(10, 3), slack_s=3, clock=clock)
    r.observe_kernel([kmsg_aer(GPU, "fatal", clock.t)])
    clock.t += 29.5
    assert r.from_sysfs([sysfs_aer(GPU, "fatal")]) == [] and r.pending() == 0
    short = AerReconciler(window_s=window_for(10, 1), slack_s=3, clock=clock)  # the window of every poll
    short.observe_kernel([kmsg_aer(GPU, "fatal", clock.t)])
    clock.t += 29.5
    assert short.from_sysfs([sysfs_aer(GPU, "fatal")]) == [] and short.pending() == 1  # unmatched: waits, then an event

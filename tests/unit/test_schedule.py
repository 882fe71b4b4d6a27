"""The weekly validator run: when it is due (pure functions and the scheduler's loop on a fake
clock), what it exports, and the real thing: ``nodewarden validate`` run as a subprocess on a
sysfs fixture tree, its report exported and read back after a restart, a run killed at its
timeout, a run interrupted by the agent's stop."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest

from nodewarden import nvml
from nodewarden.agent import exporter as ex
from nodewarden.agent import schedule as sc
from nodewarden.agent.exporter import Counters
from nodewarden.agent.schedule import Scheduler, is_due, jitter_offset, next_due, slot_start

DAY, HOUR = 86400.0, 3600.0
WEEK = 7 * DAY
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def utc(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp()


# ---------------------------------------------------------------------------------------------
# pure: jitter, slots, due

def test_jitter_is_per_host_stable_and_within_the_window() -> None:
    offsets = {h: jitter_offset(h, 12 * HOUR, WEEK) for h in (f"gpu-{i:03d}" for i in range(200))}
    assert all(0 <= o < 12 * HOUR for o in offsets.values())
    assert jitter_offset("gpu-017", 12 * HOUR, WEEK) == offsets["gpu-017"]  # the same on every start
    assert len(set(offsets.values())) == 200
    # spread over the window, not bunched: every 2-hour bucket gets some of 200 hosts
    assert {int(o // (2 * HOUR)) for o in offsets.values()} == set(range(6))
    assert jitter_offset("gpu-017", 0, WEEK) == 0
    assert jitter_offset("gpu-017", 30 * DAY, WEEK) < WEEK  # never more than the interval


def test_weekly_slots_start_on_monday_utc_plus_the_offset() -> None:
    wed = utc(2026, 11, 25, 15, 0)
    start = slot_start(wed, WEEK, 0)
    assert dt.datetime.fromtimestamp(start, dt.timezone.utc) == dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
    assert slot_start(wed, WEEK, 3 * HOUR) == start + 3 * HOUR
    assert slot_start(start + 3 * HOUR - 1, WEEK, 3 * HOUR) == start + 3 * HOUR - WEEK  # just before this week's


def test_next_due() -> None:
    off = 5 * HOUR
    monday = utc(2026, 11, 23) + off  # this host's slot start
    first = utc(2026, 11, 25, 10, 0)
    assert next_due(None, first, WEEK, off) == first + off  # a new node: within jitter_hours
    assert next_due(monday + 60, first, WEEK, off) == monday + WEEK
    assert next_due(monday + 3 * DAY, first, WEEK, off) == monday + WEEK  # a late run keeps the host's time
    assert next_due(monday - 60, first, WEEK, off) == monday  # last run in the previous slot
    # the agent was down for three weeks: due at once
    assert is_due(monday + 3 * WEEK, monday, first, WEEK, off)
    assert not is_due(monday + WEEK - 1, monday, first, WEEK, off)
    # a last run stamped in the future (the clock was wrong then) does not postpone for years
    now = monday + 2 * DAY
    assert next_due(utc(2031, 1, 1), first, WEEK, off, now=now) == monday + WEEK


class FakeClock:
    """Wall time that moves only when the scheduler sleeps; stops the loop at ``end``."""

    def __init__(self, start: float, end: float) -> None:
        self.t = start
        self.end = end
        self.sleeps: list[float] = []

    def wall(self) -> float:
        return self.t

    def sleep(self, stop: threading.Event, seconds: float) -> bool:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.t += seconds
        if self.t >= self.end:
            stop.set()
        return stop.is_set()


class Recording(Scheduler):
    """The scheduler with the subprocess left out: each run takes ``took`` seconds of fake time."""

    took = 20 * 60.0
    clock: FakeClock

    def run_once(self, stop: threading.Event | None = None) -> int | None:
        started = self.begin()
        self.runs.append(started)
        self.clock.t += self.took
        self.finish(started, 0, report_expected=False)
        return 0


def simulate(tmp_path: Path, start: float, days: float, busy=lambda t: False, host: str = "gpu-017") -> Recording:
    clock = FakeClock(start, start + days * DAY)
    Recording.clock = clock
    s = Recording(Counters(), tmp_path, host, busy=lambda: busy(clock.t), wall=clock.wall, sleep=clock.sleep)
    s.runs = []
    s.run(threading.Event())
    return s


def test_a_month_on_a_fake_clock_runs_once_per_slot_at_the_hosts_time(tmp_path: Path) -> None:
    start = utc(2026, 11, 25, 10, 0)  # a Wednesday: the agent is installed
    s = simulate(tmp_path, start, 30)
    off = s.offset_s
    assert s.runs[0] == pytest.approx(start + off)  # the first run within jitter_hours of the first start
    weekly = s.runs[1:]
    assert len(weekly) == 4
    for r in weekly:  # then each Monday (UTC), this host's offset in
        t = dt.datetime.fromtimestamp(r - off, dt.timezone.utc)
        assert (t.weekday(), t.hour, t.minute) == (0, 0, 0)
    assert all(b - a == pytest.approx(WEEK) for a, b in zip(weekly, weekly[1:]))
    assert max(s.clock.sleeps) <= sc.MAX_SLEEP_S  # the clock is looked at every 5 minutes at least
    saved = json.loads((tmp_path / sc.SCHEDULE_FILE).read_text())
    assert saved["last_exit_code"] == 0 and saved["first_seen"].startswith("2026-11-25T10:00")


def test_busy_gpus_defer_the_run_by_30_minute_retries(tmp_path: Path) -> None:
    start = utc(2026, 11, 25, 10, 0)
    probe = Scheduler(Counters(), tmp_path / "probe", "gpu-017", busy=lambda: False)
    due = start + probe.offset_s
    job_ends = due + 3 * HOUR + 7 * 60  # a job holds the GPUs from before the due time until then
    s = simulate(tmp_path / "run", start, 2, busy=lambda t: t < job_ends)
    assert len(s.runs) == 1
    assert job_ends <= s.runs[0] < job_ends + sc.BUSY_RETRY_S
    assert (s.runs[0] - due) % sc.BUSY_RETRY_S == pytest.approx(0, abs=1e-6)
    assert s.counters.get(ex.VAL_NEXT) == pytest.approx(sc.next_due(s.runs[0], start, WEEK, s.offset_s))


def test_a_run_the_node_died_in_counts_as_the_slots_run(tmp_path: Path, caplog) -> None:
    monday = utc(2026, 11, 23)
    state = sc.ScheduleState(first_seen=monday - WEEK, last_attempt=monday + HOUR)  # no exit code, no end
    (tmp_path / sc.SCHEDULE_FILE).write_text(json.dumps(state.to_dict()))
    with caplog.at_level(logging.WARNING):
        s = Scheduler(Counters(), tmp_path, "gpu-017", jitter_hours=0, wall=lambda: monday + 2 * HOUR)
    assert "did not finish" in caplog.text
    assert s.due_at() == monday + WEEK  # not re-run at once: a faulty node does not loop


# ---------------------------------------------------------------------------------------------
# what is exported

REPORT = {
    "schema": "nodewarden.validate/1", "host": "gpu-017", "started": "2026-11-23T05:00:00Z",
    "finished": "2026-11-23T05:12:00Z", "profile": "h100_sxm5_80gb", "device": "cuda", "quick": False,
    "exit_code": 1,
    "checks": [
        {"check": "links", "status": "pass", "measurements": [
            {"name": "ib_rate", "value": 4e11, "unit": "bit/s", "device": "mlx5_0/1", "threshold": 4e11, "op": ">="},
            {"name": "ib_rate", "value": 4e11, "unit": "bit/s", "device": "mlx5_1/1", "threshold": True},
            {"name": "firmware", "value": "28.39.1002", "unit": "", "device": None},  # not a number
            {"name": "ok", "value": True, "unit": "", "device": None}]},  # not a measurement either
        {"check": "gemm", "status": "fail", "measurements": [
            {"name": "flops", "value": 5.1e14, "unit": "FLOP/s", "device": "0", "threshold": 6e14, "op": ">="},
            {"name": "max_abs_error", "value": 0.5, "unit": "", "device": "0", "threshold": 1e-3, "op": "<="},
            {"name": "spread", "value": 0.1, "unit": "ratio", "device": "0", "threshold": 0.2, "op": "=="}]},
        {"check": "storage", "status": "skip", "measurements": []},
        "garbage",
    ],
}


def test_report_series() -> None:
    fams = sc.report_series(REPORT)
    status = fams[ex.VAL_STATUS]
    assert status[("gemm", "fail")] == 1 and status[("gemm", "pass")] == 0
    assert sum(v for (c, _), v in status.items() if c == "links") == 1
    assert len(status) == 3 * len(sc.STATUSES)
    assert fams[ex.VAL_VALUE] == {("links", "ib_rate", "bit/s", "mlx5_0/1"): 4e11,
                                  ("links", "ib_rate", "bit/s", "mlx5_1/1"): 4e11,
                                  ("gemm", "flops", "FLOP/s", "0"): 5.1e14,
                                  ("gemm", "max_abs_error", "", "0"): 0.5, ("gemm", "spread", "ratio", "0"): 0.1}
    # a threshold with its bound; none for a boolean threshold or an op the report format lacks
    assert fams[ex.VAL_THRESHOLD] == {("links", "ib_rate", "bit/s", "mlx5_0/1", "min"): 4e11,
                                      ("gemm", "flops", "FLOP/s", "0", "min"): 6e14,
                                      ("gemm", "max_abs_error", "", "0", "max"): 1e-3}
    assert fams[ex.VAL_LAST_RUN] == {(): utc(2026, 11, 23, 5, 12)}
    assert sc.report_series("not a report") == {ex.VAL_STATUS: {}, ex.VAL_VALUE: {}, ex.VAL_THRESHOLD: {}}
    assert sc.STATUSES == __import__("nodewarden.validator.result", fromlist=["STATUSES"]).STATUSES


def test_a_saved_report_is_exported_at_start(tmp_path: Path) -> None:
    (tmp_path / sc.REPORT_FILE).write_text(json.dumps(REPORT))
    c = Counters()
    Scheduler(c, tmp_path, "gpu-017", busy=lambda: False)
    assert c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1
    assert c.get(ex.VAL_LAST_RUN) == utc(2026, 11, 23, 5, 12)
    assert c.get(ex.VAL_EXIT) == 1  # from the report: this agent has not run one yet
    assert c.get(ex.VAL_NEXT) > 0


# ---------------------------------------------------------------------------------------------
# the real subprocess

def test_the_real_scheduler_runs_validate_and_exports_its_report(tmp_path: Path) -> None:
    """A two-second interval and a real ``nodewarden validate --checks links`` on the ConnectX-3
    fixture (one port down: the check fails, exit 1)."""
    c = Counters()
    args = ["--checks", "links", "--profile", "generic", "--sysfs", str(FIXTURES / "cx3-fdr")]
    s = Scheduler(c, tmp_path, "testnode", interval_days=2 / DAY, jitter_hours=0, args=args, timeout_s=60,
                  busy=lambda: False)
    t0 = time.time()
    s.start()
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and (ex.VAL_EXIT.name, ()) not in c.snapshot():
            time.sleep(0.05)
    finally:
        s.stop()
    assert c.get(ex.VAL_EXIT) == 1
    assert c.get(ex.VAL_STATUS, ("links", "fail")) == 1 and c.get(ex.VAL_STATUS, ("links", "pass")) == 0
    assert c.get(ex.VAL_VALUE, ("links", "ib_rate", "bit/s", "mlx4_0/2")) == 56e9
    assert t0 <= c.get(ex.VAL_ATTEMPT) <= c.get(ex.VAL_LAST_RUN) <= time.time()
    report = json.loads((tmp_path / sc.REPORT_FILE).read_text())
    assert report["exit_code"] == 1 and [ch["check"] for ch in report["checks"]] == ["links"]
    assert (tmp_path / sc.LOG_FILE).exists()  # the latest run's output (here a second run the stop cut short)

    # a restart reads it all back
    c2 = Counters()
    s2 = Scheduler(c2, tmp_path, "testnode", interval_days=2 / DAY, jitter_hours=0, args=args, busy=lambda: False)
    for fam in (ex.VAL_STATUS, ex.VAL_VALUE, ex.VAL_LAST_RUN, ex.VAL_EXIT, ex.VAL_ATTEMPT):
        assert {k: v for k, v in c2.snapshot().items() if k[0] == fam.name} == \
            pytest.approx({k: v for k, v in c.snapshot().items() if k[0] == fam.name}, abs=1e-5), fam.name
    assert s2.state.last_exit_code == 1


SLEEPER_S = 60  # how long the stand-in validator runs unless killed


def sleeper(monkeypatch: pytest.MonkeyPatch) -> None:
    """A validator that never finishes (not before SLEEPER_S)."""
    monkeypatch.setattr(sc, "validate_command",
                        lambda report, args: [sys.executable, "-c", f"import time; time.sleep({SLEEPER_S})"])


def test_a_run_past_its_timeout_is_killed_and_the_previous_report_stays(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / sc.REPORT_FILE).write_text(json.dumps(REPORT))
    sleeper(monkeypatch)
    c = Counters()
    s = Scheduler(c, tmp_path, "gpu-017", timeout_s=0.5, kill_grace_s=5, busy=lambda: False)
    t0 = time.monotonic()
    assert s.run_once() == -15  # SIGTERM: killed, not waited for (a wall bound far from SLEEPER_S)
    assert time.monotonic() - t0 < SLEEPER_S / 2
    assert c.get(ex.VAL_EXIT) == -15
    assert c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1  # the previous report's, with its own time
    assert c.get(ex.VAL_LAST_RUN) == utc(2026, 11, 23, 5, 12)
    assert s.state.last_exit_code == -15 and s.state.last_attempt is not None


def test_the_agents_stop_ends_a_run_which_then_does_not_count(tmp_path: Path, monkeypatch) -> None:
    sleeper(monkeypatch)
    c = Counters()
    s = Scheduler(c, tmp_path, "gpu-017", jitter_hours=0, kill_grace_s=5, busy=lambda: False)
    first_due = s.due_at()
    s.start()
    end = time.monotonic() + 10
    while s.running_since is None and time.monotonic() < end:
        time.sleep(0.02)
    assert s.running_since is not None
    t0 = time.monotonic()
    s.stop()
    assert s._thread is not None and not s._thread.is_alive() and s.running_since is None
    assert time.monotonic() - t0 < SLEEPER_S / 2  # terminated, not waited for
    assert s.state.last_attempt is None  # it runs again after the restart
    assert (ex.VAL_ATTEMPT.name, ()) not in c.snapshot()
    assert json.loads((tmp_path / sc.SCHEDULE_FILE).read_text())["last_attempt"] is None
    assert s.due_at() == first_due


def test_nvml_absent_means_idle() -> None:
    assert sc.nvml_gpus_busy() is False  # no NVML library on this machine: the GPUs are taken as idle


def test_busy_while_an_nvml_call_hangs_and_idle_again_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """An NVML call of the agent blocked in the driver past its timeout (here a stand-in that
    waits on an event, under the session's one timeout): the busy probe answers busy at once,
    starting no NVML call; once the call returns, the probe asks NVML again (none here: idle).
    Through the NVML simulator: tests/unit/test_nvml.py::test_busy_probe_through_the_session."""
    inits: list[None] = []  # the NVML sessions the probe opened
    real_init = nvml.init
    monkeypatch.setattr(nvml, "init", lambda: (inits.append(None), real_init())[1])
    release = threading.Event()
    with pytest.raises(nvml.NvmlTimeout):
        nvml.call_with_timeout(release.wait, 0.1, 60, what="a hung collector poll")
    try:
        assert "a hung collector poll" in nvml.blocked_calls()
        assert sc.nvml_gpus_busy(timeout_s=30) is True
        assert inits == []  # answered without starting a call: nothing waited for its 30 s
    finally:
        release.set()
    end = time.monotonic() + 30
    while nvml.blocked_calls() and time.monotonic() < end:
        time.sleep(0.01)
    assert nvml.blocked_calls() == {}
    assert sc.nvml_gpus_busy(timeout_s=30) is False
    assert inits == [None]  # this time NVML was asked (and is absent here)


# ---------------------------------------------------------------------------------------------
# validate.json written by anyone: exported when it changes

def test_report_watcher_exports_each_new_report(tmp_path: Path) -> None:
    import os as _os

    from nodewarden.validator import report as vreport

    assert sc.REPORT_SCHEMA == vreport.SCHEMA
    c = Counters()
    path = tmp_path / sc.REPORT_FILE
    w = sc.ReportWatcher(c, path)
    assert w.poll() is False  # absent: nothing exported
    path.write_text(json.dumps(REPORT))
    assert w.poll() is True
    assert c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1 and c.get(ex.VAL_EXIT, ()) == 1
    assert c.get(ex.VAL_LAST_RUN, ()) == utc(2026, 11, 23, 5, 12)
    assert w.poll() is False  # unchanged: not read again
    # the operator's passing rerun after the repair replaces it
    passed = {**REPORT, "finished": "2026-11-24T09:00:00Z", "exit_code": 0,
              "checks": [{"check": "gemm", "status": "pass", "measurements": []}]}
    path.write_text(json.dumps(passed))
    _os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert w.poll() is True
    assert c.get(ex.VAL_STATUS, ("gemm", "fail")) == 0 and c.get(ex.VAL_STATUS, ("gemm", "pass")) == 1
    assert (ex.VAL_STATUS.name, ("links", "pass")) not in c.snapshot()  # the old report's checks are gone
    assert c.get(ex.VAL_EXIT, ()) == 0 and c.get(ex.VAL_LAST_RUN, ()) == utc(2026, 11, 24, 9, 0)


def test_report_watcher_keeps_the_last_report_over_a_bad_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = Counters()
    path = tmp_path / sc.REPORT_FILE
    path.write_text(json.dumps(REPORT))
    w = sc.ReportWatcher(c, path)
    assert w.poll() is True
    for bad in ('{"checks": [', json.dumps({"schema": "something/2", "checks": []})):
        path.write_text(bad)
        with caplog.at_level(logging.WARNING):
            assert w.poll() is False
    assert "not a nodewarden validator report" in caplog.text and "unreadable" in caplog.text
    assert c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1  # still the last good report
    path.unlink()
    assert w.poll() is False and c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1
    import os as _os
    _os.mkfifo(path)  # a FIFO with no writer: reading it would block the watcher for good
    with caplog.at_level(logging.WARNING):
        assert w.poll() is False
    assert "is not a regular file" in caplog.text and c.get(ex.VAL_STATUS, ("gemm", "fail")) == 1


def test_report_watcher_seen_now_skips_the_file_read_at_start(tmp_path: Path) -> None:
    c = Counters()
    path = tmp_path / sc.REPORT_FILE
    path.write_text(json.dumps(REPORT))
    w = sc.ReportWatcher(c, path)
    w.seen_now()
    assert w.poll() is False and not any(name == ex.VAL_STATUS.name for name, _ in c.snapshot())


def test_report_watcher_skips_another_hosts_report_and_sees_a_chmod(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    import os as _os

    c = Counters()
    path = tmp_path / sc.REPORT_FILE
    path.write_text(json.dumps(REPORT))  # host gpu-017
    w = sc.ReportWatcher(c, path, host="gpu-018")
    with caplog.at_level(logging.WARNING):
        assert w.poll() is False
    assert "report of host 'gpu-017', not of 'gpu-018'" in caplog.text
    assert not any(name == ex.VAL_STATUS.name for name, _ in c.snapshot())
    # the same content made readable later (root reads anything: the mode change is the point)
    w = sc.ReportWatcher(c, path, host="gpu-017")
    _os.chmod(path, 0o600)
    assert w.poll() is True
    assert w.poll() is False
    _os.chmod(path, 0o644)  # ctime changes, content does not: read again
    assert w.poll() is True


# ---------------------------------------------------------------------------------------------
# busy GPUs, as NVML reports them (the NVML simulator, in a child process: the loader reads
# LD_LIBRARY_PATH only when a process starts)

BUSY_THEN_IDLE = r"""
import json, logging, sys, threading
from pathlib import Path
from nodewarden.agent import exporter as ex, schedule as sc
from nodewarden.agent.exporter import Counters
from tests import nvmlsim

nvml_state, state_dir = Path(sys.argv[1]), Path(sys.argv[2])
start, job_ends, end = map(float, sys.argv[3:6])
clock = {"t": start, "job": True}
seen = []  # after every sleep: (fake time, the exported next run, /healthz's validator part)
runs = []
messages = []

class Messages(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())

logging.getLogger("nodewarden.agent.schedule").addHandler(Messages())
logging.getLogger("nodewarden.agent.schedule").setLevel(logging.INFO)

def sleep(stop, seconds):
    clock["t"] += seconds
    if clock["job"] and clock["t"] >= job_ends:  # the job on GPU 5 exits
        nvmlsim.update_gpu(nvml_state, 5, {"processes": []})
        clock["job"] = False
    if clock["t"] >= end:
        stop.set()
    seen.append((clock["t"], s.counters.get(ex.VAL_NEXT), s.health()))
    return stop.is_set()

class Recording(sc.Scheduler):
    def run_once(self, stop=None):
        started = self.begin()
        runs.append((started, self.health()))
        clock["t"] += 20 * 60.0
        self.finish(started, 0, report_expected=False)
        return 0

s = Recording(Counters(), state_dir, "gpu-017", wall=lambda: clock["t"], sleep=sleep)  # busy: the NVML probe
s.run(threading.Event())
print(json.dumps({"runs": runs, "seen": seen, "messages": messages, "next": s.counters.get(ex.VAL_NEXT),
                  "health": s.health()}))
"""


def test_a_due_run_waits_for_the_job_on_the_gpus_through_nvml(tmp_path: Path) -> None:
    """A compute process on GPU 5 (nvmlDeviceGetComputeRunningProcesses through the simulator)
    from before the weekly run is due until 3 h 07 min after: the run is put off, /healthz says
    since when and why and the exported next run is the next look, 30 min apart; the first look
    after the job's end runs it, once, and clears the deferral."""
    import subprocess

    from nodewarden.events import parse_iso_utc
    from tests import nvmlsim

    root = Path(__file__).resolve().parents[2]
    libdir = nvmlsim.build(tmp_path / "lib")
    gpus = nvmlsim.default_gpus(8)
    gpus[5]["processes"] = [{"pid": 4242, "used_memory": 1 << 30}]
    nvml_state = nvmlsim.write_state(tmp_path / "nvml.json", gpus)
    start = utc(2026, 11, 25, 10, 0)  # a Wednesday: the agent's first start; next Monday is days away
    due = start + jitter_offset("gpu-017", 12 * HOUR, WEEK)
    job_ends = due + 3 * HOUR + 7 * 60
    (tmp_path / "state").mkdir()
    env = nvmlsim.env(libdir, nvml_state)
    env["PYTHONPATH"] = str(root)
    p = subprocess.run([sys.executable, "-c", BUSY_THEN_IDLE, str(nvml_state), str(tmp_path / "state"),
                        repr(start), repr(job_ends), repr(start + DAY)],
                       env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])

    looks = [due + k * sc.BUSY_RETRY_S for k in range(1, 8)]  # 7 busy looks; the 7th finds the job gone
    assert looks[-2] < job_ends <= looks[-1]
    (ran_at, health_then), = out["runs"]
    assert ran_at == pytest.approx(looks[-1])
    assert health_then["deferred_since"] is None and health_then["deferred_because"] is None
    # every moment between the due time and the run: deferred since the due time, for busy GPUs,
    # the next look exported and in /healthz
    # (a sleep records what it ends on: the one ending at the due time comes before the first look)
    waiting = [(t, nxt, h) for t, nxt, h in out["seen"] if due + 1 < t < ran_at - 1]
    assert len(waiting) >= len(looks) - 1
    for t, nxt, h in waiting:
        retry = min(x for x in looks if x >= t - 1e-3)  # the look the scheduler is sleeping towards
        assert h["deferred_because"] == sc.BUSY_REASON, t
        assert parse_iso_utc(h["deferred_since"]).timestamp() == pytest.approx(due, abs=1)
        assert nxt == pytest.approx(retry) and parse_iso_utc(h["next_run"]).timestamp() == pytest.approx(retry, abs=1)
    assert all(h["deferred_since"] is None for t, _, h in out["seen"] if t < due)
    assert [m for m in out["messages"] if "GPUs busy" in m] == [
        f"validator run due, but {sc.BUSY_REASON}: retrying every 30 min"]
    # after the run: not deferred, the next run at the next slot (Monday, this host's time)
    assert out["health"]["deferred_since"] is None and out["health"]["deferred_because"] is None
    assert out["next"] == pytest.approx(next_due(ran_at, start, WEEK, jitter_offset("gpu-017", 12 * HOUR, WEEK)))
    assert out["health"]["last_exit_code"] == 0

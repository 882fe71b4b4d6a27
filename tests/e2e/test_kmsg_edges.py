"""End to end, the edges of the real kernel-log path: the ring buffer overflowing while the agent
is down (records lost between its cursor and the buffer's oldest record) and while it runs but
cannot read (its open reader overrun: EPIPE), ``nodewarden events /dev/kmsg`` reading the live
device, and the state directory at restart: a journal whose last line a crash cut, a
``state.json`` of another format or garbage, a state directory that becomes writable again.

As in test_agent_kmsg.py: root only, on request (NODEWARDEN_WRITE_KMSG=1). Every run writes Xid
lines on GPUs of its own random PCI domain and matches its events by their full address
(``DDDD:BB:DD.F``): the ring buffer holds other tests' lines too. The floods write filler
records (no fault) until the device's oldest record is past a given sequence number, so they
fit any ring buffer size (CONFIG_LOG_BUF_SHIFT, ``log_buf_len=``) up to what 15 s of writes fill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kmsgtools import kmsg_refusal, write_kmsg
from test_agent_kmsg import REPO, Agent, agent_env, agents, start_agent, tmpfs, wait_for  # noqa: F401

from tests import envneeds

pytestmark = pytest.mark.kmsg
needs_kmsg = envneeds.needs_kmsg_write(kmsg_refusal())

XID = "nodewarden_gpu_xid_errors_total"
LOST = "nodewarden_collector_kmsg_lost_records_total"
OVERRUNS = "nodewarden_collector_kmsg_overruns_total"
STATE_ERRORS = "nodewarden_collector_state_write_errors_total"
DROPPED = "nodewarden_collector_journal_dropped_records_total"
FLOOD_S = 15.0  # a ring buffer that this many seconds of writes cannot overflow: the test is skipped
FILLER = "x" * 600  # under the kernel's 1 KiB line limit (LOG_LINE_MAX); no fault pattern


class Run:
    """One test run's GPUs: a random PCI domain; Xid 48 lines on its buses."""

    def __init__(self) -> None:
        r = random.Random()
        self.domain = f"{r.randrange(0x1000, 0xffff):04x}"
        self.tag = r.randrange(1 << 30)

    def bdf(self, bus: int) -> str:
        return f"{self.domain}:{bus:02x}:00.0"

    def xid48(self, bus: int) -> str:
        return (f"<3>NVRM: Xid (PCI:{self.domain}:{bus:02x}:00): 48, pid='<unknown>', name=<unknown>, "
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                "physAddr 0x7fffa8860 partition 7, subpartition 1.")

    def labels(self, bus: int) -> dict[str, str]:
        return {"gpu": "", "pci_bus_id": self.bdf(bus), "xid": "48", "category": "uncorrectable"}

    def count(self, a: Agent, bus: int) -> float:
        return a.value(XID, **self.labels(bus))

    def journaled(self, state: Path, bus: int) -> list[dict]:
        return [e for e in journal_lines(state)[0] if e.get("pci_bus_id") == self.bdf(bus)]


def journal_lines(state: Path) -> tuple[list[dict], list[str]]:
    """The journal's records, and its lines that are no JSON (a line a crash cut)."""
    whole: list[dict] = []
    torn: list[str] = []
    for p in sorted(state.glob("events-*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                whole.append(json.loads(line))
            except ValueError:
                torn.append(line)
    return whole, torn


def agent_config(tmp_path: Path) -> Path:
    """The kernel log only: no polled collector, no validator (their state writes aside)."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text("[validator]\nenabled = false\n[collectors]\nnvml = false\ninfiniband = false\n"
                   "edac = false\npcie = false\nnetclass = false\n")
    return cfg


def seq_of(record: bytes) -> int:
    return int(record.split(b",", 2)[1])


def oldest_seq() -> int:
    """Sequence number of the oldest record in the ring buffer: a new reader's first read."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return seq_of(os.read(fd, 16384))
    finally:
        os.close(fd)


def newest_seq() -> int:
    """Sequence number of the newest record in the ring buffer."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    last = b""
    try:
        while True:
            try:
                last = os.read(fd, 16384) or last
            except BlockingIOError:
                break
            except BrokenPipeError:  # overrun while reading: go on from the oldest
                continue
    finally:
        os.close(fd)
    return seq_of(last)


def flood_past(seq: int, tag: int) -> int:
    """Write filler records until the ring buffer no longer holds record ``seq + 1``. Returns the
    records written; skips the test when FLOOD_S seconds of writes do not get there."""
    end = time.monotonic() + FLOOD_S
    n = 0
    while oldest_seq() <= seq + 1:
        if time.monotonic() > end:
            pytest.skip(f"{n} records in {FLOOD_S:g} s did not overflow this kernel's ring buffer")
        for _ in range(50):
            write_kmsg(f"<6>nodewarden-test filler {tag} {n} {FILLER}")
            n += 1
    return n


def seq_in_buffer(text: str) -> int:
    """Sequence number of the newest record in the ring buffer that holds ``text``."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    found = None
    try:
        while True:
            try:
                rec = os.read(fd, 16384)
            except BlockingIOError:
                break
            if text.encode() in rec:
                found = seq_of(rec)
    finally:
        os.close(fd)
    assert found is not None, f"{text!r} is not in the ring buffer"
    return found


def saved_seq(state: Path) -> int:
    return json.loads((state / "state.json").read_text())["kmsg"]["seq"]


# ---------------------------------------------------------------------------------------------
# the ring buffer overflowing

@needs_kmsg
def test_records_overwritten_while_the_agent_is_down_are_counted_as_lost(tmp_path: Path, agents: list[Agent]) -> None:
    """Down, the agent holds no reader: nothing gets EPIPE. At restart the records between its
    saved cursor and the buffer's oldest record are gone, and the sequence gap counts them, once."""
    R = Run()
    state, log, cfg = tmp_path / "state", tmp_path / "agent.log", agent_config(tmp_path)
    a = start_agent(state, log, "--config", str(cfg))
    agents.append(a)
    write_kmsg(R.xid48(0x01))
    wait_for("the first Xid", lambda: R.count(a, 0x01) == 1)
    lost0, over0 = a.value(LOST), a.value(OVERRUNS)
    assert a.stop() == 0
    cursor = saved_seq(state)

    assert flood_past(cursor, R.tag) > 0
    write_kmsg(R.xid48(0x02))
    oldest = oldest_seq()
    assert oldest > cursor + 1

    b = start_agent(state, log, "--config", str(cfg))
    agents.append(b)
    lost = b.value(LOST) - lost0
    (x2,) = R.journaled(state, 0x02)
    # The agent's first record is at or past the oldest seen here (the buffer only moves on) and
    # at or before the Xid it counted: the gap is between those bounds, whoever else writes.
    assert oldest - cursor - 1 <= lost <= x2["attrs"]["seq"] - cursor - 1
    assert b.value(OVERRUNS) == over0  # a fresh reader starts at the oldest record: no EPIPE
    assert R.count(b, 0x01) == 1 and R.count(b, 0x02) == 1
    assert len(R.journaled(state, 0x01)) == 1
    assert b.stop() == 0

    c = start_agent(state, log, "--config", str(cfg))  # the loss is persisted, not counted again
    agents.append(c)
    assert c.value(LOST) - lost0 == lost
    assert R.count(c, 0x02) == 1
    assert c.stop() == 0


@needs_kmsg
def test_a_running_agent_overrun_by_a_burst_counts_the_overrun_and_the_lost_records(
        tmp_path: Path, agents: list[Agent]) -> None:
    """An agent that cannot read (stopped with SIGSTOP: the burst outruns it for sure) while a
    burst larger than the ring buffer is written: its next read gets EPIPE, counted once in
    collector_kmsg_overruns_total; reading goes on at the oldest record and the sequence gap
    counts the records lost."""
    R = Run()
    state, log, cfg = tmp_path / "state", tmp_path / "agent.log", agent_config(tmp_path)
    a = start_agent(state, log, "--config", str(cfg))
    agents.append(a)
    write_kmsg(R.xid48(0x01))
    wait_for("the first Xid", lambda: R.count(a, 0x01) == 1)
    lost0, over0 = a.value(LOST), a.value(OVERRUNS)
    (x1,) = R.journaled(state, 0x01)
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        read_up_to = newest_seq()  # the agent read at most this far
        flood_past(read_up_to, R.tag)
        write_kmsg(R.xid48(0x02))
        oldest = oldest_seq()
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    wait_for("the Xid after the burst", lambda: R.count(a, 0x02) == 1)
    assert a.value(OVERRUNS) - over0 == 1
    lost = a.value(LOST) - lost0
    (x2,) = R.journaled(state, 0x02)
    assert oldest - read_up_to - 1 <= lost <= x2["attrs"]["seq"] - x1["attrs"]["seq"] - 1
    assert R.count(a, 0x01) == 1
    h = a.health()
    assert h["kmsg_readable"] is True
    assert "overrun" in log.read_text()
    assert a.stop() == 0


# ---------------------------------------------------------------------------------------------
# nodewarden events on the live device

@needs_kmsg
def test_events_on_dev_kmsg_reads_the_buffer_and_returns(tmp_path: Path) -> None:
    """``nodewarden events /dev/kmsg`` lists the records the ring buffer holds now and exits (it
    does not follow); lines user space wrote only with --injected."""
    R = Run()
    write_kmsg(R.xid48(0x03))
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    def events(*extra: str) -> list[dict]:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "nodewarden", "events", "--no-cache", *extra, "/dev/kmsg"],
                           cwd=REPO, env=agent_env(), capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr.decode()
        assert time.monotonic() - t0 < 20
        return [e for e in map(json.loads, r.stdout.decode().splitlines()) if e.get("pci_bus_id") == R.bdf(0x03)]

    (e,) = events("--injected")
    assert (e["kind"], e["xid"], e["source"], e["attrs"]["boot_id"]) == ("xid", 48, "kmsg", boot_id)
    assert e["attrs"]["injected"] is True and e["attrs"]["seq"] > 0
    assert events() == []


# ---------------------------------------------------------------------------------------------
# the state directory at restart

@needs_kmsg
def test_a_journal_cut_mid_line_by_a_crash_keeps_every_whole_event(tmp_path: Path, agents: list[Agent]) -> None:
    """A crash in the middle of a journal append, before state.json was written: the journal ends
    mid-line and state.json's cursor is from before. At restart the whole lines count, the torn
    one is logged and ignored, and its event is counted (and journaled) again from the ring
    buffer: each event once."""
    R = Run()
    state, log, cfg = tmp_path / "state", tmp_path / "agent.log", agent_config(tmp_path)
    a = start_agent(state, log, "--config", str(cfg))
    agents.append(a)
    write_kmsg(R.xid48(0x01), R.xid48(0x02))
    wait_for("two Xids", lambda: R.count(a, 0x01) + R.count(a, 0x02) == 2)
    wait_for("state.json past them",
             lambda: saved_seq(state) >= R.journaled(state, 0x02)[0]["attrs"]["seq"])
    before = (state / "state.json").read_bytes()
    write_kmsg(R.xid48(0x03))
    wait_for("the third Xid", lambda: R.count(a, 0x03) == 1)
    assert a.stop() == 0

    (state / "state.json").write_bytes(before)  # the write that did not happen
    (day,) = [p for p in state.glob("events-*.jsonl") if R.bdf(0x03) in p.read_text()]
    text = day.read_bytes()
    last = text.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert R.bdf(0x03).encode() in last  # the last append: the third Xid's line
    day.write_bytes(text[:len(text) - 1 - len(last) // 2])  # cut in its middle, no newline

    b = start_agent(state, log, "--config", str(cfg))
    agents.append(b)
    assert [R.count(b, bus) for bus in (0x01, 0x02, 0x03)] == [1, 1, 1]
    assert [len(R.journaled(state, bus)) for bus in (0x01, 0x02, 0x03)] == [1, 1, 1]
    assert "ends mid-line" in log.read_text()
    assert len(journal_lines(state)[1]) == 1  # the torn line stays, a line of its own
    r = subprocess.run([sys.executable, "-m", "nodewarden", "events", "--stats", "--injected", "--no-cache",
                        str(state)],
                       cwd=REPO, env=agent_env(), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    listed = [e["pci_bus_id"] for e in map(json.loads, r.stdout.decode().splitlines())]
    assert [listed.count(R.bdf(bus)) for bus in (0x01, 0x02, 0x03)] == [1, 1, 1]
    assert json.loads(r.stderr.decode().splitlines()[-1])["unparsed"] == 1  # the torn line, read as what it is
    assert b.stop() == 0
    c = start_agent(state, log, "--config", str(cfg))
    agents.append(c)
    assert [R.count(c, bus) for bus in (0x01, 0x02, 0x03)] == [1, 1, 1]
    assert c.stop() == 0


@needs_kmsg
@pytest.mark.parametrize("content", [
    pytest.param(b'{"format": 2, "kmsg": {"boot_id": null, "seq": 0}, "counters": []}', id="future-format"),
    pytest.param(b"\x00\x00\x00\x00", id="garbage"),
])
def test_a_state_file_of_another_format_is_set_aside_and_the_journal_counts(
        tmp_path: Path, agents: list[Agent], content: bytes) -> None:
    """The contract (nodewarden.agent.state.load_state): a state.json the agent cannot take is
    logged naming the file, renamed state.json.corrupt, and counting starts from empty counters;
    the journal of this boot counts its events again, each once (counters of earlier boots and
    the polled collectors' start over)."""
    R = Run()
    state, log, cfg = tmp_path / "state", tmp_path / "agent.log", agent_config(tmp_path)
    a = start_agent(state, log, "--config", str(cfg))
    agents.append(a)
    write_kmsg(R.xid48(0x01))
    wait_for("the Xid", lambda: R.count(a, 0x01) == 1)
    assert a.stop() == 0
    (state / "state.json").write_bytes(content)

    b = start_agent(state, log, "--config", str(cfg))
    agents.append(b)
    assert R.count(b, 0x01) == 1
    assert len(R.journaled(state, 0x01)) == 1
    assert (state / "state.json.corrupt").read_bytes() == content
    assert f"{state / 'state.json'}: unreadable state" in log.read_text()
    assert b.stop() == 0
    assert json.loads((state / "state.json").read_text())["format"] == 1  # written again, the agent's own


@needs_kmsg
def test_a_state_directory_writable_again_is_written_again(tmp_path: Path, agents: list[Agent]) -> None:
    """An agent started on a read-only state directory counts in memory and reports the failed
    writes (an Xid then is counted but not journaled: reason write_error); once the directory is
    writable again (remounted read-write under the running agent) it saves state.json at its
    next retry and /healthz says so; a restart keeps the counts."""
    R = Run()
    cfg = agent_config(tmp_path)
    with tmpfs(tmp_path / "state") as state:
        log = tmp_path / "agent.log"
        a = start_agent(state, log, "--config", str(cfg))
        agents.append(a)
        write_kmsg(R.xid48(0x01))
        wait_for("the first Xid", lambda: R.count(a, 0x01) == 1)
        assert a.stop() == 0  # a running agent holds agent.lock open: no read-only remount under it
        r = subprocess.run(["mount", "-o", "remount,ro", str(state)], capture_output=True)
        if r.returncode != 0:
            envneeds.need("mount", f"cannot remount read-only: {r.stderr.decode().strip()}")
        try:
            b = start_agent(state, log, "--config", str(cfg))
            agents.append(b)
            assert b.health()["state_dir_writable"] is False
            write_kmsg(R.xid48(0x02))
            wait_for("the Xid written while read-only", lambda: R.count(b, 0x02) == 1)
            wait_for("a state write error", lambda: b.value(STATE_ERRORS) >= 2)  # the probe, then state.json
            assert b.value(DROPPED, reason="write_error") == 1
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(state)], capture_output=True, check=True)
        wait_for("the state directory writable again", lambda: b.health()["state_dir_writable"] is True,
                 deadline_s=15.0)
        saved = json.loads((state / "state.json").read_text())
        assert {"name": XID, "labels": R.labels(0x02), "value": 1.0} in saved["counters"]
        assert saved["kmsg"]["seq"] >= seq_in_buffer(f"PCI:{R.domain}:02:00")  # a cursor past that Xid
        assert b.get("/healthz")[0] == 200
        assert R.journaled(state, 0x02) == []  # counted, not journaled: the journal's write failed
        assert "writable again" in log.read_text()
        assert b.stop() == 0
        c = start_agent(state, log, "--config", str(cfg))
        agents.append(c)
        assert R.count(c, 0x01) == 1 and R.count(c, 0x02) == 1
        assert c.stop() == 0

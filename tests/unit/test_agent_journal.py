"""Nothing lost, nothing doubled: the journal carries the cursor (boot id + seq per record), so
a restart counts what lies past ``state.json`` from the journal and journals nothing twice,
whatever ``state.json`` says; one agent per state directory; analysis counts a journal record
once per (host, boot id, seq). Driven by recorded /dev/kmsg records (test_agent_state's
``Buffer``), a crash made real by SIGKILL in a forked child at the chosen point, and two real
agent processes for the lock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_agent_state import BOOT, EDAC3, MCE, NOISE, XID48, Buffer, ce, journal, mces, start, xid48

from tests import envneeds

from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st

REPO = Path(__file__).resolve().parents[2]


def big_store(d: Path) -> st.StateStore:
    """A store whose bounds a 10,000-record storm of one GPU does not reach."""
    return st.StateStore(d, source_burst=10 ** 6, max_day_bytes=1 << 30)


def kmsg_keys(d: Path) -> list[tuple]:
    return [(e["host"], e["attrs"].get("boot_id"), e["attrs"].get("seq"), e["kind"], e["xid"])
            for e in journal(d) if "seq" in e["attrs"]]


def crash_at_save(state_dir: Path, buf: Buffer) -> None:
    """Start an agent in a forked child that is SIGKILLed the moment it would write state.json:
    its journal lines are appended and fsynced, state.json still holds the old cursor."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            store = big_store(state_dir)
            store.save = lambda state: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
            start(state_dir, buf, store=store)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


# ---------------------------------------------------------------------------------------------
# crash between the journal append and state.json

def test_sigkill_between_journal_and_state_of_a_10000_record_batch_leaves_no_duplicate(tmp_path: Path) -> None:
    """The old restart check read only the journal's last 4 MiB: 5,683 of 10,000 were journaled
    twice. Now the whole part past the cursor is read."""
    buf = Buffer()
    buf.log(XID48)
    start(tmp_path, buf, store=big_store(tmp_path))
    for _ in range(10_000):
        buf.log(XID48)
    crash_at_save(tmp_path, buf)
    assert st.load_state(tmp_path).kmsg.seq == 0  # the cursor before the batch
    assert sum(p.stat().st_size for p in tmp_path.glob("events-*.jsonl")) > 4 << 20
    assert len(journal(tmp_path)) == 10_001
    g = start(tmp_path, buf, store=big_store(tmp_path))
    assert xid48(g) == 10_001
    keys = kmsg_keys(tmp_path)
    assert len(keys) == len(set(keys)) == 10_001
    h = start(tmp_path, buf, store=big_store(tmp_path))  # and again: nothing moves
    assert xid48(h) == 10_001 and len(journal(tmp_path)) == 10_001


def test_journaled_events_the_ring_buffer_overwrote_are_counted_from_the_journal(tmp_path: Path) -> None:
    """After SIGKILL under a storm the journal held 430 more events than the counter: those
    journaled past the cursor had left the ring buffer by the restart. The journal is counted."""
    buf = Buffer()
    buf.log(XID48)
    start(tmp_path, buf, store=big_store(tmp_path))
    for _ in range(2_000):
        buf.log(XID48, NOISE)
    crash_at_save(tmp_path, buf)
    wrapped = Buffer(first_seq=3_001)  # only the newest 1,000 records (seq 3001..4000) are left
    wrapped.records = buf.records[3_001:]
    wrapped.next_seq = buf.next_seq
    g = start(tmp_path, wrapped, store=big_store(tmp_path))
    journaled = sum(1 for e in journal(tmp_path) if e["kind"] == "xid")
    assert journaled == 2_001
    assert xid48(g) == journaled  # events journaled = events counted
    assert g.counters.get(ex.EVENTS, (ex.KERNEL_LOG, "xid")) == journaled
    assert g.counters.get(ex.LOST) == 0  # read before the crash: no gap


def test_an_mce_held_at_the_crash_is_counted_once(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(XID48, MCE[0])  # the MCE head is held: in state.json's held seqs
    start(tmp_path, buf)
    buf.log(MCE[1], MCE[2], EDAC3)  # completes the MCE, then a DIMM error
    crash_at_save(tmp_path, buf)
    assert [e["kind"] for e in journal(tmp_path)] == ["xid", "mce", "cpu_ecc"]
    g = start(tmp_path, buf)
    assert (xid48(g), mces(g), ce(g)) == (1, 1, 3)
    assert [e["kind"] for e in journal(tmp_path)] == ["xid", "mce", "cpu_ecc"]


# ---------------------------------------------------------------------------------------------
# state.json deleted or truncated

@pytest.mark.parametrize("damage", ["deleted", "truncated", "emptied", "bogus-seq"])
def test_a_lost_state_json_does_not_journal_the_ring_buffer_again(tmp_path: Path, damage: str) -> None:
    buf = Buffer()
    buf.log(XID48, NOISE, EDAC3, *MCE)
    f = start(tmp_path, buf)
    buf.log(XID48)
    f.poll(0)
    f.commit(force=True)
    before = journal(tmp_path)
    assert len(before) == 4
    sf = tmp_path / "state.json"
    if damage == "deleted":
        sf.unlink()
    elif damage == "truncated":
        sf.write_bytes(sf.read_bytes()[:40])
    elif damage == "emptied":
        sf.write_bytes(b"")
    else:
        sf.write_text(json.dumps({"format": 1, "kmsg": {"boot_id": BOOT, "seq": -1}, "counters": []}))
    g = start(tmp_path, buf)
    assert journal(tmp_path) == before  # nothing journaled again
    # the counters start over for this boot, from the journal: each event once
    assert (xid48(g), ce(g), mces(g)) == (2, 3, 1)
    assert g.counters.get(ex.LOST) == 0
    buf.log(XID48)  # and a new record after that is journaled once
    g.poll(0)
    assert len(journal(tmp_path)) == 5 and xid48(g) == 3


def test_a_new_boot_ignores_the_old_boots_journal(tmp_path: Path) -> None:
    old = Buffer(boot_id="old-boot")
    old.log(XID48, XID48)
    start(tmp_path, old)
    (tmp_path / "state.json").unlink()
    new = Buffer(boot_id="new-boot")
    new.log(XID48)
    g = start(tmp_path, new)
    assert xid48(g) == 1
    assert len(journal(tmp_path)) == 3


def test_journal_tail_reads_backwards_only_as_far_as_the_cursor(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(*([XID48] * 50))
    start(tmp_path, buf)
    pos = st.KmsgPosition(BOOT, 44, (40,))
    tail = st.journal_tail(tmp_path, BOOT, pos)
    assert [e.attrs["seq"] for e in tail] == [45, 46, 47, 48, 49]  # 40 lies before 44: not reached
    assert [e.attrs["seq"] for e in st.journal_tail(tmp_path, BOOT, None)] == list(range(50))
    assert st.journal_tail(tmp_path, "other-boot", None) == []
    p = st.journal_path(tmp_path, tail[0].time)
    p.write_bytes(p.read_bytes() + b'{"kind":"xid","attrs":{"seq":60,"boot_id":"' + BOOT.encode())  # torn
    assert [e.attrs["seq"] for e in st.journal_tail(tmp_path, BOOT, pos)] == [45, 46, 47, 48, 49]


# ---------------------------------------------------------------------------------------------
# one agent per state directory: two real agent processes

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_config(tmp_path: Path, state: Path) -> tuple[Path, int]:
    port = free_port()
    p = tmp_path / "agent.toml"
    p.write_text(f'listen = "127.0.0.1:{port}"\nstate_dir = "{state}"\nhostname = "n1"\n'
                 "[collectors]\nkernel_log = false\nnvml = false\ninfiniband = false\nedac = false\n"
                 "pcie = false\nnetclass = false\n[validator]\nenabled = false\n")
    return p, port


def start_real_agent(cfg: tuple[Path, int], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m nodewarden agent --config CFG``, returned once /healthz answers (the signal
    handlers are installed by then: SIGTERM is a clean stop)."""
    import urllib.request
    proc = subprocess.Popen([sys.executable, "-m", "nodewarden", "agent", "--config", str(cfg[0])], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{cfg[1]}/healthz", timeout=1):
                return proc
        except OSError:
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)


def test_a_second_agent_on_the_same_state_directory_exits_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    first = start_real_agent(agent_config(tmp_path, state), env)
    try:
        assert (state / st.LOCK_FILE).read_text().strip() == str(first.pid)
        (tmp_path / "second").mkdir()
        second = subprocess.run([sys.executable, "-m", "nodewarden", "agent", "--config",
                                 str(agent_config(tmp_path / "second", state)[0])], cwd=REPO,
                                env=env, capture_output=True, timeout=30)
        assert second.returncode == 2
        msg = second.stderr.decode()
        assert f"in use by another nodewarden agent (pid {first.pid})" in msg and str(state) in msg
        assert first.poll() is None  # the first one runs on
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
    third = start_real_agent(agent_config(tmp_path, state), env)  # released at exit: the next one starts
    try:
        assert (state / st.LOCK_FILE).read_text().strip() == str(third.pid)
    finally:
        third.send_signal(signal.SIGTERM)
        assert third.wait(timeout=20) == 0


def test_lock_state_dir_in_process(tmp_path: Path) -> None:
    fd = st.lock_state_dir(tmp_path)
    try:
        with pytest.raises(st.StateDirBusy, match=f"pid {os.getpid()}"):
            st.lock_state_dir(tmp_path)
    finally:
        os.close(fd)
    os.close(st.lock_state_dir(tmp_path))  # free again


def test_a_read_only_state_directory_is_locked_too(tmp_path: Path) -> None:
    """No lock file can be created there: the directory itself is locked, so two agents on a
    read-only directory still exclude each other (a real read-only mount as root)."""
    from test_agent_state import _tmpfs
    envneeds.root("a read-only mount")
    with _tmpfs(tmp_path / "ro", "1m") as d:
        r = subprocess.run(["mount", "-o", "remount,ro", str(d)], capture_output=True)
        if r.returncode != 0:
            envneeds.need("mount", f"cannot remount read-only: {r.stderr.decode().strip()}")
        fd = st.lock_state_dir(d)
        try:
            assert not (d / st.LOCK_FILE).exists()
            with pytest.raises(st.StateDirBusy, match="in use by another nodewarden agent"):
                st.lock_state_dir(d)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# analysis: one record per (host, boot id, seq)

def test_analysis_counts_a_journal_record_once_per_host_boot_and_seq(tmp_path: Path) -> None:
    from nodewarden.analysis.ingest import ingest
    buf = Buffer()
    buf.log(XID48, XID48, EDAC3)
    (tmp_path / "node01").mkdir()
    start(tmp_path / "node01", buf)
    path = next((tmp_path / "node01").glob("events-*.jsonl"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines + lines[:2]) + "\n")  # two agents wrote the same records
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(path, backup / path.name)  # and a copy of the file elsewhere
    other = Buffer(boot_id="6f0c2a1e-0000-4000-8000-000000000002")  # the next boot: same seqs, new events
    other.log(XID48.replace("0000:07:00", "0000:0a:00"))
    (tmp_path / "node01b").mkdir()
    start(tmp_path / "node01b", other)
    events, stats = ingest([str(tmp_path / "node01"), str(backup), str(tmp_path / "node01b")])
    got = sorted((e.attrs["boot_id"][-1], e.attrs["seq"], e.kind) for e in events)
    assert got == [("1", 0, "xid"), ("1", 1, "xid"), ("1", 2, "cpu_ecc"), ("2", 0, "xid")]
    assert stats.journal_duplicates == 2 + 5  # two in the file, its five lines in the copy
    one, stats1 = ingest([str(path)])
    assert len(list(one)) == 3 and stats1.journal_duplicates == 2  # within one file too


def test_journal_tail_stops_one_file_past_the_cursor(tmp_path: Path) -> None:
    """A long uptime has many day files: the restart reads the newest ones only, back to the
    cursor and one file more, never the whole history."""
    import datetime as dt
    from nodewarden.events import FaultEvent
    days = [dt.datetime(2026, 11, d, 12, tzinfo=dt.timezone.utc) for d in (26, 27, 28, 29)]
    store = st.StateStore(tmp_path)

    def mce(t: dt.datetime, seq: int) -> FaultEvent:
        return FaultEvent(kind="mce", message="m", raw="r", time=t, device="cpu0/bank7",
                          attrs={"seq": seq, "boot_id": BOOT})

    for i, t in enumerate(days):
        store.journal([mce(t, s) for s in range(3 * i, 3 * i + 3) if s != 7])
    # seq 7 was held (an MCE waiting for its last line) when state.json was written at seq 10;
    # completed later, it was journaled under its own date, the 28th, after seq 8
    store.journal([mce(days[2], 7)])
    opened: list[str] = []
    real_open = open

    def spy(path, *a, **k):  # noqa: ANN001
        opened.append(Path(path).name)
        return real_open(path, *a, **k)

    import builtins
    builtins.open, saved = spy, builtins.open
    try:
        tail = st.journal_tail(tmp_path, BOOT, st.KmsgPosition(BOOT, 10, (7,)))
    finally:
        builtins.open = saved
    assert [e.attrs["seq"] for e in tail] == [7, 11]
    assert opened == ["events-2026-11-29.jsonl", "events-2026-11-28.jsonl"]


def test_events_prints_a_doubly_journaled_record_once(tmp_path: Path, capsys) -> None:
    """Two agents on one state directory used to double every count of `events`/`analyze`."""
    from nodewarden.cli import main
    buf = Buffer()
    buf.log(XID48, EDAC3)
    start(tmp_path, buf)
    path = next(tmp_path.glob("events-*.jsonl"))
    path.write_text(path.read_text() * 2)  # every record journaled twice
    assert main(["events", "--stats", str(path)]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["xid", "cpu_ecc"]
    assert json.loads(err.strip().splitlines()[-1])["journal_duplicates"] == 2


def test_a_flash_cut_journaled_before_the_crash_is_counted_once_and_not_journaled_again(tmp_path: Path) -> None:
    """The link down/up pair past the cursor is counted from the journal and shown to the
    flash-cut detector; the cut it derives is counted, and not journaled a second time."""
    from nodewarden.agent.exporter import Counters
    from nodewarden.parsing.flashcut import FlashCutDetector
    from nodewarden.agent.follower import KmsgFollower
    from nodewarden.agent.poller import FlashCuts
    from test_agent_state import BOOT_TIME

    def run(buf: Buffer, crash: bool = False) -> KmsgFollower:
        saved = st.load_state(tmp_path)
        counters = Counters()
        counters.load_json(saved.counters)
        store = st.StateStore(tmp_path)
        if crash:
            store.save = lambda state: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
        flash = FlashCuts(FlashCutDetector(max_seconds=60), counters, host="node01")
        f = KmsgFollower(buf.reader(), counters, store, host="node01", gpu_of=lambda pci: "", boot_time=BOOT_TIME,
                         position=saved.kmsg, clock=lambda: 1.0, observer=flash.observe_events)
        f.catch_up()
        return f

    buf = Buffer()
    buf.log(NOISE)
    run(buf)
    buf.log("mlx5_core 0000:53:00.0 mlx5_0: Port: 1 Link DOWN", "mlx5_core 0000:53:00.0 mlx5_0: Port: 1 Link ACTIVE")
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        try:
            run(buf, crash=True)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    kinds = sorted(e["kind"] for e in journal(tmp_path))
    assert kinds == ["ib_flash_cut", "ib_link_down", "ib_link_up"]
    g = run(buf)
    assert g.counters.get(ex.FLASH_CUTS, ("mlx5_0", "1")) == 1
    assert g.counters.get(ex.IB_LINK, ("mlx5_0", "1", "DOWN")) == 1
    assert sorted(e["kind"] for e in journal(tmp_path)) == kinds


# ---------------------------------------------------------------------------------------------
# a state.json the agent did not write as it is

def _edit_state(d: Path, edit) -> None:
    doc = json.loads((d / "state.json").read_text())
    edit(doc)
    (d / "state.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("edit", [
    lambda doc: doc["kmsg"].update(boot_id="11111111-2222-3333-4444-555555555555"),  # a copied or restored file
    lambda doc: doc["kmsg"].update(seq=doc["kmsg"]["seq"] + 10 ** 6),
    lambda doc: doc["counters"][0].update(value=doc["counters"][0]["value"] + 1),
], ids=["boot-id", "cursor", "counter"])
def test_a_hand_edited_state_file_is_set_aside_and_nothing_counted_twice(tmp_path: Path, edit) -> None:
    """A tester changed state.json's boot id (or moved its cursor past the buffer's end): the
    journal's events of this boot were counted again on top of the saved counters (610 -> 1220).
    state.json carries a checksum now: an edited file is set aside like a corrupt one."""
    buf = Buffer()
    for _ in range(5):
        buf.log(XID48, NOISE)
    start(tmp_path, buf)
    _edit_state(tmp_path, edit)
    g = start(tmp_path, buf)
    assert (tmp_path / "state.json.corrupt").exists()
    assert xid48(g) == 5  # rebuilt from the journal of this boot, once
    assert len(journal(tmp_path)) == 5


def test_a_cursor_past_the_buffer_of_the_same_boot_resumes_after_the_journal(tmp_path: Path) -> None:
    """A cursor of this boot past the ring buffer's end cannot be a reboot (sequence numbers never
    go back within a boot): it was counted as one, and the whole buffer again (3600 -> 7600).
    Even when such a cursor carries a valid checksum, the journal says what was counted."""
    buf = Buffer()
    for _ in range(4):
        buf.log(XID48)
    f = start(tmp_path, buf)
    saved = st.load_state(tmp_path)
    st.StateStore(tmp_path).save(st.AgentState(kmsg=st.KmsgPosition(BOOT, saved.kmsg.seq + 10 ** 6),
                                               counters=saved.counters))
    buf.log(XID48)  # logged while the agent was down, after the last journaled record
    g = start(tmp_path, buf)
    assert xid48(f) == 4 and xid48(g) == 5
    assert len(journal(tmp_path)) == 5
    assert st.load_state(tmp_path).kmsg.seq == 4


def test_a_state_file_without_checksum_is_read(tmp_path: Path) -> None:
    """state.json of nodewarden 0.1.0 has no checksum: its cursor and counters still count."""
    buf = Buffer()
    buf.log(XID48, XID48)
    start(tmp_path, buf)
    _edit_state(tmp_path, lambda doc: doc.pop("sha256"))
    g = start(tmp_path, buf)
    assert not (tmp_path / "state.json.corrupt").exists() and xid48(g) == 2

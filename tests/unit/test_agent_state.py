"""The agent's state directory and the follower's exactly-once counting across restarts and
crashes, driven by recorded /dev/kmsg records (``prio,seq,usec,flags;message``) so each crash
point is chosen, not hoped for. The real device is exercised in tests/e2e/test_agent_kmsg.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests import envneeds

from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent.exporter import Counters
from nodewarden.agent.follower import KmsgFollower, held_seqs, record_head
from nodewarden.events import FaultEvent

BOOT = "6f0c2a1e-0000-4000-8000-000000000001"
BOOT_TIME = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.timezone.utc)

XID48 = ("NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
         "error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.")
EDAC3 = ("EDAC MC0: 3 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923 "
         "offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)")
MCE = ["mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: 9c00004000010091",
       "mce: [Hardware Error]: TSC 12ab ADDR 2ffd4a3c0 MISC 140401086",
       "mce: [Hardware Error]: PROCESSOR 0:806f8 TIME 1732700000 SOCKET 0 APIC 0 microcode 2b000571"]
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"


def rec(seq: int, msg: str) -> str:
    """A record as read(2) from /dev/kmsg returns it (kernel facility, priority 3)."""
    return f"3,{seq},{1_000_000 + seq * 1000},-;{msg}\n"


class Buffer:
    """The kernel ring buffer as a list of records, read like KmsgReader reads /dev/kmsg: each
    reader (one per agent start) begins at the oldest record."""

    def __init__(self, boot_id: str | None = BOOT, first_seq: int = 0) -> None:
        self.boot_id = boot_id
        self.records: list[str] = []
        self.next_seq = first_seq

    def log(self, *msgs: str) -> None:
        for m in msgs:
            self.records.append(rec(self.next_seq, m))
            self.next_seq += 1

    def reader(self) -> Reader:
        return Reader(self)


class Reader:
    def __init__(self, buf: Buffer) -> None:
        self.buf = buf
        self.pos = 0
        self.boot_id = buf.boot_id
        self.overruns = 0

    def read_available(self, limit: int = 100_000) -> list[str]:
        out = self.buf.records[self.pos:self.pos + limit]
        self.pos += len(out)
        return out

    def wait(self, timeout: float) -> bool:
        return self.pos < len(self.buf.records)


def start(state_dir: Path, buf: Buffer, now: float = 1.0, store: st.StateStore | None = None) -> KmsgFollower:
    """What the agent does at start: load state.json and counters, catch up (the follower reads
    the journal past the cursor). ``now``: seconds since boot (the records are stamped just
    after 1 s)."""
    saved = st.load_state(state_dir)
    counters = Counters()
    counters.load_json(saved.counters)
    f = KmsgFollower(buf.reader(), counters, store or st.StateStore(state_dir), host="node01", gpu_of=lambda pci: "",
                     boot_time=BOOT_TIME, position=saved.kmsg, clock=lambda: now)
    f.catch_up()
    return f


def xid48(f: KmsgFollower) -> float:
    return f.counters.get(ex.XID, ("", "0000:07:00.0", "48", "uncorrectable"))


def ce(f: KmsgFollower) -> float:
    return f.counters.get(ex.EDAC_LOGGED, ("mc0", "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", "corrected"))


def mces(f: KmsgFollower) -> float:
    return f.counters.get(ex.MCE, ("corrected",))


def journal(state_dir: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(state_dir.glob("events-*.jsonl"))
            for line in p.read_text().splitlines() if line]


# ---------------------------------------------------------------------------------------------
# state.json

def test_state_round_trip(tmp_path: Path) -> None:
    s = st.AgentState(kmsg=st.KmsgPosition(BOOT, 1234, (1230,)),
                      counters=[{"name": ex.MCE.name, "labels": {"type": "corrected"}, "value": 2.0}])
    store = st.StateStore(tmp_path)
    assert store.save(s)
    got = st.load_state(tmp_path)
    assert got == s
    assert json.loads((tmp_path / "state.json").read_text())["format"] == st.FORMAT


def test_missing_state_is_empty(tmp_path: Path) -> None:
    assert st.load_state(tmp_path) == st.AgentState()


def test_leftover_temp_file_is_ignored_and_cleaned(tmp_path: Path) -> None:
    st.StateStore(tmp_path).save(st.AgentState(kmsg=st.KmsgPosition(BOOT, 7)))
    leftover = tmp_path / "state.json.tmp-abc123"
    leftover.write_text('{"format": 1, "kmsg": {"boot_id": "x", "seq": 99')  # cut by a crash mid-write
    assert st.load_state(tmp_path).kmsg == st.KmsgPosition(BOOT, 7)
    assert st.remove_temp_files(tmp_path) == 1
    assert not leftover.exists()


def test_write_atomic_leaves_no_temp_file_and_replaces(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    st.write_atomic(p, b"one")
    st.write_atomic(p, b"two")
    assert p.read_bytes() == b"two"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["state.json"]


def test_corrupt_state_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    assert st.load_state(tmp_path) == st.AgentState()
    assert (tmp_path / "state.json.corrupt").read_text() == "{not json"


GOOD_SERIES = '{"name": "nodewarden_mce_events_total", "labels": {"type": "corrected"}, "value": %s}'


@pytest.mark.parametrize("text", [
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "1e400"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "NaN"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "Infinity"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "-Infinity"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "-3"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % "true"),
    '{"format": 1, "kmsg": null, "counters": [%s]}' % (GOOD_SERIES % '"3"'),
    '{"format": 1, "kmsg": null, "counters": [{"name": 7, "value": 1}]}',
    '{"format": 1, "kmsg": null, "counters": ["x"]}',
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": -5}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": 1e400}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": 2.5}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": true}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": "12"}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": 18446744073709551616}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": 3, "held": [-1]}, "counters": []}' % BOOT,
    '{"format": 1, "kmsg": {"boot_id": 5, "seq": 3}, "counters": []}',
    '{"format": 1, "kmsg": {"boot_id": "%s", "seq": 3}, "counters": []' % BOOT,  # truncated
    '',  # truncated to nothing
    pytest.param('[' * 100_000, id="too-deep"),  # too deep for the parser
])
def test_a_state_with_bogus_numbers_is_set_aside_and_nothing_is_counted_from_it(tmp_path: Path, text: str) -> None:
    (tmp_path / "state.json").write_text(text)
    assert st.load_state(tmp_path) == st.AgentState()
    assert (tmp_path / "state.json.corrupt").read_text() == text
    assert not (tmp_path / "state.json").exists()
    buf = Buffer()
    buf.log(XID48, NOISE)
    (tmp_path / "state.json").write_text(text)
    f = start(tmp_path, buf)  # no crash, no bogus "lost" count, the buffer counted once
    assert xid48(f) == 1 and f.counters.get(ex.LOST) == 0 and mces(f) == 0
    assert st.load_state(tmp_path).kmsg == st.KmsgPosition(BOOT, 1)


def test_prepare_state_dir(tmp_path: Path) -> None:
    assert st.prepare_state_dir(tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(st.StateDirError, match="file"):
        st.prepare_state_dir(tmp_path / "file")


# ---------------------------------------------------------------------------------------------
# journal

def test_journal_appends_json_lines_per_utc_day(tmp_path: Path) -> None:
    e1 = FaultEvent(kind="xid", message="m", raw="r", code=48, time=dt.datetime(2026, 11, 29, 23, 59, tzinfo=dt.timezone.utc),
                    attrs={"pci_bus_id": "0000:07:00.0", "seq": 5, "boot_id": BOOT})
    e2 = FaultEvent(kind="mce", message="m2", raw="r2", time=dt.datetime(2026, 11, 30, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=3))))
    assert st.append_journal(tmp_path, [e1, e2]) == 2
    # 01:00+03:00 is 22:00 UTC on the 29th: both in one file
    assert [p.name for p in tmp_path.iterdir()] == ["events-2026-11-29.jsonl"]
    back = [FaultEvent.from_dict(d) for d in journal(tmp_path)]
    assert back[0].code == 48 and back[0].pci_bus_id == "0000:07:00.0" and back[1].kind == "mce"


def test_journal_recovers_from_a_torn_last_line(tmp_path: Path) -> None:
    e = FaultEvent(kind="mce", message="m", raw="r", time=BOOT_TIME)
    p = st.journal_path(tmp_path, BOOT_TIME)
    p.write_text('{"kind":"xid","mess')  # a crash or a full disk cut the last write
    st.append_journal(tmp_path, [e])
    lines = p.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["kind"] == "mce"


# ---------------------------------------------------------------------------------------------
# exactly once across restarts and crashes

def test_restart_counts_records_logged_while_down_and_nothing_twice(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(NOISE, XID48, EDAC3)
    f = start(tmp_path, buf)
    assert (xid48(f), ce(f)) == (1, 3)
    buf.log(XID48, NOISE)
    f.poll(0)
    f.commit(force=True)  # what a clean stop does
    assert (xid48(f), ce(f)) == (2, 3)
    buf.log(EDAC3, EDAC3)  # while the agent is down
    g = start(tmp_path, buf)
    assert (xid48(g), ce(g)) == (2, 9)
    assert len(journal(tmp_path)) == 5
    h = start(tmp_path, buf)  # and once more, with nothing new
    assert (xid48(h), ce(h)) == (2, 9)
    assert h.counters.get(ex.EVENTS, (ex.KERNEL_LOG, "cpu_ecc")) == 3


def test_crash_before_any_state_write_recounts_exactly(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(XID48)
    start(tmp_path, buf)
    buf.log(XID48, EDAC3)
    crashed = start(tmp_path, buf)
    buf.log(XID48)
    crashed.handle(crashed.source.read_available())  # counted in memory, never written: killed here
    g = start(tmp_path, buf)
    assert (xid48(g), ce(g)) == (3, 3)


def test_crash_between_journal_and_state_write_journals_once(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(XID48)
    f = start(tmp_path, buf)
    buf.log(XID48, EDAC3)
    f.handle(f.source.read_available())  # journal written (fsynced) ...
    assert len(journal(tmp_path)) == 3
    # ... killed before state.json: it still says 1 event
    assert st.load_state(tmp_path).kmsg.seq == 0
    g = start(tmp_path, buf)
    assert (xid48(g), ce(g)) == (2, 3)
    assert len(journal(tmp_path)) == 3


@pytest.mark.parametrize("lines_before_crash", [1, 2])
def test_mce_record_cut_by_a_crash_is_counted_once(tmp_path: Path, lines_before_crash: int) -> None:
    buf = Buffer()
    buf.log(NOISE, *MCE[:lines_before_crash])
    f = start(tmp_path, buf)
    assert mces(f) == 0 and held_seqs(f.parser) == (1,)
    assert st.load_state(tmp_path).kmsg == st.KmsgPosition(BOOT, lines_before_crash, (1,))
    buf.log(*MCE[lines_before_crash:], XID48)
    g = start(tmp_path, buf)
    assert (mces(g), xid48(g)) == (1, 1)
    ev = [e for e in journal(tmp_path) if e["kind"] == "mce"]
    assert len(ev) == 1 and ev[0]["attrs"]["cpuid"] == 0x806f8  # completed with all its lines


def test_mce_flushed_on_idle_is_not_recounted_when_its_lines_come_later(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(MCE[0])
    f = start(tmp_path, buf)
    f.poll(0)  # idle: the held record is flushed and counted
    assert mces(f) == 1 and held_seqs(f.parser) == ()
    f.commit(force=True)
    buf.log(MCE[1], MCE[2])
    g = start(tmp_path, buf)  # replay joins the three lines into the same event: already counted
    assert mces(g) == 1


def test_incomplete_record_long_before_start_is_completed_at_start(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(MCE[0], NOISE)
    f = start(tmp_path, buf, now=3600.0)  # an hour later: the rest of the record is not coming
    assert mces(f) == 1 and held_seqs(f.parser) == ()
    assert st.load_state(tmp_path).kmsg == st.KmsgPosition(BOOT, 1, ())
    buf.log(MCE[1], MCE[2])
    assert mces(start(tmp_path, buf)) == 1


def test_split_xid79_held_across_a_restart(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log("NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has")
    f = start(tmp_path, buf)
    assert held_seqs(f.parser) == (0,)
    buf.log("NVRM: fallen off the bus and is not responding to commands.")
    g = start(tmp_path, buf)
    assert g.counters.get(ex.XID, ("", "0000:b3:00.0", "79", "uncorrectable")) == 1


def test_new_boot_counts_the_whole_buffer(tmp_path: Path) -> None:
    old = Buffer(boot_id="old-boot")
    old.log(XID48, XID48, XID48)
    start(tmp_path, old)
    new = Buffer(boot_id="new-boot")
    new.log(XID48)
    g = start(tmp_path, new)
    assert xid48(g) == 4


def test_unknown_boot_id_and_a_buffer_that_ends_before_the_cursor_is_a_reboot(tmp_path: Path) -> None:
    old = Buffer(boot_id=None)
    old.log(NOISE, NOISE, NOISE, XID48)
    start(tmp_path, old)
    new = Buffer(boot_id=None)
    new.log(XID48)
    assert xid48(start(tmp_path, new)) == 2


def test_records_dropped_from_the_buffer_while_down_are_counted_as_lost(tmp_path: Path) -> None:
    buf = Buffer()
    buf.log(XID48, NOISE)  # seq 0, 1
    start(tmp_path, buf)
    wrapped = Buffer(first_seq=6)  # seqs 2..5 were overwritten before the agent came back
    wrapped.log(XID48)
    g = start(tmp_path, wrapped)
    assert g.counters.get(ex.LOST) == 4 and xid48(g) == 2
    assert start(tmp_path, wrapped).counters.get(ex.LOST) == 4  # and not again


def test_record_head() -> None:
    assert record_head("6,339,653309233,-;hello\n") == (339, 653309233)
    assert record_head("garbage") == (None, None)


# ---------------------------------------------------------------------------------------------
# read-only and full state directories

@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        envneeds.need("mount", f"cannot mount a tmpfs to make a read-only/full directory: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def unwritable_dir(tmp_path: Path, how: str) -> Iterator[Path]:
    """A state directory that has a state.json and then becomes read-only or full -- for real:
    a read-only remount or a full tmpfs as root, permission bits otherwise (root ignores them)."""
    d = tmp_path / "state"
    if os.geteuid() != 0:
        if how == "full":
            envneeds.root("a full file system (mount a small tmpfs)")
        d.mkdir()
        yield d
        return
    with _tmpfs(d, "64k" if how == "full" else "1m"):
        yield d


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_unwritable_state_dir_keeps_counting_and_reports_errors(tmp_path: Path, how: str) -> None:
    with unwritable_dir(tmp_path, how) as d:
        buf = Buffer()
        buf.log(XID48)
        f = start(d, buf)
        assert xid48(f) == 1
        if how == "read-only":
            if os.geteuid() == 0:
                r = subprocess.run(["mount", "-o", "remount,ro", str(d)], capture_output=True)
                if r.returncode != 0:
                    envneeds.need("mount", f"cannot remount read-only: {r.stderr.decode().strip()}")
            else:
                d.chmod(0o555)
        else:
            fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * 4096)
            finally:
                os.close(fd)
        try:
            buf.log(EDAC3, XID48)
            f.poll(0)
            assert (xid48(f), ce(f)) == (2, 3)  # counting goes on
            assert f.store.write_errors >= 1 and not f.store.writable
            assert f.counters.get(ex.STATE_ERRORS) == f.store.write_errors
            snap = f.counters.snapshot()
            assert snap[(ex.STATE_ERRORS.name, ())] >= 1
        finally:
            if how == "read-only" and os.geteuid() != 0:
                d.chmod(0o755)


# ---------------------------------------------------------------------------------------------
# journal bounds: age and total size, oldest files first, the newest never deleted

def day_file(state_dir: Path, day: dt.date, size: int) -> Path:
    p = state_dir / f"events-{day.isoformat()}.jsonl"
    p.write_bytes((b'{"kind":"xid"}' + b" " * 100 + b"\n") * (size // 115) + b"\n" * (size % 115))
    return p


def names(state_dir: Path) -> list[str]:
    return sorted(p.name for p in state_dir.glob("events-*.jsonl"))


TODAY = dt.date(2026, 11, 29)


def test_journal_files_older_than_max_age_are_deleted(tmp_path: Path) -> None:
    def name(age: int) -> str:
        return f"events-{(TODAY - dt.timedelta(days=age)).isoformat()}.jsonl"

    for age in (500, 401, 400, 30, 0):
        day_file(tmp_path, TODAY - dt.timedelta(days=age), 1000)
    (tmp_path / "events-notadate.jsonl").write_text("x\n")  # not the agent's: left alone
    store = st.StateStore(tmp_path, max_age_days=400, today=lambda: TODAY)
    deleted = store.prune_journal()
    assert sorted(p.name for p in deleted) == [name(500), name(401)]
    assert names(tmp_path) == sorted([name(400), name(30), name(0), "events-notadate.jsonl"])
    assert store.journal_bytes == 3000


def test_journal_to_prune_is_by_age_only() -> None:
    files = [(TODAY - dt.timedelta(days=d), Path(f"f{d}"), 100) for d in (3, 2, 1, 0)]
    assert st.journal_to_prune(files, TODAY, max_age_days=400) == []
    assert st.journal_to_prune(files, TODAY, max_age_days=1.5) == [Path("f3"), Path("f2")]
    assert st.journal_to_prune(files, TODAY, max_age_days=0) == [Path("f3"), Path("f2"), Path("f1")]
    assert st.journal_to_prune(files, TODAY, max_age_days=1e6) == []  # was OverflowError


def storm_store(state_dir: Path, **kw) -> st.StateStore:
    return st.StateStore(state_dir, today=lambda: TODAY, **kw)


def test_a_storm_keeps_every_past_day_and_bounds_the_day_file(tmp_path: Path) -> None:
    """30 older day files and max_bytes 8 MiB, then 10,000 Xids of one GPU at once: the old
    store deleted all 30 files, oldest first. Now they all stay, today's file stops at
    max_day_bytes, the rest is counted as dropped, and the counters count all 10,000."""
    old = [day_file(tmp_path, TODAY - dt.timedelta(days=d), 100_000) for d in range(30, 0, -1)]
    before = {p: p.read_bytes() for p in old}
    store = storm_store(tmp_path, max_bytes=8 << 20, max_day_bytes=1 << 20, source_burst=10 ** 6)
    buf = Buffer()
    for _ in range(10_000):
        buf.log(XID48)
    f = start(tmp_path, buf, store=store)
    assert xid48(f) == 10_000
    assert {p: p.read_bytes() for p in old} == before  # history untouched
    today = st.journal_path(tmp_path, BOOT_TIME)
    assert today.stat().st_size <= 1 << 20
    kept = len(today.read_text().splitlines())
    assert 0 < kept < 10_000
    assert store.journal_dropped["day_bytes"] == 10_000 - kept
    assert store.journal_written == kept
    assert store.journal_bytes == sum(size for _, _, size in st.journal_files(tmp_path))


def test_the_next_day_starts_a_new_file_after_a_full_one(tmp_path: Path) -> None:
    day = [TODAY]
    store = st.StateStore(tmp_path, today=lambda: day[0], max_day_bytes=2000, source_burst=100)
    now = dt.datetime.combine(TODAY, dt.time(12), dt.timezone.utc)
    ev1 = FaultEvent(kind="mce", message="m" * 300, raw="r" * 300, time=now)
    for _ in range(10):
        assert store.journal([ev1])
    size = st.journal_path(tmp_path, now).stat().st_size
    assert size <= 2000 and store.journal_bytes == size
    assert store.journal_dropped["day_bytes"] == 10 - len(journal(tmp_path)) > 0
    day[0] = TODAY + dt.timedelta(days=1)
    assert store.journal([dataclasses.replace(ev1, time=now + dt.timedelta(days=1))])
    assert names(tmp_path) == [f"events-{TODAY.isoformat()}.jsonl", f"events-{day[0].isoformat()}.jsonl"]


def test_past_max_bytes_new_records_are_dropped_and_no_file_is_deleted(tmp_path: Path, caplog) -> None:
    old = [day_file(tmp_path, TODAY - dt.timedelta(days=d), 1500) for d in (3, 2, 1)]
    store = storm_store(tmp_path, max_bytes=5000)
    store.prune_journal()
    assert store.journal_bytes == 4500
    now = dt.datetime.combine(TODAY, dt.time(12), dt.timezone.utc)
    events = [FaultEvent(kind="mce", message="m" * 50, raw="r" * 50, time=now, device=f"cpu{i}") for i in range(5)]
    assert store.journal(events)
    assert all(p.exists() for p in old)
    assert store.journal_bytes == sum(size for _, _, size in st.journal_files(tmp_path)) <= 5000
    written = len(st.journal_path(tmp_path, now).read_text().splitlines())
    assert written == store.journal_written < 5
    assert store.journal_dropped["total_bytes"] == 5 - written
    assert caplog.text.count("counted but not journaled") == 1


def test_one_sources_storm_does_not_crowd_out_the_others(tmp_path: Path) -> None:
    clock = [0.0]
    store = storm_store(tmp_path, source_burst=3, source_rate=0.5, clock=lambda: clock[0])
    now = dt.datetime.combine(TODAY, dt.time(12), dt.timezone.utc)

    def xid(dev: str) -> FaultEvent:
        return FaultEvent(kind="xid", code=48, message="m", raw="r", time=now, device=dev)

    assert store.journal([xid("0000:07:00.0") for _ in range(10)] + [xid("0000:0a:00.0")])
    assert store.journal_written == 4 and store.journal_dropped["source_rate"] == 7
    clock[0] = 4.0  # two tokens back
    assert store.journal([xid("0000:07:00.0") for _ in range(5)])
    assert store.journal_written == 6 and store.journal_dropped["source_rate"] == 10
    devices = [d["device"] for d in journal(tmp_path)]
    assert devices.count("0000:0a:00.0") == 1 and devices.count("0000:07:00.0") == 5


def test_journal_bytes_gauge_at_start(tmp_path: Path) -> None:
    day_file(tmp_path, TODAY, 1234)
    store = st.StateStore(tmp_path, today=lambda: TODAY)
    store.prune_journal()
    assert store.journal_bytes == 1234

"""An agent state directory given to events/analyze: its event journal is read, the agent's own
files (state.json, schedule.json, validate.json, validate.log, agent.lock, temp copies) are not
taken for kernel logs. The directory is written by the agent's own writers."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path

import pytest

from nodewarden import cli
from nodewarden.agent import schedule, state
from nodewarden.analysis.ingest import ingest
from nodewarden.events import FaultEvent
from nodewarden.logfiles import paths

T0 = dt.datetime(2026, 11, 30, 8, 15, 2, tzinfo=dt.timezone.utc)
# A kernel line the validator's output may quote: read as a log it would give a second Xid 79.
XID_LINE = ("[ 4402.103322] NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, name=python, "
            "GPU has fallen off the bus.")


def journaled_event() -> FaultEvent:
    return FaultEvent(kind="xid", message="NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, DBE", raw="<3>NVRM",
                      time=T0, time_kind="wall", host="node07", source="kmsg", device="0000:18:00.0", code=48)


def make_state_dir(d: Path) -> Path:
    """A state directory as a running agent leaves it: lock, state, one day's journal, the
    validator's schedule, report and output, a temp file a crash left."""
    d = state.prepare_state_dir(d)
    fd = state.lock_state_dir(d)
    os.close(fd)
    store = state.StateStore(d)
    assert store.save(state.AgentState(kmsg=state.KmsgPosition(boot_id="7c1d", seq=991),
                                       counters=[]))
    assert store.journal([journaled_event()])
    state.write_atomic(d / schedule.SCHEDULE_FILE,
                       json.dumps(schedule.ScheduleState(first_seen=T0.timestamp()).to_dict()).encode())
    (d / schedule.REPORT_FILE).write_text(json.dumps({"schema": schedule.REPORT_SCHEMA, "checks": []}) + "\n")
    (d / schedule.LOG_FILE).write_text(f"DRAIN: nodewarden kmsg: {XID_LINE}\n{XID_LINE}\n")
    (d / (state.STATE_FILE + ".tmp-k3j_2x")).write_text('{"format": 1,\n')
    return d


def read(*inputs: Path):
    events, stats = ingest([str(p) for p in inputs], jobs=1)
    return list(events), stats


def test_names_are_the_agents() -> None:
    """The read layer's copy of the agent's file names (it may not import the agent)."""
    assert paths.AGENT_STATE_MARKERS == {state.STATE_FILE, state.LOCK_FILE, schedule.SCHEDULE_FILE}
    assert {schedule.REPORT_FILE, schedule.LOG_FILE} <= paths.AGENT_STATE_FILES


@pytest.mark.parametrize("name, own", [
    ("state.json", True), ("state.json.tmp-k3j_2x", True), ("state.json.corrupt", True),
    ("schedule.json.tmp-a1", True), ("agent.lock", True), ("validate.json", True), ("validate.log", True),
    ("report.tmp", True),
    ("events-2026-11-30.jsonl", False), ("kern.log", False), ("kern.log.1.gz", False), ("node07.json", False),
])
def test_is_agent_state_file(name: str, own: bool) -> None:
    assert paths.is_agent_state_file(name) is own


def test_state_dir_reads_only_the_journal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = make_state_dir(tmp_path / "nodewarden")
    assert sorted(p.name for p in d.iterdir()) == [
        "agent.lock", "events-2026-11-30.jsonl", "schedule.json", "state.json", "state.json.tmp-k3j_2x",
        "validate.json", "validate.log"]
    with caplog.at_level(logging.INFO, logger="nodewarden.logfiles.paths"):
        events, stats = read(d)
    assert [(e.kind, e.code, e.host, e.device, e.time) for e in events] == [
        ("xid", 48, "node07", "0000:18:00.0", T0)]
    assert (stats.files, stats.unparsed, stats.errors) == (1, 0, [])
    note = [r.getMessage() for r in caplog.records if "agent state directory" in r.getMessage()]
    assert len(note) == 1 and "state.json" in note[0] and "schedule.json" in note[0]


def test_fleet_directory_of_state_dirs_and_logs(tmp_path: Path) -> None:
    """A directory that contains a node's state directory beside another node's kernel log."""
    make_state_dir(tmp_path / "fleet" / "node07")
    (tmp_path / "fleet" / "node08").mkdir()
    (tmp_path / "fleet" / "node08" / "kern.log").write_text(
        "Nov 30 09:00:00 node08 kernel: " + XID_LINE.split("] ", 1)[1] + "\n")
    events, stats = read(tmp_path / "fleet")
    assert sorted((e.host, e.code) for e in events) == [("node07", 48), ("node08", 79)]
    assert (stats.files, stats.unparsed, stats.errors) == (2, 0, [])


def test_a_state_file_given_by_name_is_still_read(tmp_path: Path) -> None:
    """Only the directory walk skips them: a file named on the command line is the user's choice."""
    d = make_state_dir(tmp_path / "nodewarden")
    events, stats = read(d / schedule.LOG_FILE)
    assert [e.code for e in events if e.kind == "xid"] == [79] and stats.files == 1


def test_events_command_on_a_state_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = make_state_dir(tmp_path / "nodewarden")
    assert cli.main(["events", str(d), "--stats", "--no-cache", "--jobs", "1"]) == 0
    out, err = capsys.readouterr()
    assert [(json.loads(line)["kind"], json.loads(line)["xid"]) for line in out.splitlines()] == [("xid", 48)]
    stats = json.loads(err.strip().splitlines()[-1])
    assert (stats["files"], stats["unparsed"], stats["errors"]) == (1, 0, 0)

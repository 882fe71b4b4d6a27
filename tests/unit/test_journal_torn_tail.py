"""A journal file whose last line a crash cut (the append was not finished): at start the agent
takes its whole lines, ignores the torn one and says so, naming the file."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from nodewarden.agent import state as st
from nodewarden.events import FaultEvent

BOOT = "6f0c2a1e-0000-4000-8000-000000000001"
BOOT_TIME = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.timezone.utc)


def xid(seq: int) -> FaultEvent:
    return FaultEvent(kind="xid", message=f"m{seq}", raw=f"r{seq}", code=48,
                      time=BOOT_TIME + dt.timedelta(seconds=seq),
                      attrs={"pci_bus_id": "0000:07:00.0", "seq": seq, "boot_id": BOOT})


@pytest.mark.parametrize("data, torn", [(b"", 0), (b"{}\n", 0), (b"{}\n{\"ki", 4), (b"{\"kind\"", 7)])
def test_torn_tail_is_the_bytes_after_the_last_newline(tmp_path: Path, data: bytes, torn: int) -> None:
    p = tmp_path / "f"
    p.write_bytes(data)
    with open(p, "rb") as f:
        assert st._torn_tail(f) == torn


def test_a_torn_last_line_is_logged_and_the_whole_lines_are_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    st.append_journal(tmp_path, [xid(1), xid(2), xid(3)])
    (path,) = tmp_path.glob("events-*.jsonl")
    text = path.read_bytes()
    cut = len(text) - 40
    path.write_bytes(text[:cut])  # the third line cut
    with caplog.at_level(logging.WARNING, logger="nodewarden.agent.state"):
        tail = st.journal_tail(tmp_path, BOOT, None, BOOT_TIME)
    assert [e.attrs["seq"] for e in tail] == [1, 2]
    (msg,) = [r.getMessage() for r in caplog.records if "mid-line" in r.getMessage()]
    torn = cut - text.rfind(b"\n", 0, cut) - 1
    assert str(path) in msg and f"{torn} byte(s)" in msg

    caplog.clear()
    st.append_journal(tmp_path, [xid(3)])  # the next append starts a line of its own
    with caplog.at_level(logging.WARNING, logger="nodewarden.agent.state"):
        tail = st.journal_tail(tmp_path, BOOT, None, BOOT_TIME)
    assert [e.attrs["seq"] for e in tail] == [1, 2, 3]
    assert not [r for r in caplog.records if "mid-line" in r.getMessage()]

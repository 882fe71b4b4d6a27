"""Only the kernel makes a fault: fault text that any user can get into the kernel log inside
another message is never counted as a fault (it is counted as ``unparsed``: seen, flagged).

An unprivileged process whose shared library is named like a driver line and that then
segfaults makes the kernel itself print, at kernel facility,
``comm[pid]: segfault at 0 ip ... sp ... error 6 in <library file name>[base+size]``. The same
holds for a task name (15 characters), ``systemd[1]: ...`` quoting a unit's text, and a user's
``logger`` line in a syslog file. Each fault kind is forged every way, through every envelope
the readers take (dmesg, /dev/kmsg, syslog, journal JSON), in files read by ``nodewarden events``
and in the agent's record path (``KernelLogParser.feed`` of a parsed /dev/kmsg record).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodewarden import cli, exitcodes
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser

FAULTS = {  # what the driver prints, one per kind that counts
    "xid": "NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "xid79_text": "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
    "edac": "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x1)",
    "ib": "mlx5_core 0000:08:00.0 mlx5_0: Port: 1 Link DOWN",
    "mce": "mce: [Hardware Error]: CPU 0: Machine Check Exception: 5 Bank 4: be00000000800400",
}
FAMILY = {"xid": "xid", "xid79_text": "xid", "edac": "edac", "ib": "ib", "mce": "mce"}


def segfault(text: str) -> str:
    """The kernel's segfault report for a library whose file name is ``text`` (arch/x86/mm/fault.c)."""
    return (f"evil[4711]: segfault at 0 ip 00007f1234567000 sp 00007ffd12345678 error 6 in "
            f"{text}.so[7f1234560000+1000] likely on CPU 3 (core 3, socket 0)")


def carriers(text: str) -> dict[str, str]:
    """Messages that quote ``text`` without being the driver's message."""
    return {
        "segfault": segfault(text),
        "systemd": f"systemd[1]: Started unit for {text}",
        "task_name": text[:15] + "[4711]: segfault at 0 ip 0000000000000000 sp 0000000000000000 error 6 in "
                     + "x" + text[15:] + ".so[7f0000000000+1000]",
    }


def envelopes(message: str) -> dict[str, str]:
    """One file line per envelope holding ``message`` as the kernel's record text."""
    return {
        "dmesg": f"[ 1843.308145] {message}",
        "dmesg_notime": message,  # dmesg -t: no envelope at all
        "kern.log": f"Dec  1 10:00:00 node01 kernel: [ 1843.308145] {message}",
        "rfc3339": f"2026-01-01T10:00:00.000000+00:00 node01 kernel: {message}",
        "kmsg": f"3,812,1843308145,-;{message}",
        "journal": json.dumps({"MESSAGE": message, "_TRANSPORT": "kernel", "PRIORITY": "3",
                               "__REALTIME_TIMESTAMP": "1767261600000000", "_HOSTNAME": "node01"}),
    }


def run_events(capsys, tmp_path: Path, text: str) -> tuple[int, list[dict]]:
    p = tmp_path / "node01.log"
    p.write_text(text, encoding="utf-8")
    os.utime(p, (1767225600, 1767225600))
    rc = cli.main(["events", str(p), "--no-cache"])
    return rc, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


CASES = [
    pytest.param(kind, carrier, env, id=f"{kind}-{carrier}-{env}")
    for kind in FAULTS for carrier in ("segfault", "systemd", "task_name") for env in envelopes("x")
]


@pytest.mark.parametrize("kind, carrier, env", CASES)
def test_a_fault_quoted_inside_another_kernel_message_is_no_fault(tmp_path: Path, capsys, kind: str, carrier: str,
                                                                     env: str) -> None:
    line = envelopes(carriers(FAULTS[kind])[carrier])[env]
    rc, events = run_events(capsys, tmp_path, line + "\n")
    assert rc == exitcodes.OK
    assert [e["kind"] for e in events if e["kind"] != "unparsed"] == []
    # Never silent: the kernel record holding fault text is counted as unparsed (except a task
    # name cut to 15 characters, which holds no whole fault text any more).
    unparsed = [e for e in events if e["kind"] == "unparsed"]
    if carrier != "task_name":
        assert [e["attrs"]["family"] for e in unparsed] == [FAMILY[kind]]
        assert "not where a kernel message starts" in unparsed[0]["attrs"]["reason"]


@pytest.mark.parametrize("kind", list(FAULTS))
@pytest.mark.parametrize("env", list(envelopes("x")))
def test_the_same_fault_at_the_start_of_the_record_counts(tmp_path: Path, capsys, kind: str, env: str) -> None:
    """The control: each forged text is a real fault where the driver's message starts."""
    rc, events = run_events(capsys, tmp_path, envelopes(FAULTS[kind])[env] + "\n")
    kinds = [e["kind"] for e in events]
    assert rc == exitcodes.OK
    expected = {"xid": ["xid"], "xid79_text": ["xid"], "edac": ["cpu_ecc"], "ib": ["ib_link_down"], "mce": ["mce"]}
    assert kinds == expected[kind], events


@pytest.mark.parametrize("kind", list(FAULTS))
def test_the_agents_kmsg_record_path_takes_no_quoted_fault(kind: str) -> None:
    """The agent parses each /dev/kmsg record and feeds it: the segfault forgery is no fault there."""
    parser = KernelLogParser(host="node01", source="kmsg")
    rec = parse_kmsg_record(f"3,812,1843308145,-;{segfault(FAULTS[kind])}\n SUBSYSTEM=x\n", TimeContext())
    assert rec is not None and rec.kernel  # kernel facility: the kernel printed it
    events = parser.feed(rec) + parser.flush()
    assert [(e.kind, e.attrs["family"]) for e in events] == [("unparsed", FAMILY[kind])]
    assert parser.stats.unparsed == 1


@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_users_logger_line_in_a_syslog_file_is_no_fault(tmp_path: Path, capsys, kind: str) -> None:
    """``logger "NVRM: Xid ..."`` writes under the user's ident, never ``kernel``."""
    text = f"Dec  1 10:00:00 node01 alice: {FAULTS[kind]}\nDec  1 10:00:01 node01 alice[999]: {FAULTS[kind]}\n"
    rc, events = run_events(capsys, tmp_path, text)
    assert (rc, events) == (exitcodes.OK, [])


def test_a_task_name_cannot_open_an_xid_header() -> None:
    """``prctl(PR_SET_NAME, "NVRM: Xid (PCI:")`` and a library named ``x): 79, ...``: the kernel's
    segfault line then starts like an Xid, but a bus id holds no ``[pid]: segfault ...``."""
    line = ("[ 100.000000] NVRM: Xid (PCI:[4711]: segfault at 0 ip 0000000000000000 sp 0000000000000000 "
            "error 6 in x): 79, pid=1, GPU has fallen off the bus.so[7f0000000000+1000]")
    events = list(KernelLogParser().feed_lines([line], TimeContext()))
    assert [(e.kind, e.attrs.get("family")) for e in events] == [("unparsed", "xid")]


def test_a_field_glued_to_a_pasted_line_still_parses_but_a_message_does_not() -> None:
    """Without an envelope (a repair ticket's field), ``diff:371;NVRM: Xid ...`` is the driver's
    line after a field (real case X-027); a kernel message before the ``;`` makes it a quote."""
    ticket = "Fault Description:diff:371;NVRM: Xid (PCI:0000:37:00): 95, pid=5171, Uncontained: FBHUB. RST: Yes, D-RST: No"
    quoted = "evil[4711]: segfault at 0 error 6 in x;NVRM: Xid (PCI:0000:37:00): 95, pid=5171, Uncontained: FBHUB.so[7f+1]"
    got = [(e.kind, e.code) for line in (ticket, quoted) for e in KernelLogParser().feed_lines([line], TimeContext())]
    assert got == [("xid", 95), ("unparsed", None)]


@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_json_export_of_a_users_line_is_no_fault(tmp_path: Path, capsys, kind: str) -> None:
    """A log shipper's JSON (fluent-bit, vector) of a syslog line from a user's program: the
    program is named in a field, or by the syslog line inside; the kernel's own line counts."""
    lines = [json.dumps({"ident": "alice", "message": FAULTS[kind], "timestamp": 1733045125123}),
             json.dumps({"log": f"Dec  1 10:00:00 node01 alice: {FAULTS[kind]}"}),
             json.dumps({"log": f"Dec  1 10:00:00 node01 kernel: {FAULTS[kind]}", "timestamp": 1733045125123456})]
    rc, events = run_events(capsys, tmp_path, "\n".join(lines) + "\n")
    assert rc == exitcodes.OK
    assert len(events) == 1 and events[0]["kind"] != "unparsed"


@pytest.mark.parametrize("line", [
    "<14>NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    "14,100,5000000,-;NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    "user  :err   : [  100.000000] NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    "<14>Mar  3 10:00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    '{"MESSAGE": "NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.", '
    '"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "1"}',
], ids=["prio", "kmsg", "decode", "logger-t-kernel", "journal-json"])
def test_events_and_analyze_leave_out_lines_user_space_wrote(tmp_path, capsys, line: str) -> None:
    """A record whose envelope says user space wrote it (facility not kern) is no fault for
    `events` (unless --injected) nor for analyze; it is counted apart."""
    from nodewarden.cli import main
    p = tmp_path / "kern.log"
    p.write_text(line + "\n")
    assert main(["events", "--stats", "--no-cache", str(p)]) == 0
    out = capsys.readouterr()
    assert out.out == "" and json.loads(out.err.splitlines()[-1])["injected"] == 1
    assert main(["events", "--injected", "--no-cache", str(p)]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["xid"] == 79 and ev["attrs"]["injected"] is True

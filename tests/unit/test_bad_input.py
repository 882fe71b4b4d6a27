"""Inputs as they come from a fleet: garbage, odd encodings, huge lines, broken archives,
unreadable entries, rotated sets, one record seen through several files. Run through the CLI
(``nodewarden events``) and through :func:`nodewarden.analysis.ingest.ingest`.

Exit codes (nodewarden.exitcodes): 0 done, 3 some input could not be read (the others are
still processed and printed).
"""

from __future__ import annotations

import datetime as dt
import gzip
import zlib
import json
import os
import random
from pathlib import Path

import pytest

from nodewarden import cli, exitcodes
from nodewarden.analysis.ingest import Filters, ingest

UTC = dt.timezone.utc
# Year-less stamps take their year from the file's mtime: pin it.
MTIME = dt.datetime(2026, 1, 1, tzinfo=UTC).timestamp()

XID13 = "NVRM: Xid (PCI:0000:01:00): 13, pid={pid}, Graphics Exception: ESR 0x405840=0x82000200"
XID79 = "NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus"


def xid_line(pid: int, mono: float) -> str:
    return f"[{mono:12.6f}] " + XID13.format(pid=pid)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    os.utime(path, (MTIME, MTIME))
    return path


def write_gz(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()))
    os.utime(path, (MTIME, MTIME))
    return path


def run(capsys, *args: str) -> tuple[int, list[dict], str]:
    rc = cli.main(["events", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def xids(events: list[dict]) -> list[tuple[int, str | None, int | None]]:
    return [(e["xid"], e["pci_bus_id"], e["pid"]) for e in events if e["kind"] == "xid"]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A readable log with one Xid, to show that other inputs are still processed."""
    return write(tmp_path / "good" / "node02.log", xid_line(2, 10.0) + "\n")


# -- content ---------------------------------------------------------------------------------

def test_binary_garbage_with_an_xid_inside(tmp_path: Path, capsys) -> None:
    rnd = random.Random(20261129)
    junk = bytes(rnd.randrange(256) for _ in range(256 << 10))
    assert b"\x00" in junk
    path = write(tmp_path / "garbage.bin", junk + b"\n" + xid_line(7, 5.0).encode() + b"\n" + junk)
    rc, events, _ = run(capsys, path)
    assert rc == exitcodes.OK
    assert xids(events) == [(13, "0000:01:00.0", 7)]


def test_binary_garbage_alone_gives_no_xid(tmp_path: Path, capsys) -> None:
    rnd = random.Random(7)
    path = write(tmp_path / "garbage.bin", bytes(rnd.randrange(256) for _ in range(256 << 10)))
    rc, events, _ = run(capsys, path)
    assert (rc, xids(events)) == (exitcodes.OK, [])


def test_invalid_utf8_inside_an_xid_line(tmp_path: Path, capsys) -> None:
    line = b"[   10.000000] NVRM: Xid (PCI:0000:01:00): 13, pid=2183, name=py\xff\xfethon, Graphics Exception: ESR 0x1=0x2\n"
    rc, events, _ = run(capsys, write(tmp_path / "bad-utf8.log", line))
    assert rc == exitcodes.OK
    (e,) = events
    assert (e["xid"], e["pci_bus_id"], e["pid"], e["process"], e["monotonic"]) == (
        13, "0000:01:00.0", 2183, "py\ufffd\ufffdthon", 10.0)


@pytest.mark.parametrize("big", [
    pytest.param(b"[    1.000000] " + b"y" * (1 << 20) + b"\n[    2.000000] " + XID79.encode(), id="1 MB noise line, then Xid"),
    pytest.param(b"[    1.000000] start\n" + b"  " + b"z" * (3 << 20) + b"\n[    2.000000] " + XID79.encode(),
                 id="3 MB continuation line, then Xid"),
])
def test_huge_lines(tmp_path: Path, capsys, big: bytes) -> None:
    rc, events, _ = run(capsys, write(tmp_path / "huge.log", b"[    0.500000] boot\n" + big + b"\n"))
    assert rc == exitcodes.OK
    assert xids(events) == [(79, "0000:04:00.0", None)]


def test_xid_text_at_the_end_of_a_1mb_line_is_unparsed_not_a_fault(tmp_path: Path, capsys) -> None:
    # Not where a kernel message starts: another message quoting the text. Seen, never a fault.
    rc, events, _ = run(capsys, write(tmp_path / "huge.log", b"[    0.500000] boot\n" + b"x" * (1 << 20) + b" "
                                      + XID79.encode() + b"\n"))
    assert rc == exitcodes.OK
    assert xids(events) == []
    assert [(e["kind"], e["attrs"]["family"]) for e in events] == [("unparsed", "xid")]


def test_truncated_journalctl_line(tmp_path: Path, capsys) -> None:
    # journalctl cuts a long line and ends it with ">": the Xid header is still whole.
    line = "Oct 20 18:54:04 node01 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=2183, Graphics Exception: ESR 0x40>\n"
    rc, events, _ = run(capsys, write(tmp_path / "journal.txt", line))
    assert rc == exitcodes.OK
    (e,) = events
    assert (e["xid"], e["pci_bus_id"], e["pid"], e["host"], e["time"]) == (
        13, "0000:3b:00.0", 2183, "node01", "2025-10-20T18:54:04Z")


def test_empty_file(tmp_path: Path, capsys) -> None:
    rc, events, err = run(capsys, write(tmp_path / "empty.log", b""))
    assert (rc, events, err) == (exitcodes.OK, [], "")


def test_blank_lines_only(tmp_path: Path, capsys) -> None:
    rc, events, _ = run(capsys, write(tmp_path / "blank.log", b"\n\n   \n\t\n"))
    assert (rc, events) == (exitcodes.OK, [])


# -- unreadable inputs -----------------------------------------------------------------------

def test_truncated_gzip(tmp_path: Path, capsys, good: Path) -> None:
    whole = gzip.compress(("".join(xid_line(i, float(i)) + "\n" for i in range(2000))).encode())
    bad = write(tmp_path / "kern.log.2.gz", whole[: len(whole) // 2])
    rc, events, err = run(capsys, bad, good)
    assert rc == exitcodes.INCOMPLETE
    assert str(bad) in err
    assert (13, "0000:01:00.0", 2) in xids(events)
    # The readable part of the archive is kept: every whole line zlib inflates from the cut
    # archive; the line the cut ends inside is not a line.
    text = zlib.decompressobj(wbits=31).decompress(bad.read_bytes())
    expected = text.count(b"\n")
    kept = [e for e in events if e["attrs"].get("origin") == str(bad)]
    assert len(kept) == expected
    assert [e["pid"] for e in kept] == list(range(expected))


def test_nonexistent_path(tmp_path: Path, capsys, good: Path) -> None:
    missing = tmp_path / "no" / "such.log"
    rc, events, err = run(capsys, missing, good)
    assert rc == exitcodes.INCOMPLETE
    assert str(missing) in err
    assert xids(events) == [(13, "0000:01:00.0", 2)]


@pytest.mark.parametrize("make_bad", [
    pytest.param(lambda d: os.symlink(d / "gone.log", d / "kern.log.1"), id="dangling symlink"),
    pytest.param(lambda d: os.symlink(d / "kern.log.1", d / "kern.log.1"), id="symlink loop"),
])
def test_directory_with_an_unreadable_entry(tmp_path: Path, capsys, make_bad) -> None:
    # Meaningful as root too: no permission bit is involved, the entry cannot be opened at all.
    d = tmp_path / "logs"
    write(d / "kern.log", xid_line(1, 1.0) + "\n")
    make_bad(d)
    rc, events, err = run(capsys, d)
    assert rc == exitcodes.INCOMPLETE
    assert str(d / "kern.log.1") in err
    assert xids(events) == [(13, "0000:01:00.0", 1)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_directory_with_a_mode_000_file(tmp_path: Path, capsys) -> None:
    d = tmp_path / "logs"
    write(d / "kern.log", xid_line(1, 1.0) + "\n")
    locked = write(d / "kern.log.1", xid_line(9, 0.5) + "\n")
    locked.chmod(0)
    rc, events, err = run(capsys, d)
    assert (rc, xids(events)) == (exitcodes.INCOMPLETE, [(13, "0000:01:00.0", 1)])
    assert str(locked) in err


def test_ingest_reports_errors_and_reads_the_rest(tmp_path: Path, good: Path) -> None:
    missing = tmp_path / "missing.log"
    whole = gzip.compress((xid_line(5, 5.0) + "\n").encode() * 500)
    bad = write(tmp_path / "cut.gz", whole[:40])
    seen: list[str] = []
    events, stats = ingest([str(missing), str(bad), str(good)], on_error=seen.append)
    got = [(e.code, e.pid) for e in events]
    assert got == [(13, 2)]
    assert len(seen) == len(stats.errors) == 2
    assert any(str(missing) in m for m in seen) and any(str(bad) in m for m in seen)
    assert stats.files == 1


# -- sets of files ---------------------------------------------------------------------------

def test_rotated_set_is_read_oldest_first(tmp_path: Path, capsys) -> None:
    d = tmp_path / "node05"
    # logrotate numbering: .3.gz is the oldest, the bare name the newest.
    write_gz(d / "kern.log.3.gz", xid_line(3, 3.0) + "\n")
    write_gz(d / "kern.log.2.gz", xid_line(2, 2.0) + "\n")
    write(d / "kern.log.1", xid_line(1, 1.0) + "\n")
    write(d / "kern.log", xid_line(0, 0.5) + "\n")
    rc, events, _ = run(capsys, tmp_path)
    assert rc == exitcodes.OK
    assert [e["pid"] for e in events] == [3, 2, 1, 0]
    assert {e["host"] for e in events} == {"node05"}


def test_dateext_rotated_set_is_read_oldest_first(tmp_path: Path) -> None:
    d = tmp_path / "node06"
    write_gz(d / "messages-20250103.gz", xid_line(3, 3.0) + "\n")
    write(d / "messages", xid_line(4, 4.0) + "\n")
    write_gz(d / "messages-20250101.gz", xid_line(1, 1.0) + "\n")
    write(d / "messages-20250102", xid_line(2, 2.0) + "\n")
    events, _ = ingest([str(tmp_path)])
    assert [e.pid for e in events] == [1, 2, 3, 4]


def test_host_comes_from_the_subdirectory_or_the_file_name(tmp_path: Path, capsys) -> None:
    write(tmp_path / "node07" / "kern.log", xid_line(7, 7.0) + "\n")
    write(tmp_path / "node08" / "var" / "log" / "syslog", xid_line(8, 8.0) + "\n")
    write(tmp_path / "node09.log", xid_line(9, 9.0) + "\n")
    write(tmp_path / "kern.log", xid_line(10, 10.0) + "\n")  # a log's base name says nothing of its host
    # A line that names its host keeps it.
    write(tmp_path / "node11" / "kern.log", "Oct 20 18:54:04 node01 kernel: " + XID13.format(pid=11) + "\n")
    rc, events, _ = run(capsys, tmp_path)
    assert rc == exitcodes.OK
    assert sorted((e["pid"], e["host"]) for e in events) == [
        (7, "node07"), (8, "node08"), (9, "node09"), (10, None), (11, "node01")]


# -- one record, several files ---------------------------------------------------------------

KERN = "Oct 20 18:54:04 node01 kernel: [ 1234.500000] " + XID13.format(pid=2183)
JOURNAL_JSON = json.dumps({
    "_TRANSPORT": "kernel", "_HOSTNAME": "node01", "PRIORITY": "4", "SYSLOG_FACILITY": "0",
    "__REALTIME_TIMESTAMP": str(int(dt.datetime(2025, 10, 20, 18, 54, 4, tzinfo=UTC).timestamp() * 1e6)),
    "__MONOTONIC_TIMESTAMP": "1234500000", "MESSAGE": XID13.format(pid=2183)})
JOURNAL_SHORT = "Oct 20 18:54:04 node01 kernel: " + XID13.format(pid=2183)


@pytest.mark.parametrize("journal_name, journal_text", [
    pytest.param("journal.json", JOURNAL_JSON, id="journalctl -o json export"),
    pytest.param("journal.txt", JOURNAL_SHORT, id="journalctl short export"),
])
def test_copies_across_files_count_once(tmp_path: Path, capsys, journal_name: str, journal_text: str) -> None:
    write(tmp_path / "kern.log", KERN + "\n")
    write(tmp_path / journal_name, journal_text + "\n")
    rc, events, _ = run(capsys, tmp_path)
    assert rc == exitcodes.OK
    assert [(e["xid"], e["host"], e["time"]) for e in events] == [(13, "node01", "2025-10-20T18:54:04Z")]
    rc, events, _ = run(capsys, "--no-dedupe", tmp_path)
    assert len(events) == 2


def test_identical_lines_in_one_file_count_twice(tmp_path: Path, capsys) -> None:
    # The kernel printed the same line twice (e.g. an Xid 32 storm): two events.
    rc, events, _ = run(capsys, write(tmp_path / "kern.log", (KERN + "\n") * 2))
    assert (rc, len(xids(events))) == (exitcodes.OK, 2)


def test_identical_lines_in_one_file_and_once_in_another(tmp_path: Path, capsys) -> None:
    write(tmp_path / "kern.log", (KERN + "\n") * 2)
    write(tmp_path / "journal.json", JOURNAL_JSON + "\n")
    rc, events, _ = run(capsys, tmp_path)
    assert len(xids(events)) == 2


# -- filters -----------------------------------------------------------------------------------

MIXED = "\n".join([
    "2025-01-21T04:41:44,000000+00:00 " + XID13.format(pid=1),
    "2025-01-21T04:41:45,000000+00:00 EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
    "(channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0)",
    "2025-01-21T04:41:46,000000+00:00 mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN",
    "2025-01-21T04:41:47,000000+00:00 mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
    "2025-01-21T04:41:48,000000+00:00 " + XID79,
    "[   10.000000] " + XID13.format(pid=3),  # no wall time
]) + "\n"


@pytest.mark.parametrize("args, expected", [
    pytest.param([], ["xid", "cpu_ecc", "ib_link_down", "ib_link_up", "xid", "xid"], id="no filter"),
    pytest.param(["--kind", "xid"], ["xid", "xid", "xid"], id="kind xid"),
    pytest.param(["--kind", "cpu_ecc,ib_link_down"], ["cpu_ecc", "ib_link_down"], id="two kinds"),
    pytest.param(["--since", "2025-01-21T04:41:46Z"], ["ib_link_down", "ib_link_up", "xid"], id="since is inclusive"),
    pytest.param(["--until", "2025-01-21T04:41:46Z"], ["xid", "cpu_ecc"], id="until is exclusive"),
    pytest.param(["--since", "2025-01-21T12:41:45+08:00", "--until", "2025-01-21T04:41:47Z"],
                 ["cpu_ecc", "ib_link_down"], id="window with an offset"),
    pytest.param(["--kind", "xid", "--since", "2025-01-21T04:41:45Z"], ["xid"], id="kind and since"),
])
def test_filters(tmp_path: Path, capsys, args: list[str], expected: list[str]) -> None:
    rc, events, _ = run(capsys, *args, write(tmp_path / "mixed.log", MIXED))
    assert rc == exitcodes.OK
    assert [e["kind"] for e in events] == expected


def test_unknown_kind_is_a_usage_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["events", "--kind", "xid,bogus", str(write(tmp_path / "m.log", MIXED))])
    assert exc.value.code == exitcodes.USAGE
    assert "bogus" in capsys.readouterr().err


def test_ingest_filters_match_the_cli(tmp_path: Path) -> None:
    path = write(tmp_path / "mixed.log", MIXED)
    since = dt.datetime(2025, 1, 21, 4, 41, 45, tzinfo=UTC)
    events, stats = ingest([str(path)], filters=Filters(since=since, kinds=frozenset({"xid", "cpu_ecc"})))
    assert [(e.kind, e.code) for e in events] == [("cpu_ecc", None), ("xid", 79)]
    assert stats.events == 2


OUT_OF_RANGE = """\
2024-03-01T10:00:00+99:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.
9999-12-31T23:59:59-05:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.
0001-01-01T00:00:00+05:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.
[99999999999999.123456] NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.
2300-01-01T00:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.
2300-01-01T00:00:10+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 48, pid=1, name=x, An uncorrectable double bit error
2024-03-01T10:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 99999999999999999999, pid=1, name=x, bad
2024-03-01T10:00:00+00:00 node01 kernel: EDAC MC0: 18446744073709551616 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0)
"""


def test_out_of_range_stamps_and_numbers_are_no_crash(tmp_path: Path, capsys) -> None:
    """Dates past datetime's or pandas' range, impossible offsets, huge monotonic stamps, Xid
    codes and EDAC counts no driver prints: the event keeps no time, or the line is unparsed;
    events and analyze go on."""
    p = write(tmp_path / "odd.log", OUT_OF_RANGE)
    rc = cli.main(["events", str(p), "--no-cache", "--boot-time", "2024-01-01"])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == exitcodes.OK
    assert [(e["kind"], e["xid"]) for e in out] == [("xid", 79)] * 5 + [("xid", 48), ("unparsed", None), ("unparsed", None)]
    assert [e["time"] for e in out[1:4]] == [None, None, None]
    assert cli.main(["analyze", str(p), "--no-cache", "--out", str(tmp_path / "r")]) == exitcodes.OK
    assert "events without a time: 5" in (tmp_path / "r" / "report.md").read_text()


def test_a_device_other_than_kmsg_is_not_read(capsys) -> None:
    """/dev/zero would never end: only the kernel's /dev/kmsg (1:11) is read as a device."""
    rc = cli.main(["events", "/dev/zero", "--no-cache"])
    assert rc == exitcodes.INCOMPLETE
    assert "/dev/zero: a device other than /dev/kmsg" in capsys.readouterr().err


def test_names_that_are_not_utf8(tmp_path: Path, capsys) -> None:
    """A node directory named with bytes that are not UTF-8: events are valid UTF-8 JSON naming
    it with \\xNN escapes, analyze (pyarrow, pandas) takes them."""
    d = os.fsencode(tmp_path) + b"/node\xff\xfe"
    os.makedirs(d)
    with open(d + b"/dmesg.log", "w") as f:
        f.write(f"[Fri Mar  1 10:00:00 2024] {XID79}\n")
    assert cli.main(["events", str(tmp_path), "--no-cache"]) == exitcodes.OK
    out = capsys.readouterr().out
    out.encode("utf-8")  # no surrogates left
    e = json.loads(out)
    assert e["host"] == "node\\xff\\xfe" and e["attrs"]["origin"].endswith("node\\xff\\xfe/dmesg.log")
    assert cli.main(["analyze", str(tmp_path), "--out", str(tmp_path / "r")]) == exitcodes.OK


# -- nothing vanishes silently: line ends, indentation, glued records, encodings -------------------

X13 = "NVRM: Xid (PCI:0000:01:00): 13, pid={pid}, name=x, Graphics Exception"


def kinds(events: list[dict]) -> list[tuple[str, int | None]]:
    return [(e["kind"], e["xid"]) for e in events]


def test_ten_xid_lines_indented_by_four_spaces_are_ten_events(tmp_path: Path, capsys) -> None:
    text = "".join("    " + X13.format(pid=i) + "\n" for i in range(10))
    rc, events, _ = run(capsys, write(tmp_path / "indented.log", text))
    assert rc == exitcodes.OK
    assert [e["pid"] for e in events if e["kind"] == "xid"] == list(range(10))


def test_indented_stamped_lines_keep_their_stamps(tmp_path: Path, capsys) -> None:
    text = "".join(f"    [{i}.5] " + X13.format(pid=i) + "\n" for i in range(3))
    rc, events, _ = run(capsys, write(tmp_path / "indented.log", text))
    assert (rc, [e["monotonic"] for e in events]) == (exitcodes.OK, [0.5, 1.5, 2.5])


@pytest.mark.parametrize("end", ["\r", "\u2028", "\u2029", "\x85", "\r\n"], ids=["CR", "LS", "PS", "NEL", "CRLF"])
def test_records_separated_by_any_line_end_are_all_read(tmp_path: Path, capsys, end: str) -> None:
    text = end.join(f"[{i}.0] " + X13.format(pid=i) for i in range(1, 4)) + end
    rc, events, _ = run(capsys, write(tmp_path / "ends.log", text))
    assert (rc, [e["pid"] for e in events]) == (exitcodes.OK, [1, 2, 3])


def test_a_second_record_glued_on_the_line_is_unparsed_not_lost(tmp_path: Path, capsys) -> None:
    """Glued records are not split into faults (a file name can hold "[ 2.0] NVRM: Xid ..."): the
    first is read where the line starts, the second counted as unparsed."""
    text = "[1.0] " + X13.format(pid=1) + "[2.0] " + X13.format(pid=2) + "\n"
    rc, events, _ = run(capsys, write(tmp_path / "glued.log", text))
    assert (rc, kinds(events)) == (exitcodes.OK, [("xid", 13), ("unparsed", None)])
    assert "glued" in events[1]["attrs"]["reason"]


def test_a_kmsg_record_holding_two_xid_lines_counts_one_and_flags_the_other() -> None:
    """The agent's record path: one /dev/kmsg record, a newline (``\\x0a``) inside its text. The
    second line is no record of its own (the kernel prints a file name's newline the same way):
    unparsed, counted, never silent; the first line's event does not carry the second's text."""
    from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
    from nodewarden.parsing.stream import KernelLogParser

    parser = KernelLogParser(source="kmsg")
    rec = parse_kmsg_record(f"3,7,1000,-;{X13.format(pid=1)}\\x0a{X13.format(pid=2)}\n", TimeContext())
    events = parser.feed(rec)
    assert [(e.kind, e.code, e.attrs.get("pid")) for e in events] == [("xid", 13, 1), ("unparsed", None, None)]
    assert events[0].message == X13.format(pid=1) and parser.stats.unparsed == 1


@pytest.mark.parametrize("codec, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"), ("utf-16-le", b""),
                                        ("utf-32-le", b"\xff\xfe\x00\x00"), ("utf-8", b"\xef\xbb\xbf")])
@pytest.mark.parametrize("size", ["small", "streamed", "gzip"])
def test_utf16_and_utf32_files_are_decoded(tmp_path: Path, capsys, codec: str, bom: bytes, size: str) -> None:
    lines = [f"[{i}.0] " + X13.format(pid=i) for i in range(1, 3)]
    if size == "streamed":  # past SMALL_FILE: read as a stream, not whole
        lines = ["[0.1] noise line of a busy node"] * 50000 + lines
    data = bom + ("\n".join(lines) + "\n").encode(codec)
    path = tmp_path / "win.log"
    if size == "gzip":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    rc, events, _ = run(capsys, path)
    assert (rc, [e["pid"] for e in events]) == (exitcodes.OK, [1, 2])


def test_a_log_padded_with_nul_blocks_is_still_utf8(tmp_path: Path, capsys) -> None:
    """After a crash a log often ends in blocks of NUL bytes: not taken for UTF-16."""
    data = b"\x00" * 8192 + ("[1.0] " + X13.format(pid=1) + "\n").encode() + b"\x00" * 4096
    rc, events, _ = run(capsys, write(tmp_path / "crash.log", data))
    assert (rc, [e["pid"] for e in events]) == (exitcodes.OK, [1])


@pytest.mark.parametrize("line", [
    '{"ts": 1e20, "log": "%s"}', '{"ts": Infinity, "log": "%s"}',
    '{"MESSAGE": "%s", "__REALTIME_TIMESTAMP": "18446744073709551615"}', '{"MESSAGE": "%s", "PRIORITY": "\u00b2"}',
    '{"MESSAGE": "%s", "__MONOTONIC_TIMESTAMP": "' + "9" * 400 + '"}', "6," + "9" * 5000 + ",1,-;%s",
    "6,1," + "9" * 400 + ",-;%s",
])
def test_one_bad_line_never_ends_the_run_nor_drops_the_file(tmp_path: Path, capsys, line: str) -> None:
    text = f"[1.0] {X13.format(pid=1)}\n" + line.replace("%s", X13.format(pid=2)) + f"\n[3.0] {X13.format(pid=3)}\n"
    path = write(tmp_path / "node01.log", text)
    rc, events, _ = run(capsys, path)
    assert (rc, [e["pid"] for e in events]) == (exitcodes.OK, [1, 2, 3])
    assert cli.main(["analyze", str(path), "--no-cache", "--out", str(tmp_path / "r")]) == exitcodes.OK


@pytest.mark.parametrize("unit, value", [("ms", 1733045125123), ("us", 1733045125123456), ("ns", 1733045125123456789)])
def test_json_exports_with_epoch_stamps_in_ms_us_ns_are_read_right(tmp_path: Path, capsys, unit: str, value: int) -> None:
    line = json.dumps({"timestamp": value, "log": "kernel: " + X13.format(pid=1)})
    rc, events, _ = run(capsys, write(tmp_path / "export.jsonl", line + "\n"))
    assert [(e["kind"], e["pid"]) for e in events] == [("xid", 1)]
    assert (rc, [e["time"] for e in events]) == (exitcodes.OK, ["2024-12-01T09:25:25.123000Z" if unit == "ms" else
                                                                 "2024-12-01T09:25:25.123456Z"])


@pytest.mark.parametrize("scanner", ["default", "find"])
def test_a_journal_json_message_given_as_bytes_is_read(tmp_path: Path, scanner: str) -> None:
    """journalctl -o json writes a message holding control or non-UTF-8 bytes as an array of
    numbers: such a record is a candidate for the scan and its Xid counted (it was dropped)."""
    import json as _json
    import os
    import subprocess
    import sys
    msg = "NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x\x01, GPU has fallen off the bus."
    p = tmp_path / "journal.json"
    p.write_text(_json.dumps({"MESSAGE": list(msg.encode()), "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0",
                              "__REALTIME_TIMESTAMP": "1733050000000000"}, separators=(",", ":")) + "\n"
                 + _json.dumps({"MESSAGE": list(msg.encode()), "_TRANSPORT": "kernel"}) + "\n")
    env = {**os.environ, **({"NODEWARDEN_SCANNER": "find"} if scanner == "find" else {})}
    r = subprocess.run([sys.executable, "-m", "nodewarden", "events", "--no-cache", str(p)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    events = [_json.loads(line) for line in r.stdout.splitlines()]
    assert [(e["xid"], e["pci_bus_id"]) for e in events] == [(79, "0000:07:00.0")] * 2
    assert events[0]["time"] == "2024-12-01T10:46:40Z"

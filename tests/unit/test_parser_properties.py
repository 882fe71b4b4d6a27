"""Properties of every parser and format detector over generated input (hypothesis), and the
inputs that once ended a whole ``events``/``analyze`` run, kept as regression cases.

Properties: no parser raises on any text; what a record holds is of its documented type and
range (aware UTC times, finite monotonic seconds, u64 sequence numbers); epoch stamps in
seconds, ms, us and ns read as the same time; line ends are one rule for the file readers
and the record path; an encoding detector never raises and finds UTF-16/32 text it is given.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import envneeds

from nodewarden.events import FaultEvent
from nodewarden.logfiles import events_from_bytes
from nodewarden.logfiles.compressed import compression
from nodewarden.logfiles.encoding import text_encoding, to_utf8
from nodewarden.parsing import edac, ib, mce, xid
from nodewarden.parsing.envelope import (TimeContext, ascii_uint, epoch_time, parse_kmsg_record, parse_line)
from nodewarden.parsing.lines import driver_message, split_lines
from nodewarden.parsing.stream import KernelLogParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
UTC = dt.timezone.utc
CTX = TimeContext.make(tz="UTC", reference=dt.datetime(2026, 1, 1, tzinfo=UTC),
                       boot_time=dt.datetime(2025, 12, 1, tzinfo=UTC))
XID = "NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=x, Graphics Exception"
PARSERS = (xid.parse_xid, xid.parse_fallen_off_bus, xid.parse_rate_limit, xid.parse_gpu_at, xid.parse_device_plugin,
           edac.parse_edac, edac.parse_edac_mce, edac.parse_label, ib.parse_ib_port, ib.parse_net_link,
           ib.parse_module_event, mce.parse_mce_head, mce.parse_mce_detail)
# NODEWARDEN_HYPOTHESIS_EXAMPLES: more examples for a longer local run (CI keeps the suite fast).
FAST = settings(max_examples=int(os.environ.get("NODEWARDEN_HYPOTHESIS_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# Text built from the pieces log lines are made of, so that the generator reaches the parsers'
# deeper branches and not only "no envelope matched".
PIECES = st.sampled_from([
    "NVRM: Xid (PCI:0000:01:00): ", "NVRM: ", "Xid", "(", ")", ": ", ", ", "pid=", "name=", "79", "13", "-1",
    "EDAC MC0: ", "1 CE ", "UE ", "memory read error on ", "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", " (channel:2 grain:²)",
    "mce: [Hardware Error]: CPU 0: Machine Check: ", "0 Bank 4: ", "be00000000800400", "TSC 0 ", "PROCESSOR 0:a06 ",
    "mlx5_core 0000:08:00.0 ", "mlx5_0: Port: 1 Link DOWN", ": Link down", "Port module event: module 0, ",
    "[", "]", "[ 12.5] ", "<3>", "6,", "1,", "9" * 30, "9" * 400, "²", "٣", "\n", "\r", "\u2028", "\x85", " ", "\t",
    "{", "}", '"', ":", "Dec  1 10:00:00 ", "node01 ", "kernel: ", "2025-01-07T21:16:59.312055+00:00 ",
    "kern  :warn  : ", "stdout F ", ";", "\\x0a", "fallen off the bus", "NVRM: The NVIDIA GPU 0000:b3:00.0 ",
    "Infinity", "1e20", "-", "GPU-I:05", "Ch 0000000a", "Info 0x1",
])
LINES = st.one_of(st.text(max_size=200), st.lists(PIECES, max_size=25).map("".join),
                  st.tuples(st.lists(PIECES, max_size=10).map("".join), st.text(max_size=40)).map("".join))


def sane(rec) -> None:
    if rec is None:
        return
    assert isinstance(rec.message, str) and isinstance(rec.raw, str) and isinstance(rec.fmt, str)
    assert rec.time is None or rec.time.utcoffset() == dt.timedelta(0)
    assert rec.monotonic is None or (math.isfinite(rec.monotonic) and 0 <= rec.monotonic <= 1e9)
    assert rec.seq is None or 0 <= rec.seq < 1 << 64
    for f in (rec.host, rec.ident, rec.boot_id, rec.facility, rec.level, rec.raw_time):
        assert f is None or isinstance(f, str)


@FAST
@given(LINES)
def test_envelope_detection_never_raises_and_gives_sane_records(text: str) -> None:
    sane(parse_line(text, CTX))
    sane(parse_kmsg_record(text, CTX))


@FAST
@given(LINES)
def test_every_fault_parser_never_raises(text: str) -> None:
    for parse in PARSERS:
        parse(text)
        parse(driver_message(text, bare=True))


@FAST
@given(st.lists(LINES, max_size=8))
def test_the_stream_parser_never_raises_and_every_event_renders(lines: list[str]) -> None:
    parser = KernelLogParser(source="file")
    for e in parser.feed_lines(lines, CTX):
        json.loads(e.to_json())
        if e.kind == "unparsed":  # an exception a parser raised is never hidden as unparsed
            assert e.attrs["family"] != "error", e.attrs


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30) | st.sampled_from(["²", "9" * 400, "18446744073709551615"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8)
JOURNAL_KEYS = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "PRIORITY", "SYSLOG_FACILITY", "__SEQNUM",
                "_HOSTNAME", "SYSLOG_IDENTIFIER", "_BOOT_ID", "_TRANSPORT", "ts", "time", "timestamp", "@timestamp",
                "date", "host", "message", "msg", "log")


@FAST
@given(st.dictionaries(st.sampled_from(JOURNAL_KEYS), JSON_VALUES, max_size=8),
       st.sampled_from(["MESSAGE", "message", "log"]))
def test_json_records_with_fields_of_any_type_or_size_never_raise(obj: dict, key: str) -> None:
    obj[key] = XID
    line = json.dumps(obj)  # Infinity and NaN as Python's json writes them
    rec = parse_line(line, CTX)
    sane(rec)
    assert rec is not None and rec.message == XID  # the record is kept whatever its other fields hold
    events = list(KernelLogParser().feed_lines([line], CTX))
    assert [e.code for e in events] in ([13], [])  # [] only when the JSON says it is not from the kernel


@FAST
@given(st.datetimes(min_value=dt.datetime(2001, 9, 10), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_epoch_stamps_in_any_unit_read_as_the_same_time(t: dt.datetime) -> None:
    us = (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    for value in (us // 1_000_000, us // 1000, us, us * 1000, str(us * 1000), str(us // 1000)):
        got = epoch_time(value)
        assert got is not None
        assert abs(got - t) < dt.timedelta(seconds=1), (value, got, t)
        line = json.dumps({"timestamp": value, "log": XID})
        assert abs(parse_line(line, CTX).time - t) < dt.timedelta(seconds=1)


@given(st.text(max_size=30))
def test_ascii_uint_takes_ascii_digits_only(text: str) -> None:
    n = ascii_uint(text)
    if n is not None:
        assert text.isascii() and text.isdigit() and n == int(text) < 1 << 64
    else:
        assert not (text.isascii() and text.isdigit() and len(text) <= 19)


SEPARATED = st.lists(st.sampled_from([XID, "[ 1.0] " + XID, "noise", "", "  " + XID]), min_size=1, max_size=6)
ENDS = st.sampled_from(["\n", "\r\n", "\r", "\u2028", "\u2029", "\x85"])


@FAST
@given(SEPARATED, st.lists(ENDS, min_size=6, max_size=6))
def test_line_ends_are_one_rule_for_file_reads_and_line_iteration(lines: list[str], ends: list[str]) -> None:
    text = "".join(line + end for line, end in zip(lines, ends))
    a = [e.code for e in events_from_bytes(text.encode(), KernelLogParser(), CTX)]
    b = [e.code for e in KernelLogParser().feed_lines(io.StringIO(text, newline="\n"), CTX)]  # as file iteration cuts
    c = [e.code for e in KernelLogParser().feed_lines(split_lines(text), CTX)]
    assert a == b == c
    physical = split_lines(text)  # "\r" then "\n" is one CRLF end, not two
    assert len([x for x in a if x == 13]) == sum(1 for line in physical if XID in line) - _continued(physical)


def _continued(lines: list[str]) -> int:
    """Indented Xid lines that continue a record before them (not an indented run from the start)."""
    n, head_indented, seen = 0, None, False
    for line in lines:
        if not line.strip():
            seen = False
            continue
        if line[0] == " " and seen and not head_indented:
            n += 1
            continue
        head_indented, seen = line[0] == " ", True
    return n


@given(st.binary(max_size=64))
def test_format_detectors_never_raise(data: bytes) -> None:
    compression(data)
    text_encoding(data)
    to_utf8(data)


@FAST
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=8, max_size=200),
       st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]))
def test_utf16_and_utf32_text_is_found_and_decoded(text: str, codec: str) -> None:
    text = "[ 1.0] " + text.replace("\x00", "")  # ASCII start: what a log line begins with
    data = text.encode(codec)
    if codec in ("utf-16", "utf-32"):  # with a byte-order mark: always decoded
        assert to_utf8(data).decode("utf-8") == text
    elif text_encoding(data) is not None:  # without one: by the NUL pattern, when it is clear
        assert to_utf8(data).decode("utf-8") == text


# -- inputs that once escaped the parsers (an issue's list, and the fuzzers' finds) ---------------

REGRESSIONS = [
    '{"timestamp": 1733045125123, "log": "%s"}' % XID,  # ms epoch (fluent-bit)
    '{"timestamp": 1733045125123456, "log": "%s"}' % XID,  # us epoch
    '{"timestamp": 1733045125123456789, "log": "%s"}' % XID,  # ns epoch (vector)
    '{"ts": 1e20, "log": "%s"}' % XID,
    '{"ts": Infinity, "log": "%s"}' % XID,
    '{"ts": -Infinity, "log": "%s"}' % XID,
    '{"ts": NaN, "log": "%s"}' % XID,
    '{"MESSAGE": "%s", "__REALTIME_TIMESTAMP": "18446744073709551615"}' % XID,
    '{"MESSAGE": "%s", "__REALTIME_TIMESTAMP": "999999999999999999"}' % XID,
    '{"MESSAGE": "%s", "__REALTIME_TIMESTAMP": 18446744073709551615}' % XID,
    '{"MESSAGE": "%s", "PRIORITY": "\u00b2"}' % XID,
    '{"MESSAGE": "%s", "SYSLOG_FACILITY": "\u0663"}' % XID,
    '{"MESSAGE": "%s", "__MONOTONIC_TIMESTAMP": "%s"}' % (XID, "9" * 400),
    '{"MESSAGE": "%s", "__SEQNUM": "%s"}' % (XID, "9" * 5000),
    '{"MESSAGE": "%s", "_HOSTNAME": ["a"], "_BOOT_ID": {"x": 1}, "SYSLOG_IDENTIFIER": 7}' % XID,
    "[" * 100000,  # nesting deeper than the JSON decoder goes
    "{" + '"a":[' * 50000,
    f"6,1,{'9' * 400},-;{XID}",
    f"6,{'9' * 5000},1000,-;{XID}",
    f"6,\u0663,1000,-;{XID}",
    f"[{'9' * 400}.5] {XID}",
    f"Dec  1 10:00:00 node01 kernel: [{'9' * 400}.5] {XID}",
    f"NVRM: Xid (PCI:0000:01:00): {'9' * 5000}, x",
    f"NVRM: Xid (PCI:0000:01:00): 13, pid={'9' * 5000}, (GPC {'9' * 5000}, TPC 1, SM 2) link {'9' * 5000}",
    f"EDAC MC0: {'9' * 5000} CE memory read error on CPU#0Channel#2_DIMM#0 (grain:\u00b2)",
    f"EDAC MC0: 1 CE memory read error on CPU#0Channel#2_DIMM#0 (grain:{'9' * 5000})",
    f"mce: [Hardware Error]: CPU {'9' * 5000}: Machine Check: 0 Bank 1: 1",
    f"mce: [Hardware Error]: TSC {'9' * 5000} TIME {'9' * 5000}",
    f"mlx5_core 0000:08:00.0 mlx5_0: Port: {'9' * 5000} Link DOWN",
    f"XidCriticalError: Xid={'9' * 5000} on Device=GPU-1",
    f"<999>{XID}",
    f"\ufeff[ 1.0] {XID}",
]


@pytest.mark.parametrize("line", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_inputs_that_once_ended_a_run(line: str) -> None:
    sane(parse_line(line, CTX))
    sane(parse_kmsg_record(line, CTX))
    for parse in PARSERS:
        parse(line)
    for e in KernelLogParser().feed_lines([line], CTX):
        assert isinstance(e, FaultEvent) and e.attrs.get("family") != "error", e.attrs
        e.to_json()


@pytest.mark.parametrize("value, expected", [
    (1733045125, "2024-12-01T09:25:25"), (1733045125123, "2024-12-01T09:25:25.123000"),
    (1733045125123456, "2024-12-01T09:25:25.123456"), (1733045125123456789, "2024-12-01T09:25:25.123456"),
    ("1733045125123", "2024-12-01T09:25:25.123000"), (1733045125.5, "2024-12-01T09:25:25.500000"),
    (1e20, None), (float("inf"), None), (float("nan"), None), (True, None), ("²", None), (12, None),
])
def test_epoch_units_read_right(value, expected) -> None:
    got = epoch_time(value)
    assert (got.replace(tzinfo=None).isoformat() if got else None) == expected
    rec = parse_line(json.dumps({"timestamp": value, "log": XID}), CTX)
    assert rec.message == XID and (rec.time == got)


def test_journal_stamps_out_of_range_keep_the_record_without_a_time() -> None:
    rec = parse_line(json.dumps({"MESSAGE": XID, "__REALTIME_TIMESTAMP": str(2 ** 64 - 1), "PRIORITY": "²",
                                 "__MONOTONIC_TIMESTAMP": "9" * 400, "__SEQNUM": "9" * 5000}), CTX)
    assert (rec.message, rec.time, rec.level, rec.monotonic, rec.seq) == (XID, None, None, None, None)
    rec = parse_kmsg_record(f"6,{'9' * 5000},{'9' * 400},-;{XID}", CTX)
    assert (rec.message, rec.seq, rec.monotonic, rec.time) == (XID, None, None, None)


def test_the_fuzz_target_takes_every_regression_input() -> None:
    envneeds.module("atheris", "the fuzz target's engine, the [test] extra", expected=envneeds.ON_X86_64)
    import fuzz_line_parser

    for line in REGRESSIONS:
        fuzz_line_parser.check(line)

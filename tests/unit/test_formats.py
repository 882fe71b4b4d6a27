"""Envelope detection and timestamp normalization, one table row per log format.

Inputs are constructed from each format's definition (kernel Documentation/ABI/testing/dev-kmsg,
util-linux dmesg, RFC 3164/3339/5424, journalctl output modes, talosctl dmesg, the CRI log
format); the real lines of each format are checked in test_real_cases.py. Expected times are
worked out by hand from the printed stamp and its zone.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from nodewarden.events import iso_utc
from nodewarden.parsing.dedupe import dedupe
from nodewarden.parsing.envelope import TimeContext, month_number, parse_line
from nodewarden.parsing.stream import KernelLogParser, records_from_lines

UTC = dt.timezone.utc
REF_TIME = dt.datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
BOOT_TIME = dt.datetime(2025, 1, 1, tzinfo=UTC)
REF = TimeContext.make(tz="UTC", reference=REF_TIME)
SHANGHAI = TimeContext.make(tz="Asia/Shanghai", reference=REF_TIME)  # UTC+8, no DST
BOOT = TimeContext.make(tz="UTC", reference=REF_TIME, boot_time=BOOT_TIME)
XID79 = "NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus"


def fields(rec) -> dict:
    d = {name: getattr(rec, name) for name in rec.__slots__}
    d["time"] = iso_utc(rec.time)
    d.update(rec.extra or {})
    return d


def journal(**kw) -> str:
    return json.dumps(kw)


FORMATS = [
    # --- raw /dev/kmsg: "prio,seq,usec,flags[,more];message" ---------------------------------
    pytest.param("6,3964,206764307,-;nvidia-nvswitch2: open (major=510)", REF,
                 dict(fmt="kmsg", facility="kern", level="info", seq=3964, monotonic=206.764307, time=None,
                      time_kind="mono", flags="-", message="nvidia-nvswitch2: open (major=510)"),
                 id="kmsg"),
    pytest.param("6,3964,206764307,-;nvidia-nvswitch2: open (major=510)", BOOT,
                 dict(monotonic=206.764307, time="2025-01-01T00:03:26.764307Z", time_kind="mono"),
                 id="kmsg + boot time -> wall"),
    pytest.param("4,17,5000000,c,caller=T123;" + XID79, REF,
                 dict(fmt="kmsg", level="warn", seq=17, flags="c", monotonic=5.0, message=XID79),
                 id="kmsg continuation flag and extra header field"),
    pytest.param(r"6,5,100,-;first line\x0asecond line", REF,
                 dict(message="first line\nsecond line"), id="kmsg \\x0a escape"),
    pytest.param(r"6,5,100,-;caf\xc3\xa9", REF, dict(message="café"), id="kmsg escaped UTF-8 bytes"),
    pytest.param("14,7,100,-;user wrote this", REF, dict(facility="user", level="info", kernel=False),
                 id="kmsg userspace facility"),
    # --- dmesg [mono] ----------------------------------------------------------------------------
    pytest.param("[    0.064261] mce: x", REF,
                 dict(fmt="dmesg", monotonic=0.064261, time=None, time_kind="mono", message="mce: x"),
                 id="dmesg padded mono"),
    pytest.param("[93297.027938] x", REF, dict(monotonic=93297.027938), id="dmesg mono"),
    pytest.param("[  100.500000] x", BOOT, dict(monotonic=100.5, time="2025-01-01T00:01:40.500000Z", time_kind="mono"),
                 id="dmesg mono + boot time -> wall"),
    # --- dmesg -T: local time, no zone, day space-padded --------------------------------------------
    pytest.param("[Fri Aug  2 11:43:09 2024] x", REF,
                 dict(fmt="dmesg_ctime", time="2024-08-02T11:43:09Z", time_kind="wall", raw_time="Fri Aug  2 11:43:09 2024"),
                 id="dmesg -T padded day"),
    pytest.param("[Fri Aug  2 11:43:09 2024] x", SHANGHAI, dict(time="2024-08-02T03:43:09Z"),
                 id="dmesg -T in Asia/Shanghai"),
    # --- dmesg --time-format iso: comma decimals, offset ------------------------------------------
    pytest.param("2025-01-21T04:41:44,283302+00:00 NVRM: x", REF,
                 dict(fmt="dmesg_iso", time="2025-01-21T04:41:44.283302Z", message="NVRM: x", host=None),
                 id="dmesg iso comma"),
    pytest.param("2025-01-21T12:41:44,283302+08:00 NVRM: x", REF, dict(time="2025-01-21T04:41:44.283302Z"),
                 id="dmesg iso +08:00"),
    pytest.param("2025-01-21T12:41:44,283302+08:00 NVRM: x", SHANGHAI, dict(time="2025-01-21T04:41:44.283302Z"),
                 id="dmesg iso offset wins over --tz"),
    # --- dmesg --decode: padded facility:level columns ---------------------------------------------
    pytest.param("kern  :warn  : [  123.456789] NVRM: x", REF,
                 dict(facility="kern", level="warn", monotonic=123.456789, message="NVRM: x", kernel=True),
                 id="decode + mono"),
    pytest.param("kern  :err   : 2025-01-21T04:41:44,283302+00:00 NVRM: x", REF,
                 dict(facility="kern", level="err", time="2025-01-21T04:41:44.283302Z"), id="decode + iso"),
    pytest.param("syslog:err   : 2025-05-27T04:18:56,089671+00:00 " + XID79, REF,
                 dict(facility="syslog", level="err", kernel=False, message=XID79), id="decode syslog facility"),
    pytest.param("daemon:notice: [    1.000000] x", REF, dict(facility="daemon", level="notice", kernel=False),
                 id="decode daemon:notice"),
    pytest.param("kern  :debug : [    1.000000] x", REF, dict(facility="kern", level="debug"), id="decode debug"),
    # --- RFC 3164 syslog / kern.log / journalctl short ---------------------------------------------
    pytest.param("Oct 20 18:54:04 node01 kernel: msg", REF,
                 dict(fmt="syslog", host="node01", ident="kernel", time="2025-10-20T18:54:04Z", message="msg"),
                 id="rfc3164 with host"),
    pytest.param("Sep 16 19:51:15 kernel: [    0.064261] msg", REF,
                 dict(host=None, ident="kernel", monotonic=0.064261, time="2025-09-16T19:51:15Z", message="msg"),
                 id="rfc3164 without host, with mono"),
    pytest.param("Dec  2 11:38:46 node01 kernel: [  218.250408] msg", REF,
                 dict(host="node01", monotonic=218.250408, time="2025-12-02T11:38:46Z"), id="rfc3164 padded day + mono"),
    pytest.param("Oct 20 18:54:04 node01.example.com kernel: msg", REF, dict(host="node01.example.com"),
                 id="rfc3164 FQDN host"),
    pytest.param("Oct 20 18:54:04 node01 mcelog[987]: msg", REF, dict(ident="mcelog", kernel=False),
                 id="rfc3164 daemon ident"),
    pytest.param("Jan  2 11:00:00 node01 kernel: msg", SHANGHAI, dict(time="2026-01-02T03:00:00Z"),
                 id="rfc3164 in Asia/Shanghai"),
    pytest.param("Feb 14 05:03:41.123456 node01 kernel: msg", REF,
                 dict(host="node01", time="2025-02-14T05:03:41.123456Z"), id="journalctl short-precise"),
    # localized month names (glibc abbreviations of pl_PL, de_DE, fr_FR; nl/sv full name)
    pytest.param("kwi 15 10:00:00 node01 kernel: msg", REF, dict(time="2025-04-15T10:00:00Z", host="node01"),
                 id="month kwi (pl)"),
    pytest.param("mär  3 10:00:00 node01 kernel: msg", REF, dict(time="2025-03-03T10:00:00Z"), id="month mär (de)"),
    pytest.param("déc.  2 10:00:00 node01 kernel: msg", REF, dict(time="2025-12-02T10:00:00Z"),
                 id="month déc. (fr)"),
    pytest.param("april 15 10:00:00 node01 kernel: msg", REF, dict(time="2025-04-15T10:00:00Z"),
                 id="month april (nl/sv)"),
    # --- RFC 3339 / journalctl short-iso -------------------------------------------------------------
    pytest.param("2025-01-07T21:16:59.312055+00:00 node01 kernel: [1378283.684891] msg", REF,
                 dict(fmt="rfc3339", host="node01", ident="kernel", time="2025-01-07T21:16:59.312055Z",
                      monotonic=1378283.684891, message="msg"), id="rfc3339 + mono"),
    pytest.param("2025-01-02T15:20:12+0800 node01 kernel: msg", REF,
                 dict(host="node01", time="2025-01-02T07:20:12Z", message="msg"), id="short-iso +0800"),
    pytest.param("2025-01-02T15:20:12.123456+0800 node01 kernel: msg", REF, dict(time="2025-01-02T07:20:12.123456Z"),
                 id="short-iso-precise +0800"),
    pytest.param("2025-01-02T02:20:12-0500 node01 kernel: msg", REF, dict(time="2025-01-02T07:20:12Z"),
                 id="short-iso -0500"),
    # --- RFC 5424 (synthetic: no real NVRM sample exists; shape from RFC 5424 section 6) ---------------
    pytest.param("<4>1 2025-01-07T21:16:59.312055+00:00 node01 kernel - - - " + XID79, REF,
                 dict(fmt="rfc5424", facility="kern", level="warn", host="node01", ident="kernel",
                      time="2025-01-07T21:16:59.312055Z", message=XID79), id="rfc5424 synthetic"),
    pytest.param('<4>1 2025-01-07T21:16:59.312055+00:00 node01 kernel - - [meta sequenceId="1"] ' + XID79, REF,
                 dict(fmt="rfc5424", message=XID79), id="rfc5424 synthetic with structured data"),
    pytest.param("<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - 'su root' failed for lonvick on /dev/pts/8",
                 REF, dict(fmt="rfc5424", facility="auth", level="crit", host="mymachine.example.com", ident="su",
                           kernel=False, time="2003-10-11T22:14:15.003000Z",
                           message="'su root' failed for lonvick on /dev/pts/8"),
                 id="rfc5424 <34>1 (synthetic, after RFC 5424 example 1)"),
    # --- journalctl -o short-monotonic ----------------------------------------------------------------
    pytest.param("[ 1843.308145] node01 kernel: msg", REF,
                 dict(fmt="journal_short_monotonic", host="node01", ident="kernel", monotonic=1843.308145,
                      message="msg"), id="short-monotonic"),
    pytest.param("[ 1843.308145] node01 kernel: msg", BOOT, dict(time="2025-01-01T00:30:43.308145Z"),
                 id="short-monotonic + boot time"),
    # --- journalctl -o json ----------------------------------------------------------------------------
    pytest.param(journal(_TRANSPORT="kernel", __REALTIME_TIMESTAMP="1732000000123456",
                         __MONOTONIC_TIMESTAMP="1843308145", MESSAGE=XID79, _HOSTNAME="node01", PRIORITY="4",
                         SYSLOG_FACILITY="0", _BOOT_ID="b0"), REF,
                 dict(fmt="journal_json", time="2024-11-19T07:06:40.123456Z", monotonic=1843.308145, host="node01",
                      facility="kern", level="warn", boot_id="b0", kernel=True, message=XID79),
                 id="journal json"),
    pytest.param(journal(_TRANSPORT="kernel", __REALTIME_TIMESTAMP="1732000000123456",
                         MESSAGE=list(b"NVRM: \xff\xfe" + XID79[5:].encode())), REF,
                 dict(message="NVRM: \ufffd\ufffd" + XID79[5:]), id="journal json MESSAGE as byte array"),
    pytest.param(journal(_TRANSPORT="syslog", __REALTIME_TIMESTAMP="1732000000123456", MESSAGE=XID79,
                         SYSLOG_IDENTIFIER="logger"), REF, dict(kernel=False, ident="logger"),
                 id="journal json userspace transport"),
    # journald's kmsg reader (systemd src/journal/journald-kmsg.c dev_kmsg_record) stores the kmsg usec
    # field as _SOURCE_MONOTONIC_TIMESTAMP: the kernel's stamp, which dmesg and kern.log print as [mono];
    # __MONOTONIC_TIMESTAMP is when journald received the record (150 us later here).
    pytest.param(journal(_TRANSPORT="kernel", __REALTIME_TIMESTAMP="1732000000123456",
                         __MONOTONIC_TIMESTAMP="1843308295", _SOURCE_MONOTONIC_TIMESTAMP="1843308145", MESSAGE=XID79),
                 REF, dict(fmt="journal_json", monotonic=1843.308145, time="2024-11-19T07:06:40.123456Z"),
                 id="journal json kernel record: the kmsg stamp"),
    pytest.param(journal(_TRANSPORT="kernel", __MONOTONIC_TIMESTAMP="1843308295",
                         _SOURCE_MONOTONIC_TIMESTAMP="\uff11\uff18\uff14\uff13", MESSAGE=XID79),
                 REF, dict(monotonic=1843.308295), id="journal json kmsg stamp not ASCII digits: the receive stamp"),
    pytest.param(journal(_TRANSPORT="kernel", __MONOTONIC_TIMESTAMP="1843308295",
                         _SOURCE_MONOTONIC_TIMESTAMP="9" * 400, MESSAGE=XID79),
                 REF, dict(monotonic=1843.308295), id="journal json kmsg stamp of 400 digits: the receive stamp"),
    pytest.param(journal(_TRANSPORT="syslog", __MONOTONIC_TIMESTAMP="1843308295",
                         _SOURCE_MONOTONIC_TIMESTAMP="1843308145", MESSAGE=XID79, SYSLOG_IDENTIFIER="logger"),
                 REF, dict(monotonic=1843.308295, kernel=False), id="journal json other transport: the receive stamp"),
    # --- <N> priority prefixes (pstore dumps, injected lines) ----------------------------------------
    pytest.param("<3>[6085126.134786] " + XID79, REF,
                 dict(facility="kern", level="err", monotonic=6085126.134786, message=XID79), id="<3> + mono"),
    pytest.param("<14>hello", REF, dict(facility="user", level="info", kernel=False, message="hello"),
                 id="<14> user.info"),
    pytest.param("kernel: [16450076.435595] " + XID79, REF,
                 dict(ident="kernel", monotonic=16450076.435595, message=XID79), id="bare kernel: prefix"),
    # --- Talos (talosctl dmesg): node: facility: level: [RFC 3339 ns]: msg -------------------------------
    pytest.param("192.0.2.2: kern:    info: [2025-05-27T04:18:56.089671404Z]: " + XID79, REF,
                 dict(fmt="talos", host="192.0.2.2", facility="kern", level="info",
                      time="2025-05-27T04:18:56.089671Z", message=XID79), id="talos IP node, ns stamp"),
    pytest.param("node01: kern: warning: [2025-05-27T04:18:56.089671404Z]: " + XID79, REF,
                 dict(fmt="talos", host="node01", level="warn"), id="talos warning level"),
    # --- CRI container log: "ts stream F|P msg" ------------------------------------------------------------
    pytest.param("2025-05-27T04:18:56.089671123Z stdout F [ 1843.308145] " + XID79, REF,
                 dict(fmt="cri", time="2025-05-27T04:18:56.089671Z", monotonic=1843.308145, message=XID79),
                 id="cri full line around dmesg"),
    pytest.param("2025-05-27T04:18:56.089671123Z stderr P " + XID79, REF, dict(fmt="cri", message=XID79),
                 id="cri partial line"),
    # --- Go log (k8s-device-plugin): local time, no zone -------------------------------------------------
    pytest.param("2020/08/10 19:09:42 XidCriticalError", SHANGHAI,
                 dict(fmt="golog", time="2020-08-10T11:09:42Z", kernel=False), id="golog in Asia/Shanghai"),
]


@pytest.mark.parametrize("line, ctx, expected", FORMATS)
def test_envelope(line: str, ctx: TimeContext, expected: dict) -> None:
    got = fields(parse_line(line, ctx))
    assert {k: got.get(k) for k in expected} == expected


@pytest.mark.parametrize("line", ["", "   ", "\n", "\r\n"])
def test_blank_line_is_no_record(line: str) -> None:
    assert parse_line(line, REF) is None


# -- year-less dates --------------------------------------------------------------------------

@pytest.mark.parametrize("stamp, reference, expected", [
    pytest.param("Dec 31 23:59:59", "2026-01-02T12:00:00", "2025-12-31T23:59:59Z", id="Dec 31 read on Jan 2"),
    pytest.param("Jan  2 11:00:00", "2026-01-02T12:00:00", "2026-01-02T11:00:00Z", id="same day"),
    pytest.param("Jan  3 11:00:00", "2026-01-02T12:00:00", "2026-01-03T11:00:00Z", id="one day of clock slack"),
    pytest.param("Jan  5 11:00:00", "2026-01-02T12:00:00", "2025-01-05T11:00:00Z", id="later date is last year"),
    pytest.param("Feb 29 10:00:00", "2026-01-02T12:00:00", "2024-02-29T10:00:00Z", id="leap day in last leap year"),
])
def test_yearless_date_takes_year_from_reference(stamp: str, reference: str, expected: str) -> None:
    ctx = TimeContext.make(tz="UTC", reference=dt.datetime.fromisoformat(reference).replace(tzinfo=UTC))
    assert iso_utc(parse_line(f"{stamp} node01 kernel: msg", ctx).time) == expected


def test_yearless_date_never_lands_in_the_future() -> None:
    # Every day of the year, read with a 2 January reference: never after the reference + 1 day.
    ctx = TimeContext.make(tz="UTC", reference=REF_TIME)
    day = dt.date(2025, 1, 1)
    while day.year == 2025:
        t = parse_line(f"{day:%b} {day.day:2d} 12:00:00 node01 kernel: msg", ctx).time
        assert REF_TIME - dt.timedelta(days=366) < t <= REF_TIME + dt.timedelta(days=1), day
        day += dt.timedelta(days=1)


@pytest.mark.parametrize("token, month", [
    ("Jan", 1), ("kwi", 4), ("Mär", 3), ("mär", 3), ("déc.", 12), ("april", 4), ("okt", 10), ("mai", 5),
    ("Dez", 12), ("sty", 1), ("juil.", 7),
])
def test_localized_month_names(token: str, month: int) -> None:
    assert month_number(token) == month


@pytest.mark.parametrize("token", ["node01", "kern", "xyz", ""])
def test_non_month_tokens(token: str) -> None:
    assert month_number(token) is None


# -- multi-line records ------------------------------------------------------------------------

def test_kmsg_dictionary_lines_are_properties() -> None:
    # Documentation/ABI/testing/dev-kmsg: " KEY=value" lines follow their record.
    lines = ["4,17,5000000,-;" + XID79, " SUBSYSTEM=pci", " DEVICE=+pci:0000:04:00.0",
             "6,18,5000100,-;next record"]
    recs = list(records_from_lines(lines, REF))
    assert [(r.seq, r.message) for r in recs] == [(17, XID79), (18, "next record")]
    assert (recs[0].extra["SUBSYSTEM"], recs[0].extra["DEVICE"]) == ("pci", "+pci:0000:04:00.0")


def test_talos_dictionary_lines_are_properties_not_text() -> None:
    lines = ["192.0.2.2: kern:    info: [2025-05-27T04:18:56.089671404Z]: " + XID79, " SUBSYSTEM=pci",
             " DEVICE=+pci:0000:04:00.0"]
    (e,) = KernelLogParser().feed_lines(lines, REF)
    assert (e.code, e.host, e.message, e.attrs["payload"]) == (79, "192.0.2.2", XID79, "GPU has fallen off the bus")


def test_dmesg_continuation_lines_join_the_message() -> None:
    lines = ["[ 1.000000] first", "           second", "[ 2.000000] next"]
    recs = list(records_from_lines(lines, REF))
    assert [(r.monotonic, r.message) for r in recs] == [(1.0, "first\nsecond"), (2.0, "next")]


# -- events keep the envelope's time, host and facility ------------------------------------------

@pytest.mark.parametrize("line, ctx, expected", [
    pytest.param("[  100.500000] " + XID79, BOOT,
                 dict(time="2025-01-01T00:01:40.500000Z", time_kind="mono", monotonic=100.5), id="dmesg + boot time"),
    pytest.param("Jan  2 11:00:00 node01 kernel: " + XID79, SHANGHAI,
                 dict(time="2026-01-02T03:00:00Z", time_kind="wall", host="node01"), id="syslog in Asia/Shanghai"),
    pytest.param(journal(_TRANSPORT="kernel", SYSLOG_FACILITY="1", PRIORITY="3",
                         __REALTIME_TIMESTAMP="1748319536089671", MESSAGE=XID79, _HOSTNAME="node01"), REF,
                 dict(time="2025-05-27T04:18:56.089671Z", host="node01", facility="user", injected=True),
                 id="journal json: userspace write to /dev/kmsg is marked"),
    pytest.param("<4>1 2025-01-07T21:16:59.312055+00:00 node01 kernel - - - " + XID79, REF,
                 dict(time="2025-01-07T21:16:59.312055Z", host="node01", facility=None), id="rfc5424 synthetic"),
])
def test_event_time_and_host(line: str, ctx: TimeContext, expected: dict) -> None:
    (e,) = KernelLogParser().feed_lines([line], ctx)
    got = dict(e.attrs, time=iso_utc(e.time), time_kind=e.time_kind, monotonic=e.monotonic, host=e.host)
    assert (e.kind, e.code) == ("xid", 79)
    assert {k: got.get(k) for k in expected} == expected


def test_userspace_journal_record_quoting_an_xid_is_no_event() -> None:
    line = journal(_TRANSPORT="syslog", __REALTIME_TIMESTAMP="1732000000123456", MESSAGE=XID79,
                   SYSLOG_IDENTIFIER="logger")
    assert list(KernelLogParser().feed_lines([line], REF)) == []


def test_a_kern_log_line_and_its_journal_record_are_one_event() -> None:
    # One printk kept by rsyslog in kern.log ("[mono]" is the kmsg stamp) and by journald, exported with
    # journalctl -o json: the same monotonic stamp (_SOURCE_MONOTONIC_TIMESTAMP), one event across inputs.
    ctx = TimeContext.make(tz="UTC", reference=dt.datetime(2026, 2, 1, tzinfo=UTC))
    kern = "Jan 25 10:34:54 node1 kernel: [  100.000001] " + XID79
    record = dict(__REALTIME_TIMESTAMP="1769337294859532", _SOURCE_MONOTONIC_TIMESTAMP="100000001", _HOSTNAME="node1",
                  _TRANSPORT="kernel", SYSLOG_IDENTIFIER="kernel", MESSAGE=XID79, PRIORITY="3", SYSLOG_FACILITY="0")
    (a,) = KernelLogParser(source="file").feed_lines([kern], ctx)
    (b,) = KernelLogParser(source="journal").feed_lines([journal(**record, __MONOTONIC_TIMESTAMP="100000151")], ctx)
    assert (a.host, a.monotonic) == (b.host, b.monotonic) == ("node1", 100.000001)
    assert [(e.source, e.code) for e in dedupe([(a, "kern.log"), (b, "journal.json")])] == [("file", 79)]

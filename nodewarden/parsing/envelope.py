"""Kernel-log line envelopes: detect the format of one line, split off its timestamp, host and
priority, and hand back the message.

Pure functions: a line (and a :class:`TimeContext`) in, a :class:`Record` out. Formats read,
detected per line:

* raw ``/dev/kmsg`` records ``prio,seq,usec,flags[,...];message`` (Documentation/ABI/testing/dev-kmsg)
* ``dmesg`` ``[ mono]``, ``dmesg -T`` ``[Fri Aug 30 11:43:09 2024]``, ``dmesg --time-format iso``
  (comma decimals), ``dmesg --decode`` ``kern  :warn  :`` prefixes
* syslog / kern.log RFC 3164 ``Dec  2 11:38:46 host kernel: [mono] ...`` (hostname optional, localized
  month names), RFC 3339 ``2025-01-07T21:16:59.312055+00:00 host kernel: ...``, RFC 5424 ``<34>1 ...``
* ``journalctl`` short, short-precise, short-iso (``+0800``), short-monotonic and ``-o json``
* ``<N>`` priority prefixes, a bare ``kernel:`` prefix, Talos ``host: kern: info: [ts]: msg``,
  CRI container logs ``ts stdout F msg``, JSON agent wrappers (``msg``/``message``/``log``/``line``
  keys; when the wrapped text has its own envelope, its stamp is the record's time), a scanner's
  ``line `` word before an envelope (gpud)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from typing import Any, NamedTuple

from nodewarden.events import TIME_MONO, TIME_NONE, TIME_WALL
from nodewarden.parsing.lines import TRIGGERS

UTC = dt.timezone.utc

FACILITIES = (
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "security", "console", "solaris-cron",
    "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
)
LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")

# Month names seen in syslog files written under non-English locales (glibc abbreviations and
# full names). Keys are lower-case, without a trailing dot. Looked up whole, then by prefix.
_MONTHS: dict[str, int] = {}
for _num, _names in enumerate(
    (
        "jan january januar janv janvier ene enero gen gennaio sty styczeń stycznia januari jän jänner янв январь января",
        "feb february februar fév févr février febrero febbraio fev fevereiro lut luty lutego februari фев февраль февраля",
        "mar march märz mär mars marzo março mrt maart mrz marca marzec март марта",
        "apr april avr avril abr abril aprile kwi kwiecień kwietnia апр апрель апреля",
        "may mai mayo mag maggio maio maj mei май мая",
        "jun june juni juin junio giu giugno cze czerwiec czerwca июн июнь июня",
        "jul july juli juil juillet julio lug luglio lip lipiec lipca июл июль июля",
        "aug august août aout ago agosto sie sierpień sierpnia augusti авг август августа",
        "sep sept september septembre septiembre set settembre setembro wrz wrzesień września сен сентябрь сентября",
        "oct october oktober okt octobre octubre ott ottobre out outubro paź październik października окт октябрь октября",
        "nov november novembre noviembre novembro lis listopad listopada ноя ноябрь ноября",
        "dec december dezember dez déc décembre dic diciembre dicembre dezembro gru grudzień grudnia дек декабрь декабря",
    ),
    start=1,
):
    for _n in _names.split():
        _MONTHS[_n] = _num


def month_number(token: str) -> int | None:
    """Month number 1-12 for an English or localized month name/abbreviation, else None."""
    t = token.lower().rstrip(".")
    m = _MONTHS.get(t)
    if m is None and len(t) > 3:
        m = _MONTHS.get(t[:4]) or _MONTHS.get(t[:3])
    return m


@dataclasses.dataclass(slots=True)
class Record:
    """One kernel-log record after its envelope is removed.

    ``message`` is the text a parser reads; ``raw`` the line(s) as read. ``time`` is an aware
    UTC datetime or None; ``monotonic`` seconds since boot or None.
    """

    message: str
    raw: str
    fmt: str
    time: dt.datetime | None = None
    time_kind: str = TIME_NONE
    raw_time: str | None = None
    monotonic: float | None = None
    host: str | None = None
    ident: str | None = None
    facility: str | None = None
    level: str | None = None
    seq: int | None = None
    boot_id: str | None = None
    kernel: bool = True  # False when the record is known not to come from the kernel
    extra: dict[str, Any] | None = None
    offset: int | None = None  # byte offset of the record in its input, when read from one


@dataclasses.dataclass(slots=True)
class TimeContext:
    """What a line cannot say about its own time.

    tz: zone of wall-clock stamps printed without an offset (``dmesg -T``, RFC 3164, journal short).
    reference: the latest time the input can be from (file mtime, or now); a syslog date
      without a year gets the year that puts it at or before ``reference`` (+1 day of slack).
    boot_time: wall time of boot, to turn monotonic stamps into wall time; None when unknown.
    """

    tz: dt.tzinfo = UTC
    reference: dt.datetime | None = None
    boot_time: dt.datetime | None = None

    @classmethod
    def make(cls, tz: str | dt.tzinfo | None = None, reference: dt.datetime | None = None,
             boot_time: dt.datetime | None = None) -> TimeContext:
        if isinstance(tz, str):
            if tz.upper() == "UTC":
                tz = UTC
            else:  # imported for a named zone only: the agent (kernel time) never loads zoneinfo
                from zoneinfo import ZoneInfo
                tz = ZoneInfo(tz)
        return cls(tz=tz or UTC, reference=reference, boot_time=boot_time)


# ---------------------------------------------------------------------------------------------
# Regular expressions, one per envelope. Compiled once.
_KMSG = re.compile(r"([0-9]{1,3}),([0-9]+),([0-9]+),([^;,]*)(?:,[^;]*)?;(.*)", re.S)
_PRIO = re.compile(r"<([0-9]{1,3})>")
_RFC5424 = re.compile(
    r"1 (\S+) (\S+) (\S+) (\S+) (\S+) (-|(?:\[(?:[^\]\\]|\\.)*\])+) ?(.*)", re.S)
_DECODE = re.compile(r"(" + "|".join(FACILITIES) + r")\s*:\s*(" + "|".join(LEVELS) + r")\s*: ?")
_MONO = re.compile(r"\[\s*([0-9]+\.[0-9]+)\]\s?")
_CTIME = re.compile(
    r"\[(?:[^\W\d_]+\.?\s+)?([^\W\d_]+\.?)\s+([0-9]{1,2})\s+([0-9]{1,2}):([0-9][0-9]):([0-9][0-9])\s+([0-9]{4})\]\s?")
_ISO = re.compile(
    r"([0-9]{4})-([0-9][0-9])-([0-9][0-9])[T ]([0-9][0-9]):([0-9][0-9]):([0-9][0-9])(?:[.,]([0-9]{1,9}))?(Z|[+-][0-9][0-9]:?[0-9][0-9])?\s+")
_GOLOG = re.compile(r"([0-9]{4})/([0-9][0-9])/([0-9][0-9]) ([0-9][0-9]):([0-9][0-9]):([0-9][0-9])(?:\.([0-9]{1,9}))? ")
_RFC3164 = re.compile(
    r"([^\W\d_]{3,12}\.?)\s+([0-9]{1,2})\s+([0-9]{1,2}):([0-9][0-9]):([0-9][0-9])(?:\.([0-9]{1,9}))?(?:\s+([0-9]{4}))?\s+")
# host (optional) and ident[pid]: after a syslog timestamp. Hostnames have no ':' or '['.
_SYSLOG_TAIL = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+)\s+)?(?P<ident>[^\s:\[\]]+)(?:\[(?P<pid>[0-9]+)\])?:(?:\s|$)(?P<msg>.*)", re.S)
_SYSLOG_TAIL_HOST = re.compile(
    r"(?P<host>[^\s:\[\]]+)\s+(?P<ident>[^\s:\[\]]+)(?:\[(?P<pid>[0-9]+)\])?:(?:\s|$)(?P<msg>.*)", re.S)
# Talos ``talosctl dmesg``: "10.1.10.21: kern:    info: [2021-01-14T16:16:01.266737804Z]: msg". The node
# is often an IP address; levels are right-aligned and spelled as syslog(3) does ("warning").
_TALOS = re.compile(
    r"(?P<host>[^\s:]+): (?P<fac>" + "|".join(FACILITIES) + r"):\s*(?P<lvl>warning|" + "|".join(LEVELS)
    + r"):\s*\[(?P<ts>[^\]]+)\]: ?(?P<msg>.*)", re.S)
_CRI = re.compile(r"(stdout|stderr) [FP] ")
_KERNEL_PREFIX = re.compile(r"kernel: ?")
_SHORT_MONO_TAIL = re.compile(r"(?P<host>[^\s:\[\]]+) kernel: (?P<msg>.*)", re.S)
# Syslog idents that are not "kernel" but still may appear with a host before them after an ISO
# stamp. Anything else after an ISO stamp without "[pid]" is read as dmesg --time-format iso.
_KNOWN_IDENTS = frozenset({
    "kernel", "mcelog", "rasdaemon", "nvidia-persistenced", "nv-fabricmanager", "nvidia-fabricmanager",
    "nv-hostengine", "kubelet", "containerd", "dockerd", "systemd", "slurmd", "nodewarden",
})


# Bounds of the numbers an envelope holds: a kmsg seq or a journal counter is a u64 (20 digits);
# a monotonic stamp past MAX_MONO_S seconds (about 31 years of uptime) is no boot's. Past them the
# field is unknown (None), the record kept: int() of 5,000 digits raises, float() of 400 is inf.
MAX_U64_DIGITS = 20
MAX_MONO_S = 1e9
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def ascii_uint(value: Any) -> int | None:
    """A non-negative integer below 2**64 from an int or a string of ASCII digits, else None.

    ``str.isdigit()`` is not used: it is true for ``"²"`` and Arabic-Indic digits, which are no
    number a kernel or journald writes. Booleans are not numbers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1 << 64 else None
    if isinstance(value, str) and 0 < len(value) <= MAX_U64_DIGITS and value.isascii() and value.isdigit():
        n = int(value)
        return n if n < 1 << 64 else None
    return None


def mono_seconds(value: float | None) -> float | None:
    """A monotonic stamp in seconds when it is finite and within ``[0, MAX_MONO_S]``, else None."""
    if value is None or not 0.0 <= value <= MAX_MONO_S:  # NaN fails both comparisons
        return None
    return value


def _from_us(us: int) -> dt.datetime | None:
    try:
        return _EPOCH + dt.timedelta(microseconds=us)
    except OverflowError:
        return None


_EPOCH_TEXT = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,9})?")


def epoch_time(value: Any) -> dt.datetime | None:
    """A wall time from a Unix epoch stamp in seconds, milliseconds, microseconds or nanoseconds
    (told apart by size: below 1e11 seconds, 1e14 ms, 1e17 us, 1e20 ns; fluent-bit and vector
    exports write each), given as a number or a string of ASCII digits. None for anything
    before 2001-09-09 (1e9 s), past 1e20, not finite, or out of datetime's range."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not _EPOCH_TEXT.fullmatch(value):
            return None
        value = int(value) if "." not in value else float(value)
    if isinstance(value, int):
        if not 1_000_000_000 <= value < 10 ** 20:
            return None
        for limit, per_us in ((10 ** 11, None), (10 ** 14, 1000), (10 ** 17, 1), (10 ** 20, -1000)):
            if value < limit:
                if per_us is None:
                    return _from_us(value * 1_000_000)
                return _from_us(value * per_us if per_us > 0 else value // -per_us)
    if isinstance(value, float):
        if not 1e9 <= value < 1e20:  # also NaN and infinities
            return None
        for limit, scale in ((1e11, 1.0), (1e14, 1e3), (1e17, 1e6), (1e20, 1e9)):
            if value < limit:
                return _from_us(int(value / scale * 1e6))
    return None


def _frac(text: str | None) -> int:
    """Fraction digits to microseconds (nanosecond stamps are truncated)."""
    if not text:
        return 0
    return int((text + "000000")[:6])


def _offset(text: str | None, default: dt.tzinfo) -> dt.tzinfo:
    if not text:
        return default
    if text == "Z":
        return UTC
    sign = 1 if text[0] == "+" else -1
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
    try:
        return dt.timezone(sign * dt.timedelta(minutes=minutes))
    except ValueError:  # "+99:00": no such offset; the stamp is read in the default zone
        return default


def _wall(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int, tz: dt.tzinfo) -> dt.datetime | None:
    try:
        return dt.datetime(y, mo, d, h, mi, s, us, tzinfo=tz).astimezone(UTC)
    except (ValueError, OverflowError):  # no such date, or out of datetime's range in UTC
        return None


def infer_year(month: int, day: int, h: int, mi: int, s: int, us: int, ctx: TimeContext) -> dt.datetime | None:
    """Year for a date printed without one: the latest that is not after ``ctx.reference``
    (plus one day of slack for clock skew); the current year when there is no reference."""
    ref = ctx.reference or dt.datetime.now(UTC)
    ref_local = ref.astimezone(ctx.tz)
    for year in (ref_local.year, ref_local.year - 1, ref_local.year - 2, ref_local.year - 3, ref_local.year - 4):
        t = _wall(year, month, day, h, mi, s, us, ctx.tz)
        if t is not None and t <= ref + dt.timedelta(days=1):
            return t
    return None


def _mono_to_wall(mono: float, ctx: TimeContext) -> dt.datetime | None:
    if ctx.boot_time is None:
        return None
    try:
        return ctx.boot_time + dt.timedelta(seconds=mono)
    except (OverflowError, ValueError):  # a monotonic stamp no boot can reach
        return None


def unescape_kmsg(text: str) -> str:
    r"""Undo /dev/kmsg's C-style ``\xNN`` escaping of non-printable bytes (``\x0a`` newlines)."""
    if "\\x" not in text:
        return text
    raw = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)
    # The escaped bytes are UTF-8 sequences; recombine them where they form valid text.
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


def parse_kmsg_record(text: str, ctx: TimeContext, boot_id: str | None = None) -> Record | None:
    """One record as read from ``/dev/kmsg`` (``prio,seq,usec,flags;msg`` + `` KEY=value`` lines)."""
    m = _KMSG.match(text)
    if not m:
        return None
    prio, seq, usec, flags, rest = m.groups()
    msg, _, props = rest.partition("\n ")
    extra: dict[str, Any] = {"flags": flags}
    if props:
        for prop in ("\n " + props).split("\n "):
            k, sep, v = prop.strip("\n").partition("=")
            if sep:
                extra[k] = v
    prio_i = int(prio)
    us = ascii_uint(usec)
    mono = mono_seconds(us / 1e6) if us is not None else None  # 400 digits: no stamp, the record kept
    t = _mono_to_wall(mono, ctx) if mono is not None else None
    return Record(
        message=unescape_kmsg(msg.rstrip("\n")), raw=text.rstrip("\n"), fmt="kmsg",
        time=t, time_kind=TIME_MONO if mono is not None else TIME_NONE, raw_time=usec[:40], monotonic=mono,
        facility=_facility_name(prio_i >> 3), level=LEVELS[prio_i & 7], seq=ascii_uint(seq),
        boot_id=boot_id, kernel=(prio_i >> 3) == 0, extra=extra,
    )


def _facility_name(num: int) -> str:
    names = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
             "authpriv", "ftp", "ntp", "security", "console", "solaris-cron")
    if num < len(names):
        return names[num]
    return f"local{num - 16}" if 16 <= num <= 23 else str(num)


def parse_line(line: str, ctx: TimeContext | None = None) -> Record | None:
    """Detect the format of one log line and split it into a :class:`Record`.

    Returns None for blank lines. Never raises on any input text.
    """
    ctx = ctx or _DEFAULT_CTX
    raw = line.rstrip("\r\n")
    if raw[:1] in ("\ufeff", "\x00"):
        # A byte-order mark (a file's first line), or the NUL blocks a crash leaves before the
        # first line written after the reboot: no text of the line.
        raw = raw.lstrip("\ufeff\x00")
    if not raw.strip():
        return None
    if raw[0] in " \t":
        # A continuation line (dmesg indents the 2nd.. lines of a multi-line record). Readers glue
        # it to the record before; alone (an indented paste), it is read as the line unindented.
        rec = parse_line(raw.lstrip(" \t"), ctx)
        if rec is not None:
            rec.raw = raw
            if rec.fmt == "bare":
                rec.fmt = "continuation"
        return rec
    if raw[0] == "{":
        rec = _parse_json(raw, ctx)
        if rec is not None:
            return rec
    if "0" <= raw[0] <= "9":
        m = _KMSG.match(raw)
        if m:
            return parse_kmsg_record(raw, ctx)
    if raw.startswith(_TOOL_PREFIX):
        rec = _tool_prefixed(raw, ctx)
        if rec is not None:
            return rec
    rec = Record(message=raw, raw=raw, fmt="bare")
    _parse_into(raw, rec, ctx)
    return rec


# A scanner's word before the kernel line it prints (gpud's ``line kern  :err   : <iso> ...``).
_TOOL_PREFIX = "line "


def _tool_prefixed(raw: str, ctx: TimeContext) -> Record | None:
    """``line <envelope> <message>``: the record of the envelope after the tool's word (``fmt``
    ``line+<envelope>``), or None when no envelope follows it (then the word is message text)."""
    rest = raw[len(_TOOL_PREFIX):]
    rec = Record(message=rest, raw=raw, fmt="bare")
    _parse_into(rest, rec, ctx)
    if rec.fmt == "bare" and rec.ident is None:
        return None
    rec.fmt = "line+" + rec.fmt
    return rec


_DEFAULT_CTX = TimeContext()


def _parse_into(text: str, rec: Record, ctx: TimeContext) -> None:
    """Peel envelopes off ``text`` into ``rec`` (in place). Order matters: outer layers first:
    the prefixes (:func:`_prefixes`), then the stamp, told by the character it starts with
    (``[`` dmesg, a digit ISO or Go log, else RFC 3164), then a Talos line; past all of them,
    the rest is the message."""
    head = _prefixes(text, rec, ctx)
    if head is None:  # an RFC 5424 record, read whole
        return
    pos, fmt_parts = head
    ch = text[pos:pos + 1]
    if ch == "[":
        done = (_dmesg_mono(text, pos, rec, fmt_parts, ctx) or _dmesg_ctime(text, pos, rec, fmt_parts, ctx)
                or _dmesg_relative(text, pos, rec, fmt_parts, ctx))
    elif "0" <= ch <= "9":
        done = _iso_stamp(text, pos, rec, fmt_parts, ctx) or _golog(text, pos, rec, ctx)
    else:
        done = _rfc3164(text, pos, rec, ctx)
    if done or _talos(text, pos, rec, ctx):  # Talos after the stamps: its node name may start with a digit
        return
    if fmt_parts:
        rec.fmt = "+".join(fmt_parts)
    rec.message = text[pos:]
    # A message that still starts with a timestamp (e.g. "<6>[  201.650687] ...", handled above;
    # "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ...", handled by ISO) is done here.


class _Head(NamedTuple):
    """Where a line's stamp begins, after the prefixes :func:`_prefixes` read."""

    pos: int  # offset in the text
    fmt_parts: list[str]  # the prefixes' names, in order, for Record.fmt ("prio", "decode")


def _prefixes(text: str, rec: Record, ctx: TimeContext) -> _Head | None:
    """Read the prefixes before a stamp into ``rec``: a ``<N>`` priority (pstore dumps, injected
    lines), dmesg ``--decode``'s facility/level columns, a bare ``kernel:`` (journal/syslog
    excerpts without time and host). None when the priority began an RFC 5424 record, which is
    then read whole into ``rec``."""
    pos = 0
    fmt_parts: list[str] = []
    m = _PRIO.match(text, pos)
    if m:
        prio = int(m.group(1))
        rec.facility, rec.level = _facility_name(prio >> 3), LEVELS[prio & 7]
        rec.kernel = (prio >> 3) == 0
        pos = m.end()
        if _rfc5424(text, pos, rec, ctx):
            return None
        fmt_parts.append("prio")
    m = _DECODE.match(text, pos)
    if m:
        rec.facility, rec.level = m.group(1), m.group(2)
        rec.kernel = rec.facility == "kern"
        pos = m.end()
        fmt_parts.append("decode")
    m = _KERNEL_PREFIX.match(text, pos)
    if m:
        rec.ident = "kernel"
        pos = m.end()
    return _Head(pos, fmt_parts)


def _rfc5424(text: str, pos: int, rec: Record, ctx: TimeContext) -> bool:
    """An RFC 5424 header after its ``<N>`` at ``pos`` (``1 TIMESTAMP HOST APP PROCID MSGID SD``):
    read with its message into ``rec``; False when there is none."""
    m = _RFC5424.match(text, pos)
    if not m:
        return False
    ts, host, app, _procid, _msgid, _sd, msg = m.groups()
    rec.fmt = "rfc5424"
    rec.host = None if host == "-" else host
    rec.ident = None if app == "-" else app
    _set_iso(rec, ts, ctx)
    rec.kernel = rec.ident in (None, "kernel")
    _finish_message(msg, rec, ctx)
    return True


def _dmesg_mono(text: str, pos: int, rec: Record, fmt_parts: list[str], ctx: TimeContext) -> bool:
    """dmesg's ``[ mono]`` stamp at ``pos`` (also ``journalctl -o short-monotonic``'s, followed by
    ``host kernel:``); False when there is none."""
    m = _MONO.match(text, pos)
    if not m:
        return False
    rec.fmt = "+".join(fmt_parts + ["dmesg"])
    _set_mono(rec, m.group(1), ctx)
    rest = text[m.end():]
    mt = _SHORT_MONO_TAIL.match(rest)  # journalctl -o short-monotonic
    if mt:
        rec.fmt = "journal_short_monotonic"
        rec.host = mt.group("host")
        rec.ident = "kernel"
        rest = mt.group("msg")
    rec.message = rest
    return True


def _dmesg_ctime(text: str, pos: int, rec: Record, fmt_parts: list[str], ctx: TimeContext) -> bool:
    """``dmesg -T``'s ``[Fri Aug 30 11:43:09 2024]`` at ``pos`` (wall time in ``ctx.tz``); False
    when there is none or its month is no month."""
    m = _CTIME.match(text, pos)
    if not m:
        return False
    mon = month_number(m.group(1))
    if not mon:
        return False
    rec.fmt = "+".join(fmt_parts + ["dmesg_ctime"])
    rec.raw_time = text[pos + 1:m.end()].rstrip().rstrip("]")
    rec.time = _wall(int(m.group(6)), mon, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                     int(m.group(5)), 0, ctx.tz)
    rec.time_kind = TIME_WALL if rec.time else TIME_NONE
    rec.message = text[m.end():]
    return True


def _iso_stamp(text: str, pos: int, rec: Record, fmt_parts: list[str], ctx: TimeContext) -> bool:
    """An ISO 8601 stamp at ``pos``, then what follows it: a CRI container log (``stdout F``),
    a syslog host and ident (RFC 3339, ``syslog_iso``), else ``dmesg --time-format iso``. False
    when there is no ISO stamp."""
    m = _ISO.match(text, pos)
    if not m:
        return False
    rec.raw_time = m.group(0).strip()
    _set_iso_match(rec, m, ctx)
    rest = text[m.end():]
    mc = _CRI.match(rest)
    if mc:
        rec.fmt = "cri"
        rec.message = rest[mc.end():]
        _parse_into_inner(rec, ctx)
        return True
    mt = _SYSLOG_TAIL_HOST.match(rest)
    if mt and (mt.group("pid") or mt.group("ident") in _KNOWN_IDENTS):
        rec.fmt = "rfc3339" if "T" in rec.raw_time else "syslog_iso"
        rec.host, rec.ident = mt.group("host"), mt.group("ident")
        rec.kernel = rec.ident == "kernel"
        _finish_message(mt.group("msg"), rec, ctx)
        return True
    rec.fmt = "+".join(fmt_parts + ["dmesg_iso"])
    rec.message = rest
    return True


def _golog(text: str, pos: int, rec: Record, ctx: TimeContext) -> bool:
    """A Go ``log`` stamp ``2024/01/02 15:04:05.000000`` at ``pos`` (wall time in ``ctx.tz``; a
    program's line, not the kernel's); False when there is none."""
    m = _GOLOG.match(text, pos)
    if not m:
        return False
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    rec.fmt = "golog"
    rec.raw_time = m.group(0).strip()
    rec.time = _wall(y, mo, d, h, mi, s, _frac(m.group(7)), ctx.tz)
    rec.time_kind = TIME_WALL if rec.time else TIME_NONE
    rec.kernel = False
    rec.message = text[m.end():]
    return True


def _rfc3164(text: str, pos: int, rec: Record, ctx: TimeContext) -> bool:
    """An RFC 3164 stamp ``Dec  2 11:38:46`` (year optional: inferred from ``ctx.reference``,
    localized month names read), then a syslog host and ident when there are; False when there
    is none or its month is no month."""
    m = _RFC3164.match(text, pos)
    if not m:
        return False
    mon = month_number(m.group(1))
    if not mon:
        return False
    d, h, mi, s = int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))
    us = _frac(m.group(6))
    rec.raw_time = m.group(0).strip()
    if m.group(7):
        rec.time = _wall(int(m.group(7)), mon, d, h, mi, s, us, ctx.tz)
    else:
        rec.time = infer_year(mon, d, h, mi, s, us, ctx)
    rec.time_kind = TIME_WALL if rec.time else TIME_NONE
    rest = text[m.end():]
    mt = _SYSLOG_TAIL.match(rest)
    rec.fmt = "syslog"
    if mt:
        rec.host, rec.ident = mt.group("host"), mt.group("ident")
        rec.kernel = rec.ident == "kernel"
        _finish_message(mt.group("msg"), rec, ctx)
    else:
        rec.message = rest
    return True


def _talos(text: str, pos: int, rec: Record, ctx: TimeContext) -> bool:
    """``talosctl dmesg``'s ``host: kern: info: [ts]: msg`` at ``pos``; False when it is not one."""
    m = _TALOS.match(text, pos)
    if not m:
        return False
    rec.fmt = "talos"
    rec.host = m.group("host")
    rec.facility, rec.level = m.group("fac"), "warn" if m.group("lvl") == "warning" else m.group("lvl")
    rec.kernel = rec.facility == "kern"
    _set_iso(rec, m.group("ts"), ctx)
    rec.message = m.group("msg")
    return True


# dmesg(1) stamps relative to the record before (util-linux dmesg.c print_record):
# --reltime / -H prints "[Jan21 10:22] " (short_ctime, "%b%d %H:%M") when the minute changes and
# "[  +0.000844] " ("[  %+8.06f] ", "[ %+9.06f] "; older builds "[%+8.06f]") otherwise;
# --time-format=delta prints "[<    0.000844>] ", ctime or mono with a delta "[%s <%12.06f>] ".
# A delta gives no time (time None, time_kind none, the delta kept as raw_time): summing deltas
# from the last anchor is not done, since the anchor is printed to the minute only and a sum would
# be off by up to 59 s. The anchor itself has the minute it prints (wall, year inferred).
_DELTA = re.compile(r"\[\s*(\+\s*[0-9]{1,12}\.[0-9]{1,9}|<\s*[0-9]{1,12}\.[0-9]{1,9}>)\]\s?")
_RELTIME = re.compile(r"\[([^\W\d_]{3,12}\.?)([0-9]{1,2}) ([0-9]{2}):([0-9]{2})\]\s?")
_WITH_DELTA = re.compile(r"\[(?P<stamp>[^\]<]{1,40}?) <\s*[0-9]{1,12}\.[0-9]{1,9}>\]\s?")


def _dmesg_relative(text: str, pos: int, rec: Record, fmt_parts: list[str], ctx: TimeContext) -> bool:
    """Read a dmesg ``-H``/``--reltime`` or ``--time-format=delta`` stamp at ``pos`` into ``rec``
    (``fmt`` ``dmesg_delta``, ``dmesg_reltime``, or the stamp's own with ``+delta``); False when
    there is none."""
    m = _DELTA.match(text, pos)
    if m:
        rec.fmt = "+".join(fmt_parts + ["dmesg_delta"])
        rec.raw_time = m.group(1).replace(" ", "")
        rec.time, rec.time_kind, rec.monotonic = None, TIME_NONE, None
        rec.message = text[m.end():]
        return True
    m = _RELTIME.match(text, pos)
    if m:
        mon, day, h, mi = month_number(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))
        if mon and h < 24 and mi < 60:
            rec.fmt = "+".join(fmt_parts + ["dmesg_reltime"])
            rec.raw_time = text[pos + 1:m.end()].rstrip().rstrip("]")
            rec.time = infer_year(mon, day, h, mi, 0, 0, ctx)
            rec.time_kind = TIME_WALL if rec.time else TIME_NONE
            rec.message = text[m.end():]
            return True
    m = _WITH_DELTA.match(text, pos)
    if m:  # "[<ctime or mono> <delta>]": the stamp without its delta
        _parse_into(text[:pos] + "[" + m.group("stamp") + "] " + text[m.end():], rec, ctx)
        if rec.fmt != "bare":
            rec.fmt += "+delta"
            return True
    return False


def _parse_into_inner(rec: Record, ctx: TimeContext, own_time: bool = False) -> None:
    """Re-read a message that carries its own envelope (a kernel line inside a container log).

    ``own_time``: the inner envelope's wall time, facility and level replace the wrapper's (a log
    wrapper's time is when a tool read the line, the kernel's stamp is when it was printed); an
    inner monotonic stamp that gives no wall time (boot time unknown) leaves the wrapper's time."""
    inner = Record(message=rec.message, raw=rec.raw, fmt="bare")
    _parse_into(rec.message, inner, ctx)
    if own_time:
        if inner.time is not None:
            rec.time, rec.time_kind, rec.raw_time = inner.time, inner.time_kind, inner.raw_time
        rec.facility = inner.facility or rec.facility
        rec.level = inner.level or rec.level
    if inner.fmt != "bare" or inner.ident is not None:
        rec.message = inner.message
        rec.monotonic = inner.monotonic if inner.monotonic is not None else rec.monotonic
        rec.host = inner.host or rec.host
        if inner.ident is not None:  # a syslog line inside: its ident says who wrote it
            rec.ident = inner.ident
        rec.kernel = rec.kernel and inner.kernel


def _finish_message(msg: str, rec: Record, ctx: TimeContext) -> None:
    """Syslog messages from the kernel may start with the dmesg ``[mono]`` stamp: keep it too."""
    m = _MONO.match(msg)
    if m:
        rec.monotonic = mono_seconds(float(m.group(1)))
        msg = msg[m.end():]
    rec.message = msg


def _set_mono(rec: Record, text: str, ctx: TimeContext) -> None:
    rec.monotonic = mono_seconds(float(text))
    rec.raw_time = text[:40]
    if rec.monotonic is None:  # no boot runs that long: the stamp is unknown, the record kept
        rec.time_kind, rec.time = TIME_NONE, None
        return
    rec.time_kind = TIME_MONO
    rec.time = _mono_to_wall(rec.monotonic, ctx)


_ISO_FULL = re.compile(
    r"([0-9]{4})-([0-9][0-9])-([0-9][0-9])[T ]([0-9][0-9]):([0-9][0-9]):([0-9][0-9])(?:[.,]([0-9]{1,9}))?\s*(Z|[+-][0-9][0-9]:?[0-9][0-9])?$")


def _set_iso(rec: Record, ts: str, ctx: TimeContext) -> None:
    rec.raw_time = ts
    m = _ISO_FULL.match(ts.strip())
    if m:
        _set_iso_match(rec, m, ctx)


def _set_iso_match(rec: Record, m: re.Match[str], ctx: TimeContext) -> None:
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    rec.time = _wall(y, mo, d, h, mi, s, _frac(m.group(7)), _offset(m.group(8), ctx.tz))
    rec.time_kind = TIME_WALL if rec.time else TIME_NONE


def _parse_json(raw: str, ctx: TimeContext) -> Record | None:
    """journalctl ``-o json`` records and JSON-wrapped agent/container logs."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes
        return None
    if not isinstance(obj, dict):
        return None
    if "MESSAGE" in obj:
        return _journal_json(obj, raw)
    return _wrapped_json(obj, raw, ctx)


def _journal_json(obj: dict[str, Any], raw: str) -> Record | None:
    """A journald export record (``journalctl -o json``, systemd.journal-fields(7)); None when its
    MESSAGE is neither text nor an array of bytes."""
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):  # non-UTF-8 messages are arrays of bytes
        msg = bytes(x & 0xFF for x in msg if isinstance(x, int)).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    rec = Record(message=msg, raw=raw, fmt="journal_json", host=_text(obj.get("_HOSTNAME")),
                 ident=_text(obj.get("SYSLOG_IDENTIFIER")), boot_id=_text(obj.get("_BOOT_ID")))
    transport = obj.get("_TRANSPORT")
    rec.kernel = transport in (None, "kernel")
    # Numbers as journald writes them (strings of ASCII digits; some exporters write ints);
    # anything else, or out of range (2**64-1, 18 digits, "²"), leaves the field unknown.
    rt = ascii_uint(obj.get("__REALTIME_TIMESTAMP"))
    if rt is not None:
        rec.time = _from_us(rt)
        if rec.time is not None:
            rec.time_kind = TIME_WALL
            rec.raw_time = str(rt)
    # A kernel record's own stamp: journald's kmsg reader (systemd src/journal/journald-kmsg.c,
    # dev_kmsg_record) writes the kmsg usec field as _SOURCE_MONOTONIC_TIMESTAMP, the stamp
    # dmesg and kern.log print as [mono]; __MONOTONIC_TIMESTAMP is when journald received it
    # (later, by up to the time journald lags). The same printk in kern.log and here is one
    # record (dedupe pairs them by it); other transports have only the receive stamp.
    mono = ascii_uint(obj.get("_SOURCE_MONOTONIC_TIMESTAMP")) if transport == "kernel" else None
    if mono is None:
        mono = ascii_uint(obj.get("__MONOTONIC_TIMESTAMP"))
    if mono is not None:
        rec.monotonic = mono_seconds(mono / 1e6)
    fac, pri = ascii_uint(obj.get("SYSLOG_FACILITY")), ascii_uint(obj.get("PRIORITY"))
    if fac is not None and fac < 1 << 16:
        rec.facility = _facility_name(fac)
    if pri is not None and pri < 8:
        rec.level = LEVELS[pri]
    rec.seq = ascii_uint(obj.get("__SEQNUM"))
    return rec


def _wrapped_json(obj: dict[str, Any], raw: str, ctx: TimeContext) -> Record | None:
    """A log line wrapped in JSON by an agent or container runtime: the message under a
    well-known key, possibly nested (:func:`_find_message`), its time, host and ident from the
    wrapper, the wrapped line's own envelope read too; None when no message is found."""
    msg = _find_message(obj)
    if msg is None:
        return None
    rec = Record(message=msg, raw=raw, fmt="json")
    for key in ("ts", "time", "timestamp", "@timestamp", "date"):
        ts = obj.get(key)
        if isinstance(ts, str) and not _EPOCH_TEXT.fullmatch(ts):
            _set_iso(rec, ts[:64], ctx)
            break
        if isinstance(ts, (int, float, str)) and not isinstance(ts, bool):
            # Epoch seconds, ms, us or ns (fluent-bit, vector); out of range: no time, line kept.
            rec.time = epoch_time(ts)
            rec.raw_time = str(ts)[:40] if not isinstance(ts, int) or abs(ts) < 10 ** 40 else "(too long)"
            rec.time_kind = TIME_WALL if rec.time is not None else TIME_NONE
            break
    host = obj.get("host") or obj.get("hostname") or obj.get("node")
    rec.host = host if isinstance(host, str) else None
    # Who wrote the line, as log shippers name it (fluent-bit's syslog parser, vector, rsyslog's
    # JSON templates): a program other than the kernel makes no fault.
    for key in _IDENT_KEYS:
        ident = obj.get(key)
        if isinstance(ident, str) and ident:
            rec.ident = ident
            rec.kernel = ident == "kernel"
            break
    _parse_into_inner(rec, ctx, own_time=True)
    return rec


_IDENT_KEYS = ("SYSLOG_IDENTIFIER", "syslog_identifier", "ident", "programname", "program", "appname", "app_name")


def _text(value: Any) -> str | None:
    """A journal field that must be text: None for any other JSON type."""
    return value if isinstance(value, str) else None


# The keys a JSON wrapper keeps the wrapped line under ("line": gpud's scanner log, whose "msg" is
# its own note such as "known aer").
_MESSAGE_KEYS = ("message", "msg", "log", "MESSAGE", "line")


def _find_message(obj: dict[str, Any], depth: int = 0) -> str | None:
    """The wrapped line of a JSON wrapper: the first value under :data:`_MESSAGE_KEYS` holding one
    of the words of a kernel record a parser reads (:data:`nodewarden.parsing.lines.TRIGGERS`, the
    list the stream filters by: a new fault kind's word unwraps too), then the same in nested
    objects (3 levels), else the first text value under those keys; None when there is none."""
    for key in _MESSAGE_KEYS:
        v = obj.get(key)
        if isinstance(v, str) and any(t in v for t in TRIGGERS):
            return v.rstrip("\n")
    if depth < 3:
        for v in obj.values():
            if isinstance(v, dict):
                found = _find_message(v, depth + 1)
                if found is not None:
                    return found
    for key in _MESSAGE_KEYS:
        v = obj.get(key)
        if isinstance(v, str):
            return v.rstrip("\n")
    return None

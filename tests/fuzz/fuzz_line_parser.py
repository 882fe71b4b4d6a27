"""Coverage-guided fuzz target (atheris) of the line parser: every envelope, every fault parser
and the stream assembler, on one input of any bytes.

    python3 tests/fuzz/fuzz_line_parser.py -max_total_time=25 [corpus_dir]

An exception escaping :func:`check` is a bug (atheris prints the input and exits non-zero).
tests/unit/test_fuzz.py runs it for a bounded time; inputs that crashed it are kept as
regression cases in tests/unit/test_parser_properties.py.
"""

from __future__ import annotations

import datetime as dt
import math
import sys

import atheris

with atheris.instrument_imports():
    from nodewarden.parsing import edac, ib, mce, xid
    from nodewarden.parsing.envelope import Record, TimeContext, parse_kmsg_record, parse_line
    from nodewarden.parsing.lines import driver_message, split_lines
    from nodewarden.parsing.stream import KernelLogParser

CTX = TimeContext.make(tz="UTC", reference=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                       boot_time=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc))
PARSERS = (xid.parse_xid, xid.parse_fallen_off_bus, xid.parse_rate_limit, xid.parse_gpu_at, xid.parse_device_plugin,
           edac.parse_edac, edac.parse_edac_mce, ib.parse_ib_port, ib.parse_net_link, ib.parse_module_event,
           mce.parse_mce_head, mce.parse_mce_detail)


def _sane(rec: Record | None) -> None:
    if rec is None:
        return
    assert isinstance(rec.message, str) and isinstance(rec.raw, str)
    assert rec.time is None or (rec.time.tzinfo is not None and rec.time.utcoffset() == dt.timedelta(0))
    assert rec.monotonic is None or (math.isfinite(rec.monotonic) and rec.monotonic >= 0)
    assert rec.seq is None or 0 <= rec.seq < 1 << 64
    for f in (rec.host, rec.ident, rec.boot_id, rec.facility, rec.level):
        assert f is None or isinstance(f, str)


def check(text: str) -> None:
    """Everything the line parser does with one text; raises only on a bug."""
    _sane(parse_line(text, CTX))
    _sane(parse_kmsg_record(text, CTX))
    msg = driver_message(text, bare=True)
    for parse in PARSERS:
        parse(msg)
    split_lines(text)
    parser = KernelLogParser(source="file")
    for e in parser.feed_lines(split_lines(text) or [text], CTX):
        e.to_json()
        if e.kind == "unparsed":
            assert not e.attrs["reason"].startswith(("Value", "Type", "Overflow", "Key", "Index", "Attribute")), e.attrs


def TestOneInput(data: bytes) -> None:  # noqa: N802 - atheris' name
    check(data.decode("utf-8", "replace"))


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

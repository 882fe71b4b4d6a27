"""Small files (most of a fleet's rotated logs) are read whole and gzip archives inflated in one
go (nodewarden.collectors.kernel_log.read_file / gunzip): the events must be those of the
streaming reader, and a damaged archive must keep what precedes the damage. Directory walks
(expand_paths) give files in a documented order with their stat.
"""

from __future__ import annotations

import gzip
import os
import random
import zlib
from pathlib import Path

import pytest

from nodewarden.collectors import kernel_log as K

XID = "[{t:12.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid={pid}, name=python3, Ch 00000008"
NOISE = "[{t:12.6f}] mlx5_core 0000:0c:00.0: poll_health:800:(pid 0): device's health compromised - reached miss count"
MCE = ("[{t:12.6f}] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 9: 9c00004001010090\n"
       "[{t:12.6f}] mce: [Hardware Error]: TSC 0 ADDR 17e2cab00\n"
       "[{t:12.6f}] mce: [Hardware Error]: PROCESSOR 0:50657 TIME 1700000000 SOCKET 0 APIC 6 microcode 5003604")


def log_text(n: int, seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rnd.random()
        r = rnd.random()
        if r < 0.05:
            out.append(XID.format(t=t, bus=rnd.randrange(256), code=rnd.choice((13, 31, 43, 48, 79)), pid=i))
        elif r < 0.06:
            out.append(MCE.format(t=t))
        else:
            out.append(NOISE.format(t=t))
    return ("\n".join(out) + "\n").encode()


def events(path: Path, monkeypatch: pytest.MonkeyPatch, small: bool) -> list[dict]:
    monkeypatch.setattr(K, "SMALL_FILE", 1 << 30 if small else -1)
    evs, parser = K.read_file(K.LogFile(path, "node01"))
    return [e.to_dict() for e in evs] + [{"records": parser.stats.records}]


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_whole_file_read_gives_the_streamed_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   compress: bool) -> None:
    data = log_text(30_000)
    p = tmp_path / ("kern.log.2.gz" if compress else "kern.log")
    p.write_bytes(gzip.compress(data) if compress else data)
    whole = events(p, monkeypatch, small=True)
    streamed = events(p, monkeypatch, small=False)
    assert len(whole) > 1500
    assert whole == streamed
    assert sum(1 for e in whole if e.get("kind") == "mce") == sum(1 for _ in data.split(b"Machine Check:")) - 1


def test_gunzip_reads_every_member_and_zero_padding() -> None:
    a, b = log_text(2000, 1), log_text(10, 2)
    assert K.gunzip(gzip.compress(a) + gzip.compress(b)) == (a + b, None)
    assert K.gunzip(gzip.compress(a) + gzip.compress(b) + b"\0" * 512) == (a + b, None)
    assert K.gunzip(gzip.compress(b"")) == (b"", None)


def test_gunzip_keeps_the_text_before_trailing_garbage() -> None:
    a = log_text(100)
    text, error = K.gunzip(gzip.compress(a) + b"not gzip")
    assert text == a
    assert "trailing garbage" in error


def test_gunzip_keeps_everything_a_truncated_archive_holds() -> None:
    a = log_text(20_000, 3)
    z = gzip.compress(a)
    for cut in (len(z) // 3, len(z) - 9, len(z) - 1):
        text, error = K.gunzip(z[:cut])
        assert "ended before the end-of-stream marker" in error
        # zlib fed the same bytes at once inflates exactly as much
        assert text == zlib.decompressobj(wbits=31).decompress(z[:cut])
        assert a.startswith(text) and len(text) > 0


def test_gunzip_keeps_the_text_before_corrupt_data() -> None:
    a = log_text(20_000, 4)
    z = bytearray(gzip.compress(a, compresslevel=1))
    # An invalid block type (3) in the middle of the deflate stream is a data error: set the BTYPE
    # bits of the byte where zlib first stops; the text before it must be kept.
    z[len(z) // 2] = 0xFF
    text, error = K.gunzip(bytes(z))
    assert error is not None and error.startswith("corrupt gzip data")
    # Inflate decodes some garbage before it sees the error; all the text before that is kept.
    same = next((i for i, (x, y) in enumerate(zip(text, a)) if x != y), min(len(text), len(a)))
    assert same > len(a) // 3
    # a bad CRC is found only after the whole member: then all of its text is kept
    z = bytearray(gzip.compress(a))
    z[-6] ^= 0xFF
    text, error = K.gunzip(bytes(z))
    assert text == a and "incorrect data check" in error


def test_gunzip_refuses_past_its_limit() -> None:
    a = b"x" * (1 << 20)
    assert K.gunzip(gzip.compress(a), limit=1 << 19) is None
    assert K.gunzip(gzip.compress(a), limit=1 << 20) == (a, None)


def test_an_archive_that_expands_past_the_limit_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = log_text(20_000, 5)
    p = tmp_path / "kern.log.1.gz"
    p.write_bytes(gzip.compress(data))
    expected = events(p, monkeypatch, small=False)
    monkeypatch.setattr(K, "SMALL_TEXT", 1000)
    monkeypatch.setattr(K, "SMALL_FILE", 1 << 30)
    called = []
    real = K.events_from_stream
    monkeypatch.setattr(K, "events_from_stream", lambda *a, **k: called.append(1) or real(*a, **k))
    evs, parser = K.read_file(K.LogFile(p, "node01"))
    assert called and [e.to_dict() for e in evs] + [{"records": parser.stats.records}] == expected


def test_walk_order_hosts_and_stat(tmp_path: Path) -> None:
    files = ["node02/kern.log", "node02/kern.log.1", "node02/kern.log.10.gz", "node02/kern.log.2.gz",
             "node01/syslog", "node01/sub/kern.log", "node01/a.log", "node10/messages-20240108",
             "node10/messages-20240101.gz", "node10/messages", "rack7.log", ".hidden/kern.log",
             "node01/.swp", "cache.parquet"]
    for f in files:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * len(f))
    os.symlink(tmp_path / "node02", tmp_path / "node03")  # a link to a directory is not entered
    got, errors = K.expand_paths([tmp_path])
    assert errors == []
    rel = [(str(f.path.relative_to(tmp_path)), f.host) for f in got]
    assert rel == [
        ("rack7.log", "rack7"),
        ("node01/a.log", "node01"), ("node01/syslog", "node01"), ("node01/sub/kern.log", "node01"),
        ("node02/kern.log.10.gz", "node02"), ("node02/kern.log.2.gz", "node02"),
        ("node02/kern.log.1", "node02"), ("node02/kern.log", "node02"),
        ("node10/messages-20240101.gz", "node10"), ("node10/messages-20240108", "node10"),
        ("node10/messages", "node10"),
    ]
    for f in got:
        assert f.stat is not None and f.stat.st_size == len(str(f.path.relative_to(tmp_path)))


def test_walk_reports_an_unlistable_directory_and_goes_on(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root lists any directory")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kern.log").write_text("x")
    (tmp_path / "b").mkdir(mode=0)
    try:
        got, errors = K.expand_paths([tmp_path])
    finally:
        (tmp_path / "b").chmod(0o755)
    assert [f.path.name for f in got] == ["kern.log"]
    assert len(errors) == 1 and "cannot list directory" in str(errors[0])

"""Small files (most of a fleet's rotated logs) are read whole and gzip archives inflated in one
go (nodewarden.logfiles.read.read_file / compressed.gunzip): the events must be those of the
streaming reader, and a damaged archive must keep what precedes the damage. Directory walks
(expand_paths) give files in a documented order with their stat.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import zlib
from pathlib import Path

import pytest

from nodewarden.logfiles import InputError, LogFile, expand_paths, read, read_file
from nodewarden.logfiles.compressed import GzipText, gunzip

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
    monkeypatch.setattr(read, "SMALL_FILE", 1 << 30 if small else -1)
    evs, parser = read_file(LogFile(path, "node01"))
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
    assert gunzip(gzip.compress(a) + gzip.compress(b)) == (a + b, None)
    assert gunzip(gzip.compress(a) + gzip.compress(b) + b"\0" * 512) == (a + b, None)
    assert gunzip(gzip.compress(b"")) == (b"", None)


def test_gunzip_keeps_the_text_before_trailing_garbage() -> None:
    a = log_text(100)
    text, error = gunzip(gzip.compress(a) + b"not gzip")
    assert text == a
    assert "trailing garbage" in error


def test_gunzip_keeps_everything_a_truncated_archive_holds() -> None:
    a = log_text(20_000, 3)
    z = gzip.compress(a)
    for cut in (len(z) // 3, len(z) - 9, len(z) - 1):
        text, error = gunzip(z[:cut])
        assert "ended before the end-of-stream marker" in error
        # zlib fed the same bytes at once inflates as much; the cut line is left out
        inflated = zlib.decompressobj(wbits=31).decompress(z[:cut])
        assert text == inflated[:inflated.rfind(b"\n") + 1]
        assert a.startswith(text) and len(text) > 0


def test_a_corrupt_member_gives_no_text() -> None:
    """Inflate turns damage into plausible lines before zlib notices (often only at the CRC): the
    damaged member's text is not used; the members before it are (their CRCs held)."""
    good, a = log_text(3000, 6), log_text(20_000, 4)
    z = bytearray(gzip.compress(a, compresslevel=1))
    z[len(z) // 2] ^= 0xFF
    text, error = gunzip(gzip.compress(good) + bytes(z))
    assert text == good
    assert error.startswith("corrupt gzip data in member 2") and "not used" in error
    # a bad CRC alone (the text itself intact) is treated alike: nothing says which part is bad
    z = bytearray(gzip.compress(a))
    z[-6] ^= 0xFF
    text, error = gunzip(bytes(z))
    assert text == b"" and "incorrect data check" in error


@pytest.mark.parametrize("small", [True, False], ids=["whole", "streamed"])
def test_a_corrupt_archive_gives_no_false_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool) -> None:
    """The corrupt member's lines would parse as garbage and mangled Xids: none is kept, the
    file is named, and the member before it is counted; read whole or streamed (large files)."""
    monkeypatch.setattr(read, "SMALL_FILE", 1 << 30 if small else -1)
    first = log_text(2000, 7)
    z = bytearray(gzip.compress(log_text(20_000, 8), compresslevel=1))
    z[len(z) // 2] ^= 0xFF
    p = tmp_path / "kern.log.3.gz"
    p.write_bytes(gzip.compress(first) + bytes(z))
    with pytest.raises(InputError) as exc:
        read_file(LogFile(p, "node01"))
    assert str(p) in str(exc.value) and "corrupt gzip data" in str(exc.value)
    kept = exc.value.events
    assert len(kept) == first.count(b"NVRM: Xid") + first.count(b"Machine Check:")
    assert all(e.kind in ("xid", "mce") for e in kept)


@pytest.mark.parametrize("seed", range(6))
def test_streamed_gzip_text_is_gzips(seed: int) -> None:
    """GzipText reads what the gzip module reads: any number of members, empty ones, zero
    padding between and after them, read in pieces of any size."""
    rnd = random.Random(seed)
    parts = [log_text(rnd.randrange(0, 3000), seed * 10 + i) for i in range(rnd.randrange(1, 5))]
    data = b"".join(gzip.compress(x) + b"\0" * rnd.choice((0, 0, 1, 700)) for x in parts)
    r = GzipText(io.BytesIO(data))
    got = bytearray()
    while chunk := r.read(rnd.choice((1, 100, 4096, 1 << 20))):
        got += chunk
    assert bytes(got) == gzip.decompress(data) == b"".join(parts)
    assert gunzip(data) == (b"".join(parts), None)


def test_streamed_truncated_gzip_keeps_all_it_inflated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "SMALL_FILE", -1)
    data = log_text(20_000, 9)
    z = gzip.compress(data)
    p = tmp_path / "kern.log.2.gz"
    p.write_bytes(z[: len(z) * 2 // 3])
    with pytest.raises(InputError) as exc:
        read_file(LogFile(p, "node01"))
    text = zlib.decompressobj(wbits=31).decompress(z[: len(z) * 2 // 3])
    complete = text[: text.rfind(b"\n") + 1]
    want = complete.count(b"NVRM: Xid") + complete.count(b"Machine Check:")
    assert len(exc.value.events) in (want, want - 1)  # an MCE record may lack its last line
    assert "ended before the end-of-stream marker" in str(exc.value)


@pytest.mark.parametrize("small", [True, False], ids=["whole", "streamed"])
def test_the_line_a_cut_ends_inside_is_no_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool) -> None:
    """An archive cut inside "...Xid (PCI:0000:07:00): 79, ..." must not give an Xid 7."""
    monkeypatch.setattr(read, "SMALL_FILE", 1 << 30 if small else -1)
    line = "[    1.000000] NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    text = (line * 3).encode()
    cut_text = text[: len(text) - len(line) + line.index(": 7") + 3]  # ends "...): 7"
    d = zlib.compressobj(wbits=31)
    z = d.compress(cut_text) + d.flush(zlib.Z_SYNC_FLUSH)  # all of it inflatable, no gzip trailer
    p = tmp_path / "kern.log.2.gz"
    p.write_bytes(z)
    with pytest.raises(InputError) as exc:
        read_file(LogFile(p, "node01"))
    assert [e.code for e in exc.value.events] == [79, 79]


def test_gunzip_refuses_past_its_limit() -> None:
    a = b"x" * (1 << 20)
    assert gunzip(gzip.compress(a), limit=1 << 19) is None
    assert gunzip(gzip.compress(a), limit=1 << 20) == (a, None)


def test_an_archive_that_expands_past_the_limit_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = log_text(20_000, 5)
    p = tmp_path / "kern.log.1.gz"
    p.write_bytes(gzip.compress(data))
    expected = events(p, monkeypatch, small=False)
    monkeypatch.setattr(read, "SMALL_TEXT", 1000)
    monkeypatch.setattr(read, "SMALL_FILE", 1 << 30)
    called = []
    real = read.events_from_stream
    monkeypatch.setattr(read, "events_from_stream", lambda *a, **k: called.append(1) or real(*a, **k))
    evs, parser = read_file(LogFile(p, "node01"))
    assert called and [e.to_dict() for e in evs] + [{"records": parser.stats.records}] == expected


def test_walk_order_hosts_and_stat(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    files = ["node02/kern.log", "node02/kern.log.1", "node02/kern.log.10.gz", "node02/kern.log.2.gz",
             "node01/syslog", "node01/sub/kern.log", "node01/a.log", "node10/messages-20240108",
             "node10/messages-20240101.gz", "node10/messages", "rack7.log", ".hidden/kern.log",
             "node01/.swp", "cache.parquet"]
    for f in files:
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * len(f))
    (tmp_path / "elsewhere" / "n20").mkdir(parents=True)
    (tmp_path / "elsewhere" / "n20" / "kern.log").write_bytes(b"y" * 10)
    os.symlink(tmp_path / "elsewhere" / "n20", root / "node20")  # a fleet of links to node dirs
    os.symlink(root / "node02", root / "node03")  # a second name of node02: read once, as node02
    os.symlink(root, root / "node01" / "up")  # a link back up: not entered again
    os.mkfifo(root / "node10" / "kern.pipe")  # would block a read for ever
    got, errors = expand_paths([root])
    assert [str(e) for e in errors] == [f"{root}/node10/kern.pipe: not a regular file (FIFO, socket or device), skipped"]
    rel = [(str(f.path.relative_to(root)), f.host) for f in got]
    assert rel == [
        ("rack7.log", "rack7"),
        ("node01/a.log", "node01"), ("node01/syslog", "node01"), ("node01/sub/kern.log", "node01"),
        ("node02/kern.log.10.gz", "node02"), ("node02/kern.log.2.gz", "node02"),
        ("node02/kern.log.1", "node02"), ("node02/kern.log", "node02"),
        ("node10/messages-20240101.gz", "node10"), ("node10/messages-20240108", "node10"),
        ("node10/messages", "node10"),
        ("node20/kern.log", "node20"),
    ]
    for f in got:
        assert f.stat is not None and f.stat.st_size == (10 if f.host == "node20" else len(rel_name(f, root)))


def rel_name(f: LogFile, root: Path) -> str:
    return str(f.path.relative_to(root))


def test_a_fifo_in_a_directory_does_not_block(tmp_path: Path) -> None:
    """Read through the CLI in a child process: a FIFO found in a directory is reported, the
    rest is read, and the command ends (it used to wait for a writer for ever)."""
    import subprocess
    import sys
    d = tmp_path / "node01"
    d.mkdir()
    (d / "kern.log").write_text(XID.format(t=1.0, bus=4, code=79, pid=1) + "\n")
    os.mkfifo(d / "kern.log.fifo")
    r = subprocess.run([sys.executable, "-m", "nodewarden", "events", str(tmp_path), "--no-cache"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert "kern.log.fifo: not a regular file" in r.stderr
    assert r.stdout.count('"xid":79') == 1


def test_walk_reports_an_unlistable_directory_and_goes_on(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root lists any directory")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kern.log").write_text("x")
    (tmp_path / "b").mkdir(mode=0)
    try:
        got, errors = expand_paths([tmp_path])
    finally:
        (tmp_path / "b").chmod(0o755)
    assert [f.path.name for f in got] == ["kern.log"]
    assert len(errors) == 1 and "cannot list directory" in str(errors[0])


def test_gzipped_agent_journal_reads_line_by_line(tmp_path: Path) -> None:
    """Agent journals rotated and gzipped (events-YYYY-MM-DD.jsonl.gz) give the events they hold;
    a malformed line is skipped, the others kept."""
    import json

    from nodewarden.analysis.ingest import ingest
    log = tmp_path / "kern.log"
    log.write_bytes(log_text(3000, 11))
    evs, _ = read_file(LogFile(log, "node01"))
    lines = [json.dumps(e.to_dict()) for e in evs]
    lines.insert(len(lines) // 2, "{not json")
    j = tmp_path / "journal" / "events-2024-01-01.jsonl.gz"
    j.parent.mkdir()
    j.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    got, stats = ingest([str(j)])
    assert [e.to_dict() for e in got] == [e.to_dict() for e in evs] and len(evs) > 100


def test_malformed_journal_records_are_counted_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from nodewarden.analysis.ingest import ingest
    from nodewarden.cli import main
    good = {"kind": "xid", "time": "2024-03-01T10:00:00Z", "host": "node01", "xid": 79, "message": "m", "raw": "r"}
    bad = ['[]', '"x"', '123', 'null', '{not json', '{"kind":"xid","time":123}', '{"kind":"nosuch"}',
           json.dumps(dict(good, time="9999-12-31T23:59:59-05:00")), json.dumps(dict(good, xid="abc")),
           json.dumps(dict(good, xid=99999999999999999999999)), json.dumps(dict(good, xid=1.5)),
           json.dumps(dict(good, host=5)), json.dumps(dict(good, monotonic="1")), json.dumps(dict(good, attrs=[1]))]
    j = tmp_path / "events-2024-03-01.jsonl"
    j.write_text("\n".join([json.dumps(good)] + bad + [json.dumps(dict(good, host="node02"))]) + "\n")
    got, stats = ingest([str(j)])
    assert [(e.host, e.code) for e in got] == [("node01", 79), ("node02", 79)]
    assert (stats.unparsed, stats.records, stats.errors) == (len(bad), len(bad) + 2, [])
    assert main(["analyze", str(j), "--no-cache", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    # a gzipped journal cut short keeps what it holds and names the file
    z = gzip.compress((json.dumps(good) + "\n").encode() * 2000)
    jz = tmp_path / "events-2024-03-02.jsonl.gz"
    jz.write_bytes(z[: len(z) // 2])
    got, stats = ingest([str(jz)])
    got = list(got)
    assert len(got) > 100 and len(stats.errors) == 1 and str(jz) in stats.errors[0]


def test_journal_fields_of_the_wrong_type_or_not_text() -> None:
    from nodewarden.analysis.ingest import journal_event
    good = {"kind": "xid", "time": "2024-03-01T10:00:00Z", "host": "n3", "xid": 79}
    assert journal_event(good) is not None
    for extra in ({"pci_bus_id": [1, 2]}, {"pci_bus_id": {"a": 1}}, {"attrs": {"pci_bus_id": [1]}},
                  {"attrs": {"pid": "7"}}, {"host": "\ud800"}, {"message": "\udcff"}, {"attrs": {"x": "\ud800"}}):
        assert journal_event({**good, **extra}) is None, extra


@pytest.mark.parametrize("packed", [False, True])
def test_a_pipe_given_by_name_is_read(packed: bool) -> None:
    """``nodewarden events /dev/stdin`` (or ``<(zcat ...)``): a pipe cannot seek back after its
    magic bytes are read, so they are peeked; plain and gzip text alike."""
    import subprocess
    import sys
    line = b"Jan  5 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"
    data = gzip.compress(line) if packed else line
    p = subprocess.run([sys.executable, "-m", "nodewarden", "events", "/dev/stdin", "--no-cache"], input=data,
                       capture_output=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr
    (event,) = [json_line for json_line in p.stdout.decode().splitlines() if json_line.strip()]
    assert '"xid":79' in event and '"origin":"/dev/stdin"' in event

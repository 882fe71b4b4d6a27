"""nodewarden.kmsg against the kernel's own files: the two boot clocks against /proc/uptime and
/proc/stat's btime, the boot id, and records read from the real /dev/kmsg (read only: this
test writes nothing into the kernel log)."""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import kmsg
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

RECORD_HEAD = re.compile(r"[0-9]{1,3},[0-9]+,[0-9]+,[^;,]*(?:,[^;]*)?;")  # Documentation/ABI/testing/dev-kmsg
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _uptime() -> float:
    """/proc/uptime's first field: seconds since boot, CLOCK_BOOTTIME, to 10 ms (fs/proc/uptime.c)."""
    return float(Path("/proc/uptime").read_text().split()[0])


def test_seconds_since_boot_is_the_kernels_uptime() -> None:
    before = _uptime()
    s = kmsg.seconds_since_boot()
    after = _uptime()
    assert before <= s <= after + 0.01  # /proc/uptime is truncated to hundredths


def test_boot_wall_time_is_proc_stat_btime() -> None:
    """btime (fs/proc/stat.c) is the wall time of boot in whole seconds, as the kernel computes
    it now (getboottime64): the same instant as boot_wall_time(), truncated."""
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    boot = kmsg.boot_wall_time()
    assert boot.tzinfo is dt.timezone.utc
    assert btime - 1 <= boot.timestamp() < btime + 2
    now = dt.datetime.now(dt.timezone.utc)
    assert abs((now - boot).total_seconds() - kmsg.seconds_since_boot()) < 1.0


def test_read_boot_id(tmp_path: Path) -> None:
    p = tmp_path / "boot_id"
    p.write_text("42bbb864-594f-407a-ba94-6e4d111f7732\n")
    assert kmsg.read_boot_id(str(p)) == "42bbb864-594f-407a-ba94-6e4d111f7732"
    p.write_text("\n")
    assert kmsg.read_boot_id(str(p)) is None
    assert kmsg.read_boot_id(str(tmp_path / "missing")) is None
    real = kmsg.read_boot_id()
    if real is not None:  # /proc/sys/kernel/random/boot_id: a UUID, new at each boot
        assert UUID.fullmatch(real)


def test_a_device_that_cannot_be_opened_raises(tmp_path: Path) -> None:
    reader = kmsg.KmsgReader(str(tmp_path / "kmsg"), str(tmp_path / "boot_id"))
    assert reader.boot_id is None and reader.overruns == 0 and reader.records == 0
    with pytest.raises(FileNotFoundError):
        reader.open()
    reader.close()  # a reader not open closes as a no-op


@envneeds.needs(not os.access("/dev/kmsg", os.R_OK), "readable /dev/kmsg", "not readable here")
def test_records_of_the_real_device() -> None:
    try:
        reader = kmsg.KmsgReader()
        reader.open()
    except OSError as e:  # EACCES/EPERM without CAP_SYSLOG while kernel.dmesg_restrict=1
        envneeds.need("readable /dev/kmsg", str(e))
    with reader:
        records = reader.read_available(limit=200)
    assert reader.records == len(records) > 0  # the ring buffer holds at least the boot's records
    assert all(RECORD_HEAD.match(r) for r in records)
    seqs = [int(r.split(",", 2)[1]) for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # oldest first, each record once


def test_kmsg_events_carry_seq_boot_id_and_the_wall_time_of_the_stamp() -> None:
    boot = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.timezone.utc)
    records = [
        "6,41,20400000000,-;systemd[1]: Started Session 1 of user root.\n",
        "3,42,20400595809,-;NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n DEVICE=+pci:0000:07:00.0\n",
        "no kmsg record",
    ]
    parser = KernelLogParser(host="node01", source="kmsg")
    events = list(kmsg.kmsg_events(records, parser, TimeContext.make(boot_time=boot), "b-1"))
    events += parser.flush()
    assert [(e.kind, e.code) for e in events] == [("xid", 79)]
    e = events[0]
    assert e.attrs["seq"] == 42 and e.attrs["boot_id"] == "b-1" and e.host == "node01"
    assert e.monotonic == pytest.approx(20400.595809)
    assert e.time == boot + dt.timedelta(microseconds=20400595809)


def test_wait_without_a_timeout_is_woken_by_the_wake_fd_and_drains_it(tmp_path: Path) -> None:
    """An idle reader blocks without a timeout (no periodic wake-up) and a byte on the wake pipe
    (what ``signal.set_wakeup_fd`` writes when SIGTERM arrives) ends the wait: not a record."""
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer_keepalive = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a FIFO with a writer: no EOF
    reader = kmsg.KmsgReader(str(fifo), str(tmp_path / "boot_id"))
    reader.open()
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        threading.Timer(0.2, os.write, (w, b"\x0f\x0f")).start()
        t0 = time.monotonic()
        assert reader.wait(None, r) is False
        assert 0.15 < time.monotonic() - t0 < 30
        assert reader.wait(0, r) is False  # drained: not readable again
        os.write(writer_keepalive, b"6,1,100,-;a record\n")
        assert reader.wait(None, r) is True
        assert reader.wait(0.01) is True  # without a wake fd, as before
    finally:
        reader.close()
        for fd in (r, w, writer_keepalive):
            os.close(fd)

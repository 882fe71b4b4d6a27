"""The storage check's failing verdicts reached through ``run()`` (or the CLI) with the fault on
the device or at the system call: a really slow disk (an ext4 loop device throttled by the
blkio controller, read and write, while an unthrottled run of the same device passes the same
thresholds), writes slowed at ``os.pwrite`` (only the write verdict fails), and a read that
the kernel answers with EIO (a device fault: ``fail``, naming the file and offset)."""

from __future__ import annotations

import errno
import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from nodewarden import exitcodes
from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import storage
from nodewarden.validator.result import FAIL, PASS
from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
BLKIO = Path("/sys/fs/cgroup/blkio")  # cgroup v1 block I/O controller
THROTTLE_BPS = 8 * MiB
FLOOR = 4 * THROTTLE_BPS               # a healthy loop device on any disk is far above this


def run_storage(path: Path, **overrides):
    prof = profiles.load("generic")
    prof["storage"].update({"path": str(path), "streams": 2, "file_bytes": 4 * MiB, "block_bytes": 1 * MiB,
                            "free_margin_bytes": 0, **overrides})
    ctx = RunContext(profile=prof)
    return storage.run(ctx, runner.params_for("storage", ctx))


# -- a real slow device -----------------------------------------------------------------------------

SLOW_DISK = textwrap.dedent("""\
    set -e
    mount -o loop "$IMG" "$MNT"           # own mount namespace: gone, loop device freed, on exit
    dev=$(findmnt -no SOURCE "$MNT")
    echo "$dev" > "$DEVFILE"
    "$@" --json "$HEALTHY" || echo "healthy run exited $?" >&2
    majmin=$(cat "/sys/class/block/${dev#/dev/}/dev")
    echo "$majmin $BPS" > "$CG/blkio.throttle.write_bps_device"
    echo "$majmin $BPS" > "$CG/blkio.throttle.read_bps_device"
    echo $$ > "$CG/cgroup.procs"          # this shell and the validator after it: throttled on $dev only
    rc=0; "$@" --json "$SLOW" || rc=$?
    exit $rc
    """)


def test_a_throttled_disk_fails_where_the_same_disk_unthrottled_passes(tmp_path: Path) -> None:
    envneeds.root("a loop device, a mount and a blkio cgroup")
    for prog in ("unshare", "mkfs.ext4", "findmnt"):
        envneeds.command(prog, "a throttled ext4 loop device (util-linux, e2fsprogs)")
    if not (BLKIO / "blkio.throttle.write_bps_device").exists():
        # a kernel feature, no piece to install: a plain skip, also under CI (cgroup v2 has io.max instead)
        envneeds.need("blkio throttling", "cgroup v1's blkio controller mounted at /sys/fs/cgroup/blkio",
                      expected=False)
    img, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(64 * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True, timeout=60)
    cg = BLKIO / f"nodewarden-test-{secrets.token_hex(4)}"
    cg.mkdir()
    healthy, slow, devfile = tmp_path / "healthy.json", tmp_path / "slow.json", tmp_path / "dev"
    cmd = [sys.executable, "-m", "nodewarden", "validate", "--checks", "storage", "--profile", "generic",
           "--no-progress", "--storage-path", str(mnt), "--set", "storage.streams=1",
           "--set", f"storage.file_bytes={4 * MiB}", "--set", "storage.free_margin_bytes=0",
           "--set", "storage.direct_io=true",   # blkio v1 throttles the I/O a process submits: O_DIRECT
           "--set", f"storage.write_min_bytes_per_second={FLOOR}",
           "--set", f"storage.read_min_bytes_per_second={FLOOR}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IMG": str(img), "MNT": str(mnt), "DEVFILE": str(devfile),
           "HEALTHY": str(healthy), "SLOW": str(slow), "CG": str(cg), "BPS": str(THROTTLE_BPS)}
    try:
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", SLOW_DISK, "sh", *cmd],
                           env=env, capture_output=True, text=True, timeout=120)
    finally:
        for _ in range(50):  # the cgroup empties once the child is reaped
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    if not devfile.exists():
        envneeds.need("loop device", f"cannot mount an ext4 image here: {p.stderr.strip()}", expected=False)
    dev = devfile.read_text().strip()
    assert p.returncode == exitcodes.UNHEALTHY, p.stdout + p.stderr
    (ok,) = json.loads(healthy.read_text())["checks"]
    (bad,) = json.loads(slow.read_text())["checks"]
    assert ok["status"] == PASS, ok["reason"]
    assert bad["status"] == FAIL
    rates = {m["name"]: m["value"] for m in bad["measurements"]}
    for kind in ("write", "read"):
        assert rates[f"{kind}_bandwidth"] <= 1.2 * THROTTLE_BPS  # what the throttle lets through
        assert f"{kind} " in bad["reason"] and f"< {FLOOR / 1e9:.3g} GB/s" in bad["reason"]
    assert f"({dev} ext4, O_DIRECT, 1 x 4 MiB)" in bad["reason"]
    assert bad["details"]["mount_source"] == dev and bad["details"]["mount_point"] == str(mnt)


# -- faults at the system call ------------------------------------------------------------------------

def test_slow_writes_fail_the_write_verdict_only(tmp_path: Path, monkeypatch) -> None:
    real = os.pwrite
    delay_s = 0.1  # per 1 MiB block: at most 10 MiB/s for each of the two streams

    def slow_pwrite(fd, data, offset):
        time.sleep(delay_s)
        return real(fd, data, offset)

    floor = 100 * MiB
    healthy = run_storage(tmp_path, write_min_bytes_per_second=floor)
    assert healthy.status == PASS, healthy.reason
    monkeypatch.setattr(os, "pwrite", slow_pwrite)
    r = run_storage(tmp_path, write_min_bytes_per_second=floor, read_min_bytes_per_second=floor)
    assert r.status == FAIL
    values = {m.name: m for m in r.measurements}
    assert values["write_bandwidth"].value <= 2 * MiB / delay_s
    assert values["write_bandwidth"].ok() is False and values["read_bandwidth"].ok() is True
    assert r.reason.startswith("write ") and "read " not in r.reason.split(" on ")[0]
    assert str(tmp_path) in r.reason and "smartctl" in r.action


def test_eio_on_a_read_is_a_device_fault_naming_file_and_offset(tmp_path: Path, monkeypatch) -> None:
    real = os.preadv
    bad_offset = 2 * MiB

    def preadv(fd, buffers, offset):
        if offset == bad_offset and os.readlink(f"/proc/self/fd/{fd}").endswith("stream-1.dat"):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    r = run_storage(tmp_path)
    assert r.status == FAIL
    assert r.reason == f"I/O error: stream-1.dat read at offset {bad_offset}: Input/output error"
    assert r.details["errno"] == "EIO"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(storage.SUBDIR_PREFIX)]

"""The storage check on real files on this machine: bandwidth, read-back verification (a file
corrupted on disk between write and read must fail, naming file and offset), path safety, and
cleanup of its work directory on errors, KeyboardInterrupt and SIGTERM."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import exitcodes
from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import storage

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
SMALL = {"streams": 2, "file_bytes": 8 * MiB, "block_bytes": 1 * MiB, "free_margin_bytes": 0}


def leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(storage.SUBDIR_PREFIX))


def run_storage(path: Path, **overrides):
    prof = profiles.load("generic")
    prof["storage"].update({"path": str(path), **SMALL, **overrides})
    ctx = RunContext(profile=prof)
    return storage.run(ctx, runner.params_for("storage", ctx))


def flip(path: Path, offset: int) -> None:
    """Flip one byte of a real file on disk (through the page cache, written back before an
    O_DIRECT read of that range)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def test_measures_verifies_and_cleans_up(tmp_path: Path) -> None:
    before = set(os.listdir(tmp_path))
    m = storage.measure(tmp_path, 2, 8 * MiB, 1 * MiB, free_margin_bytes=0)
    assert m["write_bandwidth"] > 0 and m["read_bandwidth"] > 0
    assert m["bytes"] == 16 * MiB and m["verified"] is True
    assert isinstance(m["direct_io"], bool)
    assert m["workdir"].startswith(str(tmp_path.resolve()) + "/" + storage.SUBDIR_PREFIX)
    assert set(os.listdir(tmp_path)) == before  # nothing left, nothing written beside it


def test_result_names_and_units(tmp_path: Path) -> None:
    r = run_storage(tmp_path)
    assert r.status == "pass", r.reason
    m = {x.name: x for x in r.measurements}
    assert m["write_bandwidth"].unit == "B/s" and m["read_bandwidth"].unit == "B/s"
    assert m["write_bandwidth"].threshold is None  # generic profile: informational
    assert r.details["direct_io"] in (True, False) and "data verified" in r.reason


def test_threshold_above_what_the_path_does_fails(tmp_path: Path) -> None:
    r = run_storage(tmp_path, write_min_bytes_per_second=1e15, read_min_bytes_per_second=1e15)
    assert r.status == "fail"
    assert r.reason.startswith("write ") and "< 1e+06 GB/s" in r.reason and "read " in r.reason
    assert {m.name: m.ok() for m in r.measurements if m.threshold} == {"write_bandwidth": False,
                                                                       "read_bandwidth": False}
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("direct_io", ["auto", False])
def test_corruption_on_disk_fails_naming_file_and_offset(tmp_path: Path, direct_io) -> None:
    offset = 3 * MiB + 12345
    seen: list[Path] = []

    def corrupt(paths: list[Path]) -> None:
        seen.extend(paths)
        assert all(p.is_file() and p.stat().st_size == 8 * MiB for p in paths)
        flip(paths[1], offset)

    with pytest.raises(storage.DataMismatch, match=rf"stream-1\.dat offset {offset}: data read back differs"):
        storage.measure(tmp_path, 2, 8 * MiB, 1 * MiB, direct_io=direct_io, free_margin_bytes=0, between=corrupt)
    assert seen and not seen[1].exists() and leftovers(tmp_path) == []


def test_corruption_through_the_check_fails(tmp_path: Path) -> None:
    def corrupt(paths: list[Path]) -> None:
        flip(paths[0], 5 * MiB + 7)

    r = run_storage(tmp_path, between=corrupt)
    assert r.status == "fail" and r.reason.startswith(f"stream-0.dat offset {5 * MiB + 7}: data read back differs")
    assert "wrote 0x" in r.reason and "read 0x" in r.reason and r.action


def test_misdirected_block_is_named(tmp_path: Path) -> None:
    """A device returning another block's data (same stream, offset 0 at offset 2 MiB)."""
    def misdirect(paths: list[Path]) -> None:
        with open(paths[0], "r+b") as f:
            first = f.read(MiB)
            f.seek(2 * MiB)
            f.write(first)
            os.fsync(f.fileno())

    # The header's offset field differs first: byte 26 of the block (offset 2 MiB = 0x200000).
    misdirected = r"stream-0\.dat offset 2097178: .*stream 0 offset 0 \(misdirected\)"
    with pytest.raises(storage.DataMismatch, match=misdirected):
        storage.measure(tmp_path, 1, 4 * MiB, 1 * MiB, free_margin_bytes=0, between=misdirect)


def test_interrupt_between_write_and_read_cleans_up(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def interrupt(paths: list[Path]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        storage.measure(tmp_path, 2, 8 * MiB, 1 * MiB, free_margin_bytes=0, between=interrupt)
    assert leftovers(tmp_path) == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_exception_cleans_up(tmp_path: Path) -> None:
    def boom(paths: list[Path]) -> None:
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        storage.measure(tmp_path, 2, 8 * MiB, 1 * MiB, free_margin_bytes=0, between=boom)
    assert leftovers(tmp_path) == []


CHILD = textwrap.dedent("""
    import sys, time
    from nodewarden.validator.checks import storage
    def hold(paths):
        print("READY", paths[0], flush=True)
        time.sleep(30)
    def progress(phase, frac):
        print("PROGRESS", phase, flush=True)
    mode = sys.argv[2]
    if mode == "between":
        storage.measure(sys.argv[1], 2, 8 << 20, 1 << 20, free_margin_bytes=0, between=hold)
    else:
        storage.measure(sys.argv[1], 1, 1 << 30, 1 << 20, direct_io=False, free_margin_bytes=0, progress=progress)
    print("FINISHED", flush=True)
""")


@pytest.mark.parametrize("mode", ["between", "during-write"])
def test_sigterm_cleans_up_and_terminates(tmp_path: Path, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), mode], stdout=subprocess.PIPE, text=True,
                         env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("READY" if mode == "between" else "PROGRESS"), line
        assert leftovers(tmp_path)  # the work directory exists while it runs
        p.send_signal(signal.SIGTERM)
        rest = p.communicate(timeout=30)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert "FINISHED" not in rest
    assert p.returncode == -signal.SIGTERM  # the default action, re-delivered after the cleanup
    assert leftovers(tmp_path) == []


def test_path_must_be_a_directory(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = run_storage(f)
    assert r.status == "error" and "not a directory" in r.reason
    r = run_storage(tmp_path / "missing")
    assert r.status == "error" and "No such file" in r.reason
    assert f.read_text() == "x"


def test_symlinked_directory_is_resolved_and_nothing_lands_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    m = storage.measure(link, 1, 4 * MiB, 1 * MiB, free_margin_bytes=0)
    assert m["path"] == str(target.resolve())
    assert sorted(os.listdir(tmp_path)) == ["link", "target"] and os.listdir(target) == []


def test_not_enough_space_is_an_error(tmp_path: Path) -> None:
    r = run_storage(tmp_path, free_margin_bytes=1 << 62)
    assert r.status == "error" and "GiB free" in r.reason
    assert leftovers(tmp_path) == []


@envneeds.needs(not os.access("/dev/shm", os.W_OK), "writable /dev/shm", "a tmpfs to write to")
def test_tmpfs_falls_back_or_goes_direct_and_says_which() -> None:
    r = run_storage(Path("/dev/shm"))
    assert r.status == "pass", r.reason
    if not r.details["direct_io"]:
        assert r.details["direct_io_unavailable"] and "buffered" in r.reason
    assert "tmpfs" in r.reason


def test_cli_quick_names_the_measurements(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run([sys.executable, "-m", "nodewarden", "validate", "--checks", "storage", "--profile", "generic",
                        "--storage-path", str(work), "--set", f"storage.file_bytes={4 * MiB}",
                        "--set", "storage.free_margin_bytes=0", "--quick", "--no-progress", "--json", str(out)],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == exitcodes.OK, p.stdout + p.stderr
    check = json.loads(out.read_text())["checks"][0]
    names = [m["name"] for m in check["measurements"]]
    assert names[:2] == ["write_bandwidth", "read_bandwidth"]
    assert check["details"]["streams"] == 2 and os.listdir(work) == []


# ---- the file system fills up, or a limit stops the writes: could not complete, not a drain ---------

def _validate_storage(path: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "nodewarden", "validate", "--checks", "storage", "--profile", "generic",
            "--no-progress", "--storage-path", path, "--set", "storage.streams=2",
            "--set", f"storage.file_bytes={2 * MiB}", "--set", "storage.free_margin_bytes=0", *extra]


FILL_INODES = textwrap.dedent("""\
    set -e
    mount -t tmpfs -o size=64m,nr_inodes=8,mode=0755 nodewarden-test "$1"
    i=0; while [ $i -lt 5 ]; do : > "$1/someone-else-$i"; i=$((i + 1)); done  # 2 inodes left
    shift; rc=0; "$@" --json "$REPORT" || rc=$?
    """)


def test_file_system_filled_by_someone_else_is_an_error_not_a_fault(tmp_path: Path) -> None:
    """A real ENOSPC: a tmpfs (own mount namespace, gone with the child) whose inodes others' files
    took, so the second stream file cannot be created although bytes are free. That says nothing
    about the device: error (exit 3), no DRAIN line; its files are removed."""
    envneeds.root("mounting a small tmpfs")
    envneeds.command("unshare", "a mount namespace for the small tmpfs (util-linux)")
    mnt, report = tmp_path / "mnt", tmp_path / "report.json"
    mnt.mkdir()
    script = FILL_INODES + 'ls -A "$MNT" > "$LISTING"; exit $rc\n'
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REPORT": str(report), "MNT": str(mnt),
           "LISTING": str(tmp_path / "listing")}
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(mnt),
                        *_validate_storage(str(mnt))], env=env, capture_output=True, text=True, timeout=120)
    if "mount:" in p.stderr and not report.exists():
        envneeds.need("mount", f"cannot mount a tmpfs here: {p.stderr.strip()}")
    assert p.returncode == exitcodes.INCOMPLETE, p.stdout + p.stderr
    (check,) = json.loads(report.read_text())["checks"]
    assert (check["status"], check["details"]["errno"]) == ("error", "ENOSPC")
    assert "No space left on device" in check["reason"] and "filled up" in check["action"]
    assert "DRAIN:" not in p.stdout and "INCOMPLETE: nodewarden storage: could not complete" in p.stdout
    assert (tmp_path / "listing").read_text().split() == [f"someone-else-{i}" for i in range(5)]


def test_file_size_limit_is_an_error_not_a_fault(tmp_path: Path) -> None:
    """A real EFBIG: RLIMIT_FSIZE below the test files' size (SIGXFSZ ignored, as a shell's
    ``ulimit -f`` with the signal trapped would leave it): error (exit 3), not a drain."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (MiB, MiB))

    report = tmp_path / "report.json"
    p = subprocess.run(_validate_storage(str(tmp_path), "--json", str(report)), preexec_fn=limit,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert p.returncode == exitcodes.INCOMPLETE, p.stdout + p.stderr
    (check,) = json.loads(report.read_text())["checks"]
    assert (check["status"], check["details"]["errno"]) == ("error", "EFBIG")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code, status", [
    (errno.EIO, "fail"), (errno.ENXIO, "fail"), (errno.ENODEV, "fail"), (errno.EUCLEAN, "fail"),
    (errno.EBADMSG, "fail"), (errno.ENOSPC, "error"), (errno.EDQUOT, "error"), (errno.EFBIG, "error"),
    (errno.EACCES, "error"), (errno.EROFS, "error"), (errno.EMFILE, "error"), (None, "error"),
])
def test_which_errors_are_device_faults(code, status) -> None:
    """Only the errnos by which the kernel reports a failing device or a damaged file system
    drain the node; a full disk or quota, a limit, permissions are the test not completing."""
    assert storage.oserror_status(OSError(code, "x") if code else OSError("x")) == status

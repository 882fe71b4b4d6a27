"""The storage check's edges, each held to its verdict, its error text or the state it leaves:
where it writes when no path is given, a path swapped between resolving and opening, a work
directory that cannot be created, mountinfo that is missing or malformed, a file system that
refuses O_DIRECT (at open or at the write), short writes and reads, a write that makes no
progress, files or the work directory removed by someone else meanwhile, and SIGTERM/SIGINT
arriving during the measurement, during its cleanup, or while it runs outside the main thread."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import storage
from nodewarden.validator.result import ERROR, FAIL, PASS
from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
SMALL = {"streams": 2, "file_bytes": 4 * MiB, "block_bytes": 1 * MiB, "free_margin_bytes": 0}


def leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(storage.SUBDIR_PREFIX))


def run_storage(path: Path | str, procfs: Path = Path("/proc"), **overrides):
    prof = profiles.load("generic")
    prof["storage"].update({"path": str(path), **SMALL, **overrides})
    ctx = RunContext(profile=prof, procfs=procfs)
    return storage.run(ctx, runner.params_for("storage", ctx))


def fd_name(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


# -- where it writes when storage.path is empty -----------------------------------------------------

DEFAULT_PATH_CHILD = textwrap.dedent("""\
    import json, os, tempfile
    from nodewarden.validator.base import RunContext
    from nodewarden.validator.checks import storage
    first = storage.default_path()
    os.rmdir(tempfile.gettempdir())   # Python's temp directory, already chosen, removed meanwhile
    second = storage.default_path()
    r = storage.run(RunContext(profile={}), {**storage.DEFAULTS, "path": "", "streams": 1,
                                             "file_bytes": 1 << 20, "free_margin_bytes": 0})
    print(json.dumps({"first": first, "second": second, "status": r.status, "reason": r.reason}))
    """)


def test_default_path_falls_back_to_the_temp_directory_when_var_tmp_is_read_only(tmp_path: Path) -> None:
    """/var/tmp read-only (a tmpfs mounted over it in a private mount namespace): Python's temp
    directory is used; when that is gone too, it is still the answer and the check is an error
    naming it, not a write elsewhere."""
    envneeds.root("mounting a read-only tmpfs over /var/tmp in a private mount namespace")
    envneeds.command("unshare", "a mount namespace (util-linux)")
    temp = tmp_path / "temp"
    temp.mkdir()
    script = 'mount -t tmpfs -o ro nodewarden-test /var/tmp && exec "$@"'
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                        sys.executable, "-c", DEFAULT_PATH_CHILD],
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)},
                       capture_output=True, text=True, timeout=60)
    if "mount:" in p.stderr:
        envneeds.need("mount", f"cannot mount a tmpfs here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["first"] == out["second"] == str(temp)
    assert out["status"] == ERROR and out["reason"] == f"{temp}: No such file or directory"
    assert not temp.exists()


# -- the path ---------------------------------------------------------------------------------------

def test_an_empty_path_is_refused() -> None:
    with pytest.raises(storage.StorageError, match="^empty path$"):
        storage.open_base("")


@pytest.mark.parametrize("swap_in, message", [
    ("directory", "changed while being opened (symlink swapped?)"),
    ("symlink", "Not a directory"),   # O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR
])
def test_a_directory_swapped_between_stat_and_open_is_refused(tmp_path: Path, monkeypatch, swap_in, message) -> None:
    """Someone renames the directory away after it was resolved and checked, and puts another
    directory (or a symlink to one) under its name: nothing is written to either."""
    target, moved, elsewhere = tmp_path / "target", tmp_path / "moved", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    real_stat = os.stat

    def stat_then_swap(p, *args, **kwargs):
        st = real_stat(p, *args, **kwargs)
        if p == str(target) and not moved.exists():
            os.rename(target, moved)
            if swap_in == "directory":
                target.mkdir()
            else:
                target.symlink_to(elsewhere)
        return st

    monkeypatch.setattr(os, "stat", stat_then_swap)
    r = run_storage(target)
    monkeypatch.undo()
    assert r.status == ERROR and r.reason == f"{target}: {message}"
    assert "storage.path" in r.action
    assert os.listdir(moved) == [] and os.listdir(elsewhere) == [] and os.listdir(target) == []


def test_a_work_directory_that_cannot_be_created_is_an_error() -> None:
    r = run_storage(Path("/proc"))   # a directory, but no file system to write to
    assert r.status == ERROR
    assert r.reason.startswith("/proc: cannot create a work directory: ")
    assert not [p for p in os.listdir("/proc") if p.startswith(storage.SUBDIR_PREFIX)]


# -- which mount: /proc/self/mountinfo --------------------------------------------------------------

MOUNTINFO = "\n".join([
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
    "40 22 259:1 / /data\\040disk rw,relatime - xfs /dev/nvme0n1p1 rw",
    "41 22 /data\\040disk/x - tmpfs none rw",                  # too few fields before " - "
    "42 22 0:50 / /data\\040disk/x rw,relatime",              # no " - " separator
    "43 22 0:51 / /data\\040disk/x rw,relatime - ",           # nothing after it
    "44 22 0:52 / /data\\040disk/y rw,relatime - fuse.sshfs",  # no source
    "garbage",
]) + "\n"


def test_mountinfo_lines_that_are_malformed_are_skipped(tmp_path: Path) -> None:
    """A malformed line never wins, even with the longest matching mount point."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(MOUNTINFO)
    assert storage.mount_of("/data disk/x/run", tmp_path) == ("/data disk", "xfs", "/dev/nvme0n1p1")
    assert storage.mount_of("/data disk/y", tmp_path) == ("/data disk/y", "fuse.sshfs", None)
    assert storage.mount_of("/var/tmp", tmp_path) == ("/", "ext4", "/dev/sda1")
    assert storage.filesystem_type("/data disk/x", tmp_path) == "xfs"
    assert storage.filesystem_type("/srv", tmp_path) == "ext4"


def test_no_mountinfo_leaves_the_file_system_unknown(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    procfs.mkdir()
    assert storage.mount_of(str(tmp_path), procfs) is None
    assert storage.filesystem_type(str(tmp_path), procfs) is None
    work = tmp_path / "work"
    work.mkdir()
    r = run_storage(work, procfs=procfs)
    assert r.status == PASS, r.reason
    assert r.details["filesystem"] is None and "mount_point" not in r.details
    assert f"on {work} (?, " in r.reason


# -- O_DIRECT refused -------------------------------------------------------------------------------

def refuse_direct_open(monkeypatch) -> None:
    """A file system that refuses O_DIRECT at open (EINVAL)."""
    real = os.open

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


def refuse_direct_write(monkeypatch) -> None:
    """A file system that takes the O_DIRECT flag and refuses the write (EINVAL)."""
    real = os.pwrite

    def pwrite(fd, data, offset):
        if fd_name(fd).endswith(".probe-direct"):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)


@pytest.mark.parametrize("refuse, why", [
    (refuse_direct_open, "open(O_DIRECT): Invalid argument"),
    (refuse_direct_write, "O_DIRECT write: Invalid argument"),
    (lambda mp: mp.delattr(os, "O_DIRECT"), "no O_DIRECT on this platform"),
])
def test_refused_o_direct_falls_back_to_buffered_and_says_why(tmp_path: Path, monkeypatch, refuse, why) -> None:
    refuse(monkeypatch)
    r = run_storage(tmp_path)
    assert r.status == PASS, r.reason
    assert r.details["direct_io"] is False and r.details["direct_io_unavailable"] == why
    assert f"buffered ({why})" in r.reason and "data verified" in r.reason
    assert r.details["page_cache"].startswith("dropped per file")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("refuse, why", [
    (refuse_direct_open, "open(O_DIRECT): Invalid argument"),
    (refuse_direct_write, "O_DIRECT write: Invalid argument"),
])
def test_o_direct_asked_for_and_refused_is_an_error(tmp_path: Path, monkeypatch, refuse, why) -> None:
    refuse(monkeypatch)
    r = run_storage(tmp_path, direct_io=True)
    assert r.status == ERROR
    assert r.reason == f"{tmp_path.resolve()}: O_DIRECT requested but not supported ({why})"
    assert leftovers(tmp_path) == []


# -- short transfers --------------------------------------------------------------------------------

def test_short_writes_are_completed(tmp_path: Path, monkeypatch) -> None:
    """A short pwrite is legal: the rest of the block is written and the data verifies."""
    real = os.pwrite
    calls = []

    def half_a_block(fd, data, offset):
        calls.append(len(data))
        if len(data) == MiB and fd_name(fd).endswith(".dat"):
            return real(fd, memoryview(data)[:MiB // 2], offset)
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", half_a_block)
    r = run_storage(tmp_path)
    assert r.status == PASS, r.reason
    assert calls.count(MiB // 2) == 8   # every block of both 4 MiB files finished in a second call
    assert r.details["bytes"] == 8 * MiB


def test_a_write_that_makes_no_progress_is_an_error(tmp_path: Path, monkeypatch) -> None:
    real = os.pwrite

    def nothing_written(fd, data, offset):
        if fd_name(fd).endswith("stream-1.dat") and offset == 2 * MiB:
            return 0
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", nothing_written)
    r = run_storage(tmp_path)
    assert r.status == ERROR
    assert r.reason == f"could not complete: stream-1.dat write at offset {2 * MiB}: pwrite returned 0"
    assert r.details["errno"] is None and "rerun" in r.action
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("direct_io", ["auto", False])
def test_a_file_truncated_before_the_read_fails_as_a_short_read(tmp_path: Path, direct_io) -> None:
    keep = 3 * MiB + 64 * 1024

    def truncate(paths: list[Path]) -> None:
        os.truncate(paths[1], keep)

    r = run_storage(tmp_path, direct_io=direct_io, between=truncate)
    assert r.status == FAIL
    assert r.reason == f"stream-1.dat offset {keep}: short read (65536 of {MiB} bytes)"
    assert "replace the device" in r.action
    assert leftovers(tmp_path) == []


# -- someone else removes our files ------------------------------------------------------------------

def test_work_directory_removed_meanwhile_is_an_error_and_the_cleanup_copes(tmp_path: Path) -> None:
    def remove_all(paths: list[Path]) -> None:
        for p in paths:
            p.unlink()
        paths[0].parent.rmdir()

    r = run_storage(tmp_path, direct_io=False, between=remove_all)
    assert r.status == ERROR and r.details["errno"] == "ENOENT"
    assert r.reason == "could not complete: No such file or directory"
    assert leftovers(tmp_path) == []


def test_a_file_vanishing_while_the_cleanup_lists_them_is_no_error(tmp_path: Path, monkeypatch) -> None:
    """Between listing the work directory and unlinking, one file goes: the cleanup still
    removes the rest and the directory, and the original exception is the one raised."""
    real = os.listdir
    vanished = []

    def listdir_then_one_goes(fd):
        names = real(fd)
        if isinstance(fd, int) and names:
            os.unlink(names[0], dir_fd=fd)
            vanished.append(names[0])
        return names

    def boom(paths: list[Path]) -> None:
        monkeypatch.setattr(os, "listdir", listdir_then_one_goes)
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        storage.measure(tmp_path, 2, 2 * MiB, 1 * MiB, free_margin_bytes=0, between=boom)
    monkeypatch.undo()
    assert vanished and vanished[0].startswith("stream-")
    assert leftovers(tmp_path) == []


# -- signals ----------------------------------------------------------------------------------------

@pytest.fixture
def sigterm_seen():
    """A Python SIGTERM handler (the previous one the check must hand SIGTERM to), recording."""
    seen: list[int] = []

    def record(signum, frame):
        seen.append(signum)

    prev = signal.signal(signal.SIGTERM, record)
    try:
        yield seen, record
    finally:
        signal.signal(signal.SIGTERM, prev)


def test_sigterm_during_the_check_is_an_error_and_reaches_the_previous_handler(tmp_path: Path, sigterm_seen) -> None:
    seen, record = sigterm_seen

    def sigterm(paths: list[Path]) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)   # not reached: the handler raises in this thread

    t0 = time.monotonic()
    r = run_storage(tmp_path, between=sigterm)
    assert time.monotonic() - t0 < 4
    assert r.status == ERROR and r.reason == "interrupted by SIGTERM (work directory removed)"
    assert seen == [signal.SIGTERM]   # re-delivered once the work directory was gone
    assert signal.getsignal(signal.SIGTERM) is record
    assert leftovers(tmp_path) == []


def test_sigint_during_the_check_is_a_keyboard_interrupt_after_the_cleanup(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def sigint(paths: list[Path]) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    with pytest.raises(KeyboardInterrupt):
        storage.measure(tmp_path, 2, 2 * MiB, 1 * MiB, free_margin_bytes=0, between=sigint)
    assert leftovers(tmp_path) == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_cleanup_waits_for_it_to_finish(tmp_path: Path, monkeypatch, sigterm_seen, signum) -> None:
    """While the work directory is being removed a signal is only recorded; once it is gone,
    SIGINT raises KeyboardInterrupt and SIGTERM goes to the previous handler (the measurement,
    complete, is returned)."""
    seen, _ = sigterm_seen
    real = os.rmdir

    def rmdir_with_a_signal(name, *args, **kwargs):
        os.kill(os.getpid(), signum)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir_with_a_signal)
    if signum == signal.SIGINT:
        with pytest.raises(KeyboardInterrupt):
            storage.measure(tmp_path, 1, 2 * MiB, 1 * MiB, free_margin_bytes=0)
        assert seen == []
    else:
        m = storage.measure(tmp_path, 1, 2 * MiB, 1 * MiB, free_margin_bytes=0)
        assert m["verified"] is True and seen == [signal.SIGTERM]
    monkeypatch.undo()
    assert leftovers(tmp_path) == []


def test_someone_elses_sigint_handler_is_left_alone(tmp_path: Path) -> None:
    def mine(signum, frame):
        pass

    during = {}

    def look(paths: list[Path]) -> None:
        during.update(sigint=signal.getsignal(signal.SIGINT), sigterm=signal.getsignal(signal.SIGTERM))

    prev = signal.signal(signal.SIGINT, mine)
    try:
        before_term = signal.getsignal(signal.SIGTERM)
        storage.measure(tmp_path, 1, 2 * MiB, 1 * MiB, free_margin_bytes=0, between=look)
        after = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, prev)
    assert during["sigint"] is mine
    assert isinstance(getattr(during["sigterm"], "__self__", None), storage._SignalGuard)
    assert after == (mine, before_term)


def test_outside_the_main_thread_no_handler_is_installed(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    during, out = [], {}

    def look(paths: list[Path]) -> None:
        during.append((signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)))

    def work() -> None:
        out["m"] = storage.measure(tmp_path, 1, 2 * MiB, 1 * MiB, free_margin_bytes=0, between=look)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert out["m"]["verified"] is True
    assert during == [before]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("phase", ["write", "read"])
def test_interrupt_while_the_streams_run_stops_them_and_cleans_up(tmp_path: Path, monkeypatch, phase) -> None:
    """Ctrl-C in the main thread while it waits for the streams (at the first progress report):
    every stream stops at its next block, is joined, and the work directory is removed."""
    blocks = 64   # per stream; at 20 ms per block a stream takes 1.3 s, the first report comes at 0.25 s
    calls = {"pwrite": 0, "preadv": 0}

    def slow(name):
        real = getattr(os, name)

        def call(fd, *args):
            if fd_name(fd).endswith(".dat"):
                calls[name] += 1
                if (name == "pwrite") == (phase == "write"):
                    time.sleep(0.02)
            return real(fd, *args)
        return call

    monkeypatch.setattr(os, "pwrite", slow("pwrite"))
    monkeypatch.setattr(os, "preadv", slow("preadv"))

    def progress(name: str, frac: float) -> None:
        if name == phase:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        storage.measure(tmp_path, 2, blocks * MiB, 1 * MiB, direct_io=False, free_margin_bytes=0, progress=progress)
    monkeypatch.undo()
    assert calls["pwrite" if phase == "write" else "preadv"] < blocks   # of 2 x 64: stopped early
    if phase == "write":
        assert calls["preadv"] == 0
    else:
        assert calls["pwrite"] == 2 * blocks
    assert not [t for t in threading.enumerate() if t.name.startswith("nodewarden-storage-")]
    assert leftovers(tmp_path) == []

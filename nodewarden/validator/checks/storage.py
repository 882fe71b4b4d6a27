"""storage: sequential write then read bandwidth of a directory's file system, data verified.

``streams`` threads each write one file of ``file_bytes`` in ``block_bytes`` blocks
(``os.pwrite`` from a page-aligned ``mmap`` buffer), ``fsync`` it, then read it back
(``os.preadv`` into the same kind of buffer) and compare every block with what was written.
Each block carries a 32-byte header (magic, run token, stream, file offset) and a body cut from
a random pattern at a shift derived from that offset, so a device that returns a flipped bit,
stale data or another block's data fails, naming the file and the byte offset.

I/O path: ``O_DIRECT`` when the file system takes it (probed: open with ``O_DIRECT`` and write
one aligned block), else buffered writes + ``fsync`` and, before the read, ``posix_fadvise
(POSIX_FADV_DONTNEED)`` on each file so the read comes from the device and not the page cache
(what fio does with ``invalidate=1``). ``details["direct_io"]`` says which was used, and
``details["mount_point"]``/``["mount_source"]`` (``ctx.procfs``/self/mountinfo) which device was
tested, named in the reason too; the reference benchmark (bench/validator_fidelity.py) runs fio
with the same sizes, block size, ``numjobs`` = ``streams`` and ``direct`` accordingly.

Verdicts: data read back wrong, or an I/O error by which the kernel reports a device or file-system
fault (EIO, ENXIO, ENODEV, EUCLEAN, EBADMSG), is ``fail``; bandwidth below its threshold is ``fail``;
any other error (ENOSPC/EDQUOT when the disk or quota fills meanwhile, EFBIG, EACCES, EROFS, a path
that cannot be tested, too little free space to start) is ``error``: the test could not complete,
which says nothing about the device.

Safety: everything happens in a new sub-directory ``nodewarden-storage-<random>`` of ``path``.
``path`` is resolved once, must be a directory, and is opened ``O_DIRECTORY|O_NOFOLLOW`` (and
checked to be the same inode it resolved to); the sub-directory is created with ``mkdir`` (which
fails on any existing name, a planted symlink included) and every file is created
``O_CREAT|O_EXCL|O_NOFOLLOW`` relative to its descriptor, so no write lands outside it even in a
shared directory such as /var/tmp. The sub-directory is removed at the end, also on an exception,
KeyboardInterrupt or SIGTERM (a handler is installed for the duration, from the main thread, and
the previous one restored; a SIGTERM is then re-delivered to it).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import secrets
import signal
import stat
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from nodewarden.validator.base import RunContext
from nodewarden.validator.result import ERROR, FAIL, PASS, CheckResult

NAME = "storage"
NEEDS: tuple[str, ...] = ()
GiB, MiB = 1 << 30, 1 << 20
DEFAULTS: dict[str, Any] = {
    "path": "",                     # directory to test; "" = /var/tmp, else tempfile.gettempdir()
    "streams": 4,                   # parallel files (threads), like fio's numjobs
    "file_bytes": 1 * GiB,          # per stream
    "block_bytes": 1 * MiB,         # one pwrite/pread
    "direct_io": "auto",            # auto: O_DIRECT when the file system takes it; false: buffered
    "free_margin_bytes": 256 * MiB,  # left free on the file system beyond the test files
    "write_min_bytes_per_second": 0,  # 0: informational
    "read_min_bytes_per_second": 0,
}
QUICK: dict[str, Any] = {"streams": 2, "file_bytes": 256 * MiB}

ALIGN = 4096  # O_DIRECT alignment of buffers, offsets and sizes (covers 512 and 4K sectors)
HEADER = struct.Struct("<8sQIIQ")  # magic, run token, stream, reserved, file offset: 32 bytes
MAGIC = b"NWSTOR01"
SPAN = 64 * 1024  # pattern shifts; a block's body is pattern[shift : shift + block]
SUBDIR_PREFIX = "nodewarden-storage-"


class StorageError(Exception):
    """The path cannot be tested (not a directory, no space...): the check reports ``error``."""


class Terminated(BaseException):
    """SIGTERM arrived while the check ran (raised in the main thread, like KeyboardInterrupt)."""


class DataMismatch(Exception):
    """A block read back differs from what was written."""


# ---- memcmp/memmove without the GIL ---------------------------------------------------------------

try:
    _libc = ctypes.CDLL(None)
    _memcmp = _libc.memcmp
    _memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    _memcmp.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - no libc symbol table
    _memcmp = None


def _address(buf: Any) -> tuple[int, Any]:
    """(address, keeper) of a writable buffer; drop the keeper before closing an mmap."""
    keeper = (ctypes.c_char * len(buf)).from_buffer(buf)
    return ctypes.addressof(keeper), keeper


# ---- path handling ----------------------------------------------------------------------------------

def default_path() -> str:
    """/var/tmp (disk-backed on most systems) when writable, else Python's temp directory."""
    for cand in ("/var/tmp", tempfile.gettempdir()):
        if os.path.isdir(cand) and os.access(cand, os.W_OK | os.X_OK):
            return cand
    return tempfile.gettempdir()


def open_base(path: str | os.PathLike[str]) -> tuple[int, str]:
    """(directory fd, resolved path) of ``path``; StorageError when it is not a directory or was
    swapped between resolving and opening."""
    text = os.fspath(path)
    if not text:
        raise StorageError("empty path")
    real = os.path.realpath(text)
    try:
        st = os.stat(real)
    except OSError as e:
        raise StorageError(f"{text}: {e.strerror}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise StorageError(f"{text}: not a directory")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise StorageError(f"{text}: {e.strerror}") from e
    st2 = os.fstat(fd)
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise StorageError(f"{text}: changed while being opened (symlink swapped?)")
    return fd, real


def mount_of(real: str, procfs: Path = Path("/proc")) -> tuple[str, str, str | None] | None:
    """(mount point, fstype, mount source such as ``/dev/nvme0n1p2``) of the mount holding
    ``real``: the longest mount point prefix in ``procfs``/self/mountinfo (proc(5): the fields
    after `` - `` are fstype and source, None when absent); None when mountinfo cannot be read or
    has no match."""
    try:
        text = (procfs / "self" / "mountinfo").read_text()
    except OSError:
        return None
    best: tuple[str, str, str | None] | None = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        mnt = fields[4].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and (best is None or len(mnt) >= len(best[0])):
            best = (mnt, tail[0], tail[1].replace("\\040", " ") if len(tail) > 1 else None)
    return best


def filesystem_type(real: str, procfs: Path = Path("/proc")) -> str | None:
    """The fstype of the mount holding ``real`` (:func:`mount_of`), or None."""
    m = mount_of(real, procfs)
    return m[1] if m else None


def _remove_tree(base_fd: int, name: str) -> None:
    """Remove ``name`` (our sub-directory: regular files only) under ``base_fd``, never following
    a symlink."""
    try:
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=base_fd)
    except FileNotFoundError:
        return
    try:
        for entry in os.listdir(sub):
            try:
                os.unlink(entry, dir_fd=sub)
            except FileNotFoundError:
                pass
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=base_fd)


# ---- signals -----------------------------------------------------------------------------------------

class _SignalGuard:
    """SIGTERM -> Terminated and SIGINT -> KeyboardInterrupt in the main thread while armed;
    while cleaning up (``hold()``) both are only recorded, and handled after the cleanup."""

    def __init__(self) -> None:
        self.armed = True
        self.pending: list[int] = []
        self.prev: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if not self.armed:
            self.pending.append(signum)
            return
        if signum == signal.SIGTERM:
            self.pending.append(signum)  # re-delivered to the previous handler once cleaned up
            raise Terminated(signum)
        raise KeyboardInterrupt

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers can only be set from the main thread
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)
            if sig == signal.SIGINT and prev is not signal.default_int_handler:
                continue  # someone else handles Ctrl-C: leave it
            self.prev[sig] = signal.signal(sig, self._handler)
        return True

    def hold(self) -> None:
        self.armed = False

    def restore(self) -> None:
        for sig, prev in self.prev.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        if signal.SIGTERM in self.pending and self.prev.get(signal.SIGTERM) is not signal.SIG_IGN:
            os.kill(os.getpid(), signal.SIGTERM)  # to the previous handler (default: terminate)
        if signal.SIGINT in self.pending:
            raise KeyboardInterrupt


# ---- the measurement ---------------------------------------------------------------------------------

def _shift(token: int, stream: int, offset: int) -> int:
    h = hashlib.blake2b(struct.pack("<QIQ", token, stream, offset), digest_size=4).digest()
    return (int.from_bytes(h, "little") % (SPAN // 8)) * 8


def probe_direct(sub_fd: int) -> tuple[bool, str]:
    """Whether this file system takes O_DIRECT: open a probe file with it and write one aligned
    block (some file systems accept the flag and refuse the write)."""
    if not hasattr(os, "O_DIRECT"):
        return False, "no O_DIRECT on this platform"
    name = ".probe-direct"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECT,
                     0o600, dir_fd=sub_fd)
    except OSError as e:
        return False, f"open(O_DIRECT): {e.strerror}"
    buf = mmap.mmap(-1, ALIGN)
    try:
        os.pwrite(fd, buf, 0)
        return True, ""
    except OSError as e:
        return False, f"O_DIRECT write: {e.strerror}"
    finally:
        os.close(fd)
        buf.close()
        os.unlink(name, dir_fd=sub_fd)


class _Stream:
    """One file: its writer/reader loop, run in a thread."""

    def __init__(self, index: int, sub_fd: int, name: str, file_bytes: int, block: int, direct: bool, token: int,
                 pattern: bytearray, stop: threading.Event, barrier: threading.Barrier) -> None:
        self.index, self.sub_fd, self.name = index, sub_fd, name
        self.file_bytes, self.block, self.direct, self.token = file_bytes, block, direct, token
        self.pattern, self.stop, self.barrier = pattern, stop, barrier
        self.done = 0
        self.error: BaseException | None = None

    def _flags(self, base: int) -> int:
        return base | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECT if self.direct else 0)

    def _fill(self, addr: int, buf: mmap.mmap, pat_addr: int, offset: int) -> int:
        shift = _shift(self.token, self.index, offset)
        ctypes.memmove(addr, pat_addr + shift, self.block)
        HEADER.pack_into(buf, 0, MAGIC, self.token, self.index, 0, offset)
        return shift

    def write(self) -> None:
        buf = mmap.mmap(-1, self.block)
        addr, keep = _address(buf)
        pat_addr, pkeep = _address(self.pattern)
        fd = -1
        try:
            fd = os.open(self.name, self._flags(os.O_WRONLY | os.O_CREAT | os.O_EXCL), 0o600, dir_fd=self.sub_fd)
            self.barrier.wait()
            for offset in range(0, self.file_bytes, self.block):
                if self.stop.is_set():
                    return
                self._fill(addr, buf, pat_addr, offset)
                view = memoryview(buf)
                try:
                    written = 0
                    while written < self.block:  # a short write is legal; O_DIRECT ones stay aligned
                        n = os.pwrite(fd, view[written:], offset + written)
                        if n <= 0:
                            raise OSError(f"pwrite returned {n}")
                        written += n
                finally:
                    view.release()
                self.done += self.block
            os.fsync(fd)
        except BaseException as e:
            self.error = _where(e, self.name, "write", self.done)
            self.barrier.abort()
        finally:
            if fd >= 0:
                os.close(fd)
            del keep, pkeep
            buf.close()

    def read(self) -> None:
        buf = mmap.mmap(-1, self.block)
        addr, keep = _address(buf)
        pat_addr, pkeep = _address(self.pattern)
        fd = -1
        try:
            fd = os.open(self.name, self._flags(os.O_RDONLY), dir_fd=self.sub_fd)
            self.barrier.wait()
            for offset in range(0, self.file_bytes, self.block):
                if self.stop.is_set():
                    return
                n = os.preadv(fd, [buf], offset)
                if n != self.block:
                    raise DataMismatch(f"{self.name} offset {offset + n}: short read ({n} of {self.block} bytes)")
                self._verify(buf, addr, pat_addr, offset)
                self.done += self.block
        except BaseException as e:
            self.error = e if isinstance(e, DataMismatch) else _where(e, self.name, "read", self.done)
            self.barrier.abort()
        finally:
            if fd >= 0:
                os.close(fd)
            del keep, pkeep
            buf.close()

    def _verify(self, buf: mmap.mmap, addr: int, pat_addr: int, offset: int) -> None:
        hsize = HEADER.size
        header = HEADER.pack(MAGIC, self.token, self.index, 0, offset)
        shift = _shift(self.token, self.index, offset)
        body_ok = (_memcmp(addr + hsize, pat_addr + shift + hsize, self.block - hsize) == 0 if _memcmp
                   else buf[hsize:self.block] == self.pattern[shift + hsize:shift + self.block])
        if body_ok and buf[:hsize] == header:
            return
        expected = header + bytes(self.pattern[shift + hsize:shift + self.block])
        got = buf[:self.block]
        at = next(i for i in range(0, self.block, ALIGN) if got[i:i + ALIGN] != expected[i:i + ALIGN])
        at = next(i for i in range(at, at + ALIGN) if got[i] != expected[i])
        what = f"wrote 0x{expected[at]:02x}, read 0x{got[at]:02x}"
        if at < hsize:
            magic, token, stream, _, off = HEADER.unpack(got[:hsize])
            if magic == MAGIC and token == self.token:
                what = f"holds the block written for stream {stream} offset {off} (misdirected)"
        raise DataMismatch(f"{self.name} offset {offset + at}: data read back differs ({what})")


def _where(e: BaseException, name: str, phase: str, done: int) -> BaseException:
    if isinstance(e, OSError):
        return OSError(e.errno, f"{name} {phase} at offset {done}: {e.strerror or e}")
    return e


def _run_phase(streams: list[_Stream], phase: str, stop: threading.Event,
               progress: Callable[[str, float], None] | None) -> float:
    """Start every stream's ``phase`` together (a barrier), wait, return the elapsed seconds;
    re-raise the first stream error."""
    barrier = streams[0].barrier
    threads = [threading.Thread(target=getattr(s, phase), name=f"nodewarden-storage-{phase}-{s.index}",
                                daemon=True) for s in streams]
    for s in streams:
        s.done, s.error = 0, None
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    total = sum(s.file_bytes for s in streams)
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.25)
                if progress is not None:
                    progress(phase, sum(s.done for s in streams) / total)
    except BaseException:
        stop.set()
        for t in threads:
            t.join()
        raise
    elapsed = time.perf_counter() - t0
    errors = [s.error for s in streams if s.error is not None]
    if errors:
        # the cause, not a stream that only saw the start line broken by the failing one
        raise next((e for e in errors if isinstance(e, DataMismatch)),
                   next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0]))
    return elapsed


def measure(path: str | os.PathLike[str], streams: int = 4, file_bytes: int = GiB, block_bytes: int = MiB,
            direct_io: str | bool = "auto", free_margin_bytes: int = 256 * MiB,
            between: Callable[[list[Path]], None] | None = None,
            progress: Callable[[str, float], None] | None = None, procfs: Path = Path("/proc")) -> dict[str, Any]:
    """Write then read ``streams`` files of ``file_bytes`` under a new sub-directory of ``path``.

    Returns ``write_bandwidth``/``read_bandwidth`` (B/s), ``direct_io``, sizes and timings.
    Raises StorageError (cannot test here), DataMismatch (read-back differs), OSError (EIO...).
    ``between(paths)`` runs after the write and before the read, with the files' real paths
    (tests corrupt a file there). The sub-directory is always removed.
    """
    block = max(ALIGN, int(block_bytes) // ALIGN * ALIGN)
    file_bytes = max(block, int(file_bytes) // block * block)
    streams = max(1, int(streams))
    base_fd, real = open_base(path)
    sub_name = SUBDIR_PREFIX + secrets.token_hex(6)
    guard = _SignalGuard()
    stop = threading.Event()
    out: dict[str, Any] = {"path": real, "workdir": os.path.join(real, sub_name), "streams": streams,
                           "file_bytes": file_bytes, "block_bytes": block}
    mount = mount_of(real, procfs)
    out.update({"filesystem": mount[1], "mount_point": mount[0], "mount_source": mount[2]} if mount else
               {"filesystem": None})
    handlers = guard.install()
    sub_fd = -1
    try:
        try:
            os.mkdir(sub_name, 0o700, dir_fd=base_fd)
        except OSError as e:
            raise StorageError(f"{real}: cannot create a work directory: {e.strerror}") from e
        sub_fd = os.open(sub_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=base_fd)
        vfs = os.fstatvfs(sub_fd)
        free = vfs.f_bavail * vfs.f_frsize
        need = streams * file_bytes + int(free_margin_bytes)
        if free < need:
            raise StorageError(f"{real}: {free / GiB:.1f} GiB free, the test needs {need / GiB:.1f} GiB "
                               f"(lower storage.file_bytes or storage.streams)")
        mode = str(direct_io).lower()
        if mode in ("false", "0", "no", "off"):
            direct, why = False, "disabled by parameter"
        else:
            direct, why = probe_direct(sub_fd)
            if not direct and mode in ("true", "1", "yes", "on"):
                raise StorageError(f"{real}: O_DIRECT requested but not supported ({why})")
        out["direct_io"] = direct
        if not direct:
            out["direct_io_unavailable"] = why
        token = secrets.randbits(64)
        pattern = bytearray(os.urandom(block + SPAN))
        barrier = threading.Barrier(streams + 1)
        files = [_Stream(i, sub_fd, f"stream-{i}.dat", file_bytes, block, direct, token, pattern, stop, barrier)
                 for i in range(streams)]

        def phase_progress(name: str) -> Callable[[str, float], None] | None:
            if progress is None:
                return None
            return lambda _phase, frac: progress(name, frac)

        t_write = _run_phase(files, "write", stop, phase_progress("write"))
        paths = [Path(real) / sub_name / s.name for s in files]
        if between is not None:
            between(paths)
        if not direct:
            # Clean pages of a fsynced file can be dropped: the read then comes from the device.
            for s in files:
                fd = os.open(s.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sub_fd)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            out["page_cache"] = "dropped per file (posix_fadvise DONTNEED)"
        barrier = threading.Barrier(streams + 1)  # a fresh start line for the read
        for s in files:
            s.barrier = barrier
        t_read = _run_phase(files, "read", stop, phase_progress("read"))
        total = streams * file_bytes
        out.update({"bytes": total, "write_seconds": t_write, "read_seconds": t_read,
                    "write_bandwidth": total / t_write, "read_bandwidth": total / t_read, "verified": True})
        return out
    finally:
        guard.hold()
        stop.set()
        try:
            if sub_fd >= 0:
                os.close(sub_fd)
            _remove_tree(base_fd, sub_name)
        finally:
            os.close(base_fd)
            if handlers:
                guard.restore()


# errno values by which the kernel reports a failing device or a damaged file system: the node
# is unhealthy. Any other OSError (ENOSPC or EDQUOT because someone else filled the disk or the
# quota meanwhile, EFBIG from a file-size limit, EACCES, EROFS of a read-only mount, EMFILE...)
# says nothing about the hardware: the check could not complete.
DEVICE_ERRNOS = frozenset({errno.EIO, errno.ENXIO, errno.ENODEV, errno.EUCLEAN, errno.EBADMSG})
_ERRNO_ACTIONS = {
    errno.ENOSPC: "the file system filled up during the test (someone else's files, or inodes): free space "
                  "or point storage.path (--storage-path) elsewhere, and rerun",
    errno.EDQUOT: "a disk quota ran out during the test: raise it or point storage.path elsewhere, and rerun",
    errno.EFBIG: "a file-size limit (ulimit -f) stopped the test: lift it or lower storage.file_bytes",
}


def oserror_status(e: OSError) -> str:
    """``fail`` when ``e``'s errno is one by which the kernel reports a device or file-system fault
    (:data:`DEVICE_ERRNOS`: EIO, ENXIO, ENODEV, EUCLEAN, EBADMSG), else ``error``."""
    return FAIL if e.errno in DEVICE_ERRNOS else ERROR


def run(ctx: RunContext, params: dict[str, Any]) -> CheckResult:
    res = CheckResult(NAME, PASS)
    path = params.get("path") or default_path()
    streams, file_bytes, block = int(params["streams"]), int(params["file_bytes"]), int(params["block_bytes"])
    total = streams * file_bytes

    def progress(phase: str, frac: float) -> None:
        overall = (frac if phase == "write" else 1 + frac) / 2
        ctx.progress(NAME, overall, f"{phase} {frac * total / GiB:.2f}/{total / GiB:.2f} GiB")

    try:
        between = params.get("between")  # tests only: a callable given the files between write and read
        m = measure(path, streams, file_bytes, block, params.get("direct_io", "auto"),
                    int(params.get("free_margin_bytes", 256 * MiB)), between=between if callable(between) else None,
                    progress=progress, procfs=Path(ctx.procfs))
    except StorageError as e:
        return CheckResult(NAME, ERROR, reason=str(e), action="point storage.path (--storage-path) at a "
                           "writable directory on the file system to test, with enough free space")
    except DataMismatch as e:
        return CheckResult(NAME, FAIL, reason=str(e), details={"path": str(path)},
                           action="the device returned other data than was written: check SMART/NVMe "
                                  "error logs and the kernel log; replace the device")
    except OSError as e:
        if oserror_status(e) == FAIL:
            return CheckResult(NAME, FAIL, reason=f"I/O error: {e.strerror or e}",
                               details={"path": str(path), "errno": errno.errorcode.get(e.errno or 0)},
                               action="check the kernel log and the device's error counters (smartctl, nvme smart-log)")
        return CheckResult(NAME, ERROR, reason=f"could not complete: {e.strerror or e}",
                           details={"path": str(path), "errno": errno.errorcode.get(e.errno or 0)},
                           action=_ERRNO_ACTIONS.get(e.errno or 0, "not a device fault by itself: fix the cause "
                                                     "(permissions, limits) and rerun; check the kernel log"))
    except Terminated:
        return CheckResult(NAME, ERROR, reason="interrupted by SIGTERM (work directory removed)")
    wmin = float(params.get("write_min_bytes_per_second") or 0)
    rmin = float(params.get("read_min_bytes_per_second") or 0)
    res.measure("write_bandwidth", round(m["write_bandwidth"]), "B/s", threshold=wmin or None)
    res.measure("read_bandwidth", round(m["read_bandwidth"]), "B/s", threshold=rmin or None)
    res.measure("bytes", m["bytes"], "bytes")
    res.measure("direct_io", m["direct_io"])
    res.details.update({k: v for k, v in m.items() if k not in ("write_bandwidth", "read_bandwidth")})
    slow = []
    if wmin and m["write_bandwidth"] < wmin:
        slow.append(f"write {m['write_bandwidth'] / 1e9:.3g} GB/s < {wmin / 1e9:.3g} GB/s")
    if rmin and m["read_bandwidth"] < rmin:
        slow.append(f"read {m['read_bandwidth'] / 1e9:.3g} GB/s < {rmin / 1e9:.3g} GB/s")
    io = "O_DIRECT" if m["direct_io"] else f"buffered ({m.get('direct_io_unavailable', '')})"
    source = f"{m['mount_source']} " if m.get("mount_source") else ""
    where = f"{m['path']} ({source}{m['filesystem'] or '?'}, {io}, {streams} x {m['file_bytes'] / MiB:.0f} MiB)"
    if slow:
        res.status = FAIL
        res.reason = f"{', '.join(slow)} on {where}"
        res.action = "check the device's health and the file system (smartctl, nvme smart-log, iostat)"
    else:
        note = "; on tmpfs: this measures memory, not a disk" if m["filesystem"] in ("tmpfs", "ramfs") else ""
        res.reason = (f"write {m['write_bandwidth'] / 1e9:.3g} GB/s, read {m['read_bandwidth'] / 1e9:.3g} GB/s, "
                      f"data verified, on {where}{note}")
    return res

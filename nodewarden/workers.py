"""Local worker processes that Ctrl-C stops at once, whose death is noticed and that die with
their parent: the helpers every process pool of nodewarden uses (parallel reading of one large
file, of many files)."""

from __future__ import annotations

from typing import Any


PR_SET_PDEATHSIG = 1  # prctl(2) option (linux/prctl.h)


def ignore_sigint() -> None:
    """Worker-process initializer: Ctrl-C (SIGINT to the whole process group) is the parent's to
    handle; it stops the workers itself."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def init_worker(parent_pid: int) -> None:
    """Worker-process initializer (``initargs=(os.getpid(),)`` in the parent): :func:`ignore_sigint`,
    and the worker dies with its parent. A parent killed outright (SIGTERM to it alone, as
    ``kill PID`` or a job's time limit sends it; SIGKILL; the OOM killer) runs no clean-up: its
    workers, blocked reading a task queue whose write end their siblings hold too, would wait
    for ever. On Linux the kernel sends them SIGKILL when the parent goes (``prctl(2)``
    PR_SET_PDEATHSIG; strictly, when the thread that started them ends: pools are started and
    used by one thread); a worker whose parent is already gone exits at once. Elsewhere, or when
    prctl is refused, only SIGINT is ignored."""
    import os
    import signal
    import sys

    ignore_sigint()
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    if prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
             ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the death signal was set
        os._exit(1)


def wait(future: Any, poll_s: float = 0.2) -> Any:
    """``future.result()`` that Ctrl-C can interrupt: a wait without a timeout on a lock is not
    woken by SIGINT, so wait in short steps."""
    from concurrent.futures import TimeoutError as FutureTimeout
    while True:
        try:
            return future.result(timeout=poll_s)
        except FutureTimeout:
            continue


def stop(executor: Any, timeout_s: float = 5.0) -> None:
    """Shut a ProcessPoolExecutor down now: queued tasks cancelled, running ones killed, and its
    manager thread waited for (at most ``timeout_s`` seconds for the workers, as much again for
    the thread).

    The wait for the manager thread is what makes a stop safe at interpreter exit: that thread
    closes the pool's wake-up pipe when it sees the workers gone, while the exit hook of
    ``concurrent.futures`` writes to the same pipe without the pool's lock; a thread still
    closing the pipe then makes the exit print ``OSError: [Errno 9] Bad file descriptor``. Once
    the thread has ended the pipe is marked closed and the hook writes nothing."""
    procs = list((getattr(executor, "_processes", None) or {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)  # shutdown() forgets it
    executor.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout_s)
    if manager is not None:
        manager.join(timeout_s)

"""Local worker processes that Ctrl-C stops at once and whose death is noticed: the helpers
every process pool of nodewarden uses (parallel reading of one large file, of many files)."""

from __future__ import annotations

from typing import Any


def ignore_sigint() -> None:
    """Worker-process initializer: Ctrl-C (SIGINT to the whole process group) is the parent's to
    handle; it stops the workers itself."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait(future: Any, poll_s: float = 0.2) -> Any:
    """``future.result()`` that Ctrl-C can interrupt: a wait without a timeout on a lock is not
    woken by SIGINT, so wait in short steps."""
    from concurrent.futures import TimeoutError as FutureTimeout
    while True:
        try:
            return future.result(timeout=poll_s)
        except FutureTimeout:
            continue


def stop(executor: Any) -> None:
    """Shut a ProcessPoolExecutor down now: queued tasks cancelled, running ones killed."""
    procs = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(5)

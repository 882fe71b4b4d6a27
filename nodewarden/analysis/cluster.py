"""Where the per-directory parsing tasks of :func:`nodewarden.analysis.ingest.ingest` run: local
worker processes, or a Dask cluster (the optional ``[dask]`` extra) when a scheduler address is
given (``nodewarden analyze --scheduler tcp://HOST:8786``).

Both take the same task function and arguments and hand back the same results; ingest consumes
them in input order, so a run's events, copies dropped and errors do not depend on where they
were parsed. Dask workers read the files themselves: the paths given must name the same files on
every worker (a shared file system, as on an HPC cluster), nodewarden must be importable there,
and a ``--cache`` directory must be shared as well.
"""

from __future__ import annotations

from typing import Any, Callable

from nodewarden.workers import init_worker, stop, wait

CONNECT_TIMEOUT_S = 30.0  # how long to wait for the scheduler to answer


class ClusterError(Exception):
    """The task runner cannot be used (Dask not installed, scheduler unreachable) or a task was
    lost by the cluster. The message says which and what to do."""


def _died(e: BaseException) -> ClusterError:
    return ClusterError(f"a worker process reading the logs died ({e}); was it killed, or out of memory? "
                        "Run again, with fewer --jobs if memory is short")


class ProcessPool:
    """``jobs`` local worker processes (fork). A worker that dies (killed, out of memory) ends
    the run with ClusterError instead of leaving its task waited for ever."""

    def __init__(self, jobs: int) -> None:
        import os
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context
        self.slots = jobs
        self._pool = ProcessPoolExecutor(jobs, mp_context=get_context("fork"), initializer=init_worker,
                                         initargs=(os.getpid(),))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        from concurrent.futures.process import BrokenProcessPool
        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool as e:  # a worker died since the last result
            raise _died(e) from None

    def result(self, handle: Any) -> Any:
        from concurrent.futures.process import BrokenProcessPool
        try:
            return wait(handle)
        except BrokenProcessPool as e:
            raise _died(e) from None

    def close(self, finished: bool) -> None:
        if finished:
            self._pool.shutdown(wait=True)
        else:
            stop(self._pool)


def _probe(address: str, timeout: float) -> None:
    """Open and close one Dask connection to ``address`` within ``timeout`` seconds, before any
    Client exists: a Client given a malformed address, or pointed at a server that is not Dask
    (it never completes the handshake), stalls or hangs instead of failing. Raises ClusterError."""
    import asyncio
    import threading

    from distributed.comm import connect

    async def handshake() -> None:
        comm = await connect(address, timeout=timeout)
        await comm.close()

    error: list[BaseException] = []

    def run() -> None:  # in its own thread: the caller may be inside an event loop already
        try:
            asyncio.run(asyncio.wait_for(handshake(), timeout + 1.0))
        except BaseException as e:  # noqa: BLE001 - reported below
            error.append(e)

    t = threading.Thread(target=run, name="nodewarden-dask-probe", daemon=True)
    t.start()
    t.join(timeout + 5.0)
    if t.is_alive() or (error and isinstance(error[0], (TimeoutError, asyncio.TimeoutError))):
        raise ClusterError(f"no Dask scheduler answered at {address} within {timeout:g} s "
                           "(nothing listening there, or not a Dask scheduler)")
    if error:
        e = error[0]
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {type(e).__name__}: {e}")


class DaskPool:
    """Tasks on the Dask cluster whose scheduler listens at ``address`` (``tcp://host:8786``).

    Raises ClusterError when ``distributed`` is not installed or the scheduler does not answer
    within ``timeout`` seconds (default CONNECT_TIMEOUT_S); :meth:`result` raises ClusterError when the cluster lost a task
    (e.g. its workers kept dying)."""

    def __init__(self, address: str, timeout: float | None = None) -> None:
        try:
            from distributed import Client
        except ImportError as e:
            raise ClusterError(f"--scheduler needs the [dask] extra (pip install 'nodewarden[dask]'): {e}") from None
        self.address = address
        timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
        _probe(address, timeout)
        try:
            self._client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: {e}") from None
        threads = sum(self._client.nthreads().values())
        # Tasks queued ahead of the one consumed: enough to keep every worker thread busy.
        self.slots = max(1, threads)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._client.submit(fn, *args, pure=False)

    def result(self, handle: Any) -> Any:
        try:
            return handle.result()
        except Exception as e:  # the task itself never raises: this is the cluster failing it
            raise ClusterError(f"the Dask cluster at {self.address} lost a parsing task: "
                               f"{type(e).__name__}: {e}") from e

    def close(self, finished: bool) -> None:
        self._client.close()

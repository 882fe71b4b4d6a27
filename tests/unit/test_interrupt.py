"""Ctrl-C and dying workers during a parallel read: `nodewarden events/analyze --jobs 2` stops at
once on SIGINT to its process group (as a terminal sends it), leaves no worker behind, and ends
with a message (not a hang) when a worker process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from nodewarden.analysis.simulate import simulate

# Each parsing task is slowed down (in the forked workers too) so that the run is still reading
# when the signal comes, and writes a line to TASK_LOG when it starts (the work done is counted,
# not the wall clock: a loaded machine makes every step slower, not the stop later in work);
# KILL_IN names a directory whose task kills its own worker.
WRAPPER = textwrap.dedent("""
    import os, signal, sys, time
    from nodewarden.analysis import ingest
    real = ingest._read_group
    def slow(files, *a, **kw):
        if os.environ.get("KILL_IN") and files[0].path.parent.name == os.environ["KILL_IN"]:
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("TASK_LOG"):
            fd = os.open(os.environ["TASK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, b"task\\n")
            os.close(fd)
        time.sleep(0.3)
        return real(files, *a, **kw)
    ingest._read_group = slow
    from nodewarden import cli
    sys.exit(cli.main(sys.argv[1:]))
""")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    simulate(out, nodes=40, days=20, seed=4)
    return out


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRAPPER, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", ["events", "analyze"])
def test_ctrl_c_stops_the_run_and_its_workers(fleet: Path, command: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.log"
    proc = _start([command, str(fleet), "--jobs", "2", "--cache", str(tmp_path / "cache")],
                  env={"TASK_LOG": str(tasks)})
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while len(parent.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = parent.children(recursive=True)
    assert len(workers) >= 2
    while (not tasks.exists() or len(tasks.read_bytes().splitlines()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)  # both workers busy
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    started_before = len(tasks.read_bytes().splitlines())
    proc.wait(timeout=60)
    assert proc.returncode == 130
    # Stopped at once: at most the tasks the two workers had already been handed start after the
    # signal, and the run is far from done (the fleet is 40 directories, one task each or more).
    started = len(tasks.read_bytes().splitlines())
    assert started - started_before <= 2 * 4, (started_before, started)  # the pool's window: 4 per worker
    assert started < 40
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    assert not list((tmp_path / "cache").glob("*.tmp.parquet"))  # none left by the killed workers
    assert "Traceback" not in proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_workers_die_with_a_parent_killed_alone(fleet: Path, tmp_path: Path, sig: int) -> None:
    # `kill PID` (or a job's time limit, or the OOM killer) signals the parent only: no Ctrl-C
    # clean-up runs, and the workers must not wait for tasks for ever.
    tasks = tmp_path / "tasks.log"
    proc = _start(["analyze", str(fleet), "--jobs", "2", "--no-cache"], env={"TASK_LOG": str(tasks)})
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while (not tasks.exists() or len(tasks.read_bytes().splitlines()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)  # both workers busy
    workers = parent.children(recursive=True)
    assert len(workers) == 2
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=60) == -sig
    gone, alive = psutil.wait_procs(workers, timeout=30)
    for p in alive:  # by pid, only so that a failure leaves nothing behind
        p.kill()
    assert not alive  # without the parent-death signal they block on the task queue for good


def test_a_killed_worker_ends_the_run_with_a_message(fleet: Path) -> None:
    victim = sorted(p.name for p in fleet.iterdir() if p.is_dir())[5]
    proc = _start(["analyze", str(fleet), "--jobs", "2", "--no-cache"], env={"KILL_IN": victim})
    proc.wait(timeout=60)
    err = proc.stderr.read()
    assert proc.returncode == 3, err
    assert "a worker process reading the logs died" in err and "Traceback" not in err


def test_stop_waits_for_the_pools_manager_thread() -> None:
    # The manager thread closes the pool's wake-up pipe when it sees its workers gone; the exit
    # hook of concurrent.futures writes to that pipe without the pool's lock. A stop that returns
    # while the thread still runs makes the exit print "OSError: [Errno 9] Bad file descriptor"
    # now and then; after a stop that waited, the thread is gone and the pipe marked closed.
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from nodewarden.workers import ignore_sigint, stop

    pool = ProcessPoolExecutor(2, mp_context=get_context("fork"), initializer=ignore_sigint)
    futures = [pool.submit(time.sleep, 5) for _ in range(6)]
    while not any(f.running() for f in futures):
        time.sleep(0.01)
    manager, wakeup = pool._executor_manager_thread, pool._executor_manager_thread_wakeup
    workers = list(pool._processes.values())
    stop(pool)
    assert manager is not None and not manager.is_alive()
    assert wakeup._closed
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2
    assert all(f.done() for f in futures)

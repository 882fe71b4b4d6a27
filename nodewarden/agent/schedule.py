"""The agent's scheduled ``nodewarden validate`` run: weekly by default, at a per-host time,
only while no compute process holds the GPUs, in a subprocess that never blocks the follower,
the collectors or the scrape; its report exported as ``nodewarden_validator_*`` series.

When a run is due (pure functions, tested with a fake clock):

* Time is cut in slots of ``interval_days``, starting Monday 1970-01-05 00:00 UTC (as systemd's
  ``OnCalendar=weekly``), each host shifted by an offset within ``jitter_hours`` taken from a
  hash of its name (:func:`jitter_offset`): a fleet's runs spread over half a day, each node
  at the same time every week (like the timer's ``RandomizedDelaySec=`` with ``FixedRandomDelay=``).
* After a run, the next is due at the start of the next slot (:func:`next_due`); a slot missed
  while the agent was down is run at once when it starts again.
* A node never validated is due ``offset`` after the agent first started there: a new node is
  validated within ``jitter_hours``, and a fleet installed at once does not run all together.
* Due, but a GPU runs a compute process (NVML ``nvmlDeviceGetComputeRunningProcesses`` on every
  GPU): retried every :data:`BUSY_RETRY_S` (30 min), the next look exported as the next run's
  time; ``/healthz`` says since when and why (:meth:`Scheduler.health`). No NVML (no library,
  no driver, no GPU) counts as idle: the suite then checks what the node has. An NVML probe that hangs counts as
  busy (it is given :data:`PROBE_TIMEOUT_S` under :func:`nodewarden.nvml.call_with_timeout`; no
  second probe starts while an NVML call of the agent is still blocked in the driver).

The run: ``<python> -m nodewarden validate --json <state_dir>/validate.json --no-progress <args>``,
its output in ``<state_dir>/validate.log``, killed (SIGTERM to its process group, SIGKILL
:data:`KILL_GRACE_S` later) after ``timeout_seconds``. Before it starts, its start time is
saved in ``<state_dir>/schedule.json``: a run during which the node crashed or rebooted (a GPU
that takes the machine down) counts as that slot's run, so a faulty node is not re-validated
in a loop. A run stopped by the agent's own stop (SIGTERM) does not count: it runs again.

Exported (see :mod:`nodewarden.agent.exporter`): each check's status and numeric
measurements from the report, the report's ``finished`` time, the last exit code, the last
start time, and when the next run is due. At start they are read back from ``validate.json`` and
``schedule.json``. A report written into ``validate.json`` by anyone else (the
``nodewarden-validate.timer``, the Slurm health check given ``NODEWARDEN_JSON``, an operator's
``nodewarden validate --json <state_dir>/validate.json``) is exported too, with validator scheduling on or off: the
:class:`ReportWatcher` rereads the file when it changes (one ``stat`` per poll interval), so a
repaired node's passing run clears the alert of its failed one. A run that wrote no new report (exit 2 for bad ``args``, a timeout) updates
the exit code only: the series keep the previous report, whose time says how old it is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from nodewarden import nvml
from nodewarden.agent import exporter as ex
from nodewarden.agent.exporter import Counters
from nodewarden.agent.state import write_atomic
from nodewarden.events import iso_utc, parse_iso_utc
from nodewarden.digests import sha256

log = logging.getLogger(__name__)

ANCHOR = 345600.0  # 1970-01-05T00:00:00Z, a Monday: slot boundaries as OnCalendar=weekly (in UTC)
BUSY_RETRY_S = 1800.0  # GPUs busy: look again this much later
BUSY_REASON = "GPUs busy (a compute process runs, or NVML does not answer)"  # why a due run waits
PROBE_TIMEOUT_S = 60.0  # an NVML busy probe running longer counts as busy
CANNOT_START = 127  # exit code exported when the validator could not be started (as a shell says)
KILL_GRACE_S = 10.0  # after SIGTERM (timeout or agent stop), SIGKILL this much later (fits TimeoutStopSec=20s)
MAX_SLEEP_S = 300.0  # re-evaluate at least this often (wall-clock jumps, suspend)
SCHEDULE_FILE = "schedule.json"
REPORT_FILE = "validate.json"
REPORT_SCHEMA = "nodewarden.validate/1"
MAX_REPORT_BYTES = 16 << 20  # a report of the whole suite is a few kB
LOG_FILE = "validate.log"
STATUSES = ("pass", "warn", "fail", "skip", "error")  # nodewarden.validator.result.STATUSES


# ---------------------------------------------------------------------------------------------
# When (pure)

def jitter_offset(hostname: str, jitter_s: float, interval_s: float) -> float:
    """This host's offset into each slot, in [0, min(jitter_s, interval_s)): the first 64 bits
    of SHA-256 of the hostname, scaled. The same name gives the same offset on every start."""
    span = max(0.0, min(jitter_s, interval_s))
    h = int.from_bytes(sha256(hostname.encode("utf-8", "surrogateescape")).digest()[:8], "big")
    return span * (h / 2.0**64)


def slot_start(t: float, interval_s: float, offset_s: float) -> float:
    """Start (Unix time) of the slot holding ``t``: slots are ``interval_s`` long and start at
    ``ANCHOR + offset_s + k * interval_s``."""
    k = math.floor((t - ANCHOR - offset_s) / interval_s)
    return ANCHOR + offset_s + k * interval_s


def next_due(last_run: float | None, first_seen: float, interval_s: float, offset_s: float,
             now: float | None = None) -> float:
    """When the next run is due (Unix time): the start of the slot after ``last_run``'s; never
    run: ``first_seen + offset_s``. With ``now``, a ``last_run`` or ``first_seen`` in the future
    (the clock was wrong then) is taken as ``now``, so a bad stamp cannot postpone runs for years."""
    if now is not None:
        first_seen = min(first_seen, now)
        last_run = None if last_run is None else min(last_run, now)
    if last_run is None:
        return first_seen + offset_s
    return slot_start(last_run, interval_s, offset_s) + interval_s


def is_due(now: float, last_run: float | None, first_seen: float, interval_s: float, offset_s: float) -> bool:
    return now >= next_due(last_run, first_seen, interval_s, offset_s, now=now)


# ---------------------------------------------------------------------------------------------
# What to export (pure)

BOUNDS = {">=": "min", "<=": "max"}  # a measurement's ``op`` -> the threshold's ``bound`` label


def report_series(doc: Any) -> dict[ex.Family, dict[tuple[str, ...], float]]:
    """The validator series of one report (``nodewarden.validate/1``): ``VAL_STATUS`` (every
    status of every check, 1 for the one it has), ``VAL_VALUE`` (numeric measurements; the
    last of two equal label sets wins), ``VAL_THRESHOLD`` (the threshold of each numeric
    measurement that has one, ``bound`` min for ``op`` ">=", max for "<="), ``VAL_LAST_RUN``
    (its ``finished`` time). Malformed
    entries are skipped; a document that is not a report gives empty families."""
    status: dict[tuple[str, ...], float] = {}
    value: dict[tuple[str, ...], float] = {}
    threshold: dict[tuple[str, ...], float] = {}
    out: dict[ex.Family, dict[tuple[str, ...], float]] = {ex.VAL_STATUS: status, ex.VAL_VALUE: value,
                                                          ex.VAL_THRESHOLD: threshold}
    if not isinstance(doc, dict):
        return out
    for c in doc.get("checks") or ():
        if not isinstance(c, dict) or not isinstance(c.get("check"), str):
            continue
        name = c["check"]
        for s in STATUSES:
            status[(name, s)] = 1.0 if c.get("status") == s else 0.0
        for m in c.get("measurements") or ():
            if not isinstance(m, dict) or not isinstance(m.get("name"), str):
                continue
            v = m.get("value")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            key = (name, m["name"], str(m.get("unit") or ""), str(m.get("device") or ""))
            value[key] = float(v)
            t, bound = m.get("threshold"), BOUNDS.get(m.get("op", ">="))
            if isinstance(t, (int, float)) and not isinstance(t, bool) and bound is not None:
                threshold[key + (bound,)] = float(t)
    try:
        out[ex.VAL_LAST_RUN] = {(): parse_iso_utc(doc["finished"]).timestamp()}
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    return out


# ---------------------------------------------------------------------------------------------
# schedule.json

@dataclasses.dataclass
class ScheduleState:
    """``schedule.json``: when the agent first ran here, when the last run started, and its exit
    code and end (None while it runs, or when the node went down during it)."""

    first_seen: float
    last_attempt: float | None = None
    last_exit_code: int | None = None
    last_finished: float | None = None

    def to_dict(self) -> dict[str, Any]:
        def t(x: float | None) -> str | None:
            return iso_utc(dt.datetime.fromtimestamp(x, dt.timezone.utc)) if x is not None else None
        return {"format": 1, "first_seen": t(self.first_seen), "last_attempt": t(self.last_attempt),
                "last_exit_code": self.last_exit_code, "last_finished": t(self.last_finished)}

    @classmethod
    def from_dict(cls, d: Any) -> ScheduleState:
        """Raises ValueError for a document that is not a schedule state."""
        if not isinstance(d, dict) or d.get("format") != 1:
            raise ValueError("not a schedule state (format 1)")

        def t(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else parse_iso_utc(v).timestamp()
        try:
            first = t("first_seen")
            code = d.get("last_exit_code")
            if first is None or (code is not None and (isinstance(code, bool) or not isinstance(code, int))):
                raise ValueError("bad first_seen or last_exit_code")
            return cls(first, t("last_attempt"), code, t("last_finished"))
        except (TypeError, AttributeError) as e:
            raise ValueError(str(e)) from e


def load_schedule(state_dir: Path, now: float) -> tuple[ScheduleState, bool]:
    """The saved schedule state, or a new one first seen ``now``; and whether it is new (to
    be saved). A corrupt file is logged and replaced."""
    path = state_dir / SCHEDULE_FILE
    try:
        return ScheduleState.from_dict(json.loads(path.read_bytes())), False
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log.error("%s unreadable (%s): the validator schedule starts over", path, e)
    return ScheduleState(first_seen=now), True


def load_report(path: Path, max_bytes: int | None = None) -> dict[str, Any] | None:
    """A validator report, or None (absent, unreadable, not a regular file, or over
    ``max_bytes``: logged). Opened once, non-blocking, and checked on the open file: a FIFO or
    a device put there never blocks the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("%s unreadable: %s", path, e.strerror or e)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (max_bytes is not None and st.st_size > max_bytes):
            log.warning("%s is not a regular file%s: not read", path,
                        "" if max_bytes is None else f" of at most {max_bytes} bytes")
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
        doc = json.loads(data)
    except (OSError, ValueError) as e:
        log.warning("%s unreadable: %s", path, e)
        return None
    finally:
        os.close(fd)
    return doc if isinstance(doc, dict) else None


def export_report(counters: Counters, doc: dict[str, Any]) -> None:
    """Put one report's series (:func:`report_series`) into ``counters``, replacing the
    previous report's."""
    for fam, values in report_series(doc).items():
        if fam is ex.VAL_LAST_RUN:
            counters.set(fam, (), values[()])
        else:
            counters.replace(fam, values)


class ReportWatcher:
    """Exports ``validate.json`` whenever it changes, whoever wrote it.

    ``poll()`` stats the file (mtime, size, inode) and, when that changed since the last poll,
    reads it and exports its series and its ``exit_code`` (as ``validator_last_exit_code``).
    A file that is absent, unreadable, not a regular file (a FIFO would block the read), over
    :data:`MAX_REPORT_BYTES`, not a report, or the report of another ``host`` exports nothing
    and keeps what was exported (its warning is logged once per change: a chmod that makes it
    readable is one). ``seen_now()`` takes the current file as
    already exported (the scheduler has read it at start)."""

    def __init__(self, counters: Counters, path: Path, host: str | None = None) -> None:
        self.counters = counters
        self.path = path
        self.host = host
        self._key: tuple[int, ...] | None = None

    def _stat(self) -> tuple[int, ...] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        # ctime too: a chmod or chown that makes the file readable is a change
        return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode

    def seen_now(self) -> None:
        self._key = self._stat()

    def poll(self) -> bool:
        """Export the report if the file changed; True when a report was exported."""
        key = self._stat()
        if key is None or key == self._key:
            return False
        self._key = key
        doc = load_report(self.path, MAX_REPORT_BYTES)
        if doc is None or doc.get("schema") != REPORT_SCHEMA:
            if doc is not None:
                log.warning("%s is not a nodewarden validator report (schema %r): not exported",
                            self.path, doc.get("schema"))
            return False
        if self.host is not None and isinstance(doc.get("host"), str) and doc["host"] != self.host:
            # a report copied from another node (or baked into an image) says nothing of this one
            log.warning("%s is the report of host %r, not of %r: not exported", self.path, doc["host"], self.host)
            return False
        export_report(self.counters, doc)
        if isinstance(doc.get("exit_code"), int) and not isinstance(doc.get("exit_code"), bool):
            self.counters.set(ex.VAL_EXIT, (), float(doc["exit_code"]))
        log.info("validator report %s exported (finished %s, exit code %s)", self.path, doc.get("finished"),
                 doc.get("exit_code"))
        return True


# ---------------------------------------------------------------------------------------------
# Are the GPUs busy?

def _any_compute_process(s: nvml.Session) -> bool:
    for i in range(s.count()):
        try:
            h = s.handle(i)
            procs = s.call("nvmlDeviceGetComputeRunningProcesses", h) if h is not None else None
        except (nvml.GpuLost, nvml.NvmlCallError) as e:
            log.debug("NVML: GPU %d: cannot list compute processes (%s): taken as idle", i, e)
            continue
        if procs:
            return True
    return False


def nvml_gpus_busy(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when any GPU runs a compute process (NVML ``nvmlDeviceGetComputeRunningProcesses``),
    or when NVML does not answer within ``timeout_s`` seconds (or an earlier NVML call of the
    agent is still blocked in the driver: :class:`nodewarden.nvml.NvmlTimeout`): a hung driver
    is no time to validate. No nvidia-ml-py, no NVML library or driver: False (idle). A GPU
    whose query fails (lost, in reset) is taken as idle: the suite is what reports it. Never
    raises."""
    try:
        busy, why = nvml.query(_any_compute_process, timeout_s, "GPU busy probe")
    except nvml.NvmlTimeout as e:
        log.warning("GPU busy probe: %s: GPUs taken as busy", e)
        return True
    except Exception:
        log.exception("GPU busy probe failed: GPUs taken as idle")
        return False
    if busy is None:
        log.debug("NVML not available (%s): GPUs taken as idle", why)
        return False
    return busy


# ---------------------------------------------------------------------------------------------
# The scheduler

def validate_command(report: Path, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "nodewarden", "validate", "--json", str(report), "--no-progress", *args]


def _child_env() -> dict[str, str]:
    """The agent's environment; when the agent runs from a source tree (not an installed
    package), that tree first on PYTHONPATH so the child runs the same nodewarden."""
    import nodewarden
    env = dict(os.environ)
    root = Path(nodewarden.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Scheduler:
    """Runs ``nodewarden validate`` when due (see the module doc), in its own thread.

    counters: where the validator series go. state_dir: ``schedule.json``, ``validate.json``,
    ``validate.log``. host: the name the jitter is drawn from. args: added to the command.
    busy: the GPU probe (default :func:`nvml_gpus_busy`, bounded by :data:`PROBE_TIMEOUT_S`). wall: Unix time.
    sleep: ``sleep(stop, seconds)`` waits and returns whether ``stop`` is set (default
    ``stop.wait``; a fake clock's in tests).
    """

    def __init__(self, counters: Counters, state_dir: Path, host: str, *, interval_days: float = 7.0,
                 jitter_hours: float = 12.0, args: Sequence[str] = ("--profile", "auto"),
                 timeout_s: float = 3600.0, busy: Callable[[], bool] | None = None,
                 busy_retry_s: float = BUSY_RETRY_S, wall: Callable[[], float] = time.time,
                 kill_grace_s: float = KILL_GRACE_S,
                 sleep: Callable[[threading.Event, float], bool] = lambda stop, s: stop.wait(s)) -> None:
        self.counters = counters
        self.dir = state_dir
        self.host = host
        self.interval_s = interval_days * 86400.0
        self.offset_s = jitter_offset(host, jitter_hours * 3600.0, self.interval_s)
        self.args = tuple(args)
        self.timeout_s = timeout_s
        self.busy = busy if busy is not None else nvml_gpus_busy
        self.busy_retry_s = busy_retry_s
        self.wall = wall
        self.kill_grace_s = kill_grace_s
        self.sleep = sleep
        self.report_path = state_dir / REPORT_FILE
        self.state, new = load_schedule(state_dir, wall())
        if new:
            self._save()
        self.running_since: float | None = None
        self.next_at: float | None = None
        self._retry_at: float | None = None
        self.deferred_since: float | None = None  # when a due run was first put off for busy GPUs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.state.last_attempt is not None and self.state.last_exit_code is None:
            log.warning("the validator run started %s did not finish (the agent or the node went down "
                        "during it); it counts as that slot's run",
                        iso_utc(dt.datetime.fromtimestamp(self.state.last_attempt, dt.timezone.utc)))
        self.export_saved()

    # -- thread ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, args=(self._stop,), name="validator-schedule", daemon=True)
        self._thread.start()

    def stop(self, join_s: float | None = None) -> None:
        """Stop; a run in progress is terminated (and will run again after a restart)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(join_s if join_s is not None else self.kill_grace_s + 5)

    def due_at(self) -> float:
        return next_due(self.state.last_attempt, self.state.first_seen, self.interval_s, self.offset_s,
                        now=self.wall())

    def run(self, stop: threading.Event) -> None:
        log.info("validator: every %g day(s), this host %.0f min into each slot; next run due %s",
                 self.interval_s / 86400, self.offset_s / 60,
                 iso_utc(dt.datetime.fromtimestamp(self.due_at(), dt.timezone.utc)))
        while not stop.is_set():
            now = self.wall()
            at = self.due_at()
            if self._retry_at is not None and self._retry_at > at:
                at = self._retry_at
            self._set_next(at)
            if now < at:
                self.sleep(stop, min(at - now, MAX_SLEEP_S))
                continue
            if self.busy():
                self._retry_at = now + self.busy_retry_s
                if self.deferred_since is None:
                    self.deferred_since = now
                    log.info("validator run due, but %s: retrying every %g min", BUSY_REASON,
                             self.busy_retry_s / 60)
                continue
            self._retry_at = None
            self.deferred_since = None
            self.run_once(stop)

    # -- one run -----------------------------------------------------------------------------
    def run_once(self, stop: threading.Event | None = None) -> int | None:
        """Run the validator now; export its report. Returns its exit code, or None when
        ``stop`` ended it (that run does not count) or it could not start."""
        stop = stop or threading.Event()
        before = dataclasses.replace(self.state)
        started = self.begin()
        cmd = validate_command(self.report_path, self.args)
        log.info("validator run starting: %s", " ".join(cmd))
        try:
            with open(self.dir / LOG_FILE, "wb") as out:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        env=_child_env(), start_new_session=True)
        except OSError as e:
            log.error("validator run could not start: %s", e)
            self.finish(started, CANNOT_START, report_expected=False)
            return None
        self.running_since = started
        t0 = time.monotonic()
        killed_for = None
        try:
            while proc.poll() is None:
                if stop.wait(0.2):
                    killed_for = "the agent is stopping"
                elif time.monotonic() - t0 > self.timeout_s:
                    killed_for = f"it ran past its timeout ({self.timeout_s:g}s)"
                if killed_for:
                    log.warning("validator run: terminating it: %s", killed_for)
                    self._terminate(proc)
                    break
        finally:
            self.running_since = None
        code = proc.returncode
        if stop.is_set():
            self.state = before  # stopped by us: not a run of this slot
            self._save()
            self.counters.replace(ex.VAL_ATTEMPT, {} if before.last_attempt is None else {(): before.last_attempt})
            log.info("validator run interrupted by the agent's stop; it runs again after the restart")
            return None
        self.finish(started, code)
        return code

    def begin(self) -> float:
        """Record a run's start (saved before it starts: see the module doc). Returns the time."""
        started = self.wall()
        self.state.last_attempt, self.state.last_exit_code, self.state.last_finished = started, None, None
        self._save()
        self.counters.set(ex.VAL_ATTEMPT, (), started)
        return started

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        for sig, wait_s in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            except OSError:
                proc.send_signal(sig)
            try:
                proc.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def finish(self, started: float, code: int, report_expected: bool = True) -> None:
        """Record a run's end and export its report (when it wrote one after ``started``)."""
        finished = self.wall()
        self.state.last_exit_code, self.state.last_finished = code, finished
        self._save()
        self.counters.set(ex.VAL_EXIT, (), float(code))
        doc = load_report(self.report_path) if report_expected else None
        fresh = doc is not None and _report_started(doc) is not None and _report_started(doc) >= started - 5.0
        if fresh:
            self._export(doc)
        took = finished - started
        failed = [c.get("check") for c in (doc or {}).get("checks", []) if isinstance(c, dict)
                  and c.get("status") == "fail"] if fresh else []
        if code == 0:
            log.info("validator run finished in %.0fs: healthy (exit 0)", took)
        elif code == 1:
            log.error("validator run finished in %.0fs: UNHEALTHY (exit 1), failed: %s; see %s",
                      took, ", ".join(map(str, failed)) or "?", self.dir / LOG_FILE)
        else:
            log.error("validator run finished in %.0fs with exit code %d%s; see %s", took, code,
                      "" if fresh else " and no new report (the previous one stays exported)", self.dir / LOG_FILE)

    # -- export ------------------------------------------------------------------------------
    def export_saved(self) -> None:
        """At start: the series from ``validate.json`` and ``schedule.json``."""
        doc = load_report(self.report_path)
        if doc is not None:
            self._export(doc)
        code = self.state.last_exit_code
        if code is None and doc is not None and isinstance(doc.get("exit_code"), int) and self.state.last_attempt is None:
            code = doc["exit_code"]  # a report written before this agent kept a schedule (timer, operator)
        if code is not None:
            self.counters.set(ex.VAL_EXIT, (), float(code))
        if self.state.last_attempt is not None:
            self.counters.set(ex.VAL_ATTEMPT, (), self.state.last_attempt)
        self._set_next(self.due_at())

    def _export(self, doc: dict[str, Any]) -> None:
        export_report(self.counters, doc)

    def _set_next(self, at: float) -> None:
        self.next_at = at
        self.counters.set(ex.VAL_NEXT, (), at)

    def _save(self) -> None:
        data = json.dumps(self.state.to_dict(), sort_keys=True).encode()
        try:
            write_atomic(self.dir / SCHEDULE_FILE, data)
        except OSError as e:
            log.error("cannot write %s: %s (the validator schedule is kept in memory)",
                      self.dir / SCHEDULE_FILE, e.strerror or e)

    def health(self) -> dict[str, Any]:
        """The ``validator`` part of ``/healthz``: times as ISO 8601 UTC or None. While a due run
        waits for busy GPUs, ``deferred_since`` is when it was first put off, ``deferred_because``
        :data:`BUSY_REASON` and ``next_run`` the next look; both None otherwise."""
        def t(x: float | None) -> str | None:
            return iso_utc(dt.datetime.fromtimestamp(x, dt.timezone.utc)) if x is not None else None
        return {"running_since": t(self.running_since), "next_run": t(self.next_at),
                "last_attempt": t(self.state.last_attempt), "last_exit_code": self.state.last_exit_code,
                "deferred_since": t(self.deferred_since),
                "deferred_because": BUSY_REASON if self.deferred_since is not None else None}


def _report_started(doc: dict[str, Any]) -> float | None:
    try:
        return parse_iso_utc(doc["started"]).timestamp()
    except (KeyError, TypeError, ValueError, AttributeError):
        return None

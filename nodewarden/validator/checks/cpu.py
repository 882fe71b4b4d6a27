"""Every usable CPU under load, each computing answers known in advance.

A "mercurial" core computes wrong results silently, or runs far slower than its siblings
(thermal throttling, a stuck low P-state, a core the firmware half-disabled). This check starts
one worker process per CPU the process may use (its affinity: a Slurm allocation is honoured),
pins each worker to its CPU with ``sched_setaffinity`` and, for ``duration_seconds``, has it
repeat two known-answer computations:

* a SHA-256 chain: ``d0 = sha256(SEED)``, ``d(k+1) = sha256(d(k) + BLOCK)`` for
  :data:`CHAIN_ROUNDS` rounds over a fixed 16 KiB ``BLOCK``; the final digest must equal
  :data:`KNOWN_DIGEST` (exercises the integer SIMD / SHA extensions OpenSSL uses);
* a scalar float64 sum ``Σ sqrt(x·x) + (3x)/3 − x/2`` for x = 1..:data:`FLOAT_TERMS`: every
  operation is IEEE-754 exact here, so the sum must equal exactly ``1.5 · n(n+1)/2``.

Measured: each CPU's SHA-256 throughput (``sha256_rate``, B/s of chain input hashed, device
``cpuN``); ``wrong_answer_cpus`` (must be 0: any wrong answer fails, naming the CPU);
``slowest_core_ratio`` (slowest / median rate, held to ``min_core_ratio``); the frequency and
cpufreq governor of those CPUs (:mod:`nodewarden.sysfs.cpufreq` under ``ctx.sysfs``:
``cpuN/cpufreq/scaling_cur_freq`` and ``scaling_governor``, or without cpufreq the ``cpu MHz``
of ``ctx.procfs``/cpuinfo; informational, but a ``powersave`` governor on a GPU node gives
``warn``). Both roots are the run's: a fixture tree is read, never the machine's own files.

Workers are forked: they need nothing but hashlib and the interpreter, and a fork starts in
milliseconds even on a 192-CPU node.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import os
import statistics
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from nodewarden.sysfs import cpufreq
from nodewarden.validator.base import RunContext
from nodewarden.validator.result import ERROR, FAIL, PASS, WARN, CheckResult, status_from_measurements

NAME = "cpu"
NEEDS: tuple[str, ...] = ()
DEFAULTS: dict[str, Any] = {
    "duration_seconds": 10.0,      # load time of every worker, after all are pinned and ready
    "min_core_ratio": 0.5,         # slowest CPU's rate / median rate must be at least this
    "inject_wrong_answer_cpu": None,  # tests: this CPU's worker corrupts its SHA-256 chain
    "inject_slow_cpu": None,       # tests: this CPU's worker hashes each chain SLOW_FACTOR times (a throttled core)
}
QUICK: dict[str, Any] = {"duration_seconds": 3.0}

SEED = b"nodewarden cpu known-answer v1"
BLOCK = hashlib.sha256(SEED).digest() * 512          # 16 KiB, fixed
CHAIN_ROUNDS = 64                                     # 1 MiB hashed per chain
CHAIN_BYTES = CHAIN_ROUNDS * (32 + len(BLOCK))
# sha256 chain of CHAIN_ROUNDS rounds from SEED, computed once and written down: a core that
# computes it differently is wrong, whatever the parent process computes.
KNOWN_DIGEST = "d6d9a460c03dba223d6bd6682828177ff803985d270c76487e471a1579928730"
SLOW_FACTOR = 8     # inject_slow_cpu: that worker's timed SHA-256 work, repeated (1/8 of its rate)
FLOAT_TERMS = 2000
KNOWN_FLOAT_SUM = 1.5 * FLOAT_TERMS * (FLOAT_TERMS + 1) / 2   # 3001500.0, exact in float64

_READY_TIMEOUT_S = 30.0   # forking and pinning every worker
_GRACE_S = 30.0           # beyond duration_seconds before a silent worker counts as hung


def sha256_chain(rounds: int = CHAIN_ROUNDS, flip_round: int | None = None) -> str:
    """Hex digest of the SHA-256 chain ``d(k+1) = sha256(d(k) + BLOCK)`` from ``sha256(SEED)``.

    ``flip_round`` flips one bit of that round's input: the fault a bad core would make, for tests.
    """
    d = hashlib.sha256(SEED).digest()
    for k in range(rounds):
        if k == flip_round:
            d = bytes([d[0] ^ 0x01]) + d[1:]
        d = hashlib.sha256(d + BLOCK).digest()
    return d.hex()


def float_kernel(terms: int = FLOAT_TERMS) -> float:
    """``Σ sqrt(x·x) + (3x)/3 − x/2`` for x = 1..terms, each step exact: ``1.5·terms(terms+1)/2``."""
    s = 0.0
    for k in range(1, terms + 1):
        x = float(k)
        s += math.sqrt(x * x) + (x * 3.0) / 3.0 - x * 0.5
    return s


def slowest_core_ratio(rates: dict[int, float]) -> float:
    """Slowest rate / median rate over CPUs (1.0 for one CPU). Raises ValueError when empty or
    when the median is not positive."""
    if not rates:
        raise ValueError("no rates")
    med = statistics.median(rates.values())
    if med <= 0:
        raise ValueError(f"median rate {med} is not positive")
    return min(rates.values()) / med


def slow_cpus(rates: dict[int, float], min_ratio: float) -> list[int]:
    """CPUs whose rate is below ``min_ratio`` × the median rate, sorted."""
    if not rates:
        return []
    med = statistics.median(rates.values())
    return sorted(cpu for cpu, r in rates.items() if r < min_ratio * med)


def summarize_governors(governors: dict[int, str]) -> str | None:
    """``performance``, or ``powersave×2, performance×126`` when mixed; None when none known."""
    if not governors:
        return None
    counts: dict[str, int] = {}
    for g in governors.values():
        counts[g] = counts.get(g, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{g}×{n}" for g, n in sorted(counts.items(), key=lambda kv: (kv[1], kv[0])))


def validate_params(params: dict[str, Any], cpus: list[int]) -> tuple[float, float, int | None, int | None]:
    """(duration_seconds, min_core_ratio, inject_wrong_answer_cpu, inject_slow_cpu). Raises
    ValueError naming the parameter. The ``inject_`` keys are test hooks (a profile, config file
    or ``--set`` cannot set them: :mod:`nodewarden.validator.profiles`)."""
    duration = params.get("duration_seconds")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration <= 3600:
        raise ValueError(f"duration_seconds must be a number in (0, 3600], got {duration!r}")
    ratio = params.get("min_core_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise ValueError(f"min_core_ratio must be a number in [0, 1], got {ratio!r}")
    injects = []
    for key in ("inject_wrong_answer_cpu", "inject_slow_cpu"):
        v = params.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v not in cpus):
            raise ValueError(f"{key} must be one of the usable CPUs {cpus}, got {v!r}")
        injects.append(v)
    return float(duration), float(ratio), injects[0], injects[1]


def _worker(cpu: int, duration_s: float, inject: bool, start: Any, conn: Connection, slow: bool = False) -> None:
    """Pin to ``cpu``, wait for the start signal, run known-answer blocks for ``duration_s``, send
    ``{cpu, chains, sha_seconds, floats, wrong: [...]}`` (or ``{cpu, error}``). ``inject``/``slow``:
    the test hooks (a corrupted chain; each chain hashed :data:`SLOW_FACTOR` times, counted once)."""
    try:
        os.sched_setaffinity(0, {cpu})
        conn.send({"cpu": cpu, "ready": True})
        if not start.wait(_READY_TIMEOUT_S):
            conn.send({"cpu": cpu, "error": "start signal never came"})
            return
        chains = floats = 0
        sha_s = 0.0
        wrong: list[str] = []
        t_end = time.perf_counter() + duration_s
        while True:
            t0 = time.perf_counter()
            digest = sha256_chain(CHAIN_ROUNDS, CHAIN_ROUNDS // 2 if inject else None)
            for _ in range(SLOW_FACTOR - 1 if slow else 0):
                sha256_chain(CHAIN_ROUNDS)
            sha_s += time.perf_counter() - t0
            chains += 1
            if digest != KNOWN_DIGEST and len(wrong) < 5:
                wrong.append(f"SHA-256 chain {chains}: got {digest[:16]}…, expected {KNOWN_DIGEST[:16]}…")
            s = float_kernel(FLOAT_TERMS)
            floats += 1
            if s != KNOWN_FLOAT_SUM and len(wrong) < 5:
                wrong.append(f"float64 sum {floats}: got {s!r}, expected {KNOWN_FLOAT_SUM!r}")
            if time.perf_counter() >= t_end:
                break
        conn.send({"cpu": cpu, "chains": chains, "sha_seconds": sha_s, "floats": floats, "wrong": wrong,
                   "ran_on": sorted(os.sched_getaffinity(0))})
    except Exception as e:  # reported to the parent, which names the CPU
        try:
            conn.send({"cpu": cpu, "error": f"{type(e).__name__}: {e}"})
        except Exception:
            pass
    finally:
        conn.close()


def _reap(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(2)
        if p.is_alive():
            p.kill()
            p.join(2)


def run_workers(cpus: list[int], duration_s: float, inject_cpu: int | None,
                progress: Any = None, slow_cpu: int | None = None) -> dict[int, dict[str, Any]]:
    """One pinned worker per CPU, started together; their reports by CPU. A worker that dies or
    stays silent past ``duration_s`` + grace reports ``{"error": ...}``. Every worker is reaped.
    ``inject_cpu``/``slow_cpu``: the test hooks of :func:`_worker` for that CPU."""
    fork = mp.get_context("fork")
    start = fork.Event()
    procs, conns = [], {}
    reports: dict[int, dict[str, Any]] = {}
    try:
        for cpu in cpus:
            parent_end, child_end = fork.Pipe(duplex=False)
            p = fork.Process(target=_worker, name=f"nodewarden-cpu{cpu}", daemon=True,
                             args=(cpu, duration_s, cpu == inject_cpu, start, child_end, cpu == slow_cpu))
            p.start()
            child_end.close()
            procs.append(p)
            conns[parent_end] = cpu
        pending = dict(conns)
        ready: set[int] = set()
        deadline = time.monotonic() + _READY_TIMEOUT_S
        t_start = None
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            for c in wait(list(pending), timeout=min(1.0, deadline - now)):
                cpu = pending[c]
                try:
                    msg = c.recv()
                except EOFError:
                    reports[cpu] = {"cpu": cpu, "error": "worker exited without a report"}
                    del pending[c]
                    continue
                if msg.get("ready"):
                    ready.add(cpu)
                else:
                    reports[cpu] = msg
                    del pending[c]
            if t_start is None and len(ready) + len(reports) == len(cpus):
                start.set()
                t_start = time.monotonic()
                deadline = t_start + duration_s + _GRACE_S
            if t_start is not None and progress is not None:
                progress(min(0.99, (time.monotonic() - t_start) / duration_s), f"{len(cpus)} CPUs under load")
        for cpu in pending.values():
            reports[cpu] = {"cpu": cpu, "error": "no report (worker hung)" if t_start is not None
                            else "worker did not become ready"}
    finally:
        _reap(procs)
        for c in conns:
            c.close()
    return reports


def run(ctx: RunContext, params: dict[str, Any]) -> CheckResult:
    result = CheckResult(NAME, PASS)
    cpus = sorted(os.sched_getaffinity(0))
    try:
        duration_s, min_ratio, inject, slow = validate_params(params, cpus)
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=str(e), action="fix the cpu check's parameters")

    reports = run_workers(cpus, duration_s, inject, lambda f, t: ctx.progress(NAME, f, t), slow)
    rates: dict[int, float] = {}
    wrong: dict[int, list[str]] = {}
    broken: dict[int, str] = {}
    for cpu in cpus:
        rep = reports.get(cpu, {"error": "no report"})
        if "error" in rep:
            broken[cpu] = rep["error"]
            continue
        if rep["wrong"]:
            wrong[cpu] = rep["wrong"]
        if rep["sha_seconds"] > 0:
            rates[cpu] = rep["chains"] * CHAIN_BYTES / rep["sha_seconds"]
    for cpu, rate in sorted(rates.items()):
        result.measure("sha256_rate", round(rate), "B/s", device=f"cpu{cpu}")
    ratio = slowest_core_ratio(rates) if rates else None
    if ratio is not None:
        result.measure("slowest_core_ratio", round(ratio, 4), "ratio", threshold=min_ratio, op=">=")
    result.measure("wrong_answer_cpus", len(wrong), "", threshold=0, op="<=")
    records = cpufreq.read_cpus(ctx.sysfs, cpus=cpus)
    freq = cpufreq.cpu_frequency(ctx.sysfs, ctx.procfs, records).hz
    if freq is not None:
        result.measure("cpu_frequency", round(freq), "Hz")
    governors = cpufreq.governors(records)
    gov = summarize_governors(governors)
    if gov is not None:
        result.measure("governor", gov, "")
    result.details = {
        "cpus": cpus, "duration_seconds": duration_s, "known_digest": KNOWN_DIGEST,
        "workers": {str(cpu): {k: v for k, v in reports.get(cpu, {}).items() if k != "cpu"} for cpu in cpus},
        "governors": {str(c): g for c, g in governors.items()},
    }

    if wrong:
        first = min(wrong)
        names = ", ".join(f"CPU {c}" for c in sorted(wrong))
        result.status = FAIL
        result.reason = f"wrong answer on {names}: {wrong[first][0]}"
        result.action = f"drain; a core computes wrong results: take {names} offline or replace the CPU"
        return result
    if broken:
        names = ", ".join(f"CPU {c} ({msg})" for c, msg in sorted(broken.items()))
        result.status = FAIL
        result.reason = f"worker failed on {names}"
        result.action = "drain and inspect the CPU (dmesg for MCE, hung-task messages)"
        return result
    result.status = status_from_measurements(result.measurements)
    if result.status == FAIL:
        slow = slow_cpus(rates, min_ratio)
        med = statistics.median(rates.values())
        result.reason = ("slow core(s): " + ", ".join(f"CPU {c} at {rates[c] / med:.0%} of the median" for c in slow)
                         + f" (< {min_ratio:.0%})")
        result.action = "drain; check the slow cores' frequency, thermals and BIOS power settings"
        return result
    powersave = sorted(c for c, g in governors.items() if g == "powersave")
    if powersave:
        result.status = WARN
        result.reason = f"cpufreq governor is powersave on {len(powersave)} of {len(cpus)} CPUs"
        result.action = "set the performance governor (cpupower frequency-set -g performance) on GPU nodes"
        return result
    result.reason = (f"{len(cpus)} CPUs correct for {duration_s:g} s; slowest at {ratio:.0%} of the median"
                     if ratio is not None else f"{len(cpus)} CPUs correct")
    return result

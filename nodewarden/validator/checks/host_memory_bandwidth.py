"""Host memory bandwidth, STREAM-style: Copy and Triad over every usable CPU.

A DIMM that trained at a lower speed, a missing or mis-seated DIMM (a channel short) or a NUMA
node running from remote memory shows up as a node whose host memory bandwidth fell well below
its siblings'; GPU input pipelines and pinned-memory copies slow down with it.

Method (after McCalpin's STREAM, https://www.cs.virginia.edu/stream/ref.html):

* three float64 arrays ``a``, ``b``, ``c`` of ``array_bytes`` each, by default
  ``max(4 × total L3, 256 MiB)`` (STREAM's rule: each array at least four times the sum of all
  last-level caches), capped so the three fit in half of ``MemAvailable``;
* every usable CPU (the process's affinity) works on a contiguous slice of each array, which it
  touches first so that on NUMA nodes its pages are local, as with STREAM's OpenMP static schedule;
* kernels, as STREAM writes them: Copy ``c[i] = a[i]``, Triad ``a[i] = b[i] + q·c[i]``, ``q = 3``;
* timing: one wall-clock time per kernel pass over all CPUs; ``repeats`` passes, the first
  discarded and the best (shortest) kept, as STREAM reports its "Best Rate";
* bytes counted as STREAM counts them: Copy moves 2 arrays (``2 × 8 × N`` bytes: one read, one
  write), Triad 3 arrays (``3 × 8 × N``: two reads, one write); write-allocate traffic is not
  counted, so the figures compare directly with STREAM's ``Copy`` and ``Triad`` lines;
* every element of the three arrays is compared, exactly, with the value the same operations give
  on scalars (all values are integers below 2**53, hence the cap on ``repeats``): a wrong value
  fails the check.

Two engines do the passes (``engine``; ``auto`` takes torch when it is installed, else numpy):

* ``torch``: a child interpreter with ``OMP_NUM_THREADS`` = usable CPUs and ``OMP_PROC_BIND=true``
  (threads pinned, as STREAM is usually run) runs ``c.copy_(a)`` and the fused
  ``torch.add(b, c, alpha=q, out=a)``: one read of ``b`` and ``c`` and one write of ``a`` per
  element, STREAM's own loop. On a shared 2-CPU EPYC VM, runs interleaved with a
  ``gcc -O3 -fopenmp`` build of STREAM's Copy/Triad loops (OMP_PROC_BIND=true) came out within
  that machine's noise of it (best Triad 33 vs 34 GB/s, Copy 31 vs 30 GB/s).
* ``numpy``: one forked worker process per CPU, pinned, over shared anonymous memory, released
  together by a spin barrier; a pass's time is the last worker's end minus the first's start.
  numpy has no fused Triad and ``b + q*c`` would stream a temporary through memory, so each worker
  walks its slice in cache-sized blocks: ``np.multiply(c_blk, q, out=a_blk); np.add(a_blk, b_blk,
  out=a_blk)`` — the same memory traffic, but in two passes over each block, which reached about
  60-65% of that STREAM build's Triad on the same VM. Copy is one ``np.copyto`` per slice (a ``memmove``, as
  gcc turns STREAM's copy loop into ``memcpy``).

Measured: ``copy_bandwidth`` and ``triad_bandwidth`` (B/s; ``triad_min_bytes_per_second`` > 0
holds Triad to it, 0 is informational), ``array_bytes``, ``workers`` and ``engine``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import mmap
import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from nodewarden.sysfs import cpu_cache
from nodewarden.validator.base import RunContext, has_module
from nodewarden.validator.result import ERROR, FAIL, PASS, SKIP, CheckResult, status_from_measurements

NAME = "host_memory_bandwidth"
NEEDS: tuple[str, ...] = ()
DEFAULTS: dict[str, Any] = {
    "array_bytes": None,               # bytes per array; None: max(4 × total L3, 256 MiB), capped by memory
    "repeats": 10,                     # STREAM's NTIMES; the first is discarded
    "engine": "auto",                  # auto (torch if installed, else numpy), torch, numpy
    "triad_min_bytes_per_second": 0,   # from the hardware profile; 0: informational
    "inject_corrupt_element": None,    # tests: corrupt a[i] after the last Triad, as a memory fault would
    "inject_slow_cpu": None,           # tests: the numpy worker on this CPU runs each kernel SLOW_FACTOR times
}
QUICK: dict[str, Any] = {"repeats": 5}

ENGINES = ("auto", "torch", "numpy")
MIN_ARRAY_BYTES = 256 * 2**20
MEMORY_FRACTION = 0.5          # the three arrays take at most this share of MemAvailable
MAX_REPEATS = 32               # a grows as 2·3^k − 1: beyond 32 passes it leaves the exact integers
BLOCK_ELEMENTS = 131072        # numpy Triad block, 1 MiB of float64: stays in L2/L3 between multiply and add
PAGE_ELEMENTS = 512            # 4 KiB of float64: numpy slices start on page boundaries
SCALAR = 3.0                   # STREAM's scalar
SLOW_FACTOR = 8                # inject_slow_cpu: that worker's slice moves 8 times per pass (a slow DIMM or node)
_COMMAND_TIMEOUT_S = 120.0     # a numpy worker silent this long is hung
_MIN_RATE_B_PER_S = 0.5e9      # the torch child is given time for its traffic at this rate, plus a start


def mem_available_bytes(procfs: Path) -> int | None:
    """``MemAvailable`` from ``meminfo`` (kB there), or None."""
    try:
        for line in (procfs / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_array_bytes(l3_bytes: int, available_bytes: int | None) -> int:
    """``max(4 × l3_bytes, 256 MiB)`` per array, capped so three arrays fit in
    ``MEMORY_FRACTION`` of ``available_bytes``; a multiple of 4 KiB."""
    size = max(4 * l3_bytes, MIN_ARRAY_BYTES)
    if available_bytes is not None:
        size = min(size, int(available_bytes * MEMORY_FRACTION / 3))
    return size // 4096 * 4096


def split(n_elements: int, n_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` slices of ``n_elements``, one per worker, starting on page
    boundaries; the last takes the remainder. Raises ValueError when a worker would get nothing."""
    pages = n_elements // PAGE_ELEMENTS
    if pages < n_workers:
        raise ValueError(f"{n_elements} elements are too few for {n_workers} workers (one 4 KiB page each)")
    bounds = [i * pages // n_workers * PAGE_ELEMENTS for i in range(n_workers)] + [n_elements]
    return list(zip(bounds[:-1], bounds[1:]))


def expected_values(repeats: int) -> tuple[float, float, float]:
    """Values of (a, b, c) after ``repeats`` passes of Copy then Triad from STREAM's start
    (a = 1, b = 2, c = 0): integers below 2**53 for ``repeats`` ≤ 32, so exact on any engine
    (fused multiply-add or not)."""
    a, b, c = 1.0, 2.0, 0.0
    for _ in range(repeats):
        c = a
        a = b + SCALAR * c
    return a, b, c


def stream_bytes(kernel: str, n_elements: int) -> int:
    """Bytes STREAM counts for one pass: Copy 2 arrays, Triad 3 arrays, 8 bytes per element."""
    return {"copy": 2, "triad": 3}[kernel] * 8 * n_elements


def best_rate(kernel: str, n_elements: int, seconds: list[float]) -> float:
    """STREAM's Best Rate (B/s): counted bytes over the shortest time, the first pass excluded."""
    timed = seconds[1:] if len(seconds) > 1 else seconds
    return stream_bytes(kernel, n_elements) / min(timed)


def validate_params(params: dict[str, Any]) -> tuple[int | None, int, str, float, int | None, int | None]:
    """(array_bytes or None, repeats, engine, triad_min_bytes_per_second, inject_corrupt_element,
    inject_slow_cpu). Raises ValueError naming the parameter. The ``inject_`` keys are test hooks
    (a profile, config file or ``--set`` cannot set them: :mod:`nodewarden.validator.profiles`)."""
    size = params.get("array_bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 4096):
        raise ValueError(f"array_bytes must be an integer ≥ 4096 (or unset), got {size!r}")
    repeats = params.get("repeats")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 2 <= repeats <= MAX_REPEATS:
        raise ValueError(f"repeats must be an integer in [2, {MAX_REPEATS}] (the first is discarded), got {repeats!r}")
    engine = params.get("engine", "auto")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    floor = params.get("triad_min_bytes_per_second", 0)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor < 0:
        raise ValueError(f"triad_min_bytes_per_second must be a number ≥ 0, got {floor!r}")
    inject = params.get("inject_corrupt_element")
    if inject is not None and (isinstance(inject, bool) or not isinstance(inject, int) or inject < 0):
        raise ValueError(f"inject_corrupt_element must be an element index ≥ 0, got {inject!r}")
    slow = params.get("inject_slow_cpu")
    if slow is not None and (isinstance(slow, bool) or not isinstance(slow, int) or slow < 0):
        raise ValueError(f"inject_slow_cpu must be a CPU number ≥ 0, got {slow!r}")
    return size, repeats, engine, float(floor), inject, slow


# --- torch engine: a child interpreter with pinned OpenMP threads -------------------------------

def _torch_child() -> None:
    """Entry point of the torch engine's child: JSON job on argv[1], JSON report on stdout
    (``copy_seconds``, ``triad_seconds``, ``wrong``: per array, count and first bad index)."""
    job = json.loads(sys.argv[1])
    import torch

    n, repeats = job["n_elements"], job["repeats"]
    torch.set_num_threads(job["threads"])
    a, b, c = (torch.empty(n, dtype=torch.float64) for _ in range(3))
    a.fill_(1.0)   # parallel fills: each thread first-touches the chunk it later copies and adds
    b.fill_(2.0)
    c.fill_(0.0)
    times: dict[str, list[float]] = {"copy": [], "triad": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        c.copy_(a)
        t1 = time.perf_counter()
        torch.add(b, c, alpha=SCALAR, out=a)
        t2 = time.perf_counter()
        times["copy"].append(t1 - t0)
        times["triad"].append(t2 - t1)
    if job["inject"] is not None:
        a[job["inject"]] += 1.0
    wrong = []
    for name, arr, exp in zip("abc", (a, b, c), job["expected"]):
        bad = torch.nonzero(arr != exp).flatten()
        if bad.numel():
            i = int(bad[0])
            wrong.append({"array": name, "count": int(bad.numel()), "first_index": i, "got": float(arr[i]),
                          "expected": exp})
    print(json.dumps({"copy_seconds": times["copy"], "triad_seconds": times["triad"], "wrong": wrong}))


def run_torch(cpus: list[int], n_elements: int, repeats: int, inject: int | None) -> dict[str, Any]:
    """Run the passes in a torch child pinned to ``cpus``, one OpenMP thread each. Raises
    RuntimeError when the child fails or outlives its time (it is killed)."""
    import nodewarden

    job = {"n_elements": n_elements, "repeats": repeats, "threads": len(cpus), "inject": inject,
           "expected": list(expected_values(repeats))}
    root = str(Path(nodewarden.__file__).resolve().parents[1])
    env = dict(os.environ, OMP_NUM_THREADS=str(len(cpus)), OMP_PROC_BIND="true",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.pop("OMP_PLACES", None)
    timeout = 60 + repeats * 5 * 8 * n_elements / _MIN_RATE_B_PER_S
    code = f"from {__name__} import _torch_child; _torch_child()"
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(job)], env=env, capture_output=True,
                              text=True, timeout=timeout)   # inherits this process's affinity: cpus
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"torch engine did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"torch engine exited with code {proc.returncode}: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- numpy engine: one pinned process per CPU over shared memory -------------------------------

def _worker(index: int, n_workers: int, cpu: int, lo: int, hi: int, n: int, buf: mmap.mmap, ctrl: mmap.mmap,
            conn: Connection, slow: bool = False) -> None:
    """Pin to ``cpu``, first-touch ``[lo, hi)`` of a, b, c in ``buf``, then serve commands:
    ``copy``/``triad`` (spin barrier on ``ctrl``, run, reply ``(t_start, t_end)``), ``check``
    (reply mismatches in the slice), ``exit``. ``slow``: the test hook, each kernel run
    :data:`SLOW_FACTOR` times (both are idempotent: the values stay exact)."""
    import numpy as np

    try:
        os.sched_setaffinity(0, {cpu})
        a, b, c = (np.frombuffer(buf, np.float64, count=n, offset=k * 8 * n) for k in range(3))
        arrive = np.frombuffer(ctrl, np.int64, count=n_workers)
        a[lo:hi] = 1.0
        b[lo:hi] = 2.0
        c[lo:hi] = 0.0
        blocks = [(a[s:min(s + BLOCK_ELEMENTS, hi)], b[s:min(s + BLOCK_ELEMENTS, hi)], c[s:min(s + BLOCK_ELEMENTS, hi)])
                  for s in range(lo, hi, BLOCK_ELEMENTS)]
        conn.send(("ready", None))
        generation = 0
        while True:
            cmd, arg = conn.recv()
            if cmd == "exit":
                return
            if cmd == "check":
                bad = []
                for name, arr, exp in zip("abc", (a, b, c), arg):
                    wrong = np.flatnonzero(arr[lo:hi] != exp)
                    if wrong.size:
                        i = int(wrong[0]) + lo
                        bad.append({"array": name, "count": int(wrong.size), "first_index": i,
                                    "got": float(arr[i]), "expected": exp, "cpu": cpu})
                conn.send(("checked", bad))
                continue
            generation += 1
            arrive[index] = generation
            while arrive.min() < generation:   # everyone starts together: STREAM's parallel region
                os.sched_yield()
            t0 = time.perf_counter()
            for _ in range(SLOW_FACTOR if slow else 1):
                if cmd == "copy":
                    np.copyto(c[lo:hi], a[lo:hi])
                elif cmd == "triad":
                    for ab, bb, cb in blocks:
                        np.multiply(cb, SCALAR, out=ab)
                        np.add(ab, bb, out=ab)
            t1 = time.perf_counter()
            conn.send(("done", (t0, t1)))
    except Exception as e:
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
    finally:
        conn.close()


class _Pool:
    """The pinned numpy workers over shared anonymous memory; ``close()`` reaps them all."""

    def __init__(self, cpus: list[int], n_elements: int, slow_cpu: int | None = None) -> None:
        self.cpus = cpus
        self.n = n_elements
        self.slices = split(n_elements, len(cpus))
        # Anonymous MAP_SHARED memory is inherited by forked workers and, unlike POSIX shared
        # memory, is not limited by the size of /dev/shm (64 MiB in many containers).
        self.buf = mmap.mmap(-1, 3 * 8 * n_elements)
        self.ctrl = mmap.mmap(-1, max(4096, 8 * len(cpus)))
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        fork = mp.get_context("fork")
        for i, (cpu, (lo, hi)) in enumerate(zip(cpus, self.slices)):
            parent_end, child_end = fork.Pipe()
            p = fork.Process(target=_worker, args=(i, len(cpus), cpu, lo, hi, n_elements, self.buf, self.ctrl,
                                                   child_end, cpu == slow_cpu),
                             name=f"nodewarden-stream{cpu}", daemon=True)
            p.start()
            child_end.close()
            self.procs.append(p)
            self.conns.append(parent_end)

    def gather(self, expect: str) -> list[Any]:
        """Every worker's reply to the last command, in worker order. Raises RuntimeError naming
        the CPU whose worker failed, died or stayed silent."""
        replies: dict[int, Any] = {}
        index = {c: i for i, c in enumerate(self.conns)}
        deadline = time.monotonic() + _COMMAND_TIMEOUT_S
        while len(replies) < len(self.conns):
            left = deadline - time.monotonic()
            if left <= 0:
                silent = [self.cpus[i] for i in range(len(self.conns)) if i not in replies]
                raise RuntimeError(f"worker(s) on CPU {silent} silent for {_COMMAND_TIMEOUT_S:g} s")
            for c in wait([c for c in self.conns if index[c] not in replies], timeout=left):
                i = index[c]
                try:
                    kind, value = c.recv()
                except EOFError:
                    raise RuntimeError(f"worker on CPU {self.cpus[i]} exited "
                                       f"(exit code {self.procs[i].exitcode})") from None
                if kind != expect:
                    raise RuntimeError(f"worker on CPU {self.cpus[i]}: {value}")
                replies[i] = value
        return [replies[i] for i in range(len(self.conns))]

    def command(self, cmd: str, arg: Any = None, expect: str = "done") -> list[Any]:
        for c in self.conns:
            c.send((cmd, arg))
        return self.gather(expect)

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(("exit", None))
            except OSError:
                pass
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(2)
        for c in self.conns:
            c.close()
        self.buf.close()
        self.ctrl.close()


def worker_rates(kernel: str, slices: list[tuple[int, int]], spans: list[list[float]]) -> list[float]:
    """Each worker's own Best Rate (B/s) for ``kernel``: its slice's counted bytes over its
    shortest pass, the first excluded (``spans[w]``: worker w's seconds per pass)."""
    return [best_rate(kernel, hi - lo, s) for (lo, hi), s in zip(slices, spans)]


def run_numpy(cpus: list[int], n_elements: int, repeats: int, inject: int | None,
              progress: Any = None, slow_cpu: int | None = None) -> dict[str, Any]:
    """Run the passes with one pinned numpy worker per CPU; the same report as :func:`run_torch`
    plus ``worker_triad_bandwidth`` (CPU -> that worker's Triad B/s, :func:`worker_rates`).
    ``slow_cpu``: the test hook of :func:`_worker`. Raises RuntimeError naming a worker that
    failed; every worker is reaped."""
    import numpy as np

    times: dict[str, list[float]] = {"copy": [], "triad": []}
    own: list[list[float]] = [[] for _ in cpus]   # each worker's Triad seconds per pass
    pool = _Pool(cpus, n_elements, slow_cpu)
    try:
        pool.gather("ready")
        for r in range(repeats):
            for kernel in ("copy", "triad"):
                spans = pool.command(kernel)
                times[kernel].append(max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans))
                if kernel == "triad":
                    for w, (t0, t1) in enumerate(spans):
                        own[w].append(t1 - t0)
            if progress is not None:
                progress((r + 1) / (repeats + 1), f"pass {r + 1}/{repeats}")
        if inject is not None:
            a = np.frombuffer(pool.buf, np.float64, count=n_elements)
            a[inject] += 1.0
            del a
        bad = pool.command("check", expected_values(repeats), expect="checked")
    finally:
        pool.close()
    rates = worker_rates("triad", pool.slices, own)
    return {"copy_seconds": times["copy"], "triad_seconds": times["triad"], "wrong": [w for ws in bad for w in ws],
            "worker_triad_bandwidth": {cpu: rate for cpu, rate in zip(cpus, rates)}}


# --- the check ----------------------------------------------------------------------------------

def _slowest_worker(rates: dict[int, float]) -> str:
    """``; slowest worker: CPU 3 at 0.9 GB/s, 12% of the median worker`` (numpy engine, two or
    more workers), else ""."""
    if len(rates) < 2:
        return ""
    import statistics
    cpu = min(rates, key=lambda c: rates[c])
    med = statistics.median(rates.values())
    return f"; slowest worker: CPU {cpu} at {rates[cpu] / 1e9:.1f} GB/s, {rates[cpu] / med:.0%} of the median worker"


def choose_engine(engine: str) -> str | None:
    """The engine to use (``auto``: torch, else numpy), or None when it is not installed."""
    if engine == "auto":
        return "torch" if has_module("torch") else "numpy" if has_module("numpy") else None
    return engine if has_module(engine) else None


def run(ctx: RunContext, params: dict[str, Any]) -> CheckResult:
    try:
        size, repeats, engine_param, floor, inject, slow_cpu = validate_params(params)
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=str(e), action="fix the host_memory_bandwidth check's parameters")
    cpus = sorted(os.sched_getaffinity(0))
    available = mem_available_bytes(ctx.procfs)
    l3 = cpu_cache.total_l3_bytes(ctx.sysfs)
    if size is None:
        size = default_array_bytes(l3, available)
    elif available is not None and 3 * size > MEMORY_FRACTION * available:
        return CheckResult(NAME, ERROR, reason=f"array_bytes {size} × 3 exceeds {MEMORY_FRACTION:.0%} of "
                           f"MemAvailable ({available} bytes)", action="use a smaller array_bytes")
    n = size // 8
    if inject is not None and inject >= n:
        return CheckResult(NAME, ERROR, reason=f"inject_corrupt_element {inject} is beyond the {n} elements",
                           action="fix the host_memory_bandwidth check's parameters")
    try:
        split(n, len(cpus))
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=f"array_bytes {size}: {e}", action="use a larger array_bytes")

    if slow_cpu is not None and (slow_cpu not in cpus or engine_param != "numpy"):
        return CheckResult(NAME, ERROR, reason=f"inject_slow_cpu {slow_cpu}: needs engine numpy (one worker per "
                           f"CPU) and one of the usable CPUs {cpus}",
                           action="fix the host_memory_bandwidth check's parameters")
    engine = choose_engine(engine_param)
    if engine is None:
        return CheckResult(NAME, SKIP, reason=f"engine {engine_param}: neither torch nor numpy is installed"
                           if engine_param == "auto" else f"engine {engine_param}: {engine_param} is not installed")
    ctx.progress(NAME, 0.0, f"{engine}: {len(cpus)} CPUs over 3 × {size / 2**20:.0f} MiB")
    try:
        if engine == "torch":
            out = run_torch(cpus, n, repeats, inject)
        else:
            out = run_numpy(cpus, n, repeats, inject, lambda f, t: ctx.progress(NAME, f, t), slow_cpu)
    except RuntimeError as e:
        return CheckResult(NAME, ERROR, reason=str(e), action="inspect the node (dmesg: OOM kills, MCE)")

    result = CheckResult(NAME, PASS)
    copy_bw = best_rate("copy", n, out["copy_seconds"])
    triad_bw = best_rate("triad", n, out["triad_seconds"])
    result.measure("copy_bandwidth", round(copy_bw), "B/s")
    result.measure("triad_bandwidth", round(triad_bw), "B/s", threshold=floor if floor > 0 else None)
    result.measure("array_bytes", size, "bytes")
    result.measure("workers", len(cpus), "")
    result.measure("engine", engine, "")
    result.details = {
        "cpus": cpus, "repeats": repeats, "l3_total_bytes": l3, "mem_available_bytes": available,
        "copy_seconds": [round(t, 6) for t in out["copy_seconds"]],
        "triad_seconds": [round(t, 6) for t in out["triad_seconds"]],
        "bytes_counted": {"copy": stream_bytes("copy", n), "triad": stream_bytes("triad", n)},
    }
    per_worker = out.get("worker_triad_bandwidth") or {}
    if per_worker:
        result.details["worker_triad_bandwidth"] = {str(c): round(r) for c, r in per_worker.items()}
    wrong = out["wrong"]
    if wrong:
        w = wrong[0]
        where = f" (the slice of the worker on CPU {w['cpu']})" if "cpu" in w else ""
        result.status = FAIL
        result.reason = (f"wrong values in host memory: {sum(x['count'] for x in wrong)} element(s); first "
                         f"{w['array']}[{w['first_index']}] = {w['got']!r}, expected {w['expected']!r}{where}")
        result.action = "drain; check EDAC/MCE counters and run a memory test (memtester, vendor diagnostics)"
        result.details["wrong"] = wrong
        return result
    result.status = status_from_measurements(result.measurements)
    gb = 1e9
    if result.status == FAIL:
        result.reason = f"Triad {triad_bw / gb:.1f} GB/s below {floor / gb:.1f} GB/s" + _slowest_worker(per_worker)
        result.action = "drain; check DIMM population and speed (dmidecode -t memory), NUMA and BIOS memory settings"
    else:
        result.reason = f"Copy {copy_bw / gb:.1f} GB/s, Triad {triad_bw / gb:.1f} GB/s over {len(cpus)} CPUs ({engine})"
    return result

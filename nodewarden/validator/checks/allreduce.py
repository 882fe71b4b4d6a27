"""Intra-node allreduce: every local GPU (NCCL), or CPU ranks (gloo) where there is none.

A GPU with a bad NVLink or PCIe path, a broken NVSwitch or a misconfigured P2P setting shows as
an allreduce that is slow, hangs or — worst — returns wrong sums. One child interpreter per rank
(started with ``subprocess``: no multiprocessing start method, no main-module guard) joins a
``torch.distributed`` group (``nccl`` with one rank per visible GPU; ``gloo`` with ``cpu_ranks``
processes when the run's device is the CPU, asked for with ``--device cpu``; without either the
check is ``skip`` or ``error``, never a CPU pass), rendezvousing on a TCP store this process serves on
a free port of 127.0.0.1. Every init and every collective has ``timeout_seconds``; a rank that
hangs past it or dies fails the check, and every rank process is reaped whatever happens.

Correctness, exactly: rank ``r`` contributes ``x_r[i] = ((i mod 251) + 1)·(r + 1)`` in float32,
so the sum is ``((i mod 251) + 1)·n(n+1)/2``: integers below 2**24 for n ≤ 256 ranks, exact in
any summation order. Each rank compares every element of its result, once before and once after
the timed loop; on a mismatch the ranks run one allreduce per rank ``j`` in which only ``j``
contributes, which names the rank whose contribution arrives wrong.

Bandwidth, as nccl-tests defines it (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = size_bytes / time`` per allreduce (the slowest rank's mean over ``iterations``, after
``warmup_iterations``), ``busbw = algbw · 2(n−1)/n``. The timed loop reduces a zero buffer in
place, so its values stay fixed. Reported: ``busbw`` and ``algbw`` at the largest size (B/s; held
to ``busbw_min_bytes_per_second`` when > 0), ``size_bytes``, ``ranks``, ``backend``; every size in
``details``.

Fault injection, for tests on the real path: ``inject_wrong_rank`` makes that rank contribute one
wrong element; ``inject_hang_rank`` makes that rank stop before its first allreduce;
``inject_slow_rank`` makes that rank wait :data:`SLOW_RANK_DELAY_S` before each timed allreduce
(a slow link holds every rank back: the collective ends with its last rank);
``inject_wrong_result_rank`` flips one element of the sum that rank receives from its first
allreduce of each size (every contribution is right: a fault of the reduction path). A profile, config
file or ``--set`` cannot set them (:mod:`nodewarden.validator.profiles`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from nodewarden.validator.base import RunContext
from nodewarden.validator.result import ERROR, FAIL, PASS, SKIP, CheckResult, status_from_measurements

NAME = "allreduce"
NEEDS: tuple[str, ...] = ("torch",)
MiB = 2**20
DEFAULTS: dict[str, Any] = {
    "sizes_bytes": None,             # message sizes; None: 1, 16, 256 MiB on GPU; 1, 16 MiB on CPU
    "cpu_ranks": 4,                  # gloo ranks when there is no GPU
    "warmup_iterations": 5,
    "iterations": 20,
    "timeout_seconds": 60.0,         # per init and per collective
    "busbw_min_bytes_per_second": 0,  # from the hardware profile; 0: informational
    "inject_wrong_rank": None,       # tests: this rank contributes one wrong element
    "inject_hang_rank": None,        # tests: this rank stops before its first allreduce
    "inject_slow_rank": None,        # tests: this rank waits SLOW_RANK_DELAY_S before each timed allreduce
    "inject_wrong_result_rank": None,  # tests: the sum this rank receives is wrong in one element
}
QUICK: dict[str, Any] = {"cpu_ranks": 2, "warmup_iterations": 2, "iterations": 10}

GPU_SIZES_BYTES = (1 * MiB, 16 * MiB, 256 * MiB)
CPU_SIZES_BYTES = (1 * MiB, 16 * MiB)
PERIOD = 251          # x_r[i] depends on i mod PERIOD: a shifted or misplaced chunk shows
MAX_RANKS = 256       # PERIOD · n(n+1)/2 < 2**24: sums exact in float32
_START_S = 60.0       # beyond timeout_seconds: spawning the ranks and importing torch
_GRACE_S = 10.0       # once a rank has failed, the others' time to report (at most timeout_seconds)
SLOW_RANK_DELAY_S = 0.05  # inject_slow_rank: per timed allreduce


def bus_bandwidth(algbw_bytes_per_second: float, ranks: int) -> float:
    """nccl-tests' allreduce bus bandwidth: ``algbw · 2(n−1)/n`` (B/s)."""
    return algbw_bytes_per_second * 2 * (ranks - 1) / ranks


def sum_factor(ranks: int) -> int:
    """Σ (r + 1) over ranks: the expected sum is ``((i mod PERIOD) + 1) · sum_factor(n)``."""
    return ranks * (ranks + 1) // 2


def default_sizes(backend: str) -> tuple[int, ...]:
    return GPU_SIZES_BYTES if backend == "nccl" else CPU_SIZES_BYTES


def validate_params(params: dict[str, Any]) -> dict[str, Any]:
    """Checked copies of the parameters. Raises ValueError naming the parameter."""
    def int_in_range(key: str, low: int, high: int) -> int:
        v = params.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"{key} must be an integer in [{low}, {high}], got {v!r}")
        return v

    sizes = params.get("sizes_bytes")
    if sizes is not None:
        if isinstance(sizes, int) and not isinstance(sizes, bool):
            sizes = [sizes]
        if (not isinstance(sizes, (list, tuple)) or not sizes
                or any(isinstance(s, bool) or not isinstance(s, int) or s < 4 or s % 4 for s in sizes)):
            raise ValueError(f"sizes_bytes must be a list of positive multiples of 4 (float32), got {sizes!r}")
        sizes = sorted(set(sizes))
    timeout = params.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout_seconds must be a number > 0, got {timeout!r}")
    floor = params.get("busbw_min_bytes_per_second", 0)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor < 0:
        raise ValueError(f"busbw_min_bytes_per_second must be a number ≥ 0, got {floor!r}")
    injects = {}
    for key in ("inject_wrong_rank", "inject_hang_rank", "inject_slow_rank", "inject_wrong_result_rank"):
        v = params.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{key} must be a rank ≥ 0, got {v!r}")
        injects[key] = v
    return {"sizes_bytes": sizes, "cpu_ranks": int_in_range("cpu_ranks", 2, MAX_RANKS),
            "warmup_iterations": int_in_range("warmup_iterations", 0, 10_000),
            "iterations": int_in_range("iterations", 1, 100_000), "timeout_seconds": float(timeout),
            "busbw_min_bytes_per_second": float(floor), **injects}


def contribution(n_elements: int, rank: int, device: Any) -> Any:
    """Rank ``rank``'s known float32 input: ``((i mod PERIOD) + 1)·(rank + 1)``."""
    import torch
    return ((torch.arange(n_elements, device=device) % PERIOD + 1) * (rank + 1)).to(torch.float32)


def mismatches(result: Any, expected: Any) -> dict[str, Any] | None:
    """None when ``result`` equals ``expected`` everywhere, else the count and the first bad element."""
    import torch
    bad = torch.nonzero(result != expected).flatten()
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    return {"count": int(bad.numel()), "first_index": i, "got": float(result[i]), "expected": float(expected[i])}


REPORT_KEY = "nodewarden/report/{rank}"   # each rank's report, JSON, in the rendezvous store
PROGRESS_KEY = "nodewarden/progress"      # a counter the ranks bump after each size


def _rank_main(job: dict[str, Any]) -> dict[str, Any]:
    """One rank: join the group, then for each size verify, time, verify again. Returns its report
    (with ``error`` naming the phase when something raised); the caller stores it."""
    rank, world, backend = job["rank"], job["world"], job["backend"]
    report: dict[str, Any] = {"rank": rank, "sizes": []}
    phase = "start"
    try:
        import torch
        import torch.distributed as dist

        if backend == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            torch.set_num_threads(1)   # ranks share the CPUs: no intra-op thread pools on top
        sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
        phase = "init"
        dist.init_process_group(backend, store=job["store"], rank=rank, world_size=world,
                                timeout=dt.timedelta(seconds=job["timeout_seconds"]),
                                device_id=device if backend == "nccl" else None)
        if rank == job["hang_rank"]:
            time.sleep(10 * job["timeout_seconds"] + 3600)   # the fault: a rank that never joins in
        factor = sum_factor(world)
        for size in job["sizes_bytes"]:
            phase = f"allreduce of {size} bytes"
            n = size // 4
            x = contribution(n, rank, device)
            if rank == job["inject_rank"]:
                x[n // 2] += 1.0      # the fault: this rank's data is wrong before it is sent
            expected = contribution(n, 0, device) * factor
            entry: dict[str, Any] = {"size_bytes": size, "wrong": []}
            y = x.clone()
            dist.all_reduce(y)
            if rank == job.get("wrong_result_rank"):
                y[n // 3] += 1.0      # the fault: the sum this rank received is wrong
            bad = mismatches(y, expected)
            if bad:
                entry["wrong"].append(dict(bad, when="before the timed loop"))
            work = torch.zeros(n, dtype=torch.float32, device=device)
            for _ in range(job["warmup_iterations"]):
                dist.all_reduce(work)
            sync()
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            for _ in range(job["iterations"]):
                if rank == job.get("slow_rank"):
                    time.sleep(SLOW_RANK_DELAY_S)   # the fault: this rank's data comes late
                dist.all_reduce(work)
            sync()
            entry["seconds_per_op"] = (time.perf_counter() - t0) / job["iterations"]
            y = x.clone()
            dist.all_reduce(y)
            bad = mismatches(y, expected)
            if bad:
                entry["wrong"].append(dict(bad, when="after the timed loop"))
            # Agree on whether anyone saw a wrong sum; if so, let each rank contribute alone.
            flag = torch.tensor([1.0 if entry["wrong"] else 0.0], device=device)
            dist.all_reduce(flag)
            if float(flag) > 0:
                entry["bad_contributors"] = []
                for j in range(world):
                    z = x.clone() if rank == j else torch.zeros(n, dtype=torch.float32, device=device)
                    dist.all_reduce(z)
                    if mismatches(z, contribution(n, j, device)):
                        entry["bad_contributors"].append(j)
            report["sizes"].append(entry)
            job["store"].add(PROGRESS_KEY, 1)
        phase = "teardown"
        dist.destroy_process_group()
    except Exception as e:  # reported to the parent, which names the rank
        report["error"] = f"{phase}: {type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc(limit=6)
    return report


def _rank_cli() -> None:
    """Entry point of a rank's interpreter: job as JSON on argv[1]; the report goes into the store."""
    import torch.distributed as dist

    job = json.loads(sys.argv[1])
    job["store"] = dist.TCPStore("127.0.0.1", job["port"], job["world"], is_master=False,
                                 timeout=dt.timedelta(seconds=job["timeout_seconds"]))
    report = _rank_main(job)
    job["store"].set(REPORT_KEY.format(rank=job["rank"]), json.dumps(report))
    if "error" in report:
        # A group left mid-collective aborts in its C++ destructors (SIGABRT, a core dump): the
        # report is stored, so leave without running them.
        sys.stderr.flush()
        os._exit(1)


def _reap(procs: list[subprocess.Popen]) -> None:
    """Terminate, then kill, then wait for every rank process still running."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _tail(f: Any, limit: int = 300) -> str:
    f.seek(0)
    text = f.read().decode(errors="replace").strip()
    return text.splitlines()[-1][-limit:] if text else "no output"


def run_ranks(backend: str, world: int, sizes: list[int], warmup: int, iters: int, timeout_s: float,
              inject_rank: int | None = None, hang_rank: int | None = None,
              progress: Any = None, slow_rank: int | None = None,
              wrong_result_rank: int | None = None) -> dict[int, dict[str, Any]]:
    """Start ``world`` rank interpreters and collect their reports by rank. A rank that dies, or a
    group from which nothing is heard for ``timeout_s`` (plus a start-up allowance), is reported
    with an ``error``; once one rank has failed the others get a short grace to report. Every rank
    process is reaped before this returns or raises."""
    import nodewarden
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, timeout=dt.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    root = str(Path(nodewarden.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")   # intra-node: loopback, whatever the hostname resolves to
    code = f"from {__name__} import _rank_cli; _rank_cli()"
    procs: list[subprocess.Popen] = []
    logs: list[Any] = []
    reports: dict[int, dict[str, Any]] = {}
    try:
        for rank in range(world):
            job = {"rank": rank, "world": world, "backend": backend, "port": store.port, "sizes_bytes": sizes,
                   "warmup_iterations": warmup, "iterations": iters, "timeout_seconds": timeout_s,
                   "inject_rank": inject_rank, "hang_rank": hang_rank, "slow_rank": slow_rank,
                   "wrong_result_rank": wrong_result_rank}
            logs.append(tempfile.TemporaryFile())
            procs.append(subprocess.Popen([sys.executable, "-c", code, json.dumps(job)], env=env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logs[-1]))
        silence_s = timeout_s + _START_S
        grace_s = min(timeout_s, _GRACE_S)
        last_heard = time.monotonic()
        give_up_at: float | None = None        # set when a rank has failed
        seen_progress = 0
        while len(reports) < world:
            now = time.monotonic()
            if now - last_heard > silence_s or (give_up_at is not None and now > give_up_at):
                break
            time.sleep(0.1)
            for rank in range(world):
                if rank in reports:
                    continue
                key = REPORT_KEY.format(rank=rank)
                exited = procs[rank].poll()
                if store.check([key]):
                    reports[rank] = json.loads(store.get(key))
                elif exited is not None:
                    reports[rank] = {"rank": rank, "error": f"rank process exited with code {exited}: "
                                                            f"{_tail(logs[rank])}"}
                else:
                    continue
                last_heard = time.monotonic()
                if "error" in reports[rank] and give_up_at is None:
                    give_up_at = last_heard + grace_s
            done = store.add(PROGRESS_KEY, 0)
            if done != seen_progress:
                seen_progress, last_heard = done, time.monotonic()
                if progress is not None:
                    progress(done / (world * len(sizes) + 1),
                             f"{backend} × {world}: {done // world}/{len(sizes)} sizes")
        for rank in range(world):
            if rank not in reports:
                reports[rank] = {"rank": rank, "error": "hung: no report, killed"}
    finally:
        _reap(procs)
        for f in logs:
            f.close()
        del store
    return reports


def run(ctx: RunContext, params: dict[str, Any]) -> CheckResult:
    try:
        p = validate_params(params)
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=str(e), action="fix the allreduce check's parameters")
    compute = ctx.compute()
    if compute.device is None:  # no device to test: never a pass
        return CheckResult(NAME, compute.status or ERROR, reason=compute.reason, action=compute.action)
    if compute.device == "cuda":
        import torch
        backend, world = "nccl", torch.cuda.device_count()
        if world < 2:
            return CheckResult(NAME, SKIP, reason=f"{world} GPU visible: an allreduce needs at least two",
                               device="cuda")
    else:
        backend, world = "gloo", p["cpu_ranks"]
    for key in ("inject_wrong_rank", "inject_hang_rank", "inject_slow_rank", "inject_wrong_result_rank"):
        if p[key] is not None and p[key] >= world:
            return CheckResult(NAME, ERROR, reason=f"{key} {p[key]} is not a rank (0..{world - 1})",
                               action="fix the allreduce check's parameters")
    sizes = p["sizes_bytes"] or list(default_sizes(backend))
    ctx.progress(NAME, 0.0, f"{backend}: starting {world} ranks")
    try:
        reports = run_ranks(backend, world, sizes, p["warmup_iterations"], p["iterations"], p["timeout_seconds"],
                            p["inject_wrong_rank"], p["inject_hang_rank"], lambda f, t: ctx.progress(NAME, f, t),
                            p["inject_slow_rank"], p["inject_wrong_result_rank"])
    except (OSError, RuntimeError) as e:  # the store or the spawn itself failed: nothing was measured
        return CheckResult(NAME, ERROR, reason=f"could not start the ranks: {type(e).__name__}: {e}",
                           action="check that 127.0.0.1 is usable and processes can be spawned")
    return assess(reports, backend, world, sizes, p["busbw_min_bytes_per_second"])


def assess(reports: dict[int, dict[str, Any]], backend: str, world: int, sizes: list[int],
           floor: float) -> CheckResult:
    """The check's result from the ranks' reports: pure, so every verdict can be tested."""
    result = CheckResult(NAME, PASS)
    failed = {r: rep["error"] for r, rep in sorted(reports.items()) if "error" in rep}
    per_size = []
    wrong_ranks: set[int] = set()
    culprits: set[int] = set()
    first_wrong = None
    for i, size in enumerate(sizes):
        entries = {r: rep["sizes"][i] for r, rep in reports.items() if len(rep.get("sizes", [])) > i}
        if len(entries) < world:
            break
        for r, e in sorted(entries.items()):
            if e["wrong"]:
                wrong_ranks.add(r)
                first_wrong = first_wrong or (r, size, e["wrong"][0])
            culprits.update(e.get("bad_contributors", []))
        seconds = max(e["seconds_per_op"] for e in entries.values())
        algbw = size / seconds
        per_size.append({"size_bytes": size, "seconds_per_op": seconds, "algbw": algbw,
                         "busbw": bus_bandwidth(algbw, world)})
    if per_size:
        last = per_size[-1]
        result.measure("busbw", round(last["busbw"]), "B/s", threshold=floor if floor > 0 else None)
        result.measure("algbw", round(last["algbw"]), "B/s")
        result.measure("size_bytes", last["size_bytes"], "bytes")
    result.measure("ranks", world, "")
    result.measure("backend", backend, "")
    result.measure("wrong_result_ranks", len(wrong_ranks), "", threshold=0, op="<=")
    result.details = {"sizes": per_size, "failed_ranks": {str(r): m for r, m in failed.items()},
                      "wrong_result_ranks": sorted(wrong_ranks), "bad_contributors": sorted(culprits)}

    if wrong_ranks:
        r, size, w = first_wrong
        blame = (f"; rank {', '.join(map(str, sorted(culprits)))} contributes wrong data" if culprits
                 else "; no single rank's contribution is wrong alone: suspect the reduction path")
        result.status = FAIL
        result.reason = (f"allreduce result wrong on rank(s) {', '.join(map(str, sorted(wrong_ranks)))}"
                         f"{blame} ({w['count']} of {size // 4} elements at {size} bytes; first [{w['first_index']}]"
                         f" = {w['got']:g}, expected {w['expected']:g})")
        result.action = "drain; run the GPU memory and GEMM checks on the named rank's GPU, check NVLink/PCIe errors"
        return result
    if failed:
        result.status = FAIL
        result.reason = "allreduce failed on " + "; ".join(f"rank {r}: {m}" for r, m in failed.items())
        result.action = "drain; check the named GPU (Xid in dmesg, nvidia-smi), NVLink/PCIe, NCCL_DEBUG=INFO"
        return result
    result.status = status_from_measurements(result.measurements)
    gb = 1e9
    if result.status == FAIL:
        result.reason = f"busbw {per_size[-1]['busbw'] / gb:.1f} GB/s below {floor / gb:.1f} GB/s"
        result.action = "drain; check NVLink/NVSwitch state (nvidia-smi nvlink -s, topo -m) and PCIe link widths"
    else:
        result.reason = (f"{backend} × {world}: sums exact; busbw {per_size[-1]['busbw'] / gb:.2f} GB/s at "
                         f"{per_size[-1]['size_bytes']} bytes")
    return result

#!/usr/bin/env python3
"""Benchmark: the validator's bandwidth checks against reference tools, same machine, same run.

    python3 bench/validator_fidelity.py [--storage-path DIR] [--streams 4] [--file-mib 1024] [--block-kib 1024]
                                        [--array-mib 0] [--repeat 3] [--wait-seconds 0]
                                        [--out bench/results/validator_fidelity.json]

(a) memory: the ``host_memory_bandwidth`` check (``copy_bandwidth``, ``triad_bandwidth``) against
    STREAM. STREAM's C source (stream.c) ships in no Debian package (``apt-cache search`` finds
    none) nor in a Python package, and the benchmark installs its tools from packages only.
    **The reference is therefore not STREAM built with gcc -O3 -fopenmp but
    likwid-bench** (Debian package ``likwid``), whose ``stream_*`` kernel is STREAM's Triad
    (A = B·s + C: two loads and one store per element, counted as 24 bytes, as STREAM counts) and
    whose ``copy_mem_*`` kernel is STREAM's Copy (16 bytes per element). It runs with ``-W``
    (each thread first-touches its own chunk, as STREAM's OpenMP initialisation does), the
    check's array size and thread count, and the AVX kernels when the CPU has AVX, as gcc -O3
    vectorises STREAM's loops: Triad with ordinary stores (gcc emits no non-temporal stores for
    it), Copy with non-temporal stores (gcc turns STREAM's copy loop into a ``memcpy`` call and
    glibc's ``memcpy`` streams large copies with non-temporal stores). Target: Triad >= 0.85 x
    reference; Copy is reported.
(b) storage: the ``storage`` check (``write_bandwidth``, ``read_bandwidth``) against fio (Debian
    package ``fio``) on the same directory with the same sizes: ``numjobs`` = streams, ``size`` =
    file bytes per job, ``bs`` = block bytes, ``ioengine=psync`` (pwrite/pread from threads, as the
    check does), ``direct=1`` when the check used O_DIRECT; a sequential write (``end_fsync=1``,
    ``fallocate=none``) then a read of the same files (``invalidate=1``). Target: check >= 0.9 x fio.

Each side runs ``--repeat`` times, alternating (check, reference, check, ...), and the best run
of each side is compared (STREAM's "best rate" convention; ``*_ratio``), so a busy shared
machine's noise does not land on one side only; ``*_ratio_median`` compares the medians. The
set-up step installs fio and likwid with apt-get when they are missing (root on Debian). Prints
the JSON summary and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from nodewarden.validator import profiles, runner  # noqa: E402
from nodewarden.validator.base import RunContext, cpu_count  # noqa: E402

MEMORY_TARGET, STORAGE_TARGET = 0.85, 0.9
MiB = 1 << 20


def setup(tools: dict[str, str]) -> list[str]:
    """Install the Debian packages of missing tools (``{command: package}``); returns notes."""
    missing = {cmd: pkg for cmd, pkg in tools.items() if shutil.which(cmd) is None}
    if not missing:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return [f"{cmd} missing and cannot be installed here (needs root and apt-get)" for cmd in missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    pkgs = sorted(set(missing.values()))
    cmd = ["apt-get", "install", "-y", "-qq", *pkgs]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        subprocess.run(cmd, env=env, capture_output=True)
    return [f"installed {' '.join(pkgs)} with apt-get"]


def _median_ratio(ours: list[float], ref: list[float]) -> float:
    """Median over median: a second view, less moved by one lucky run than best over best."""
    return round(statistics.median(ours) / statistics.median(ref), 3)


# ---- (a) memory -------------------------------------------------------------------------------------

def run_memory_check(array_bytes: int | None) -> dict[str, Any]:
    prof = profiles.load("generic")
    if array_bytes:
        prof["host_memory_bandwidth"]["array_bytes"] = array_bytes
    ctx = RunContext(profile=prof, device="cpu")
    r = runner.run_check("host_memory_bandwidth", ctx)
    m = {x.name: x.value for x in r.measurements}
    return {"status": r.status, "reason": r.reason, "copy_bandwidth": m.get("copy_bandwidth"),
            "triad_bandwidth": m.get("triad_bandwidth"), "array_bytes": m.get("array_bytes"),
            "workers": m.get("workers"), "engine": m.get("engine"), "seconds": r.duration_s}


def cpu_has(flag: str) -> bool:
    try:
        return re.search(rf"^flags\s*:.*\b{flag}\b", Path("/proc/cpuinfo").read_text(), re.M) is not None
    except OSError:
        return False


def likwid(kernel: str, total_bytes: int, threads: int) -> dict[str, Any]:
    size_kb = max(1, total_bytes // 1000)  # likwid-bench sizes are decimal (kB = 1000 B)
    cmd = ["likwid-bench", "-t", kernel, "-W", f"N:{size_kb}kB:{threads}", "-s", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"^MByte/s:\s*([\d.]+)", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {(p.stderr or p.stdout)[-400:]}")
    return {"command": " ".join(cmd), "bandwidth": float(m.group(1)) * 1e6}


def memory(args: argparse.Namespace) -> dict[str, Any]:
    from nodewarden.validator import registry
    deadline = time.monotonic() + args.wait_seconds
    while "host_memory_bandwidth" not in registry.NAMES or not (
            Path(checks.__file__).parent / "host_memory_bandwidth.py").exists():
        if time.monotonic() > deadline:
            return {"error": "the host_memory_bandwidth check is not available"}
        time.sleep(5)
    if shutil.which("likwid-bench") is None:
        return {"error": "likwid-bench not installed (Debian package likwid)"}
    vec = "avx" if cpu_has("avx") else "sse"
    triad_k, copy_k = f"stream_{vec}", f"copy_mem_{vec}"
    array = args.array_mib * MiB if args.array_mib else None
    checks_, triads, copies = [], [], []
    for _ in range(args.repeat):
        c = run_memory_check(array)
        if not isinstance(c.get("triad_bandwidth"), (int, float)):
            return {"error": f"check did not measure: {c['status']} {c['reason']}", "check_runs": [c]}
        checks_.append(c)
        array, threads = int(c["array_bytes"]), int(c["workers"])
        triads.append(likwid(triad_k, 3 * array, threads))
        copies.append(likwid(copy_k, 2 * array, threads))
    best_check_triad = max(c["triad_bandwidth"] for c in checks_)
    best_check_copy = max(c["copy_bandwidth"] for c in checks_)
    ref_triad = max(t["bandwidth"] for t in triads)
    ref_copy = max(t["bandwidth"] for t in copies)
    triad_ratio = round(best_check_triad / ref_triad, 3)
    return {
        "reference": (f"likwid-bench {triad_k}/{copy_k} (Debian likwid; STREAM's Triad and Copy kernels, STREAM "
                      "byte counting). NOT STREAM's own stream.c, which no Debian or Python package "
                      "ships"),
        "array_bytes": array, "threads": threads, "engine": checks_[-1]["engine"],
        "check_triad_bandwidth": best_check_triad, "check_copy_bandwidth": best_check_copy,
        "reference_triad_bandwidth": ref_triad, "reference_copy_bandwidth": ref_copy,
        "triad_ratio": triad_ratio, "copy_ratio": round(best_check_copy / ref_copy, 3),
        "triad_ratio_median": _median_ratio([c["triad_bandwidth"] for c in checks_], [t["bandwidth"] for t in triads]),
        "copy_ratio_median": _median_ratio([c["copy_bandwidth"] for c in checks_], [t["bandwidth"] for t in copies]),
        "target": MEMORY_TARGET, "meets_target": triad_ratio >= MEMORY_TARGET,
        "check_runs": [{k: c[k] for k in ("triad_bandwidth", "copy_bandwidth", "seconds")} for c in checks_],
        "reference_runs": [{"triad": t["bandwidth"], "copy": c["bandwidth"]} for t, c in zip(triads, copies)],
        "reference_commands": [triads[-1]["command"], copies[-1]["command"]],
    }


# ---- (b) storage ------------------------------------------------------------------------------------

def fio(directory: Path, rw: str, streams: int, file_bytes: int, block: int, direct: bool) -> dict[str, Any]:
    cmd = ["fio", "--name=nodewarden-fidelity", f"--directory={directory}", f"--rw={rw}", f"--bs={block}",
           f"--size={file_bytes}", f"--numjobs={streams}", "--ioengine=psync", f"--direct={int(direct)}",
           "--fallocate=none", "--group_reporting", "--output-format=json"]
    cmd += ["--end_fsync=1"] if rw == "write" else ["--invalidate=1"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-400:]}")
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0][rw]
    return {"command": " ".join(cmd), "bandwidth": float(job["bw_bytes"]), "io_bytes": int(job["io_bytes"]),
            "wall_bandwidth": int(job["io_bytes"]) / wall}


def storage_bench(args: argparse.Namespace) -> dict[str, Any]:
    from nodewarden.validator.checks import storage
    if shutil.which("fio") is None:
        return {"error": "fio not installed (Debian package fio)"}
    path = args.storage_path or storage.default_path()
    streams, file_bytes, block = args.streams, args.file_mib * MiB, args.block_kib * 1024
    checks_, writes, reads = [], [], []
    for _ in range(args.repeat):
        m = storage.measure(path, streams, file_bytes, block)
        checks_.append(m)
        work = Path(m["path"]) / f"nodewarden-fio-{secrets.token_hex(6)}"
        work.mkdir()
        try:
            writes.append(fio(work, "write", streams, file_bytes, block, m["direct_io"]))
            reads.append(fio(work, "read", streams, file_bytes, block, m["direct_io"]))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    cw = max(c["write_bandwidth"] for c in checks_)
    cr = max(c["read_bandwidth"] for c in checks_)
    fw = max(w["bandwidth"] for w in writes)
    fr = max(r["bandwidth"] for r in reads)
    write_ratio, read_ratio = round(cw / fw, 3), round(cr / fr, 3)
    return {
        "reference": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
        "path": checks_[-1]["path"], "filesystem": checks_[-1]["filesystem"], "direct_io": checks_[-1]["direct_io"],
        "streams": streams, "file_bytes": file_bytes, "block_bytes": block,
        "check_write_bandwidth": cw, "check_read_bandwidth": cr,
        "fio_write_bandwidth": fw, "fio_read_bandwidth": fr,
        "write_ratio": write_ratio, "read_ratio": read_ratio,
        "write_ratio_median": _median_ratio([c["write_bandwidth"] for c in checks_], [w["bandwidth"] for w in writes]),
        "read_ratio_median": _median_ratio([c["read_bandwidth"] for c in checks_], [r["bandwidth"] for r in reads]),
        "target": STORAGE_TARGET, "meets_target": min(write_ratio, read_ratio) >= STORAGE_TARGET,
        "check_runs": [{"write": c["write_bandwidth"], "read": c["read_bandwidth"]} for c in checks_],
        "fio_runs": [{"write": w["bandwidth"], "read": r["bandwidth"], "write_wall": w["wall_bandwidth"],
                      "read_wall": r["wall_bandwidth"]} for w, r in zip(writes, reads)],
        "fio_commands": [writes[-1]["command"], reads[-1]["command"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage-path", help="directory for the storage comparison (default: the check's default)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--file-mib", type=int, default=1024, help="per stream / fio job")
    ap.add_argument("--block-kib", type=int, default=1024)
    ap.add_argument("--array-mib", type=int, default=0, help="per array; 0: the check's default size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wait-seconds", type=float, default=0, help="wait this long for the memory check to exist")
    ap.add_argument("--skip", choices=("memory", "storage"), action="append", default=[])
    ap.add_argument("--out", default=str(HERE / "results" / "validator_fidelity.json"))
    args = ap.parse_args(argv)
    notes = setup({"fio": "fio", "likwid-bench": "likwid"})
    doc: dict[str, Any] = {
        "date": dt.date.today().isoformat(), "host_cpus": cpu_count(), "python": platform.python_version(),
        "kernel": platform.release(), "repeat": args.repeat, "setup": notes,
        "command": "python3 bench/validator_fidelity.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    for name, fn in (("memory", memory), ("storage", storage_bench)):
        if name in args.skip:
            continue
        try:
            doc[name] = fn(args)
        except Exception as e:  # a tool that failed: recorded, the other comparison still runs
            doc[name] = {"error": f"{type(e).__name__}: {e}"}
    text = json.dumps(doc, indent=2)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    ok = all(doc[n].get("meets_target") for n in ("memory", "storage") if n in doc)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

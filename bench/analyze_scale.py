#!/usr/bin/env python3
"""Benchmark: `nodewarden analyze` over a whole simulated fleet (many small rotated, mostly
gzipped logs), cold and with a warm event cache, against `zcat -f | grep -c` on the same files.

    python3 bench/analyze_scale.py [--nodes 1250] [--days N] [--jobs N] [--repeat 3] [--out bench/results/analyze_scale.json]

The fleet is generated once (seed 0) into bench/data/fleet (bench/data/fleet-<nodes>n-<days>d when
shrunk) unless present. Timed runs, each a whole process, taken in turn ``--repeat`` times (best
of each kept, all recorded): `nodewarden analyze DIR --out TMP --no-cache` (cold parse), the same
with the portable scanner (NODEWARDEN_SCANNER=find, as on aarch64), the same with a cache
directory filled by one untimed run (warm), and `find DIR -type f ! -name ground_truth.csv -print0 |
xargs -0 zcat -f | grep -c 'NVRM: Xid'`. Throughput is of the logs' on-disk bytes. Peak RSS is the largest resident set of the
analyze process and its worker processes (sampled with psutil, or /usr/bin/time -f %M when psutil
is missing). The Xid count of analyze (events_by_kind.csv) must equal grep's line count.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GREP = "find {dir} -type f ! -name ground_truth.csv -print0 | xargs -0 zcat -f | grep -c 'NVRM: Xid'"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def ensure_fleet(nodes: int | None, days: int | None) -> Path:
    name = "fleet" if nodes is None and days is None else f"fleet-{nodes or 'all'}n-{days or 'all'}d"
    fleet = HERE / "data" / name
    if not (fleet / "ground_truth.csv").exists():
        cmd = [sys.executable, "-m", "nodewarden", "simulate", "--out", str(fleet)]
        if nodes is not None:
            cmd += ["--nodes", str(nodes)]
        if days is not None:
            cmd += ["--days", str(days)]
        print("generating:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, env=_env(), stdout=subprocess.DEVNULL)
    return fleet


def log_bytes(fleet: Path) -> tuple[int, int]:
    total = files = 0
    for dirpath, _, names in os.walk(fleet):
        for n in names:
            if n != "ground_truth.csv":
                total += os.path.getsize(os.path.join(dirpath, n))
                files += 1
    return total, files


def timed_rss(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """(seconds, peak RSS of the main process, peak RSS summed over it and its workers) of ``cmd``."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is None and os.path.exists("/usr/bin/time"):
        with tempfile.NamedTemporaryFile("r") as t:
            t0 = time.perf_counter()
            subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name] + cmd, check=True, env={**_env(), **(env or {})},
                           stdout=subprocess.DEVNULL)
            secs = time.perf_counter() - t0
            rss = int(t.read().split()[-1]) * 1024
            return secs, rss, rss
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**_env(), **(env or {})}, stdout=subprocess.DEVNULL)
    peak = [0, 0]  # main process, whole tree
    done = threading.Event()

    def sample() -> None:
        if psutil is None:
            return
        try:
            p = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not done.is_set():
            try:
                main = p.memory_info().rss
                tree = main
                for c in p.children(recursive=True):
                    try:
                        tree += c.memory_info().rss
                    except psutil.Error:
                        pass
                peak[0], peak[1] = max(peak[0], main), max(peak[1], tree)
            except psutil.Error:
                break
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    rc = proc.wait()
    secs = time.perf_counter() - t0
    done.set()
    th.join()
    if rc not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {rc}")
    return secs, peak[0], peak[1]


def xid_count(out_dir: Path) -> int:
    with open(out_dir / "events_by_kind.csv", newline="") as f:
        return sum(int(r["count"]) for r in csv.DictReader(f) if r["kind"] == "xid")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, help="fleet size (default: the default fleet's, 1250)")
    ap.add_argument("--days", type=int, help="days simulated (default: the default year)")
    ap.add_argument("--jobs", type=int, help="nodewarden --jobs (default: all CPUs)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command; the best is kept (default 3)")
    ap.add_argument("--out", default=str(HERE / "results" / "analyze_scale.json"))
    args = ap.parse_args()

    fleet = ensure_fleet(args.nodes, args.days)
    nbytes, nfiles = log_bytes(fleet)
    mb = nbytes / 1e6
    # Warm the page cache once so all three runs read from memory alike.
    subprocess.run(f"find {fleet} -type f -print0 | xargs -0 cat > /dev/null", shell=True, check=True)

    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    base = [sys.executable, "-m", "nodewarden", "analyze", str(fleet)] + jobs
    result: dict = {"fleet": str(fleet.relative_to(ROOT)), "log_files": nfiles, "log_bytes": nbytes}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        cold_cmd = base + ["--out", str(tmpd / "cold"), "--no-cache"]
        cache = tmpd / "cache"
        warm_cmd = base + ["--out", str(tmpd / "warm"), "--cache", str(cache)]
        fill_s, _, _ = timed_rss(warm_cmd)  # fills the cache (parse + write)
        grep_cmd = GREP.format(dir=fleet)
        runs: dict[str, list[float]] = {"cold": [], "cold_find": [], "warm": [], "grep": []}
        cold_rss = cold_tree = warm_rss = warm_tree = 0
        for _ in range(max(1, args.repeat)):
            s_, r, t = timed_rss(cold_cmd)
            runs["cold"].append(s_)
            cold_rss, cold_tree = max(cold_rss, r), max(cold_tree, t)
            runs["cold_find"].append(timed_rss(cold_cmd, {"NODEWARDEN_SCANNER": "find"})[0])
            s_, r, t = timed_rss(warm_cmd)
            runs["warm"].append(s_)
            warm_rss, warm_tree = max(warm_rss, r), max(warm_tree, t)
            t0 = time.perf_counter()
            grep = subprocess.run(grep_cmd, shell=True, capture_output=True, text=True)
            runs["grep"].append(time.perf_counter() - t0)
        cold_s, find_s, warm_s, grep_s = (min(runs[k]) for k in ("cold", "cold_find", "warm", "grep"))
        xid_cold, xid_warm = xid_count(tmpd / "cold"), xid_count(tmpd / "warm")
        cache_bytes = sum(p.stat().st_size for p in cache.glob("*.parquet"))
        grep_xids = int(grep.stdout.strip() or 0)

    result.update({
        "cold_command": " ".join(["nodewarden"] + cold_cmd[3:]).replace(str(tmpd), "TMP"),
        "cold_seconds": round(cold_s, 2),
        "cold_mb_per_s": round(mb / cold_s, 1),
        "cold_peak_rss_mb": round(cold_rss / 1e6, 1),
        "cold_peak_rss_all_processes_mb": round(cold_tree / 1e6, 1),
        "cold_find_scanner_seconds": round(find_s, 2),
        "ratio_cold_find_scanner_vs_grep": round(grep_s / find_s, 3),
        "cache_fill_seconds": round(fill_s, 2),
        "cache_bytes": cache_bytes,
        "warm_command": " ".join(["nodewarden"] + warm_cmd[3:]).replace(str(tmpd), "TMP"),
        "warm_seconds": round(warm_s, 2),
        "warm_mb_per_s": round(mb / warm_s, 1),
        "warm_peak_rss_mb": round(warm_rss / 1e6, 1),
        "warm_peak_rss_all_processes_mb": round(warm_tree / 1e6, 1),
        "grep_command": grep_cmd,
        "grep_seconds": round(grep_s, 2),
        "grep_mb_per_s": round(mb / grep_s, 1),
        "ratio_cold_vs_grep": round(grep_s / cold_s, 3),
        "ratio_warm_vs_grep": round(grep_s / warm_s, 3),
        "target_ratio": round(1 / 3, 3),
        "target_rss_mb": 2000,
        "rss_ok": max(cold_rss, warm_rss) < 2e9,
        "xid_analyze_cold": xid_cold,
        "xid_analyze_warm": xid_warm,
        "xid_grep": grep_xids,
        "xid_counts_match": xid_cold == xid_warm == grep_xids,
        "repeat": max(1, args.repeat),
        "runs_seconds": {k: [round(x, 2) for x in v] for k, v in runs.items()},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": dt.date.today().isoformat(),
    })
    text = json.dumps(result, indent=2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 0 if result["xid_counts_match"] else 1


if __name__ == "__main__":
    sys.exit(main())

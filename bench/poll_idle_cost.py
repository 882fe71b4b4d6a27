"""What one agent poll costs back to back and after the agent's idle gap, on this machine.

The agent polls every 10 s and sleeps in between; on some machines (a VM whose host shares its
caches, a node whose job thrashes them) a poll after that sleep costs several times the same poll
run back to back: cold caches and TLB, not more work. ``bench/agent_overhead.py`` measures the
agent as it runs, so its figure carries that regime; this bench tells which regime a machine is
in, by running the agent's collectors (the same ``build_collectors`` as the agent, on the NVML
simulator with 8 H100s and a copy of the ``h100-hgx-ndr`` fixture) in this process: ``--rounds``
polls back to back, then ``--rounds`` polls each after ``--gap`` seconds asleep. CPU time per poll
(``time.process_time``), median and max, and the ratio of the medians.

Usage: ``python3 bench/poll_idle_cost.py [--gap 10] [--rounds 6] [--out FILE]`` (a JSON result).
Run it on a quiet machine; it takes ``rounds x gap`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLLECTORS = "nvml,infiniband,edac,pcie,netclass"


def child(sysfs: str, gap: float, rounds: int) -> dict[str, list[float]]:
    """In the simulator's environment: the polls' CPU milliseconds, back to back and after gaps."""
    sys.path.insert(0, str(REPO))
    from nodewarden.agent.poller import build_collectors
    cols = build_collectors(COLLECTORS.split(","), sysfs, "bench")
    for c in cols:  # the first poll reads the static attributes: not what a poll costs
        c.collect()

    def poll() -> float:
        t = time.process_time()
        for c in cols:
            c.collect()
        return (time.process_time() - t) * 1e3

    warm = [poll() for _ in range(rounds)]
    idle = []
    for _ in range(rounds):
        time.sleep(gap)
        idle.append(poll())
    return {"back_to_back_ms": warm, "after_gap_ms": idle}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gap", type=float, default=10.0, help="seconds asleep before each idle poll (the agent's interval)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], float(a.child[1]), int(a.child[2]))))
        return 0
    sys.path.insert(0, str(REPO))
    from tests import nvmlsim
    tmp = Path(tempfile.mkdtemp(prefix="nodewarden-bench-"))
    try:
        shutil.copytree(REPO / "tests/fixtures/sysfs/h100-hgx-ndr", tmp / "sys", symlinks=True)
        lib = nvmlsim.build(tmp)
        state = nvmlsim.write_state(tmp / "nvml.json", gpus=nvmlsim.default_gpus(8))
        env = {**nvmlsim.env(lib, state), "PYTHONPATH": str(REPO)}
        p = subprocess.run([sys.executable, __file__, "--child", str(tmp / "sys"), str(a.gap), str(a.rounds)],
                           env=env, capture_output=True, text=True, check=True,
                           timeout=a.rounds * (a.gap + 30) + 60)
        got = json.loads(p.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    warm, idle = statistics.median(got["back_to_back_ms"]), statistics.median(got["after_gap_ms"])
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
              "command": " ".join(["python3", "bench/poll_idle_cost.py", *sys.argv[1:]]),
              "collectors": COLLECTORS, "gap_seconds": a.gap, **got,
              "median_back_to_back_ms": round(warm, 2), "median_after_gap_ms": round(idle, 2),
              "after_gap_over_back_to_back": round(idle / warm, 2)}
    print(f"one poll ({COLLECTORS}): {warm:.1f} ms CPU back to back, {idle:.1f} ms after {a.gap:g} s asleep "
          f"({idle / warm:.2f}x)")
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

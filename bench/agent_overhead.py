"""The agent's overhead on a node, side by side with Prometheus's node_exporter.

Set-up: the agent follows the real ``/dev/kmsg`` and polls, every 10 s, the NVML simulator with
8 H100s (``tests/nvmlsim``) and a copy of the ``h100-hgx-ndr`` sysfs fixture (8 NDR InfiniBand
ports, the node's PCIe and network devices). Debian's ``prometheus-node-exporter`` (installed
with apt-get when missing) runs with its default collectors on this machine's /proc and /sys.
Both listen on free loopback ports.

Measured:

* CPU: user+system time of each process (``/proc/PID/stat``) over a window (default 120 s, a
  scrape of each every 15 s as a Prometheus would), scaled to seconds per hour. Target for the
  agent: < 36 s/h (1% of one core).
* RSS: ``VmRSS`` and peak ``VmHWM`` (``/proc/PID/status``) at the end. Target agent <= 60 MB.
* ``/metrics`` render time: median (and p90) wall time of 50 sequential scrapes of each,
  body read in full, from this process.
* kernel-log delay: 50 Xid lines written into ``/dev/kmsg`` one at a time (root needed); for
  each, the time from the write(2) to the first ``/metrics`` that counts it (polled every 5 ms,
  so the figure includes up to one render). p50/p99. Target p99 < 1 s.

Usage (root, from the repository root)::

    python3 bench/agent_overhead.py [--window 120] [--out bench/results/agent_overhead.json] [--without-nvml]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import nvmlsim  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
NODE_EXPORTER = "prometheus-node-exporter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_node_exporter() -> str:
    path = shutil.which(NODE_EXPORTER)
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", NODE_EXPORTER], env=env,
                       check=False, capture_output=True)
        path = shutil.which(NODE_EXPORTER)
    if path is None:
        sys.exit(f"{NODE_EXPORTER} not found and could not be installed (apt-get install {NODE_EXPORTER})")
    return path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def rss_mb(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def wait(what: str, check, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def write_kmsg(line: str) -> None:
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=120.0, help="CPU measurement window, seconds (default 120)")
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--lines", type=int, default=50)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "agent_overhead.json"))
    ap.add_argument("--without-nvml", action="store_true",
                    help="the NVML collector off: the agent's cost without the NVML simulator's")
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.access("/dev/kmsg", os.W_OK):
        sys.exit("needs root: writes into /dev/kmsg")
    ne_bin = ensure_node_exporter()
    _v = subprocess.run([ne_bin, "--version"], capture_output=True, text=True)
    ne_version = (_v.stdout + _v.stderr).splitlines()[:1]

    tmp = Path(tempfile.mkdtemp(prefix="nodewarden-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sysfs = tmp / "sys"
        shutil.copytree(REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr", sysfs, symlinks=True)
        (tmp / "proc").mkdir()
        libdir = nvmlsim.build(tmp)
        state = nvmlsim.write_state(tmp / "nvml.json", gpus=nvmlsim.default_gpus(8))
        agent_port, ne_port = free_port(), free_port()
        config = tmp / "agent.toml"
        config.write_text(f'listen = "127.0.0.1:{agent_port}"\nstate_dir = "{tmp / "state"}"\n'
                          f'hostname = "bench-node"\nsysfs = "{sysfs}"\nprocfs = "{tmp / "proc"}"\n'
                          "poll_interval_seconds = 10\ncollector_timeout_seconds = 5\nlog_level = \"warning\"\n"
                          "[validator]\nenabled = false\n"
                          # the bench's Xid lines are written from user space (facility user)
                          "[kernel_log]\naccept_injected = true\n"
                          + ("[collectors]\nnvml = false\n" if args.without_nvml else ""))
        env = nvmlsim.env(libdir, state)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        agent = subprocess.Popen([sys.executable, "-m", "nodewarden", "agent", "--config", str(config)], cwd=REPO,
                                 env=env, stdout=open(tmp / "agent.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(agent)
        ne = subprocess.Popen([ne_bin, f"--web.listen-address=127.0.0.1:{ne_port}"],
                              stdout=open(tmp / "node_exporter.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(ne)
        a_url, n_url = f"http://127.0.0.1:{agent_port}/metrics", f"http://127.0.0.1:{ne_port}/metrics"
        wait("the agent", lambda: json.loads(get(f"http://127.0.0.1:{agent_port}/healthz"))["kmsg_readable"])
        first = b'nodewarden_net_up{' if args.without_nvml else b'nodewarden_gpu_info{'
        wait("the agent's first poll", lambda: first in get(a_url)
             and b'nodewarden_ib_port_state{' in get(a_url))
        wait("node_exporter", lambda: b"node_cpu_seconds_total" in get(n_url))
        time.sleep(2.0)
        series = {name: sum(1 for line in get(url).decode().splitlines() if line and not line.startswith("#"))
                  for name, url in (("agent", a_url), ("node_exporter", n_url))}

        # 1. CPU over the window, scraped every 15 s like a Prometheus would
        print(f"measuring CPU for {args.window:g} s ...", file=sys.stderr)
        c0 = {"agent": cpu_seconds(agent.pid), "node_exporter": cpu_seconds(ne.pid)}
        t0 = time.monotonic()
        while (left := args.window - (time.monotonic() - t0)) > 0:
            get(a_url)
            get(n_url)
            time.sleep(min(15.0, left))
        elapsed = time.monotonic() - t0
        c1 = {"agent": cpu_seconds(agent.pid), "node_exporter": cpu_seconds(ne.pid)}
        cpu = {k: {"cpu_seconds": round(c1[k] - c0[k], 3),
                   "cpu_seconds_per_hour": round((c1[k] - c0[k]) * 3600 / elapsed, 2)} for k in c0}

        # 2. /metrics render time
        render = {}
        for name, url in (("agent", a_url), ("node_exporter", n_url)):
            times = []
            for _ in range(args.scrapes):
                t = time.perf_counter()
                body = get(url)
                times.append(time.perf_counter() - t)
            render[name] = {"median_ms": round(statistics.median(times) * 1e3, 2),
                            "p90_ms": round(pct(times, 0.9) * 1e3, 2), "bytes": len(body)}

        # 3. kernel log line -> counted on /metrics
        domain = f"{random.randrange(0x1000, 0xffff):04x}"
        pat = re.compile(rb'nodewarden_gpu_xid_errors_total\{[^}]*pci_bus_id="' + domain.encode()
                         + rb':07:00\.0"[^}]*\} ([0-9.e+]+)')
        delays = []
        for i in range(args.lines):
            line = (f"<3>NVRM: Xid (PCI:{domain}:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
                    "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860.")
            t = time.perf_counter()
            write_kmsg(line)
            while True:
                m = pat.search(get(a_url))
                if m and float(m.group(1)) >= i + 1:
                    delays.append(time.perf_counter() - t)
                    break
                if time.perf_counter() - t > 10:
                    sys.exit(f"line {i} not counted within 10 s")
                time.sleep(0.005)
            time.sleep(random.uniform(0.05, 0.25))  # lines arrive apart, not as one batch
        rss = {"agent": rss_mb(agent.pid), "node_exporter": rss_mb(ne.pid)}

        result = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "node_exporter": ne_version[0] if ne_version else None},
            "setup": {"gpus": 0 if args.without_nvml else 8,
                      "gpu_source": "none: NVML collector off" if args.without_nvml else "tests/nvmlsim (NVML simulator)",
                      "sysfs": "tests/fixtures/sysfs/h100-hgx-ndr (8 NDR IB ports + RoCE LAG)",
                      "poll_interval_seconds": 10, "kernel_log": "real /dev/kmsg",
                      "node_exporter": "default collectors on this machine's /proc and /sys",
                      "cpu_window_seconds": round(elapsed, 1),
                      "cpu_note": "CPU seconds over the window scaled to one hour; one scrape of each every 15 s",
                      "series_exported": series},
            "rss_mb": rss,
            "cpu": cpu,
            "render": render,
            "kmsg_to_metrics_seconds": {"lines": len(delays), "p50": round(pct(delays, 0.5), 4),
                                        "p99": round(pct(delays, 0.99), 4), "max": round(max(delays), 4),
                                        "note": "/metrics polled every 5 ms: includes up to one render"},
            "targets": {"agent_rss_mb_max": 60, "agent_cpu_seconds_per_hour_max": 36, "kmsg_p99_seconds_max": 1.0},
        }
        result["targets_met"] = {
            "rss": rss["agent"]["VmHWM"] <= 60,
            "cpu": cpu["agent"]["cpu_seconds_per_hour"] < 36,
            "kmsg_p99": result["kmsg_to_metrics_seconds"]["p99"] < 1.0,
        }
        text = json.dumps(result, indent=2) + "\n"
        print(text, end="")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

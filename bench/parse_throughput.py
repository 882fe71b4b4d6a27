#!/usr/bin/env python3
"""Benchmark: `nodewarden events` against `grep -cE` on the same warm kernel log, same run.

    python3 bench/parse_throughput.py [--size-mib 1024] [--repeat 3] [--out bench/results/parse_throughput.json]

The log is generated once (deterministic seed) into bench/data/: dmesg-format lines drawn from
ordinary kernel messages, one NVRM Xid line in a thousand (shapes from real driver
generations), and one EDAC or mlx5 IB link line in ten thousand. grep's pattern holds the candidate
words of every kind nodewarden parses. Both commands are timed as whole processes (start-up,
reading, output to /dev/null), best of --repeat runs after one warm-up read of the file;
nodewarden runs with ``--no-cache``, so every run parses (its Parquet event cache would
otherwise answer the second run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
GREP_PATTERN = "NVRM|EDAC|mce: |mlx5"

NOISE = [
    "systemd[1]: Started Session {n} of User root.",
    "audit: type=1400 audit({t}:{n}): apparmor=\"STATUS\" operation=\"profile_load\" profile=\"unconfined\" name=\"docker-default\" pid={p} comm=\"apparmor_parser\"",
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{h}: link becomes ready",
    "docker0: port 1(veth{h}) entered blocking state",
    "docker0: port 1(veth{h}) entered forwarding state",
    "nvme nvme0: 32/0/0 default/read/poll queues",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "usb 1-1: new high-speed USB device number {n} using xhci_hcd",
    "kauditd_printk_skb: {n} callbacks suppressed",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.  Check SNMP counters.",
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79800",
    "eth0: renamed from veth{h}",
    "overlayfs: upper fs does not support RENAME_WHITEOUT.",
    "bond0: (slave ens1f0np0): link status definitely up, 100000 Mbps full duplex",
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "python3[{p}]: segfault at 0 ip 00007f{h} sp 00007ffd{h} error 4 in libc.so.6[7f{h}+195000]",
    "Out of memory: Killed process {p} (python3) total-vm:123456789kB, anon-rss:98765432kB",
    "kvm: already loaded vendor module 'kvm_intel'",
]
FAULTS_XID = [
    "NVRM: Xid (PCI:0000:{b}:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    "NVRM: Xid (PCI:0000:{b}:00): 31, pid={p}, name=pt_main_thread, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_12340000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "NVRM: Xid (PCI:0000:{b}:00): 43, pid={p}, name=pt_main_thread, Ch 00000008",
    "NVRM: Xid (PCI:0000:{b}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    "NVRM: Xid (PCI:0000:{b}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    "NVRM: Xid (PCI:0000:{b}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:{b}:00): 119, pid={p}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x410).",
]
FAULTS_OTHER = [
    "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)",
    "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN",
    "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
]
BUSES = ["07", "0a", "44", "4a", "87", "8e", "b8", "bd"]


def generate(path: Path, size: int, seed: int = 2408) -> None:
    """Write about ``size`` bytes of dmesg-format log to ``path`` (deterministic)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    mono = 1000.0
    written = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        while written < size:
            block = []
            for i in range(1000):
                mono += rng.random() * 0.05
                if i == 500:
                    msg = rng.choice(FAULTS_XID)
                elif rng.random() < 0.0001:  # EDAC and IB lines: rarer than Xids
                    msg = rng.choice(FAULTS_OTHER)
                else:
                    msg = rng.choice(NOISE)
                msg = msg.format(n=rng.randrange(1, 99999), t=int(1.7e9) + int(mono), p=rng.randrange(1000, 4000000),
                                 h=f"{rng.getrandbits(32):08x}", b=rng.choice(BUSES))
                block.append(f"[{mono:12.6f}] {msg}\n")
            text = "".join(block)
            f.write(text)
            written += len(text)
    tmp.replace(path)


def best_time(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> tuple[float, bytes]:
    best = float("inf")
    out = b""
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, check=False)
        dt = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{cmd[0]} failed with exit code {proc.returncode}")
        best = min(best, dt)
        out = proc.stdout
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--out", default=str(HERE / "results" / "parse_throughput.json"))
    args = ap.parse_args()
    if shutil.which("grep") is None:
        raise SystemExit("grep not found")
    log = Path(args.data) / f"kern-{args.size_mib}m.log"
    size = args.size_mib << 20
    if not log.exists() or abs(log.stat().st_size - size) > (1 << 20):
        print(f"generating {log} ({args.size_mib} MiB) ...", file=sys.stderr)
        generate(log, size)
    nbytes = log.stat().st_size
    with open(log, "rb") as f:  # warm the page cache
        while f.read(64 << 20):
            pass
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    grep_cmd = ["grep", "-cE", GREP_PATTERN, str(log)]
    nw_cmd = [sys.executable, "-m", "nodewarden", "events", "--no-cache", str(log)]
    t_grep, grep_out = best_time(grep_cmd, args.repeat)
    t_nw, nw_out = best_time(nw_cmd, args.repeat, env)
    # The portable matcher (no Hyperscan: aarch64, or the [analysis] extra not installed).
    t_find, find_out = best_time(nw_cmd, args.repeat, dict(env, NODEWARDEN_SCANNER="find"))
    if find_out != nw_out:
        raise SystemExit("the two scanner back-ends gave different output")
    from nodewarden.parsing import scan
    result = {
        "file_bytes": nbytes,
        "grep_command": " ".join(grep_cmd),
        "grep_seconds": round(t_grep, 3),
        "grep_mb_per_s": round(nbytes / t_grep / 1e6, 1),
        "grep_candidate_lines": int(grep_out.strip() or 0),
        "nodewarden_command": " ".join(["python3", "-m", "nodewarden", "events", "--no-cache", str(log), ">/dev/null"]),
        "nodewarden_seconds": round(t_nw, 3),
        "nodewarden_mb_per_s": round(nbytes / t_nw / 1e6, 1),
        "nodewarden_events": nw_out.count(b"\n"),
        "ratio_vs_grep": round(t_grep / t_nw, 3),
        "scanner_backend": scan.backend(),
        "nodewarden_find_backend_seconds": round(t_find, 3),
        "ratio_vs_grep_find_backend": round(t_grep / t_find, 3),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

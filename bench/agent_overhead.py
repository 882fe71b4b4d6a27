"""The agent's overhead on a node, side by side with Prometheus's node_exporter.

Set-up: the agent follows the real ``/dev/kmsg`` and polls, every 10 s, the NVML simulator with
8 H100s (``tests/nvmlsim``) and a copy of the ``h100-hgx-ndr`` sysfs fixture (8 NDR InfiniBand
ports, the node's PCIe and network devices). Debian's ``prometheus-node-exporter`` (installed
with apt-get when missing) runs with its default collectors on this machine's /proc and /sys.
Both listen on free loopback ports.

Measured:

* CPU: user+system time of each process (``/proc/PID/stat``) over a window (default 120 s, a
  scrape of each every 15 s as a Prometheus would), scaled to seconds per hour. Target for the
  agent: at most 2 x node_exporter's in the same run (``ratios``, ``targets_met``). node_exporter
  spends a few clock ticks in 120 s: use a window of 300 s or more for the ratio. Nothing else
  may write into /dev/kmsg meanwhile (the agent reads and parses every record).
* RSS: ``VmRSS`` and peak ``VmHWM`` (``/proc/PID/status``) at the end. Target agent <= 30 MB.
* ``/metrics`` render time: median (and p90) wall time of 50 sequential scrapes of each,
  body read in full, from this process. Target: at most node_exporter's median.
* kernel-log delay: 50 Xid lines written into ``/dev/kmsg`` one at a time (root needed); for
  each, the time from the write(2) to the first ``/metrics`` that counts it (polled every 5 ms,
  so the figure includes up to one render). p50/p99. Target p99 < 200 ms.

Options that add parts (each recorded in the JSON result under its own key):

* ``--variants`` (``render_variants``): the render time of each ``/metrics`` variant, for the agent
  and node_exporter: text, OpenMetrics 1.0 (``Accept: application/openmetrics-text;
  version=1.0.0``), each with ``Accept-Encoding: gzip``; median and p90 of ``--scrapes``
  sequential scrapes (compressed bytes read, not decompressed), the bytes on the wire and the
  Content-Type/Content-Encoding each answered with.
* ``--storm-rate R --storm-seconds S`` (``storm``): after the other parts, a C writer (compiled
  with gcc) writes R Xid 48 lines a second for S seconds into ``/dev/kmsg`` (32 PCI addresses of
  a random domain; priority 4, warning, below the console log level, so the serial console
  does not print them), paced in 1 ms steps. ``kernel.printk_devkmsg`` is set to ``on`` for it
  (else the kernel rate-limits writes to ``/dev/kmsg``: 10 lines per 5 s per open file) and set
  back after. Recorded: lines written and the rate achieved (the writer's clock), the lines the
  agent counted (the sum of ``nodewarden_gpu_xid_errors_total`` for that domain), the agent's own
  loss figures (``nodewarden_collector_kmsg_lost_records_total``: sequence gaps,
  ``nodewarden_collector_kmsg_overruns_total``: EPIPE), ``written - counted`` against the lost
  records it reported, the agent's CPU seconds over the storm and until it had counted
  everything, its RSS before, after and peak (``VmRSS`` every 0.5 s, ``VmHWM``), and how long
  after the storm ``/metrics`` (polled every 0.5 s) showed every line, or when it stopped rising
  (gave up: no rise for 15 s, or 300 s).
* ``--duration D --fault-every F`` (``long_run``): the CPU window lasts D seconds (instead of
  ``--window``) and one fault is injected every F seconds, alternately an Xid line into
  ``/dev/kmsg`` and a corrected ECC error (+1, volatile and aggregate) on one GPU of the NVML
  simulator (``tests.nvmlsim.update_gpu``; Xid lines only with ``--without-nvml``); the agent's
  ``VmRSS`` is sampled every ``--rss-every`` seconds (30). Recorded: the samples, their
  least-squares slope in MB/hour, first and last, and whether ``/metrics`` counted every fault.

Usage (root, from the repository root)::

    python3 bench/agent_overhead.py [--window 120] [--out bench/results/agent_overhead.json] [--without-nvml]
        [--py-spy FILE] [--variants] [--storm-rate 10000 --storm-seconds 60]
        [--duration 3600 --fault-every 60 [--rss-every 30]]
"""

from __future__ import annotations

import argparse
import gzip
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
PRINTK_DEVKMSG = Path("/proc/sys/kernel/printk_devkmsg")
XID = "nodewarden_gpu_xid_errors_total"
LOST = "nodewarden_collector_kmsg_lost_records_total"
OVERRUNS = "nodewarden_collector_kmsg_overruns_total"
JOURNAL_DROPPED = "nodewarden_collector_journal_dropped_records_total"
ECC = "nodewarden_gpu_ecc_errors_total"
XID_TEXT = ("NVRM: Xid (PCI:{pci}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) "
            "has been detected on GPU in the framebuffer at physAddr 0x7fffa8860.")
# /metrics variants (--variants): name -> request headers
VARIANTS = {
    "text": {},
    "openmetrics": {"Accept": "application/openmetrics-text; version=1.0.0"},
    "text_gzip": {"Accept-Encoding": "gzip"},
    "openmetrics_gzip": {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"},
}
STORM_BUSES = 32

# The storm's writer: RATE lines a second for SECONDS into /dev/kmsg, one write(2) per line, paced
# against CLOCK_MONOTONIC in 1 ms steps; line i is BEFORE, the bus number i % BUSES in two hex
# digits, AFTER. Prints one JSON line with what it did.
STORM_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s RATE SECONDS BUSES BEFORE AFTER\n", argv[0]);
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    int buses = atoi(argv[3]);
    const char *before = argv[4], *after = argv[5];
    int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
    if (fd < 0) { perror("/dev/kmsg"); return 1; }
    long long total = (long long)(rate * seconds + 0.5), written = 0, failed = 0;
    int last_errno = 0;
    char line[512];
    struct timespec tick = {0, 1000000};
    double t0 = now();
    while (written + failed < total) {
        double t = now();
        long long due = (long long)((t - t0) * rate) + 1;
        if (due > total) due = total;
        while (written + failed < due) {
            int n = snprintf(line, sizeof line, "%s%02llx%s\n", before, (written + failed) % buses, after);
            if (write(fd, line, n) == n) written++;
            else { failed++; last_errno = errno; }
        }
        if (t > t0 + seconds + 5.0) break; /* hopelessly behind the rate: stop */
        if (written + failed < total) nanosleep(&tick, NULL);
    }
    double elapsed = now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"written\": %lld, \"failed\": %lld, \"last_errno\": %d, \"planned\": %lld, \"seconds\": %.6f, "
           "\"cpu_seconds\": %.3f}\n", written, failed, last_errno, total, elapsed,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    return 0;
}
"""


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


def get_with(url: str, headers: dict[str, str]) -> tuple[bytes, str | None, str | None]:
    """(body as sent, Content-Type, Content-Encoding) of a GET with these request headers."""
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
        return r.read(), r.headers.get("Content-Type"), r.headers.get("Content-Encoding")


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(body: bytes, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of each sample named ``name`` in a text-format body."""
    out = []
    prefix = name.encode()
    for line in body.split(b"\n"):
        if not line.startswith(prefix):
            continue
        rest = line[len(prefix):]
        if rest[:1] == b"{":
            labels, _, value = rest[1:].rpartition(b"} ")
        elif rest[:1] == b" ":
            labels, value = b"", rest[1:]
        else:
            continue
        out.append((dict(_LABEL.findall(labels.decode())), float(value.split()[0])))
    return out


def total(body: bytes, name: str, **match: str) -> float:
    """The sum of ``name``'s samples whose labels start with (``pci_bus_id``) or equal (others) ``match``."""
    def ok(labels: dict[str, str]) -> bool:
        return all(labels.get(k, "").startswith(v) if k == "pci_bus_id" else labels.get(k) == v
                   for k, v in match.items())
    return sum(v for labels, v in samples(body, name) if ok(labels))


def xid_line(pci: str, prio: int = 3) -> str:
    """An Xid 48 line as the NVIDIA driver prints it, with a ``<prio>`` prefix for /dev/kmsg."""
    return f"<{prio}>" + XID_TEXT.format(pci=pci)


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, in value per hour (None for < 2 points)."""
    if len(points) < 2:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600 if var else None


def ring_buffer_bytes() -> int | None:
    """The kernel log ring buffer's size (syslog(2) SYSLOG_ACTION_SIZE_BUFFER), None if unknown."""
    try:
        import ctypes
        n = ctypes.CDLL(None, use_errno=True).klogctl(10, None, 0)
        return n if n > 0 else None
    except (OSError, AttributeError):
        return None


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


class FifoKmsg:
    """``--kmsg-fifo``: the agent follows a FIFO instead of ``/dev/kmsg``; lines are written into
    it as /dev/kmsg records (``<prio>,<seq>,<usec>,-;<text>``, the kernel's facility), one write
    per record, so that the measurement sees only the bench's records (no machine history, no
    other writer) and needs no ``printk_devkmsg``."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDWR)  # held open for writing: the reader never sees an EOF
        self.seq = 0

    def write(self, line: str) -> None:
        prio, text = 6, line
        if line.startswith("<") and ">" in line[:5]:
            prio, text = int(line[1:line.index(">")]), line[line.index(">") + 1:]
        self.seq += 1
        usec = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000
        os.write(self.fd, f"{prio},{self.seq},{usec},-;{text}\n".encode())


FIFO: FifoKmsg | None = None


def write_kmsg(line: str) -> None:
    if FIFO is not None:
        FIFO.write(line)
        return
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def top_frames(path: Path, n: int = 15) -> list[dict[str, object]] | None:
    """The ``n`` frames with the most samples on top of the stack (self time) in py-spy's raw
    (collapsed) output, idle frames (blocked in a lock, a read or a sleep) included as they are
    sampled only when py-spy sees them running."""
    if not path.exists():
        return None
    counts: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack or not n_s.isdigit():
            continue
        leaf = stack.split(";")[-1]
        counts[leaf] = counts.get(leaf, 0) + int(n_s)
        total += int(n_s)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [{"frame": f, "samples": c, "share": round(c / total, 3)} for f, c in top] if total else []


def render_times(url: str, headers: dict[str, str], scrapes: int) -> dict[str, object]:
    """Median and p90 wall time of ``scrapes`` sequential GETs with ``headers`` (body read in
    full, as sent), the last body's size and the Content-Type/Content-Encoding answered."""
    times = []
    for _ in range(scrapes):
        t = time.perf_counter()
        body, ctype, enc = get_with(url, headers)
        times.append(time.perf_counter() - t)
    if enc == "gzip":
        gzip.decompress(body)  # a whole gzip member, or this raises
    return {"median_ms": round(statistics.median(times) * 1e3, 2), "p90_ms": round(pct(times, 0.9) * 1e3, 2),
            "bytes": len(body), "content_type": ctype, "content_encoding": enc}


def build_storm_writer(tmp: Path) -> Path:
    src, exe = tmp / "kmsg_storm.c", tmp / "kmsg_storm"
    src.write_text(STORM_C)
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        sys.exit("--storm-rate needs gcc (the writer is a C program)")
    subprocess.run([cc, "-O2", "-Wall", "-o", str(exe), str(src)], check=True)
    return exe


def storm(args: argparse.Namespace, agent_pid: int, a_url: str, tmp: Path) -> dict[str, object]:
    """The kmsg storm (see the module docstring): returns its figures."""
    writer = build_storm_writer(tmp)
    domain = f"{random.randrange(0x1000, 0xffff):04x}"
    before_bus, after_bus = xid_line(f"{domain}:@@:00", prio=4).split("@@")

    def counts() -> dict[str, float]:
        body = get(a_url)
        return {"counted": total(body, XID, pci_bus_id=f"{domain}:"), "lost": total(body, LOST),
                "overruns": total(body, OVERRUNS), "journal_dropped": total(body, JOURNAL_DROPPED)}

    old = PRINTK_DEVKMSG.read_text().strip()
    try:
        try:
            PRINTK_DEVKMSG.write_text("on\n")
        except OSError as e:  # set on the kernel command line (printk.devkmsg=): locked
            sys.exit(f"cannot set {PRINTK_DEVKMSG} to on ({e.strerror}; it is {old!r}): the kernel would "
                     "rate-limit the storm's writes")
        print(f"kmsg storm: {args.storm_rate:g} lines/s for {args.storm_seconds:g} s "
              f"({PRINTK_DEVKMSG.name} {old} -> on) ...", file=sys.stderr)
        c0 = counts()
        rss0 = rss_mb(agent_pid)
        cpu0 = cpu_seconds(agent_pid)
        t0 = time.monotonic()
        w = subprocess.Popen([str(writer), repr(args.storm_rate), repr(args.storm_seconds), str(STORM_BUSES),
                              before_bus, after_bus], stdout=subprocess.PIPE, text=True)
        peak = rss0["VmRSS"]
        next_scrape = t0 + 15.0
        while w.poll() is None:
            peak = max(peak, rss_mb(agent_pid)["VmRSS"])
            if time.monotonic() >= next_scrape:  # a Prometheus scrape every 15 s, as in the CPU window
                get(a_url)
                next_scrape += 15.0
            time.sleep(0.5)
        t_end = time.monotonic()
        cpu_storm = cpu_seconds(agent_pid) - cpu0
        out, _ = w.communicate()
        if w.returncode != 0:
            sys.exit(f"the storm writer failed (exit {w.returncode})")
        wrote = json.loads(out)
    finally:
        try:
            PRINTK_DEVKMSG.write_text(old + "\n")
        except OSError as e:
            print(f"warning: could not set {PRINTK_DEVKMSG} back to {old!r}: {e}", file=sys.stderr)
    written = wrote["written"]
    # until /metrics counts every line, or stops rising for 15 s (300 s at most)
    last, last_change, complete = counts(), time.monotonic(), False
    while True:
        peak = max(peak, rss_mb(agent_pid)["VmRSS"])
        if last["counted"] - c0["counted"] >= written:
            complete = True
            break
        now = time.monotonic()
        if now - last_change > 15.0 or now - t_end > 300.0:
            break
        time.sleep(0.5)
        cur = counts()
        if cur != last:
            last, last_change = cur, time.monotonic()
    settle = max(0.0, last_change - t_end) if not complete else time.monotonic() - t_end
    cpu_total = cpu_seconds(agent_pid) - cpu0
    rss1 = rss_mb(agent_pid)
    counted = int(last["counted"] - c0["counted"])
    lost = int(last["lost"] - c0["lost"])
    overruns = int(last["overruns"] - c0["overruns"])
    missing = written - counted
    result = {
        "rate_asked_per_second": args.storm_rate, "seconds_asked": args.storm_seconds,
        "lines_written": written, "write_errors": wrote["failed"], "writer_seconds": round(wrote["seconds"], 3),
        "rate_achieved_per_second": round(written / wrote["seconds"], 1) if wrote["seconds"] else None,
        "writer_cpu_seconds": wrote["cpu_seconds"],
        "line": before_bus + "XX" + after_bus, "pci_addresses": STORM_BUSES,
        "printk_devkmsg": {"before": old, "during": "on", "restored": PRINTK_DEVKMSG.read_text().strip()},
        "ring_buffer_bytes": ring_buffer_bytes(),
        "lines_counted": counted,
        "lines_missing": missing,
        "agent_lost_records": lost,
        "agent_overruns": overruns,
        "journal_dropped_records": int(last["journal_dropped"] - c0["journal_dropped"]),
        "kept_up": missing == 0,
        "accounting": ("every line counted" if missing == 0 else
                       f"written = counted + {missing} missing; the agent reported {lost} lost record(s) "
                       f"(sequence gaps, any record, not only these lines) in {overruns} overrun(s)"
                       + ("" if lost >= missing else f": {missing - lost} missing line(s) not reported lost")),
        "complete": complete,
        "seconds_until_counted": round(settle, 3),
        "seconds_until_counted_note": ("after the writer's last line, until /metrics (polled every 0.5 s) "
                                       "counted every line" if complete else
                                       "after the writer's last line, until /metrics stopped rising (gave up "
                                       "after 15 s without a rise)"),
        "agent_cpu_seconds_storm": round(cpu_storm, 3),
        "agent_cpu_seconds_until_counted": round(cpu_total, 3),
        "agent_rss_mb": {"before": rss0["VmRSS"], "after": rss1["VmRSS"], "peak_sampled": peak,
                         "VmHWM_before": rss0["VmHWM"], "VmHWM_after": rss1["VmHWM"]},
    }
    print(f"kmsg storm: wrote {written} lines at {result['rate_achieved_per_second']} lines/s, agent counted "
          f"{counted} ({result['accounting']}), counted {settle:.2f} s after the storm, "
          f"CPU {cpu_storm:.2f} s during / {cpu_total:.2f} s until counted, RSS {rss0['VmRSS']} -> "
          f"{rss1['VmRSS']} MB (peak {peak})", file=sys.stderr)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=120.0, help="CPU measurement window, seconds (default 120)")
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--lines", type=int, default=50)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "agent_overhead.json"))
    ap.add_argument("--py-spy", metavar="FILE",
                    help="also sample the agent with py-spy over the CPU window (collapsed stacks to FILE; "
                         "the top self-time frames are printed and recorded)")
    ap.add_argument("--kmsg-fifo", action="store_true",
                    help="the agent follows a FIFO the bench writes kernel records into, instead of /dev/kmsg "
                         "(a long run isolated from the machine's kernel log and its other writers)")
    ap.add_argument("--without-nvml", action="store_true",
                    help="the NVML collector off: the agent's cost without the NVML simulator's")
    ap.add_argument("--variants", action="store_true",
                    help="also time the OpenMetrics and gzip variants of /metrics (agent and node_exporter)")
    ap.add_argument("--storm-rate", type=float, metavar="LINES_PER_S",
                    help="after the other parts, write Xid lines into /dev/kmsg at this rate (a kmsg storm)")
    ap.add_argument("--storm-seconds", type=float, default=60.0, help="the storm's length, seconds (default 60)")
    ap.add_argument("--duration", type=float, metavar="SECONDS",
                    help="a long run: the CPU window lasts this long (instead of --window)")
    ap.add_argument("--fault-every", type=float, metavar="SECONDS",
                    help="inject one fault this often during the CPU window (Xid line, NVML ECC error, in turn) "
                         "and sample the agent's RSS")
    ap.add_argument("--rss-every", type=float, default=30.0, help="RSS sampling period of a long run (default 30 s)")
    args = ap.parse_args()
    if args.kmsg_fifo and args.storm_rate:
        sys.exit("--storm-rate writes into /dev/kmsg: not with --kmsg-fifo")
    if os.geteuid() != 0 or not os.access("/dev/kmsg", os.W_OK):
        sys.exit("needs root: writes into /dev/kmsg")
    if args.storm_rate is not None and (args.storm_rate <= 0 or args.storm_seconds <= 0):
        sys.exit("--storm-rate and --storm-seconds must be > 0")
    if args.fault_every is not None and args.fault_every <= 0:
        sys.exit("--fault-every must be > 0")
    long_run = args.duration is not None or args.fault_every is not None
    window = args.duration if args.duration is not None else args.window
    ne_bin = ensure_node_exporter()
    _v = subprocess.run([ne_bin, "--version"], capture_output=True, text=True)
    ne_version = (_v.stdout + _v.stderr).splitlines()[:1]
    # SIGTERM runs the finally blocks (the agent stopped, printk_devkmsg set back)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

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
        global FIFO
        if args.kmsg_fifo:
            FIFO = FifoKmsg(tmp / "kmsg")
        config.write_text(f'listen = "127.0.0.1:{agent_port}"\nstate_dir = "{tmp / "state"}"\n'
                          +
                          f'hostname = "bench-node"\nsysfs = "{sysfs}"\nprocfs = "{tmp / "proc"}"\n'
                          "poll_interval_seconds = 10\ncollector_timeout_seconds = 5\nlog_level = \"warning\"\n"
                          "[validator]\nenabled = false\n"
                          # the bench's Xid lines are written from user space (facility user)
                          "[kernel_log]\naccept_injected = true\n"
                          + ("[collectors]\nnvml = false\n" if args.without_nvml else ""))
        env = nvmlsim.env(libdir, state)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # As installed: pip compiles the package's bytecode at install; an agent that compiled
        # its modules from source at start would hold their source and compiler state (~1.2 MB).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "nodewarden")], check=True, env=env)
        agent = subprocess.Popen([sys.executable, "-m", "nodewarden", "agent", "--config", str(config),
                                  *(["--kmsg", str(FIFO.path)] if FIFO is not None else [])], cwd=REPO,
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

        # 1. CPU over the window, scraped every 15 s like a Prometheus would (a long run: faults
        # injected and RSS sampled on their own periods)
        print(f"measuring CPU for {window:g} s ...", file=sys.stderr)
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(agent.pid), "--duration", str(int(window)),
                                    "--rate", "200", "--format", "raw", "--threads", "--output", args.py_spy,
                                    "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fault_domain = f"{random.randrange(0x1000, 0xffff):04x}"
        faults = {"xid": 0, "nvml_ecc": 0}
        ecc = [0] * 8
        rss_samples: list[tuple[float, float]] = []
        c0 = {"agent": cpu_seconds(agent.pid), "node_exporter": cpu_seconds(ne.pid)}
        t0 = time.monotonic()
        next_scrape = next_rss = t0
        next_fault = t0 + args.fault_every if args.fault_every else float("inf")
        n_faults = 0
        while (now := time.monotonic()) - t0 < window:
            if now >= next_scrape:
                get(a_url)
                get(n_url)
                next_scrape += 15.0
            if long_run and now >= next_rss:
                rss_samples.append((round(now - t0, 1), rss_mb(agent.pid)["VmRSS"]))
                next_rss += args.rss_every
            if now >= next_fault:
                if n_faults % 2 == 0 or args.without_nvml:
                    write_kmsg(xid_line(f"{fault_domain}:{n_faults % 8:02x}:00"))
                    faults["xid"] += 1
                else:
                    gpu = (n_faults // 2) % 8
                    ecc[gpu] += 1
                    nvmlsim.update_gpu(state, gpu, {"ecc": {"corrected": {"volatile": ecc[gpu], "aggregate": ecc[gpu]}}})
                    faults["nvml_ecc"] += 1
                n_faults += 1
                next_fault += args.fault_every
            nxt = min(next_scrape, next_rss if long_run else float("inf"), next_fault, t0 + window)
            time.sleep(max(0.0, nxt - time.monotonic()))
        elapsed = time.monotonic() - t0
        c1 = {"agent": cpu_seconds(agent.pid), "node_exporter": cpu_seconds(ne.pid)}
        if long_run:
            rss_samples.append((round(elapsed, 1), rss_mb(agent.pid)["VmRSS"]))
        profile = None
        if spy is not None:
            spy.wait(timeout=60)
            profile = top_frames(Path(args.py_spy))
        cpu = {k: {"cpu_seconds": round(c1[k] - c0[k], 3),
                   "cpu_seconds_per_hour": round((c1[k] - c0[k]) * 3600 / elapsed, 2)} for k in c0}
        long_result = None
        if long_run:
            # the last NVML fault shows at the next poll (10 s): wait for it outside the window
            def seen() -> dict[str, int]:
                body = get(a_url)
                return {"xid": int(total(body, XID, pci_bus_id=f"{fault_domain}:")),
                        "nvml_ecc": int(total(body, ECC, type="corrected", scope="aggregate"))}
            end = time.monotonic() + 25.0
            while (counted := seen()) != faults and time.monotonic() < end:
                time.sleep(0.5)
            slope = slope_per_hour(rss_samples)
            late = slope_per_hour([(t, v) for t, v in rss_samples if t >= elapsed / 2])  # warm-up left out
            long_result = {
                "duration_seconds": round(elapsed, 1), "fault_every_seconds": args.fault_every,
                "faults_injected": faults, "faults_counted": counted, "all_counted": counted == faults,
                "rss_every_seconds": args.rss_every,
                "rss_samples_mb": [{"t_s": t, "VmRSS": v} for t, v in rss_samples],
                "rss_first_mb": rss_samples[0][1], "rss_last_mb": rss_samples[-1][1],
                "rss_slope_mb_per_hour": round(slope, 3) if slope is not None else None,
                "rss_slope_mb_per_hour_second_half": round(late, 3) if late is not None else None,
                "note": "CPU figures are over the whole duration; Xid faults: one line into /dev/kmsg; "
                        "nvml_ecc: a corrected ECC error (+1 volatile and aggregate) on one simulated GPU",
            }
            print(f"long run: {elapsed:.0f} s, faults {faults} counted {counted}, RSS {rss_samples[0][1]} -> "
                  f"{rss_samples[-1][1]} MB, slope {long_result['rss_slope_mb_per_hour']} MB/h, "
                  f"agent CPU {cpu['agent']['cpu_seconds_per_hour']} s/h", file=sys.stderr)

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
        variants = None
        if args.variants:
            variants = {name: {v: render_times(url, headers, args.scrapes) for v, headers in VARIANTS.items()}
                        for name, url in (("agent", a_url), ("node_exporter", n_url))}
            for name, vs in variants.items():
                print(f"render {name}: " + ", ".join(f"{v} {r['median_ms']} ms {r['bytes']} B" for v, r in vs.items()),
                      file=sys.stderr)

        # 3. kernel log line -> counted on /metrics
        domain = f"{random.randrange(0x1000, 0xffff):04x}"
        pat = re.compile(rb'nodewarden_gpu_xid_errors_total\{[^}]*pci_bus_id="' + domain.encode()
                         + rb':07:00\.0"[^}]*\} ([0-9.e+]+)')
        delays = []
        for i in range(args.lines):
            line = xid_line(f"{domain}:07:00")
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

        # 4. a kmsg storm
        storm_result = storm(args, agent.pid, a_url, tmp) if args.storm_rate is not None else None

        result = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["python3", "bench/agent_overhead.py", *sys.argv[1:]]),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                        "node_exporter": ne_version[0] if ne_version else None},
            "setup": {"gpus": 0 if args.without_nvml else 8,
                      "gpu_source": "none: NVML collector off" if args.without_nvml else "tests/nvmlsim (NVML simulator)",
                      "sysfs": "tests/fixtures/sysfs/h100-hgx-ndr (8 NDR IB ports + RoCE LAG)",
                      "poll_interval_seconds": 10, "kernel_log": "a FIFO of kmsg records (--kmsg-fifo)" if args.kmsg_fifo else "real /dev/kmsg",
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
            "profile_top_self": profile,
            "targets": {"agent_cpu_per_hour_max": "2 x node_exporter's in this run",
                        "agent_render_median_max": "node_exporter's median in this run",
                        "agent_rss_mb_max": 30, "kmsg_p99_seconds_max": 0.2},
        }
        for key, part in (("render_variants", variants), ("long_run", long_result), ("storm", storm_result)):
            if part is not None:
                result[key] = part
        ne_cpu = cpu["node_exporter"]["cpu_seconds_per_hour"]
        result["ratios"] = {
            "cpu_agent_over_node_exporter": round(cpu["agent"]["cpu_seconds_per_hour"] / ne_cpu, 2) if ne_cpu else None,
            "render_agent_over_node_exporter": round(render["agent"]["median_ms"] / render["node_exporter"]["median_ms"], 2),
            "rss_agent_over_node_exporter": round(rss["agent"]["VmRSS"] / rss["node_exporter"]["VmRSS"], 2),
        }
        result["targets_met"] = {
            "cpu": bool(ne_cpu) and cpu["agent"]["cpu_seconds_per_hour"] <= 2 * ne_cpu,
            "render": render["agent"]["median_ms"] <= render["node_exporter"]["median_ms"],
            "rss": rss["agent"]["VmRSS"] <= 30,
            "kmsg_p99": result["kmsg_to_metrics_seconds"]["p99"] < 0.2,
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

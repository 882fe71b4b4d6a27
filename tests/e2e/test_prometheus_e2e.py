"""End to end through a real Prometheus: the agent (kernel log on, the generated sysfs fixture tree of an
HGX H100 NDR node with a Sandy Bridge EDAC tree merged in, the NVML simulator with 8 GPUs,
polling every second) scraped every second by Debian's ``prometheus``; faults are injected at
the lowest boundary (a line into the real ``/dev/kmsg``, the simulator's state file, sysfs
attribute files) and every check is a PromQL query over Prometheus's HTTP API, polled with a
deadline.

Needs root (writing into ``/dev/kmsg``), ``prometheus`` on PATH (Debian: ``apt-get install
prometheus``) and a C compiler (the simulator); skipped otherwise. The ring buffer keeps lines
of earlier runs, so the kernel-log lines carry labels unique to this run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
from kmsgtools import free_port, kmsg_refusal, write_kmsg

from tests import envneeds

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
DEADLINE_S = 20.0  # each wait
PROMETHEUS = shutil.which("prometheus")


pytestmark = [envneeds.needs_kmsg_write(kmsg_refusal()),
              envneeds.needs(PROMETHEUS is None, "prometheus", "scrapes the agent (Debian: apt-get install prometheus)")]


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, promql: str) -> list[float]:
        """Values of an instant query's vector result (empty when no series)."""
        body = json.loads(http_get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
        if body.get("status") != "success":
            raise ValueError(f"{promql}: {body}")
        return [float(r["value"][1]) for r in body["data"]["result"]]

    def value(self, promql: str) -> float | None:
        v = self.query(promql)
        if len(v) > 1:
            raise AssertionError(f"{promql}: {len(v)} series, expected one")
        return v[0] if v else None


def wait_for(what: str, check: Callable[[], bool], procs: dict[str, subprocess.Popen[bytes]],
             logs: dict[str, Path], deadline_s: float = DEADLINE_S) -> float:
    """Poll ``check`` until true; returns seconds waited. Fails naming ``what`` (with the logs'
    tails) after the deadline or when a process died."""
    t0 = time.monotonic()
    last: object = None
    while time.monotonic() - t0 < deadline_s:
        for name, p in procs.items():
            if p.poll() is not None:
                pytest.fail(f"{name} exited with {p.returncode} while waiting for {what}:\n"
                            f"{logs[name].read_text()[-4000:]}")
        try:
            if check():
                return time.monotonic() - t0
            last = None
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.2)
    tails = "\n".join(f"--- {n}:\n{p.read_text()[-3000:]}" for n, p in logs.items())
    pytest.fail(f"timed out after {deadline_s}s waiting for {what} (last error: {last!r})\n{tails}")


def stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)



def start_prometheus(config: Path, port: int, workdir: Path, log: Path) -> subprocess.Popen[bytes]:
    """A real Prometheus on 127.0.0.1:``port`` with ``config``, its TSDB in ``workdir``, output in ``log``."""
    with open(log, "wb") as f:
        return subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            cwd=workdir, stdout=f, stderr=subprocess.STDOUT)

def test_faults_reach_prometheus(tmp_path: Path) -> None:
    from tests import nvmlsim

    rnd = random.Random()
    domain = f"{rnd.randrange(0x1000, 0xffff):04x}"  # a PCI domain no earlier run used
    mc = rnd.randrange(100, 10_000)  # an EDAC memory controller number likewise
    pci = f"{domain}:07:00.0"

    # sysfs: the H100 NDR node, with the Sandy Bridge EDAC tree merged in
    sysfs = tmp_path / "sys"
    shutil.copytree(FIXTURES / "h100-hgx-ndr", sysfs, symlinks=True)
    shutil.copytree(FIXTURES / "edac-sbridge-dimm" / "devices" / "system" / "edac",
                    sysfs / "devices" / "system" / "edac", symlinks=True)
    ib_port = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    dimm = sysfs / "devices" / "system" / "edac" / "mc" / "mc0" / "dimm6"
    assert (dimm / "dimm_label").read_text().strip() == "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
    (tmp_path / "proc").mkdir()

    libdir = nvmlsim.build(tmp_path)
    nvml_state = nvmlsim.write_state(tmp_path / "nvml.json", gpus=nvmlsim.default_gpus(8))

    agent_port, prom_port = free_port(), free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        f'listen = "127.0.0.1:{agent_port}"\nstate_dir = "{tmp_path / "state"}"\nhostname = "e2e-node"\n'
        f'sysfs = "{sysfs}"\nprocfs = "{tmp_path / "proc"}"\n'
        "poll_interval_seconds = 1\ncollector_timeout_seconds = 2\n"
        "[collectors]\nkernel_log = true\n[kernel_log]\naccept_injected = true\n[validator]\nenabled = false\n")
    prom_config = tmp_path / "prometheus.yml"
    prom_config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: nodewarden\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{agent_port}']\n")

    env = nvmlsim.env(libdir, nvml_state)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    logs = {"agent": tmp_path / "agent.log", "prometheus": tmp_path / "prometheus.log"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with open(logs["agent"], "wb") as f:
            procs["agent"] = subprocess.Popen([sys.executable, "-m", "nodewarden", "agent", "--config", str(config)],
                                              cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        procs["prometheus"] = start_prometheus(prom_config, prom_port, tmp_path, logs["prometheus"])
        prom = Prom(prom_port)

        def w(what: str, check: Callable[[], bool]) -> float:
            return wait_for(what, check, procs, logs)

        w("the agent's kernel log followed", lambda: json.loads(
            http_get(f"http://127.0.0.1:{agent_port}/healthz"))["kmsg_readable"] is True)
        w("the agent's target up in Prometheus", lambda: prom.value('up{job="nodewarden"}') == 1)
        collectors = ("kernel_log", "nvml", "infiniband", "edac", "pcie", "netclass")
        w("every collector succeeding", lambda: all(
            prom.value(f'nodewarden_collector_success{{collector="{c}"}}') == 1 for c in collectors))
        assert prom.value('count(nodewarden_gpu_info)') == 8

        # 1. an Xid 48 written into the kernel ring buffer
        xid = f'nodewarden_gpu_xid_errors_total{{pci_bus_id="{pci}",xid="48"}}'
        assert prom.value(xid) is None
        write_kmsg(f"<3>NVRM: Xid (PCI:{domain}:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
                   "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 "
                   "partition 7, subpartition 1.")
        w("the Xid 48 in Prometheus", lambda: prom.value(xid) == 1)

        # 2. an uncorrected volatile ECC rise on GPU 3
        ecc = 'nodewarden_gpu_ecc_errors_total{gpu="3",type="uncorrected",scope="volatile"}'
        before = prom.value(ecc)
        assert before == 0
        nvmlsim.update_gpu(nvml_state, 3, {"ecc": {"uncorrected": {"volatile": 2, "aggregate": 2}}})
        w("GPU 3's ECC count up by 2", lambda: prom.value(ecc) == before + 2)
        assert prom.value('nodewarden_gpu_ecc_errors_total{gpu="2",type="uncorrected",scope="volatile"}') == 0

        # 3. GPU 5 falls off the bus
        assert prom.value('nodewarden_gpu_lost{gpu="5"}') == 0
        nvmlsim.update_gpu(nvml_state, 5, {"lost": True})
        w("GPU 5 lost", lambda: prom.value('nodewarden_gpu_lost{gpu="5"}') == 1)
        assert prom.value('nodewarden_gpu_lost{gpu="4"}') == 0
        assert prom.value('nodewarden_collector_success{collector="nvml"}') == 1

        # 4. an IB flap on mlx5_0 port 1: down, seen, back within seconds
        port = 'device="mlx5_0",port="1"'
        assert prom.value(f"nodewarden_ib_flash_cuts_total{{{port}}}") == 0
        (ib_port / "state").write_text("1: DOWN\n")
        (ib_port / "phys_state").write_text("3: Disabled\n")
        # the two files are written one after the other: a poll between them sees DOWN with LinkUp,
        # so the wait is for both (each scrape holds one poll's values)
        w("mlx5_0/1 DOWN and Disabled in Prometheus",
          lambda: (prom.value(f"nodewarden_ib_port_state{{{port}}}"),
                   prom.value(f"nodewarden_ib_port_phys_state{{{port}}}")) == (1, 3))
        (ib_port / "state").write_text("4: ACTIVE\n")
        (ib_port / "phys_state").write_text("5: LinkUp\n")
        w("the flash cut", lambda: prom.value(f"nodewarden_ib_flash_cuts_total{{{port}}}") == 1)
        w("mlx5_0/1 ACTIVE again", lambda: prom.value(f"nodewarden_ib_port_state{{{port}}}") == 4)
        assert prom.value(f"min_over_time(nodewarden_ib_port_state{{{port}}}[5m])") == 1
        assert prom.value(f"nodewarden_ib_link_outages_total{{{port}}}") == 0
        assert prom.value('nodewarden_ib_flash_cuts_total{device="mlx5_1",port="1"}') == 0

        # 5. EDAC: a corrected error counted in sysfs, and an EDAC line in the kernel log
        ce = 'nodewarden_edac_correctable_errors_total{controller="mc0",dimm="CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"}'
        assert prom.value(ce) == 1
        (dimm / "dimm_ce_count").write_text("4\n")
        mc0_ce = dimm.parent / "ce_count"
        mc0_ce.write_text(f"{int(mc0_ce.read_text()) + 3}\n")
        w("the sysfs EDAC count up by 3", lambda: prom.value(ce) == 4)
        label = f"CPU_SrcID#{mc}_Ha#0_Chan#2_DIMM#0"
        write_kmsg(f"<3>EDAC MC{mc}: 2 CE memory read error on {label} (channel:2 slot:0 page:0x849923 "
                   "offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 "
                   "channel_mask:4 rank:0)")
        logged = f'nodewarden_edac_logged_errors_total{{controller="mc{mc}",dimm="{label}",type="corrected"}}'
        w("the kernel log's EDAC line", lambda: prom.value(logged) == 2)

        # 6. a hung NVML driver: nvml fails alone, the scrape keeps answering, then it recovers
        others = [c for c in collectors if c != "nvml"]
        state = nvmlsim.read_state(nvml_state)
        nvmlsim.write_state(nvml_state, state["gpus"], **{**{k: v for k, v in state.items() if k != "gpus"},
                                                          "hang_seconds": 4})
        w("nvml failing while hung", lambda: prom.value('nodewarden_collector_success{collector="nvml"}') == 0)
        # a few more scrapes while hung: counted in Prometheus (every scrape of the run is in the
        # hour's window), not guessed from seconds slept
        scrapes = 'count_over_time(up{job="nodewarden"}[1h])'
        hung_at = prom.value(scrapes)
        assert hung_at is not None and hung_at >= 1
        w("three more scrapes while nvml hangs", lambda: (prom.value(scrapes) or 0) >= hung_at + 3)
        assert prom.value('nodewarden_collector_success{collector="nvml"}') == 0  # still hung for them
        assert prom.value('up{job="nodewarden"}') == 1
        assert prom.value('min_over_time(up{job="nodewarden"}[10s])') == 1
        for c in others:
            assert prom.value(f'nodewarden_collector_success{{collector="{c}"}}') == 1, c
        assert prom.value('nodewarden_gpu_lost{gpu="5"}') == 1  # the last snapshot still served
        nvmlsim.write_state(nvml_state, state["gpus"], **{k: v for k, v in state.items() if k != "gpus"})
        w("nvml recovered", lambda: prom.value('nodewarden_collector_success{collector="nvml"}') == 1)
        assert prom.value(ecc) == 2 and prom.value(xid) == 1
        assert prom.value('min_over_time(up{job="nodewarden"}[1m])') == 1
    finally:
        for p in procs.values():
            stop(p)
    assert procs["agent"].returncode == 0, logs["agent"].read_text()[-4000:]

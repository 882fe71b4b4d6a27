"""End to end from a fault to a page: the agent (kernel log on, the HGX H100 NDR sysfs tree with
AER statistics and a Sandy Bridge EDAC tree merged in, the NVML simulator with 8 GPUs, polling
every second) scraped every second by Debian's ``prometheus`` with the rule files of
``dashboards/`` loaded (built with short windows and no ``for``), sending to Debian's
``prometheus-alertmanager``. One fault of each kind is injected at the lowest boundary (a line
into the real ``/dev/kmsg``, the simulator's state file, sysfs attribute files, the validator's
report in the state directory), the NVSwitch, PCIe and reset kinds too (a fatal and a
non-fatal NVSwitch SXid and a non-fatal SXid storm, an uncorrected AER record on a NIC function and a fatal one on a
GPU with its recovery lines, corrected AER errors past the storm limit, an
``NV_ERR_RESET_REQUIRED`` assertion, an Xid 154 asking for a reboot, NVML recovery actions); then:

* every alert that should fire is listed by Alertmanager's ``/api/v2/alerts`` with its labels
  (alertname, severity, cluster, node, the device) and its annotations (summary, description,
  runbook_url), and no alert fires that should not (an application Xid, a healthy GPU, port or
  DIMM; the agent down while it is up; an SXid storm for one non-fatal SXid, a corrected AER
  count below the limit; an uncorrected AER alert for the GPU whose error pages as a GPU-lost
  precursor; a hardware-Xid alert for the informational Xid 154);
* every query of every dashboard panel (Grafana variables expanded) and every recording rule
  runs through Prometheus's HTTP API without error, and every one returns data;
* the agent stopped: NodewardenAgentDown; started again with its kmsg cursor before the ring
  buffer's oldest record: NodewardenKmsgRecordsLost.

A metric renamed in the agent, a label the rules drop, a panel querying a series nobody
exports: each breaks this test.

Runs only with ``NODEWARDEN_WRITE_KMSG=1`` (it writes into this machine's ``/dev/kmsg``; skipped
without, also in CI). Then needs root, ``prometheus``, ``prometheus-alertmanager`` and a C
compiler (the simulator): skipped without one, except under ``CI=true``, where a missing one
fails the test. The ring buffer keeps the lines of earlier runs: this run's Xids and SXids name
a PCI domain no earlier run used (the AER records name the fixture's functions, whose sysfs
counters rise with them; an earlier run's record is in the first scrape, and a rise after it
counts exactly). About 35 s.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from alerttools import ALERTMANAGER, AlertWatcher, get_json, oldest_kmsg_seq, run_query, start_alertmanager
from kmsgtools import free_port, kmsg_refusal, write_kmsg
from prometheus_client.parser import text_string_to_metric_families
from test_prometheus_e2e import PROMETHEUS, Prom, http_get, start_prometheus, stop, wait_for

from tests import envneeds

from dashboards.mixin import build, config, promql

pytestmark = pytest.mark.kmsg

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
NODE, CLUSTER = "e2e-node", "e2e"
FLAP = {"device": "mlx5_0", "port": "1"}  # the IB port of the flash-cut storm
RUNBOOK = "https://github.com/nodewarden/nodewarden/blob/main/dashboards/runbooks.md#"
# PCIe AER faults on functions of the HGX tree (h100-hgx-ndr-aer), each with its upstream ports:
GPU_AER_FUNCTION = "0000:ab:00.0"  # GPU 5 (NVML's 00000000:AB:00.0), below 0000:a9:00.0 and 0000:a7:01.0
NIC_AER_FUNCTION = "0000:3c:00.0"  # mlx5_2 (ConnectX-7 15b3:1021), below 0000:39:02.0 and 0000:37:01.0
CORRECTED_AER_FUNCTION = "0000:ad:00.0"  # mlx5_5, below 0000:a9:02.0 and 0000:a7:01.0

# The rules as the test loads them: every window a few seconds, no `for`, evaluated every second.
FAULT_WINDOW_S = 15
CFG = dataclasses.replace(
    config.DEFAULT, fault_window=f"{FAULT_WINDOW_S}s", for_short="0s", for_long="0s",
    flash_cut_storm_window="1m", edac_ce_window="1m", validator_stale_seconds=3600, interval="1s",
    # the storms over the fault window, at counts a few lines reach: 2 non-fatal SXids on one
    # switch, 10 corrected AER errors on one function
    sxid_storm_window=f"{FAULT_WINDOW_S}s", sxid_storm_count=2,
    aer_corrected_storm_window=f"{FAULT_WINDOW_S}s", aer_corrected_storm_count=10)
VALIDATOR_AGE_S = 2 * 3600  # the validator report's age: past CFG.validator_stale_seconds
STEP_S = 15  # the panels' $__interval
SCRAPE_S = 1  # scrape and evaluation interval; the range queries' step
# Grafana's $__rate_interval, max($__interval + scrape interval, 4 x scrape interval), with the
# data source's scrape interval set to this Prometheus's (1 s), not Grafana's default (15 s: 60 s,
# longer than this Prometheus has run, so no first event would count in it)
RATE_INTERVAL_S = max(STEP_S + SCRAPE_S, 4 * SCRAPE_S)


@pytest.fixture
def requirements() -> None:
    """What this machine must have for the test (tests/envneeds.py: a skip, a failure under CI=true)."""
    envneeds.kmsg_write(kmsg_refusal())
    if PROMETHEUS is None:
        envneeds.need("prometheus", "evaluates the rules (Debian: apt-get install prometheus)")
    if ALERTMANAGER is None:
        envneeds.need("prometheus-alertmanager", "receives the alerts (Debian: apt-get install prometheus-alertmanager)")
    envneeds.command("gcc", "the C compiler that builds the NVML simulator", "cc")


# ---------------------------------------------------------------------------------------------
# The host: fixture trees, simulator state, validator report, configuration


@dataclasses.dataclass
class Host:
    root: Path
    sysfs: Path
    procfs: Path
    state_dir: Path
    nvml_state: Path
    domain: str  # the PCI domain of this run's Xid GPUs and NVSwitches (4 hex digits)
    switches: tuple[int, int]  # this run's NVSwitch numbers: the fatal SXid's, the storm's

    def ib_port(self, device: str, port: int = 1) -> Path:
        return self.sysfs / "class" / "infiniband" / device / "ports" / str(port)

    def mc(self, n: int) -> Path:
        return self.sysfs / "devices" / "system" / "edac" / "mc" / f"mc{n}"

    def pci(self, bus_id: str) -> Path:
        return self.sysfs / "bus" / "pci" / "devices" / bus_id


def make_host(tmp: Path) -> Host:
    from tests import nvmlsim

    rnd = random.Random()
    domain = f"{rnd.randrange(0x1000, 0xffff):04x}"
    switch = rnd.randrange(100, 10_000)
    sysfs = tmp / "sys"
    # h100-hgx-ndr-aer: the h100-hgx-ndr tree plus every GPU's and NIC's AER statistics files
    shutil.copytree(FIXTURES / "h100-hgx-ndr-aer", sysfs, symlinks=True)
    shutil.copytree(FIXTURES / "edac-sbridge-dimm" / "devices" / "system" / "edac",
                    sysfs / "devices" / "system" / "edac", symlinks=True)
    procfs = tmp / "proc"
    # a ninth GPU, on a bus the HGX board does not use: it goes missing later (NodewardenGpuMissing)
    gpus = nvmlsim.default_gpus(8) + [nvmlsim.h100_gpu(8, bus_id="00000000:E9:00.0")]
    # GPUs 1 and 2 carry this run's PCI domain (NVML's 8-digit form): the Xid lines below name
    # them, and the driver's procfs files give their minor numbers, as on a real node.
    for i in (1, 2):
        bus = gpus[i]["pci_bus_id"].split(":", 1)[1]  # "2A:00.0"
        gpus[i]["pci_bus_id"] = f"0000{domain.upper()}:{bus}"
        info = procfs / "driver" / "nvidia" / "gpus" / f"{domain}:{bus.lower()}" / "information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t {i}\n")
    # GPU 0 reports page retirement (a driver that supports it: the dashboards show retired
    # pages beside remapped rows); two single-bit pages, none pending: no page
    gpus[0]["not_supported"] = []
    gpus[0]["retired_pages"] = {"single_bit_ecc": 2, "double_bit_ecc": 0, "pending": 0}
    # GPU 5 (the fixture's 0000:ab:00.0) gets a fatal AER record before it is lost: the driver's
    # procfs file maps the record's function to its minor number
    info = procfs / "driver" / "nvidia" / "gpus" / GPU_AER_FUNCTION / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t 5\n")
    # a driver with NVML's recovery-action field (r570): every GPU starts at none
    for gpu in gpus:
        gpu["recovery_action"] = 0
    host = Host(tmp, sysfs, procfs, tmp / "state", tmp / "nvml.json", domain, (switch, switch + 1))
    nvmlsim.write_state(host.nvml_state, gpus=gpus, driver_version="570.195.03", nvml_version="12.570.195.03")
    host.state_dir.mkdir()
    write_validator_report(host.state_dir, time.time() - VALIDATOR_AGE_S)
    return host


def write_validator_report(state_dir: Path, finished: float, repaired: bool = False) -> None:
    """A finished run with a failing GEMM check (``validate.json``, as ``nodewarden validate
    --json`` writes it) and the schedule that ran it (``schedule.json``): the agent exports both
    at start and is not due to run the validator again for a year. ``repaired``: the
    operator's rerun after the repair (``nodewarden validate --json <state_dir>/validate.json``),
    every check passing but storage's warning; the schedule is left alone."""
    from nodewarden.agent import schedule
    from nodewarden.validator import report
    from nodewarden.validator.result import CheckResult, exit_code

    if repaired:
        gemm = CheckResult("gemm", "pass", device="cuda", profile="h100-sxm")
        gemm.measure("bf16_flops", 698e12, "FLOP/s", threshold=600e12, device="GPU-2")
    else:
        gemm = CheckResult("gemm", "fail", reason="GPU 2: 412 TFLOP/s below 600 TFLOP/s", action="drain and run "
                           "`nodewarden validate --checks gemm` after a reset", device="cuda", profile="h100-sxm")
        gemm.measure("bf16_flops", 412e12, "FLOP/s", threshold=600e12, device="GPU-2")
    gemm.measure("bf16_flops", 702e12, "FLOP/s", threshold=600e12, device="GPU-3")
    mem = CheckResult("host_memory_bandwidth", "pass", device="cpu", profile="h100-sxm")
    mem.measure("triad_bandwidth", 3.1e11, "B/s", threshold=2.0e11)
    storage = CheckResult("storage", "warn", reason="/scratch 91% full")
    storage.measure("used_ratio", 0.91, "ratio", threshold=0.9, op="<=")
    allreduce = (CheckResult("allreduce", "pass", device="cuda") if repaired else
                 CheckResult("allreduce", "error", reason="8 NVIDIA GPU(s) on this node but CUDA sees none"))
    results = [gemm, mem, storage, allreduce]
    end = dt.datetime.fromtimestamp(finished, dt.timezone.utc)
    start = end - dt.timedelta(seconds=300)
    doc = report.build(results, NODE, "h100-sxm", "cuda", False, start, end, exit_code(results))
    report.write_json(doc, state_dir / schedule.REPORT_FILE)
    if repaired:
        return
    st = schedule.ScheduleState(first_seen=finished - 86400, last_attempt=start.timestamp(),
                                last_exit_code=doc["exit_code"], last_finished=finished)
    (state_dir / schedule.SCHEDULE_FILE).write_text(json.dumps(st.to_dict()))


def agent_config(host: Host, port: int) -> Path:
    path = host.root / "agent.toml"
    path.write_text(
        f'listen = "127.0.0.1:{port}"\nstate_dir = "{host.state_dir}"\nhostname = "{NODE}"\n'
        f'sysfs = "{host.sysfs}"\nprocfs = "{host.procfs}"\n'
        "poll_interval_seconds = 1\ncollector_timeout_seconds = 2\n"
        "[collectors]\nkernel_log = true\n[kernel_log]\naccept_injected = true\n"
        # a year between runs; should one still come due, bad arguments end it at once (exit 2)
        # and the report above stays the exported one
        '[validator]\nenabled = true\ninterval_days = 366\nargs = ["--no-such-option"]\n')
    return path


def rule_files(tmp: Path) -> list[Path]:
    """The alert and recording rule files of ``dashboards/``, built from :data:`CFG`."""
    out = []
    for rel, text in build.files(CFG).items():
        if rel.startswith(("alerts/", "rules/")):
            path = tmp / "rules" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            out.append(path)
    assert len(out) == 2, out
    return out


def scrape_job() -> dict[str, Any]:
    """The ``nodewarden`` job of ``deploy/prometheus/prometheus.yml``: its relabelling is the
    one a deployment runs (``node`` from the target's address unless the target names it)."""
    doc = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in doc["scrape_configs"] if j["job_name"] == "nodewarden"]
    return job


def prometheus_config(tmp: Path, agent_port: int, am_port: int, rules: list[Path]) -> Path:
    job = scrape_job()
    cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{
            "job_name": "nodewarden", "scrape_interval": "1s", "scrape_timeout": "1s",
            # an IP address: the target names its node, as in deploy/prometheus/targets/example.yaml
            "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"],
                                "labels": {"cluster": CLUSTER, "node": NODE}}],
            "relabel_configs": job.get("relabel_configs", []),
        }],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------------------
# Faults (each on its own device, so that every alert's label set is unambiguous)


def xid_lines(domain: str) -> tuple[list[str], list[str]]:
    """(hardware: an Xid 48 and an Xid 63 (a GPU memory Xid of Table VII) on GPU 1; application:
    three Xid 13 on GPU 2)."""
    hw = [f"<3>NVRM: Xid (PCI:{domain}:2a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
          "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, "
          "subpartition 1.",
          f"<3>NVRM: Xid (PCI:{domain}:2a:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
          "(0x00000012bac1c3e0) marked for remapping, reset gpu to activate."]
    app = [f"<3>NVRM: Xid (PCI:{domain}:3a:00): 13, pid={4100 + i}, name=python3, Graphics SM Warp Exception "
           f"on (GPC {i}, TPC 1, SM 0): Illegal Instruction Encoding" for i in range(3)]
    return hw, app


def unreadable_xid_line(domain: str) -> str:
    """An Xid line without a readable code: counted in collector_unparsed_lines_total, no fault."""
    return f"<3>NVRM: Xid (PCI:{domain}:3a:00): (unreadable), pid=4199, name=python3"


def edac_log_line(mc: int) -> str:
    """One corrected error of a memory controller numbered for this run (sb_edac's format): the
    kernel-log EDAC series, below the corrected-rate limit."""
    return (f"<3>EDAC MC{mc}: 1 CE memory read error on CPU_SrcID#{mc}_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 "
            "page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 "
            "channel_mask:4 rank:0)")


def mce_lines(tag: int) -> list[str]:
    """One uncorrected, recoverable machine-check record (MCi_STATUS VAL|UC|EN|MISCV|ADDRV, PCC
    clear: a memory error the kernel recovered from), as print_mce() prints it."""
    return ["<4>mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 7: bc00000000010091",
            f"<4>mce: [Hardware Error]: TSC {tag:x} ADDR 2ffd4a3c0 MISC 140401086",
            "<4>mce: [Hardware Error]: PROCESSOR 0:806f8 TIME 1732700000 SOCKET 0 APIC 18 microcode 2b000571"]


def nvswitch_name(n: int) -> str:
    return f"nvidia-nvswitch{n}"


def nvswitch_pci(domain: str, n: int) -> str:
    """This run's NVSwitch ``n`` (of :attr:`Host.switches`): a PCI id in the run's domain."""
    return f"{domain}:{n % 0x100:02x}:00.0"


def sxid_lines(domain: str, switches: tuple[int, int]) -> list[str]:
    """NVSwitch SXid errors, each as the driver prints it (NVSWITCH_PRINT_SXID: ``Data {...}``,
    the description of NVSWITCH_REPORT_FATAL/_NONFATAL ``Fatal|Non-fatal, Link %02d %s``, then
    ``Severity N Engine instance N Sub-engine instance N``; S-001's shape). The first switch: a
    fatal SXid 12024 (egress output ECC DBE) and one non-fatal 22013 (below the storm count);
    the second: two non-fatal ones, 22013 and a 12028 of which only the ``Data`` line is printed
    (S-101; severity from the SXid catalog), a storm at the test's count of 2."""
    def group(n: int, code: int, desc: str | None, data: str, engine: int) -> list[str]:
        head = f"<3>{nvswitch_name(n)}: SXid (PCI:{nvswitch_pci(domain, n)}): {code}, "
        out = [head + "Data {" + data + "}"]
        if desc is not None:
            out += [head + desc, head + f"Severity {0 if desc.startswith('Non') else 1} Engine instance {engine:02d} "
                                        "Sub-engine instance 00"]
        return out

    s22013 = ("0x0000002b, 0x0000002b, 0x00000000, 0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, "
              "0x00000000")
    a, b = switches
    return [*group(a, 12024, "Fatal, Link 32 egress output ECC DBE error (First)",
                   "0x00000020, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, "
                   "0x00000000", 32),
            *group(a, 22013, "Non-fatal, Link 44 Minion Link DLREQ interrupt", s22013, 44),
            *group(b, 22013, "Non-fatal, Link 44 Minion Link DLREQ interrupt", s22013, 44),
            *group(b, 12028, None, "0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, "
                                   "0x5a001100, 0x00000000, 0x00000000", 0)]


def aer_lines() -> list[str]:
    """PCIe AER records as drivers/pci/pcie/aer.c prints them (aer_print_port_info's ``error
    received``, aer_print_error's ``PCIe Bus Error``, device and bit lines, __print_tlp_header)
    and the recovery of drivers/pci/pcie/err.c (pcie_do_recovery, report_error_detected,
    aer_root_reset), P-101's shapes on the HGX tree:

    * GPU 5: an uncorrected (fatal) Completion Timeout; the nvidia driver has no AER handler
      (``can't recover``), its switch port's link is reset, the recovery fails: one GPU-lost
      precursor (the fatal record; the ``can't recover`` line joined it);
    * mlx5_2: an uncorrected (non-fatal) Unsupported Request, recovered by mlx5_core;
    * mlx5_5: one corrected Bad TLP the log prints (the kernel counts the others in sysfs
      only, its log rate-limited)."""
    gpu, nic, cor = GPU_AER_FUNCTION, NIC_AER_FUNCTION, CORRECTED_AER_FUNCTION
    return [f"<6>pcieport 0000:a7:01.0: AER: Uncorrected (Fatal) error received: {gpu}",
            f"<3>nvidia {gpu}: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
            "(Requester ID)",
            f"<3>nvidia {gpu}: AER:   device [10de:2330] error status/mask=00004000/00000000",
            f"<3>nvidia {gpu}: AER:    [14] CmpltTO                (First)",
            f"<6>nvidia {gpu}: AER: can't recover (no error_detected callback)",
            "<6>pcieport 0000:a9:00.0: AER: Downstream Port link has been reset (0)",
            "<6>pcieport 0000:a9:00.0: AER: device recovery failed",
            f"<6>pcieport 0000:37:01.0: AER: Uncorrected (Non-Fatal) error received: {nic}",
            f"<3>mlx5_core {nic}: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
            "(Requester ID)",
            f"<3>mlx5_core {nic}: AER:   device [15b3:1021] error status/mask=00100000/00000000",
            f"<3>mlx5_core {nic}: AER:    [20] UnsupReq               (First)",
            f"<3>mlx5_core {nic}: AER:   TLP Header: 34000000 3c00000f 00000000 00000000",
            "<6>pcieport 0000:39:02.0: AER: device recovery successful",
            f"<6>pcieport 0000:a7:01.0: AER: Corrected error received: {cor}",
            f"<4>mlx5_core {cor}: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
            f"<4>mlx5_core {cor}: AER:   device [15b3:1021] error status/mask=00000040/00002000",
            f"<4>mlx5_core {cor}: AER:    [ 6] BadTLP                "]


def reset_required_lines(domain: str) -> list[str]:
    """W-101's ``NV_ERR_RESET_REQUIRED`` assertion (no PCI id: the GPU is not named), and an Xid
    154 on GPU 1 (X-040's shape: the driver's recovery action after its Xid 48 and 63) asking
    for the node to be rebooted."""
    return ["<3>NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
            "returned from status @ kernel_channel.c:2827",
            f"<3>NVRM: Xid (PCI:{domain}:2a:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
            "(Node Reboot Required)"]


def bump(path: Path, by: int) -> None:
    path.write_text(f"{int(path.read_text().split()[0]) + by}\n")


def bump_aer(path: Path, error: str, by: int) -> None:
    """Add ``by`` to one error of an ``aer_dev_*`` file and to its TOTAL_ERR_* line."""
    lines = []
    for line in path.read_text().splitlines():
        name, _, n = line.rpartition(" ")
        lines.append(f"{name} {int(n) + by}" if name == error or name.startswith("TOTAL_ERR_") else line)
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# What must fire (labels beyond alertname, cluster and node), and what may fire besides


@dataclasses.dataclass(frozen=True)
class Expect:
    alert: str
    labels: dict[str, str]  # severity and the device labels (alertname, cluster, node: all alerts)
    fault: str  # what was injected

    @classmethod
    def of(cls, alert: str, severity: str, fault: str, **labels: str) -> Expect:
        return cls(alert, {"severity": severity, **labels}, fault)


def expected(host: Host) -> list[Expect]:
    """Every alert the faults fire, with their labels; a label given as ``""`` must be absent (as
    Prometheus drops an empty one)."""
    e = Expect.of
    domain, (sw_fatal, sw_storm) = host.domain, host.switches
    return [
        e("NodewardenGpuHardwareXid", "critical", "kmsg: Xid 48 (DBE) on GPU 1",
          gpu="1", xid="48", pci_bus_id=f"{domain}:2a:00.0", action="drain"),
        e("NodewardenGpuHardwareXid", "critical", "kmsg: Xid 63 (row remap recorded) on GPU 1",
          gpu="1", xid="63", pci_bus_id=f"{domain}:2a:00.0", action="reset_gpu"),
        e("NodewardenGpuUncorrectableEcc", "critical", "NVML: GPU 3 uncorrected volatile ECC +2", gpu="3"),
        e("NodewardenGpuLost", "critical", "NVML: GPU 5 lost (NVML_ERROR_GPU_IS_LOST)", gpu="5"),
        e("NodewardenGpuRowRemapPending", "warning", "NVML: GPU 6 remapped rows pending", gpu="6"),
        e("NodewardenGpuRowRemapFailure", "critical", "NVML: GPU 7 row-remap failure", gpu="7"),
        e("NodewardenGpuNvlinkErrors", "warning", "NVML: GPU 4 link 3 replay/recovery/CRC errors rising",
          gpu="4", link="3"),
        e("NodewardenIbFlashCutStorm", "warning", "sysfs: mlx5_0/1 DOWN then ACTIVE, 3 times",
          device="mlx5_0", port="1"),
        e("NodewardenIbPortDown", "critical", "sysfs: mlx5_3/1 DOWN/Polling, held", device="mlx5_3", port="1"),
        e("NodewardenIbPortDegraded", "warning", "sysfs: mlx5_4/1 rate 200 Gb/sec (4X HDR), its peers 400",
          device="mlx5_4", port="1"),
        e("NodewardenEdacUncorrectable", "critical", "sysfs: mc0/dimm0 dimm_ue_count +1",
          controller="mc0", dimm="CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"),
        e("NodewardenEdacCorrectableRate", "warning", "sysfs: mc1/dimm2 dimm_ce_count +12 (limit 10 per window)",
          controller="mc1", dimm="mc#1channel#1slot#0"),
        e("NodewardenMachineCheck", "critical", "kmsg: an uncorrected (recoverable) MCE record", type="uncorrected"),
        e("NodewardenPcieLinkDowntrained", "warning", "sysfs: mlx5_7's function current_link_width 8 of 16",
          pci_bus_id="0000:dd:00.0", dimension="width"),
        e("NodewardenPcieLinkDowntrained", "warning", "sysfs: mlx5_6's function current_link_speed 16 of 32 GT/s",
          pci_bus_id="0000:bc:00.0", dimension="generation"),
        e("NodewardenPcieLinkDowntrained", "warning", "NVML: GPU 1's link width 8 of 16 (its function not in sysfs)",
          pci_bus_id=f"{domain}:2a:00.0", dimension="width", gpu="1"),
        e("NodewardenValidatorFailed", "critical", "validate.json: check gemm failed", check="gemm"),
        e("NodewardenValidatorIncomplete", "warning", "validate.json: check allreduce in error (CUDA sees no GPU)",
          check="allreduce"),
        e("NodewardenGpuMissing", "critical", "NVML: the simulator lists 8 of its 9 GPUs"),
        e("NodewardenValidatorStale", "warning", "validate.json finished 2 h ago (limit 1 h in the test)",
          reason="old_report"),
        e("NodewardenCollectorFailing", "warning", "NVML simulator hung 4 s", collector="nvml"),
        # NVSwitch, PCIe AER and reset-required kinds
        e("NodewardenNvswitchFatalSxid", "critical", "kmsg: fatal SXid 12024 (3 lines) on the first switch",
          switch=nvswitch_name(sw_fatal), pci_bus_id=nvswitch_pci(domain, sw_fatal), sxid="12024"),
        e("NodewardenNvswitchSxidStorm", "warning", "kmsg: 2 non-fatal SXids (22013, 12028) on the second switch",
          switch=nvswitch_name(sw_storm), pci_bus_id=nvswitch_pci(domain, sw_storm)),
        e("NodewardenGpuLostPrecursor", "critical", "kmsg: uncorrected (fatal) AER record on GPU 5's function",
          gpu="5", pci_bus_id=GPU_AER_FUNCTION, reason="fatal_aer"),
        e("NodewardenPcieAerUncorrected", "warning", "kmsg + sysfs: one uncorrected (non-fatal) UnsupReq on mlx5_2",
          pci_bus_id=NIC_AER_FUNCTION, aer_severity="non_fatal"),
        e("NodewardenPcieAerCorrectedStorm", "warning", "sysfs: mlx5_5 BadTLP +12 (limit 10), one of them in kmsg",
          pci_bus_id=CORRECTED_AER_FUNCTION),
        e("NodewardenGpuResetRequired", "critical", "kmsg: NV_ERR_RESET_REQUIRED assertion (no GPU named)",
          action="gpu_reset", gpu="", pci_bus_id=""),
        e("NodewardenGpuResetRequired", "critical", "NVML: GPU 6's recovery action gpu_reset",
          action="gpu_reset", gpu="6", pci_bus_id="0000:ba:00.0"),
        e("NodewardenNodeRebootRequired", "critical", "kmsg: Xid 154 to Node Reboot Required on GPU 1, and NVML",
          action="node_reboot", gpu="1", pci_bus_id=f"{domain}:2a:00.0"),
    ]


# Alerts that may fire besides the expected ones, each with the reason (all labels given must match).
ALLOWED = [
    # for: 0s: mlx5_0/1 is down for a poll or two during each flap of the storm
    ("NodewardenIbPortDown", {"device": "mlx5_0", "port": "1"}),
]


def unexpected(seen: list[dict[str, Any]], want: list[Expect]) -> list[dict[str, str]]:
    def covered(labels: dict[str, str]) -> bool:
        name = labels.get("alertname")
        for e in want:
            if e.alert == name and all(labels.get(k, "") == v for k, v in e.labels.items()):
                return True
        return any(name == a and all(labels.get(k, "") == v for k, v in m.items()) for a, m in ALLOWED)

    return [r["labels"] for r in seen if not covered(r["labels"])]


def check_alert(rec: dict[str, Any]) -> list[str]:
    """What is wrong with one alert as Alertmanager lists it (labels and annotations)."""
    labels, ann = rec["labels"], rec["annotations"]
    name = labels["alertname"]
    bad = []
    if labels.get("severity") not in ("critical", "warning", "info"):
        bad.append(f"severity {labels.get('severity')!r}")
    if labels.get("node") != NODE or labels.get("cluster") != CLUSTER:
        bad.append(f"node/cluster {labels.get('node')!r}/{labels.get('cluster')!r}")
    for key in ("summary", "description"):
        text = ann.get(key, "")
        if not text.strip() or "{{" in text or "<no value>" in text:
            bad.append(f"annotation {key} {text!r}")
    if ann.get("runbook_url") != RUNBOOK + name.lower():
        bad.append(f"runbook_url {ann.get('runbook_url')!r}")
    if NODE not in ann.get("description", "") and NODE not in ann.get("summary", ""):
        bad.append("neither summary nor description names the node")
    return bad


# ---------------------------------------------------------------------------------------------


def set_cursor_before_buffer(state_dir: Path, gap: int) -> int:
    """Rewrite the stopped agent's ``state.json`` (with its checksum, as the agent writes it) so
    that its kmsg cursor lies up to ``gap`` records before the ring buffer's oldest one, and
    delete the event journal. Returns the gap made: 0 when the buffer has not wrapped since boot
    (its oldest record is the first: no cursor lies before it), and nothing is changed."""
    from nodewarden.agent import state as st

    saved = st.load_state(state_dir)
    assert saved.kmsg is not None and saved.kmsg.boot_id, saved
    gap = min(gap, oldest_kmsg_seq() - 1)
    if gap < 1:
        return 0
    pos = st.KmsgPosition(saved.kmsg.boot_id, oldest_kmsg_seq() - 1 - gap)
    st.write_atomic(state_dir / st.STATE_FILE, st.state_bytes(dataclasses.replace(saved, kmsg=pos)))
    for path in state_dir.glob(st.JOURNAL_GLOB):
        path.unlink()
    return gap


def agent_series(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def agent_value(agent_port: int, name: str, labels: dict[str, str]) -> float | None:
    """One series' value on the agent's own /metrics (None when absent)."""
    return agent_series(agent_port).get((name, tuple(sorted(labels.items()))))


def panel_targets(range_s: int) -> list[tuple[str, str, str, bool]]:
    """(dashboard, panel title, expression with Grafana's variables expanded, instant) of every
    query of every panel: the expressions :func:`grafana.panel_queries` lists, each with its
    target's kind (an instant target: a stat or table; else a range: a time series)."""
    from dashboards.mixin import grafana

    out = []
    for name, doc in grafana.dashboards(config.DEFAULT).items():
        targets = [(p.get("title", ""), t["expr"], bool(t.get("instant")) and not t.get("range"))
                   for p in grafana.panels(doc) for t in p.get("targets") or () if t.get("expr")]
        assert [(title, expr) for title, expr, _ in targets] == grafana.panel_queries(doc)
        out.extend((name, title, promql.expand_grafana(expr, range_s=range_s, interval_s=STEP_S, cluster=CLUSTER,
                                                       node=NODE, extra={"__rate_interval": f"{RATE_INTERVAL_S}s"}),
                    instant) for title, expr, instant in targets)
    return out


def recording_exprs(rules: list[Path]) -> list[tuple[str, str]]:
    out = []
    for path in rules:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend((r["record"], r["expr"]) for r in group["rules"] if "record" in r)
    return out


def test_every_fault_pages_and_every_panel_has_data(tmp_path: Path, requirements: None) -> None:
    from tests import nvmlsim

    t_start = time.monotonic()
    host = make_host(tmp_path)
    libdir = nvmlsim.build(tmp_path)
    rules = rule_files(tmp_path)
    agent_port, prom_port, am_port = free_port(), free_port(), free_port()
    env = nvmlsim.env(libdir, host.nvml_state)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    logs = {n: tmp_path / f"{n}.log" for n in ("agent", "prometheus", "alertmanager")}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    watcher = AlertWatcher(am_port)
    try:
        procs["alertmanager"] = start_alertmanager(tmp_path, am_port, logs["alertmanager"])
        agent_toml = agent_config(host, agent_port)

        def start_agent() -> None:
            with open(logs["agent"], "ab") as f:
                procs["agent"] = subprocess.Popen(
                    [sys.executable, "-m", "nodewarden", "agent", "--config", str(agent_toml)],
                    cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)

        start_agent()
        prom = Prom(prom_port)

        def w(what: str, check: Callable[[], bool], deadline_s: float = 20.0) -> float:
            return wait_for(what, check, procs, logs, deadline_s)

        # Prometheus starts once the agent has counted the ring buffer: every series of an
        # earlier run's line is in the first scrape, so no rule takes it for a new fault.
        w("the agent's kernel log followed", lambda: json.loads(
            http_get(f"http://127.0.0.1:{agent_port}/healthz"))["kmsg_readable"] is True)
        procs["prometheus"] = start_prometheus(prometheus_config(tmp_path, agent_port, am_port, rules),
                                               prom_port, tmp_path, logs["prometheus"])
        w("Alertmanager ready", lambda: http_get(f"http://127.0.0.1:{am_port}/-/ready") is not None)
        w("the agent's target up in Prometheus", lambda: prom.value('up{job="nodewarden"}') == 1)
        t_up = time.monotonic()
        watcher.start()
        loaded = {r["name"]: r for g in get_json(f"{prom.base}/api/v1/rules")["data"]["groups"] for r in g["rules"]}
        absent = sorted(({e.alert for e in expected(host)} | {"NodewardenAgentDown"}) - loaded.keys())
        assert not absent, f"alert rules not loaded: {absent}"
        w("Prometheus sending to Alertmanager", lambda: bool(
            get_json(f"{prom.base}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]))
        collectors = ("kernel_log", "nvml", "infiniband", "edac", "pcie", "netclass")
        w("every collector succeeding", lambda: all(
            prom.value(f'nodewarden_collector_success{{collector="{c}"}}') == 1 for c in collectors))
        assert prom.value("count(nodewarden_gpu_info)") == 9
        assert prom.value(f'count(up{{job="nodewarden",node="{NODE}",cluster="{CLUSTER}"}})') == 1

        # a few healthy scrapes first: the panels' range (below) starts a second after t_up and
        # must hold a sample from before each counter's rise
        time.sleep(max(0.0, t_up + 3.0 - time.monotonic()))

        # -- GPU faults in the simulator: one GPU each ----------------------------------------
        nvmlsim.update_gpu(host.nvml_state, 3, {"ecc": {"uncorrected": {"volatile": 2, "aggregate": 2}}})
        nvmlsim.update_gpu(host.nvml_state, 0, {"ecc": {"corrected": {"volatile": 5, "aggregate": 5}}})
        nvmlsim.update_gpu(host.nvml_state, 4, {"nvlink_down": [3], "nvlink_errors": {
            "3": {"crc_flit": 40, "crc_data": 12, "replay": 30, "recovery": 2}}})
        nvmlsim.update_gpu(host.nvml_state, 1, {"pcie": {"width_current": 8}})
        nvmlsim.update_gpu(host.nvml_state, 5, {"lost": True})
        # a row remap pending: the driver asks for a reset (NVML's recovery action gpu_reset)
        nvmlsim.update_gpu(host.nvml_state, 6, {"remapped_rows": {"uncorrectable": 1, "pending": 1},
                                                "recovery_action": 1})
        nvmlsim.update_gpu(host.nvml_state, 7, {"remapped_rows": {"uncorrectable": 512, "failure": 1}})
        # -- sysfs: a port held down, a port at half rate, a downtrained link, EDAC counts ------
        down = host.ib_port("mlx5_3")
        (down / "state").write_text("1: DOWN\n")
        (down / "phys_state").write_text("2: Polling\n")  # no cable, no peer (Disabled would not page)
        (host.ib_port("mlx5_4") / "rate").write_text("200 Gb/sec (4X HDR)\n")
        (host.pci("0000:dd:00.0") / "current_link_width").write_text("8\n")
        (host.pci("0000:bc:00.0") / "current_link_speed").write_text("16.0 GT/s PCIe\n")
        bump_aer(host.pci("0000:2c:00.0") / "aer_dev_correctable", "RxErr", 5)  # no alert: a panel's data
        dimm0 = host.mc(0) / "dimm0"
        bump(dimm0 / "dimm_ue_count", 1)
        bump(host.mc(0) / "ue_count", 1)
        dimm2 = host.mc(1) / "dimm2"
        bump(dimm2 / "dimm_ce_count", 12)
        bump(host.mc(1) / "ce_count", 12)
        w("the simulator's and sysfs faults in Prometheus", lambda: all((
            prom.value('nodewarden_gpu_ecc_errors_total{gpu="3",type="uncorrected",scope="volatile"}') == 2,
            prom.value('nodewarden_gpu_lost{gpu="5"}') == 1,
            prom.value('nodewarden_gpu_row_remap_pending{gpu="6"}') == 1,
            prom.value('nodewarden_gpu_recovery_action{gpu="6",action="gpu_reset"}') == 1,
            prom.value('nodewarden_gpu_row_remap_failure{gpu="7"}') == 1,
            prom.value('nodewarden_ib_port_state{device="mlx5_3",port="1"}') == 1,
            prom.value('nodewarden_pcie_link_width{pci_bus_id="0000:dd:00.0",which="current"}') == 8,
            prom.value('nodewarden_edac_uncorrectable_errors_total{controller="mc0",'
                       'dimm="CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"}') == 1,
            prom.value('nodewarden_edac_correctable_errors_total{controller="mc1",dimm="mc#1channel#1slot#0"}') == 12,
        )))
        # a second rise of each, so that a rate over the window sees errors growing
        nvmlsim.update_gpu(host.nvml_state, 4, {"nvlink_errors": {"3": {"crc_flit": 90, "crc_data": 30,
                                                                         "replay": 70, "recovery": 4}}})
        nvmlsim.update_gpu(host.nvml_state, 0, {"ecc": {"corrected": {"volatile": 7, "aggregate": 7}}})

        # -- a flash-cut storm on mlx5_0/1: down and back, three times -----------------------
        flap = host.ib_port(FLAP["device"], int(FLAP["port"]))
        for n in (1, 2, 3):
            (flap / "state").write_text("1: DOWN\n")
            (flap / "phys_state").write_text("2: Polling\n")
            bump(flap / "counters" / "link_downed", 1)  # as the HCA counts each down
            bump(flap / "counters" / "symbol_error", 7)
            w(f"flap {n}: mlx5_0/1 down on the agent", lambda: agent_value(
                agent_port, "nodewarden_ib_port_state", FLAP) == 1)
            (flap / "state").write_text("4: ACTIVE\n")
            (flap / "phys_state").write_text("5: LinkUp\n")
            w(f"flash cut {n} on the agent", lambda n=n: agent_value(
                agent_port, "nodewarden_ib_flash_cuts_total", FLAP) == n)
        w("three flash cuts in Prometheus",
          lambda: prom.value('nodewarden_ib_flash_cuts_total{device="mlx5_0",port="1"}') == 3)

        # -- a hung NVML driver: the nvml collector fails, then recovers ----------------------
        state = nvmlsim.read_state(host.nvml_state)
        top = {k: v for k, v in state.items() if k != "gpus"}
        nvmlsim.write_state(host.nvml_state, state["gpus"], **{**top, "hang_seconds": 4})
        w("nvml failing while hung", lambda: prom.value('nodewarden_collector_success{collector="nvml"}') == 0)
        # ... and comes back with one GPU fewer: the ninth is gone from the driver
        nvmlsim.write_state(host.nvml_state, state["gpus"][:8], **top)

        # -- kernel log: first events, once Prometheus has scraped the agent for longer than the
        # fault window (a series born inside the window counts only when `up` was there before)
        time.sleep(max(0.0, t_up + FAULT_WINDOW_S + 1.5 - time.monotonic()))
        hw, app = xid_lines(host.domain)
        # the AER functions are the fixture's: earlier runs' records are in the ring buffer too
        precursor = 'nodewarden_gpu_lost_precursor_events_total{gpu="5",reason="fatal_aer"}'
        corrected = f'nodewarden_pcie_aer_logged_errors_total{{pci_bus_id="{CORRECTED_AER_FUNCTION}"}}'
        before = {q: prom.value(q) or 0 for q in (precursor, corrected)}
        rnd = random.Random()
        edac_mc = rnd.randrange(100, 10_000)  # a memory controller number no earlier run used
        write_kmsg(*hw, *app, unreadable_xid_line(host.domain), *mce_lines(rnd.getrandbits(40)),
                   edac_log_line(edac_mc), *sxid_lines(host.domain, host.switches), *aer_lines(),
                   *reset_required_lines(host.domain))
        # what the kernel counts with the AER records it printed (the corrected errors it did not
        # print too), and NVML's recovery action after the Xid 154
        bump_aer(host.pci(GPU_AER_FUNCTION) / "aer_dev_fatal", "CmpltTO", 1)
        bump_aer(host.pci(NIC_AER_FUNCTION) / "aer_dev_nonfatal", "UnsupReq", 1)
        bump_aer(host.pci(CORRECTED_AER_FUNCTION) / "aer_dev_correctable", "BadTLP", 12)
        nvmlsim.update_gpu(host.nvml_state, 1, {"recovery_action": 2})
        xid = "nodewarden_gpu_xid_errors_total"
        w("the Xids in Prometheus", lambda: (
            prom.value(f'{xid}{{gpu="1",xid="48",pci_bus_id="{host.domain}:2a:00.0"}}') == 1
            and prom.value(f'{xid}{{gpu="1",xid="63",pci_bus_id="{host.domain}:2a:00.0"}}') == 1
            and prom.value(f'nodewarden_edac_logged_errors_total{{controller="mc{edac_mc}",type="corrected"}}') == 1
            and prom.value(f'{xid}{{gpu="2",xid="13",pci_bus_id="{host.domain}:3a:00.0"}}') == 3))
        sw = nvswitch_name(host.switches[0])
        nic = f'pci_bus_id="{NIC_AER_FUNCTION}",severity="nonfatal",error="UnsupReq"'
        w("the SXid, AER and reset faults in Prometheus", lambda: all((
            prom.value(f'nodewarden_nvswitch_sxid_errors_total{{switch="{sw}",sxid="12024",severity="fatal"}}') == 1,
            prom.value(precursor) == before[precursor] + 1,
            prom.value(corrected) == before[corrected] + 1,
            prom.value(f"nodewarden_pcie_aer_bit_errors_total{{{nic}}}") == 1,
            prom.value(f'nodewarden_gpu_reset_required_events_total{{gpu="1",action="node_reboot"}}') == 1,
            prom.value('nodewarden_gpu_recovery_action{gpu="1",action="node_reboot"}') == 1,
        )))
        # the policy recording rule tells the two apart: 48 drains, 13 is the application's
        policy = "gpu_xid:nodewarden_gpu_xid_errors_total:policy"
        w("the Xids in the policy recording rule", lambda: (
            prom.value(f'{policy}{{gpu="1",xid="48",hardware="true",action="drain"}}') == 1
            and prom.value(f'{policy}{{gpu="2",xid="13",hardware="false",action="restart_app"}}') == 3))
        w("nvml recovered", lambda: prom.value('nodewarden_collector_success{collector="nvml"}') == 1)

        want = expected(host)

        def missing() -> list[Expect]:
            return [e for e in want if not watcher.matching(e.alert, {"node": NODE, **e.labels})]

        w("every expected alert in Alertmanager", lambda: not missing(), deadline_s=25.0)
        t_fired = time.monotonic() - t_start

        # -- the repair: the operator reruns the suite into the agent's report; the agent exports
        # it within a poll (its validator schedule is not due), so the failed check's alert can clear
        write_validator_report(host.state_dir, time.time() - VALIDATOR_AGE_S + 60, repaired=True)
        status = "nodewarden_validator_check_status"
        w("the passing rerun exported", lambda: (
            prom.value(f'{status}{{check="gemm",status="pass"}}') == 1
            and prom.value(f'{status}{{check="gemm",status="fail"}}') == 0
            and prom.value(f'{status}{{check="allreduce",status="error"}}') == 0))

        # -- every panel's and recording rule's query, over the faults' data ------------------
        # The dashboard's range: everything this Prometheus has (it has run for less than the
        # 5 minutes a user would pick): a first event counts only when `up` is there
        # `$__range` before, which no query over a range older than the TSDB can see.
        # Every fault's series must have a few samples: a panel over a series born a scrape ago
        # shows nothing yet. The range queries step by the scrape interval (Grafana's step on
        # a range this short), so that a series born seconds ago is at a step.
        time.sleep(3.0)
        range_s = min(300, int(time.monotonic() - t_up) - 1)
        no_data, errors = [], []
        targets = panel_targets(range_s)
        assert len(targets) >= 30, len(targets)
        for dash, title, expr, instant in targets:
            err, n = run_query(prom.base, expr, instant=instant, range_s=range_s, step_s=SCRAPE_S)
            if err:
                errors.append(f"{dash} / {title}: {err}\n    {expr}")
            elif n == 0:
                no_data.append(f"{dash} / {title}:\n    {expr}")
        recorded = recording_exprs(rules)
        assert len(recorded) >= 3, recorded
        for record, expr in recorded:
            err, n = run_query(prom.base, expr, instant=True, range_s=range_s, step_s=SCRAPE_S)
            if err:
                errors.append(f"recording rule {record}: {err}\n    {expr}")
            elif n == 0:
                no_data.append(f"recording rule {record}:\n    {expr}")
        assert not errors, "queries that failed:\n" + "\n".join(errors)
        assert not no_data, "queries without data after the faults:\n" + "\n".join(no_data)

        # -- the agent stops: its target goes down, and only now may AgentDown fire -----------
        assert not watcher.alerts("NodewardenAgentDown"), watcher.alerts("NodewardenAgentDown")
        watcher.poll()
        stop(procs["agent"])
        assert procs.pop("agent").returncode == 0, logs["agent"].read_text()[-4000:]
        w("NodewardenAgentDown in Alertmanager", lambda: bool(watcher.matching("NodewardenAgentDown", {"node": NODE})))
        want.append(Expect.of("NodewardenAgentDown", "warning", "the agent stopped (SIGTERM): up == 0"))
        judged = watcher.alerts()  # "none that must not fire" is judged up to here

        # -- records lost: the agent starts again after the ring buffer went past its saved
        # cursor, as when more was logged while it was down than the buffer holds: here the
        # cursor is set back before the buffer's oldest record and the event journal (which
        # would say what was read) is gone. Everything in the buffer is counted again, so
        # this run's and earlier runs' Xids fire again: only the lost records are checked.
        gap = set_cursor_before_buffer(host.state_dir, 40)
        if gap:
            start_agent()
            w("NodewardenKmsgRecordsLost in Alertmanager", lambda: bool(
                watcher.matching("NodewardenKmsgRecordsLost", {"node": NODE})))
            assert (prom.value("nodewarden_collector_kmsg_lost_records_total") or 0) >= gap
            want.append(Expect.of("NodewardenKmsgRecordsLost", "warning", f"agent restarted with its kmsg cursor "
                                  f"{gap} records before the ring buffer's oldest one"))
            stop(procs["agent"])
            assert procs.pop("agent").returncode == 0, logs["agent"].read_text()[-4000:]
        else:
            warnings.warn("NodewardenKmsgRecordsLost not checked: this machine's kernel ring buffer has not "
                          "wrapped since boot, so no saved cursor can lie before its oldest record")
    finally:
        watcher.stop()
        for p in procs.values():
            stop(p)
        (tmp_path / "alerts-seen.json").write_text(json.dumps(watcher.alerts(), indent=1))  # for a failure

    seen = watcher.alerts()
    problems = [f"{r['labels']['alertname']} {r['labels']}: {', '.join(bad)}"
                for r in seen for bad in [check_alert(r)] if bad]
    assert not problems, "alerts with bad labels or annotations:\n" + "\n".join(problems)
    quiet = [r["labels"] for r in judged if r["labels"].get("xid") == "13" or r["labels"].get("gpu") in ("0", "2")]
    assert not quiet, f"alerts for the application Xid's GPU 2 or the corrected-ECC GPU 0: {quiet}"
    extra = unexpected(judged, want)
    assert not extra, "alerts that must not fire:\n" + "\n".join(map(str, extra))
    common = {"alertname", "job", "instance", "cluster", "node", "severity"}
    print(f"\n{len(want)} alerts fired, the last {t_fired:.1f}s after the start; test took "
          f"{time.monotonic() - t_start:.1f}s")
    for e in want:
        (r, *_) = watcher.matching(e.alert, {"node": NODE, **e.labels})
        labels = {k: v for k, v in r["labels"].items() if k not in common}
        print(f"  {e.alert} ({r['labels']['severity']}) {labels}  <- {e.fault}")

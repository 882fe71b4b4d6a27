"""End to end, the NVSwitch, PCIe AER, reset-required and AMD memory fault kinds: the real agent
follows the real /dev/kmsg; an NVSwitch SXid group (S-001's three lines), a PCIe AER record with
its recovery lines (P-101, without the ``dmesg -H`` stamps), an ``NV_ERR_RESET_REQUIRED``
assertion (W-101), an Xid 154 (X-040) and an AMD MCA decode with its EDAC line (E-101) written
into the kernel ring buffer come out as exact counts on /metrics with the right labels, journaled
once, across a clean restart and a SIGKILL. Then the pcie collector's sysfs AER counters beside
the kernel log's records: one error, one event (kmsg first, sysfs only).

As in test_agent_kmsg.py: root only, on request (NODEWARDEN_WRITE_KMSG=1); each run makes its
lines unique (random PCI domain, switch number, memory controller, CPU) and asserts on its own
series, or on deltas from a baseline taken once the agent has caught up (the reset-required
line names no GPU, and the sysfs fixture tree's GPU is the same in every run).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from kmsgtools import kmsg_refusal, write_kmsg
from test_agent_kmsg import REPO, agents, journal_events, start_agent, wait_for  # noqa: F401 (agents: a fixture)

from tests import envneeds

pytestmark = pytest.mark.kmsg
needs_kmsg = envneeds.needs_kmsg_write(kmsg_refusal())

SXID = "nodewarden_nvswitch_sxid_errors_total"
AER = "nodewarden_pcie_aer_logged_errors_total"
AER_RECOVERY = "nodewarden_pcie_aer_recovery_events_total"
PRECURSOR = "nodewarden_gpu_lost_precursor_events_total"
RESET = "nodewarden_gpu_reset_required_events_total"
XID = "nodewarden_gpu_xid_errors_total"
EDAC = "nodewarden_edac_logged_errors_total"
EVENTS = "nodewarden_collector_events_total"
GPU_MINOR = "5"  # the device minor the procfs fixture gives this run's GPU


def _xid154_category() -> str:
    from nodewarden import catalog
    return catalog.group_of(154)


@dataclass
class Lines:
    """Unique fault lines of one run (formats: tests/fixtures/reference/real_log_cases.md)."""

    dom: str  # PCI domain of this run's switch, root port and GPUs
    switch: int
    mc: int
    cpu: int

    @classmethod
    def make(cls) -> Lines:
        r = random.Random()
        return cls(dom=f"{r.randrange(0x1000, 0xffff):04x}", switch=r.randrange(10, 1000),
                   mc=r.randrange(100, 10_000), cpu=r.randrange(1000, 100_000))

    # S-001: one SXid 22013 error, three lines (Data, description, Severity)
    @property
    def switch_name(self) -> str:
        return f"nvidia-nvswitch{self.switch}"

    @property
    def switch_pci(self) -> str:
        return f"{self.dom}:04:00.0"

    def sxid(self, severity: str = "Non-fatal") -> list[str]:
        head = f"<3>{self.switch_name}: SXid (PCI:{self.switch_pci}): 22013, "
        return [head + "Data {0x0000002b, 0x0000002b, 0x00000000, 0x0000002b, 0x80005302, 0x00000000, "
                       "0x00000000, 0x00000000, 0x00000000}",
                head + f"{severity}, Link 44 Minion Link DLREQ interrupt",
                head + "Severity 0 Engine instance 44 Sub-engine instance 00"]

    # P-101: a fatal Completion Timeout on the GPU's root port, the GPU (and its HDA function)
    # unable to recover; the first two lines belong to the record before it
    @property
    def root_port(self) -> str:
        return f"{self.dom}:00:03.0"

    @property
    def gpu(self) -> str:
        return f"{self.dom}:03:00.0"

    @property
    def hda(self) -> str:
        return f"{self.dom}:03:00.1"

    def aer(self) -> list[str]:
        rp, gpu, hda = self.root_port, self.gpu, self.hda
        return [f"<3>nvidia {gpu}: AER: can't recover (no error_detected callback)",
                f"<3>snd_hda_intel {hda}: AER: can't recover (no error_detected callback)",
                f"<6>pcieport {rp}: AER: device recovery failed",
                f"<6>pcieport {rp}: AER: Multiple Uncorrected (Fatal) error received: {rp}",
                f"<3>pcieport {rp}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
                f"<3>pcieport {rp}:   device [8086:6f08] error status/mask=00004020/00000000",
                f"<3>pcieport {rp}:    [ 5] SDES                  ",
                f"<3>pcieport {rp}:    [14] CmpltTO                (First)",
                f"<3>nvidia {gpu}: AER: can't recover (no error_detected callback)",
                f"<3>snd_hda_intel {hda}: AER: can't recover (no error_detected callback)",
                f"<6>pcieport {rp}: AER: Root Port link has been reset (0)",
                f"<6>pcieport {rp}: AER: device recovery failed"]

    # W-101 node A: no PCI id on the line
    @staticmethod
    def reset_required() -> str:
        return ("<3>NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
                "(0x00000062) returned from status @ kernel_channel.c:2827")

    # Xid 154 on a GB200-style GPU of this run's domain
    @property
    def xid_gpu(self) -> str:
        return f"{self.dom}:01:00.0"

    def xid154(self, frm: str = "0x0 (None)", to: str = "0x4 (Drain and Reset)") -> str:
        return f"<3>NVRM: Xid (PCI:{self.dom}:01:00): 154, GPU recovery action changed from {frm} to {to}"

    # E-101: AMD UMC corrected DRAM error, the MCA decode then its EDAC line
    @property
    def dimm(self) -> str:
        return f"mc#{self.mc}csrow#1channel#3"

    def amd_ecc(self) -> list[str]:
        return ["<0>[Hardware Error]: Corrected error, no action required.",
                f"<0>[Hardware Error]: CPU:{self.cpu} (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: "
                "0xdc2040000000011b",
                "<0>[Hardware Error]: Error Addr: 0x0000000313c7a020",
                "<0>[Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01",
                "<0>[Hardware Error]: Unified Memory Controller Ext. Error Code: 0",
                f"<4>EDAC MC{self.mc}: 1 CE Cannot decode normalized address on {self.dimm} (csrow:1 channel:3 "
                "page:0x0 offset:0x0 grain:64 syndrome:0x800)"]

    def procfs(self, root: Path) -> Path:
        """``/proc/driver/nvidia/gpus/<bdf>/information`` for this run's GPUs (minor 5 and 6)."""
        for bdf, minor in ((self.gpu, GPU_MINOR), (self.xid_gpu, "6")):
            d = root / "driver" / "nvidia" / "gpus" / bdf
            d.mkdir(parents=True)
            (d / "information").write_text(f"Model: \t\t NVIDIA H100\nBus Location: \t {bdf}\nDevice Minor: \t {minor}\n")
        return root


def config(tmp_path: Path, sysfs: Path | None = None) -> Path:
    """Only the collectors a test needs: the kernel log (and the pcie collector on ``sysfs``)."""
    cfg = tmp_path / "agent.toml"
    polled = "pcie = true" if sysfs is not None else "pcie = false"
    cfg.write_text((f'sysfs = "{sysfs}"\npoll_interval_seconds = 0.2\ncollector_timeout_seconds = 2\n' if sysfs else "")
                   + "[validator]\nenabled = false\n"
                   + f"[collectors]\nnvml = false\ninfiniband = false\nedac = false\nnetclass = false\n{polled}\n")
    return cfg


def mine(state: Path, L: Lines) -> list[dict]:
    """This run's journaled events (its PCI domain, switch, memory controller or CPU). The domain
    is matched as a PCI address (``DDDD:BB:``), never as 4 characters anywhere: a domain of digits
    only (0x2026) is in every timestamp and sequence number of the events earlier tests left in
    the ring buffer."""
    pci = re.compile(rf"(?<![0-9a-fA-F]){L.dom}:[0-9a-fA-F]{{2}}:")
    out = []
    for e in journal_events(state):
        text = json.dumps(e)
        if pci.search(text) or L.switch_name in text or L.dimm in text or f'"mca_cpu": {L.cpu}' in text:
            out.append(e)
    return out


@needs_kmsg
def test_new_kinds_counted_with_their_labels_and_kept_across_restarts(tmp_path: Path, agents) -> None:  # noqa: F811
    L = Lines.make()
    state, log = tmp_path / "state", tmp_path / "agent.log"
    extra = ("--config", str(config(tmp_path)), "--procfs", str(L.procfs(tmp_path / "proc")))
    a = start_agent(state, log, *extra)
    agents.append(a)
    reset_labels = {"gpu": "", "pci_bus_id": "", "action": "gpu_reset"}
    reset0 = a.baseline(RESET, **reset_labels)  # the line names no GPU: earlier runs' lines count here too

    write_kmsg(*L.sxid(), *L.aer(), L.reset_required(), L.xid154(), *L.amd_ecc())
    sxid_labels = {"switch": L.switch_name, "pci_bus_id": L.switch_pci, "sxid": "22013", "severity": "non_fatal"}
    edac_labels = {"controller": f"mc{L.mc}", "dimm": L.dimm, "type": "corrected"}
    wait_for("the EDAC line of the MCA+EDAC pair", lambda: a.value(EDAC, **edac_labels) == 1)
    wait_for("the SXid group", lambda: a.value(SXID, **sxid_labels) == 1)

    def check(agent, sxid_non_fatal: int, sxid_fatal: int, xid154: int, reset_delta: int) -> None:
        s = agent.samples()

        def v(name: str, **labels: str) -> float:
            return s.get((name, frozenset(labels.items())), 0.0)

        assert v(SXID, **sxid_labels) == sxid_non_fatal  # three lines, one error
        assert v(SXID, **dict(sxid_labels, severity="fatal")) == sxid_fatal
        assert v(AER, pci_bus_id=L.root_port, severity="fatal") == 1  # one record, its lines folded
        assert v(AER_RECOVERY, pci_bus_id=L.gpu, outcome="no_error_detected_callback") == 2
        assert v(AER_RECOVERY, pci_bus_id=L.hda, outcome="no_error_detected_callback") == 2
        assert v(AER_RECOVERY, pci_bus_id=L.root_port, outcome="recovery_failed") == 2
        assert v(AER_RECOVERY, pci_bus_id=L.root_port, outcome="link_reset") == 1
        # one precursor per error: the nvidia "can't recover" before the received line has no
        # record to join (an earlier error's); the one after it is the fatal record's
        assert v(PRECURSOR, gpu=GPU_MINOR, pci_bus_id=L.gpu, reason="aer_no_error_detected_callback") == 1
        assert v(PRECURSOR, gpu=GPU_MINOR, pci_bus_id=L.gpu, reason="fatal_aer") == 1
        assert not [k for k in s if k[0] == PRECURSOR and L.hda in str(k)]  # the HDA function is no GPU
        assert v(RESET, **reset_labels) - reset0 == reset_delta
        assert v(RESET, gpu="6", pci_bus_id=L.xid_gpu, action="drain_and_reset") == xid154
        assert v(XID, gpu="6", pci_bus_id=L.xid_gpu, xid="154", category=_xid154_category()) == xid154
        assert v(EDAC, **edac_labels) == 1  # the MCA decode and its EDAC line: one error
        assert [k for k in s if k[0] == XID and L.switch_pci in str(k)] == []  # "SXid (" is no Xid

    check(a, 1, 0, 1, 1)
    kinds = sorted(e["kind"] for e in mine(state, L))
    assert kinds == sorted(["sxid", "pcie_aer", "xid", "cpu_ecc"] + ["pcie_aer_recovery"] * 7), kinds
    (ecc,) = [e for e in mine(state, L) if e["kind"] == "cpu_ecc"]
    assert ecc["attrs"]["mca_bank"] == 18 and ecc["attrs"]["mca_cpu"] == L.cpu
    assert ecc["attrs"]["mca_status"] == 0xDC2040000000011B
    (sx,) = [e for e in mine(state, L) if e["kind"] == "sxid"]
    assert sx["attrs"]["link"] == 44 and sx["attrs"]["lines"] == 3 and sx["attrs"]["engine_instance"] == 44

    assert a.stop(signal.SIGTERM) == 0
    # while the agent is down: a fatal SXid of the same code on the same switch
    write_kmsg(*L.sxid("Fatal"))
    b = start_agent(state, log, *extra)
    agents.append(b)
    # an SXid error is held until its lines are in (or the log is idle): counted just after catch-up
    wait_for("the fatal SXid", lambda: b.value(SXID, **dict(sxid_labels, severity="fatal")) == 1)
    check(b, 1, 1, 1, 1)  # the ring buffer read again: nothing counted twice, the new error counted

    # SIGKILL right after an SXid group and an Xid 154: no loss, no double count
    write_kmsg(*L.sxid(), L.xid154())
    b.proc.kill()
    b.proc.wait(timeout=10)
    c = start_agent(state, log, *extra)
    agents.append(c)
    wait_for("the last SXid group", lambda: c.value(SXID, **sxid_labels) == 2)
    check(c, 2, 1, 2, 1)
    journaled = mine(state, L)
    keys = [(e["attrs"]["boot_id"], e["attrs"]["seq"], e["kind"]) for e in journaled]
    assert len(keys) == len(set(keys))  # each event journaled once
    assert sorted(e["kind"] for e in journaled).count("sxid") == 3
    assert c.stop() == 0


@needs_kmsg
def test_one_aer_error_seen_in_sysfs_and_in_the_log_is_one_event(tmp_path: Path, agents) -> None:  # noqa: F811
    """The pcie collector polls a copy of the generated H100 fixture tree every 0.2 s; its GPU 0000:9b:00.0
    gets a fatal AER record: printed in the log and counted in sysfs (one event, the log's), then
    counted in sysfs only (one event, the collector's, after its wait for a log record)."""
    sysfs = tmp_path / "sys"
    shutil.copytree(REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr-aer", sysfs, symlinks=True)
    gpu = "0000:9b:00.0"
    fatal = sysfs / "bus" / "pci" / "devices" / gpu / "aer_dev_fatal"
    state, log = tmp_path / "state", tmp_path / "agent.log"
    a = start_agent(state, log, "--config", str(config(tmp_path, sysfs)))
    agents.append(a)
    wait_for("the first pcie poll", lambda: a.value("nodewarden_collector_success", collector="pcie") == 1)
    k0 = a.baseline(EVENTS, collector="kernel_log", kind="pcie_aer")  # earlier runs' records of this GPU
    logged0 = a.baseline(AER, pci_bus_id=gpu, severity="fatal")
    assert a.value(EVENTS, collector="pcie", kind="pcie_aer") is None  # no pcie event counted yet

    def bump() -> None:
        text = fatal.read_text()
        n = int(text.split("TOTAL_ERR_FATAL ")[1].split()[0])
        c = int(text.split("CmpltTO ")[1].split()[0])
        fatal.write_text(text.replace(f"CmpltTO {c}\n", f"CmpltTO {c + 1}\n")
                         .replace(f"TOTAL_ERR_FATAL {n}", f"TOTAL_ERR_FATAL {n + 1}"))

    # kmsg first: the record printed, then the counters seen by the next poll
    rp = "0000:97:01.0"
    write_kmsg(f"<6>pcieport {rp}: AER: Uncorrected (Fatal) error received: {gpu}",
               f"<3>nvidia {gpu}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
               f"<3>nvidia {gpu}:   device [10de:2330] error status/mask=00004000/00000000",
               f"<3>nvidia {gpu}:    [14] CmpltTO                (First)")
    wait_for("the log's record", lambda: a.value(AER, pci_bus_id=gpu, severity="fatal") == logged0 + 1)
    bump()
    wait_for("the rise in sysfs", lambda: a.value("nodewarden_pcie_aer_bit_errors_total", pci_bus_id=gpu,
                                                  severity="fatal", error="CmpltTO") == 1)
    assert a.value("nodewarden_pcie_aer_errors_total", pci_bus_id=gpu, severity="fatal") == 1
    # sysfs only: a second record the log does not print
    bump()
    wait_for("the sysfs-only record as the collector's event",
             lambda: a.value(EVENTS, collector="pcie", kind="pcie_aer") == 1, deadline_s=10)
    assert a.value(EVENTS, collector="kernel_log", kind="pcie_aer") == k0 + 1
    assert a.value(AER, pci_bus_id=gpu, severity="fatal") == logged0 + 1  # the log's series: printed records
    assert a.value(PRECURSOR, gpu="", pci_bus_id=gpu, reason="fatal_aer") >= 1
    sysfs_events = [e for e in journal_events(state) if e["kind"] == "pcie_aer" and e["source"] == "sysfs"]
    assert len(sysfs_events) == 1 and sysfs_events[0]["device"] == gpu
    assert sysfs_events[0]["attrs"]["count"] == 1 and sysfs_events[0]["attrs"]["error_counts"] == {"CmpltTO": 1}
    assert a.stop() == 0

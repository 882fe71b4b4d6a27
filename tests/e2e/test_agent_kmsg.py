"""End to end: the real agent process follows the real /dev/kmsg; lines written into the kernel
ring buffer come out as exact counts on /metrics, across a clean restart and a SIGKILL.

Writing into /dev/kmsg needs root. The ring buffer keeps the lines of earlier runs and of other
tests, and a new state directory counts the whole buffer, so every test makes its lines unique
(random PCI domain, memory controller, RDMA device, CPU number) and asserts on its own series,
or on deltas from a baseline taken once the agent has caught up.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kmsgtools import free_port, kmsg_refusal, write_kmsg
from prometheus_client.parser import text_string_to_metric_families

from tests import envneeds

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 10.0
# Starting the agent (an interpreter, imports, the whole ring buffer read) is the slowest step on a
# loaded machine: a generous wall bound, while the condition waited for is the work (caught up)
# and an agent that exits fails the wait at once.
START_DEADLINE_S = 60.0
# The timing choices (where a SIGKILL falls) come from this seed, printed by every test, so that a
# failure can be replayed with NODEWARDEN_TEST_SEED=<seed>. The lines' labels do not: they must
# differ from every earlier run's lines still in the ring buffer.
SEED = int(os.environ.get("NODEWARDEN_TEST_SEED") or random.SystemRandom().randrange(1 << 32))

XID = "nodewarden_gpu_xid_errors_total"
EDAC = "nodewarden_edac_logged_errors_total"  # the kernel log's EDAC lines (type label)
MCE = "nodewarden_mce_events_total"
IB = "nodewarden_ib_link_events_total"


needs_kmsg = envneeds.needs_kmsg_write(kmsg_refusal())


# ---------------------------------------------------------------------------------------------
# helpers

@pytest.fixture(autouse=True)
def timing(request: pytest.FixtureRequest) -> random.Random:
    """This test's source of timing choices, seeded from :data:`SEED` and the test's name."""
    print(f"NODEWARDEN_TEST_SEED={SEED}")
    return random.Random(f"{SEED}:{request.node.name}")


def wait_for(what: str, check: Callable[[], object], deadline_s: float = DEADLINE_S) -> object:
    """Poll ``check`` until it returns a truthy value; fail naming ``what`` after the deadline."""
    end = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < end:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    pytest.fail(f"timed out after {deadline_s}s waiting for {what}; last: {last!r}")


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=2) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def health(self) -> dict:
        return json.loads(self.get("/healthz")[1])

    def metrics_text(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200
        return body.decode()

    def samples(self) -> dict[tuple[str, frozenset], float]:
        """{(sample name, frozenset(labels.items())): value} of one scrape."""
        out = {}
        for fam in text_string_to_metric_families(self.metrics_text()):
            for s in fam.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        """The sample's value in one scrape; None when the scrape has no such series."""
        return self.samples().get((name, frozenset(labels.items())))

    def baseline(self, name: str, **labels: str) -> float:
        """A counter's value before a test's lines, 0 while the series is absent (nothing counted
        under those labels yet): only for deltas, never for what a test asserts is there."""
        v = self.value(name, **labels)
        return 0.0 if v is None else v

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE_S)
            pytest.fail(f"agent did not stop on signal {sig} within {DEADLINE_S}s; log:\n{self.log.read_text()}")


def agent_cmd(port: int, state_dir: Path, *extra: str, accept_injected: bool = True) -> list[str]:
    """The agent's command line. The lines these tests write into /dev/kmsg come from user space
    (facility ``user``): the agent counts them as faults only with ``--accept-injected``."""
    return [sys.executable, "-m", "nodewarden", "agent", "--listen", f"127.0.0.1:{port}",
            "--state-dir", str(state_dir), "--hostname", "testnode", *extra,
            *(["--accept-injected"] if accept_injected else [])]


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_agent(state_dir: Path, log: Path, *extra: str, ready: bool = True, accept_injected: bool = True) -> Agent:
    """Start ``python -m nodewarden agent``; with ``ready``, wait until it has caught up with
    the ring buffer (/healthz says kmsg_readable)."""
    port = free_port()
    logf = open(log, "ab")
    proc = subprocess.Popen(agent_cmd(port, state_dir, *extra, accept_injected=accept_injected), cwd=REPO,
                            env=agent_env(),
                            stdout=logf, stderr=subprocess.STDOUT)
    logf.close()
    a = Agent(proc, port, log)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"agent exited with {proc.returncode}; log:\n{log.read_text()}")
        h = a.health()
        return bool(h["kmsg_readable"]) if ready else True

    wait_for("the agent's /healthz", up, START_DEADLINE_S)
    return a


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[Agent]]:
    """Agents a test starts; any still running at the end are killed (by their pid)."""
    started: list[Agent] = []
    yield started
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait(timeout=DEADLINE_S)


@dataclass
class Lines:
    """Unique fault lines for one test run: the labels they must produce are attributes."""

    tag: int
    pci_domain: str
    mc: int
    socket_id: int
    rdma: str
    cpu: int

    @classmethod
    def make(cls) -> Lines:
        r = random.Random()
        tag = r.randrange(1 << 30)
        return cls(tag=tag, pci_domain=f"{r.randrange(0x1000, 0xffff):04x}", mc=r.randrange(100, 10_000),
                   socket_id=r.randrange(10, 10_000), rdma=f"mlx5_{r.randrange(100, 100_000)}",
                   cpu=r.randrange(1000, 100_000))

    def bdf(self, bus: int) -> str:
        return f"{self.pci_domain}:{bus:02x}:00.0"

    def xid48(self, bus: int) -> str:
        return (f"<3>NVRM: Xid (PCI:{self.pci_domain}:{bus:02x}:00): 48, pid='<unknown>', name=<unknown>, "
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                "physAddr 0x7fffa8860 partition 7, subpartition 1.")

    def xid79_text(self, bus: int) -> str:
        return (f"<3>NVRM: The NVIDIA GPU {self.bdf(bus)} (PCI ID: 10de:2330) installed in this system has "
                "fallen off the bus and is not responding to commands.")

    @property
    def dimm(self) -> str:
        return f"CPU_SrcID#{self.socket_id}_Ha#0_Chan#2_DIMM#0"

    def edac(self, count: int, kind: str = "CE") -> str:
        return (f"<3>EDAC MC{self.mc}: {count} {kind} memory read error on {self.dimm} (channel:2 slot:0 "
                "page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 "
                "socket:0 ha:0 channel_mask:4 rank:0)")

    def mce(self) -> list[str]:
        # A corrected memory-controller error (MCi_STATUS VAL|EN|MISCV|ADDRV, UC clear), as
        # arch/x86/kernel/cpu/mce/core.c print_mce() prints one record.
        return [
            f"<4>mce: [Hardware Error]: CPU {self.cpu}: Machine Check: 0 Bank 7: 9c00004000010091",
            f"<4>mce: [Hardware Error]: TSC {self.tag:x} ADDR 2ffd4a3c0 MISC 140401086",
            "<4>mce: [Hardware Error]: PROCESSOR 0:806f8 TIME 1732700000 SOCKET 0 APIC 0 microcode 2b000571",
        ]

    def ib(self, state: str) -> str:
        return f"<6>mlx5_core {self.bdf(0x53)} {self.rdma}: Port: 1 Link {state}"

    # expected label sets ---------------------------------------------------------------
    def xid_labels(self, bus: int, code: int) -> dict[str, str]:
        cat = {48: "uncorrectable", 79: "uncorrectable"}[code]
        return {"gpu": "", "pci_bus_id": self.bdf(bus), "xid": str(code), "category": cat}

    def edac_labels(self, kind: str = "corrected") -> dict[str, str]:
        return {"controller": f"mc{self.mc}", "dimm": self.dimm, "type": kind}

    def ib_labels(self, state: str) -> dict[str, str]:
        return {"device": self.rdma, "port": "1", "state": state}


def journal_events(state_dir: Path) -> list[dict]:
    """The journal's whole records. A SIGKILL in the middle of an append leaves a torn line (the
    next append starts on a new line; readers count it unparsed, and the restarted agent journals
    its event again from the ring buffer): not a record, left out."""
    out = []
    for p in sorted(state_dir.glob("events-*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


# ---------------------------------------------------------------------------------------------
# tests

@needs_kmsg
def test_lines_user_space_writes_into_kmsg_are_never_faults(tmp_path: Path, agents: list[Agent]) -> None:
    """By default a record of facility ``user`` (what ``echo ... > /dev/kmsg`` makes) counts only in
    the injected-records counter: no fault series, no journal entry, even across a restart."""
    L = Lines.make()
    state = tmp_path / "state"
    a = start_agent(state, tmp_path / "agent.log", accept_injected=False)
    agents.append(a)
    injected = "nodewarden_collector_kmsg_injected_records_total"
    x0, e0, i0 = (a.baseline(injected, kind=k) for k in ("xid", "cpu_ecc", "ib_link_down"))
    write_kmsg(L.xid48(0x07), L.xid79_text(0x08), L.edac(3, "UE"), L.ib("DOWN"))
    wait_for("the injected IB line counted apart", lambda: a.value(injected, kind="ib_link_down") == i0 + 1)
    s = a.samples()
    assert s[(injected, frozenset({"kind": "xid"}.items()))] == x0 + 2
    assert s[(injected, frozenset({"kind": "cpu_ecc"}.items()))] == e0 + 1
    mine = [k for k in s if L.pci_domain in str(k) or L.rdma in str(k) or L.dimm in str(k)]
    assert mine == []  # no Xid, EDAC or IB series carries these lines' labels
    assert not [e for e in journal_events(state) if L.pci_domain in (e.get("pci_bus_id") or "")
                or L.rdma in json.dumps(e)]
    assert a.stop(signal.SIGTERM) == 0
    b = start_agent(state, tmp_path / "agent.log", accept_injected=False)
    agents.append(b)
    assert b.value(injected, kind="xid") == x0 + 2  # persisted, not counted again at the restart
    assert b.stop(signal.SIGTERM) == 0


@needs_kmsg
def test_lines_written_to_kmsg_are_counted_exactly_and_survive_a_restart(tmp_path: Path, agents: list[Agent]) -> None:
    L = Lines.make()
    state = tmp_path / "state"
    a = start_agent(state, tmp_path / "agent.log")
    agents.append(a)
    mce0 = a.baseline(MCE, type="corrected")
    # The MCE series has no label of this run: a record an earlier test left cut in the ring
    # buffer may complete now too. Its count is checked against the journal's MCE events.
    jmce0 = sum(1 for e in journal_events(state) if e["kind"] == "mce")
    assert a.value(XID, **L.xid_labels(0x07, 48)) is None  # no series with this run's labels yet

    write_kmsg(L.xid48(0x07), L.xid79_text(0x08), L.edac(3), *L.mce(), L.ib("DOWN"), L.ib("ACTIVE"))
    wait_for("the IB ACTIVE line on /metrics", lambda: a.value(IB, **L.ib_labels("ACTIVE")) == 1)
    wait_for("the MCE record on /metrics", lambda: (a.value(MCE, type="corrected") or 0.0) >= mce0 + 1)
    s = a.samples()

    def v(name: str, labels: dict[str, str]) -> float | None:
        return s.get((name, frozenset(labels.items())))  # None: no such series

    assert v(XID, L.xid_labels(0x07, 48)) == 1
    assert v(XID, L.xid_labels(0x08, 79)) == 1
    assert v(EDAC, L.edac_labels()) == 3
    assert v(EDAC, L.edac_labels("uncorrected")) is None  # no UE line written yet: no series
    jmce = [e for e in journal_events(state) if e["kind"] == "mce"]
    assert v(MCE, {"type": "corrected"}) - mce0 == len(jmce) - jmce0 >= 1
    assert [e["attrs"]["tsc"] for e in jmce].count(L.tag) == 1
    assert v(IB, L.ib_labels("DOWN")) == 1
    assert v(IB, L.ib_labels("ACTIVE")) == 1
    assert v("nodewarden_collector_success", {"collector": "kernel_log"}) == 1
    assert v("nodewarden_build_info", {"version": __import__("nodewarden").__version__}) == 1
    mine = [e for e in journal_events(state) if L.pci_domain in (e.get("pci_bus_id") or "")
            or f"cpu{L.cpu}/" in (e.get("device") or "")]
    assert sorted((e["kind"], e["xid"]) for e in mine) == [("ib_link_down", None), ("ib_link_up", None),
                                                           ("mce", None), ("xid", 48), ("xid", 79)]
    mce_event = next(e for e in mine if e["kind"] == "mce")
    assert mce_event["attrs"]["tsc"] == L.tag and mce_event["host"] == "testnode"

    assert a.stop(signal.SIGTERM) == 0
    assert json.loads((state / "state.json").read_text())["kmsg"]["seq"] > 0

    # While the agent is down: one more Xid 48 on the same GPU, 2 more corrected DIMM errors, an
    # uncorrected one, and the text-only Xid 79 split over three records (one printk, wrapped).
    write_kmsg(L.xid48(0x07), L.edac(2), L.edac(1, "UE"),
               f"<3>NVRM: The NVIDIA GPU {L.bdf(0x09)}",
               "<3>NVRM: (PCI ID: 10de:2330) installed in this system has",
               "<3>NVRM: fallen off the bus and is not responding to commands.")

    b = start_agent(state, tmp_path / "agent.log")
    agents.append(b)
    s = b.samples()  # caught up: the ring buffer was read before /healthz said kmsg_readable
    assert v(XID, L.xid_labels(0x07, 48)) == 2
    assert v(XID, L.xid_labels(0x08, 79)) == 1
    assert v(XID, L.xid_labels(0x09, 79)) == 1
    assert v(EDAC, L.edac_labels()) == 5
    assert v(EDAC, L.edac_labels("uncorrected")) == 1
    assert v(MCE, {"type": "corrected"}) - mce0 == len([e for e in journal_events(state) if e["kind"] == "mce"]) - jmce0
    assert v(IB, L.ib_labels("DOWN")) == 1
    assert v(IB, L.ib_labels("ACTIVE")) == 1
    mine = [e for e in journal_events(state) if L.pci_domain in (e.get("pci_bus_id") or "")]
    assert len(mine) == 6  # 4 GPU events + 2 IB events, each journaled once
    assert b.stop(signal.SIGINT) == 0


@needs_kmsg
def test_sigkill_right_after_writing_neither_loses_nor_double_counts(tmp_path: Path, agents: list[Agent],
                                                                   timing: random.Random) -> None:
    L = Lines.make()
    state = tmp_path / "state"
    log = tmp_path / "agent.log"
    a = start_agent(state, log)
    agents.append(a)
    expected_ce = 0
    rounds = 6
    for i in range(rounds):
        write_kmsg(L.xid48(0x10 + i), L.edac(i + 1), *L.mce()[:1 + i % 3])  # MCE records cut at every line
        expected_ce += i + 1
        time.sleep(timing.choice((0.0, 0.0005, 0.002, 0.01, 0.05)))
        a.proc.kill()  # SIGKILL: no chance to persist
        a.proc.wait(timeout=DEADLINE_S)
        a = start_agent(state, log)
        agents.append(a)
        s = a.samples()
        for j in range(i + 1):
            assert s.get((XID, frozenset(L.xid_labels(0x10 + j, 48).items()))) == 1, (i, j)
        assert s.get((EDAC, frozenset(L.edac_labels().items()))) == expected_ce, i
    mine = [e for e in journal_events(state) if L.pci_domain in (e.get("pci_bus_id") or "")]
    assert len(mine) == rounds  # journaled once each, however the kills fell
    assert a.stop() == 0


@needs_kmsg
def test_metrics_pass_promtool_check(tmp_path: Path, agents: list[Agent]) -> None:
    promtool = envneeds.command("promtool", "lints the agent's /metrics (Debian: apt-get install prometheus)")
    L = Lines.make()
    a = start_agent(tmp_path / "state", tmp_path / "agent.log")
    agents.append(a)
    write_kmsg(L.xid48(0x07), L.edac(3), L.ib("DOWN"))
    wait_for("the IB line", lambda: a.value(IB, **L.ib_labels("DOWN")) == 1)
    text = a.metrics_text()
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                       capture_output=True)
    if r.returncode != 0:
        envneeds.need("mount", f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@needs_kmsg
def test_read_only_state_dir_keeps_counting_and_reports_write_errors(tmp_path: Path, agents: list[Agent]) -> None:
    L = Lines.make()
    with tmpfs(tmp_path / "state") as state:
        a = start_agent(state, tmp_path / "agent.log")
        agents.append(a)
        assert a.stop() == 0
        r = subprocess.run(["mount", "-o", "remount,ro", str(state)], capture_output=True)
        if r.returncode != 0:
            envneeds.need("mount", f"cannot remount read-only: {r.stderr.decode().strip()}")
        b = start_agent(state, tmp_path / "agent.log")  # starts: a read-only state dir is no usage error
        agents.append(b)
        write_kmsg(L.xid48(0x07), L.edac(3))
        wait_for("the EDAC line", lambda: b.value(EDAC, **L.edac_labels()) == 3)
        assert b.value(XID, **L.xid_labels(0x07, 48)) == 1
        wait_for("a state write error", lambda: (b.value("nodewarden_collector_state_write_errors_total") or 0.0) >= 1)
        code, body = b.get("/healthz")
        h = json.loads(body)
        assert code == 503 and h["state_dir_writable"] is False and h["kmsg_readable"] is True
        assert b.stop() == 0


def test_unreadable_kmsg_still_serves(tmp_path: Path, agents: list[Agent]) -> None:
    a = start_agent(tmp_path / "state", tmp_path / "agent.log", "--kmsg", str(tmp_path / "no-such-kmsg"), ready=False)
    agents.append(a)
    assert a.value("nodewarden_collector_success", collector="kernel_log") == 0
    assert a.value("nodewarden_build_info", version=__import__("nodewarden").__version__) == 1
    code, body = a.get("/healthz")
    assert code == 503 and json.loads(body)["kmsg_readable"] is False
    assert a.get("/nope")[0] == 404
    assert a.stop() == 0
    assert "no-such-kmsg" in (tmp_path / "agent.log").read_text()


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999", "203.0.113.7:9764"])
def test_bad_listen_address_is_a_usage_error(tmp_path: Path, listen: str) -> None:
    cmd = [sys.executable, "-m", "nodewarden", "agent", "--listen", listen, "--state-dir", str(tmp_path / "s")]
    r = subprocess.run(cmd, cwd=REPO, env=agent_env(), capture_output=True, timeout=DEADLINE_S)
    assert r.returncode == 2
    assert b"--listen" in r.stderr


def test_state_dir_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    cmd = agent_cmd(free_port(), f)
    r = subprocess.run(cmd, cwd=REPO, env=agent_env(), capture_output=True, timeout=DEADLINE_S)
    assert r.returncode == 2
    assert b"--state-dir" in r.stderr


# ---------------------------------------------------------------------------------------------
# polled collectors: a generated sysfs fixture tree (tests/fixtures/sysfs), its IB port made to flap

def test_a_port_flapping_in_sysfs_is_a_flash_cut_on_metrics(tmp_path: Path, agents: list[Agent]) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr", sysfs, symlinks=True)
    port = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    config = tmp_path / "agent.toml"
    config.write_text(f'sysfs = "{sysfs}"\npoll_interval_seconds = 0.2\ncollector_timeout_seconds = 2\n'
                      "[collectors]\nnvml = false\n[validator]\nenabled = false\n")
    state = tmp_path / "state"
    a = start_agent(state, tmp_path / "agent.log", "--config", str(config))
    agents.append(a)
    lab = {"device": "mlx5_0", "port": "1"}
    wait_for("the port's state from sysfs", lambda: a.value("nodewarden_ib_port_state", **lab) == 4)
    assert a.value("nodewarden_collector_success", collector="infiniband") == 1
    assert a.value("nodewarden_ib_flash_cuts_total", **lab) == 0

    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("3: Disabled\n")
    wait_for("the port down on /metrics", lambda: a.value("nodewarden_ib_port_state", **lab) == 1)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    wait_for("the flash cut", lambda: a.value("nodewarden_ib_flash_cuts_total", **lab) == 1)
    assert a.value("nodewarden_ib_link_outages_total", **lab) == 0
    assert a.value("nodewarden_collector_events_total", collector="infiniband", kind="ib_link_down") == 1
    cuts = [e for e in journal_events(state) if e["kind"] == "ib_flash_cut" and e["device"] == "mlx5_0/1"]
    assert len(cuts) == 1 and cuts[0]["host"] == "testnode" and cuts[0]["source"] == "sysfs"
    assert a.stop() == 0

    b = start_agent(state, tmp_path / "agent.log", "--config", str(config))  # persisted across a restart
    agents.append(b)
    wait_for("the first poll", lambda: b.value("nodewarden_ib_port_state", **lab) == 4)
    assert b.value("nodewarden_ib_flash_cuts_total", **lab) == 1
    assert b.stop() == 0


@needs_kmsg
def test_sigkill_under_a_storm_leaves_journal_and_counter_equal(tmp_path: Path, agents: list[Agent]) -> None:
    """A storm of Xids written into the real /dev/kmsg while the real agent is SIGKILLed in the
    middle of it and started again: each record journaled once (one per boot id and seq), and
    the journal holds exactly as many of them as the counter counts (it held 430 more before
    the journal's own cursor was counted at restart)."""
    import threading
    L = Lines.make()
    state = tmp_path / "state"
    log = tmp_path / "agent.log"
    cfg = tmp_path / "agent.toml"
    cfg.write_text("[journal]\nsource_burst = 1000000\n[validator]\nenabled = false\n"
                   "[collectors]\nnvml = false\ninfiniband = false\nedac = false\npcie = false\nnetclass = false\n")
    a = start_agent(state, log, "--config", str(cfg))
    agents.append(a)
    n = 1500
    written = [0]

    def storm() -> None:
        for i in range(n):
            write_kmsg(L.xid48(0x20 + i % 4))
            written[0] += 1

    t = threading.Thread(target=storm)
    t.start()
    wait_for("the storm under way", lambda: written[0] >= n // 3)
    a.proc.kill()  # SIGKILL in the middle of the storm
    a.proc.wait(timeout=DEADLINE_S)
    t.join(timeout=60)
    assert written[0] == n
    b = start_agent(state, log, "--config", str(cfg))
    agents.append(b)

    def counted() -> float:
        s = b.samples()
        return sum(s.get((XID, frozenset(L.xid_labels(0x20 + j, 48).items())), 0.0) for j in range(4))

    lost = b.value("nodewarden_collector_kmsg_lost_records_total")
    assert lost is not None  # exported from the start, 0 until a record is lost
    if lost == 0:
        wait_for("every storm record counted", lambda: counted() == n)
    total = counted()
    mine = [e for e in journal_events(state) if L.pci_domain in (e.get("pci_bus_id") or "")]
    keys = [(e["attrs"]["boot_id"], e["attrs"]["seq"]) for e in mine]
    assert len(keys) == len(set(keys))  # nothing journaled twice
    assert len(mine) == total <= n  # journaled = counted
    assert b.value("nodewarden_collector_journal_dropped_records_total", reason="source_rate") == 0
    assert b.stop() == 0

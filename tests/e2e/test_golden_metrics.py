"""End to end golden test (node_exporter's pattern): the agent's collection run once against a
sysfs tree captured from a real machine (and the NVML simulator), the whole ``/metrics`` text
diffed with a committed golden file ``tests/golden/<host>.prom`` and linted with
``promtool check metrics``.

The collection is the daemon's own wiring (``build_collectors``, ``Poller``, ``EventSink`` with
the flash-cut detector, ``Agent.snapshot``, ``make_registry``), one poll, rendered with
prometheus_client's ``generate_latest``; the kernel-log collector is off (the ring buffer is
this machine's, not the fixture's). It runs in a child process: NVML is loaded through
``LD_LIBRARY_PATH``, which the dynamic loader reads only at process start. Hosts without GPUs
get the simulator with no state file, which answers as a node without the driver does
(``NVML_ERROR_DRIVER_NOT_LOADED``), so the output is the same on a machine with a real driver.

Regenerate after a deliberate change, then review the diff like code::

    NODEWARDEN_UPDATE_GOLDEN=1 PYTHONPATH=. python3 -m pytest tests/e2e/test_golden_metrics.py
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("NODEWARDEN_UPDATE_GOLDEN", "") not in ("", "0")
HOSTNAME = "golden-node"

# host fixture -> GPUs the NVML simulator shows (0: no state file, no driver)
HOSTS = {
    "h100-hgx-ndr": 8,
    "h100-hgx-ndr-aer": 8,
    "edac-sbridge-dimm": 0,
    "edac-amd-csrow": 0,
    "cx3-fdr": 0,
    "iwarp-opa": 0,
    "vm-virtio": 0,
}

# Values that change from run to run: replaced by a placeholder so the diff shows structure and
# stable values only. (sample-name regex, replacement value)
VOLATILE = (
    (re.compile(r"^nodewarden_collector_duration_seconds\{"), "<duration>"),
    (re.compile(r"^nodewarden_collector_last_success_timestamp_seconds\{"), "<timestamp>"),
    (re.compile(r"^nodewarden_collector_journal_bytes\b"), "<bytes>"),
    (re.compile(r"^nodewarden_\w*timestamp_seconds\b"), "<timestamp>"),
)
BUILD_INFO = re.compile(r'^(nodewarden_build_info\{version=")[^"]*(".*)$')


def normalise(text: str) -> str:
    out = []
    for line in text.splitlines():
        if not line.startswith("#"):
            m = BUILD_INFO.match(line)
            if m:
                line = f"{m.group(1)}<version>{m.group(2)}"
            for pat, repl in VOLATILE:
                if pat.match(line):
                    line = line.rsplit(" ", 1)[0] + " " + repl
                    break
        out.append(line)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# the child process: one collection, the /metrics text on stdout

def _render(sysfs: str, workdir: str) -> str:
    import logging
    import threading

    from prometheus_client import generate_latest

    from nodewarden.agent import config as cf
    from nodewarden.agent import exporter as ex
    from nodewarden.agent import state as st
    from nodewarden.agent.daemon import Agent
    from nodewarden.agent.poller import EventSink, FlashCuts, Poller, build_collectors, load_detector

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    work = Path(workdir)
    (work / "proc").mkdir(exist_ok=True)
    cfg = cf.AgentConfig(state_dir=str(work / "state"), hostname=HOSTNAME, sysfs=sysfs, procfs=str(work / "proc"),
                         collectors=tuple((c, c != ex.KERNEL_LOG) for c in cf.COLLECTORS),
                         validator=cf.ValidatorConfig(enabled=False), poll_interval_seconds=3600,
                         collector_timeout_seconds=20)
    state_dir = st.prepare_state_dir(cfg.state_dir)
    store = st.StateStore(state_dir, max_bytes=cfg.journal_max_bytes, max_age_days=cfg.journal_max_age_days,
                          max_day_bytes=cfg.journal_max_day_bytes)
    counters = ex.Counters()
    detector = load_detector(cfg.flash_cut_max_seconds)
    flash = FlashCuts(detector, counters, host=HOSTNAME) if detector is not None else None
    agent = Agent(cfg, counters, store, None, frozenset(), HOSTNAME,
                  observer=flash.observe_events if flash is not None else None)
    collectors = build_collectors([c for c in cfg.enabled_collectors if c != ex.KERNEL_LOG], sysfs, HOSTNAME)
    sink = EventSink(counters, store, lock=agent.lock, save=agent.save_state, flash=flash, host=HOSTNAME)
    agent.poller = Poller(collectors, counters, sink, interval=cfg.poll_interval_seconds,
                          timeout=cfg.collector_timeout_seconds)
    agent.poller.poll(threading.Event())
    registry = ex.make_registry(agent.snapshot, agent.poller.samples)
    text = generate_latest(registry).decode()
    agent.poller.stop()
    return text


def collect_once(host: str, tmp_path: Path) -> str:
    from tests import nvmlsim

    sysfs = tmp_path / "sys"
    shutil.copytree(FIXTURES / host, sysfs, symlinks=True)
    libdir = nvmlsim.build(tmp_path)
    state = tmp_path / "nvml.json"
    if HOSTS[host]:
        nvmlsim.write_state(state, gpus=nvmlsim.default_gpus(HOSTS[host]))
    env = nvmlsim.env(libdir, state)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, __file__, str(sysfs), str(work)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"rendering {host} failed:\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """host -> raw /metrics text, collected once per host for the golden diff and the lint."""
    class Lazy(dict):
        def __missing__(self, host: str) -> str:
            self[host] = collect_once(host, tmp_path_factory.mktemp(host))
            return self[host]

    return Lazy()


# promtool lint findings on the agent's output that are known product defects, with why. A
# host whose findings are all listed here is an expected failure naming them; anything else
# fails. Remove an entry once the product is fixed (the lint then simply passes).


# ---------------------------------------------------------------------------------------------
# tests

def test_normalise_masks_volatile_values_only() -> None:
    text = ('nodewarden_collector_duration_seconds{collector="nvml"} 0.0123\n'
            'nodewarden_collector_last_success_timestamp_seconds{collector="nvml"} 1.7e+09\n'
            'nodewarden_build_info{version="0.3.1"} 1.0\n'
            'nodewarden_collector_success{collector="nvml"} 1.0\n'
            '# HELP nodewarden_collector_duration_seconds x\n')
    assert normalise(text) == ('nodewarden_collector_duration_seconds{collector="nvml"} <duration>\n'
                               'nodewarden_collector_last_success_timestamp_seconds{collector="nvml"} <timestamp>\n'
                               'nodewarden_build_info{version="<version>"} 1.0\n'
                               'nodewarden_collector_success{collector="nvml"} 1.0\n'
                               '# HELP nodewarden_collector_duration_seconds x\n')


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_metrics_match_golden(host: str, rendered: dict[str, str]) -> None:
    got = normalise(rendered[host])
    golden = GOLDEN / f"{host}.prom"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
    if not golden.exists():
        pytest.fail(f"{golden.relative_to(REPO)} missing: run with NODEWARDEN_UPDATE_GOLDEN=1 and review it")
    want = golden.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"golden/{host}.prom", f"{host} (this run)"))
        pytest.fail(f"/metrics of {host} differs from its golden file "
                    f"(NODEWARDEN_UPDATE_GOLDEN=1 to accept, then review the diff):\n{diff}")


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_metrics_pass_promtool_check(host: str, rendered: dict[str, str]) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (Debian: apt-get install prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=rendered[host].encode(), capture_output=True,
                       timeout=30)
    findings = sorted({line.strip() for line in (r.stdout + r.stderr).decode().splitlines() if line.strip()})
    assert r.returncode == 0, f"promtool check metrics on {host}:\n" + "\n".join(findings)


if __name__ == "__main__":
    sys.stdout.write(_render(sys.argv[1], sys.argv[2]))

"""The NVML collector's GPU recovery action (nvml.h: field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
230, read through nvmlDeviceGetFieldValues; values nvmlDeviceGpuRecoveryAction_t), against the
NVML simulator (tests/nvmlsim) loaded by nvidia-ml-py in a child process whose clock the test
moves, and the pure value -> series / change -> event functions without NVML.

Expected values come from the header (as mirrored by NVIDIA's nvidia-ml-py 13.615.71, pynvml.py:
``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230``, ``NVML_GPU_RECOVERY_ACTION_NONE = 0`` ...
``_DRAIN_AND_RESET = 4``, ``_RECOVER_IMEX_DOMAIN = 5``, ``_BUS_RESET = 6``, ``_SYSTEM_REBOOT = 7``)
and the event shapes of ``gpu_reset_required`` and ``gpu_recovery_action`` (nodewarden.events)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` run as a script does not put the checkout on sys.path
    sys.path.insert(0, str(ROOT))

from nodewarden import nvml as fields  # noqa: E402
from nodewarden.collectors import nvml  # noqa: E402
from nodewarden.collectors.base import Snapshot  # noqa: E402
from tests import nvmlsim  # noqa: E402

# The child: one NvmlCollector kept across polls (NVML timeout 2 s), on a clock the test sets ("advance S"), logging
# at INFO to stderr (read at the end: what was recorded, how often). "agent-poll" runs one poll
# of the agent's own Poller (a worker thread with a 1 s timeout) around the same collector.
DRIVER = r"""
import json, logging, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
from nodewarden.collectors.nvml import NvmlCollector
now = [1_800_000_000.0]
c = NvmlCollector(hostname="node07", clock=lambda: now[0], timeout_s=2.0)
agent = []
def dump(s):
    return {"samples": [[x.name, dict(x.labels), x.value, x.kind] for x in s.samples],
            "events": [e.to_dict() for e in s.events]}
def poll():
    try:
        return dump(c.collect())
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
def agent_poll():
    from nodewarden.agent.exporter import Counters
    from nodewarden.agent.poller import Poller
    if not agent:
        agent.append(Poller([c], Counters(), None, interval=60.0, timeout=1.0))
    t0 = time.monotonic()
    agent[0].poll()
    health = agent[0].health()["nvml"]
    return {"seconds": time.monotonic() - t0, "success": health["success"], "error": health["error"],
            "samples": [[s.name, dict(s.labels), s.value, s.kind] for _, s in agent[0].samples()], "events": []}
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "poll":
        print(json.dumps(poll()), flush=True)
    elif cmd[0] == "advance":
        now[0] += float(cmd[1])
        print(json.dumps({"now": now[0]}), flush=True)
    elif cmd[0] == "unsupported":
        print(json.dumps({str(k): v for k, v in c.recovery_action_unsupported.items()}), flush=True)
    elif cmd[0] == "agent-poll":
        print(json.dumps(agent_poll()), flush=True)
"""

BUS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
       "0000:9b:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
SERIES = "nodewarden_gpu_recovery_action"
LABELS = ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset")  # the events' action names


class Child(nvmlsim.Child):
    """The child process running the collector (and, on ``agent-poll``, the agent's poller)."""

    def __init__(self, libdir: Path, state: Path) -> None:
        super().__init__(libdir, state, DRIVER)

    def ask(self, cmd: str, timeout: float = 30) -> dict[str, Any]:
        self.send(cmd)
        got = self.answer(timeout)
        assert got is not None, f"{cmd}: no answer"
        assert "error" not in got or cmd == "agent-poll", got["error"]
        return got

    def poll(self) -> "Polled":
        return Polled(self.ask("poll"))

    def stderr(self) -> str:
        """Kill the child and return everything it logged."""
        self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        return err



class Polled:
    def __init__(self, got: dict[str, Any]) -> None:
        self.samples = got["samples"]
        self.events = got["events"]

    def actions(self, gpu: str) -> dict[str, float]:
        """action label -> value of GPU ``gpu``'s recovery-action series."""
        return {lab["action"]: v for n, lab, v, _ in self.samples if n == SERIES and lab["gpu"] == gpu}

    def get(self, series: str, **labels: str) -> float | None:
        for n, lab, v, _ in self.samples:
            if n == "nodewarden_gpu_" + series and lab == labels:
                return v
        return None


def one_hot(action: str) -> dict[str, float]:
    return {a: (1.0 if a == action else 0.0) for a in LABELS}


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nvmlsim.build(tmp_path_factory.mktemp("nvmlsim"))


@pytest.fixture
def child(libdir: Path, tmp_path: Path):
    """(child, state path) over 8 H100s, GPUs 0-5 with the field (action none), 6 and 7 without."""
    gpus = nvmlsim.default_gpus()
    for g in gpus[:6]:
        g["recovery_action"] = nvmlsim.RECOVERY_NONE
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus)
    c = Child(libdir, state)
    yield c, state
    c.close()


# ---- the header's numbers -----------------------------------------------------------------------

def test_field_id_and_actions_are_nvml_h_s() -> None:
    assert fields.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == 230
    assert {c: fields.recovery_action_name(c) for c in range(9)} == {
        0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
        5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot", 8: "unknown"}
    assert fields.RECOVERY_ACTION_LABELS == LABELS
    pynvml = envneeds.module("pynvml", "nvidia-ml-py, the [test] extra")
    if not hasattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"):
        envneeds.need("nvidia-ml-py with NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "this one predates the field")
    # NVIDIA's own binding agrees (its constants mirror nvml.h).
    assert pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == 230
    for code, name in fields.RECOVERY_ACTIONS.items():
        const = getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name.upper()}", None)
        if const is not None:
            assert const == code, name


def test_a_pynvml_without_field_values_is_a_driver_without_the_field() -> None:
    class OldBinding:  # a stand-in module object, not pynvml: it has no nvmlDeviceGetFieldValues
        class NVMLError(Exception):
            value = 999

    got = fields.read_recovery_action(fields.Session(OldBinding), object())
    assert got == (None, fields.NVML_ERROR_FUNCTION_NOT_FOUND) and fields.driver_lacks_field(got.ret)
    assert [r for r in range(20) if fields.driver_lacks_field(r)] == [2, 3, 13]


# ---- pure: value -> series, change -> events ------------------------------------------------------

NOW = dt.datetime(2026, 12, 3, 8, 30, tzinfo=dt.timezone.utc)


def reading(action: int | None, **kw: Any) -> nvml.GpuReading:
    base: dict[str, Any] = {"uuid": "GPU-5", "pci_bus_id": "0000:ab:00.0", "name": "NVIDIA H100 80GB HBM3", "minor": 5}
    return nvml.GpuReading(5, recovery_action=action, **{**base, **kw})


def series(r: nvml.GpuReading) -> dict[str, float]:
    snap = Snapshot()
    nvml.samples(r, snap)
    out = {}
    for s in snap.samples:
        if s.name == SERIES:
            assert s.labels[0] == ("gpu", "5") and s.kind == "gauge" and "NVML" in s.help
            out[dict(s.labels)["action"]] = s.value
    return out


@pytest.mark.parametrize("code, want", [
    (0, one_hot("none")),
    (1, one_hot("gpu_reset")),
    (2, one_hot("node_reboot")),
    (3, one_hot("drain_p2p")),
    (4, one_hot("drain_and_reset")),
    (5, {**one_hot("-"), "recover_imex_domain": 1.0}),  # a newer action: its own series while current
    (7, {**one_hot("-"), "system_reboot": 1.0}),
    (42, {**one_hot("-"), "unknown": 1.0}),
    (None, {}),                                         # not read: no series at all
])
def test_series_one_hot(code: int | None, want: dict[str, float]) -> None:
    assert series(reading(code)) == want


def test_a_lost_gpu_exports_no_recovery_action() -> None:
    assert series(reading(1, lost=True)) == {}


@pytest.mark.parametrize("prev, cur, want", [
    (0, 0, None), (1, 1, None), (None, 1, None), (0, None, None),
    (0, 1, ("none", "gpu_reset")), (1, 0, ("gpu_reset", "none")), (2, 4, ("node_reboot", "drain_and_reset")),
    (0, 9, ("none", "unknown")),
])
def test_recovery_action_change(prev, cur, want) -> None:
    assert nvml.recovery_action_change(prev, cur) == want


def test_change_to_gpu_reset_is_two_events_with_the_spec_shapes() -> None:
    evs = nvml.events_between(reading(0), reading(1), NOW, "node07")
    assert [e.kind for e in evs] == ["gpu_recovery_action", "gpu_reset_required"]
    ra, rr = evs
    for e in evs:
        assert (e.source, e.host, e.device, e.time, e.time_kind, e.category, e.code) == \
            ("nvml", "node07", "0000:ab:00.0", NOW, "wall", "gpu_reset", None)
        assert e.raw == ("nvmlDeviceGetFieldValues(gpu 5, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION [230]) = "
                         "1 (NVML_GPU_RECOVERY_ACTION_GPU_RESET), was 0 (NVML_GPU_RECOVERY_ACTION_NONE)")
    assert ra.attrs == {"gpu": 5, "gpu_uuid": "GPU-5", "pci_bus_id": "0000:ab:00.0", "action": "gpu_reset",
                        "previous_action": "none", "action_code": 1, "previous_action_code": 0}
    assert rr.attrs == {"gpu": 5, "gpu_uuid": "GPU-5", "pci_bus_id": "0000:ab:00.0", "action": "gpu_reset",
                        "previous_action": "none", "action_code": 1, "status": None, "status_name": None,
                        "location": None}
    assert ra.message == "GPU 5 (0000:ab:00.0): NVML recovery action gpu_reset (was none)"
    d = rr.to_dict()
    assert (d["kind"], d["pci_bus_id"], d["attrs"]["action"]) == ("gpu_reset_required", "0000:ab:00.0", "gpu_reset")


@pytest.mark.parametrize("prev, cur, kinds, action", [
    (1, 0, ["gpu_recovery_action"], "none"),                          # recovered: no reset-required event
    (0, 2, ["gpu_recovery_action", "gpu_reset_required"], "node_reboot"),
    (3, 4, ["gpu_recovery_action", "gpu_reset_required"], "drain_and_reset"),  # drain_p2p re-queried
    (4, 4, [], None),
    (None, 4, [], None),                                              # first value read: a baseline
])
def test_change_events(prev, cur, kinds, action) -> None:
    evs = nvml.events_between(reading(prev), reading(cur), NOW, "node07")
    assert [e.kind for e in evs] == kinds
    assert all(e.attrs["action"] == action == e.category for e in evs)


def test_no_events_on_the_baseline_poll() -> None:
    assert nvml.events_between(None, reading(1), NOW, "node07") == []


# ---- through the simulator ------------------------------------------------------------------------

def test_series_and_change_events_through_nvml(child) -> None:
    c, state = child
    nvmlsim.update_gpu(state, 1, {"recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    first = c.poll()
    assert first.events == []  # the baseline, whatever the driver says
    assert first.actions("0") == one_hot("none")
    assert first.actions("1") == one_hot("gpu_reset")
    assert first.actions("6") == {} and first.actions("7") == {}  # no field: no series
    assert first.get("lost", gpu="6") == 0 and first.get("temperature_celsius", gpu="6") == 33  # the rest is read

    nvmlsim.update_gpu(state, 0, {"recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    nvmlsim.update_gpu(state, 1, {"recovery_action": nvmlsim.RECOVERY_NONE})
    nvmlsim.update_gpu(state, 4, {"recovery_action": nvmlsim.RECOVERY_DRAIN_AND_RESET})
    s = c.poll()
    assert s.actions("0") == one_hot("gpu_reset") and s.actions("1") == one_hot("none")
    assert s.actions("4") == one_hot("drain_and_reset")
    got = sorted((e["attrs"]["gpu"], e["kind"], e["attrs"]["previous_action"], e["attrs"]["action"]) for e in s.events)
    assert got == [(0, "gpu_recovery_action", "none", "gpu_reset"), (0, "gpu_reset_required", "none", "gpu_reset"),
                   (1, "gpu_recovery_action", "gpu_reset", "none"),
                   (4, "gpu_recovery_action", "none", "drain_and_reset"),
                   (4, "gpu_reset_required", "none", "drain_and_reset")]
    rr = next(e for e in s.events if e["kind"] == "gpu_reset_required" and e["attrs"]["gpu"] == 0)
    assert (rr["source"], rr["host"], rr["device"], rr["pci_bus_id"], rr["category"]) == \
        ("nvml", "node07", BUS[0], BUS[0], "gpu_reset")
    assert rr["attrs"]["gpu_uuid"] == nvmlsim.h100_gpu(0)["uuid"]
    assert rr["time"] == "2027-01-15T08:00:00Z"  # the child's clock, 1_800_000_000 s
    assert c.poll().events == []  # unchanged: nothing new


def test_not_supported_is_no_series_recorded_once_and_reprobed_rarely(child) -> None:
    c, state = child
    for _ in range(3):
        s = c.poll()
        assert s.actions("6") == {} and s.events == []
        c.ask("advance 10")
    assert c.ask("unsupported") == {"6": "NVML_ERROR_NOT_SUPPORTED", "7": "NVML_ERROR_NOT_SUPPORTED"}

    # A new driver answers now; the collector asks again only after RECOVERY_ACTION_REPROBE_SECONDS.
    nvmlsim.update_gpu(state, 6, {"recovery_action": nvmlsim.RECOVERY_NODE_REBOOT})
    assert c.poll().actions("6") == {}
    c.ask(f"advance {nvml.RECOVERY_ACTION_REPROBE_SECONDS}")
    s = c.poll()
    assert s.actions("6") == one_hot("node_reboot")
    assert s.events == []  # the first value read is a baseline: no change seen
    assert c.ask("unsupported") == {"7": "NVML_ERROR_NOT_SUPPORTED"}
    log = c.stderr()
    assert log.count("GPU 6: the driver has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (NVML_ERROR_NOT_SUPPORTED)") == 1
    assert log.count("GPU 7: the driver has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION") == 1
    assert "GPU 6: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers now" in log
    assert {line.split(" ", 1)[0] for line in log.splitlines()} == {"INFO"}  # recorded, never an error


def test_a_field_id_the_driver_does_not_know_is_not_supported_too(child) -> None:
    c, state = child
    nvmlsim.update_gpu(state, 2, {"field_returns": {"230": nvmlsim.NVML_ERROR_INVALID_ARGUMENT},
                                  "recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    s = c.poll()
    assert s.actions("2") == {} and s.get("lost", gpu="2") == 0
    assert c.ask("unsupported")["2"] == "NVML_ERROR_INVALID_ARGUMENT"


def test_the_whole_call_not_supported_is_no_series(child) -> None:
    c, state = child
    nvmlsim.update_gpu(state, 3, {"not_supported": ["retired_pages", "retired_pages_pending", "field_values"]})
    s = c.poll()
    assert s.actions("3") == {} and s.get("lost", gpu="3") == 0 and s.events == []


def test_a_failed_read_does_not_hide_a_change(child) -> None:
    """A transient error (NVML_ERROR_UNKNOWN in the value) exports nothing that poll; the next
    value read is compared with the last one read, so the change is still an event."""
    c, state = child
    assert c.poll().actions("5") == one_hot("none")
    nvmlsim.update_gpu(state, 5, {"field_returns": {"230": 999}, "recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    s = c.poll()
    assert s.actions("5") == {} and s.events == []
    assert "5" not in c.ask("unsupported")  # an error, not a driver without the field: asked every poll
    nvmlsim.update_gpu(state, 5, {"field_returns": {"230": 0}})
    s = c.poll()
    assert s.actions("5") == one_hot("gpu_reset")
    assert sorted(e["kind"] for e in s.events) == ["gpu_recovery_action", "gpu_reset_required"]
    assert {e["attrs"]["previous_action"] for e in s.events} == {"none"}


def test_gpu_lost_in_the_field_value_is_a_lost_gpu(child) -> None:
    c, state = child
    c.poll()
    nvmlsim.update_gpu(state, 2, {"field_returns": {"230": nvmlsim.NVML_ERROR_GPU_IS_LOST}})
    s = c.poll()
    assert s.get("lost", gpu="2") == 1 and s.actions("2") == {}
    [lost] = s.events
    assert lost["kind"] == "gpu_lost" and lost["raw"] == "nvmlDeviceGetFieldValues(gpu 2) = NVML_ERROR_GPU_IS_LOST"
    # Back after a reset, with an action: compared with nothing (the loss cleared it), no event.
    nvmlsim.update_gpu(state, 2, {"field_returns": {"230": 0}, "recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    s = c.poll()
    assert s.get("lost", gpu="2") == 0 and s.actions("2") == one_hot("gpu_reset") and s.events == []


def test_old_driver_has_no_field(tmp_path: Path) -> None:
    """A driver before r535 (the simulator's old build): the value answers NOT_SUPPORTED even
    when the state names an action; everything else is read."""
    old = nvmlsim.build(tmp_path, old_driver=True)
    gpus = nvmlsim.default_gpus(2)
    gpus[1]["recovery_action"] = nvmlsim.RECOVERY_GPU_RESET
    c = Child(old, nvmlsim.write_state(tmp_path / "nvml.json", gpus))
    try:
        s = c.poll()
        assert s.actions("0") == {} and s.actions("1") == {}
        assert s.get("clocks_event_reasons", gpu="1", reason="gpu_idle") == 1
        assert c.ask("unsupported") == {"0": "NVML_ERROR_NOT_SUPPORTED", "1": "NVML_ERROR_NOT_SUPPORTED"}
    finally:
        c.close()


def test_a_hung_field_read_times_out_only_its_poll(child) -> None:
    """nvmlDeviceGetFieldValues hangs on GPU 1 (the simulator's per-call hang): the poll raises
    NvmlTimeout after the collector's 2 s; a poll started meanwhile fails at once (the field read
    is still blocked in the driver) instead of queueing another thread behind it."""
    c, state = child
    assert c.poll().actions("1") == one_hot("none")
    nvmlsim.update_gpu(state, 1, {"hang_in": {"nvmlDeviceGetFieldValues": 60}})
    t0 = time.monotonic()
    c.send("poll")
    hung = c.answer(10)
    assert hung is not None and hung["error"].startswith("NvmlTimeout: NVML did not answer within 2 s")
    assert 1.9 <= time.monotonic() - t0 < 4
    t0 = time.monotonic()
    c.send("poll")
    busy = c.answer(10)
    assert busy is not None and "nvml collector poll has been blocked in the driver" in busy["error"]
    assert time.monotonic() - t0 < 0.5


def test_a_hung_field_read_never_blocks_the_agent(child) -> None:
    """Through the agent's Poller (worker thread, 1 s timeout): the poll returns after the
    timeout, the collector is marked failed and its last good snapshot, recovery action
    included, is still served; the next poll does not call it again and returns at once."""
    c, state = child
    nvmlsim.update_gpu(state, 1, {"recovery_action": nvmlsim.RECOVERY_GPU_RESET})
    ok = c.ask("agent-poll")
    assert ok["success"] is True
    assert {lab["action"]: v for n, lab, v, _ in ok["samples"] if n == SERIES and lab["gpu"] == "1"} == \
        one_hot("gpu_reset")
    nvmlsim.update_gpu(state, 1, {"hang_in": {"nvmlDeviceGetFieldValues": 60}})
    t0 = time.monotonic()
    hung = c.ask("agent-poll", timeout=20)
    assert time.monotonic() - t0 < 10 and 0.9 <= hung["seconds"] < 5
    assert hung["success"] is False and "did not return within 1s" in hung["error"]
    assert hung["samples"] == ok["samples"]  # the last good snapshot
    again = c.ask("agent-poll", timeout=20)
    assert again["seconds"] < 1.0 and again["success"] is False

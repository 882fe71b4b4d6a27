"""The NVML collector against the NVML simulator (tests/nvmlsim): nvidia-ml-py loads the
simulator as the driver's libnvidia-ml.so.1 in a child process that polls on request, while the
test edits the simulated devices' state between polls (ECC errors, a lost GPU, an unsupported
query, a hung driver). The delta -> event functions are tested directly, without NVML."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` run as a script does not put the checkout on sys.path
    sys.path.insert(0, str(ROOT))

from nodewarden.collectors import nvml  # noqa: E402
from nodewarden.collectors.base import Snapshot  # noqa: E402
from nodewarden.nvml import CLOCK_EVENT_REASONS  # noqa: E402
from tests import nvmlsim  # noqa: E402

# The child: one NvmlCollector kept across polls (events compare a poll with the previous one),
# its NVML timeout 2 s. "poll" prints the snapshot as one JSON line, with the seconds it took; a
# poll that raises prints {"error": ..., "seconds": ...}; "close" prints the seconds close() took.
DRIVER = r"""
import json, sys, time
from nodewarden.collectors.nvml import NvmlCollector
c = NvmlCollector(hostname="node07", timeout_s=2.0)
def poll():
    t0 = time.monotonic()
    try:
        s = c.collect()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}
    return {"samples": [[x.name, dict(x.labels), x.value, x.kind] for x in s.samples],
            "events": [e.to_dict() for e in s.events], "seconds": time.monotonic() - t0}
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "poll":
        print(json.dumps(poll()), flush=True)
    elif cmd == "close":
        t0 = time.monotonic()
        c.close()
        print(json.dumps({"seconds": time.monotonic() - t0}), flush=True)
"""

H100_NAME = "NVIDIA H100 80GB HBM3"
BUS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
       "0000:9b:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")


class Poller(nvmlsim.Child):
    """The child process running the collector."""

    def __init__(self, libdir: Path, state: Path) -> None:
        super().__init__(libdir, state, DRIVER)

    def poll(self) -> "Polled":
        self.send("poll")
        got = self.answer(30)
        assert got is not None, "poll did not answer"
        assert "error" not in got, got["error"]
        return Polled(got)


class Polled:
    """One snapshot from the child: series by (name, labels) and events."""

    def __init__(self, got: dict[str, Any]) -> None:
        self.samples = got["samples"]
        self.events = got["events"]
        self.by = {(n, tuple(sorted(lab.items()))): v for n, lab, v, _ in self.samples}
        assert len(self.by) == len(self.samples), "duplicate series"
        self.kinds = {n: k for n, _, _, k in self.samples}

    def get(self, series: str, /, **labels: str) -> float | None:
        return self.by.get(("nodewarden_gpu_" + series, tuple(sorted(labels.items()))))

    def names(self, gpu: str) -> set[str]:
        return {n for n, lab, _, _ in self.samples if lab["gpu"] == gpu}


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nvmlsim.build(tmp_path_factory.mktemp("nvmlsim"))


@pytest.fixture
def poller(libdir: Path, tmp_path: Path):
    """(poller, state path) over the default 8-GPU HGX H100 state."""
    state = nvmlsim.write_state(tmp_path / "nvml.json")
    p = Poller(libdir, state)
    yield p, state
    p.close()


ALL_SERIES = {"nodewarden_gpu_" + s for s in (
    "info", "lost", "ecc_errors_total", "remapped_rows", "row_remap_pending", "row_remap_failure",
    "nvlink_state", "nvlink_errors_total", "pcie_link_generation", "pcie_link_width", "pcie_replays_total",
    "clocks_event_reasons", "temperature_celsius", "power_watts")}


# ---- through NVML (the simulator) ----------------------------------------------------------------

def test_first_poll_reads_every_series_from_the_state(libdir: Path, tmp_path: Path) -> None:
    gpus = nvmlsim.default_gpus()
    gpus[0]["ecc"] = {"corrected": {"volatile": 4, "aggregate": 17}, "uncorrected": {"volatile": 0, "aggregate": 1}}
    gpus[1]["clocks_event_reasons"] = 0x48            # HwSlowdown | HwThermalSlowdown
    gpus[2]["nvlink_down"] = [5, 17]
    gpus[2]["nvlink_errors"] = {"5": {"crc_flit": 7, "crc_data": 1, "replay": 2, "recovery": 3}}
    gpus[3]["remapped_rows"] = {"correctable": 2, "uncorrectable": 1, "pending": 0, "failure": 0}
    gpus[4]["pcie"] = {"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16, "replays": 12}
    gpus[6].update(temperature_c=71, power_mw=612_345)
    p = Poller(libdir, nvmlsim.write_state(tmp_path / "nvml.json", gpus))
    try:
        s = p.poll()
    finally:
        p.close()
    assert s.events == []  # the first poll is the baseline, whatever the counters say
    for i in range(8):
        g = str(i)
        assert s.names(g) == ALL_SERIES  # retired pages: not supported on Hopper, so absent
        assert s.get("info", gpu=g, uuid=gpus[i]["uuid"], pci_bus_id=BUS[i], name=H100_NAME, minor=g) == 1
        assert s.get("lost", gpu=g) == 0
        assert sum(1 for n, lab, _, _ in s.samples if lab["gpu"] == g and n.endswith("nvlink_state")) == 18
        assert sum(1 for n, lab, _, _ in s.samples if lab["gpu"] == g and n.endswith("nvlink_errors_total")) == 72
    assert len(s.samples) == 8 * 116
    assert s.kinds["nodewarden_gpu_ecc_errors_total"] == "counter"
    assert s.kinds["nodewarden_gpu_nvlink_errors_total"] == "counter"
    assert s.kinds["nodewarden_gpu_pcie_replays_total"] == "counter"
    assert s.kinds["nodewarden_gpu_remapped_rows"] == "gauge"

    ecc = {(t, sc): s.get("ecc_errors_total", gpu="0", type=t, scope=sc)
           for t in ("corrected", "uncorrected") for sc in ("volatile", "aggregate")}
    assert ecc == {("corrected", "volatile"): 4, ("corrected", "aggregate"): 17,
                   ("uncorrected", "volatile"): 0, ("uncorrected", "aggregate"): 1}
    reasons = {lab["reason"]: v for n, lab, v, _ in s.samples
               if n == "nodewarden_gpu_clocks_event_reasons" and lab["gpu"] == "1"}
    assert reasons == {"gpu_idle": 0, "applications_clocks_setting": 0, "sw_power_cap": 0, "hw_slowdown": 1,
                       "sync_boost": 0, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 1,
                       "hw_power_brake_slowdown": 0, "display_clock_setting": 0}
    assert s.get("clocks_event_reasons", gpu="0", reason="gpu_idle") == 1
    assert [s.get("nvlink_state", gpu="2", link=str(k)) for k in range(18)] == [0 if k in (5, 17) else 1 for k in range(18)]
    assert {t: s.get("nvlink_errors_total", gpu="2", link="5", type=t) for t in ("crc_flit", "crc_data", "replay", "recovery")} \
        == {"crc_flit": 7, "crc_data": 1, "replay": 2, "recovery": 3}
    assert s.get("nvlink_errors_total", gpu="2", link="4", type="crc_flit") == 0
    assert (s.get("remapped_rows", gpu="3", cause="correctable"), s.get("remapped_rows", gpu="3", cause="uncorrectable"),
            s.get("row_remap_pending", gpu="3"), s.get("row_remap_failure", gpu="3")) == (2, 1, 0, 0)
    assert (s.get("pcie_link_generation", gpu="4", which="current"), s.get("pcie_link_generation", gpu="4", which="max"),
            s.get("pcie_link_width", gpu="4", which="current"), s.get("pcie_link_width", gpu="4", which="max"),
            s.get("pcie_replays_total", gpu="4")) == (4, 5, 8, 16, 12)
    assert s.get("pcie_link_generation", gpu="0", which="current") == 5
    assert s.get("temperature_celsius", gpu="6") == 71 and s.get("power_watts", gpu="6") == 612.345
    assert s.get("power_watts", gpu="0") == 71.0


def test_state_changes_between_polls_make_series_and_events(poller) -> None:
    p, state = poller
    first = p.poll()
    assert first.events == [] and first.get("lost", gpu="5") == 0

    nvmlsim.update_gpu(state, 3, {"ecc": {"corrected": {"volatile": 3, "aggregate": 3}}})
    nvmlsim.update_gpu(state, 5, {"lost": True})
    nvmlsim.update_gpu(state, 1, {"not_supported": ["retired_pages", "retired_pages_pending",
                                                    "nvmlDeviceGetRemappedRows"]})
    s = p.poll()

    assert s.get("ecc_errors_total", gpu="3", type="corrected", scope="volatile") == 3
    assert s.get("ecc_errors_total", gpu="3", type="corrected", scope="aggregate") == 3
    assert s.get("lost", gpu="5") == 1
    assert s.names("5") == {"nodewarden_gpu_info", "nodewarden_gpu_lost"}  # identity kept from the last poll
    assert s.get("info", gpu="5", uuid=nvmlsim.h100_gpu(5)["uuid"], pci_bus_id=BUS[5], name=H100_NAME, minor="5") == 1
    assert s.names("1") == ALL_SERIES - {"nodewarden_gpu_remapped_rows", "nodewarden_gpu_row_remap_pending",
                                         "nodewarden_gpu_row_remap_failure"}
    assert s.get("remapped_rows", gpu="0", cause="correctable") == 0

    by_kind = {e["kind"]: e for e in s.events}
    assert sorted(e["kind"] for e in s.events) == ["gpu_ecc", "gpu_lost"]
    ecc = by_kind["gpu_ecc"]
    assert (ecc["source"], ecc["host"], ecc["device"], ecc["pci_bus_id"], ecc["category"]) == \
        ("nvml", "node07", "0000:5d:00.0", "0000:5d:00.0", "memory_ecc")
    assert ecc["attrs"] == {"gpu": 3, "uuid": nvmlsim.h100_gpu(3)["uuid"], "type": "corrected", "scope": "volatile",
                            "delta": 3, "count": 3, "volatile_delta": 3, "aggregate_delta": 3}
    assert ecc["time_kind"] == "wall" and ecc["time"].endswith("Z")
    lost = by_kind["gpu_lost"]
    assert (lost["device"], lost["attrs"]["gpu"], lost["attrs"]["uuid"]) == ("0000:ab:00.0", 5, nvmlsim.h100_gpu(5)["uuid"])
    assert "NVML_ERROR_GPU_IS_LOST" in lost["raw"] and lost["raw"].startswith("nvmlDeviceGetHandleByIndex")

    # Nothing changed: no events; the lost GPU is reported once per loss, not every poll.
    again = p.poll()
    assert again.events == [] and again.get("lost", gpu="5") == 1

    # Row remapping on GPU 2: an uncorrectable row remapped, a reset pending.
    nvmlsim.update_gpu(state, 2, {"remapped_rows": {"uncorrectable": 1, "pending": 1}})
    s = p.poll()
    assert (s.get("remapped_rows", gpu="2", cause="uncorrectable"), s.get("row_remap_pending", gpu="2")) == (1, 1)
    [remap] = s.events
    assert remap["kind"] == "row_remap" and remap["device"] == "0000:3a:00.0"
    assert remap["attrs"]["changes"] == ["uncorrectable", "pending"]
    assert (remap["attrs"]["uncorrectable_delta"], remap["attrs"]["pending"], remap["attrs"]["failure"]) == (1, 1, 0)

    # The lost GPU back (after a reset), then lost again: a second loss, a second event.
    nvmlsim.update_gpu(state, 5, {"lost": False})
    back = p.poll()
    assert back.get("lost", gpu="5") == 0 and back.events == []
    nvmlsim.update_gpu(state, 5, {"lost": True})
    assert [e["kind"] for e in p.poll().events] == ["gpu_lost"]


def test_retired_pages_on_a_gpu_that_retires_pages(libdir: Path, tmp_path: Path) -> None:
    """Before Ampere, ECC errors retire pages and there is no row remapping (V100: 6 NVLinks)."""
    v100 = nvmlsim.h100_gpu(0, "00000000:1A:00.0")
    v100.update(name="Tesla V100-SXM2-32GB", nvlink_links=6, not_supported=["remapped_rows"],
                retired_pages={"single_bit_ecc": 2, "double_bit_ecc": 1, "pending": 1})
    p = Poller(libdir, nvmlsim.write_state(tmp_path / "nvml.json", [v100]))
    try:
        s = p.poll()
    finally:
        p.close()
    assert s.get("retired_pages", gpu="0", cause="single_bit_ecc") == 2
    assert s.get("retired_pages", gpu="0", cause="double_bit_ecc") == 1
    assert s.get("retired_pages_pending", gpu="0") == 1
    assert s.get("remapped_rows", gpu="0", cause="correctable") is None
    assert sorted(lab["link"] for n, lab, _, _ in s.samples if n == "nodewarden_gpu_nvlink_state") == list("012345")
    assert s.get("info", gpu="0", uuid=v100["uuid"], pci_bus_id="0000:1a:00.0", name="Tesla V100-SXM2-32GB", minor="0") == 1


def test_no_driver_is_an_empty_snapshot_and_init_is_retried(libdir: Path, tmp_path: Path) -> None:
    state = tmp_path / "nvml.json"  # not there yet: nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED
    p = Poller(libdir, state)
    try:
        s = p.poll()
        assert s.samples == [] and s.events == []
        nvmlsim.write_state(state, nvmlsim.default_gpus(2), init_error=nvmlsim.NVML_ERROR_DRIVER_NOT_LOADED)
        assert p.poll().samples == []
        nvmlsim.write_state(state, nvmlsim.default_gpus(2))  # the driver is loaded now
        s = p.poll()
        assert s.get("lost", gpu="1") == 0 and len(s.samples) == 2 * 116 and s.events == []
    finally:
        p.close()


def test_old_driver_clock_reasons_through_throttle_reasons(tmp_path: Path) -> None:
    """Before r535 only nvmlDeviceGetCurrentClocksThrottleReasons exists."""
    old = nvmlsim.build(tmp_path, old_driver=True)
    gpus = nvmlsim.default_gpus(1)
    gpus[0]["clocks_event_reasons"] = 0x4
    p = Poller(old, nvmlsim.write_state(tmp_path / "nvml.json", gpus))
    try:
        s = p.poll()
    finally:
        p.close()
    assert s.get("clocks_event_reasons", gpu="0", reason="sw_power_cap") == 1
    assert s.get("clocks_event_reasons", gpu="0", reason="gpu_idle") == 0


def test_hung_driver_times_out_the_poll_and_the_next_fails_at_once(poller) -> None:
    """A driver that hangs: collect() raises NvmlTimeout after the collector's 2 s (its thread is
    left in the driver); the next poll, while that call is still blocked, raises at once instead
    of queueing another thread behind the driver; once the driver answers, polls work again and
    the first one after the hang compares with the last poll that returned in time."""
    p, state = poller
    assert p.poll().get("lost", gpu="2") == 0
    nvmlsim.update_gpu(state, 2, {"hang_seconds": 4})
    nvmlsim.update_gpu(state, 3, {"ecc": {"corrected": {"volatile": 2, "aggregate": 2}}})
    p.send("poll")
    hung = p.answer(10)
    assert hung is not None and hung["error"].startswith("NvmlTimeout: NVML did not answer within 2 s")
    assert 1.9 <= hung["seconds"] < 3.5
    p.send("poll")
    again = p.answer(10)
    assert again is not None and again["seconds"] < 0.5
    assert again["error"].startswith("NvmlTimeout: NVML did not answer: nvml collector poll has been blocked")
    p.send("close")  # the agent stopping meanwhile: nvmlShutdown is not waited for behind the driver
    closed = p.answer(10)
    assert closed is not None and closed["seconds"] < 0.5
    nvmlsim.update_gpu(state, 2, {"hang_seconds": 0})
    time.sleep(4.5)  # the blocked call returns (the simulator's 4 s hang) and is forgotten
    s = p.poll()
    assert s.get("lost", gpu="2") == 0 and s.get("ecc_errors_total", gpu="3", type="corrected", scope="volatile") == 2
    # the ECC rise happened during the timed-out poll: its reads were not committed, this poll has the event
    assert [(e["kind"], e["attrs"]["gpu"], e["attrs"]["delta"]) for e in s.events] == [("gpu_ecc", 3, 2)]


# ---- pure: readings -> samples and events ---------------------------------------------------------

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
C, U = "corrected", "uncorrected"


def ecc(cv: int = 0, ca: int = 0, uv: int = 0, ua: int = 0) -> dict[tuple[str, str], int]:
    return {(C, "volatile"): cv, (C, "aggregate"): ca, (U, "volatile"): uv, (U, "aggregate"): ua}


@pytest.mark.parametrize("prev, cur, want", [
    (ecc(), ecc(), []),
    (ecc(), ecc(cv=3, ca=3), [(C, "volatile", 3, 3, 3, 3)]),               # one error, both counters: one event
    (ecc(cv=5, ca=9), ecc(cv=6, ca=9), [(C, "volatile", 1, 6, 1, 0)]),      # aggregate not updated yet
    (ecc(cv=5, ca=9), ecc(cv=0, ca=11), [(C, "aggregate", 2, 11, 0, 2)]),   # volatile reset (driver reload)
    (ecc(uv=1, ua=1), ecc(cv=2, ca=2, uv=2, ua=2), [(C, "volatile", 2, 2, 2, 2), (U, "volatile", 1, 2, 1, 1)]),
    (ecc(cv=5), ecc(cv=2), []),                                              # went down: a new baseline
    ({}, ecc(cv=3), []),                                                     # not supported before
    ({(C, "volatile"): 1}, {(C, "aggregate"): 4}, []),                       # no counter in both polls
])
def test_ecc_increases(prev, cur, want) -> None:
    got = [(i["type"], i["scope"], i["delta"], i["count"], i["volatile_delta"], i["aggregate_delta"])
           for i in nvml.ecc_increases(prev, cur)]
    assert got == want


RR = nvml.RemappedRows


@pytest.mark.parametrize("prev, cur, want", [
    (RR(0, 0, 0, 0), RR(0, 0, 0, 0), []),
    (RR(0, 0, 0, 0), RR(1, 0, 0, 0), ["correctable"]),
    (RR(0, 0, 0, 0), RR(0, 1, 1, 0), ["uncorrectable", "pending"]),
    (RR(0, 1, 1, 0), RR(0, 1, 0, 0), []),                 # the reset applied the remap
    (RR(0, 1, 1, 0), RR(0, 1, 1, 0), []),                 # still pending: already reported
    (RR(3, 5, 0, 0), RR(3, 5, 0, 1), ["failure"]),
    (None, RR(3, 5, 1, 1), []),                           # baseline
    (RR(0, 0, 0, 0), None, []),                           # not supported now
])
def test_remap_changes(prev, cur, want) -> None:
    assert nvml.remap_changes(prev, cur) == want


def reading(index: int = 3, **kw: Any) -> nvml.GpuReading:
    base: dict[str, Any] = {"uuid": "GPU-3", "pci_bus_id": "0000:5d:00.0", "name": H100_NAME, "minor": 3}
    return nvml.GpuReading(index, **{**base, **kw})


def test_events_between() -> None:
    prev = reading(ecc=ecc(), remapped_rows=RR(0, 0, 0, 0))
    assert nvml.events_between(None, reading(ecc=ecc(cv=9), lost=True), NOW, "n1") == []  # baseline
    evs = nvml.events_between(prev, reading(ecc=ecc(uv=2, ua=2), remapped_rows=RR(0, 2, 1, 0)), NOW, "n1")
    assert [e.kind for e in evs] == ["gpu_ecc", "row_remap"]
    e = evs[0]
    assert (e.source, e.host, e.device, e.time, e.time_kind, e.category) == \
        ("nvml", "n1", "0000:5d:00.0", NOW, "wall", "memory_ecc")
    assert e.raw_time == f"{NOW.timestamp():.6f}"
    assert e.attrs == {"gpu": 3, "uuid": "GPU-3", "pci_bus_id": "0000:5d:00.0", "type": "uncorrected",
                       "scope": "volatile", "delta": 2, "count": 2, "volatile_delta": 2, "aggregate_delta": 2}
    assert e.message == "GPU 3 (0000:5d:00.0): 2 new uncorrected ECC errors (volatile count 2)"
    assert e.raw == ("nvmlDeviceGetTotalEccErrors(gpu 3, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)"
                     " = 2, was 0")
    assert evs[1].attrs["changes"] == ["uncorrectable", "pending"] and evs[1].attrs["uncorrectable_delta"] == 2

    lost = reading(lost=True, lost_call="nvmlDeviceGetName")
    [e] = nvml.events_between(prev, lost, NOW, "n1")
    assert (e.kind, e.device, e.category, e.attrs["gpu"], e.attrs["uuid"]) == \
        ("gpu_lost", "0000:5d:00.0", "uncorrectable", 3, "GPU-3")
    assert e.raw == "nvmlDeviceGetName(gpu 3) = NVML_ERROR_GPU_IS_LOST"
    assert nvml.events_between(lost, lost, NOW, "n1") == []  # once per loss
    assert nvml.newly_lost(lost, prev) is False


def test_samples_leave_out_what_nvml_did_not_give() -> None:
    snap = Snapshot()
    nvml.samples(reading(ecc={(C, "volatile"): 1}, pcie_replays=4, clocks_event_reasons=0x80,
                         power_milliwatts=700_000), snap)
    got = {(s.name.removeprefix("nodewarden_gpu_"), s.labels[1:]): s.value for s in snap.samples}
    assert got.pop(("clocks_event_reasons", (("reason", "hw_power_brake_slowdown"),))) == 1
    assert {k: v for k, v in got.items() if k[0] == "clocks_event_reasons"} == \
        {("clocks_event_reasons", (("reason", r.name),)): 0 for r in CLOCK_EVENT_REASONS.values()
         if r.name != "hw_power_brake_slowdown"}
    got = {k: v for k, v in got.items() if k[0] != "clocks_event_reasons"}
    assert got == {
        ("info", (("uuid", "GPU-3"), ("pci_bus_id", "0000:5d:00.0"), ("name", H100_NAME), ("minor", "3"))): 1,
        ("lost", ()): 0,
        ("ecc_errors_total", (("type", C), ("scope", "volatile"))): 1,
        ("pcie_replays_total", ()): 4,
        ("power_watts", ()): 700.0,
    }
    assert all(s.labels[0] == ("gpu", "3") for s in snap.samples)
    assert all("nvml" in s.help.lower() for s in snap.samples)

    snap = Snapshot()
    nvml.samples(nvml.GpuReading(7, lost=True), snap)  # lost before it ever answered: no identity
    assert [(s.name, s.labels, s.value) for s in snap.samples] == [("nodewarden_gpu_lost", (("gpu", "7"),), 1.0)]


def test_every_series_is_documented_with_its_nvml_function() -> None:
    doc = nvml.__doc__ or ""
    for name, (kind, help_) in nvml.SERIES.items():
        assert f"``{name}" in doc or name.removeprefix("nodewarden_gpu_") in doc, name
        assert "nvml" in help_.lower() or "NVML" in help_, name
        assert name.endswith("_total") == (kind == "counter"), name


def test_no_nvml_library_is_an_empty_snapshot(tmp_path: Path) -> None:
    """No libnvidia-ml.so.1 at all (a CPU node): NVML_ERROR_LIBRARY_NOT_FOUND, an empty snapshot."""
    code = ("from nodewarden.collectors.nvml import NvmlCollector; c = NvmlCollector('n'); "
            "s = c.collect(); s2 = c.collect(); print(len(s.samples), len(s2.samples), len(s.events))")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVMLSIM_STATE")}
    env.update(PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=str(tmp_path))
    if any(Path(d, "libnvidia-ml.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        pytest.skip("this machine has the NVIDIA driver's NVML")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0", "0"]

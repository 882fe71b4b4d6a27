"""The validator's links and gpu_memory checks fail fast on a GPU that says it must be reset:
NVML's recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230; nvmlDeviceGpuRecoveryAction_t
0 none, 1 gpu_reset, 2 node_reboot, 3 drain_p2p, 4 drain_and_reset, per nvml.h) read through the
checks' shared NVML snapshot (nodewarden.validator.base.nvml_snapshot), answered by the NVML
simulator (tests/nvmlsim) in a ``nodewarden validate`` child process. Action 0 changes no
verdict; a driver without the field (the value's nvmlReturn NVML_ERROR_NOT_SUPPORTED, or the
simulator's pre-r535 build) is no failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` run as a script does not put the checkout on sys.path
    sys.path.insert(0, str(ROOT))

from nodewarden import exitcodes  # noqa: E402
from nodewarden.validator import base  # noqa: E402
from nodewarden.validator.checks import gpu_memory, links  # noqa: E402
from tests import nvmlsim  # noqa: E402

H100 = ROOT / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
GPU_BUSES = ("18", "2a", "3a", "5d", "9b", "ab", "ba", "db")  # the fixture tree's GPUs, NVML order
PCI = tuple(f"0000:{b}:00.0" for b in GPU_BUSES)
MiB = 1 << 20
GM_SMALL = ("gpu_memory.cpu_buffer_bytes=4194304", "gpu_memory.slice_bytes=1048576",
            "gpu_memory.walking_bits=[0, 63]", "gpu_memory.copy_iterations=2")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base_dir = tmp_path_factory.mktemp("nvml")
    return {"current": nvmlsim.build(base_dir), "old": nvmlsim.build(base_dir, old_driver=True)}


def state(tmp_path: Path, patches: dict[int, dict[str, Any]] | None = None, *, field: bool = True) -> Path:
    """Eight idle H100s on the fixture's buses; with ``field`` every GPU has the recovery-action
    field (action none) unless its patch says otherwise; without, the driver lacks it."""
    gpus = [nvmlsim.h100_gpu(i, f"00000000:{b.upper()}:00.0") for i, b in enumerate(GPU_BUSES)]
    for i, g in enumerate(gpus):
        if field:
            g["recovery_action"] = nvmlsim.RECOVERY_NONE
        g.update((patches or {}).get(i, {}))
    return nvmlsim.write_state(tmp_path / "nvml.json", gpus)


def validate(libdir: Path, st: Path, tmp_path: Path, check: str, *args: str, sets: tuple[str, ...] = ()
             ) -> tuple[int, dict[str, Any], str]:
    env = nvmlsim.env(libdir, st)
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / f"report-{check}.json"
    cmd = [sys.executable, "-m", "nodewarden", "validate", "--checks", check, "--profile", "h100_sxm5_80gb",
           "--no-progress", "--json", str(out), *args]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.exists(), p.stderr
    return p.returncode, json.loads(out.read_text())["checks"][0], p.stdout


def run_links(libdir: Path, st: Path, tmp_path: Path, *sets: str) -> tuple[int, dict[str, Any], str]:
    return validate(libdir, st, tmp_path, "links", "--sysfs", str(H100), sets=("links.nvml=true", *sets))


def run_gpu_memory(libdir: Path, st: Path, tmp_path: Path, *sets: str) -> tuple[int, dict[str, Any], str]:
    envneeds.module("torch", "the GPU memory check (tests/run.sh installs the CPU build)")
    return validate(libdir, st, tmp_path, "gpu_memory", "--device", "cpu",
                    sets=(*GM_SMALL, "gpu_memory.nvml=true", *sets))


def verdict(r: dict[str, Any]) -> tuple[Any, ...]:
    """What a recovery action of none must not change: status, reason, action, measurements."""
    ms = [(m["name"], m["device"], m["unit"], m["threshold"]) for m in r["measurements"]]
    return r["status"], r["reason"], r["action"], ms


# ---- pure ----------------------------------------------------------------------------------------

def snap_gpu(index: int, action: str | None, code: int | None, read: str = "ok") -> dict[str, Any]:
    return {"index": index, "pci": PCI[index], "uuid": f"GPU-{index}", "recovery_action": action,
            "recovery_action_code": code, "recovery_action_read": read}


def test_reset_required_lists_the_gpus_that_are_not_none() -> None:
    gpus = [snap_gpu(0, "none", 0), snap_gpu(1, "gpu_reset", 1),
            snap_gpu(2, None, None, "not_supported (NVML_ERROR_NOT_SUPPORTED)"),
            snap_gpu(3, None, None, "error (NVML_ERROR_UNKNOWN)"), snap_gpu(4, "drain_and_reset", 4)]
    bad = base.reset_required(gpus)
    assert bad == [{"gpu": 1, "pci_bus_id": "0000:2a:00.0", "uuid": "GPU-1", "action": "gpu_reset", "action_code": 1},
                   {"gpu": 4, "pci_bus_id": "0000:9b:00.0", "uuid": "GPU-4", "action": "drain_and_reset",
                    "action_code": 4}]
    assert base.reset_required_reason(bad) == (
        "GPU 1 (0000:2a:00.0) must be recovered first: NVML recovery action gpu_reset; "
        "GPU 4 (0000:9b:00.0) must be recovered first: NVML recovery action drain_and_reset")
    action = base.reset_required_action(bad)
    assert action.startswith("drain the node; GPU 1 (gpu_reset): ") and "nvidia-smi -r -i 1" in action
    assert "GPU 4 (drain_and_reset): " in action and "nvidia-smi -r -i 4" in action
    assert base.reset_required([snap_gpu(0, "none", 0)]) == []


@pytest.mark.parametrize("mode, auto, want", [
    ("auto", True, True), ("auto", False, False), ("AUTO", True, True), (True, False, True), (False, True, False),
    ("true", False, True), ("false", True, False), ("0", True, False), ("no", True, False), ("yes", False, True),
])
def test_nvml_enabled(mode, auto, want) -> None:
    assert base.nvml_enabled(mode, auto) is want


@pytest.mark.parametrize("bad", [{"nvml": "maybe"}, {"nvml": 1.5}, {"nvml_timeout_seconds": 0},
                                 {"nvml_timeout_seconds": True}])
def test_gpu_memory_nvml_params_are_checked(bad) -> None:
    with pytest.raises(ValueError, match="nvml"):
        gpu_memory.checked_params(bad)


# ---- links ---------------------------------------------------------------------------------------

def test_links_fails_fast_on_a_gpu_that_must_be_reset(sim, tmp_path: Path) -> None:
    st = state(tmp_path, {1: {"recovery_action": nvmlsim.RECOVERY_GPU_RESET}})
    code, r, out = run_links(sim["current"], st, tmp_path)
    assert code == exitcodes.UNHEALTHY and r["status"] == "fail"
    assert r["reason"] == "GPU 1 (0000:2a:00.0) must be recovered first: NVML recovery action gpu_reset"
    assert "GPU 1 (gpu_reset)" in r["action"] and "nvidia-smi -r -i 1" in r["action"]
    assert r["details"]["reset_required"] == [{"gpu": 1, "pci_bus_id": "0000:2a:00.0", "uuid": nvmlsim.h100_gpu(1)["uuid"],
                                               "action": "gpu_reset", "action_code": 1}]
    assert "parts" not in r["details"] and r["measurements"] == []  # failed before any part ran
    assert "DRAIN: nodewarden links: GPU 1 (0000:2a:00.0) must be recovered first" in out
    gpus = {g["index"]: g for g in r["details"]["gpus"]}
    assert (gpus[1]["recovery_action"], gpus[1]["recovery_action_code"], gpus[1]["recovery_action_read"]) == \
        ("gpu_reset", 1, "ok")
    assert gpus[0]["recovery_action"] == "none"


def test_links_names_every_gpu_and_action(sim, tmp_path: Path) -> None:
    st = state(tmp_path, {3: {"recovery_action": nvmlsim.RECOVERY_NODE_REBOOT},
                          6: {"recovery_action": nvmlsim.RECOVERY_DRAIN_AND_RESET}})
    code, r, _ = run_links(sim["current"], st, tmp_path)
    assert code == exitcodes.UNHEALTHY
    assert r["reason"] == ("GPU 3 (0000:5d:00.0) must be recovered first: NVML recovery action node_reboot; "
                           "GPU 6 (0000:ba:00.0) must be recovered first: NVML recovery action drain_and_reset")
    assert "GPU 3 (node_reboot): reboot the node" in r["action"]


def test_links_action_none_changes_nothing(sim, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code0, with_none, _ = run_links(sim["current"], state(tmp_path / "a"), tmp_path / "a")
    code1, without, _ = run_links(sim["current"], state(tmp_path / "b", field=False), tmp_path / "b")
    assert code0 == code1 == exitcodes.OK
    assert verdict(with_none) == verdict(without)
    assert {g["recovery_action"] for g in with_none["details"]["gpus"]} == {"none"}
    assert {g["recovery_action_read"] for g in without["details"]["gpus"]} == {"not_supported (NVML_ERROR_NOT_SUPPORTED)"}
    assert "reset_required" not in with_none["details"]


def test_links_a_lost_gpu_fails_the_nvlink_part(sim, tmp_path: Path) -> None:
    """NVML_ERROR_GPU_IS_LOST is the driver reporting a fault: the nvlink part fails naming it,
    it is never skipped as "NVML unavailable"."""
    st = state(tmp_path, {2: {"lost": 1}})
    code, r, _ = run_links(sim["current"], st, tmp_path)
    assert code == exitcodes.UNHEALTHY and r["status"] == "fail"
    nvlink = r["details"]["parts"]["nvlink"]
    assert nvlink["status"] == "fail"
    assert "NVML reports a GPU lost (NVML_ERROR_GPU_IS_LOST" in nvlink["reason"]
    assert "NVML reports a GPU lost" in r["reason"]


def test_links_other_faults_still_fail_when_the_action_is_none(sim, tmp_path: Path) -> None:
    st = state(tmp_path, {3: {"nvlink_down": [5, 17]}})
    code, r, _ = run_links(sim["current"], st, tmp_path)
    assert code == exitcodes.UNHEALTHY and "GPU 0000:5d:00.0 NVLink 5,17 down (16/18 active)" in r["reason"]


@pytest.mark.parametrize("build, patch", [
    ("current", {"field_returns": {"230": nvmlsim.NVML_ERROR_NOT_SUPPORTED}}),  # the value: NOT_SUPPORTED
    ("current", {"not_supported": ["field_values"]}),                          # the whole call
    ("old", {}),                                                                # a pre-r535 driver
])
def test_links_a_driver_without_the_field_is_not_failed_for_it(sim, tmp_path: Path, build: str, patch) -> None:
    st = state(tmp_path, {2: {"recovery_action": nvmlsim.RECOVERY_GPU_RESET, **patch}})
    code, r, _ = run_links(sim[build], st, tmp_path)
    assert code == exitcodes.OK, r["reason"]
    g2 = r["details"]["gpus"][2]
    assert g2["recovery_action"] is None and g2["recovery_action_read"].startswith("not_supported (")


# ---- gpu_memory ----------------------------------------------------------------------------------

def test_gpu_memory_fails_fast_on_a_gpu_that_must_be_reset(sim, tmp_path: Path) -> None:
    st = state(tmp_path, {1: {"recovery_action": nvmlsim.RECOVERY_GPU_RESET}})
    code, r, out = run_gpu_memory(sim["current"], st, tmp_path)
    assert code == exitcodes.UNHEALTHY and r["status"] == "fail"
    assert r["reason"] == "GPU 1 (0000:2a:00.0) must be recovered first: NVML recovery action gpu_reset"
    assert r["details"]["reset_required"][0]["gpu"] == 1 and r["details"]["reset_required"][0]["action"] == "gpu_reset"
    assert r["details"]["recovery_actions"]["0000:2a:00.0"] == "gpu_reset"
    assert r["measurements"] == []  # nothing allocated, nothing tested
    assert "DRAIN: nodewarden gpu_memory: GPU 1 (0000:2a:00.0)" in out


def test_gpu_memory_action_none_changes_nothing(sim, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code0, with_none, _ = run_gpu_memory(sim["current"], state(tmp_path / "a"), tmp_path / "a")
    code1, no_nvml, _ = run_gpu_memory(sim["current"], state(tmp_path / "b"), tmp_path / "b", "gpu_memory.nvml=false")
    assert code0 == code1 == exitcodes.OK
    assert verdict(with_none) == verdict(no_nvml)
    assert with_none["details"]["recovery_actions"] == {p: "none" for p in PCI}
    assert "recovery_actions" not in no_nvml["details"]


def test_gpu_memory_driver_without_the_field_passes(sim, tmp_path: Path) -> None:
    code, r, _ = run_gpu_memory(sim["current"], state(tmp_path, field=False), tmp_path)
    assert code == exitcodes.OK and r["status"] == "pass", r["reason"]
    assert set(r["details"]["recovery_actions"].values()) == {"not_supported (NVML_ERROR_NOT_SUPPORTED)"}


def test_gpu_memory_on_the_cpu_device_does_not_ask_nvml_by_default(sim, tmp_path: Path) -> None:
    """``nvml=auto`` asks NVML only when the device under test is CUDA."""
    st = state(tmp_path, {1: {"recovery_action": nvmlsim.RECOVERY_GPU_RESET}})
    code, r, _ = run_gpu_memory(sim["current"], st, tmp_path, "gpu_memory.nvml=auto")
    assert code == exitcodes.OK and "recovery_actions" not in r["details"]


def test_gpu_memory_hung_nvml_fails_fast(sim, tmp_path: Path) -> None:
    st = state(tmp_path, {0: {"hang_in": {"nvmlDeviceGetFieldValues": 30}}})
    code, r, _ = run_gpu_memory(sim["current"], st, tmp_path, "gpu_memory.nvml_timeout_seconds=1")
    assert code == exitcodes.UNHEALTHY
    assert r["reason"].startswith("NVML did not answer within 1 s") and r["measurements"] == []

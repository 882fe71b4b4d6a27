"""The links check's PCIe warnings on a copy of the H100 fixture tree (a link whose status the
kernel cannot tell, a function whose class cannot be read: warn naming the function), and its
NVLink verdicts under a profile that expects no NVLink count (generic,
A100 PCIe), reached through ``nodewarden validate`` with NVML answered by the simulator
(tests/nvmlsim, loaded by nvidia-ml-py in the child): some links of a GPU down warns naming it,
no active link at all skips the part (PCIe-only GPUs, nothing expected), and NVML that sees no
GPU skips it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import links
from tests import nvmlsim

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
GPU_BUSES = ("18", "2a", "3a", "5d", "9b", "ab", "ba", "db")


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nvmlsim.build(tmp_path_factory.mktemp("nvml"))


def nvlink_part(libdir: Path, tmp_path: Path, state: list[dict]) -> dict:
    """The ``nvlink`` part of ``validate --checks links --profile generic`` on the H100 fixture
    tree, NVML answering ``state``."""
    env = nvmlsim.env(libdir, nvmlsim.write_state(tmp_path / "nvml.json", state))
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "nodewarden", "validate", "--checks", "links", "--profile", "generic",
                    "--sysfs", str(H100), "--set", "links.nvml=true", "--no-progress", "--json", str(out)],
                   env=env, capture_output=True, text=True, timeout=60)
    (check,) = json.loads(out.read_text())["checks"]
    return check["details"]["parts"]["nvlink"]


def gpus(**patches: dict) -> list[dict]:
    state = [nvmlsim.h100_gpu(i, f"00000000:{b.upper()}:00.0") for i, b in enumerate(GPU_BUSES)]
    for i, patch in patches.items():
        state[int(i[1:])].update(patch)
    return state


def test_some_links_down_warns_naming_the_gpu(libdir: Path, tmp_path: Path) -> None:
    part = nvlink_part(libdir, tmp_path, gpus(g2={"nvlink_down": [0, 9]}))
    assert part["status"] == "warn"
    assert part["reason"] == "GPU 0000:3a:00.0 16 of 18 NVLinks active"


def test_no_active_link_with_none_expected_is_skip(libdir: Path, tmp_path: Path) -> None:
    state = gpus(**{f"g{i}": {"nvlink_down": list(range(18))} for i in range(8)})
    part = nvlink_part(libdir, tmp_path, state)
    assert part == {"status": "skip", "reason": "no active NVLink (none expected by the profile)"}


def test_nvml_without_gpus_is_skip(libdir: Path, tmp_path: Path) -> None:
    part = nvlink_part(libdir, tmp_path, [])
    assert part == {"status": "skip", "reason": "NVML sees no GPU"}


@pytest.mark.parametrize("rel, value, warning", [
    ("0000:3a:00.0/current_link_speed", "Unknown", "0000:3a:00.0 PCIe link status unknown (Unknown, x16)"),
    ("0000:bc:00.0/class", "", "0000:bc:00.0 class unreadable (bus/pci/devices/0000:bc:00.0/class): not counted "
                               "as a GPU or NIC, its link held to its own maximum"),
], ids=["link-status-unknown", "class-unreadable"])
def test_pcie_attribute_the_kernel_cannot_tell_warns_naming_the_function(tmp_path: Path, rel, value, warning):
    tree = tmp_path / "sys"
    shutil.copytree(H100, tree, symlinks=True)
    (tree / "bus/pci/devices" / rel).write_text(value + "\n")
    prof = profiles.load("h100_sxm5_80gb")
    prof["links"]["nvml"] = False
    ctx = RunContext(profile=prof, sysfs=tree)
    r = links.run(ctx, runner.params_for("links", ctx))
    assert r.status == "warn" and warning in r.reason
    assert r.details["parts"]["pcie"]["warnings"] == [warning]

"""A node whose PCI bus holds NVIDIA GPUs while NVML cannot be initialised (no driver loaded, no
libnvidia-ml.so.1 in the container) fails the NVML collector's poll, naming both; a node without
NVIDIA GPUs and without NVML polls nothing and succeeds. The child process has no NVML library
(LD_LIBRARY_PATH empty, none on this machine): the real nvmlInit path."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "sysfs"

CHILD = r"""
import json, sys
from nodewarden.collectors.nvml import NvmlCollector, NvmlUnavailable
c = NvmlCollector(hostname="n", sysfs=sys.argv[1] if sys.argv[1] != "-" else None)
out = []
for _ in range(2):
    try:
        s = c.collect()
        out.append(["ok", len(s.samples)])
    except NvmlUnavailable as e:
        out.append(["unavailable", str(e)])
print(json.dumps(out))
"""


def poll_twice(sysfs: str, tmp_path: Path) -> list:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LD_LIBRARY_PATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", CHILD, sysfs], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_gpus_on_the_bus_without_nvml_fail_the_poll(tmp_path: Path) -> None:
    out = poll_twice(str(FIXTURES / "h100-hgx-ndr"), tmp_path)
    assert [how for how, _ in out] == ["unavailable", "unavailable"]  # every poll, not only the first
    msg = out[0][1]
    assert "NVML_ERROR_LIBRARY_NOT_FOUND" in msg and "8 NVIDIA GPU(s) are on the PCI bus" in msg, msg
    assert "0000:18:00.0" in msg and msg.endswith("no GPU is read")


def test_no_gpu_and_no_nvml_is_a_node_without_gpus(tmp_path: Path) -> None:
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    assert poll_twice(str(tmp_path / "sys"), tmp_path) == [["ok", 0], ["ok", 0]]
    assert poll_twice("-", tmp_path) == [["ok", 0], ["ok", 0]]  # no sysfs given: nothing to look at

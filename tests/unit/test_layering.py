"""The import direction of DESIGN.md for the read layer: the agent's collectors and the read
layer (``nodewarden.sysfs``) never load the validator. Checked in a fresh interpreter, so that
modules other tests imported cannot hide an import."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", [
    "nodewarden.sysfs.attrs", "nodewarden.sysfs.infiniband", "nodewarden.sysfs.pci",
    "nodewarden.collectors.edac", "nodewarden.collectors.infiniband", "nodewarden.collectors.netclass",
    "nodewarden.collectors.pcie",
])
def test_module_loads_no_validator_module(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('nodewarden.validator'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"{module} loads {out.strip()}"

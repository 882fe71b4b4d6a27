"""The compute checks' own ``run()`` without a usable device (the runner stops before it, a
direct call must not pass either): ``skip`` on a node without an NVIDIA GPU, ``error`` when the
device asked for is not there (``--device cuda`` on a CPU-only PyTorch). Nothing is measured."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import allreduce, gemm, gpu_memory  # noqa: E402
from nodewarden.validator.result import ERROR, SKIP  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="this node has a CUDA device")
CHECKS = [gemm, gpu_memory, allreduce]


def params(mod):
    return dict(mod.DEFAULTS)


@pytest.mark.parametrize("mod", CHECKS, ids=lambda m: m.NAME)
def test_cuda_asked_for_on_a_cpu_only_torch_is_an_error(mod):
    r = mod.run(RunContext(profile={}, device="cuda"), params(mod))
    assert r.status == ERROR and r.measurements == []
    assert r.reason.startswith("--device cuda: PyTorch ") and "CPU-only build" in r.reason


@pytest.mark.parametrize("mod", CHECKS, ids=lambda m: m.NAME)
def test_no_gpu_on_the_node_is_skip(mod, tmp_path):
    ctx = RunContext(profile={}, device="auto", sysfs=tmp_path)  # an empty PCI bus
    if ctx.compute().status != SKIP:
        pytest.skip(f"NVML reports GPUs here: {ctx.compute().reason}")
    r = mod.run(ctx, params(mod))
    assert r.status == SKIP and r.measurements == []
    assert r.reason == "no NVIDIA GPU on this node (none on the PCI bus, none in NVML)"

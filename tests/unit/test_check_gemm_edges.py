"""The gemm check's edges on the CPU device, each held to its verdict or error text: a dtype with
no GEMM mode, cuBLAS flags of an older PyTorch restored, the compute-capability gate of the
modes, a CPU build without a dtype's matmul, parameters given as whole floats or a bad seed, a
product whose checksums disagree while no element can be located, the floor and memory share a
GPU run records, and a run without a device to test."""

from __future__ import annotations

import types

import pytest

from tests import envneeds

torch = envneeds.module("torch", "the GEMM check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import Compute, RunContext  # noqa: E402
from nodewarden.validator.checks import gemm  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, PASS, CheckResult  # noqa: E402

SMALL = {"cpu_n": 96, "iterations": 2, "seconds": 0.5, "tile": 32, "dtypes": ["fp32"]}


def cpu_ctx() -> RunContext:
    return RunContext(profile={}, device="cpu")


def test_a_dtype_without_a_gemm_mode_is_refused():
    with pytest.raises(ValueError, match=r"^no GEMM mode for dtype torch\.int32$"):
        gemm.mode_for(torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="no GEMM mode"):
        gemm.check_product(*(torch.ones(4, 4, dtype=torch.int64),) * 3)


@pytest.mark.parametrize("mode, tf32", [("tf32", True), ("fp32", False), ("bf16", False)])
def test_math_mode_with_the_older_allow_tf32_api_sets_and_restores(monkeypatch, mode, tf32):
    """A PyTorch before ``fp32_precision``: TF32 is ``allow_tf32``; all three flags come back."""
    old = types.SimpleNamespace(allow_tf32="before", allow_bf16_reduced_precision_reduction=True,
                                allow_fp16_reduced_precision_reduction=True)
    monkeypatch.setattr(torch.backends.cuda, "matmul", old)
    with gemm.math_mode(gemm.MODES[mode]):
        assert old.allow_tf32 is tf32
        assert not old.allow_bf16_reduced_precision_reduction and not old.allow_fp16_reduced_precision_reduction
    assert (old.allow_tf32, old.allow_bf16_reduced_precision_reduction,
            old.allow_fp16_reduced_precision_reduction) == ("before", True, True)


def test_math_mode_restores_after_an_exception():
    m = torch.backends.cuda.matmul
    before = (m.fp32_precision if hasattr(m, "fp32_precision") else m.allow_tf32,
              m.allow_bf16_reduced_precision_reduction)
    with pytest.raises(RuntimeError, match="inside"):
        with gemm.math_mode(gemm.MODES["tf32"]):
            raise RuntimeError("inside")
    assert (m.fp32_precision if hasattr(m, "fp32_precision") else m.allow_tf32,
            m.allow_bf16_reduced_precision_reduction) == before


@pytest.mark.parametrize("capability, skipped", [
    ((7, 0), {"tf32": "TF32 needs compute capability 8.0 (Ampere) or later",
              "bf16": "bf16 tensor cores need compute capability 8.0 (Ampere) or later"}),
    ((9, 0), {}),
])
def test_cuda_modes_follow_the_compute_capability(monkeypatch, capability, skipped):
    """The gate reads only the device's compute capability (a V100 is 7.0, an H100 9.0)."""
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: asked.append(d) or capability)
    ok, why = gemm.supported_modes("cuda:3", list(gemm.MODE_NAMES))
    assert why == skipped
    assert [m.name for m in ok] == [n for n in gemm.MODE_NAMES if n not in skipped]
    assert set(asked) == {"cuda:3"}


def test_a_cpu_build_without_fp16_matmul_skips_fp16_and_says_why(monkeypatch):
    real = torch.matmul

    def matmul(a, b, *args, **kwargs):
        if a.dtype == torch.float16:
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "matmul", matmul)
    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32", "fp16"]})
    assert r.status == PASS, r.reason
    assert r.details["skipped"]["cpu"]["fp16"] == ("matmul in fp16 not supported on this CPU build: "
                                                   "\"addmm_impl_cpu_\" not implemented for 'Half'")
    assert [m.name for m in r.measurements if m.unit == "FLOP/s"] == ["fp32_flops"]


def test_whole_floats_are_taken_as_integers():
    p = gemm.checked_params({"cpu_n": 96.0, "tiles": 2.0})
    assert (p["cpu_n"], p["tiles"]) == (96, 2) and isinstance(p["cpu_n"], int)
    r = gemm.run(cpu_ctx(), {**SMALL, "cpu_n": 96.0})
    assert r.status == PASS and r.details["n"] == 96


@pytest.mark.parametrize("seed", [-1, "7", 1.5])
def test_a_bad_seed_is_an_error_naming_it(seed):
    r = gemm.run(cpu_ctx(), {**SMALL, "seed": seed})
    assert r.status == ERROR
    assert r.reason == f"invalid parameter: seed must be an integer >= 0 (got {seed!r})"
    assert "[gemm]" in r.action


def test_a_column_off_by_less_than_an_element_bound_fails_on_its_checksum():
    """Every element of one column off by half its own bound: no element is wrong enough to be
    located, but the column sum is: a ``checksum`` error naming the column."""
    n, col = SMALL["cpu_n"], 7
    a, b = gemm.make_inputs(n, gemm.MODES["fp32"], "cpu", gemm.DEFAULTS["seed"])
    _, eps_norm = gemm.error_bounds(gemm.MODES["fp32"], n).element
    a_rows = torch.linalg.vector_norm(a, dim=1, dtype=torch.float64)
    b_col = float(torch.linalg.vector_norm(b[:, col], dtype=torch.float64))
    delta = 0.5 * eps_norm * float(a_rows.min()) * b_col

    def shift_column(c, mode, device):
        c[:, col] += delta

    r = gemm.run(cpu_ctx(), SMALL, corrupt=shift_column)
    assert r.status == FAIL
    [checksum] = [e for e in r.details["errors"] if e["kind"] == "checksum"]
    assert (checksum["rows"], checksum["cols"]) == ([], [col])
    assert not any(e["kind"] in ("abft", "tile") for e in r.details["errors"])
    assert r.reason.startswith(f"{len(r.details['errors'])} GEMM error(s); first: checksum on cpu fp32")
    assert "dcgmi diag" in r.action


def test_a_gpu_record_below_its_floor_fails_and_keeps_the_memory_share():
    """What a CUDA device's records make of the result: the FLOP/s floor applies (GPU figures),
    the smallest memory share during the products is recorded, and a rate below the floor is the
    reason. The record is a real product computed on the CPU, filed under ``cuda:0``."""
    p = gemm.checked_params({**SMALL, "fp32_min_flop_per_second": 1e18})
    rec = gemm._run_mode("cpu", gemm.MODES["fp32"], SMALL["cpu_n"], p, None)
    assert rec["check"].ok and rec["memory_used_ratio"] is None   # the CPU has no such share
    result = CheckResult(gemm.NAME, PASS)
    gemm._record(result, "cuda:0", [dict(rec, memory_used_ratio=0.91234), dict(rec, memory_used_ratio=0.9)], p)
    gemm._verdict(result)
    m = {x.name: x for x in result.measurements}
    assert m["fp32_flops"].threshold == 1e18 and m["fp32_flops"].ok() is False
    assert m["memory_used_ratio"].value == 0.9 and m["memory_used_ratio"].device == "cuda:0"
    assert result.status == FAIL
    assert result.reason.startswith("fp32_flops@cuda:0 ") and result.reason.endswith("(need >= 1e+18)")
    assert "throttling" in result.action


def test_without_a_device_to_test_it_is_the_compute_verdict():
    r = gemm.run(RunContext(profile={}, device="tpu"), SMALL)
    assert r.status == ERROR and r.reason == "unknown device 'tpu' (auto, cuda, cpu)"
    assert r.measurements == []


def test_cuda_resolved_but_no_device_listed_is_an_error(monkeypatch):
    """The run resolved to CUDA, but PyTorch lists no device when the check starts."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    r = gemm.run(RunContext(profile={}, device="cuda", _compute=Compute("cuda", "cuda", gpus=1)), SMALL)
    assert (r.status, r.reason, r.device) == (ERROR, "no CUDA device visible to PyTorch", "cuda")

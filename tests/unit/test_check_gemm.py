"""The gemm check on the CPU device: real torch products, checked against float64 tiles and ABFT
row/column checksums, and the bitwise consensus that names the GPU whose product differs. A
wrong element is located at exactly its (row, col)."""

from __future__ import annotations

import math

import pytest

from tests import envneeds

torch = envneeds.module("torch", "the GEMM check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import gemm  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, PASS  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

CPU_MODES = [m.name for m in gemm.supported_modes("cpu", ["fp32", "bf16", "fp16"])[0]]
SMALL = {"cpu_n": 96, "iterations": 2, "seconds": 0.5, "tile": 32}


def cpu_ctx(**overrides) -> RunContext:
    return RunContext(profile={"gemm": overrides}, device="cpu")


def product(mode: str, m: int = 160, k: int = 224, n: int = 192, seed: int = 1):
    """Seeded inputs of shape (m, k), (k, n) in ``mode``'s dtype and their product."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, gemm.MODES[mode].dtype)
    a = torch.randn(m, k, generator=g, dtype=dt)
    b = torch.randn(k, n, generator=g, dtype=dt)
    return a, b, a @ b


# -- tolerance -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, k, element, checksum", [
    # (u_out, 2 u_in + 8 sqrt(k) 2^-23) and 8 x (u_out, 2 u_in + sqrt(k) 2^-23)
    ("fp32", 4096, (2 ** -23, 8 * 64 * 2 ** -23), (8 * 2 ** -23, 8 * 64 * 2 ** -23)),
    ("tf32", 4096, (2 ** -23, 2 ** -9 + 8 * 64 * 2 ** -23), (8 * 2 ** -23, 8 * (2 ** -9 + 64 * 2 ** -23))),
    ("bf16", 1024, (2 ** -7, 8 * 32 * 2 ** -23), (8 * 2 ** -7, 8 * 32 * 2 ** -23)),
    ("fp16", 1024, (2 ** -10, 8 * 32 * 2 ** -23), (8 * 2 ** -10, 8 * 32 * 2 ** -23)),
])
def test_error_bounds(mode, k, element, checksum):
    b = gemm.error_bounds(gemm.MODES[mode], k)
    assert b.element == pytest.approx(element) and b.checksum == pytest.approx(checksum)


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_products_pass(mode, seed):
    a, b, c = product(mode, seed=seed)
    chk = gemm.check_product(a, b, c, tile=48, seed=seed)
    assert chk.ok, chk
    assert chk.abft_ratio < 0.6 and chk.tile_ratio < 0.6  # rounding fills at most half the bound


def test_shapes_must_make_a_product():
    a, b, c = product("fp32")
    with pytest.raises(ValueError):
        gemm.check_product(a, b, c.t())


def test_tiles_start_at_the_origin_and_stay_inside():
    origins = gemm.tile_origins(100, 70, 5, 32, seed=9)
    assert origins[0] == (0, 0) and len(origins) == 5
    assert all(0 <= r <= 68 and 0 <= c <= 38 for r, c in origins)
    assert origins == gemm.tile_origins(100, 70, 5, 32, seed=9)


# -- fault injection: a wrong element is located at (row, col) ------------------------------------------

@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("row, col", [(0, 0), (37, 150), (159, 191)])
def test_wrong_element_is_located(mode, row, col):
    a, b, c = product(mode)
    c[row, col] += 1000
    chk = gemm.check_product(a, b, c, tiles=0)
    assert chk.positions == [(row, col)]
    assert (chk.rows, chk.cols) == ([row], [col])
    e = chk.located[0]
    assert e["actual"] - e["expected"] == pytest.approx(1000, rel=0.02)


@pytest.mark.parametrize("bit", [30, 31])  # fp32: top exponent bit, sign bit
def test_flipped_bit_of_fp32_element_is_located(bit):
    a, b, c = product("fp32")
    big = int(c.abs().argmax())
    row, col = divmod(big, c.shape[1])
    c.view(torch.int32)[row, col] ^= 1 << bit
    assert gemm.check_product(a, b, c, tiles=0).positions == [(row, col)]


def test_two_wrong_elements_are_both_located():
    a, b, c = product("fp32")
    c[3, 4] = float("nan")
    c[100, 50] -= 500
    assert sorted(gemm.check_product(a, b, c, tiles=0).positions) == [(3, 4), (100, 50)]


def test_small_error_inside_a_tile_is_seen_by_the_tile():
    a, b, c = product("fp32")
    c[5, 7] *= 1.01  # 1 %: far below a checksum's reach, far above an element's bound
    chk = gemm.check_product(a, b, c, tiles=1, tile=16)
    assert [(e["row"], e["col"]) for e in chk.tile_errors] == [(5, 7)]
    assert not chk.ok


# -- bitwise consensus ----------------------------------------------------------------------------------

def test_digest_sees_every_bit():
    _, _, c = product("bf16", 64, 64, 64)
    d = gemm.digest(c)
    assert gemm.digest(c.clone()) == d
    for flat in (0, 1234, 64 * 64 - 1):
        x = c.clone()
        x.view(torch.int16).view(-1)[flat] ^= 1
        assert gemm.digest(x) != d
    swapped = c.clone()
    swapped[[0, 1]] = c[[1, 0]]
    assert gemm.digest(swapped) != d


def test_consensus_names_the_device_that_differs():
    digests = {}
    for device in ("cuda:0", "cuda:1", "cuda:2"):  # three "GPUs", each a CPU product of the same seed
        _, _, c = product("fp32", seed=42)
        if device == "cuda:1":
            c.view(torch.int32)[10, 20] ^= 1  # one ulp: inside every tolerance, not inside consensus
        digests[device] = gemm.digest(c)
    majority, differ = gemm.consensus(digests)
    assert differ == ["cuda:1"]
    assert majority == digests["cuda:0"] == digests["cuda:2"]


@pytest.mark.parametrize("digests, expected", [
    ({"cuda:0": "x"}, ("x", [])),
    ({"cuda:0": "x", "cuda:1": "y"}, (None, ["cuda:0", "cuda:1"])),  # no majority: cannot tell
    ({"cuda:0": "x", "cuda:1": "x", "cuda:2": "y", "cuda:3": "y"}, (None, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"])),
    ({"cuda:0": "x", "cuda:1": "y", "cuda:2": "x", "cuda:3": "x"}, ("x", ["cuda:1"])),
    ({}, (None, [])),
])
def test_consensus_table(digests, expected):
    assert gemm.consensus(digests) == expected


# -- the check ------------------------------------------------------------------------------------------

def test_healthy_run_passes_with_units():
    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32", "tf32", "bf16"]})
    assert r.status == PASS, r.reason
    units = {m.name: m.unit for m in r.measurements}
    assert units == {"fp32_flops": "FLOP/s", "bf16_flops": "FLOP/s", "max_error_ratio": "ratio"}
    assert all(m.value > 0 and m.device == "cpu" for m in r.measurements if m.unit == "FLOP/s")
    assert next(m for m in r.measurements if m.name == "max_error_ratio").ok() is True
    assert "TF32" in r.details["skipped"]["cpu"]["tf32"]
    assert r.details["errors"] == []


def test_check_locates_the_injected_element():
    def corrupt(c, mode, device):
        if mode == "bf16":
            c[17, 42] = -c[17, 42] * 64

    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32", "bf16"]}, corrupt=corrupt)
    assert r.status == FAIL
    kinds = {(e["kind"], e["dtype"], e.get("row"), e.get("col")) for e in r.details["errors"]}
    assert ("abft", "bf16", 17, 42) in kinds
    assert ("repeat", "bf16", None, None) in kinds  # the timed products no longer match it
    assert not any(e["dtype"] == "fp32" for e in r.details["errors"])
    assert "(17, 42)" in r.reason


def test_flop_thresholds_are_gpu_figures():
    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32"], "fp32_min_flop_per_second": 1e18})
    assert r.status == PASS
    assert next(m for m in r.measurements if m.name == "fp32_flops").threshold is None


def test_math_mode_restores_the_backend_flags():
    m = torch.backends.cuda.matmul
    before = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
    with gemm.math_mode(gemm.MODES["bf16"]):
        assert not m.allow_bf16_reduced_precision_reduction and not m.allow_fp16_reduced_precision_reduction
    assert (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction) == before


@pytest.mark.parametrize("bad, key", [
    ({"cpu_n": -8}, "cpu_n"),
    ({"n": 0}, "n"),
    ({"dtypes": ["fp8"]}, "dtypes"),
    ({"fill_ratio": 1.5}, "fill_ratio"),
    ({"seconds": -1}, "seconds"),
])
def test_invalid_parameters_are_an_error_not_a_raise(bad, key):
    r = run_check("gemm", cpu_ctx(**bad))
    assert r.status == ERROR
    assert "invalid parameter" in r.reason and key in r.reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_products_pass_and_agree():
    r = gemm.run(RunContext(profile={}, device="cuda"), {"n": 1024, "iterations": 2, "seconds": 0.5, "fill_ratio": 0.5})
    assert r.status == PASS, r.reason
    assert math.isfinite(next(m.value for m in r.measurements if m.name == "max_error_ratio"))

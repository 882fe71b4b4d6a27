"""The gemm check's bitwise consensus reached through its ``run()``: several CPU devices
(``cpu:0``, ``cpu:1``, ``cpu:2``) stand in for GPUs of one model, every one computing the same
seeded products for real; one ulp flipped in one device's product (inside every tolerance, so
the tiles and checksums pass it) fails the check naming that device, the dtype and the majority
digest the others agree on. Without a strict majority every device is named."""

from __future__ import annotations

import pytest

from tests import envneeds

torch = envneeds.module("torch", "the GEMM check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import gemm  # noqa: E402
from nodewarden.validator.result import FAIL, PASS  # noqa: E402

SMALL = {"cpu_n": 96, "iterations": 2, "seconds": 0.5, "tile": 32, "dtypes": ["fp32", "bf16"]}
THREE = ["cpu:0", "cpu:1", "cpu:2"]


def cpu_ctx() -> RunContext:
    return RunContext(profile={}, device="cpu")


def flip_lsb(device: str, dtype: str, row: int = 10, col: int = 20):
    """A corrupt hook flipping the least significant bit of element (row, col) of ``device``'s
    ``dtype`` product: one ulp."""

    def corrupt(c, mode, dev):
        if (dev, mode) == (device, dtype):
            c.view({2: torch.int16, 4: torch.int32}[c.element_size()])[row, col] ^= 1

    return corrupt


def test_devices_of_one_model_agree_and_pass():
    r = gemm.run(cpu_ctx(), SMALL, devices=THREE)
    assert r.status == PASS, r.reason
    assert r.reason == "products correct (tiles, checksums, consensus)"
    digests = {d: r.details["products"][d]["fp32"]["digest"] for d in THREE}
    assert len(set(digests.values())) == 1
    assert {m.device for m in r.measurements if m.name == "max_error_ratio"} == set(THREE)


@pytest.mark.parametrize("bad, dtype", [("cpu:1", "fp32"), ("cpu:2", "bf16")])
def test_one_device_differing_by_one_ulp_fails_naming_it(bad, dtype):
    r = gemm.run(cpu_ctx(), SMALL, corrupt=flip_lsb(bad, dtype), devices=THREE)
    assert r.status == FAIL
    errors = r.details["errors"]
    assert all(e["device"] == bad and e["dtype"] == dtype for e in errors), errors
    # one ulp is inside every tolerance: only the bits say so
    assert not any(e["kind"] in ("abft", "tile", "checksum") for e in errors)
    [c] = [e for e in errors if e["kind"] == "consensus"]
    agree = {r.details["products"][d][dtype]["digest"] for d in THREE if d != bad}
    assert c["model"] == "cpu" and agree == {c["majority"]}
    assert c["digest"] == r.details["products"][bad][dtype]["digest"] != c["majority"]
    assert f"on {bad} {dtype}" in r.reason


def test_two_devices_that_differ_cannot_be_told_apart():
    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32"]}, corrupt=flip_lsb("cpu:1", "fp32"),
                 devices=["cpu:0", "cpu:1"])
    assert r.status == FAIL
    consensus = [e for e in r.details["errors"] if e["kind"] == "consensus"]
    assert sorted(e["device"] for e in consensus) == ["cpu:0", "cpu:1"]
    assert all(e["majority"] is None for e in consensus)


def test_wrong_element_on_one_device_is_located_there():
    def corrupt(c, mode, dev):
        if dev == "cpu:0" and mode == "fp32":
            c[70, 5] += 1000

    r = gemm.run(cpu_ctx(), {**SMALL, "dtypes": ["fp32"]}, corrupt=corrupt, devices=THREE)
    assert r.status == FAIL
    located = [(e["device"], e["row"], e["col"]) for e in r.details["errors"] if e["kind"] == "abft"]
    assert located == [("cpu:0", 70, 5)]
    assert r.reason.startswith("3 GEMM error(s); first: abft on cpu:0 fp32 at (70, 5)")
    ratio = {m.device: m for m in r.measurements if m.name == "max_error_ratio"}
    assert ratio["cpu:0"].ok() is False and ratio["cpu:1"].ok() is True


def test_progress_names_each_mode_and_the_rate_it_measured():
    """validate's progress for gemm: a line as each mode starts, naming the rate of the mode
    before it, and one as a device is done; the share never goes back nor past 1; the rates are
    the ones the result records."""
    seen: list[tuple[str, float, str]] = []
    ctx = RunContext(profile={}, device="cpu", progress=lambda check, share, text: seen.append((check, share, text)))
    r = gemm.run(ctx, SMALL, devices=["cpu:0"])
    assert r.status == PASS, r.reason
    texts = [t for _, _, t in seen]
    assert texts[0] == "cpu:0 fp32 n=96"
    assert texts[1].startswith("cpu:0 bf16 n=96; fp32 ") and texts[1].endswith(" TFLOP/s")
    assert texts[2].startswith("cpu:0 done; bf16 ") and texts[2].endswith(" TFLOP/s")
    shares = [s for _, s, _ in seen]
    assert shares == sorted(shares) and 0 <= shares[0] and shares[-1] <= 1
    rates = {m.name: m.value for m in r.measurements}
    for line, dtype in ((texts[1], "fp32"), (texts[2], "bf16")):
        shown = float(line.rsplit(" ", 2)[1]) * 1e12
        got = [v for k, v in rates.items() if dtype in k and "flop" in k]
        assert got and shown == pytest.approx(got[0], rel=5e-3), (line, rates)

"""The allreduce check on gloo CPU ranks (the same code runs NCCL over GPUs): exact sums from known
contributions, nccl-tests' bus bandwidth, the rank that contributes wrong data named, a hung
rank failed and reaped."""

from __future__ import annotations

import psutil
import pytest

from tests import envneeds

torch = envneeds.module("torch", "the allreduce check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import allreduce as ar  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, PASS  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

KiB, MiB = 2**10, 2**20
SMALL = {"cpu_ranks": 2, "sizes_bytes": [64 * KiB, 1 * MiB], "warmup_iterations": 1, "iterations": 3,
         "timeout_seconds": 20.0}


def ctx(**params) -> RunContext:
    return RunContext(profile={"allreduce": params}, device="cpu")


def no_children_left() -> bool:
    """No rank process outlives the check, running or as a zombie."""
    return not psutil.Process().children(recursive=True)


# -- nccl-tests arithmetic and the known contributions ---------------------------------------------

@pytest.mark.parametrize("ranks, factor", [(2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_bus_bandwidth_is_nccl_tests_definition(ranks, factor):
    assert ar.bus_bandwidth(100e9, ranks) == pytest.approx(100e9 * factor)


@pytest.mark.parametrize("world", [2, 3, 8, ar.MAX_RANKS])
def test_contributions_sum_exactly_in_float32(world):
    n = 3 * ar.PERIOD + 7
    total = torch.zeros(n, dtype=torch.float32)
    for r in range(world):
        total += ar.contribution(n, r, "cpu")
    expected = ar.contribution(n, 0, "cpu") * ar.sum_factor(world)
    assert torch.equal(total, expected)
    assert float(expected.max()) == ar.PERIOD * world * (world + 1) // 2 < 2**24


def test_mismatches_locates_the_first_wrong_element():
    x = ar.contribution(1000, 0, "cpu")
    assert ar.mismatches(x, x.clone()) is None
    y = x.clone()
    y[300] += 1
    y[700] -= 2
    assert ar.mismatches(y, x) == {"count": 2, "first_index": 300, "got": float(x[300]) + 1,
                                   "expected": float(x[300])}


# -- verdicts from the ranks' reports (pure) --------------------------------------------------------

def report(rank, seconds=(1e-3,), wrong=(), culprits=None):
    sizes = []
    for s in seconds:
        e = {"size_bytes": 0, "wrong": list(wrong), "seconds_per_op": s}
        if culprits is not None:
            e["bad_contributors"] = culprits
        sizes.append(e)
    return {"rank": rank, "sizes": sizes}


def test_assess_reports_busbw_of_the_largest_size():
    reports = {0: report(0, (1e-3, 4e-3)), 1: report(1, (1e-3, 8e-3))}   # the slowest rank counts
    r = ar.assess(reports, "gloo", 2, [MiB, 16 * MiB], floor=1e9)
    m = {x.name: x for x in r.measurements}
    assert m["algbw"].value == round(16 * MiB / 8e-3)
    assert m["busbw"].value == round(16 * MiB / 8e-3) and m["busbw"].threshold == 1e9
    assert m["size_bytes"].value == 16 * MiB and m["ranks"].value == 2 and m["backend"].value == "gloo"
    assert r.status == PASS
    assert ar.assess(reports, "gloo", 2, [MiB, 16 * MiB], floor=1e12).status == FAIL


def test_assess_names_wrong_ranks_and_the_culprit():
    bad = {"count": 1, "first_index": 5, "got": 4.0, "expected": 3.0, "when": "before the timed loop"}
    reports = {r: report(r, wrong=[bad], culprits=[2]) for r in range(4)}
    r = ar.assess(reports, "nccl", 4, [MiB], floor=0)
    assert r.status == FAIL
    assert "wrong on rank(s) 0, 1, 2, 3" in r.reason and "rank 2 contributes wrong data" in r.reason


def test_assess_names_a_failed_rank():
    reports = {0: {"rank": 0, "sizes": [], "error": "allreduce of 1048576 bytes: timed out"},
               1: {"rank": 1, "error": "hung: no report, killed"}}
    r = ar.assess(reports, "nccl", 2, [MiB], floor=0)
    assert r.status == FAIL and "rank 1: hung" in r.reason and "rank 0:" in r.reason


# -- the real path: gloo ranks --------------------------------------------------------------------

def test_healthy_run_passes():
    r = run_check("allreduce", ctx(**SMALL))
    assert r.status == PASS, r.reason
    m = {x.name: x for x in r.measurements}
    assert m["busbw"].unit == m["algbw"].unit == "B/s" and m["busbw"].value > 0
    assert m["busbw"].value > 4 * MiB / ar.SLOW_RANK_DELAY_S  # the floor a slow rank fails (..._faults.py)
    assert m["busbw"].value == pytest.approx(m["algbw"].value, rel=1e-6)   # 2(n-1)/n = 1 for two ranks
    assert m["size_bytes"].value == MiB and m["size_bytes"].unit == "bytes"
    assert m["ranks"].value == 2 and m["backend"].value == "gloo" and m["wrong_result_ranks"].value == 0
    assert [s["size_bytes"] for s in r.details["sizes"]] == [64 * KiB, MiB]
    assert no_children_left()


def test_wrong_contribution_fails_naming_the_rank():
    r = run_check("allreduce", ctx(**SMALL, inject_wrong_rank=1))
    assert r.status == FAIL
    assert "wrong on rank(s) 0, 1" in r.reason and "rank 1 contributes wrong data" in r.reason
    assert r.details["bad_contributors"] == [1]
    assert no_children_left()


def test_hung_rank_fails_and_is_reaped():
    r = run_check("allreduce", ctx(**{**SMALL, "timeout_seconds": 1.0, "inject_hang_rank": 1}))
    assert r.status == FAIL
    assert "rank 1: hung" in r.reason
    assert no_children_left()


def test_defaults():
    assert ar.NEEDS == ("torch",)
    assert ar.DEFAULTS["cpu_ranks"] == 4 and ar.QUICK["cpu_ranks"] == 2
    assert max(ar.default_sizes("nccl")) == 256 * MiB and max(ar.default_sizes("gloo")) == 16 * MiB


@pytest.mark.parametrize("params", [
    {"cpu_ranks": 1},
    {"cpu_ranks": "4"},
    {"sizes_bytes": [6]},              # not whole float32 elements
    {"sizes_bytes": []},
    {"timeout_seconds": 0},
    {"iterations": 0},
    {"busbw_min_bytes_per_second": -1},
    {"inject_wrong_rank": 2},          # two ranks: 0 and 1
    {"inject_hang_rank": -1},
])
def test_invalid_params_give_error(params):
    r = run_check("allreduce", ctx(**{**SMALL, **params}))
    assert r.status == ERROR
    assert next(iter(params)) in r.reason
    assert no_children_left()

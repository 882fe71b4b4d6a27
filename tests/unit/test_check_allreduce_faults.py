"""The allreduce check's remaining verdicts reached through ``run()`` on gloo CPU ranks: a rank
whose data comes late (it waits SLOW_RANK_DELAY_S before each timed allreduce, as behind a slow
link) holds the whole collective back and fails a bus-bandwidth floor that the healthy ranks clear
(test_check_allreduce.py's healthy run is held above the same floor); ranks that cannot be spawned
are an ``error``, nothing measured."""

from __future__ import annotations

import errno
import re
import subprocess

import psutil

# the allreduce tests' sizes and context (it needs torch as they do); tests/unit is on the path
from test_check_allreduce import SMALL, KiB, MiB, ctx

from nodewarden.validator.checks import allreduce as ar
from nodewarden.validator.result import ERROR, FAIL
from nodewarden.validator.runner import run_check


def busbw(r) -> float:
    return next(m.value for m in r.measurements if m.name == "busbw")


# The floor the slow rank must fail: four times what one late 1 MiB allreduce per delay allows.
# test_check_allreduce.py::test_healthy_run_passes holds the healthy ranks above this same floor.
FLOOR = 4 * MiB / ar.SLOW_RANK_DELAY_S


def test_a_slow_rank_fails_the_floor_the_healthy_ranks_clear():
    r = run_check("allreduce", ctx(**SMALL, busbw_min_bytes_per_second=FLOOR, inject_slow_rank=1))
    assert r.status == FAIL, r.reason
    # every op waits for the late rank: at most one 1 MiB allreduce per delay
    assert busbw(r) <= MiB / ar.SLOW_RANK_DELAY_S
    assert r.reason == f"busbw {busbw(r) / 1e9:.1f} GB/s below {FLOOR / 1e9:.1f} GB/s"
    assert r.details["wrong_result_ranks"] == [] and r.details["failed_ranks"] == {}  # slow, not wrong
    assert all(s["seconds_per_op"] >= ar.SLOW_RANK_DELAY_S for s in r.details["sizes"])
    assert "NVLink" in r.action
    assert not psutil.Process().children(recursive=True)


def test_a_slow_rank_hook_beyond_the_ranks_is_an_error():
    r = run_check("allreduce", ctx(**SMALL, inject_slow_rank=2))
    assert r.status == ERROR and r.reason == "inject_slow_rank 2 is not a rank (0..1)"


def test_ranks_that_cannot_be_spawned_are_an_error(monkeypatch):
    def popen(*args, **kwargs):  # fork refused: the process table or memory cgroup is full
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", popen)
    r = run_check("allreduce", ctx(**SMALL))
    assert r.status == ERROR
    assert r.reason == "could not start the ranks: BlockingIOError: [Errno 11] Resource temporarily unavailable"
    assert r.measurements == []


def test_a_wrong_sum_from_right_contributions_blames_the_reduction_path():
    """Rank 1 receives a sum wrong in one element while every rank's contribution, reduced alone,
    is right: the check fails naming the rank that saw it and suspects the reduction path (a NIC,
    the NVLink/PCIe path, the library), not a rank's data."""
    r = run_check("allreduce", ctx(**SMALL, inject_wrong_result_rank=1))
    assert r.status == FAIL, r.reason
    assert r.details["wrong_result_ranks"] == [1] and r.details["bad_contributors"] == []
    assert r.details["failed_ranks"] == {}
    n = 64 * KiB // 4  # the first size's elements; the hook flips element n // 3, by +1
    assert r.reason.startswith("allreduce result wrong on rank(s) 1; no single rank's contribution is wrong "
                               f"alone: suspect the reduction path (1 of {n} elements at {64 * KiB} bytes; "
                               f"first [{n // 3}] = ")
    got, expected = (float(v) for v in re.search(r"= (\S+), expected (\S+)\)$", r.reason).groups())
    assert got == expected + 1
    assert not psutil.Process().children(recursive=True)

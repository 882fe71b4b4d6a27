"""The host_memory_bandwidth check's slow-memory verdict reached through ``run()`` by detection,
not by an unreachable threshold: the numpy engine's worker on one CPU moves its slice
SLOW_FACTOR times per pass (as a worker whose NUMA node's DIMMs trained slow would take that much
longer), so the pass, which ends with its last worker, slows with it. The floor is a third of
what the same machine measured healthy a moment before; the slow run falls below it and names
the slowed CPU as the slowest worker."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("numpy")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import host_memory_bandwidth as hmb  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, PASS  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

MiB = 1 << 20
CPUS = sorted(os.sched_getaffinity(0))
SMALL = {"array_bytes": 16 * MiB, "repeats": 4, "engine": "numpy"}


def ctx(**params) -> RunContext:
    return RunContext(profile={"host_memory_bandwidth": params})


def triad(r) -> float:
    return next(m.value for m in r.measurements if m.name == "triad_bandwidth")


def test_a_slow_worker_fails_the_floor_the_healthy_node_passes():
    healthy = run_check("host_memory_bandwidth", ctx(**SMALL))
    assert healthy.status == PASS, healthy.reason
    floor = triad(healthy) / 3
    assert run_check("host_memory_bandwidth", ctx(**SMALL, triad_min_bytes_per_second=floor)).status == PASS
    slow_cpu = CPUS[-1]
    r = run_check("host_memory_bandwidth", ctx(**SMALL, triad_min_bytes_per_second=floor, inject_slow_cpu=slow_cpu))
    assert r.status == FAIL, r.reason
    assert triad(r) < floor
    assert r.reason.startswith(f"Triad {triad(r) / 1e9:.1f} GB/s below {floor / 1e9:.1f} GB/s")
    assert "wrong" not in r.details  # slow, not wrong: the repeated kernels leave the values exact
    workers = {int(c): v for c, v in r.details["worker_triad_bandwidth"].items()}
    assert sorted(workers) == CPUS
    if len(CPUS) > 1:
        assert min(workers, key=workers.get) == slow_cpu
        assert f"; slowest worker: CPU {slow_cpu} at " in r.reason and "of the median worker" in r.reason
    assert "DIMM" in r.action


def test_worker_rates_are_each_slices_best_rate():
    # two workers of 1024 and 3072 elements; each one's first pass is discarded
    rates = hmb.worker_rates("triad", [(0, 1024), (1024, 4096)], [[9.0, 2e-6, 1e-6], [9.0, 3e-6, 4e-6]])
    assert rates == [pytest.approx(3 * 8 * 1024 / 1e-6), pytest.approx(3 * 8 * 3072 / 3e-6)]


@pytest.mark.parametrize("params", [
    {"inject_slow_cpu": 10_000, "engine": "numpy"},     # not a usable CPU
    {"inject_slow_cpu": CPUS[0], "engine": "torch"},     # one OpenMP team: no worker to slow
    {"inject_slow_cpu": -1, "engine": "numpy"},
])
def test_a_slow_cpu_hook_that_cannot_apply_is_an_error(params):
    r = run_check("host_memory_bandwidth", ctx(**{**SMALL, **params}))
    assert r.status == ERROR and "inject_slow_cpu" in r.reason


def test_arrays_beyond_the_memory_share_are_an_error(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:        4096 kB\nMemAvailable:    1024 kB\n")
    prof = {"host_memory_bandwidth": {**SMALL, "array_bytes": 1 * MiB}}
    r = run_check("host_memory_bandwidth", RunContext(profile=prof, procfs=tmp_path))
    assert r.status == ERROR
    assert r.reason == "array_bytes 1048576 × 3 exceeds 50% of MemAvailable (1048576 bytes)"


@pytest.mark.skipif(len(CPUS) < 2, reason="one page is enough for one worker")
def test_an_array_too_small_for_every_worker_is_an_error():
    r = run_check("host_memory_bandwidth", ctx(**{**SMALL, "array_bytes": 4096}))
    assert r.status == ERROR and r.reason.startswith("array_bytes 4096: 512 elements are too few")


def test_without_an_engine_it_is_skip(monkeypatch):
    monkeypatch.setattr(hmb, "has_module", lambda name: False)
    r = run_check("host_memory_bandwidth", ctx(**{**SMALL, "engine": "auto"}))
    assert r.status == "skip" and r.reason == "engine auto: neither torch nor numpy is installed"


def test_a_worker_that_cannot_be_pinned_is_an_error_naming_its_cpu(monkeypatch):
    bad = CPUS[-1]
    real = os.sched_setaffinity

    def refuse(pid, mask):  # in the forked worker: the kernel's answer for an offline CPU
        if set(mask) == {bad}:
            raise OSError(22, "Invalid argument")
        return real(pid, mask)

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    r = run_check("host_memory_bandwidth", ctx(**SMALL))
    assert r.status == ERROR
    assert r.reason == f"worker on CPU {bad}: OSError: [Errno 22] Invalid argument"

"""The cpu check's failing verdicts, each reached through its ``run()`` with the fault on the real
path: a throttled core (its worker does SLOW_FACTOR times the SHA-256 work per counted chain, so
its measured rate falls to about 1/8) fails by the outlier rule naming that CPU; a CPU that
cannot be pinned (``sched_setaffinity`` refused in the forked worker, as for a CPU taken offline
after the affinity was read) fails naming the CPU and the error; so does a core that locks up
(its worker never reports: killed after duration + grace) and a worker that dies."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import time

import pytest

from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import cpu
from nodewarden.validator.result import ERROR, FAIL
from nodewarden.validator.runner import run_check

CPUS = sorted(os.sched_getaffinity(0))


def ctx(**params) -> RunContext:
    return RunContext(profile={"cpu": params}, device="cpu")


@pytest.mark.skipif(len(CPUS) < 2, reason="an outlier needs siblings: one usable CPU")
def test_throttled_core_fails_by_the_outlier_rule_naming_it():
    slow = CPUS[-1]
    r = run_check("cpu", ctx(duration_seconds=0.8, inject_slow_cpu=slow))  # default min_core_ratio 0.5
    assert r.status == FAIL, r.reason
    rates = {m.device: m.value for m in r.measurements if m.name == "sha256_rate"}
    others = [rates[f"cpu{c}"] for c in CPUS if c != slow]
    assert rates[f"cpu{slow}"] < 0.5 * min(others)  # the injected core really measured slow
    assert r.reason.startswith("slow core(s): ") and f"CPU {slow} at " in r.reason
    ratio = next(m for m in r.measurements if m.name == "slowest_core_ratio")
    assert ratio.ok() is False and ratio.threshold == 0.5
    assert {m.name: m.value for m in r.measurements}["wrong_answer_cpus"] == 0  # slow, not wrong
    assert "frequency" in r.action


def test_a_cpu_that_cannot_be_pinned_fails_naming_it(monkeypatch):
    bad = CPUS[-1]
    real = os.sched_setaffinity

    def refuse(pid, mask):  # runs in the forked worker: the kernel's answer for an offline CPU
        if set(mask) == {bad}:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(pid, mask)

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    r = run_check("cpu", ctx(duration_seconds=0.3, min_core_ratio=0.1))
    assert r.status == FAIL
    assert r.reason.startswith(f"worker failed on CPU {bad} (OSError: ")
    assert "Invalid argument" in r.reason
    assert r.details["workers"][str(bad)] == {"error": "OSError: [Errno 22] Invalid argument"}
    assert all("chains" in r.details["workers"][str(c)] for c in CPUS if c != bad)
    assert f"cpu{bad}" not in {m.device for m in r.measurements if m.name == "sha256_rate"}


@pytest.mark.parametrize("value", [10_000, -1, True, "0"])
def test_a_slow_cpu_hook_off_the_affinity_is_an_error(value):
    r = run_check("cpu", ctx(inject_slow_cpu=value))
    assert r.status == ERROR and "inject_slow_cpu" in r.reason



def on_cpu(bad: int, fault):
    """A ``sha256_chain`` that runs ``fault()`` in the worker pinned to CPU ``bad`` (forked
    workers inherit the patched module), and the real chain elsewhere."""
    real = cpu.sha256_chain

    def chain(*args, **kwargs):
        if os.sched_getaffinity(0) == {bad}:
            fault()
        return real(*args, **kwargs)

    return chain


def test_a_core_that_locks_up_fails_as_hung_naming_it(monkeypatch):
    bad = CPUS[-1]
    monkeypatch.setattr(cpu, "_GRACE_S", 0.5)
    monkeypatch.setattr(cpu, "sha256_chain", on_cpu(bad, lambda: time.sleep(120)))
    t0 = time.monotonic()
    r = run_check("cpu", ctx(duration_seconds=0.3, min_core_ratio=0.1))
    assert time.monotonic() - t0 < 10  # duration + grace, then the hung worker is killed
    assert r.status == FAIL
    assert f"worker failed on CPU {bad} (no report (worker hung))" in r.reason
    assert not mp.active_children()


def test_a_worker_that_dies_fails_naming_its_cpu(monkeypatch):
    bad = CPUS[-1]
    monkeypatch.setattr(cpu, "sha256_chain", on_cpu(bad, lambda: os._exit(70)))
    r = run_check("cpu", ctx(duration_seconds=0.3, min_core_ratio=0.1))
    assert r.status == FAIL
    assert f"worker failed on CPU {bad} (worker exited without a report)" in r.reason

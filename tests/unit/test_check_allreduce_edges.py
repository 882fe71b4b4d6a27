"""The allreduce check's edges, each held to its verdict or error text: one message size given
as a number, a rank interpreter that cannot import torch (it dies before it reports: the
parent names the rank and the last line it wrote), a rank that ignores SIGTERM (killed and
reaped), a run without a device, one GPU only, and the verdict for a wrong sum that no single
rank's contribution explains."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile

import psutil

from tests import envneeds

torch = envneeds.module("torch", "the allreduce check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import Compute, RunContext  # noqa: E402
from nodewarden.validator.checks import allreduce as ar  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, SKIP  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

KiB, MiB = 2**10, 2**20
SMALL = {"cpu_ranks": 2, "sizes_bytes": [64 * KiB], "warmup_iterations": 1, "iterations": 2,
         "timeout_seconds": 20.0}


def ctx(**params) -> RunContext:
    return RunContext(profile={"allreduce": params}, device="cpu")


def test_one_size_may_be_given_as_a_number():
    p = ar.validate_params({**ar.DEFAULTS, **SMALL, "sizes_bytes": 4 * KiB})
    assert p["sizes_bytes"] == [4 * KiB]


def test_a_rank_that_cannot_import_torch_fails_naming_it(tmp_path, monkeypatch):
    """A broken torch in the rank interpreters (a missing NCCL library): each rank dies before it
    reports; the check fails naming every rank, its exit code and the last line of its stderr."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        'raise ImportError("libnccl.so.2: cannot open shared object file: No such file or directory")\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))   # after the project root, before site-packages
    r = run_check("allreduce", ctx(**SMALL))
    line = "ImportError: libnccl.so.2: cannot open shared object file: No such file or directory"
    assert r.status == FAIL
    assert r.details["failed_ranks"] == {str(k): f"rank process exited with code 1: {line}" for k in (0, 1)}
    assert r.reason == f"allreduce failed on rank 0: rank process exited with code 1: {line}; " \
                       f"rank 1: rank process exited with code 1: {line}"
    assert r.details["sizes"] == [] and "NCCL_DEBUG" in r.action
    assert not psutil.Process().children(recursive=True)


def test_tail_is_the_last_line_cut_to_its_end():
    with tempfile.TemporaryFile() as f:
        assert ar._tail(f) == "no output"
        f.write(b"first\n" + b"x" * 400 + b"END\n\n")
        assert ar._tail(f) == ("x" * 400 + "END")[-300:]
        assert ar._tail(f, limit=3) == "END"


def test_a_rank_that_ignores_sigterm_is_killed_and_reaped(monkeypatch):
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    stubborn = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert stubborn.stdout.readline() == b"1\n"   # SIGTERM ignored from here on
        done.wait(30)
        real_wait = subprocess.Popen.wait
        waits = []

        def short_wait(self, timeout=None):   # _reap's 5 s grace, shortened
            waits.append(timeout)
            return real_wait(self, 0.5 if timeout is not None else None)

        monkeypatch.setattr(subprocess.Popen, "wait", short_wait)
        ar._reap([stubborn, done])
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
            stubborn.wait()
        stubborn.stdout.close()
    assert stubborn.returncode == -signal.SIGKILL and done.returncode == 0
    assert waits == [5, None, 5]   # the grace, the wait after the kill; the grace of the one done
    assert not psutil.Process().children(recursive=True)


def test_without_a_device_to_test_it_is_the_compute_verdict():
    r = ar.run(RunContext(profile={}, device="tpu"), {**ar.DEFAULTS, **SMALL})
    assert r.status == ERROR and r.reason == "unknown device 'tpu' (auto, cuda, cpu)"
    assert r.measurements == []


def test_one_gpu_is_a_skip(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    r = ar.run(RunContext(profile={}, device="cuda", _compute=Compute("cuda", "cuda", gpus=1)),
               {**ar.DEFAULTS, **SMALL})
    assert (r.status, r.device) == (SKIP, "cuda")
    assert r.reason == "1 GPU visible: an allreduce needs at least two"
    assert not psutil.Process().children(recursive=True)


def test_a_wrong_sum_no_rank_explains_blames_the_reduction_path():
    """Every rank's contribution arrives right when it is reduced alone, yet the sums are
    wrong: the path (NVLink, NVSwitch, the reduction kernels) is suspected, no rank named."""
    bad = {"count": 3, "first_index": 9, "got": 7.0, "expected": 6.0, "when": "after the timed loop"}
    entry = {"size_bytes": MiB, "wrong": [bad], "seconds_per_op": 1e-3, "bad_contributors": []}
    reports = {r: {"rank": r, "sizes": [dict(entry, wrong=[bad] if r == 1 else [])]} for r in range(4)}
    r = ar.assess(reports, "nccl", 4, [MiB], floor=0)
    assert r.status == FAIL
    assert r.reason == ("allreduce result wrong on rank(s) 1; no single rank's contribution is wrong alone: "
                        "suspect the reduction path (3 of 262144 elements at 1048576 bytes; first [9] = 7, "
                        "expected 6)")
    assert r.details["wrong_result_ranks"] == [1] and r.details["bad_contributors"] == []
    assert next(m for m in r.measurements if m.name == "wrong_result_ranks").ok() is False

"""The gpu_memory check's failing verdicts other than a flipped bit, each reached through its
``run()`` on the CPU device with the fault at the lowest boundary: a device-to-device copy that
delivers a flipped bit (``Tensor.copy_``), a CUDA error naming ECC raised while the memory is
under test, and an allocator that gives less than the buffer asked for (``torch.empty`` raising
``OutOfMemoryError`` past a budget, as a GPU whose memory another process holds)."""

from __future__ import annotations

import weakref

from tests import envneeds

torch = envneeds.module("torch", "the GPU memory check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import gpu_memory as gm  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

MiB = 1 << 20
SMALL = {"cpu_buffer_bytes": 4 * MiB, "slice_bytes": 1 * MiB, "walking_bits": [0], "copy_iterations": 2}
ECC = ("CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported "
       "at some other API call, so the stacktrace below might be incorrect.")


def cpu_ctx(**overrides) -> RunContext:
    return RunContext(profile={"gpu_memory": overrides}, device="cpu")


def test_copy_that_flips_a_bit_fails_at_the_destination_word(monkeypatch):
    word, bit = 1000, 43  # of the copy's destination; bit 43 is bit 3 of byte 5
    real = torch.Tensor.copy_

    def copy_(self, src, non_blocking=False):  # every copy arrives with one bit flipped
        out = real(self, src, non_blocking)
        self.view(-1)[word] ^= 1 << bit
        return out

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    r = gm.run(cpu_ctx(), SMALL)
    assert r.status == FAIL
    assert r.details["errors"] == []  # the patterns read back intact: only the copy is wrong
    [e] = r.details["copy_errors"]
    dst = 2 * MiB  # one 4 MiB chunk: the copy goes from its first half into its second
    assert (e["device"], e["pattern"], e["offset"], e["bits"], e["byte_offsets"]) == \
        ("cpu", "copy", dst + 8 * word, [bit], [dst + 8 * word + 5])
    assert int(e["expected"], 16) ^ int(e["actual"], 16) == 1 << bit
    assert r.details["copy_mismatches"] == {"cpu": 1}
    assert f"at offset {dst + 8 * word:#x} ({e['address']}): bits [43]" in r.reason
    assert "copy corrupted 1 64-bit word(s) on cpu" in r.reason


def test_ecc_error_during_the_test_fails_naming_the_device():
    def raise_ecc(buf, pattern):  # where the runtime reports it: at the sync after the write
        if pattern == "walking_zeros_0":
            raise RuntimeError(ECC)

    r = gm.run(cpu_ctx(), SMALL, corrupt=raise_ecc)
    assert r.status == FAIL
    assert r.details["cuda_errors"] == [{"device": "cpu", "error": ECC}]
    assert r.reason == "cpu: " + ECC
    assert "ECC" in r.action


def test_another_runtime_error_is_the_checks_error_not_a_finding(monkeypatch):
    def count_nonzero(*args, **kwargs):  # the compare's kernel fails for another reason
        raise RuntimeError("CUDA error: invalid configuration argument")

    monkeypatch.setattr(torch, "count_nonzero", count_nonzero)
    r = run_check("gpu_memory", cpu_ctx(**SMALL))
    assert r.status == ERROR
    assert r.reason == "RuntimeError: CUDA error: invalid configuration argument"


def budget_allocator(free_bytes: int, big_bytes: int):
    """A ``torch.empty`` that refuses, with ``torch.OutOfMemoryError``, any allocation of at least
    ``big_bytes`` that would take the live total of such allocations past ``free_bytes`` (smaller
    temporaries are left alone)."""
    real = torch.empty
    live = [0]

    def release(n: int) -> None:
        live[0] -= n

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        n = t.numel() * t.element_size()
        if n >= big_bytes:
            if live[0] + n > free_bytes:
                raise torch.OutOfMemoryError(f"tried to allocate {n} bytes; {free_bytes - live[0]} free")
            live[0] += n
            weakref.finalize(t, release, n)
        return t

    return empty


def test_memory_that_cannot_be_allocated_fails_on_coverage(monkeypatch):
    monkeypatch.setattr(torch, "empty", budget_allocator(5 * MiB, 1 * MiB))
    params = {**SMALL, "cpu_buffer_bytes": 8 * MiB, "chunk_bytes": 2 * MiB, "min_chunk_bytes": 1 * MiB,
              "slice_bytes": 256 << 10}
    r = gm.run(cpu_ctx(), params)
    assert r.status == FAIL
    values = {m.name: m for m in r.measurements}
    # 2 + 2 MiB, then 2 MiB refused, halved to 1 MiB, then 1 MiB refused and 512 KiB below the floor
    assert values["bytes_tested"].value == 5 * MiB and values["bytes_total"].value == 8 * MiB
    assert values["coverage"].value == 0.625 and values["coverage"].ok() is False
    assert values["mismatched_words"].value == 0  # what was allocated was tested, and is sound
    assert r.reason == "coverage@cpu 0.625 (need >= 0.9)"
    assert "free the GPUs" in r.action


def test_nothing_allocatable_is_coverage_zero_not_a_pass(monkeypatch):
    monkeypatch.setattr(torch, "empty", budget_allocator(0, 1 * MiB))
    r = gm.run(cpu_ctx(), {**SMALL, "min_chunk_bytes": 1 * MiB})
    assert r.status == FAIL
    values = {m.name: m.value for m in r.measurements}
    assert values["bytes_tested"] == 0 and values["coverage"] == 0.0
    assert values["copy_bandwidth"] is None

"""The gpu_memory check on the CPU device: real torch writes, reads and compares on a host buffer
(the code path CUDA runs on GPU memory). A healthy buffer passes with every measurement and its
unit; a bit flipped between write and read is reported at exactly its offset and bit."""

from __future__ import annotations

import pytest

from tests import envneeds

torch = envneeds.module("torch", "the GPU memory check (tests/run.sh installs the CPU build)")

from nodewarden.validator.base import RunContext  # noqa: E402
from nodewarden.validator.checks import gpu_memory as gm  # noqa: E402
from nodewarden.validator.result import ERROR, FAIL, PASS  # noqa: E402
from nodewarden.validator.runner import run_check  # noqa: E402

MiB = 1 << 20
SMALL = {"cpu_buffer_bytes": 4 * MiB, "slice_bytes": 1 * MiB, "walking_bits": [0, 63], "copy_iterations": 2}


def cpu_ctx(**overrides) -> RunContext:
    return RunContext(profile={"gpu_memory": overrides}, device="cpu")


def flip_byte(offset: int, bit: int, when: str | None = None):
    """A corrupt hook flipping ``bit`` (0..7) of the byte at ``offset`` of the buffer (across
    chunks), during pattern ``when`` (every pattern when None)."""

    def corrupt(buf, pattern):
        if when is not None and pattern != when:
            return
        chunks = [buf] if isinstance(buf, torch.Tensor) else buf
        pos = offset
        for c in chunks:
            if pos < c.numel() * 8:
                c.view(torch.uint8)[pos] ^= 1 << bit
                return
            pos -= c.numel() * 8
        raise IndexError(offset)

    return corrupt


# -- patterns ---------------------------------------------------------------------------------------

def test_pattern_list_in_run_order():
    names = [p.name for p in gm.make_patterns([0, 63], seed=1)]
    assert names == ["address", "walking_ones_0", "walking_zeros_0", "walking_ones_63", "walking_zeros_63", "random"]


@pytest.mark.parametrize("k, ones, zeros", [
    (0, 1, -2),
    (63, -(1 << 63), (1 << 63) - 1),  # bit 63 is int64's sign bit
])
def test_walking_words_as_int64(k, ones, zeros):
    p = {q.name: q.value for q in gm.make_patterns([k], seed=0)}
    assert (p[f"walking_ones_{k}"], p[f"walking_zeros_{k}"]) == (ones, zeros)


def test_address_words_hold_their_offset_across_chunks():
    chunks = [torch.empty(1000, dtype=torch.int64), torch.empty(536, dtype=torch.int64)]
    gm.run_patterns(chunks, [gm.Pattern("address", "address")], slice_bytes=8 * 128)
    assert torch.equal(torch.cat(chunks), torch.arange(0, 1536 * 8, 8))


def test_random_pattern_regenerates_per_slice():
    p = gm.Pattern("random", "random", 7)
    buf = torch.empty(4096, dtype=torch.int64)
    p.fill(buf[1024:2048], 1024)
    assert torch.equal(buf[1024:2048], p.expected(1024, 1024, buf.device))
    assert not torch.equal(p.expected(0, 1024, buf.device), p.expected(1024, 1024, buf.device))
    assert not torch.equal(p.expected(0, 1024, buf.device), gm.Pattern("r", "random", 8).expected(0, 1024, buf.device))


def test_clean_buffer_has_no_mismatch():
    chunks = [torch.empty(3000, dtype=torch.int64), torch.empty(1000, dtype=torch.int64)]
    runs = gm.run_patterns(chunks, gm.make_patterns([0, 21, 42, 63], seed=3), slice_bytes=8 * 700)
    assert [r.mismatches for r in runs] == [0] * 10
    assert all(r.bytes == 4000 * 8 and r.write_seconds > 0 and r.read_seconds > 0 for r in runs)


# -- fault injection: a flipped bit is found at its address ------------------------------------------

@pytest.mark.parametrize("pattern, offset, bit", [
    ("address", 0, 0),                 # first byte of the buffer
    ("walking_ones_0", 8 * 999 + 7, 7),  # the top bit of the last word of chunk 0
    ("walking_zeros_63", 8 * 1000, 3),   # first word of chunk 1: offsets run on across chunks
    ("random", 8 * 1234 + 5, 6),
])
def test_flipped_bit_is_located(pattern, offset, bit):
    chunks = [torch.empty(1000, dtype=torch.int64), torch.empty(536, dtype=torch.int64)]
    runs = gm.run_patterns(chunks, gm.make_patterns([0, 63], seed=11), flip_byte(offset, bit, pattern),
                           slice_bytes=8 * 300)
    by_name = {r.name: r for r in runs}
    assert by_name[pattern].mismatches == 1
    assert sum(r.mismatches for r in runs) == 1
    [e] = by_name[pattern].errors
    word = offset - offset % 8
    assert e["pattern"] == pattern
    assert e["offset"] == word
    assert e["bits"] == [(offset % 8) * 8 + bit]
    assert e["byte_offsets"] == [offset]
    assert int(e["expected"], 16) ^ int(e["actual"], 16) == 1 << ((offset % 8) * 8 + bit)
    chunk, local = (0, word) if word < 8000 else (1, word - 8000)
    assert int(e["address"], 16) == chunks[chunk].data_ptr() + local


def test_errors_are_capped_but_all_counted():
    buf = torch.empty(4096, dtype=torch.int64)

    def smash(b, name):
        b[100:300] ^= 0xFF

    [r] = gm.run_patterns(buf, [gm.Pattern("walking_ones_0", "constant", 1)], smash, max_errors=16, slice_bytes=8 * 64)
    assert r.mismatches == 200
    assert [e["offset"] for e in r.errors] == [8 * w for w in range(100, 116)]


# -- the check ----------------------------------------------------------------------------------------

def test_healthy_run_passes_with_units():
    r = gm.run(cpu_ctx(), SMALL)
    assert r.status == PASS, r.reason
    units = {m.name: m.unit for m in r.measurements}
    assert units == {"bytes_tested": "bytes", "bytes_total": "bytes", "coverage": "ratio", "write_bandwidth": "B/s",
                     "read_bandwidth": "B/s", "copy_bandwidth": "B/s", "mismatched_words": "words"}
    values = {m.name: m.value for m in r.measurements}
    assert values["bytes_tested"] == values["bytes_total"] == 4 * MiB
    assert values["coverage"] == 1.0
    assert values["mismatched_words"] == 0
    assert all(values[k] > 0 for k in ("write_bandwidth", "read_bandwidth", "copy_bandwidth"))
    assert all(m.device == "cpu" for m in r.measurements)


def test_check_reports_the_flipped_bit():
    offset, bit = 3 * MiB + 8 * 12345 + 2, 4
    r = gm.run(cpu_ctx(), SMALL, corrupt=flip_byte(offset, bit, "walking_zeros_0"))
    assert r.status == FAIL
    [e] = r.details["errors"]
    assert (e["device"], e["pattern"], e["offset"], e["bits"], e["byte_offsets"]) == \
        ("cpu", "walking_zeros_0", offset - 2, [2 * 8 + bit], [offset])
    assert (e["expected"], e["actual"]) == ("0xfffffffffffffffe", "0xffffffffffeffffe")  # ~1, bit 20 cleared
    assert r.details["mismatches"] == {"cpu": {"walking_zeros_0": 1}}
    assert f"{offset - 2:#x}" in r.reason
    assert next(m for m in r.measurements if m.name == "mismatched_words").ok() is False


def test_copy_threshold_is_a_gpu_figure():
    r = gm.run(cpu_ctx(), {**SMALL, "copy_min_bytes_per_second": 1e15})
    assert r.status == PASS
    assert next(m for m in r.measurements if m.name == "copy_bandwidth").threshold is None


@pytest.mark.parametrize("bad, key", [
    ({"cpu_buffer_bytes": -1}, "cpu_buffer_bytes"),
    ({"slice_bytes": 0}, "slice_bytes"),
    ({"walking_bits": [64]}, "walking_bits"),
    ({"coverage_min_ratio": 1.5}, "coverage_min_ratio"),
    ({"copy_iterations": "ten"}, "copy_iterations"),
])
def test_invalid_parameters_are_an_error_not_a_raise(bad, key):
    r = run_check("gpu_memory", cpu_ctx(**bad))
    assert r.status == ERROR
    assert key in r.reason and "invalid parameter" in r.reason


def test_runner_runs_it_on_the_cpu_device():
    r = run_check("gpu_memory", cpu_ctx(**SMALL))
    assert r.status == PASS and r.duration_s > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_flipped_bit_is_located_on_cuda():
    buf = torch.empty(1 << 20, dtype=torch.int64, device="cuda")
    runs = gm.run_patterns(buf, gm.make_patterns([0], seed=5), flip_byte(8 * 4321 + 1, 2, "random"))
    [e] = [e for r in runs for e in r.errors]
    assert (e["offset"], e["bits"]) == (8 * 4321, [10])
    assert int(e["address"], 16) == buf.data_ptr() + 8 * 4321

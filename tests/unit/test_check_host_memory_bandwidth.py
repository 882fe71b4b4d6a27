"""The host_memory_bandwidth check: STREAM's Copy and Triad over every usable CPU, with STREAM's
byte counting, on both engines. Tests use arrays of a few MiB: the default size (≥ 256 MiB, four
times the L3) is for nodes, not for a shared test machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodewarden.sysfs import cpu_cache
from nodewarden.validator.base import RunContext, has_module
from nodewarden.validator.checks import host_memory_bandwidth as hmb
from nodewarden.validator.result import ERROR, FAIL, PASS
from nodewarden.validator.runner import run_check

MiB = 2**20
CPUS = sorted(os.sched_getaffinity(0))
SMALL = {"array_bytes": 8 * MiB, "repeats": 3}
ENGINES = [e for e in ("numpy", "torch") if has_module(e)]   # neither: the real-path tests are skipped


def ctx(**params) -> RunContext:
    return RunContext(profile={"host_memory_bandwidth": params}, device="cpu")


# -- sizes from sysfs and meminfo ----------------------------------------------------------------

@pytest.mark.parametrize("text, size", [("32768K", 32 * MiB), ("1M", MiB), ("512", 512), (" 48K\n", 48 * 1024)])
def test_parse_cache_size(text, size):
    assert cpu_cache.parse_cache_size(text) == size


def cache_tree(root: Path, cpus: dict[int, list[tuple[int, str, str]]]) -> Path:
    """``cpuN/cache/indexM/{level,size,shared_cpu_list}`` as in
    Documentation/ABI/testing/sysfs-devices-system-cpu."""
    for cpu_n, caches in cpus.items():
        for m, (level, size, shared) in enumerate(caches):
            d = root / f"devices/system/cpu/cpu{cpu_n}/cache/index{m}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "size").write_text(f"{size}\n")
            (d / "shared_cpu_list").write_text(f"{shared}\n")
    return root


def test_total_l3_counts_each_shared_cache_once(tmp_path):
    # two sockets, two CPUs each; an L3 of 32 MiB per socket, private L2s
    caches = {c: [(2, "512K", str(c)), (3, "32768K", "0-1" if c < 2 else "2-3")] for c in range(4)}
    assert cpu_cache.total_l3_bytes(cache_tree(tmp_path, caches)) == 64 * MiB
    assert cpu_cache.total_l3_bytes(tmp_path / "missing") == 0


@pytest.mark.parametrize("l3, available, size", [
    (0, None, 256 * MiB),                     # STREAM's floor
    (32 * MiB, 64 * 2**30, 256 * MiB),        # 4 x L3 below the floor
    (768 * MiB, 512 * 2**30, 3072 * MiB),     # 2 x 384 MiB L3: 4 x total
    (768 * MiB, 6 * 2**30, 1024 * MiB),       # capped: three arrays in half of MemAvailable
])
def test_default_array_bytes(l3, available, size):
    assert hmb.default_array_bytes(l3, available) == size


def test_mem_available_from_meminfo(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       24685268 kB\nMemAvailable:   22000000 kB\n")
    assert hmb.mem_available_bytes(tmp_path) == 22000000 * 1024
    assert hmb.mem_available_bytes(tmp_path / "missing") is None


@pytest.mark.parametrize("n, workers", [(4096, 1), (8 * MiB // 8, 3), (100_000, 7), (512 * 16, 16)])
def test_split_covers_the_array_in_page_aligned_slices(n, workers):
    slices = hmb.split(n, workers)
    assert len(slices) == workers and slices[0][0] == 0 and slices[-1][1] == n
    assert all(lo < hi and lo % hmb.PAGE_ELEMENTS == 0 for lo, hi in slices)
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))


def test_split_refuses_workers_without_a_page():
    with pytest.raises(ValueError):
        hmb.split(hmb.PAGE_ELEMENTS * 2, 3)


# -- STREAM's arithmetic ----------------------------------------------------------------------------

@pytest.mark.parametrize("repeats, values", [
    (0, (1.0, 2.0, 0.0)),
    (1, (5.0, 2.0, 1.0)),       # c = a = 1; a = 2 + 3·1
    (2, (17.0, 2.0, 5.0)),
    (32, (2 * 3.0 ** 32 - 1, 2.0, 2 * 3.0 ** 31 - 1)),
])
def test_expected_values(repeats, values):
    assert hmb.expected_values(repeats) == values
    assert hmb.expected_values(repeats)[0] < 2 ** 53


def test_stream_byte_counting():
    # STREAM: Copy 2 arrays (16 bytes per element), Triad 3 arrays (24 bytes per element)
    assert hmb.stream_bytes("copy", 10**6) == 16 * 10**6
    assert hmb.stream_bytes("triad", 10**6) == 24 * 10**6


def test_best_rate_discards_the_first_pass():
    assert hmb.best_rate("triad", 1000, [0.001, 0.004, 0.002, 0.003]) == 24000 / 0.002
    assert hmb.best_rate("copy", 1000, [0.002]) == 16000 / 0.002


# -- the real path --------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_healthy_run_passes(engine):
    r = run_check("host_memory_bandwidth", ctx(**SMALL, engine=engine))
    assert r.status == PASS, r.reason
    m = {x.name: x for x in r.measurements}
    assert m["copy_bandwidth"].unit == m["triad_bandwidth"].unit == "B/s"
    assert m["copy_bandwidth"].value > 1e8 and m["triad_bandwidth"].value > 1e8
    assert m["triad_bandwidth"].threshold is None          # 0 in the profile: informational
    assert m["array_bytes"].value == 8 * MiB and m["array_bytes"].unit == "bytes"
    assert m["workers"].value == len(CPUS) and m["engine"].value == engine
    assert len(r.details["triad_seconds"]) == 3
    assert r.details["bytes_counted"] == {"copy": 16 * MiB, "triad": 24 * MiB}


def test_auto_engine_prefers_torch():
    assert hmb.choose_engine("auto") == (ENGINES[-1] if ENGINES else None)


@pytest.mark.parametrize("engine", ENGINES)
def test_triad_below_the_threshold_fails(engine):
    r = run_check("host_memory_bandwidth", ctx(**SMALL, engine=engine, triad_min_bytes_per_second=1e15))
    assert r.status == FAIL
    assert "Triad" in r.reason and "below 1000000.0 GB/s" in r.reason
    triad = next(x for x in r.measurements if x.name == "triad_bandwidth")
    assert triad.threshold == 1e15 and triad.ok() is False


@pytest.mark.parametrize("engine", ENGINES)
def test_a_corrupted_element_fails_naming_it(engine):
    index = 8 * MiB // 8 - 3       # in the last worker's slice
    r = run_check("host_memory_bandwidth", ctx(**SMALL, engine=engine, inject_corrupt_element=index))
    assert r.status == FAIL
    a, _, _ = hmb.expected_values(3)
    assert f"a[{index}] = {a + 1!r}, expected {a!r}" in r.reason
    if engine == "numpy":
        assert f"CPU {CPUS[-1]}" in r.reason


@pytest.mark.parametrize("params", [
    {"array_bytes": "big"},
    {"array_bytes": 100},
    {"array_bytes": 2**50},            # more than this machine has
    {"repeats": 1},                    # the first pass is discarded: nothing left
    {"repeats": 40},                   # values would leave the exact integers
    {"engine": "cuda"},
    {"triad_min_bytes_per_second": -1},
    {"inject_corrupt_element": 2**40},
])
def test_invalid_params_give_error(params):
    r = run_check("host_memory_bandwidth", ctx(**{**SMALL, **params}))
    assert r.status == ERROR
    assert next(iter(params)) in r.reason

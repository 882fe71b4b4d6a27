"""``nodewarden.sysfs.cpufreq``: ``devices/system/cpu/cpu<N>/cpufreq`` records
(Documentation/admin-guide/pm/cpufreq.rst) over every fixture tree in tests/fixtures/sysfs, the
``cpu MHz`` lines of a cpuinfo file, and the one "CPU frequency" rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden.sysfs import cpufreq
from nodewarden.sysfs.attrs import AttrReader
from sysfs_trees import FIXTURES, copy_tree, put

XEON = [cpufreq.CpuFreq(n, "performance", 2_000_000, 3_800_000, 3_800_000) for n in range(8)]
EXPECTED = {
    "h100-hgx-ndr": XEON,       # intel_pstate, performance, cur 2.0 GHz, max 3.8 GHz (8 of 224 CPUs kept)
    "h100-hgx-ndr-aer": XEON,
    "cx3-fdr": [], "vm-virtio": [], "iwarp-opa": [], "edac-sbridge-dimm": [], "edac-amd-csrow": [],
}


def test_every_fixture_tree_is_listed() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_read_cpus(tree: str) -> None:
    reader = AttrReader()
    assert cpufreq.read_cpus(FIXTURES / tree, reader) == EXPECTED[tree]
    assert reader.unreadable == 0


def test_only_the_cpus_asked_for_and_caps(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, "devices/system/cpu/cpu5/cpufreq/scaling_max_freq", 2000000)
    put(root, "devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave")
    put(root, "devices/system/cpu/cpu6/cpufreq/scaling_cur_freq", "garbage")
    (root / "devices/system/cpu/cpufreq").mkdir()       # policy directory: not a CPU
    reader = AttrReader()
    got = cpufreq.read_cpus(root, reader, cpus=[3, 5, 6, 99])   # cpu99 does not exist
    assert [r.cpu for r in got] == [3, 5, 6] and reader.unreadable == 1
    assert [r.capped for r in got] == [False, True, False] and got[2].cur_khz is None
    assert cpufreq.governors(got) == {3: "powersave", 5: "performance", 6: "performance"}


CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 2000.000
processor\t: 1
cpu MHz\t\t: 3800.500
"""


def test_cpuinfo_mhz(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert cpufreq.cpuinfo_mhz(tmp_path) == [2000.0, 3800.5]
    assert cpufreq.cpuinfo_mhz(tmp_path / "absent") == []
    (tmp_path / "arm").mkdir()
    (tmp_path / "arm" / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # no cpu MHz lines
    assert cpufreq.cpuinfo_mhz(tmp_path / "arm") == []


def test_a_long_cpuinfo_is_read_whole(tmp_path: Path) -> None:
    """/proc/cpuinfo of a 224-CPU node is ~300 KiB: every CPU's line counts, not the first 4 KiB's."""
    (tmp_path / "cpuinfo").write_text("".join(f"processor\t: {n}\n{'flags: x' * 100}\ncpu MHz\t\t: 1000.0\n"
                                              for n in range(224)))
    assert len(cpufreq.cpuinfo_mhz(tmp_path)) == 224


@pytest.mark.parametrize("records, mhz, want", [
    (XEON, [], (2.0e9, "cpufreq")),
    (XEON, [1000.0], (2.0e9, "cpufreq")),                      # cpufreq first
    # cpufreq directories whose scaling_cur_freq none could read: cpuinfo still answers
    ([cpufreq.CpuFreq(0, "performance", None, None, None)], [1000.0], (1.0e9, "cpuinfo")),
    ([cpufreq.CpuFreq(0, "performance", None, None, None)], [], (None, None)),
    ([cpufreq.CpuFreq(0, None, 1_000_000, None, None), cpufreq.CpuFreq(1, None, 3_000_000, None, None)], [],
     (2.0e9, "cpufreq")),
    ([], [2000.0, 3000.0], (2.5e9, "cpuinfo")),
    ([], [], (None, None)),
])
def test_mean_frequency(records, mhz, want) -> None:
    assert cpufreq.mean_frequency_hz(records, mhz) == want


def test_cpu_frequency_falls_back_to_cpuinfo_when_no_cur_freq_reads(tmp_path: Path) -> None:
    """Four cpufreq directories without readable policy files and a cpuinfo at 2400 MHz: the
    frequency is cpuinfo's, not None (both checks read it through cpu_frequency)."""
    for c in range(4):
        (tmp_path / f"sys/devices/system/cpu/cpu{c}/cpufreq").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("".join(f"processor\t: {c}\ncpu MHz\t\t: 2400.000\n" for c in range(4)))
    records = cpufreq.read_cpus(tmp_path / "sys")
    assert len(records) == 4 and all(r.cur_khz is None for r in records)
    assert cpufreq.cpu_frequency(tmp_path / "sys", tmp_path / "proc") == (2.4e9, "cpuinfo")
    assert cpufreq.cpu_frequency(tmp_path / "sys", tmp_path / "proc", cpus=[1]).hz == 2.4e9

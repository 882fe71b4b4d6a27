"""``nodewarden.sysfs.pci``: the value forms of ``/sys/bus/pci/devices`` files
(Documentation/ABI/testing/sysfs-bus-pci, sysfs-bus-pci-devices-aer_stats), the one "PCIe width"
and "generation" rules, and the reader over every fixture tree in tests/fixtures/sysfs (see
PROVENANCE.md there) against the records it must give."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodewarden.sysfs import pci
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs
from sysfs_trees import FIXTURES, add_mlx5_vf, break_aer_files, copy_tree, put

# ---- value forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, gen", [
    ("32.0 GT/s PCIe", 5), ("16.0 GT/s PCIe", 4), ("8.0 GT/s PCIe", 3), ("2.5 GT/s PCIe", 1),
    ("8 GT/s", 3), ("5 GT/s", 2), ("64.0 GT/s PCIe", 6), ("Unknown", None), ("Unknown speed", None), (None, None),
])
def test_pcie_generation(text, gen) -> None:
    assert pci.pcie_generation(text) == gen


@pytest.mark.parametrize("text, lanes", [
    ("16", 16), ("8", 8), ("x4", 4), ("x16", 16),
    ("0", 0), ("x0", 0),              # a link that is down: zero lanes, not unknown
    ("", None), ("garbage", None), (None, None),
])
def test_pcie_width(text, lanes) -> None:
    """Divergence: ``0`` was None for the links check and 0 for the collector; the one rule
    says 0."""
    assert pci.pcie_width(text) == lanes


@pytest.mark.parametrize("text, want", [("0x10de", 0x10DE), ("0x030200", 0x030200), (None, None), ("zz", None)])
def test_parse_hex(text, want) -> None:
    assert pci.parse_hex(text) == want


COR_NOW = "RxErr 0\nBadTLP 3\nBadDLLP 0\nRollover 0\nTimeout 1\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n"
# The ABI document's sample output (kernels 4.19-5.x printed the long names).
COR_OLD = ("Receiver Error 2\nBad TLP 0\nBad DLLP 0\nRELAY_NUM Rollover 0\nReplay Timer Timeout 0\n"
           "Advisory Non-Fatal 0\nCorrected Internal Error 0\nHeader Log Overflow 0\nTOTAL_ERR_COR 2\n")
FATAL_OLD = "Undefined 0\nData Link Protocol 0\nSurprise Down Error 1\nCompletion Timeout 4\nTOTAL_ERR_FATAL 1\n"


@pytest.mark.parametrize("text, want, bad, total", [
    (COR_NOW, {"RxErr": 0, "BadTLP": 3, "BadDLLP": 0, "Rollover": 0, "Timeout": 1, "NonFatalErr": 0,
               "CorrIntErr": 0, "HeaderOF": 0}, 0, 3),
    (COR_OLD, {"RxErr": 2, "BadTLP": 0, "BadDLLP": 0, "Rollover": 0, "Timeout": 0, "NonFatalErr": 0,
               "CorrIntErr": 0, "HeaderOF": 0}, 0, 2),
    (FATAL_OLD, {"Undefined": 0, "DLP": 0, "SDES": 1, "CmpltTO": 4}, 0, 1),
    ("TOTAL_ERR_NONFATAL 0\n", {}, 0, 0),
    ("RxErr 1\nnot a line\nBadTLP\n\n", {"RxErr": 1}, 2, None),
    ("", {}, 0, None),
])
def test_parse_aer(text, want, bad, total) -> None:
    assert pci.parse_aer(text) == (want, bad, total)


def test_parse_aer_total_of_the_files_severity() -> None:
    text = "DLP 0\nTOTAL_ERR_FATAL 0\nTOTAL_ERR_COR 3\n"
    assert pci.parse_aer(text, "correctable")[2] == 3
    assert pci.parse_aer(text, "fatal")[2] == 0
    assert pci.parse_aer(text, "nonfatal")[2] is None


def test_link_record_properties() -> None:
    link = pci.Link("16.0 GT/s PCIe", "32.0 GT/s PCIe", "0", "16")
    assert (link.generation, link.max_generation, link.lanes, link.max_lanes) == (4, 5, 0, 16)


# ---- the reader over every fixture tree ----------------------------------------------------------

GEN5_X16 = pci.Link("32.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16")
GPUS = {"0000:18:00.0": "0000:17:00.0", "0000:2a:00.0": "0000:29:00.0", "0000:3a:00.0": "0000:39:00.0",
        "0000:5d:00.0": "0000:5b:00.0", "0000:9b:00.0": "0000:99:00.0", "0000:ab:00.0": "0000:a9:00.0",
        "0000:ba:00.0": "0000:b9:00.0", "0000:db:00.0": "0000:d9:00.0"}
HCAS = {"0000:1a:00.0": "0000:17:02.0", "0000:2c:00.0": "0000:29:02.0", "0000:3c:00.0": "0000:39:02.0",
        "0000:5e:00.0": "0000:5b:02.0", "0000:9c:00.0": "0000:99:02.0", "0000:ad:00.0": "0000:a9:02.0",
        "0000:bc:00.0": "0000:b9:02.0", "0000:dd:00.0": "0000:d9:02.0"}
NVSWITCHES = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
BF3 = ("0000:c1:00.0", "0000:c1:00.1")


def h100_functions() -> list[pci.Function]:
    """h100-hgx-ndr: 8 GPUs and 8 HCAs behind PCIe switches, 4 NVSwitches (x2 Gen4), the
    BlueField-3's two functions; no Intel function (eno1, bridges) is read."""
    out = [pci.Function(b, b, pci.NVIDIA, "0x22a3", "0x068000",
                        pci.Link("16.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "2")) for b in NVSWITCHES]
    out += [pci.Function(b, b, pci.NVIDIA, "0x2330", "0x030200", GEN5_X16, up, GEN5_X16) for b, up in GPUS.items()]
    out += [pci.Function(b, b, pci.MELLANOX, "0x1021", "0x020700", GEN5_X16, up, GEN5_X16) for b, up in HCAS.items()]
    out += [pci.Function(b, b, pci.MELLANOX, "0xa2dc", "0x020000", GEN5_X16, "0000:c0:01.0", GEN5_X16) for b in BF3]
    return sorted(out, key=lambda f: f.pci_bus_id)


CX3 = [pci.Function("0000:03:00.0", "0000:03:00.0", pci.MELLANOX, "0x1003", "0x028000",
                    pci.Link("8 GT/s", "8 GT/s", "8", "8"), "0000:00:02.0", pci.Link("8 GT/s", "8 GT/s", "8", "16"))]

EXPECTED = {
    "h100-hgx-ndr": h100_functions(),
    "cx3-fdr": CX3,
    "iwarp-opa": [],          # Intel functions only
    "vm-virtio": [],          # virtio and Intel, no link attributes
    "edac-sbridge-dimm": [],  # no bus/pci/devices
    "edac-amd-csrow": [],
}
PRESENT = {"h100-hgx-ndr", "h100-hgx-ndr-aer", "cx3-fdr", "iwarp-opa", "vm-virtio"}


def test_every_fixture_tree_is_read() -> None:
    assert sorted([*EXPECTED, "h100-hgx-ndr-aer"]) == sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def without_aer(f: pci.Function) -> pci.Function:
    return pci.Function(f.bdf, f.pci_bus_id, f.vendor, f.device, f.pci_class, f.link, f.upstream, f.upstream_link)


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_read_functions(tree: str) -> None:
    reader = AttrReader()
    assert pci.read_functions(FIXTURES / tree, reader) == EXPECTED[tree]
    assert reader.unreadable == 0
    assert pci.present(FIXTURES / tree) is (tree in PRESENT)


def test_read_functions_with_aer_statistics() -> None:
    """h100-hgx-ndr-aer: h100-hgx-ndr's functions with aer_dev_* files (8 correctable, 18 fatal,
    18 non-fatal error bits each); GPU 0000:9b:00.0 one Timeout, HCA 0000:1a:00.0 RxErr 3 and
    BadTLP 1."""
    reader = AttrReader()
    got = pci.read_functions(FIXTURES / "h100-hgx-ndr-aer", reader)
    assert [without_aer(f) for f in got] == EXPECTED["h100-hgx-ndr"] and reader.unreadable == 0
    by = {f.pci_bus_id: f for f in got}
    for f in got:
        assert {k: len(v.counts) for k, v in f.aer.items()} == {"correctable": 8, "fatal": 18, "nonfatal": 18}
        assert all(v.bad_lines == 0 for v in f.aer.values())
    gpu = by["0000:9b:00.0"].aer["correctable"]
    assert gpu.records == 1 and gpu.counts["Timeout"] == 1 and sum(gpu.counts.values()) == 1
    hca = by["0000:1a:00.0"].aer["correctable"]
    assert hca.records == 4 and (hca.counts["RxErr"], hca.counts["BadTLP"]) == (3, 1)
    assert by["0000:1a:00.0"].aer["fatal"].records == 0


def test_rules_over_records() -> None:
    by = {f.pci_bus_id: f for f in pci.read_functions(FIXTURES / "h100-hgx-ndr")}
    assert pci.is_gpu(by["0000:18:00.0"]) and not pci.is_gpu(by["0000:05:00.0"])  # an NVSwitch is no GPU
    assert pci.is_network(by["0000:1a:00.0"]) and pci.is_network(by["0000:c1:00.1"])
    assert not pci.is_network(by["0000:18:00.0"])
    assert [f.bdf for f in pci.read_functions(FIXTURES / "h100-hgx-ndr", vendors=(pci.NVIDIA,))] == sorted(
        list(NVSWITCHES) + list(GPUS))


def test_width_zero_and_unknown_speed(tmp_path: Path) -> None:
    """A link that is down: ``current_link_width`` 0 and ``current_link_speed`` Unknown."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, "bus/pci/devices/0000:ad:00.0/current_link_width", 0)
    put(root, "bus/pci/devices/0000:ad:00.0/current_link_speed", "Unknown")
    (f,) = [f for f in pci.read_functions(root) if f.bdf == "0000:ad:00.0"]
    assert (f.link.lanes, f.link.generation, f.link.max_lanes, f.link.max_generation) == (0, None, 16, 5)


def test_vfs_bad_aer_files_and_absent_root(tmp_path: Path) -> None:
    assert pci.read_functions(tmp_path) == [] and not pci.present(tmp_path)
    root = copy_tree("h100-hgx-ndr-aer", tmp_path)
    break_aer_files(root, "0000:ba:00.0")  # nonfatal unreadable, fatal with one bad line
    add_mlx5_vf(root)
    reader = AttrReader()
    by = {f.bdf: f for f in pci.read_functions(root, reader)}
    assert "0000:1a:00.2" not in by                      # an SR-IOV VF
    assert sorted(by["0000:ba:00.0"].aer) == ["correctable", "fatal"]
    assert by["0000:ba:00.0"].aer["fatal"].bad_lines == 1 and by["0000:ba:00.0"].aer["fatal"].counts == {"DLP": 0}
    assert reader.unreadable == 2


# ---- static attributes read once (StaticAttrs) ----------------------------------------------------

@pytest.mark.parametrize("tree", ["h100-hgx-ndr", "h100-hgx-ndr-aer", "cx3-fdr"])
def test_static_reads_give_the_same_records_poll_after_poll(tree, tmp_path) -> None:
    if not (FIXTURES / tree).is_dir():
        pytest.fail(f"fixture {tree} missing")
    root = copy_tree(tree, tmp_path)
    static = StaticAttrs()
    plain = pci.read_functions(root)
    assert plain and pci.read_functions(root, static=static) == plain
    assert pci.read_functions(root, static=static) == plain
    # a current link that changes and AER counts that rise are read at every poll
    gpu = next((f for f in plain if pci.is_gpu(f)), plain[0])
    put(root, f"bus/pci/devices/{gpu.bdf}/current_link_width", 8)
    put(root, f"bus/pci/devices/{gpu.bdf}/max_link_width", 4)  # static: kept (it cannot change while the device exists)
    again = {f.bdf: f for f in pci.read_functions(root, static=static)}
    assert again[gpu.bdf].link.lanes == 8 and again[gpu.bdf].link.max_lanes == gpu.link.max_lanes


def test_static_reads_read_a_replaced_function_again(tmp_path) -> None:
    """A function removed and added again is a new sysfs directory (a new inode): read anew."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    static = StaticAttrs()
    before = {f.bdf: f for f in pci.read_functions(root, static=static)}
    bdf = next(b for b, f in before.items() if pci.is_gpu(f))
    d = root / "bus" / "pci" / "devices" / bdf
    target = d.resolve()
    moved = target.with_name(target.name + ".old")
    shutil.copytree(target, moved, symlinks=True)
    shutil.rmtree(target)
    moved.rename(target)  # same path, another directory
    put(target, "device", "0x2335")
    put(target, "max_link_width", 8)
    after = {f.bdf: f for f in pci.read_functions(root, static=static)}
    assert after[bdf].device == "0x2335" and after[bdf].link.max_lanes == 8
    assert before[bdf].device != "0x2335"


def test_static_reads_count_an_unreadable_vendor_at_every_poll_and_forget_gone_functions(tmp_path) -> None:
    root = copy_tree("h100-hgx-ndr", tmp_path)
    static = StaticAttrs()
    devices = root / "bus" / "pci" / "devices"
    bdf = sorted(p.name for p in devices.iterdir())[0]
    vendor = devices / bdf / "vendor"
    vendor.unlink()
    vendor.mkdir()  # not a regular file: unreadable
    counts = []
    for _ in range(2):
        r = AttrReader()
        pci.read_functions(root, r, static=static)
        counts.append(r.unreadable)
    assert counts[0] == counts[1] >= 1
    n = len(static)
    gone = next(p for p in sorted(devices.iterdir()) if p.name != bdf)
    gone.unlink() if gone.is_symlink() else shutil.rmtree(gone)
    pci.read_functions(root, static=static)
    assert len(static) < n

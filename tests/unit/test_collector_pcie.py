"""The pcie collector on the H100 tree with AER statistics (tests/fixtures/sysfs/h100-hgx-ndr-aer,
see PROVENANCE.md), on the other generated fixture trees, on copies whose links downtrain, whose AER
counters rise, drop to 0 or break and whose functions go and come back, and on this machine's
own /sys (virtio only: an empty snapshot). The AER series: one total per function and severity
from the first poll, and one series per error bit only once that bit has counted. The
aer_stats and link file value forms are tested with their reader (test_sysfs_pci.py)."""

from __future__ import annotations

from pathlib import Path

import os

import pytest

from nodewarden.collectors import pcie
from nodewarden.collectors.pcie import PcieCollector
from nodewarden.sysfs import pci
from sysfs_trees import FIXTURES, add_mlx5_vf, break_aer_files, copy_tree

AER = "h100-hgx-ndr-aer"
GPUS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9b:00.0", "0000:ab:00.0",
        "0000:ba:00.0", "0000:db:00.0")
HCAS = ("0000:1a:00.0", "0000:2c:00.0", "0000:3c:00.0", "0000:5e:00.0", "0000:9c:00.0", "0000:ad:00.0",
        "0000:bc:00.0", "0000:dd:00.0")
NVSWITCHES = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
BF3 = ("0000:c1:00.0", "0000:c1:00.1")


def values(snap) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, s.labels): s.value for s in snap.samples}


TOTALS = "nodewarden_pcie_aer_errors_total"
BITS = "nodewarden_pcie_aer_bit_errors_total"
ZERO = {"correctable": 0, "fatal": 0, "nonfatal": 0}


def totals(snap, bdf: str) -> dict[str, float]:
    """severity -> the function's AER total (the labels are exactly pci_bus_id and severity)."""
    out = {}
    for s in snap.samples:
        if s.name == TOTALS and dict(s.labels)["pci_bus_id"] == bdf:
            assert [k for k, _ in s.labels] == ["pci_bus_id", "severity"] and s.kind == "counter"
            out[dict(s.labels)["severity"]] = s.value
    return out


def bits(snap, bdf: str | None = None) -> dict[tuple[str, str], float] | dict[tuple[str, str, str], float]:
    """(severity, error) -> count of one function's exported error bits; with no ``bdf``, every
    function's, keyed (pci_bus_id, severity, error)."""
    out = {}
    for s in snap.samples:
        if s.name == BITS:
            lab = dict(s.labels)
            assert [k for k, _ in s.labels] == ["pci_bus_id", "severity", "error"] and s.kind == "counter"
            if bdf is None:
                out[(lab["pci_bus_id"], lab["severity"], lab["error"])] = s.value
            elif lab["pci_bus_id"] == bdf:
                out[(lab["severity"], lab["error"])] = s.value
    return out


def set_count(fn: Path, fname: str, error: str, count: int) -> None:
    """Set one error bit's count in ``fn/fname`` (the other lines as they are)."""
    lines = (fn / fname).read_text().splitlines()
    (fn / fname).write_text("".join(f"{error} {count}\n" if line.split(" ")[0] == error else line + "\n"
                                    for line in lines))


def link(snap, bdf: str) -> dict[tuple[str, str], float]:
    return {(s.name.rsplit("_", 1)[1], dict(s.labels)["which"]): s.value for s in snap.samples
            if s.name.startswith("nodewarden_pcie_link_") and dict(s.labels)["pci_bus_id"] == bdf}


# ---- fixture trees ---------------------------------------------------------------------------

def test_h100_aer_tree():
    snap = PcieCollector(FIXTURES / AER).collect()
    info = {dict(s.labels)["pci_bus_id"]: dict(s.labels) for s in snap.samples if s.name == "nodewarden_pcie_device_info"}
    assert sorted(info) == sorted(GPUS + HCAS + NVSWITCHES + BF3)  # no Intel functions, bridges or eno1
    assert info["0000:9b:00.0"] == {"pci_bus_id": "0000:9b:00.0", "vendor": "0x10de", "device": "0x2330",
                                    "class": "0x030200"}
    assert info["0000:1a:00.0"]["vendor"] == "0x15b3" and info["0000:1a:00.0"]["class"] == "0x020700"
    assert link(snap, "0000:9b:00.0") == {("generation", "current"): 5, ("generation", "max"): 5,
                                          ("width", "current"): 16, ("width", "max"): 16}
    assert link(snap, "0000:05:00.0") == {("generation", "current"): 4, ("generation", "max"): 4,
                                          ("width", "current"): 2, ("width", "max"): 2}
    # three totals per function from the first poll, 0 included; the sums of the bit lines
    assert len([s for s in snap.samples if s.name == TOTALS]) == 3 * 22
    assert {bdf: totals(snap, bdf) for bdf in info} == {
        **{bdf: ZERO for bdf in info},
        "0000:9b:00.0": {**ZERO, "correctable": 1},   # Timeout 1
        "0000:1a:00.0": {**ZERO, "correctable": 4}}   # RxErr 3, BadTLP 1
    # the bits that counted, and no other (965 of the tree's 968 bit lines are 0)
    assert bits(snap) == {("0000:9b:00.0", "correctable", "Timeout"): 1, ("0000:1a:00.0", "correctable", "RxErr"): 3,
                          ("0000:1a:00.0", "correctable", "BadTLP"): 1}
    assert not [s for s in snap.samples if dict(s.labels).get("error", "").startswith("TOTAL")]
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "pcie"),))] == 0
    assert all(s.kind == "counter" for s in snap.samples if s.name.endswith("_total"))


def test_trees_without_aer_files():
    snap = PcieCollector(FIXTURES / "h100-hgx-ndr").collect()
    assert not [s for s in snap.samples if s.name in (TOTALS, BITS)]
    assert len([s for s in snap.samples if s.name == "nodewarden_pcie_device_info"]) == 22
    cx3 = PcieCollector(FIXTURES / "cx3-fdr").collect()
    assert link(cx3, "0000:03:00.0") == {("generation", "current"): 3, ("generation", "max"): 3,  # "8 GT/s"
                                         ("width", "current"): 8, ("width", "max"): 8}
    assert PcieCollector(FIXTURES / "vm-virtio").collect().samples == []  # virtio and Intel only


def test_this_machine():
    """This machine's PCI functions are virtio and Intel (DESIGN.md): no data, no error."""
    snap = PcieCollector("/sys").collect()
    vendors = set()
    for d in Path("/sys/bus/pci/devices").glob("*"):
        try:
            vendors.add(int((d / "vendor").read_text(), 16))
        except OSError:
            pass
    if vendors & {pci.NVIDIA, pci.MELLANOX}:
        pytest.skip("this machine has NVIDIA or Mellanox functions")
    assert snap.samples == [] and snap.events == []


# ---- mutated ---------------------------------------------------------------------------------

def test_downtrained_link_and_rising_counters(tmp_path: Path):
    root = copy_tree(AER, tmp_path)
    c = PcieCollector(root)
    c.collect()
    gpu = root / "bus/pci/devices/0000:ab:00.0"
    (gpu / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (gpu / "current_link_width").write_text("8\n")
    hca = root / "bus/pci/devices/0000:ad:00.0"
    (hca / "current_link_width").write_text("0\n")     # link down
    (hca / "current_link_speed").write_text("Unknown\n")
    text = (gpu / "aer_dev_correctable").read_text().replace("BadDLLP 0", "BadDLLP 7").replace("TOTAL_ERR_COR 0", "TOTAL_ERR_COR 7")
    (gpu / "aer_dev_correctable").write_text(text)
    (gpu / "aer_dev_fatal").write_text((gpu / "aer_dev_fatal").read_text().replace("CmpltTO 0", "CmpltTO 1"))
    snap = c.collect()
    assert link(snap, "0000:ab:00.0") == {("generation", "current"): 1, ("generation", "max"): 5,
                                          ("width", "current"): 8, ("width", "max"): 16}
    assert link(snap, "0000:ad:00.0") == {("generation", "max"): 5, ("width", "current"): 0, ("width", "max"): 16}
    assert bits(snap, "0000:ab:00.0") == {("correctable", "BadDLLP"): 7, ("fatal", "CmpltTO"): 1}
    assert totals(snap, "0000:ab:00.0") == {"correctable": 7, "fatal": 1, "nonfatal": 0}


def test_totals_sum_the_bits_not_the_total_line(tmp_path: Path):
    """One error message with two bits: TOTAL_ERR_COR says 1 and the total is 2 (the bits)."""
    root = copy_tree(AER, tmp_path)
    fn = root / "bus/pci/devices/0000:2c:00.0"
    text = (fn / "aer_dev_correctable").read_text()
    (fn / "aer_dev_correctable").write_text(text.replace("RxErr 0", "RxErr 1").replace("BadTLP 0", "BadTLP 1")
                                            .replace("TOTAL_ERR_COR 0", "TOTAL_ERR_COR 1"))
    snap = PcieCollector(root).collect()
    assert totals(snap, "0000:2c:00.0") == {**ZERO, "correctable": 2}
    assert bits(snap, "0000:2c:00.0") == {("correctable", "RxErr"): 1, ("correctable", "BadTLP"): 1}


def test_a_bit_is_born_at_its_first_count_and_stays_at_zero(tmp_path: Path):
    """A bit that rises later appears with its value; one that drops to 0 (the counters zeroed
    between two polls while the function stays) is still exported, at 0, and keeps being so,
    also across a poll where its file could not be read."""
    root = copy_tree(AER, tmp_path)
    c = PcieCollector(root)
    gpu = root / "bus/pci/devices/0000:18:00.0"
    first = c.collect()
    assert bits(first, "0000:18:00.0") == {} and totals(first, "0000:18:00.0") == ZERO
    set_count(gpu, "aer_dev_nonfatal", "CmpltTO", 2)
    risen = c.collect()
    assert bits(risen, "0000:18:00.0") == {("nonfatal", "CmpltTO"): 2}
    assert totals(risen, "0000:18:00.0") == {**ZERO, "nonfatal": 2}
    set_count(gpu, "aer_dev_nonfatal", "CmpltTO", 0)
    for _ in range(2):
        dropped = c.collect()
        assert bits(dropped, "0000:18:00.0") == {("nonfatal", "CmpltTO"): 0}
        assert totals(dropped, "0000:18:00.0") == ZERO
    # the file unreadable for one poll: neither its total nor its bits, and the bit stays known
    target = Path(os.path.realpath(gpu / "aer_dev_nonfatal"))
    saved = target.read_text()
    target.unlink()
    target.mkdir()
    broken = c.collect()
    assert bits(broken, "0000:18:00.0") == {} and totals(broken, "0000:18:00.0") == {"correctable": 0, "fatal": 0}
    target.rmdir()
    target.write_text(saved)
    assert bits(c.collect(), "0000:18:00.0") == {("nonfatal", "CmpltTO"): 0}
    # the other functions' bits are those of the tree throughout
    assert {k: v for k, v in bits(c.collect()).items() if k[0] != "0000:18:00.0"} == {
        ("0000:9b:00.0", "correctable", "Timeout"): 1, ("0000:1a:00.0", "correctable", "RxErr"): 3,
        ("0000:1a:00.0", "correctable", "BadTLP"): 1}


def test_a_function_removed_and_added_again_is_new(tmp_path: Path):
    """mlx5_0's function leaves the bus (its bus/pci/devices entry gone): none of its series;
    back with the zeroed counters of a new device: its totals at 0 and no bit until one counts."""
    root = copy_tree(AER, tmp_path)
    c = PcieCollector(root)
    bdf = "0000:1a:00.0"
    assert bits(c.collect(), bdf) == {("correctable", "RxErr"): 3, ("correctable", "BadTLP"): 1}
    entry = root / "bus/pci/devices" / bdf
    link = os.readlink(entry)
    entry.unlink()
    gone = c.collect()
    assert not [s for s in gone.samples if dict(s.labels).get("pci_bus_id") == bdf]
    assert bits(gone, "0000:9b:00.0") == {("correctable", "Timeout"): 1}
    os.symlink(link, entry)
    set_count(entry, "aer_dev_correctable", "RxErr", 0)
    set_count(entry, "aer_dev_correctable", "BadTLP", 0)
    back = c.collect()
    assert totals(back, bdf) == ZERO and bits(back, bdf) == {}
    set_count(entry, "aer_dev_correctable", "BadTLP", 1)
    again = c.collect()
    assert bits(again, bdf) == {("correctable", "BadTLP"): 1}
    assert totals(again, bdf) == {**ZERO, "correctable": 1}


def test_bad_files_and_vfs(tmp_path: Path):
    root = copy_tree(AER, tmp_path)
    break_aer_files(root, "0000:ba:00.0")  # nonfatal unreadable, fatal with one bad line
    add_mlx5_vf(root)  # an SR-IOV VF of mlx5_0's function: left out
    snap = PcieCollector(root).collect()
    # nonfatal unreadable: no total; fatal: the line that parses (DLP 0); correctable as read
    assert totals(snap, "0000:ba:00.0") == {"correctable": 0, "fatal": 0}
    assert bits(snap, "0000:ba:00.0") == {}
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "pcie"),))] == 2
    assert "0000:1a:00.2" not in {dict(s.labels)["pci_bus_id"] for s in snap.samples if "pci_bus_id" in dict(s.labels)}

"""The pcie collector on the H100 tree with AER statistics (tests/fixtures/sysfs/h100-hgx-ndr-aer,
see PROVENANCE.md), on the other captured trees, on copies whose links downtrain and whose AER
counters rise or break, and on this machine's own /sys (virtio only: an empty snapshot). The
aer_stats and link file value forms are tested with their reader (test_sysfs_pci.py)."""

from __future__ import annotations

from pathlib import Path

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


def aer(snap, bdf: str) -> dict[tuple[str, str], float]:
    return {(dict(s.labels)["severity"], dict(s.labels)["error"]): s.value for s in snap.samples
            if s.name == "nodewarden_pcie_aer_errors_total" and dict(s.labels)["pci_bus_id"] == bdf}


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
    gpu = aer(snap, "0000:9b:00.0")
    assert len(gpu) == 8 + 18 + 18 and gpu[("correctable", "Timeout")] == 1
    assert sum(gpu.values()) == 1
    hca = aer(snap, "0000:1a:00.0")
    assert hca[("correctable", "RxErr")] == 3 and hca[("correctable", "BadTLP")] == 1 and sum(hca.values()) == 4
    assert hca[("fatal", "SDES")] == 0 and hca[("nonfatal", "PoisonTLPBlocked")] == 0
    nonzero = {(dict(s.labels)["pci_bus_id"], dict(s.labels)["error"]) for s in snap.samples
               if s.name == "nodewarden_pcie_aer_errors_total" and s.value}
    assert nonzero == {("0000:9b:00.0", "Timeout"), ("0000:1a:00.0", "RxErr"), ("0000:1a:00.0", "BadTLP")}
    assert not [s for s in snap.samples if dict(s.labels).get("error", "").startswith("TOTAL")]
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "pcie"),))] == 0
    assert all(s.kind == "counter" for s in snap.samples if s.name.endswith("_total"))


def test_trees_without_aer_files():
    snap = PcieCollector(FIXTURES / "h100-hgx-ndr").collect()
    assert not [s for s in snap.samples if s.name == "nodewarden_pcie_aer_errors_total"]
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
    got = aer(snap, "0000:ab:00.0")
    assert got[("correctable", "BadDLLP")] == 7 and got[("fatal", "CmpltTO")] == 1 and sum(got.values()) == 8


def test_bad_files_and_vfs(tmp_path: Path):
    root = copy_tree(AER, tmp_path)
    break_aer_files(root, "0000:ba:00.0")  # nonfatal unreadable, fatal with one bad line
    add_mlx5_vf(root)  # an SR-IOV VF of mlx5_0's function: left out
    snap = PcieCollector(root).collect()
    got = aer(snap, "0000:ba:00.0")
    assert not [k for k in got if k[0] == "nonfatal"]
    assert got[("fatal", "DLP")] == 0 and len([k for k in got if k[0] == "fatal"]) == 1
    assert len([k for k in got if k[0] == "correctable"]) == 8
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "pcie"),))] == 2
    assert "0000:1a:00.2" not in {dict(s.labels)["pci_bus_id"] for s in snap.samples if "pci_bus_id" in dict(s.labels)}

"""The pcie collector on the H100 tree with AER statistics (tests/fixtures/sysfs/h100-hgx-ndr-aer,
see PROVENANCE.md), on the other captured trees, on copies whose links downtrain and whose AER
counters rise or break, and on this machine's own /sys (virtio only: an empty snapshot)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodewarden.collectors import pcie
from nodewarden.collectors.pcie import PcieCollector
from sysfs_trees import FIXTURES, copy_tree

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


# ---- pure: the aer_stats format ---------------------------------------------------------------

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
def test_parse_aer(text, want, bad, total):
    assert pcie.parse_aer(text) == (want, bad, total)


@pytest.mark.parametrize("text, want", [("16", 16), ("x8", 8), ("0", 0), (None, None), ("garbage", None)])
def test_link_width(text, want):
    assert pcie.link_width(text) == want


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
    if vendors & set(pcie.VENDORS):
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
    gpu = root / "bus/pci/devices/0000:ba:00.0"
    f = gpu / "aer_dev_nonfatal"
    os.unlink(os.path.realpath(f))
    os.mkdir(os.path.realpath(f))                          # read error
    (gpu / "aer_dev_fatal").write_text("DLP 0\nbroken\nTOTAL_ERR_FATAL 0\n")  # one bad line
    # An SR-IOV VF of mlx5_0's function: left out.
    vf = root / "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.2"
    vf.mkdir()
    for k, v in (("vendor", "0x15b3"), ("device", "0x101e"), ("class", "0x020700")):
        (vf / k).write_text(v + "\n")
    os.symlink("../0000:1a:00.0", vf / "physfn")
    os.symlink(os.path.relpath(vf, root / "bus/pci/devices"), root / "bus/pci/devices/0000:1a:00.2")
    snap = PcieCollector(root).collect()
    got = aer(snap, "0000:ba:00.0")
    assert not [k for k in got if k[0] == "nonfatal"]
    assert got[("fatal", "DLP")] == 0 and len([k for k in got if k[0] == "fatal"]) == 1
    assert len([k for k in got if k[0] == "correctable"]) == 8
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "pcie"),))] == 2
    assert "0000:1a:00.2" not in {dict(s.labels)["pci_bus_id"] for s in snap.samples if "pci_bus_id" in dict(s.labels)}

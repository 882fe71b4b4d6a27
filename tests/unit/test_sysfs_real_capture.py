"""nodewarden's sysfs readers and collectors on a tree extracted from a public capture:
prometheus/node_exporter's ``collector/fixtures/sys.ttar`` (tests/fixtures/sysfs-captured, see its
PROVENANCE.md): a ConnectX-3 ``mlx4_0`` (two 4X QDR ports) and an iWARP ``i40iw0``, bonds
``bond0``/``dmz``/``int`` and ``eth0``, an AMD root port with an NVMe drive behind it and an Intel
I350 NIC, and a legacy-layout EDAC controller.

Expected values are the capture's: literals read from the archive (quoted in each test), and, for
the whole counter sets, the archive's records parsed by the extractor's ttar reader -- never what
nodewarden itself returned."""

from __future__ import annotations

import importlib.util
import posixpath
import shutil
from pathlib import Path

import pytest

from nodewarden.collectors.edac import EdacCollector
from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.collectors.netclass import NetclassCollector
from nodewarden.collectors.pcie import PcieCollector
from nodewarden.sysfs import edac, infiniband, net, pci
from nodewarden.sysfs.attrs import AttrReader

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs-captured"
TREE = CAPTURED / "node-exporter-sys"

_spec = importlib.util.spec_from_file_location("extract_ttar", CAPTURED / "extract_ttar.py")
assert _spec is not None and _spec.loader is not None
extract_ttar = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(extract_ttar)

# The archive's own records: {path without "sys/": file text}.
ARCHIVE = {r.path[len("sys/"):]: r.content.decode() for r in extract_ttar.parse_ttar(
    extract_ttar.EXCERPT.read_text(), str(extract_ttar.EXCERPT)) if r.kind == "file"}
NAMED_VENDORS = (0x1022, 0x8086, 0xC0A9)  # the capture's PCI vendors: AMD, Intel, Micron


def archived_counters(device: str, port: int) -> dict[str, int | None]:
    """``counters/*`` of one port as the archive holds them: a decimal count, or None (``N/A (no PMA)``)."""
    prefix = f"class/infiniband/{device}/ports/{port}/counters/"
    out = {}
    for path, text in ARCHIVE.items():
        if path.startswith(prefix):
            value = text.strip()
            out[posixpath.basename(path)] = int(value) if value.isdigit() else None
    return out


def samples(snap, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {s.labels: s.value for s in snap.samples if s.name == name}


# ---- the archive ---------------------------------------------------------------------------

def test_archive_holds_what_the_tests_quote() -> None:
    assert ARCHIVE["class/infiniband/mlx4_0/ports/1/rate"] == "40 Gb/sec (4X QDR)\n"
    assert ARCHIVE["class/infiniband/mlx4_0/hca_type"] == "MT4099\n"
    assert ARCHIVE["class/infiniband/i40iw0/ports/1/counters/link_downed"] == "N/A (no PMA)\n"
    assert ARCHIVE["devices/pci0000:00/0000:00:02.1/0000:01:00.0/current_link_speed"] == "8.0 GT/s PCIe\n"
    assert ARCHIVE["devices/system/edac/mc/mc0/ue_noinfo_count"] == "6\n"


def test_ttar_reader_rules() -> None:
    """ttar's escapes: NULLBYTE is NUL, a trailing EOF drops the newline, both escapable."""
    assert extract_ttar.decode_line("0EOF") == ("0", True)
    assert extract_ttar.decode_line("aNULLBYTEb") == ("a\x00b", False)
    assert extract_ttar.decode_line("\\EOF and \\NULLBYTE") == ("EOF and NULLBYTE", False)
    text = ("Directory: sys\nMode: 755\n# ttar - -\nPath: sys/a\nLines: 1\n1EOF\nMode: 644\n"
            "Path: sys/l\nSymlinkTo: ../a\nPath: sys/e\nLines: 0\nMode: 644\n")
    got = extract_ttar.parse_ttar(text, "t.ttar")
    assert [(r.kind, r.path, r.content, r.target) for r in got] == [
        ("dir", "sys", b"", ""), ("file", "sys/a", b"1", ""), ("link", "sys/l", b"", "../a"),
        ("file", "sys/e", b"", "")]
    with pytest.raises(extract_ttar.TtarError, match=r"t\.ttar:2: expected 'Lines: '"):
        extract_ttar.parse_ttar("Path: sys/a\nMode: 644\n", "t.ttar")
    with pytest.raises(extract_ttar.TtarError, match=r"t\.ttar:1: sys/a: 3 lines announced, 1 present"):
        extract_ttar.parse_ttar("Path: sys/a\nLines: 3\nx\n", "t.ttar")


# ---- readers -------------------------------------------------------------------------------

def test_infiniband_reader() -> None:
    r = AttrReader()
    devices = {d.name: d for d in infiniband.read_devices(TREE, r)}
    assert sorted(devices) == ["i40iw0", "mlx4_0"]
    mlx = devices["mlx4_0"]
    # hca_type MT4099, fw_ver 2.31.5050, board_id SM_1141000001000; no `device` link archived
    assert (mlx.hca_type, mlx.fw_ver, mlx.board_id, mlx.pci_bus_id) == ("MT4099", "2.31.5050", "SM_1141000001000", None)
    assert [p.port for p in mlx.ports] == [1, 2]
    for p in mlx.ports:  # both ports: "4: ACTIVE", "5: LinkUp", "40 Gb/sec (4X QDR)", InfiniBand
        assert (p.state, p.state_name, p.phys_state, p.phys_state_name) == (4, "ACTIVE", 5, "LinkUp")
        assert (p.rate, p.rate_gbit, p.link_layer, p.active) == ("40 Gb/sec (4X QDR)", 40.0, "InfiniBand", True)
        assert dict(p.counters) == archived_counters("mlx4_0", p.port)
    port1 = mlx.ports[0].counters
    assert (port1["port_xmit_wait"], port1["port_rcv_data"], port1["port_xmit_discards"]) == (4294967295, 4631917, 5)
    assert infiniband.parse_ib_rate(mlx.ports[0].rate) == (40.0, 4, "QDR")
    (iw,) = devices["i40iw0"].ports
    # i40iw: rate "10 Gb/sec (4X)" (no speed name), every PMA counter "N/A (no PMA)"
    assert (iw.rate, infiniband.parse_ib_rate(iw.rate), iw.active) == ("10 Gb/sec (4X)", (10.0, 4, None), True)
    assert dict(iw.counters) == archived_counters("i40iw0", 1) and set(iw.counters.values()) == {None}
    assert r.unreadable == len(iw.counters) == 17  # the N/A files, nothing else


def test_net_reader() -> None:
    r = AttrReader()
    got = {d.name: d for d in net.read_netdevs(TREE, r)}
    # bonding_masters ("bond0 dmz int") is the bonding driver's file, no interface, not unreadable
    assert sorted(got) == ["bond0", "dmz", "eth0", "int"] and r.unreadable == 0
    assert ARCHIVE["class/net/bonding_masters"] == "bond0 dmz int\n"
    eth0 = got["eth0"]
    assert (eth0.operstate, eth0.carrier, eth0.speed_mbit, eth0.type) == ("up", 1, 1000, 1)
    assert (eth0.carrier_changes, eth0.carrier_up_count, eth0.carrier_down_count) == (2, 1, 1)
    assert got["dmz"].bond_slaves == ("eth0", "eth4") and got["int"].bond_slaves == ("eth5", "eth1")
    assert got["bond0"].bond_slaves == () and got["bond0"].speed_mbit is None  # speed "-1": unknown
    # the archive keeps no `device` link in any interface directory: none is physical
    assert [n for n, d in got.items() if net.is_physical(d)] == []
    assert all(net.is_up(d) for d in got.values())


def test_pci_reader() -> None:
    r = AttrReader()
    assert pci.read_functions(TREE, r) == []  # no NVIDIA or Mellanox function in this capture
    got = {f.bdf: f for f in pci.read_functions(TREE, r, vendors=NAMED_VENDORS)}
    assert sorted(got) == ["0000:00:02.1", "0000:01:00.0", "0000:45:00.0"] and r.unreadable == 0
    nvme = got["0000:01:00.0"]  # class 0x010802 (NVMe), 0xc0a9:0x540a
    assert (nvme.vendor, nvme.device, nvme.pci_class) == (0xC0A9, "0x540a", "0x010802")
    # current 8.0 GT/s x4 of a 16.0 GT/s x4 device, behind root port 0000:00:02.1 (8.0 GT/s, max x8)
    assert nvme.link == pci.Link("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4")
    assert (nvme.link.generation, nvme.link.max_generation, nvme.link.lanes) == (3, 4, 4)
    assert nvme.upstream == "0000:00:02.1"
    assert nvme.upstream_link == pci.Link("8.0 GT/s PCIe", "8.0 GT/s PCIe", "4", "8")
    for severity, total in (("correctable", "TOTAL_ERR_COR"), ("fatal", "TOTAL_ERR_FATAL"),
                            ("nonfatal", "TOTAL_ERR_NONFATAL")):
        lines = ARCHIVE[f"devices/pci0000:00/0000:00:02.1/0000:01:00.0/aer_dev_{severity}"].split()
        want = dict(zip(lines[0::2], map(int, lines[1::2])))
        assert nvme.aer[severity] == pci.AerStats({k: v for k, v in want.items() if k != total}, want[total], 0)
    i350 = got["0000:45:00.0"]  # 0x8086:0x1521, 5.0 GT/s x4; its port 0000:40:01.3 has no link files
    assert (i350.device, i350.link.generation, i350.link.lanes, i350.upstream) == ("0x1521", 2, 4, None)
    assert got["0000:00:02.1"].aer == {}  # no aer_dev_* archived for the root port


def test_edac_reader() -> None:
    r = AttrReader()
    (mc,) = edac.read_controllers(TREE, r)
    assert r.unreadable == 0 and mc.dimms == () and (mc.mc_name, mc.seconds_since_reset) == (None, None)
    assert (mc.ce, mc.ue, mc.ce_noinfo, mc.ue_noinfo) == (1, 5, 2, 6)
    assert [(row.name, row.ce, row.ue) for row in mc.csrows] == [("csrow0", 3, 4), ("csrow1", 0, 4), ("csrow2", 0, 5)]
    assert [[(ch.index, ch.label, ch.ce) for ch in row.channels] for row in mc.csrows] == [
        [(c, f"mc0csrow{n}channel{c}", 0) for c in (0, 1)] for n in range(3)]


# ---- collectors ----------------------------------------------------------------------------

def test_infiniband_collector() -> None:
    snap = InfinibandCollector(TREE).collect()
    port = (("device", "mlx4_0"), ("port", "1"))
    assert samples(snap, "nodewarden_ib_port_rate_bytes_per_second") == {
        port: 40e9 / 8, (("device", "mlx4_0"), ("port", "2")): 40e9 / 8, (("device", "i40iw0"), ("port", "1")): 10e9 / 8}
    assert samples(snap, "nodewarden_ib_port_state")[port] == 4
    # port_rcv_data / port_xmit_data count 4-byte words (IBTA PortRcvData)
    assert samples(snap, "nodewarden_ib_port_data_bytes_total") == {
        port + (("direction", "receive"),): 4631917 * 4, port + (("direction", "transmit"),): 3733440 * 4,
        (("device", "mlx4_0"), ("port", "2"), ("direction", "receive")): 0,
        (("device", "mlx4_0"), ("port", "2"), ("direction", "transmit")): 0}
    # port_xmit_wait 4294967295: the 32-bit PMA counter at its maximum
    assert samples(snap, "nodewarden_ib_port_saturated") == {port + (("counter", "port_xmit_wait"),): 1}
    assert samples(snap, "nodewarden_collector_unreadable_files") == {(("collector", "infiniband"),): 17}
    assert snap.events == []


def test_netclass_collector() -> None:
    snap = NetclassCollector(TREE).collect()
    assert snap.samples == [] and snap.events == []  # nothing physical, nothing unreadable


def test_netclass_collector_with_the_device_link(tmp_path: Path) -> None:
    """The same capture with the ``device`` link a live /sys has for eth0 (its function
    0000:03:00.0): eth0 is judged, up at 1000 Mb/s."""
    root = tmp_path / "sys"
    shutil.copytree(TREE, root, symlinks=True)
    (root / "devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0/device").symlink_to("../../../0000:03:00.0")
    snap = NetclassCollector(root).collect()
    dev = (("device", "eth0"),)
    assert samples(snap, "nodewarden_net_up") == {dev: 1}
    assert samples(snap, "nodewarden_net_speed_bytes_per_second") == {dev: 1000e6 / 8}
    assert samples(snap, "nodewarden_net_carrier_changes_total") == {dev: 2}


def test_pcie_collector() -> None:
    snap = PcieCollector(TREE).collect()
    assert snap.samples == [] and snap.events == []  # it exports NVIDIA and Mellanox functions only


def test_edac_collector() -> None:
    snap = EdacCollector(TREE, clock=lambda: 0.0).collect()
    ce = {dict(k)["dimm"]: v for k, v in samples(snap, "nodewarden_edac_correctable_errors_total").items()}
    ue = {dict(k)["dimm"]: v for k, v in samples(snap, "nodewarden_edac_uncorrectable_errors_total").items()}
    # csrow0 ce_count 3 with both channels at 0: 3 CEs the driver gave no channel; ce_noinfo_count 2
    assert ce == {"csrow0": 3, "unknown": 2, **{f"mc0csrow{n}channel{c}": 0 for n in range(3) for c in (0, 1)}}
    assert ue == {"csrow0": 4, "csrow1": 4, "csrow2": 5, "unknown": 6}  # ue_count per csrow, ue_noinfo_count 6
    assert snap.events == []

"""``nodewarden.sysfs.net``: the value forms of ``/sys/class/net`` files
(Documentation/ABI/testing/sysfs-class-net), the one "physical interface" rule, and the reader
over every fixture tree in tests/fixtures/sysfs (see PROVENANCE.md there) against the records
it must give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodewarden.sysfs import net
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs
from sysfs_trees import FIXTURES, copy_tree, put


@pytest.mark.parametrize("text, want", [("100000", 100000), ("-1", None), ("0", None), (None, None), ("x", None)])
def test_parse_speed(text, want) -> None:
    assert net.parse_speed(text) == want


@pytest.mark.parametrize("text, want", [("1", 1), ("0", 0), (None, None), ("x", None), ("-7", None), ("2", None)])
def test_parse_carrier(text, want) -> None:
    assert net.parse_carrier(text) == want


# ---- the reader over every fixture tree ----------------------------------------------------------

def nd(name: str, operstate: str, carrier: int | None, speed: int | None, kind: int, **more) -> net.Netdev:
    return net.Netdev(name, operstate, carrier, speed, kind, **more)


H100_IPOIB = {"ibp26s0": "0000:1a:00.0", "ibp44s0": "0000:2c:00.0", "ibp60s0": "0000:3c:00.0",
              "ibp94s0": "0000:5e:00.0", "ibp156s0": "0000:9c:00.0", "ibp173s0": "0000:ad:00.0",
              "ibp188s0": "0000:bc:00.0", "ibp221s0": "0000:dd:00.0"}
H100 = [
    nd("bond0", "up", 1, 400000, 1, bond_slaves=("enp193s0f0np0", "enp193s0f1np1")),  # devices/virtual/net
    nd("docker0", "down", 0, None, 1, bridge=True),
    nd("eno1", "up", 1, 10000, 1, device=True, pci_bus_id="0000:04:00.0"),
    nd("enp193s0f0np0", "up", 1, 200000, 1, device=True, pci_bus_id="0000:c1:00.0"),
    nd("enp193s0f1np1", "up", 1, 200000, 1, device=True, pci_bus_id="0000:c1:00.1"),
    # IPoIB netdevs configured down while their IB ports are ACTIVE (I-014/I-015): carrier EINVAL.
    *(nd(n, "down", None, None, 32, device=True, pci_bus_id=b) for n, b in H100_IPOIB.items()),
    nd("lo", "unknown", 1, None, 772),
    nd("veth1a2b3c4", "up", 1, 10000, 1),
]
EXPECTED = {
    "h100-hgx-ndr": H100,
    "h100-hgx-ndr-aer": H100,
    "cx3-fdr": [nd("ib0", "up", 1, None, 32, device=True, pci_bus_id="0000:03:00.0"),
                nd("ib1", "up", 1, None, 32, device=True, pci_bus_id="0000:03:00.0")],
    # eth0's device link is the virtio device (virtio2), not a PCI function; speed -1.
    "vm-virtio": [nd("eth0", "up", 1, None, 1, device=True), nd("ifb0", "down", None, None, 1),
                  nd("ifb1", "down", None, None, 1), nd("lo", "unknown", 1, None, 772)],
    "iwarp-opa": [],
    "edac-sbridge-dimm": [],
    "edac-amd-csrow": [],
}
PHYSICAL = {
    "h100-hgx-ndr": ["eno1", "enp193s0f0np0", "enp193s0f1np1", *H100_IPOIB],
    "h100-hgx-ndr-aer": ["eno1", "enp193s0f0np0", "enp193s0f1np1", *H100_IPOIB],
    "cx3-fdr": ["ib0", "ib1"],
    "vm-virtio": ["eth0"],
}


def test_every_fixture_tree_is_listed() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_read_netdevs(tree: str) -> None:
    reader = AttrReader()
    got = net.read_netdevs(FIXTURES / tree, reader)
    assert got == EXPECTED[tree]
    assert reader.unreadable == 0
    assert net.present(FIXTURES / tree) is bool(EXPECTED[tree])
    assert [d.name for d in got if net.is_physical(d)] == PHYSICAL.get(tree, [])


# ---- the "physical interface" rule ---------------------------------------------------------------

@pytest.mark.parametrize("record, physical", [
    (nd("eno1", "up", 1, 10000, 1, device=True), True),
    (nd("ibp26s0", "down", None, None, 32, device=True), True),    # IPoIB stays physical
    (nd("lo", "unknown", 1, None, 772), False),                    # no device link
    (nd("br0", "up", 1, None, 1, device=True, bridge=True), False),
    (nd("enp1s0f0v0", "up", 1, 25000, 1, device=True, physfn=True), False),  # an SR-IOV VF
    (nd("veth0", "up", 1, 10000, 1, device=True), True),           # names decide nothing
    (nd("docker_uplink", "up", 1, 10000, 1, device=True), True),
])
def test_is_physical(record: net.Netdev, physical: bool) -> None:
    assert net.is_physical(record) is physical


def test_a_physical_interface_named_like_a_virtual_one(tmp_path: Path) -> None:
    """Divergence: two rules decided which netdev is physical (the collector also dropped names
    starting lo/veth/docker, the links check had a prefix list with no effect); the one rule is
    the device link: a NIC renamed ``veth_uplink`` by udev is physical."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    (root / "class/net/eno1").rename(root / "class/net/veth_uplink")
    (d,) = [d for d in net.read_netdevs(root) if d.name == "veth_uplink"]
    assert d.device and net.is_physical(d) and d.pci_bus_id == "0000:04:00.0"


def test_bad_files_and_absent_root(tmp_path: Path) -> None:
    assert net.read_netdevs(tmp_path) == [] and not net.present(tmp_path)
    root = copy_tree("h100-hgx-ndr", tmp_path)
    port = "class/net/enp193s0f0np0"
    for k, v in (("carrier_changes", 7), ("carrier_up_count", 4), ("carrier_down_count", 3)):
        put(root, f"{port}/{k}", v)
    put(root, "class/net/eno1/carrier_changes", "garbage")
    speed = root / "class/net/enp193s0f1np1/speed"
    os.unlink(os.path.realpath(speed))
    os.mkdir(os.path.realpath(speed))  # EINVAL-like read error: by design, not counted
    reader = AttrReader()
    by = {d.name: d for d in net.read_netdevs(root, reader)}
    assert (by["enp193s0f0np0"].carrier_changes, by["enp193s0f0np0"].carrier_up_count,
            by["enp193s0f0np0"].carrier_down_count) == (7, 4, 3)
    assert by["eno1"].carrier_changes is None and by["enp193s0f1np1"].speed_mbit is None
    assert reader.unreadable == 1  # the garbage counter only


# ---- static attributes read once (StaticAttrs) ----------------------------------------------------

@pytest.mark.parametrize("tree", sorted(p.name for p in FIXTURES.iterdir() if (p / "class" / "net").is_dir()))
def test_static_reads_give_the_same_netdevs_poll_after_poll(tree, tmp_path) -> None:
    root = copy_tree(tree, tmp_path)
    static = StaticAttrs()
    plain = net.read_netdevs(root)
    assert plain and net.read_netdevs(root, static=static) == plain == net.read_netdevs(root, static=static)
    name = plain[0].name
    put(root, f"class/net/{name}/operstate", "down")  # dynamic: read at every poll
    put(root, f"class/net/{name}/carrier_changes", 41)
    again = {d.name: d for d in net.read_netdevs(root, static=static)}
    assert again[name].operstate == "down" and again[name].carrier_changes == 41


def test_static_reads_read_a_replaced_interface_again(tmp_path) -> None:
    """An interface removed and created again (a VF, a bond) is a new directory: its kind is read anew."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    static = StaticAttrs()
    before = {d.name: d for d in net.read_netdevs(root, static=static)}
    name = next(n for n, d in before.items() if d.device and not d.bridge)
    link = root / "class" / "net" / name
    target = link.resolve()
    os.rename(target, target.with_name(target.name + ".gone"))
    target.mkdir()
    for f in ("operstate", "carrier", "type"):
        put(target, f, {"operstate": "up", "carrier": 1, "type": 1}[f])
    (target / "bridge").mkdir()  # now a bridge without a device link
    after = {d.name: d for d in net.read_netdevs(root, static=static)}
    assert before[name].device and not after[name].device and after[name].bridge
    assert not net.is_physical(after[name])

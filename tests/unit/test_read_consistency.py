"""The validator's links check and the agent's collectors read one machine through one read layer
(nodewarden.sysfs), so they cannot disagree: for every fixture tree in tests/fixtures/sysfs, and
for a copy of the H100 tree carrying every input on which they used to disagree, the links
check's active IB ports, PCIe generations and widths per function and physical netdevs equal
what the infiniband, pcie and netclass collectors export."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.collectors.netclass import NetclassCollector
from nodewarden.collectors.pcie import PcieCollector
from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import links
from sysfs_trees import FIXTURES, copy_tree, put

TREES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def divergent_tree(tmp_path: Path) -> Path:
    """h100-hgx-ndr with each input the two faces once read two ways."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, "class/infiniband/mlx5_3/ports/1/state", "ACTIVE")          # text only: no number
    phys = root / "class/infiniband/mlx5_4/ports/1/phys_state"           # ACTIVE, phys_state unreadable
    phys.unlink()
    phys.mkdir()
    put(root, "class/infiniband/mlx5_6/ports/1/state", "1: DOWN")       # and one port really down
    put(root, "class/infiniband/mlx5_6/ports/1/phys_state", "2: Polling")
    (root / "class/infiniband/mlx5_2/ports/1/link_layer").unlink()      # no link_layer file
    put(root, "bus/pci/devices/0000:3c:00.0/current_link_width", 0)      # a link that is down
    put(root, "bus/pci/devices/0000:3c:00.0/current_link_speed", "Unknown")
    (root / "class/net/eno1").rename(root / "class/net/veth_uplink")     # a NIC named like a veth
    layer = root / "class/infiniband/mlx5_5/ports/1/link_layer"         # a link_layer that cannot be read
    layer.unlink()
    layer.mkdir()
    put(root, "class/net/enp193s0f0np0/operstate", "unknown")            # a driver that leaves operstate
    put(root, "class/net/enp193s0f0np0/carrier", 1)                      # unknown: judged by the carrier
    cls = root / "bus/pci/devices/0000:9b:00.0/class"                   # a GPU whose class cannot be read
    cls.unlink()
    cls.mkdir()
    return root


@pytest.fixture(params=TREES + ["divergent"])
def tree(request, tmp_path: Path) -> Path:
    return divergent_tree(tmp_path) if request.param == "divergent" else FIXTURES / request.param


def links_parts(sysfs: Path) -> dict:
    prof = profiles.load("generic")
    prof.setdefault("links", {}).update({"nvml": False})
    ctx = RunContext(profile=prof, sysfs=sysfs, procfs=sysfs / "no-proc")
    return links.run(ctx, runner.params_for("links", ctx)).details["parts"]


def test_active_ib_ports_agree(tree: Path) -> None:
    part = links_parts(tree)["infiniband"]
    c = InfinibandCollector(tree)
    c.collect()
    collector = {p.key: p.active for p in c.ports()}
    check = {p["port"]: p["active"] for p in part.get("ports", [])}
    assert set(check) == set(collector)
    for key, active in collector.items():
        # None: the collector does not judge a port whose state it cannot read; the check holds
        # it not active (a problem naming it), never up.
        assert check[key] is (active is True), key
        if active is not True:
            assert any(x.startswith(f"{key} ") for x in part["problems"]), key
    layers = {dict(s.labels)["device"] + "/" + dict(s.labels)["port"]: dict(s.labels)["link_layer"]
              for s in c.collect().samples if s.name == "nodewarden_ib_port_info"}
    assert layers == {p["port"]: p["link_layer"] for p in part.get("ports", [])}


def test_pcie_links_agree(tree: Path) -> None:
    part = links_parts(tree)["pcie"]
    snap = PcieCollector(tree).collect()
    exported: dict[tuple[str, str, str], float] = {}
    for s in snap.samples:
        if s.name in ("nodewarden_pcie_link_generation", "nodewarden_pcie_link_width"):
            lab = dict(s.labels)
            exported[(lab["pci_bus_id"], s.name.rsplit("_", 1)[1], lab["which"])] = s.value
    judged = part.get("devices", [])
    for d in judged:
        bdf = d["pci"]
        for what, which, value in (("generation", "current", d["generation"]),
                                   ("generation", "max", d["max_generation"]),
                                   ("width", "current", d["lanes"]), ("width", "max", d["max_lanes"])):
            assert exported.get((bdf, what, which)) == value, (bdf, what, which)
    info = {dict(s.labels)["pci_bus_id"] for s in snap.samples if s.name == "nodewarden_pcie_device_info"}
    assert {d["pci"] for d in judged} <= info


def test_physical_netdevs_and_their_link_state_agree(tree: Path) -> None:
    """The interfaces the collector exports are the check's physical ones, and each interface the
    check judged is up for the check exactly when ``nodewarden_net_up`` says 1."""
    part = links_parts(tree)["ethernet"]
    snap = NetclassCollector(tree).collect()
    exported = {dict(s.labels)["device"] for s in snap.samples if s.name.startswith("nodewarden_net_")}
    assert set(part.get("physical", [])) == exported
    net_up = {dict(s.labels)["device"]: s.value for s in snap.samples if s.name == "nodewarden_net_up"}
    for d in part.get("interfaces", []):
        down = any(x.startswith(f"{d['name']} operstate") for x in part.get("problems", []))
        if d["name"] in net_up:
            assert (net_up[d["name"]] == 1) is (not down) is d["up"], d["name"]


def test_the_divergent_tree_is_judged_by_the_shared_rules(tmp_path: Path) -> None:
    """The values both faces now give on that tree."""
    root = divergent_tree(tmp_path)
    parts = links_parts(root)
    ports = {p["port"]: p for p in parts["infiniband"]["ports"]}
    assert ports["mlx5_3/1"]["active"] and ports["mlx5_4/1"]["active"] and not ports["mlx5_6/1"]["active"]
    assert ports["mlx5_2/1"]["link_layer"] == "InfiniBand"
    assert "mlx5_4/1 phys_state unreadable" in " ".join(parts["infiniband"]["warnings"])
    assert "0000:3c:00.0 PCIe x0 < x16" in parts["pcie"]["problems"]
    assert "veth_uplink" in parts["ethernet"]["physical"]
    assert ports["mlx5_5/1"]["link_layer"] == "InfiniBand"
    assert "mlx5_5/1 link_layer unreadable" in " ".join(parts["infiniband"]["warnings"])
    iface = {d["name"]: d for d in parts["ethernet"]["interfaces"]}
    assert iface["enp193s0f0np0"]["up"] and not any("enp193s0f0np0" in x for x in parts["ethernet"].get("problems", []))
    assert "0000:9b:00.0 class unreadable" in " ".join(parts["pcie"]["warnings"])
    assert {d["pci"]: d["kind"] for d in parts["pcie"]["devices"]}["0000:9b:00.0"] == "unknown"
    snap = PcieCollector(root).collect()
    assert [s.value for s in snap.samples if s.name == "nodewarden_pcie_link_width"
            and dict(s.labels) == {"pci_bus_id": "0000:3c:00.0", "which": "current"}] == [0]

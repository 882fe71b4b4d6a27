"""The netclass collector on the captured trees (tests/fixtures/sysfs, see PROVENANCE.md), on a
copy whose RoCE port goes down, comes back and flaps faster than the poll interval, and on this
machine's own /sys (eth0 on virtio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden import events as ev
from nodewarden.collectors import netclass
from nodewarden.collectors.netclass import NetclassCollector
from nodewarden.sysfs import net
from nodewarden.sysfs.net import Netdev
from sysfs_trees import FIXTURES, copy_tree, put

T0 = 1_800_000_000.0
PORT = "class/net/enp193s0f0np0"


def by_device(snap, name: str) -> dict[str, float]:
    return {dict(s.labels)["device"]: s.value for s in snap.samples if s.name == name}


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("operstate, carrier, up", [
    ("up", 1, True), ("down", 0, False), ("down", None, False), ("lowerlayerdown", 0, False),
    ("dormant", 1, False), ("unknown", 1, True), ("unknown", 0, False), (None, None, False),
])
def test_link_up(operstate, carrier, up):
    assert net.is_up(net.Netdev("eth0", operstate, carrier, None, 1)) is up


def test_h100_physical_interfaces():
    snap = NetclassCollector(FIXTURES / "h100-hgx-ndr").collect()
    up = by_device(snap, "nodewarden_net_up")
    # lo, docker0 (a bridge), veth1a2b3c4 and bond0 have no device link: left out.
    assert up == {"eno1": 1, "enp193s0f0np0": 1, "enp193s0f1np1": 1, "ibp26s0": 0, "ibp44s0": 0, "ibp60s0": 0,
                  "ibp94s0": 0, "ibp156s0": 0, "ibp173s0": 0, "ibp188s0": 0, "ibp221s0": 0}
    assert by_device(snap, "nodewarden_net_speed_bytes_per_second") == {
        "eno1": 1.25e9, "enp193s0f0np0": 25e9, "enp193s0f1np1": 25e9}
    assert by_device(snap, "nodewarden_net_carrier") == {"eno1": 1, "enp193s0f0np0": 1, "enp193s0f1np1": 1}
    assert by_device(snap, "nodewarden_net_carrier_changes_total") == {}  # not captured in this tree
    assert snap.events == []


def test_vm_tree():
    snap = NetclassCollector(FIXTURES / "vm-virtio").collect()
    assert by_device(snap, "nodewarden_net_up") == {"eth0": 1}
    assert by_device(snap, "nodewarden_net_speed_bytes_per_second") == {}  # speed -1: unknown


def test_this_machine():
    """This machine's /sys: whatever interfaces it has, no error, consistent series."""
    c = NetclassCollector("/sys")
    snap = c.collect()
    up = by_device(snap, "nodewarden_net_up")
    assert "lo" not in up and not [n for n in up if n.startswith(("veth", "docker"))]
    for s in snap.samples:
        assert s.value >= 0 and s.name.startswith(("nodewarden_net_", "nodewarden_collector_"))
    assert snap.events == []
    assert isinstance(c.collect().events, list)


def test_down_up_and_flaps(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    for k, v in (("carrier_changes", 2), ("carrier_up_count", 1), ("carrier_down_count", 1)):
        put(root, f"{PORT}/{k}", v)
    clock = Clock()
    c = NetclassCollector(root, clock=clock)
    c.collect()
    # The link goes down: operstate down, carrier 0.
    put(root, f"{PORT}/operstate", "down")
    put(root, f"{PORT}/carrier", 0)
    put(root, f"{PORT}/carrier_changes", 3)
    put(root, f"{PORT}/carrier_down_count", 2)
    clock.t = T0 + 10
    snap = c.collect()
    (e,) = snap.events
    assert (e.kind, e.source, e.device) == (ev.NET_LINK_DOWN, "sysfs", "enp193s0f0np0")
    assert e.attrs["state"] == "down" and e.attrs["carrier"] == 0 and e.attrs["pci_bus_id"] == "0000:c1:00.0"
    assert by_device(snap, "nodewarden_net_up")["enp193s0f0np0"] == 0
    assert by_device(snap, "nodewarden_net_carrier_changes_total")["enp193s0f0np0"] == 3
    assert by_device(snap, "nodewarden_net_carrier_down_changes_total")["enp193s0f0np0"] == 2
    # Back up.
    put(root, f"{PORT}/operstate", "up")
    put(root, f"{PORT}/carrier", 1)
    put(root, f"{PORT}/carrier_changes", 4)
    clock.t = T0 + 20
    (e,) = c.collect().events
    assert (e.kind, e.attrs["state"], e.attrs["previous_operstate"]) == (ev.NET_LINK_UP, "up", "down")
    # Two flaps between two polls that both saw it up: carrier_changes 4 -> 8.
    put(root, f"{PORT}/carrier_changes", 8)
    clock.t = T0 + 30
    events = c.collect().events
    assert [x.kind for x in events] == [ev.NET_LINK_DOWN, ev.NET_LINK_UP] * 2
    assert all(x.attrs["flap"] and x.attrs["detected_by"] == "carrier_changes" and x.attrs["since"] == T0 + 20
               and x.attrs["carrier_changes_delta"] == 4 for x in events)
    # One change while up (half a flap, or a counter quirk): nothing.
    put(root, f"{PORT}/carrier_changes", 9)
    clock.t = T0 + 40
    assert c.collect().events == []


def test_operstate_unknown_judged_by_carrier(tmp_path: Path):
    root = copy_tree("vm-virtio", tmp_path)
    put(root, "class/net/eth0/operstate", "unknown")
    c = NetclassCollector(root)
    c.collect()
    put(root, "class/net/eth0/carrier", 0)
    (e,) = c.collect().events
    assert (e.kind, e.device) == (ev.NET_LINK_DOWN, "eth0")


def test_bad_files_fail_alone(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, f"{PORT}/carrier_changes", "garbage")
    put(root, "class/net/eno1/carrier_changes", 5)
    snap = NetclassCollector(root).collect()
    assert by_device(snap, "nodewarden_net_carrier_changes_total") == {"eno1": 5}
    assert by_device(snap, "nodewarden_net_up")["enp193s0f0np0"] == 1
    assert [s.value for s in snap.samples if s.name == "nodewarden_collector_unreadable_files"] == [1]


def reading(operstate: str, carrier: int, carrier_changes: int, speed: int | None) -> Netdev:
    return Netdev("eth9", operstate, carrier, speed, 1, carrier_changes=carrier_changes, device=True)


def test_link_events_pure():
    a = reading("up", 1, 10, 100000)
    assert netclass.link_events(None, a, T0) == []
    assert netclass.link_events(a, a, T0) == []
    b = reading("up", 1, 12, 100000)
    assert [e.kind for e in netclass.link_events(a, b, T0, since=T0 - 5)] == [ev.NET_LINK_DOWN, ev.NET_LINK_UP]
    c = reading("down", 0, 15, None)
    assert [e.kind for e in netclass.link_events(b, c, T0)] == [ev.NET_LINK_DOWN]


def test_physical_is_the_device_link_not_the_name(tmp_path: Path):
    """Divergence: the collector dropped interfaces named lo*/veth*/docker* even with a device
    link, the links check did not; the one rule (nodewarden.sysfs.net.is_physical) is the
    device link, so a NIC renamed ``veth_uplink`` is exported, and a bridge or a device-less
    veth is not."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    (root / "class/net/eno1").rename(root / "class/net/veth_uplink")
    up = by_device(NetclassCollector(root).collect(), "nodewarden_net_up")
    assert up["veth_uplink"] == 1 and "eno1" not in up
    assert not {"veth1a2b3c4", "docker0", "lo", "bond0"} & set(up)

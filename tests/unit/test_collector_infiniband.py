"""The infiniband collector on sysfs trees captured from real machines (tests/fixtures/sysfs, see
its PROVENANCE.md), on private copies mutated between two polls the way a link flap, a counter
rise, an ``N/A (no PMA)`` counter or an unreadable file changes them, and on this machine's own
/sys (no RDMA devices here: an empty snapshot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden import events as ev
from nodewarden.collectors import infiniband as ib
from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.sysfs.infiniband import Port
from sysfs_trees import FIXTURES, copy_tree, put

T0 = 1_800_000_000.0


def values(snap) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for s in snap.samples:
        key = (s.name, s.labels)
        assert key not in out, f"duplicate series {key}"
        out[key] = s.value
    return out


def port(dev: str, p: int = 1, **extra: str) -> tuple[tuple[str, str], ...]:
    return (("device", dev), ("port", str(p))) + tuple(extra.items())


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# ---- pure: IBA counter widths and units (the file value forms: test_sysfs_infiniband.py) --------

@pytest.mark.parametrize("counter, extended, top", [
    ("link_downed", False, 255),                     # Y-003 mlx5_1: 255 is saturated
    ("link_error_recovery", False, 255),
    ("symbol_error", False, 65535),
    ("port_rcv_errors", False, 65535),
    ("port_rcv_remote_physical_errors", False, 65535),
    ("port_rcv_switch_relay_errors", False, 65535),
    ("port_xmit_discards", False, 65535),
    ("VL15_dropped", False, 65535),
    ("port_xmit_constraint_errors", False, 255),
    ("port_rcv_constraint_errors", False, 255),
    ("local_link_integrity_errors", False, 15),      # 4-bit fields of PortCounters
    ("excessive_buffer_overrun_errors", False, 15),  # Y-003 mlx5_0 reads 15
    ("port_xmit_wait", True, 4294967295),            # 32 bits even with extended counters
    ("port_xmit_data", False, 4294967295),
    ("port_rcv_packets", False, 4294967295),
    ("port_xmit_data", True, None),                  # PortCountersExtended: 64 bits
    ("unicast_rcv_packets", True, None),
    ("rx_write_requests", False, None),              # not a PMA counter
])
def test_saturation_max(counter, extended, top):
    assert ib.saturation_max(counter, extended) == top


def test_counter_sets_and_rates():
    assert ib.extended_counters(["port_xmit_data", "unicast_xmit_packets"])
    assert not ib.extended_counters(["port_xmit_data", "port_rcv_data"])
    assert ib.rate_bytes_per_second("400 Gb/sec (4X NDR)") == 50e9
    assert ib.rate_bytes_per_second("200 Gb/sec (2X NDR)") == 25e9
    assert ib.rate_bytes_per_second("2.5 Gb/sec (1X SDR)") == 312.5e6
    assert ib.rate_bytes_per_second("garbage") is None


# ---- fixture trees as captured ---------------------------------------------------------------

def test_h100_values():
    c = InfinibandCollector(FIXTURES / "h100-hgx-ndr")
    snap = c.collect()
    v = values(snap)
    want = {
        ("nodewarden_ib_port_state", port("mlx5_0")): 4,
        ("nodewarden_ib_port_phys_state", port("mlx5_0")): 5,
        ("nodewarden_ib_port_rate_bytes_per_second", port("mlx5_0")): 50e9,
        ("nodewarden_ib_port_info", port("mlx5_0", link_layer="InfiniBand", board_id="MT_0000000838",
                                         fw_ver="28.41.1000")): 1,
        ("nodewarden_ib_link_downed_total", port("mlx5_0")): 0,
        ("nodewarden_ib_port_errors_total", port("mlx5_0", counter="port_rcv_errors")): 14,
        ("nodewarden_ib_port_errors_total", port("mlx5_0", counter="excessive_buffer_overrun_errors")): 15,
        ("nodewarden_ib_port_errors_total", port("mlx5_0", counter="symbol_error")): 0,
        ("nodewarden_ib_port_xmit_wait_total", port("mlx5_0")): 2489603687,
        ("nodewarden_ib_link_downed_total", port("mlx5_1")): 255,
        ("nodewarden_ib_port_rate_bytes_per_second", port("mlx5_bond_0")): 25e9,
        ("nodewarden_ib_port_info", port("mlx5_bond_0", link_layer="Ethernet", board_id="MT_0000000884",
                                         fw_ver="32.41.1000")): 1,
        ("nodewarden_collector_unreadable_files", (("collector", "infiniband"),)): 0,
    }
    for key, value in want.items():
        assert v[key] == value, key
    # Saturated: Y-003's link_downed 255 (8-bit) and excessive_buffer_overrun_errors 15 (4-bit).
    saturated = {dict(k[1])["device"] + ":" + dict(k[1])["counter"] for k, val in v.items()
                 if k[0] == "nodewarden_ib_port_saturated"}
    assert saturated == {"mlx5_0:excessive_buffer_overrun_errors", "mlx5_1:link_downed"}
    assert len([k for k in v if k[0] == "nodewarden_ib_port_state"]) == 9  # mlx5_0..7 + mlx5_bond_0
    # hw_counters/lifespan is the counter cache's lifetime (a setting), not a count.
    assert not [k for k in v if k[0] == "nodewarden_ib_hw_stat_total"]
    assert all(s.kind == "counter" for s in snap.samples if s.name.endswith("_total"))
    assert all(s.help for s in snap.samples)
    assert snap.events == []
    readings = {r.key: r for r in c.ports()}
    r = readings["mlx5_1/1"]
    assert isinstance(r, Port) and (r.device, r.port, r.state, r.phys_state, r.link_downed, r.link_layer,
                                    r.state_name, r.phys_state_name, r.netdev, r.active) == (
        "mlx5_1", 1, 4, 5, 255, "InfiniBand", "ACTIVE", "LinkUp", None, True)
    assert readings["mlx5_bond_0/1"].netdev == "bond0" and readings["mlx5_bond_0/1"].active


def test_cx3_down_port():
    v = values(InfinibandCollector(FIXTURES / "cx3-fdr").collect())
    assert v[("nodewarden_ib_port_state", port("mlx4_0", 1))] == 1           # 1: DOWN
    assert v[("nodewarden_ib_port_phys_state", port("mlx4_0", 1))] == 3      # 3: Disabled
    assert v[("nodewarden_ib_port_rate_bytes_per_second", port("mlx4_0", 1))] == 1.25e9  # stale "10 Gb/sec"
    assert v[("nodewarden_ib_port_state", port("mlx4_0", 2))] == 4
    assert v[("nodewarden_ib_port_rate_bytes_per_second", port("mlx4_0", 2))] == 7e9     # 56 Gb/sec FDR


def test_no_pma_and_comma_names():
    """Y-005: i40iw counters read "N/A (no PMA)": absent, not 0, and counted; Y-006: hfi1
    hw_counters names with a comma are enumerated whole."""
    c = InfinibandCollector(FIXTURES / "iwarp-opa")
    v = values(c.collect())
    assert ("nodewarden_ib_link_downed_total", port("i40iw0")) not in v
    assert not [k for k in v if k[0] == "nodewarden_ib_port_errors_total" and dict(k[1])["device"] == "i40iw0"]
    assert v[("nodewarden_ib_port_state", port("i40iw0"))] == 4
    assert v[("nodewarden_collector_unreadable_files", (("collector", "infiniband"),))] == 2
    assert v[("nodewarden_ib_hw_stat_total", port("hfi1_0", counter="SwLinkUp,32"))] == 1
    assert v[("nodewarden_ib_hw_stat_total", port("hfi1_0", counter="RcvHdrOvr10"))] == 0
    assert {r.key: r.link_downed for r in c.ports()} == {"hfi1_0/1": 0, "i40iw0/1": None}


def test_this_machine_has_no_rdma():
    """This machine has no /sys/class/infiniband (DESIGN.md): no data, no error."""
    if Path("/sys/class/infiniband").exists():
        pytest.skip("this machine has RDMA devices")
    c = InfinibandCollector("/sys")
    snap = c.collect()
    assert snap.samples == [] and snap.events == [] and c.ports() == []


def test_missing_root(tmp_path: Path):
    snap = InfinibandCollector(tmp_path).collect()
    assert snap.samples == [] and snap.events == []


# ---- mutated between polls ---------------------------------------------------------------------

def test_link_flap_events(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    clock = Clock()
    c = InfinibandCollector(root, clock=clock)
    assert c.collect().events == []
    rel = "class/infiniband/mlx5_3/ports/1"
    put(root, f"{rel}/state", "1: DOWN")
    put(root, f"{rel}/phys_state", "2: Polling")
    put(root, f"{rel}/counters/link_downed", 1)
    clock.t = T0 + 10
    snap = c.collect()
    (e,) = snap.events
    assert (e.kind, e.source, e.device) == (ev.IB_LINK_DOWN, "sysfs", "mlx5_3/1")
    assert e.attrs["state"] == "DOWN" and e.attrs["phys_state"] == "Polling" and e.attrs["link_downed"] == 1
    assert (e.attrs["rdma_device"], e.attrs["port"], e.attrs["previous_state"]) == ("mlx5_3", 1, "ACTIVE")
    assert e.time.timestamp() == T0 + 10 and e.attrs["since"] == T0  # it happened in (T0, T0 + 10]
    v = values(snap)
    assert v[("nodewarden_ib_port_state", port("mlx5_3"))] == 1
    assert v[("nodewarden_ib_port_phys_state", port("mlx5_3"))] == 2
    assert v[("nodewarden_ib_link_downed_total", port("mlx5_3"))] == 1
    # Still down: no new event.
    clock.t = T0 + 20
    assert c.collect().events == []
    put(root, f"{rel}/state", "4: ACTIVE")
    put(root, f"{rel}/phys_state", "5: LinkUp")
    clock.t = T0 + 30
    (e,) = c.collect().events
    assert (e.kind, e.device, e.attrs["state"], e.attrs["previous_state"]) == (ev.IB_LINK_UP, "mlx5_3/1", "ACTIVE", "DOWN")


def test_init_and_phys_state_leave_active(tmp_path: Path):
    """ACTIVE/LinkUp is the up state: INIT (no SM) and ACTIVE with phys LinkErrorRecovery are not."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    c = InfinibandCollector(root, clock=Clock())
    c.collect()
    put(root, "class/infiniband/mlx5_2/ports/1/state", "2: INIT")
    put(root, "class/infiniband/mlx5_4/ports/1/phys_state", "6: LinkErrorRecovery")
    events = c.collect().events
    assert [(e.kind, e.device) for e in events] == [(ev.IB_LINK_DOWN, "mlx5_2/1"), (ev.IB_LINK_DOWN, "mlx5_4/1")]
    assert events[0].attrs["state"] == "INIT" and events[1].attrs["phys_state"] == "LinkErrorRecovery"


def test_data_counters_widths_and_saturation(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    rel = "class/infiniband/mlx5_2/ports/1/counters"
    put(root, f"{rel}/port_xmit_data", 4294967295)      # saturated 32-bit PortXmitData
    put(root, f"{rel}/port_rcv_data", 1000)             # 4-byte words
    put(root, f"{rel}/port_xmit_packets", 7)
    put(root, f"{rel}/port_rcv_packets", 9)
    put(root, f"{rel}/port_rcv_contraint_errors", 255)  # the ABI document's spelling
    put(root, f"{rel}/symbol_error", 65535)
    put(root, f"{rel}/link_error_recovery", 3)
    c = InfinibandCollector(root)
    v = values(c.collect())
    p = port("mlx5_2")
    assert v[("nodewarden_ib_port_data_bytes_total", p + (("direction", "transmit"),))] == 4 * 4294967295
    assert v[("nodewarden_ib_port_data_bytes_total", p + (("direction", "receive"),))] == 4000
    assert v[("nodewarden_ib_port_packets_total", p + (("direction", "transmit"),))] == 7
    assert v[("nodewarden_ib_port_packets_total", p + (("direction", "receive"),))] == 9
    assert v[("nodewarden_ib_port_errors_total", p + (("counter", "port_rcv_constraint_errors"),))] == 255
    assert v[("nodewarden_ib_link_error_recovery_total", p)] == 3
    flagged = {dict(k[1])["counter"] for k in v if k[0] == "nodewarden_ib_port_saturated"
               and dict(k[1])["device"] == "mlx5_2"}
    assert flagged == {"port_xmit_data", "port_rcv_constraint_errors", "symbol_error"}
    # With PortCountersExtended (unicast_* present) the data counters are 64-bit: not saturated.
    put(root, f"{rel}/unicast_xmit_packets", 5)
    put(root, f"{rel}/multicast_rcv_packets", 2)
    v = values(c.collect())
    flagged = {dict(k[1])["counter"] for k in v if k[0] == "nodewarden_ib_port_saturated"
               and dict(k[1])["device"] == "mlx5_2"}
    assert flagged == {"port_rcv_constraint_errors", "symbol_error"}
    assert v[("nodewarden_ib_port_unicast_packets_total", p + (("direction", "transmit"),))] == 5
    assert v[("nodewarden_ib_port_multicast_packets_total", p + (("direction", "receive"),))] == 2


def test_bad_files_fail_alone(tmp_path: Path):
    """An N/A counter, an unreadable counter (a read error) and garbage each cost one series."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    rel = "class/infiniband/mlx5_5/ports/1"
    put(root, f"{rel}/counters/link_downed", "N/A (no PMA)")
    (root / rel / "counters" / "symbol_error").unlink()
    (root / rel / "counters" / "symbol_error").mkdir()           # open() fails: EISDIR
    (root / rel / "counters" / "port_rcv_errors").unlink()
    (root / rel / "counters" / "port_rcv_errors").symlink_to("gone")  # dangling: ENOENT
    put(root, f"{rel}/hw_counters/rx_write_requests", "garbage")
    put(root, f"{rel}/hw_counters/out_of_sequence", 12)
    c = InfinibandCollector(root)
    v = values(c.collect())
    p = port("mlx5_5")
    assert ("nodewarden_ib_link_downed_total", p) not in v
    assert ("nodewarden_ib_port_errors_total", p + (("counter", "symbol_error"),)) not in v
    assert ("nodewarden_ib_port_errors_total", p + (("counter", "port_rcv_errors"),)) not in v
    assert v[("nodewarden_ib_port_errors_total", p + (("counter", "excessive_buffer_overrun_errors"),))] == 0
    assert v[("nodewarden_ib_hw_stat_total", p + (("counter", "out_of_sequence"),))] == 12
    assert v[("nodewarden_ib_port_state", p)] == 4
    assert v[("nodewarden_collector_unreadable_files", (("collector", "infiniband"),))] == 4
    assert v[("nodewarden_ib_port_state", port("mlx5_6"))] == 4  # the other ports answer
    assert {r.key: r.link_downed for r in c.ports()}["mlx5_5/1"] is None


def test_unreadable_state_is_not_a_transition(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    c = InfinibandCollector(root)
    c.collect()
    state = root / "class/infiniband/mlx5_7/ports/1/state"
    state.unlink()
    state.mkdir()
    snap = c.collect()
    assert snap.events == []
    assert ("nodewarden_ib_port_state", port("mlx5_7")) not in values(snap)


# ---- the shared read rules (nodewarden.sysfs.infiniband), as exported -----------------------------

def test_missing_link_layer_is_labelled_infiniband(tmp_path: Path):
    """Divergence: a port without ``link_layer`` was ``InfiniBand`` in the links report and
    ``link_layer=""`` on /metrics; the label is now InfiniBand too."""
    root = copy_tree("cx3-fdr", tmp_path)
    (root / "class/infiniband/mlx4_0/ports/2/link_layer").unlink()
    snap = InfinibandCollector(root).collect()
    info = [dict(s.labels) for s in snap.samples if s.name == "nodewarden_ib_port_info"]
    assert [i["link_layer"] for i in info if i["port"] == "2"] == ["InfiniBand"]
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "infiniband"),))] == 0


def test_text_only_active_state_is_up(tmp_path: Path):
    """Divergence: a ``state`` of ``ACTIVE`` without its number was down for the collector (and
    the flash-cut detector) and up for the links check; it is up, and leaving it is a link down."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    rel = "class/infiniband/mlx5_3/ports/1"
    put(root, f"{rel}/state", "ACTIVE")
    c = InfinibandCollector(root, clock=Clock())
    snap = c.collect()
    assert values(snap)[("nodewarden_ib_port_state", port("mlx5_3"))] == 4  # the number ACTIVE stands for
    assert {r.key: r.active for r in c.ports()}["mlx5_3/1"] is True
    put(root, f"{rel}/state", "DOWN")
    (e,) = c.collect().events
    assert (e.kind, e.device, e.attrs["previous_state"], e.attrs["state"]) == (
        ev.IB_LINK_DOWN, "mlx5_3/1", "ACTIVE", "DOWN")


def test_active_port_with_unreadable_phys_state_stays_up(tmp_path: Path):
    root = copy_tree("h100-hgx-ndr", tmp_path)
    c = InfinibandCollector(root, clock=Clock())
    c.collect()
    phys = root / "class/infiniband/mlx5_4/ports/1/phys_state"
    phys.unlink()
    phys.mkdir()
    snap = c.collect()
    assert snap.events == [] and {r.key: r.active for r in c.ports()}["mlx5_4/1"] is True
    assert values(snap)[("nodewarden_collector_unreadable_files", (("collector", "infiniband"),))] == 1

"""``nodewarden.sysfs.infiniband``: the value forms of ``/sys/class/infiniband`` files
(Documentation/ABI/stable/sysfs-class-infiniband, drivers/infiniband/core/sysfs.c), the one
"port active" and "link layer" rules, and the reader over every fixture tree in
tests/fixtures/sysfs (see PROVENANCE.md there) against the records it must give."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from nodewarden.sysfs import infiniband as ib
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs, parse_code_name, parse_counter
from sysfs_trees import FIXTURES, copy_tree, put

# ---- value forms: kernel ABI strings -----------------------------------------------------------


@pytest.mark.parametrize("text, want", [
    ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")),        # Y-003, CX-7
    ("200 Gb/sec (2X NDR)", (200.0, 2, "NDR")),        # Y-003, BlueField-3 LAG
    ("200 Gb/sec (4X HDR)", (200.0, 4, "HDR")),        # I-013
    ("56 Gb/sec (4X FDR)", (56.0, 4, "FDR")),          # I-011, ConnectX-3
    ("2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),          # rate_show's ".5" branch
    ("100 Gb/sec (4X EDR)", (100.0, 4, "EDR")),
    ("N/A (no PMA)", (None, None, None)),              # Y-005 style non-value
    (None, (None, None, None)),
])
def test_parse_ib_rate(text, want) -> None:
    assert ib.parse_ib_rate(text) == want


@pytest.mark.parametrize("text, want", [
    ("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("2: Polling", (2, "Polling")),
    ("5: LinkUp", (5, "LinkUp")), ("ACTIVE", (None, "ACTIVE")), (None, (None, None)),
])
def test_parse_state(text, want) -> None:
    assert parse_code_name(text) == want


@pytest.mark.parametrize("text, want", [
    ("14", 14),
    ("2489603687", 2489603687),           # Y-003 port_xmit_wait
    ("N/A (no PMA)", None),               # Y-005 i40iw
    ("", None),
    ("-1", None),
    (None, None),
])
def test_parse_counter(text, want) -> None:
    assert parse_counter(text) == want


def test_counter_names() -> None:
    assert ib.counter_name("port_rcv_contraint_errors") == "port_rcv_constraint_errors"  # ABI doc (sic)
    assert ib.counter_name("SwLinkUp,32") == "SwLinkUp,32"


# ---- the "port active" rule ----------------------------------------------------------------------

def port(state: int | None, state_name: str | None, phys: int | None, phys_name: str | None) -> ib.Port:
    return ib.Port("mlx5_0", 1, state, state_name, phys, phys_name, "400 Gb/sec (4X NDR)", ib.INFINIBAND)


@pytest.mark.parametrize("state, state_name, phys, phys_name, active", [
    (4, "ACTIVE", 5, "LinkUp", True),
    (4, "ACTIVE", None, None, True),            # phys_state unreadable: IBTA 7.2, ACTIVE implies LinkUp
    (None, "ACTIVE", 5, "LinkUp", True),        # a state file with no number: the text decides
    (None, "ACTIVE", None, "LinkUp", True),
    (None, "ACTIVE", None, None, True),
    (4, "ACTIVE", 2, "Polling", False),         # a readable phys_state other than LinkUp
    (4, "ACTIVE", 6, "LinkErrorRecovery", False),
    (None, "ACTIVE", None, "Polling", False),
    (2, "INIT", 5, "LinkUp", False),            # no subnet manager
    (1, "DOWN", 3, "Disabled", False),
    (None, "DOWN", None, None, False),
    (None, None, 5, "LinkUp", None),            # state unreadable: not judged
    (None, None, None, None, None),
])
def test_port_active(state, state_name, phys, phys_name, active) -> None:
    p = port(state, state_name, phys, phys_name)
    assert ib.port_active(p) is active
    assert p.active is active


def test_text_only_active_is_active(tmp_path: Path) -> None:
    """Divergence: a ``state`` file reading ``ACTIVE`` without its number was up for the links
    check only; the one rule says active, read from a file."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, "class/infiniband/mlx5_3/ports/1/state", "ACTIVE")
    (p,) = [p for p in ib.read_ports(root) if p.key == "mlx5_3/1"]
    assert (p.state, p.state_name, p.active) == (4, "ACTIVE", True)  # the number the kernel's name stands for


def test_unreadable_phys_state_of_an_active_port(tmp_path: Path) -> None:
    """Divergence: ``4: ACTIVE`` with an unreadable ``phys_state`` was down for the links check
    and up for the collector; the one rule says active, and the file is counted."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    phys = root / "class/infiniband/mlx5_2/ports/1/phys_state"
    phys.unlink()
    phys.mkdir()  # open() fails: EISDIR, as a read error would
    reader = AttrReader()
    (p,) = [p for p in ib.read_ports(root, reader) if p.key == "mlx5_2/1"]
    assert (p.state, p.phys_state, p.phys_state_name, p.active) == (4, None, None, True)
    assert reader.unreadable == 1


# ---- the "link layer" rule -----------------------------------------------------------------------

def test_missing_link_layer_is_infiniband(tmp_path: Path) -> None:
    """Divergence: a port without ``link_layer`` (kernels before it, IB-only devices) was
    ``InfiniBand`` in the report and ``""`` as a metric label; the one rule says InfiniBand."""
    root = copy_tree("cx3-fdr", tmp_path)
    (root / "class/infiniband/mlx4_0/ports/2/link_layer").unlink()
    reader = AttrReader()
    ports = {p.key: p for p in ib.read_ports(root, reader)}
    assert ports["mlx4_0/2"].link_layer == ib.INFINIBAND == "InfiniBand"
    assert reader.unreadable == 0  # absent is not unreadable


def test_unreadable_link_layer_is_none_and_counted(tmp_path: Path) -> None:
    root = copy_tree("cx3-fdr", tmp_path)
    f = root / "class/infiniband/mlx4_0/ports/2/link_layer"
    f.unlink()
    f.mkdir()
    reader = AttrReader()
    ports = {p.key: p for p in ib.read_ports(root, reader)}
    assert ports["mlx4_0/2"].link_layer is None and reader.unreadable == 1


# ---- the reader over every fixture tree ----------------------------------------------------------

H100_PCI = {"mlx5_0": "0000:1a:00.0", "mlx5_1": "0000:2c:00.0", "mlx5_2": "0000:3c:00.0", "mlx5_3": "0000:5e:00.0",
            "mlx5_4": "0000:9c:00.0", "mlx5_5": "0000:ad:00.0", "mlx5_6": "0000:bc:00.0", "mlx5_7": "0000:dd:00.0"}
H100_IPOIB = {"mlx5_0": "ibp26s0", "mlx5_1": "ibp44s0", "mlx5_2": "ibp60s0", "mlx5_3": "ibp94s0",
              "mlx5_4": "ibp156s0", "mlx5_5": "ibp173s0", "mlx5_6": "ibp188s0", "mlx5_7": "ibp221s0"}
ZERO = {"excessive_buffer_overrun_errors": 0, "link_downed": 0, "port_rcv_errors": 0, "port_xmit_wait": 0,
        "symbol_error": 0}


def h100_devices() -> list[ib.Device]:
    """h100-hgx-ndr (Y-003's values on eight CX-7 HCAs, a BlueField-3 RoCE LAG)."""
    counters = {"mlx5_0": {**ZERO, "excessive_buffer_overrun_errors": 15, "port_rcv_errors": 14,
                           "port_xmit_wait": 2489603687},
                "mlx5_1": {**ZERO, "link_downed": 255}}
    out = []
    for name, bdf in H100_PCI.items():
        p = ib.Port(name, 1, 4, "ACTIVE", 5, "LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand", None,
                    counters.get(name, ZERO), {})
        out.append(ib.Device(name, bdf, "MT4129", "28.41.1000", "MT_0000000838", (H100_IPOIB[name],), (p,)))
    bond = ib.Port("mlx5_bond_0", 1, 4, "ACTIVE", 5, "LinkUp", "200 Gb/sec (2X NDR)", "Ethernet", "bond0", ZERO, {})
    out.append(ib.Device("mlx5_bond_0", "0000:c1:00.0", "MT41692", "32.41.1000", "MT_0000000884",
                         ("enp193s0f0np0",), (bond,)))
    return out


CX3 = [ib.Device("mlx4_0", "0000:03:00.0", "MT4099", "2.42.5000", "MT_1090120019", ("ib0", "ib1"), (
    ib.Port("mlx4_0", 1, 1, "DOWN", 3, "Disabled", "10 Gb/sec (4X SDR)", "InfiniBand", None, ZERO, {}),
    ib.Port("mlx4_0", 2, 4, "ACTIVE", 5, "LinkUp", "56 Gb/sec (4X FDR)", "InfiniBand", None, ZERO, {})))]

IWARP_OPA = [
    ib.Device("hfi1_0", "0000:81:00.0", "hfi1", "1.27.0", "Intel Omni-Path Host Fabric Interface Adapter 100 Series",
              (), (ib.Port("hfi1_0", 1, 4, "ACTIVE", 5, "LinkUp", "100 Gb/sec (4X EDR)", "InfiniBand", None,
                           {"link_downed": 0, "symbol_error": 0}, {"RcvHdrOvr10": 0, "SwLinkUp,32": 1}),)),
    # Y-005: "N/A (no PMA)" counters are None; hw_counters names with a comma are whole (Y-006).
    ib.Device("i40iw0", "0000:09:00.0", None, "0.2", "I40IW Board ID", (),
              (ib.Port("i40iw0", 1, 4, "ACTIVE", 5, "LinkUp", "10 Gb/sec (1X QDR)", "Ethernet", None,
                       {"link_downed": None, "port_rcv_errors": None}, {}),)),
]

EXPECTED = {
    "h100-hgx-ndr": (h100_devices(), 0),
    "h100-hgx-ndr-aer": (h100_devices(), 0),
    "cx3-fdr": (CX3, 0),
    "iwarp-opa": (IWARP_OPA, 2),   # the two N/A counters
    "vm-virtio": ([], 0),
    "edac-sbridge-dimm": ([], 0),
    "edac-amd-csrow": ([], 0),
}


def test_every_fixture_tree_is_listed() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_read_devices(tree: str) -> None:
    want, unreadable = EXPECTED[tree]
    reader = AttrReader()
    got = ib.read_devices(FIXTURES / tree, reader)
    assert got == want
    assert reader.unreadable == unreadable
    assert ib.present(FIXTURES / tree) is bool(want)
    assert ib.read_ports(FIXTURES / tree) == [p for d in want for p in d.ports]


def test_port_properties() -> None:
    ports = {p.key: p for p in ib.read_ports(FIXTURES / "h100-hgx-ndr")}
    assert ports["mlx5_1/1"].link_downed == 255 and ports["mlx5_0/1"].rate_gbit == 400.0
    assert ports["mlx5_bond_0/1"].rate_gbit == 200.0
    cx3 = {p.key: p for p in ib.read_ports(FIXTURES / "cx3-fdr")}
    assert cx3["mlx4_0/1"].active is False and cx3["mlx4_0/2"].active is True


def test_absent_root_and_vanished_files(tmp_path: Path) -> None:
    assert ib.read_devices(tmp_path) == [] and not ib.present(tmp_path)
    root = copy_tree("h100-hgx-ndr", tmp_path)
    rel = "class/infiniband/mlx5_5/ports/1"
    put(root, f"{rel}/counters/port_rcv_contraint_errors", 7)     # the ABI document's spelling
    put(root, f"{rel}/hw_counters/out_of_sequence", 12)
    (root / rel / "rate").unlink()
    reader = AttrReader()
    (p,) = [p for p in ib.read_ports(root, reader) if p.key == "mlx5_5/1"]
    assert p.counters["port_rcv_constraint_errors"] == 7 and p.hw_counters == {"out_of_sequence": 12}
    assert p.rate is None and p.rate_gbit is None and reader.unreadable == 0  # absent: not counted


def test_records_are_frozen() -> None:
    p = ib.read_ports(FIXTURES / "cx3-fdr")[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.state = 4  # type: ignore[misc]


# ---- static attributes read once (StaticAttrs) ----------------------------------------------------

@pytest.mark.parametrize("tree", sorted(p.name for p in FIXTURES.iterdir() if (p / "class" / "infiniband").is_dir()))
def test_static_reads_give_the_same_devices_poll_after_poll(tree, tmp_path) -> None:
    root = copy_tree(tree, tmp_path)
    static = StaticAttrs()
    plain = ib.read_devices(root)
    assert plain and ib.read_devices(root, static=static) == plain == ib.read_devices(root, static=static)
    dev, port = plain[0].name, plain[0].ports[0].port
    rel = f"class/infiniband/{dev}/ports/{port}"
    put(root, f"{rel}/counters/link_downed", 9)      # counters and state: read at every poll
    put(root, f"{rel}/state", "1: DOWN")
    put(root, f"{rel}/counters/new_counter", 4)      # a counters/ listing that changed is listed again
    p = ib.read_devices(root, static=static)[0].ports[0]
    assert p.counters["link_downed"] == 9 and p.state == 1 and p.counters["new_counter"] == 4


def test_static_reads_forget_a_removed_port(tmp_path) -> None:
    root = copy_tree("h100-hgx-ndr", tmp_path)
    static = StaticAttrs()
    ib.read_devices(root, static=static)
    n = len(static)
    dev = sorted((root / "class" / "infiniband").iterdir())[0]
    shutil.rmtree(dev.resolve())
    got = ib.read_devices(root, static=static)
    assert dev.name not in {d.name for d in got} and len(static) < n

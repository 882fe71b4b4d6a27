"""The links check on sysfs trees captured from real machines (tests/fixtures/sysfs, see its
PROVENANCE.md), mutated in a temporary copy the way a link flap or a downtrained slot changes
them, on this machine's own /sys, and with the NVML simulator (tests/nvmlsim: a C library that
nvidia-ml-py loads as it would load the driver's libnvidia-ml.so.1) for NVLink and clock reasons."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` run as a script does not put the checkout on sys.path
    sys.path.insert(0, str(ROOT))

from nodewarden import exitcodes
from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext, nvml_snapshot
from nodewarden.validator.checks import links
from tests import nvmlsim

FIXTURES = ROOT / "tests" / "fixtures" / "sysfs"
H100 = FIXTURES / "h100-hgx-ndr"
CX3 = FIXTURES / "cx3-fdr"
VM = FIXTURES / "vm-virtio"
GPU_BUSES = ("18", "2a", "3a", "5d", "9b", "ab", "ba", "db")


def run_links(sysfs: Path, profile: str = "h100_sxm5_80gb", **overrides):
    prof = profiles.load(profile)
    prof.setdefault("links", {}).update({"nvml": False, **overrides})
    ctx = RunContext(profile=prof, sysfs=sysfs)
    return links.run(ctx, runner.params_for("links", ctx))


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    """A private copy of the H100 tree (symlinks kept, as on a real /sys) to mutate."""
    dst = tmp_path / "sys"
    shutil.copytree(H100, dst, symlinks=True)
    return dst


def put(root: Path, rel: str, value: str) -> None:
    """Rewrite one existing sysfs attribute (through the class/ or bus/ symlinks)."""
    path = root / rel
    assert path.is_file(), f"{rel} is not in the fixture tree"
    path.write_text(value + "\n")


# ---- the healthy H100 node -----------------------------------------------------------------------

def test_healthy_h100_passes() -> None:
    r = run_links(H100)
    assert r.status == "pass", r.reason
    by = {(m.name, m.device): m for m in r.measurements}
    assert by[("ib_ports_active", None)].value == 8 and by[("ib_ports_active", None)].threshold == 8
    assert by[("ib_rate", "mlx5_0/1")].value == 400e9 and by[("ib_rate", "mlx5_0/1")].unit == "bit/s"
    assert by[("ib_rate", "mlx5_bond_0/1")].value == 200e9 and by[("ib_rate", "mlx5_bond_0/1")].threshold is None
    assert by[("pcie_generation", "0000:18:00.0")].value == 5
    assert by[("pcie_width", "0000:1a:00.0")].value == 16
    assert by[("gpus_on_pci_bus", None)].value == 8
    # GPUs, Mellanox functions and the four NVSwitches (NVIDIA, class 0x0680: what the pcie
    # collector exports too); the Intel NIC and the PCIe switches are not judged.
    pcie_devices = {m.device for m in r.measurements if m.name == "pcie_generation"}
    assert len(pcie_devices) == 8 + 8 + 2 + 4 and "0000:05:00.0" in pcie_devices and "0000:04:00.0" not in pcie_devices
    parts = r.details["parts"]
    assert parts["nvlink"]["status"] == "skip"
    # The RoCE bond and its slaves are checked; IPoIB netdevs (configured down) and virtual ones are not.
    eth = {i["name"] for i in parts["ethernet"]["interfaces"]}
    assert eth == {"bond0", "enp193s0f0np0", "enp193s0f1np1", "eno1"}
    assert parts["frequency"]["cpu_governors"] == {"performance": 8}


def test_plain_directory_copy_passes_too(tmp_path: Path) -> None:
    """A tree of plain directories (bus/pci/devices/*, class/*/* copied in place, devices/ gone,
    so the inner ``device`` links dangle) reads the same. A plain copytree would not end: real
    sysfs links loop (infiniband/mlx5_0/device -> the PCI function that holds it)."""
    dst = tmp_path / "plain"
    shutil.copytree(H100, dst, symlinks=True)
    for group in ("bus/pci/devices", "class/infiniband", "class/net"):
        for entry in (dst / group).iterdir():
            target = entry.resolve()
            entry.unlink()
            shutil.copytree(target, entry, symlinks=True)
    shutil.rmtree(dst / "devices/pci0000:15")
    assert not (dst / "bus/pci/devices/0000:18:00.0").is_symlink()
    r = run_links(dst)
    assert r.status == "pass", r.reason


# ---- injected faults: each must fail and name the port or device -----------------------------------

DOWN_POLLING = {"class/infiniband/mlx5_3/ports/1/state": "1: DOWN",      # I-008: Down/Polling, stale rate 40
                "class/infiniband/mlx5_3/ports/1/phys_state": "2: Polling",
                "class/infiniband/mlx5_3/ports/1/rate": "40 Gb/sec (4X QDR)"}
DOWN_DISABLED = {"class/infiniband/mlx5_5/ports/1/state": "1: DOWN",
                 "class/infiniband/mlx5_5/ports/1/phys_state": "3: Disabled"}


@pytest.mark.parametrize("edits, reason", [
    (DOWN_POLLING, "mlx5_3/1 state DOWN phys_state Polling"),
    (DOWN_DISABLED, "mlx5_5/1 state DOWN phys_state Disabled"),
    ({"class/infiniband/mlx5_2/ports/1/rate": "100 Gb/sec (4X EDR)"}, "mlx5_2/1 rate 100 Gb/s < 400 Gb/s"),
    ({"class/infiniband/mlx5_6/ports/1/rate": "200 Gb/sec (2X NDR)"}, "mlx5_6/1 rate 200 Gb/s < 400 Gb/s"),
    ({"bus/pci/devices/0000:3a:00.0/current_link_width": "8"}, "0000:3a:00.0 PCIe x8 < x16"),
    ({"bus/pci/devices/0000:9b:00.0/current_link_speed": "8.0 GT/s PCIe"}, "0000:9b:00.0 PCIe Gen3 < Gen5"),
    ({"bus/pci/devices/0000:bc:00.0/current_link_width": "4"}, "0000:bc:00.0 PCIe x4 < x16"),
    ({"class/net/enp193s0f1np1/operstate": "down", "class/net/enp193s0f1np1/carrier": "0"},
     "enp193s0f1np1 operstate down (no carrier)"),
    ({"class/infiniband/mlx5_bond_0/ports/1/state": "1: DOWN",
      "class/infiniband/mlx5_bond_0/ports/1/phys_state": "3: Disabled"}, "mlx5_bond_0/1 state DOWN"),
], ids=["down-polling", "down-disabled", "edr-on-ndr", "half-width-ib", "gpu-x8", "gpu-gen3",
        "hca-x4", "roce-slave-down", "roce-port-down"])
def test_injected_fault_fails_and_names_it(h100: Path, edits: dict[str, str], reason: str) -> None:
    for rel, value in edits.items():
        put(h100, rel, value)
    r = run_links(h100)
    assert r.status == "fail"
    assert reason in r.reason
    assert r.action


def test_down_port_stale_rate_is_not_judged(h100: Path) -> None:
    """A DOWN port keeps a stale rate (I-008: 40); only its state is reported."""
    for rel, value in DOWN_POLLING.items():
        put(h100, rel, value)
    r = run_links(h100)
    assert "rate" not in r.reason and "7 InfiniBand ports ACTIVE < 8" in r.reason
    port = next(p for p in r.details["parts"]["infiniband"]["ports"] if p["port"] == "mlx5_3/1")
    assert port["hint"].startswith("no peer")


def test_flap_down_then_up_again(h100: Path) -> None:
    """A link flap played on the tree: fail while down, pass once ACTIVE/LinkUp again."""
    for rel, value in DOWN_POLLING.items():
        put(h100, rel, value)
    assert run_links(h100).status == "fail"
    put(h100, "class/infiniband/mlx5_3/ports/1/state", "4: ACTIVE")
    put(h100, "class/infiniband/mlx5_3/ports/1/phys_state", "5: LinkUp")
    put(h100, "class/infiniband/mlx5_3/ports/1/rate", "400 Gb/sec (4X NDR)")
    assert run_links(h100).status == "pass"


def test_link_up_without_subnet_manager(h100: Path) -> None:
    put(h100, "class/infiniband/mlx5_1/ports/1/state", "2: INIT")
    r = run_links(h100)
    assert r.status == "fail" and "mlx5_1/1 state INIT phys_state LinkUp" in r.reason
    port = next(p for p in r.details["parts"]["infiniband"]["ports"] if p["port"] == "mlx5_1/1")
    assert "subnet manager" in port["hint"]


def test_hca_vanished(h100: Path) -> None:
    """I-009: an HCA that fell off the bus leaves class/infiniband without it."""
    (h100 / "class/infiniband/mlx5_7").unlink()
    r = run_links(h100)
    assert r.status == "fail" and "7 InfiniBand ports ACTIVE < 8" in r.reason


def test_no_rdma_at_all_fails_on_an_ib_profile_and_skips_on_generic(h100: Path) -> None:
    shutil.rmtree(h100 / "class/infiniband")
    assert "no RDMA devices" in run_links(h100).reason
    assert run_links(h100).status == "fail"
    r = run_links(h100, profile="generic")
    assert r.status == "pass" and r.details["parts"]["infiniband"]["status"] == "skip"


def test_gpu_missing_from_the_bus(h100: Path) -> None:
    (h100 / "bus/pci/devices/0000:ba:00.0").unlink()
    r = run_links(h100)
    assert r.status == "fail" and "7 NVIDIA GPUs on the PCI bus < 8" in r.reason


def test_gpu_behind_a_gen4_port_is_held_to_the_port(h100: Path) -> None:
    """A Gen5 GPU in a Gen4 slot is not downtrained (the port above it caps the link) but misses
    a Gen5 profile; on the generic profile it passes."""
    for bdf in ("0000:d9:00.0",):
        put(h100, f"bus/pci/devices/{bdf}/max_link_speed", "16.0 GT/s PCIe")
    put(h100, "bus/pci/devices/0000:db:00.0/current_link_speed", "16.0 GT/s PCIe")
    r = run_links(h100)
    assert r.status == "fail" and "0000:db:00.0 PCIe Gen4 < Gen5 (profile)" in r.reason
    assert run_links(h100, profile="generic").status == "pass"


def test_profile_width_below_max(h100: Path) -> None:
    put(h100, "bus/pci/devices/0000:18:00.0/max_link_width", "8")
    put(h100, "bus/pci/devices/0000:18:00.0/current_link_width", "8")
    assert "0000:18:00.0 PCIe x8 < x16 (profile)" in run_links(h100).reason


def test_faster_ib_port_than_the_profile_warns(h100: Path) -> None:
    put(h100, "class/infiniband/mlx5_4/ports/1/rate", "800 Gb/sec (4X XDR)")
    r = run_links(h100)
    assert r.status == "warn" and "mlx5_4/1 rate 800 Gb/s > profile" in r.reason


def test_ignored_port(h100: Path) -> None:
    for rel, value in DOWN_DISABLED.items():
        put(h100, rel, value)
    r = run_links(h100, ib_ignore_ports=["mlx5_5/1"], ib_ports_min=7)
    assert r.status == "pass", r.reason


def test_ethernet_speed_and_explicit_interfaces(h100: Path) -> None:
    r = run_links(h100, eth_speed_mbit_per_second=100000)
    assert r.status == "fail" and "eno1 speed 10000 Mb/s < 100000 Mb/s" in r.reason
    r = run_links(h100, net_interfaces=["enp193s0f0np0", "eth9"])
    assert r.status == "fail" and "eth9 absent" in r.reason
    # IPoIB interfaces configured down are not a fault unless asked for.
    r = run_links(h100, net_interfaces=["ibp26s0"])
    assert r.status == "fail" and "ibp26s0 operstate down" in r.reason


def test_cpu_governor_and_cap_warn(h100: Path) -> None:
    put(h100, "devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave")
    put(h100, "devices/system/cpu/cpu5/cpufreq/scaling_max_freq", "2000000")
    r = run_links(h100)
    assert r.status == "warn"
    assert "CPU governor powersave on 1 CPUs" in r.reason and "capped on 1 CPUs" in r.reason


# ---- the shared read rules, judged (nodewarden.sysfs; the collectors export the same) ---------------

def test_active_port_with_unreadable_phys_state_is_active_with_a_warning(h100: Path) -> None:
    """IBTA vol. 1 7.2: ACTIVE implies LinkUp. An unreadable phys_state of an ACTIVE port (it
    failed this check before; the collector counted the port up) counts the port, and the
    warning names the file."""
    phys = h100 / "class/infiniband/mlx5_4/ports/1/phys_state"
    phys.unlink()
    phys.mkdir()  # a read error
    r = run_links(h100)
    assert r.status == "warn", r.reason
    assert "mlx5_4/1 phys_state unreadable (class/infiniband/mlx5_4/ports/1/phys_state)" in r.reason
    assert {(m.name, m.device): m.value for m in r.measurements}[("ib_ports_active", None)] == 8


def test_text_only_active_state_counts(h100: Path) -> None:
    put(h100, "class/infiniband/mlx5_6/ports/1/state", "ACTIVE")
    r = run_links(h100)
    assert r.status == "pass", r.reason
    port = next(p for p in r.details["parts"]["infiniband"]["ports"] if p["port"] == "mlx5_6/1")
    assert (port["state"], port["state_code"], port["active"]) == ("ACTIVE", 4, True)


def test_missing_link_layer_is_infiniband(h100: Path) -> None:
    (h100 / "class/infiniband/mlx5_2/ports/1/link_layer").unlink()
    r = run_links(h100)
    assert r.status == "pass", r.reason
    port = next(p for p in r.details["parts"]["infiniband"]["ports"] if p["port"] == "mlx5_2/1")
    assert port["link_layer"] == "InfiniBand"


def test_pcie_width_zero_is_a_problem_not_unknown(h100: Path) -> None:
    """A link that is down reads ``current_link_width`` 0 and ``current_link_speed`` Unknown:
    ``x0 < x16``, a failure (it was a warning "status unknown" before)."""
    put(h100, "bus/pci/devices/0000:3c:00.0/current_link_width", "0")
    put(h100, "bus/pci/devices/0000:3c:00.0/current_link_speed", "Unknown")
    r = run_links(h100)
    assert r.status == "fail" and "0000:3c:00.0 PCIe x0 < x16" in r.reason and "unknown" not in r.reason
    width = next(m for m in r.measurements if m.name == "pcie_width" and m.device == "0000:3c:00.0")
    assert (width.value, width.threshold) == (0, 16)
    assert not [m for m in r.measurements if m.name == "pcie_generation" and m.device == "0000:3c:00.0"]


def test_physical_interface_is_the_device_link(h100: Path) -> None:
    """A NIC renamed ``veth_uplink`` (a udev rule) has a device link: physical, checked."""
    (h100 / "class/net/eno1").rename(h100 / "class/net/veth_uplink")
    r = run_links(h100)
    eth = r.details["parts"]["ethernet"]
    assert "veth_uplink" in eth["physical"] and "veth_uplink" in {i["name"] for i in eth["interfaces"]}
    assert "veth1a2b3c4" not in eth["physical"]  # no device link


# ---- other real shapes ------------------------------------------------------------------------------

def test_connectx3_disabled_port_and_fdr() -> None:
    """I-011: port 1 Down/Disabled (rate 10, stale), port 2 Active 56 Gb/s FDR; old-kernel
    '8 GT/s' link strings."""
    r = run_links(CX3, profile="generic")
    assert r.status == "fail" and r.reason.startswith("mlx4_0/1 state DOWN phys_state Disabled")
    r = run_links(CX3, profile="generic", ib_ignore_ports=["mlx4_0/1"])
    assert r.status == "pass", r.reason
    by = {(m.name, m.device): m.value for m in r.measurements}
    assert by[("ib_rate", "mlx4_0/2")] == 56e9 and by[("pcie_generation", "0000:03:00.0")] == 3
    r = run_links(CX3, profile="generic", ib_ignore_ports=["mlx4_0/1"], ib_rate_gbit_per_second=100)
    assert "mlx4_0/2 rate 56 Gb/s < 100 Gb/s (56 Gb/sec (4X FDR))" in r.reason


def test_vm_without_ib_or_gpus() -> None:
    """The development VM's shapes: eth0 with speed -1, virtio PCI functions without link files."""
    r = run_links(VM, profile="generic")
    assert r.status == "pass", r.reason
    parts = r.details["parts"]
    assert parts["infiniband"]["status"] == "skip" and parts["pcie"]["status"] == "skip"
    assert [i["name"] for i in parts["ethernet"]["interfaces"]] == ["eth0"]


def test_empty_tree_is_skip_never_pass(tmp_path: Path) -> None:
    r = links.run(RunContext(profile=profiles.load("generic"), sysfs=tmp_path, procfs=tmp_path),
                  {**links.DEFAULTS, "nvml": False})
    assert r.status == "skip" and "nothing to check" in r.reason


@pytest.mark.skipif(not Path("/sys/bus/pci/devices").is_dir(), reason="no /sys here")
def test_this_machines_sys() -> None:
    """The real /sys: symlinked devices; IB absent -> that part skipped; other vendors ignored."""
    prof = profiles.load("generic")
    ctx = RunContext(profile=prof)
    r = links.run(ctx, runner.params_for("links", ctx))
    assert r.status in ("pass", "warn", "skip", "fail") and r.status != "error"
    parts = r.details["parts"]
    if not Path("/sys/class/infiniband").exists():
        assert parts["infiniband"]["status"] == "skip"
    judged = {m.device for m in r.measurements if m.name == "pcie_generation"}
    for bdf in judged:
        vendor = (Path("/sys/bus/pci/devices") / bdf / "vendor").read_text().strip()
        assert vendor in ("0x10de", "0x15b3")
    if not judged and not Path("/sys/class/infiniband").exists() and not nvml_snapshot()[0]:
        assert r.status in ("pass", "skip"), r.reason  # a VM like this one: nothing to drain for


# ---- NVML: the NVML simulator (tests/nvmlsim) loaded by nvidia-ml-py in a child process -------------

@pytest.fixture(scope="module")
def nvml_sim(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two builds: a current driver (ClocksEventReasons) and an old one (ThrottleReasons only)."""
    base = tmp_path_factory.mktemp("nvml")
    return {"current": nvmlsim.build(base), "old": nvmlsim.build(base, old_driver=True)}


def validate_with_nvml(libdir: Path, sysfs: Path, tmp_path: Path, gpus: dict[int, dict] | None = None,
                       extra_sets: tuple[str, ...] = ()) -> tuple[int, dict, str]:
    """``nodewarden validate --checks links`` with NVML answered by the simulator: eight idle
    H100s on the buses of GPU_BUSES, GPU i's state changed by ``gpus[i]``."""
    state = [nvmlsim.h100_gpu(i, f"00000000:{b.upper()}:00.0") for i, b in enumerate(GPU_BUSES)]
    for i, patch in (gpus or {}).items():
        state[i].update(patch)
    env = nvmlsim.env(libdir, nvmlsim.write_state(tmp_path / "nvml.json", state))
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "nodewarden", "validate", "--checks", "links", "--profile", "h100_sxm5_80gb",
           "--sysfs", str(sysfs), "--set", "links.nvml=true", "--no-progress", "--json", str(out)]
    for s in extra_sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, json.loads(out.read_text())["checks"][0], p.stdout


def test_nvml_all_links_up(nvml_sim, tmp_path: Path) -> None:
    code, r, _ = validate_with_nvml(nvml_sim["current"], H100, tmp_path)
    assert code == exitcodes.OK, r["reason"]
    nv = r["details"]["parts"]["nvlink"]
    assert nv["status"] == "pass" and "144 NVLinks active on 8 GPUs" in nv["reason"]
    m = {(x["name"], x["device"]): x for x in r["measurements"]}
    assert m[("nvlink_links_active", "0000:9b:00.0")]["value"] == 18
    assert m[("gpu_sm_clock", "0000:18:00.0")]["value"] == 1980e6
    assert r["details"]["gpus"][0]["clock_reasons_api"] == "nvmlDeviceGetCurrentClocksEventReasons"


def test_nvml_link_down_fails(nvml_sim, tmp_path: Path) -> None:
    code, r, out = validate_with_nvml(nvml_sim["current"], H100, tmp_path, {3: {"nvlink_down": [5, 17]}})
    assert code == exitcodes.UNHEALTHY
    assert "GPU 0000:5d:00.0 NVLink 5,17 down (16/18 active)" in r["reason"]
    assert "DRAIN: nodewarden links: GPU 0000:5d:00.0 NVLink 5,17 down" in out


def test_nvml_hw_slowdown_fails_on_an_old_driver(nvml_sim, tmp_path: Path) -> None:
    """Drivers before ClocksEventReasons: the ThrottleReasons call answers."""
    code, r, _ = validate_with_nvml(nvml_sim["old"], H100, tmp_path, {6: {"clocks_event_reasons": 0x48}})
    assert code == exitcodes.UNHEALTHY
    assert "GPU 0000:ba:00.0 clocks held down: hw_slowdown, hw_thermal_slowdown" in r["reason"]
    assert r["details"]["gpus"][6]["clock_reasons_api"] == "nvmlDeviceGetCurrentClocksThrottleReasons"


def test_nvml_power_cap_is_informational(nvml_sim, tmp_path: Path) -> None:
    code, r, _ = validate_with_nvml(nvml_sim["current"], H100, tmp_path, {0: {"clocks_event_reasons": 0x5}})
    assert code == exitcodes.OK, r["reason"]


def test_idle_gpu_lowered_pcie_speed_warns_not_drains(nvml_sim, h100: Path, tmp_path: Path) -> None:
    put(h100, "bus/pci/devices/0000:2a:00.0/current_link_speed", "2.5 GT/s PCIe")
    code, r, _ = validate_with_nvml(nvml_sim["current"], h100, tmp_path, {1: {"pstate": 8}})
    assert code == exitcodes.OK and r["status"] == "warn"
    assert "0000:2a:00.0 PCIe Gen1 < Gen5: GPU idle in P8" in r["reason"]
    code, r, _ = validate_with_nvml(nvml_sim["current"], h100, tmp_path, {1: {"pstate": 0}})
    assert code == exitcodes.UNHEALTHY and "0000:2a:00.0 PCIe Gen1 < Gen5" in r["reason"]


def test_hung_nvml_fails(nvml_sim, tmp_path: Path) -> None:
    code, r, _ = validate_with_nvml(nvml_sim["current"], H100, tmp_path, {0: {"hang_seconds": 30}},
                                    ("links.nvml_timeout_seconds=1",))
    assert code == exitcodes.UNHEALTHY and "NVML did not answer within 1 s" in r["reason"]


@pytest.mark.parametrize("key, value, says", [
    ("net_interfaces", "eno1", "net_interfaces must be a list of names"),
    ("ib_ignore_ports", 5, "ib_ignore_ports must be a list of names"),
    ("cpu_governors", 5, "cpu_governors must be a list of names"),
    ("ib_rate_gbit_per_second", "abc", "ib_rate_gbit_per_second must be a finite number >= 0"),
    ("ib_ports_min", 1.5, "ib_ports_min must be a whole number >= 0"),
    ("nvml", "maybe", "nvml must be auto, true or false"),
    ("nvml_timeout_seconds", 0, "nvml_timeout_seconds must be a number of seconds"),
])
def test_bad_parameters_are_usage_errors_naming_the_key(key, value, says) -> None:
    """Refused before anything runs (the runner's check_params), never a drain from a string read
    letter by letter, nor an error mid-run."""
    with pytest.raises(ValueError, match=says):
        runner.check_params("links", {**links.DEFAULTS, key: value})


def test_a_downtrained_nvswitch_fails_as_its_metric_alerts(h100: Path) -> None:
    """An NVSwitch at x1 of its x2: the pcie collector exports it (and the PCIe width alert fires
    on it); the check judges it too, held to its own maximum."""
    put(h100, "bus/pci/devices/0000:05:00.0/current_link_width", "1")
    r = run_links(h100)
    assert r.status == "fail" and "0000:05:00.0 PCIe x1 < x2" in r.reason

"""Bad input to the read layer costs one field, counted, never the poll or the check: a FIFO
where an attribute should be (read without blocking), digits ``int`` refuses, a ``cpu MHz``
line of another form, names that are no UTF-8, values that are not of their file's form, and
directories that vanished or dangle. Each case on a copy of a fixture tree, through the reader,
the collector and the links check alike."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from prometheus_client import generate_latest

from nodewarden.agent import exporter as ex
from nodewarden.collectors.infiniband import InfinibandCollector
from nodewarden.collectors.netclass import NetclassCollector
from nodewarden.collectors.pcie import PcieCollector
from nodewarden.sysfs import cpufreq, infiniband, net, pci
from nodewarden.sysfs.attrs import AttrReader, parse_code_name, parse_counter
from nodewarden.validator import profiles, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import links
from sysfs_trees import copy_tree, put

IB = "class/infiniband/mlx5_0/ports/1"


def unreadable(reader_or_snap) -> float:
    """The collector's unreadable-files gauge of a snapshot."""
    return next(s.value for s in reader_or_snap.samples if s.name == "nodewarden_collector_unreadable_files")


def run_links(root: Path, procfs: Path | None = None) -> dict:
    prof = profiles.load("generic")
    prof.setdefault("links", {}).update({"nvml": False})
    ctx = RunContext(profile=prof, sysfs=root, procfs=procfs or root / "no-proc")
    r = links.run(ctx, runner.params_for("links", ctx))
    return {"status": r.status, "reason": r.reason, "parts": r.details.get("parts", {}), "m": r.measurements}


def fifo_at(root: Path, rel: str) -> None:
    """Replace the attribute file ``rel`` (or the file its link points at) by a FIFO."""
    real = Path(os.path.realpath(root / rel))
    real.unlink()
    os.mkfifo(real)


def test_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    """A FIFO has no writer: an open() without O_NONBLOCK, or a read, would block for ever."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    fifo_at(root, f"{IB}/state")
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(
        ports=infiniband.read_ports(root, r := AttrReader()), unreadable=r.unreadable), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the reader blocked on a FIFO"
    (p,) = [p for p in out["ports"] if p.key == "mlx5_0/1"]
    assert (p.state, p.state_name, p.active) == (None, None, None) and out["unreadable"] == 1
    assert AttrReader().text(root / IB / "state") is None


def test_digits_int_refuses_are_garbage(tmp_path: Path) -> None:
    """``²`` passes str.isdigit() but not int(): a state, a counter and a port directory so
    named are unreadable values, counted; the collector and the check still answer."""
    assert parse_code_name("²: ACTIVE") == (None, "²: ACTIVE") and parse_counter("²") is None
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, f"{IB}/state", "²: ACTIVE")
    put(root, "class/infiniband/mlx5_1/ports/1/counters/link_downed", "²")
    (root / "class/infiniband/mlx5_2/ports/²").mkdir()
    snap = InfinibandCollector(root).collect()
    assert unreadable(snap) == 2  # the counter and the port directory; the state is a text-only name
    r = run_links(root)
    assert r["status"] == "fail" and "mlx5_0/1 state ²: ACTIVE" in r["reason"]


def test_a_bad_cpu_mhz_line_is_left_out_and_counted(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("cpu MHz\t\t: 1.2.3\ncpu MHz\t\t: 2000.000\ncpu MHz : .\n")
    reader = AttrReader()
    assert cpufreq.cpuinfo_mhz(tmp_path / "proc", reader) == [2000.0] and reader.unreadable == 2
    root = copy_tree("vm-virtio", tmp_path / "t")  # no cpufreq: the frequency is cpuinfo's
    r = run_links(root, tmp_path / "proc")
    assert r["status"] != "error"
    assert [m.value for m in r["m"] if m.name == "cpu_frequency"] == [2_000_000_000]


def test_names_that_are_no_utf8_reach_the_exposition(tmp_path: Path) -> None:
    """An interface named with a byte that is no UTF-8 (``eno1\\xff``): its series carry the name
    written ``eno1\\\\xff`` and the whole /metrics still renders."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    os.rename(os.fsencode(root / "class/net/eno1"), os.fsencode(root / "class/net") + b"/eno1\xff")
    snap = NetclassCollector(root).collect()
    devices = {dict(s.labels)["device"] for s in snap.samples if s.name == "nodewarden_net_up"}
    assert "eno1\\xff" in devices
    body = generate_latest(ex.make_registry(lambda: {}, lambda: [("netclass", s) for s in snap.samples]))
    assert b'device="eno1\\\\xff"' in body
    assert "eno1\\xff" in run_links(root)["parts"]["ethernet"]["physical"]


def test_values_not_of_their_files_form_are_counted(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, f"{IB}/phys_state", "")                                           # empty
    put(root, "class/infiniband/mlx5_1/ports/1/rate", "Unknown")                # no N Gb/sec
    put(root, "bus/pci/devices/0000:18:00.0/current_link_width", "-1")          # no lane count
    put(root, "bus/pci/devices/0000:2a:00.0/current_link_speed", "3.0 GT/s")    # no generation
    put(root, "class/net/eno1/carrier", "abc")                                  # not 0/1
    reader = AttrReader()
    infiniband.read_ports(root, reader)
    assert reader.unreadable == 2
    reader = AttrReader()
    pci.read_functions(root, reader)
    assert reader.unreadable == 2
    reader = AttrReader()
    (eno1,) = [d for d in net.read_netdevs(root, reader) if d.name == "eno1"]
    assert eno1.carrier is None and reader.unreadable == 1
    assert unreadable(PcieCollector(root).collect()) == 2
    assert unreadable(NetclassCollector(root).collect()) == 1


def test_a_kernel_unknown_speed_is_no_garbage(tmp_path: Path) -> None:
    """``Unknown`` is what the kernel prints for the speed of a link that is down: not counted."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    put(root, "bus/pci/devices/0000:18:00.0/current_link_speed", "Unknown")
    reader = AttrReader()
    pci.read_functions(root, reader)
    assert reader.unreadable == 0


def test_vanished_and_dangling_directories_are_left_out_and_counted(tmp_path: Path) -> None:
    root = copy_tree("h100-hgx-ndr", tmp_path)
    shutil.rmtree(root / IB)
    os.symlink(tmp_path / "nowhere", root / IB)                                  # a dangling port
    os.symlink(tmp_path / "nowhere", root / "class/net/eth9")                     # a dangling netdev
    os.symlink(tmp_path / "nowhere", root / "bus/pci/devices/0000:ff:00.0")       # a function gone
    reader = AttrReader()
    assert "mlx5_0/1" not in {p.key for p in infiniband.read_ports(root, reader)} and reader.unreadable == 1
    reader = AttrReader()
    assert "eth9" not in {d.name for d in net.read_netdevs(root, reader)} and reader.unreadable == 1
    reader = AttrReader()
    assert "0000:ff:00.0" not in {f.bdf for f in pci.read_functions(root, reader)} and reader.unreadable == 1
    assert unreadable(InfinibandCollector(root).collect()) == 1


def test_no_function_left_still_says_what_was_unreadable(tmp_path: Path) -> None:
    """Every function's ``vendor`` unreadable: no function to export, but the count is exported."""
    root = copy_tree("h100-hgx-ndr", tmp_path)
    n = 0
    for d in (root / "bus/pci/devices").iterdir():
        v = d / "vendor"
        if v.exists():
            real = Path(os.path.realpath(v))
            real.unlink()
            real.mkdir()
            n += 1
    snap = PcieCollector(root).collect()
    assert [s.name for s in snap.samples] == ["nodewarden_collector_unreadable_files"] and unreadable(snap) == n

"""The edac collector on EDAC sysfs trees in both layouts (tests/fixtures/sysfs/edac-*, see
PROVENANCE.md), on copies whose counts rise, reset or become unreadable between two polls, and
on this machine's own /sys (no EDAC driver here: an empty snapshot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden import events as ev
from nodewarden.collectors import edac
from nodewarden.collectors.edac import EdacCollector
from nodewarden.sysfs.edac import Channel, Controller, Csrow, Dimm
from sysfs_trees import FIXTURES, copy_tree, put

SBRIDGE, CSROW = "edac-sbridge-dimm", "edac-amd-csrow"
MC = "devices/system/edac/mc"
CE, UE = "nodewarden_edac_correctable_errors_total", "nodewarden_edac_uncorrectable_errors_total"
LABEL2 = "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"  # E-001's DIMM


def series(snap, name: str) -> dict[tuple[str, str], float]:
    return {(dict(s.labels)["controller"], dict(s.labels)["dimm"]): s.value for s in snap.samples if s.name == name}


# ---- pure: which layout counts, and the names -----------------------------------------------

@pytest.mark.parametrize("mc, want", [
    # Per-DIMM layout; an empty label falls back to the object's name; the legacy csrow view
    # beside it counts the same errors and is ignored.
    (Controller("mc0", ce=3, ue=1, ce_noinfo=1, ue_noinfo=0,
                dimms=(Dimm("dimm0", "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0", None, 0, 0),
                       Dimm("dimm3", None, "channel 1 slot 0", 2, 1)),
                csrows=(Csrow("csrow0", 2, 1, (Channel(1, "x", 2),)),)),
     {("CPU_SrcID#0_Ha#0_Chan#0_DIMM#0", "corrected"): 0, ("CPU_SrcID#0_Ha#0_Chan#0_DIMM#0", "uncorrected"): 0,
      ("dimm3", "corrected"): 2, ("dimm3", "uncorrected"): 1,
      ("unknown", "corrected"): 1, ("unknown", "uncorrected"): 0}),
    # Chip-select based drivers name the objects rank<K>.
    (Controller("mc0", dimms=(Dimm("rank2", "", None, 5, None),)), {("rank2", "corrected"): 5}),
    # Two DIMMs with one label (a BIOS that labels by slot pair): summed.
    (Controller("mc0", dimms=(Dimm("dimm0", "A1", None, 1, 0), Dimm("dimm1", "A1", None, 2, 0))),
     {("A1", "corrected"): 3, ("A1", "uncorrected"): 0}),
    # Legacy layout: CE per channel, UE per row; CEs without a channel are the row's.
    (Controller("mc0", ce=7, ue=1, ce_noinfo=0, ue_noinfo=0,
                csrows=(Csrow("csrow2", 7, 1, (Channel(0, "mc#0csrow#2channel#0", 2), Channel(1, None, 3))),
                        Csrow("csrow3", 0, 0, ()))),
     {("mc#0csrow#2channel#0", "corrected"): 2, ("csrow2_ch1", "corrected"): 3, ("csrow2", "corrected"): 2,
      ("csrow2", "uncorrected"): 1, ("csrow3", "corrected"): 0, ("csrow3", "uncorrected"): 0,
      ("unknown", "corrected"): 0, ("unknown", "uncorrected"): 0}),
    # No per-DIMM objects at all: the controller's own counts, as "unknown".
    (Controller("mc0", ce=4, ue=0, ce_noinfo=4, ue_noinfo=0), {("unknown", "corrected"): 4, ("unknown", "uncorrected"): 0}),
])
def test_dimm_counts(mc, want):
    assert edac.dimm_counts(mc) == want


def test_rises():
    before = {("mc0", "a", "corrected"): 1, ("mc0", "b", "corrected"): 5}
    after = {("mc0", "a", "corrected"): 4, ("mc0", "b", "corrected"): 0, ("mc0", "c", "corrected"): 9}
    assert edac.rises(before, after) == [(("mc0", "a", "corrected"), 3, 4)]  # reset and new: nothing


# ---- fixture trees ---------------------------------------------------------------------------

def test_sbridge_dimm_layout():
    snap = EdacCollector(FIXTURES / SBRIDGE).collect()
    assert series(snap, CE) == {
        ("mc0", "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"): 0, ("mc0", "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"): 0,
        ("mc0", LABEL2): 1, ("mc0", "CPU_SrcID#0_Ha#0_Chan#3_DIMM#0"): 0, ("mc0", "unknown"): 0,
        ("mc1", "mc#1channel#0slot#0"): 0, ("mc1", "mc#1channel#1slot#0"): 0, ("mc1", "mc#1channel#2slot#0"): 0,
        ("mc1", "unknown"): 0,
    }
    assert sum(v for (m, _), v in series(snap, CE).items() if m == "mc0") == 1  # == mc0/ce_count, csrow0 not added
    assert set(series(snap, UE).values()) == {0}
    info = {dict(s.labels)["controller"]: dict(s.labels)["mc_name"] for s in snap.samples
            if s.name == "nodewarden_edac_controller_info"}
    assert info == {"mc0": "Sandy Bridge SrcID#0_Ha#0", "mc1": "Sandy Bridge SrcID#1_Ha#0"}
    since = {dict(s.labels)["controller"]: s.value for s in snap.samples if s.name == "nodewarden_edac_since_reset_seconds"}
    assert since == {"mc0": 3600, "mc1": 3600}
    assert all(s.kind == "counter" for s in snap.samples if s.name in (CE, UE))
    assert snap.events == []


def test_csrow_layout():
    snap = EdacCollector(FIXTURES / CSROW).collect()
    assert series(snap, CE) == {("mc0", "mc#0csrow#2channel#0"): 0, ("mc0", "mc#0csrow#2channel#1"): 0,
                                ("mc0", "mc#0csrow#3channel#0"): 0, ("mc0", "mc#0csrow#3channel#1"): 0,
                                ("mc0", "unknown"): 0}
    assert series(snap, UE) == {("mc0", "csrow2"): 0, ("mc0", "csrow3"): 0, ("mc0", "unknown"): 0}


def test_this_machine_has_no_edac():
    if Path("/sys/devices/system/edac/mc").exists() and any(Path("/sys/devices/system/edac/mc").glob("mc*")):
        pytest.skip("this machine has an EDAC driver")
    snap = EdacCollector("/sys").collect()
    assert snap.samples == [] and snap.events == []


# ---- mutated between polls ---------------------------------------------------------------------

def test_counts_rise_reset_rise(tmp_path: Path):
    root = copy_tree(SBRIDGE, tmp_path)
    c = EdacCollector(root, clock=lambda: 1_800_000_000.0)
    c.collect()
    put(root, f"{MC}/mc0/dimm6/dimm_ce_count", 4)
    put(root, f"{MC}/mc0/ce_count", 4)
    put(root, f"{MC}/mc1/dimm4/dimm_ue_count", 1)
    put(root, f"{MC}/mc1/ue_count", 1)
    snap = c.collect()
    assert [(e.kind, e.source, e.device, e.category, e.attrs["delta"], e.attrs["count"]) for e in snap.events] == [
        (ev.CPU_ECC, "sysfs", f"mc0/{LABEL2}", "corrected", 3, 4),
        (ev.CPU_ECC, "sysfs", "mc1/mc#1channel#2slot#0", "uncorrected", 1, 1),
    ]
    e = snap.events[0]
    assert e.attrs["type"] == "corrected" and e.attrs["controller"] == "mc0" and e.attrs["mc_name"] == "Sandy Bridge SrcID#0_Ha#0"
    assert "mc" not in e.attrs  # the exporter counts log lines by attrs.mc: sysfs counts are absolute
    assert series(snap, CE)[("mc0", LABEL2)] == 4
    assert series(snap, UE)[("mc1", "mc#1channel#2slot#0")] == 1
    # reset_counters: every count back to 0 -> a new baseline, no event.
    for rel in ("mc0/dimm6/dimm_ce_count", "mc0/ce_count", "mc1/dimm4/dimm_ue_count", "mc1/ue_count"):
        put(root, f"{MC}/{rel}", 0)
    put(root, f"{MC}/mc0/seconds_since_reset", 0)
    assert c.collect().events == []
    put(root, f"{MC}/mc0/dimm6/dimm_ce_count", 1)
    (e,) = c.collect().events
    assert (e.device, e.attrs["delta"]) == (f"mc0/{LABEL2}", 1)


def test_csrow_rise_and_unlabelled_channel(tmp_path: Path):
    """R-003's node: an MCE on memory_channel 0, csrow 2 that EDAC did not count; played here as
    the count EDAC would show, and a UE on csrow3."""
    root = copy_tree(CSROW, tmp_path)
    c = EdacCollector(root)
    c.collect()
    put(root, f"{MC}/mc0/csrow2/ch0_ce_count", 2)
    put(root, f"{MC}/mc0/csrow2/ce_count", 2)
    put(root, f"{MC}/mc0/csrow3/ue_count", 1)
    put(root, f"{MC}/mc0/csrow2/ch1_dimm_label", "")
    snap = c.collect()
    assert [(e.device, e.attrs["type"], e.attrs["delta"]) for e in snap.events] == [
        ("mc0/csrow3", "uncorrected", 1), ("mc0/mc#0csrow#2channel#0", "corrected", 2)]
    assert series(snap, CE)[("mc0", "csrow2_ch1")] == 0  # a label emptied: the object's name


def test_bad_files_fail_alone(tmp_path: Path):
    root = copy_tree(SBRIDGE, tmp_path)
    f = root / MC / "mc0/dimm0/dimm_ce_count"
    f.unlink()
    f.mkdir()                                          # read error
    put(root, f"{MC}/mc0/dimm3/dimm_ue_count", "x")    # not a number
    snap = EdacCollector(root).collect()
    ce, ue = series(snap, CE), series(snap, UE)
    assert ("mc0", "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0") not in ce
    assert ("mc0", "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0") not in ue
    assert ce[("mc0", LABEL2)] == 1 and ("mc1", "mc#1channel#0slot#0") in ce
    unreadable = [s.value for s in snap.samples if s.name == "nodewarden_collector_unreadable_files"]
    assert unreadable == [2]


def test_an_unreadable_channel_count_makes_no_row_event(tmp_path: Path):
    """csrow2 counts 12 CE, its channels 6 and 4 (the row's own remainder: 2). ch0's count turns
    unreadable for one poll: its 6 CEs must not pass for the row's (a false cpu_ecc event, then
    the row's count falling back from 8 to 2); back, nothing changed, nothing is reported."""
    root = copy_tree(CSROW, tmp_path)
    put(root, f"{MC}/mc0/csrow2/ce_count", 12)
    put(root, f"{MC}/mc0/csrow2/ch0_ce_count", 6)
    put(root, f"{MC}/mc0/csrow2/ch1_ce_count", 4)
    c = EdacCollector(root)
    assert series(c.collect(), CE)[("mc0", "csrow2")] == 2
    f = root / f"{MC}/mc0/csrow2/ch0_ce_count"
    f.unlink()
    f.mkdir()  # a read error (EISDIR)
    snap = c.collect()
    assert snap.events == [] and ("mc0", "csrow2") not in series(snap, CE)
    f.rmdir()
    put(root, f"{MC}/mc0/csrow2/ch0_ce_count", 6)
    snap = c.collect()
    assert snap.events == [] and series(snap, CE)[("mc0", "csrow2")] == 2

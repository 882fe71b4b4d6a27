"""The EDAC reader (nodewarden.sysfs.edac) over every sysfs fixture tree (tests/fixtures/sysfs, see
PROVENANCE.md there) against the records its files give, and on copies with files made
unreadable, emptied or removed: one bad file is None in its field only, and counted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nodewarden.sysfs.attrs import AttrReader
from nodewarden.sysfs.edac import Channel, Controller, Csrow, Dimm, read_controllers
from sysfs_trees import FIXTURES, copy_tree, put

MC = "devices/system/edac/mc"

SBRIDGE = [
    Controller(
        "mc0", mc_name="Sandy Bridge SrcID#0_Ha#0", seconds_since_reset=3600, ce=1, ue=0, ce_noinfo=0, ue_noinfo=0,
        dimms=(Dimm("dimm0", "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0", "channel 0 slot 0", 0, 0),
               Dimm("dimm3", "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", "channel 1 slot 0", 0, 0),
               Dimm("dimm6", "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", "channel 2 slot 0", 1, 0),
               Dimm("dimm9", "CPU_SrcID#0_Ha#0_Chan#3_DIMM#0", "channel 3 slot 0", 0, 0)),
        # the legacy view beside the per-DIMM objects (CONFIG_EDAC_LEGACY_SYSFS), read as it is
        csrows=(Csrow("csrow0", 1, 0, (Channel(0, "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0", 0),
                                       Channel(1, "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0", 0),
                                       Channel(2, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", 1),
                                       Channel(3, "CPU_SrcID#0_Ha#0_Chan#3_DIMM#0", 0))),)),
    Controller(
        "mc1", mc_name="Sandy Bridge SrcID#1_Ha#0", seconds_since_reset=3600, ce=0, ue=0, ce_noinfo=0, ue_noinfo=0,
        dimms=(Dimm("dimm0", "mc#1channel#0slot#0", "channel 0 slot 0", 0, 0),
               Dimm("dimm2", "mc#1channel#1slot#0", "channel 1 slot 0", 0, 0),
               Dimm("dimm4", "mc#1channel#2slot#0", "channel 2 slot 0", 0, 0))),
]
CSROW = [
    Controller(
        "mc0", mc_name="F19h_M60h", seconds_since_reset=86400, ce=0, ue=0, ce_noinfo=0, ue_noinfo=0,
        csrows=(Csrow("csrow2", 0, 0, (Channel(0, "mc#0csrow#2channel#0", 0), Channel(1, "mc#0csrow#2channel#1", 0))),
                Csrow("csrow3", 0, 0, (Channel(0, "mc#0csrow#3channel#0", 0), Channel(1, "mc#0csrow#3channel#1", 0))))),
]
EXPECTED = {"edac-sbridge-dimm": SBRIDGE, "edac-amd-csrow": CSROW}
TREES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def test_the_trees_with_edac_are_the_expected_ones() -> None:
    assert sorted(t for t in TREES if (FIXTURES / t / MC).is_dir()) == sorted(EXPECTED)


@pytest.mark.parametrize("tree", TREES)
def test_reader_over_every_fixture_tree(tree: str) -> None:
    r = AttrReader()
    assert read_controllers(FIXTURES / tree, r) == EXPECTED.get(tree, [])  # no EDAC driver: nothing
    assert r.unreadable == 0


def test_records_are_frozen() -> None:
    (mc,) = read_controllers(FIXTURES / "edac-amd-csrow")
    with pytest.raises(dataclasses.FrozenInstanceError):
        mc.ce = 5  # type: ignore[misc]


def test_an_absent_root_gives_nothing(tmp_path: Path) -> None:
    assert read_controllers(tmp_path / "no-such-sysfs") == []
    (tmp_path / MC).mkdir(parents=True)
    (tmp_path / MC / "power").mkdir()  # mc/ holds more than controllers
    assert read_controllers(tmp_path) == []


def test_natural_order_of_controllers_and_objects(tmp_path: Path) -> None:
    for mc in ("mc10", "mc2"):
        for dimm in ("dimm10", "dimm2", "rank1"):
            put(tmp_path, f"{MC}/{mc}/{dimm}/dimm_ce_count", 0)
    got = read_controllers(tmp_path)
    assert [mc.name for mc in got] == ["mc2", "mc10"]
    assert [d.name for d in got[0].dimms] == ["dimm2", "dimm10", "rank1"]


def test_one_bad_file_is_none_in_its_field_only_and_counted(tmp_path: Path) -> None:
    root = copy_tree("edac-sbridge-dimm", tmp_path)
    ce = root / MC / "mc0/dimm0/dimm_ce_count"
    ce.unlink()
    ce.mkdir()                                              # a read error (EISDIR)
    put(root, f"{MC}/mc0/dimm3/dimm_ue_count", "x")         # not a number
    put(root, f"{MC}/mc0/csrow0/ch2_ce_count", "")          # empty: not a number
    (root / MC / "mc1/dimm2/dimm_location").unlink()        # absent: None, not counted
    put(root, f"{MC}/mc1/dimm4/dimm_label", "")             # empty label: None, not counted
    put(root, f"{MC}/mc1/mc_name", "")
    r = AttrReader()
    got = read_controllers(root, r)
    assert r.unreadable == 3
    mc0, mc1 = got
    assert mc0.dimms[0] == dataclasses.replace(SBRIDGE[0].dimms[0], ce=None)
    assert mc0.dimms[1] == dataclasses.replace(SBRIDGE[0].dimms[1], ue=None)
    assert mc0.csrows[0].channels[2] == Channel(2, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", None)
    assert mc0.dimms[2:] == SBRIDGE[0].dimms[2:] and mc0.ce == 1
    assert mc1.dimms[1].location is None and mc1.dimms[2].label is None and mc1.mc_name is None
    assert mc1.dimms[0] == SBRIDGE[1].dimms[0]


def test_a_controller_removed_between_listing_and_reading_is_all_none(tmp_path: Path) -> None:
    """A driver unloaded mid-read: the files are gone, nothing raises, nothing is counted."""
    (tmp_path / MC / "mc0").mkdir(parents=True)
    r = AttrReader()
    assert read_controllers(tmp_path, r) == [Controller("mc0")]
    assert r.unreadable == 0

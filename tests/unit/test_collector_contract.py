"""The collectors' contract (nodewarden.collectors.base), checked on every collector the registry
lists (nodewarden.collectors.REGISTRY), as the validator's checks are on theirs: the list and the
modules of the package in step; each polled collector built through the registry on every sysfs
fixture tree and on an empty root, with ``name`` its registry key, ``collect()`` a Snapshot
whose samples pass the exporter's own contract check (names, types, label sets, no series twice,
across all collectors of one tree) and carry a HELP text, events that are fault events of a
known kind, none from a second poll of an unchanged tree, and nothing at all on an empty root."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nodewarden import collectors as registry
from nodewarden import events as ev
from nodewarden.agent import exporter as ex
from nodewarden.collectors.base import COUNTER, GAUGE, PortSource, Sample, Snapshot
from nodewarden.collectors.nvml import NvmlUnavailable
from nodewarden.sysfs import pci
from sysfs_trees import FIXTURES

TREES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
POLLED = [e for e in registry.REGISTRY if e.polled]
HOST = "node01"


def test_the_registry_and_the_modules_stay_in_step() -> None:
    folder = Path(registry.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "base"))
    assert modules == sorted(registry.POLLED)  # one module per polled collector, named after it
    assert len(set(registry.NAMES)) == len(registry.NAMES)
    assert registry.POLLED == tuple(e.name for e in POLLED)
    assert [registry.get(n).name for n in registry.NAMES] == list(registry.NAMES)
    with pytest.raises(KeyError):
        registry.get("dcgm")


def test_the_one_entry_not_polled_is_the_kernel_log_follower() -> None:
    assert [e.name for e in registry.REGISTRY if not e.polled] == [ex.KERNEL_LOG]


def check_snapshot(name: str, snap: object) -> Snapshot:
    assert isinstance(snap, Snapshot), f"{name}: collect() returned {type(snap).__name__}"
    for s in snap.samples:
        assert isinstance(s, Sample)
        assert s.kind in (COUNTER, GAUGE)
        assert s.help, f"{name}: {s.name} has no HELP text"
        assert isinstance(s.value, float) and not math.isnan(s.value)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in s.labels), f"{name}: {s.name} {s.labels}"
    for e in snap.events:
        assert isinstance(e, ev.FaultEvent) and e.kind in ev.KINDS, f"{name}: {e!r}"
        assert e.source and e.message
    _, problems = ex.check_samples([(name, s) for s in snap.samples])
    assert problems == []
    return snap


@pytest.mark.parametrize("tree", TREES)
def test_every_polled_collector_on_every_fixture_tree(tree: str) -> None:
    polled: list[tuple[str, Sample]] = []
    for entry in POLLED:
        assert entry.build is not None
        c = entry.build(FIXTURES / tree, HOST)
        assert c.name == entry.name
        try:
            first = c.collect()
        except NvmlUnavailable as e:  # NVIDIA GPUs in the tree and no NVML on this machine: a failed poll
            assert entry.name == "nvml" and "NVIDIA GPU(s) are on the PCI bus" in str(e)
            assert any(pci.is_gpu(f) for f in pci.read_functions(FIXTURES / tree))
            continue
        check_snapshot(entry.name, first)
        second = check_snapshot(entry.name, c.collect())
        assert second.events == [], f"{entry.name}: events from an unchanged tree"
        if isinstance(c, PortSource):
            for p in c.ports():
                assert isinstance(p.device, str) and isinstance(p.port, int)
        close = getattr(c, "close", None)
        if close is not None:
            close()
        polled += [(entry.name, s) for s in second.samples]
    _, problems = ex.check_samples(polled)  # all collectors together, as one scrape holds them
    assert problems == []


@pytest.mark.parametrize("entry", POLLED, ids=lambda e: e.name)
def test_an_empty_root_gives_an_empty_snapshot(entry: registry.Entry, tmp_path: Path) -> None:
    """Absent hardware is no data, not an error. NVML on a root without NVIDIA GPUs and a machine
    without a GPU driver (this one, unless it has one) gives nothing either."""
    assert entry.build is not None
    c = entry.build(tmp_path, HOST)
    assert c.name == entry.name
    snap = check_snapshot(entry.name, c.collect())
    assert snap.events == []
    if getattr(c, "sysfs", None) == tmp_path:  # it reads the root it was given
        assert snap.samples == []


def test_every_sysfs_collector_exports_something_from_some_fixture_tree() -> None:
    """The fixture trees cover every collector that reads sysfs (else the test above proves little)."""
    for entry in POLLED:
        assert entry.build is not None
        if getattr(entry.build(FIXTURES / TREES[0], HOST), "sysfs", None) is None:
            continue  # not a sysfs reader (NVML: tests/unit/test_collector_nvml.py, the simulator)
        assert any(entry.build(FIXTURES / t, HOST).collect().samples for t in TREES), entry.name

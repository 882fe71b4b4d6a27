"""`nodewarden analyze` on simulated fleets with the kinds beyond the paper: the real parsers read
the simulated SXid, PCIe AER, reset-required, Xid 154, AMD MCA and GHES lines, and every table
beyond the paper equals what ground_truth.csv says, counted here with plain Python (Counter)
from the truth rows, not with the analysis functions (as test_analysis_truth does for the
paper's kinds)."""

from __future__ import annotations

import collections
import csv
import datetime as dt
from pathlib import Path

import pytest

from tests import envneeds

envneeds.module("pandas", "offline analysis, the [analysis] extra")

from nodewarden.analysis import simulate as sim  # noqa: E402
from nodewarden.cli import main  # noqa: E402

from test_simulate_new_kinds import BEYOND_RATES  # noqa: E402

# the kinds ground_truth.csv names, each one event of `nodewarden events`
TRUTH_KINDS = ("xid", "sxid", "pcie_aer", "pcie_aer_recovery", "gpu_reset_required", "cpu_ecc")
AER_ORDER = ("fatal", "non_fatal", "corrected")


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _t(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _printed(r: dict[str, str]) -> dt.datetime:
    """The truth time as the row's log format prints it (only rfc3339 keeps microseconds)."""
    t = _t(r["time"])
    return t if r["line_format"] == "rfc3339" else t.replace(microsecond=0)


class Fleet:
    def __init__(self, root: Path, report: Path) -> None:
        self.root, self.report = root, report
        self.truth = _read(root / "ground_truth.csv")

    def table(self, name: str) -> list[dict[str, str]]:
        return _read(self.report / f"{name}.csv")

    def rows(self, kind: str) -> list[dict[str, str]]:
        return [r for r in self.truth if r["kind"] == kind]

    def resets(self) -> list[dict[str, str]]:
        """Reset-required reports: the assertions, and Xid 154s to an action other than none."""
        return [r for r in self.truth if r["kind"] == "gpu_reset_required"
                or (r["kind"] == "xid" and r["xid"] == "154" and r["action"] != "none")]


@pytest.fixture(scope="module", params=[1, 2])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    base = tmp_path_factory.mktemp(f"beyond-analyze-{request.param}")
    rates = base / "rates.toml"
    rates.write_text(BEYOND_RATES)
    sim.simulate(base / "logs", seed=request.param, rates=rates)
    assert main(["analyze", str(base / "logs"), "--out", str(base / "report"), "--no-cache"]) == 0
    return Fleet(base / "logs", base / "report")


def test_events_by_kind(fleet: Fleet) -> None:
    got = {r["kind"]: int(r["count"]) for r in fleet.table("events_by_kind")}
    want = collections.Counter(r["kind"] for r in fleet.truth if r["kind"] in TRUTH_KINDS)
    # flash cuts: none in this fleet; the boot banner's "Cable plugged" lines are nic_module_event
    assert {k: v for k, v in got.items() if k != "nic_module_event"} == dict(want)


def test_sxid_by_switch(fleet: Fleet) -> None:
    want = collections.Counter((r["host"], r["switch"], r["device"], r["code"], r["severity"])
                               for r in fleet.rows("sxid"))
    got = {(r["host"], r["switch"], r["pci_bus_id"], r["sxid"], r["severity"]): int(r["count"])
           for r in fleet.table("sxid_by_switch")}
    assert got == dict(want)


def _named(c: collections.Counter) -> str:
    return "; ".join(f"{k} ({v})" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def test_pcie_aer_by_device(fleet: Fleet) -> None:
    aer = fleet.rows("pcie_aer")
    want = {}
    for key, n in collections.Counter((r["host"], r["device"], r["severity"]) for r in aer).items():
        rs = [r for r in aer if (r["host"], r["device"], r["severity"]) == key]
        firsts = collections.Counter(r["first_error"] for r in rs if r["first_error"])
        bits = collections.Counter(b for r in rs for b in set(r["errors"].split()))
        lost = sorted({d for r in rs for d in r["affected_devices"].split()})
        want[key] = (n, _named(firsts), _named(bits), ", ".join(lost))
    got = {(r["host"], r["pci_bus_id"], r["severity"]): (int(r["count"]), r["first_errors"], r["errors"],
                                                         r["affected_devices"])
           for r in fleet.table("pcie_aer_by_device")}
    assert got == want
    # the fatal records name the GPU they took off the bus
    assert any(w[3] for w in want.values())


def test_pcie_aer_by_severity(fleet: Fleet) -> None:
    aer = fleet.rows("pcie_aer")
    want = []
    for sev in AER_ORDER:
        g = [r for r in aer if r["severity"] == sev]
        want.append((sev, len(g), len({r["host"] for r in g}), len({(r["host"], r["device"]) for r in g}),
                     sum(r["category"] == "gpu_lost_precursor" for r in g)))
    want.append(("Total", len(aer), len({r["host"] for r in aer}), len({(r["host"], r["device"]) for r in aer}),
                 sum(r["category"] == "gpu_lost_precursor" for r in aer)))
    got = [(r["severity"], int(r["count"]), int(r["hosts"]), int(r["devices"]), int(r["gpu_lost_precursor"]))
           for r in fleet.table("pcie_aer_by_severity")]
    assert got == want


def test_gpu_reset_required(fleet: Fleet) -> None:
    groups = collections.defaultdict(list)
    for r in fleet.resets():
        source = "xid154" if r["kind"] == "xid" else "assertion"  # the simulated logs hold no NVML report
        groups[(r["host"], r["device"], r["action"], source)].append(_printed(r))
    want = {k: (len(ts), min(ts), max(ts)) for k, ts in groups.items()}
    got = {(r["host"], r["pci_bus_id"], r["action"], r["source"]): (int(r["count"]), _t(r["first"].replace(" ", "T")),
                                                                    _t(r["last"].replace(" ", "T")))
           for r in fleet.table("gpu_reset_required")}
    assert got == want
    assert {a for _, _, a, _ in want} >= {"gpu_reset"} and {s for *_, s in want} == {"xid154", "assertion"}


def test_beyond_paper_monthly(fleet: Fleet) -> None:
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in fleet.rows("pcie_aer"):
        per[r["time"][:7]][f"pcie_aer_{r['severity']}"] += 1
        # every simulated precursor recovery line follows its record: the record is the precursor
        per[r["time"][:7]]["gpu_lost_precursor"] += r["category"] == "gpu_lost_precursor"
    for r in fleet.rows("sxid"):
        per[r["time"][:7]][f"sxid_{r['severity']}"] += 1
    for r in fleet.resets():
        per[r["time"][:7]]["gpu_reset_required"] += 1
    cols = ("pcie_aer_fatal", "pcie_aer_non_fatal", "pcie_aer_corrected", "sxid_fatal", "sxid_non_fatal",
            "gpu_reset_required", "gpu_lost_precursor")
    want = [(m, *(per[m][c] for c in cols)) for m in sorted(per)]
    want.append(("Total", *(sum(w[i] for w in want) for i in range(1, len(cols) + 1))))
    got = [(r["month"], *(int(r[c]) for c in cols)) for r in fleet.table("beyond_paper_monthly")]
    assert got == want


def test_table7_counts_the_new_memory_errors_as_cpu_ecc(fleet: Fleet) -> None:
    """AMD MCA + EDAC and GHES + ghes_edac pairs are one cpu_ecc event each (one error): Table
    VII's main_memory_cpu_ecc counts each once."""
    want = collections.Counter(r["time"][:7] for r in fleet.rows("cpu_ecc"))
    got = {r["month"]: int(r["main_memory_cpu_ecc"]) for r in fleet.table("table7_memory_network_monthly")
           if r["month"] != "Total" and int(r["main_memory_cpu_ecc"])}
    assert got == dict(want)


def _label(r: dict[str, str]) -> str | None:
    """The fault label of a truth row: AER records and SXids by severity; AER recovery lines are
    no faults (every simulated one follows its record within milliseconds)."""
    if r["kind"] == "xid":
        return f"Xid {r['xid']}"
    if r["kind"] == "pcie_aer_recovery":
        return None
    if r["kind"] in ("sxid", "pcie_aer"):
        return f"{r['kind']}:{r['severity']}"
    return r["kind"]


def test_co_occurrence(fleet: Fleet) -> None:
    """Fault groups on a host are two minutes apart, so the faults within 60 s of each other are
    a group's own events and the chains (an AER or SXid group just before its Xid). Each pair is
    in the order the lines were printed (the truth's exact times), on every host: where the log
    stamps whole seconds (RFC 3164, journal, dmesg -T) too, ties keeping the printed order."""
    by_host = collections.defaultdict(list)
    for r in fleet.truth:
        if _label(r):
            by_host[r["host"]].append((_printed(r), _t(r["time"]), _label(r)))
    want: collections.Counter = collections.Counter()
    hosts = collections.defaultdict(set)
    for host, evs in by_host.items():
        evs.sort(key=lambda e: e[1])
        for i, (t, _, a) in enumerate(evs):
            for b in {b for u, _, b in evs[i + 1:] if (u - t).total_seconds() <= 60 and b != a}:
                want[(a, b)] += 1
                hosts[(a, b)].add(host)
    got = {(r["first"], r["then"]): (int(r["count"]), int(r["hosts"])) for r in fleet.table("co_occurrence")}
    assert got == {k: (n, len(hosts[k])) for k, n in want.items()}
    # the two chains of each ([chains] in BEYOND_RATES), the record or SXid printed first
    assert got[("pcie_aer:fatal", "Xid 79")][0] == 2 and got[("sxid:fatal", "Xid 74")][0] == 2
    assert ("Xid 79", "pcie_aer:fatal") not in got and ("Xid 74", "sxid:fatal") not in got
    assert not any(a.startswith("pcie_aer_recovery") or b.startswith("pcie_aer_recovery") for a, b in got)


def test_hardware_faults(fleet: Fleet) -> None:
    """Hardware faults beyond the paper: uncorrected AER records and fatal SXids (with the
    hardware Xids); corrected AER, non-fatal SXids, recoveries, resets and Xid 154 are not."""
    from nodewarden import catalog
    pol = catalog.load_policy()
    hw = collections.Counter()
    for r in fleet.truth:
        if r["kind"] == "xid" and pol.is_hardware(int(r["xid"])):
            hw[r["host"]] += 1
        elif r["kind"] == "cpu_ecc":
            hw[r["host"]] += 1
        elif r["kind"] == "pcie_aer" and r["severity"] in ("fatal", "non_fatal"):
            hw[r["host"]] += 1
        elif r["kind"] == "sxid" and r["severity"] == "fatal":
            hw[r["host"]] += 1
    got = {r["host"]: int(r["hardware_faults"]) for r in fleet.table("mtbf_per_node")}
    assert {h: n for h, n in got.items() if n} == dict(hw)

"""The tables beyond the paper: NVSwitch SXids, PCIe AER records and their recovery,
reset-required GPUs, GPU-lost precursors, IB link outages; their labels in the co-occurrence,
MTBF and repeat-offender statistics; and the report with none of them.

The events are built here in the shapes the parsers give (kind,
device, code, category and attrs keys), modelled on the real cases of
tests/fixtures/reference/real_log_cases.md (S-001, S-101, P-101, W-101, X-040, E-004); every expected
count below is worked out by hand from the list of events, not taken from the tables.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from nodewarden import events as ev
from nodewarden.analysis import report, stats, tables
from nodewarden.analysis.ingest import IngestStats
from nodewarden.events import FaultEvent

UTC = dt.timezone.utc


def _t(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC) if text else None


def event(kind: str, t: str | None, host: str, device: str | None = None, code: int | None = None,
          category: str | None = None, source: str = "file", **attrs) -> FaultEvent:
    return FaultEvent(kind=kind, message="", raw="", time=_t(t), host=host, source=source, device=device, code=code,
                      category=category, attrs=attrs)


def sxid(t: str | None, host: str, index: int, bus: str, code: int, severity: str, link: int | None = None,
         source: str = "text") -> FaultEvent:
    """S-001 / S-101 shape: device = the switch's PCI id, code = the SXid, category = severity."""
    a = {"switch": f"nvidia-nvswitch{index}", "switch_index": index, "pci_bus_id": bus, "sxid": code,
         "severity": severity, "severity_source": source, "unit": None, "description": None, "lines": 3}
    if link is not None:
        a["link"] = link
    return event(ev.SXID, t, host, bus, code, severity, **a)


def aer(t: str | None, host: str, bus: str, severity: str, first: str | None = None, precursor: bool = False,
        driver: str = "pcieport", via: str = "kernel", bits: tuple[tuple[int, str], ...] = (),
        affected: tuple[str, ...] = ()) -> FaultEvent:
    """One AER error record (P-101 shape); category = severity, or gpu_lost_precursor. ``bits``:
    the record's ``[ N] Name`` lines (bit, name); ``first`` is marked (First), and listed when
    ``bits`` lacks it. ``affected``: the functions that printed "can't recover"."""
    errors = [{"bit": b, "name": n, "first": n == first} for b, n in bits]
    if first and all(n != first for _, n in bits):
        errors.append({"bit": 14, "name": first, "first": True})
    return event(ev.PCIE_AER, t, host, bus, None, "gpu_lost_precursor" if precursor else severity,
                 severity=severity, pci_bus_id=bus, driver=driver, first_error=first, errors=errors, via=via,
                 multiple=False, affected_devices=list(affected))


def recovery(t: str | None, host: str, bus: str, outcome: str, driver: str) -> FaultEvent:
    precursor = driver == "nvidia" and outcome in ("no_error_detected_callback", "recovery_failed")
    return event(ev.PCIE_AER_RECOVERY, t, host, bus, None, "gpu_lost_precursor" if precursor else outcome,
                 outcome=outcome, driver=driver, pci_bus_id=bus)


def xid(t: str, host: str, code: int, bus: str, **attrs) -> FaultEvent:
    return event(ev.XID, t, host, bus, code, None, pci_bus_id=bus, **attrs)


def xid154(t: str, host: str, bus: str, to: str, frm: str = "none") -> FaultEvent:
    """X-040: "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"."""
    return xid(t, host, 154, bus, recovery_action=to, recovery_action_from=frm)


def reset(t: str | None, host: str, bus: str | None = None, action: str = "gpu_reset",
          source: str = "file") -> FaultEvent:
    """W-101: an NVRM assertion with [NV_ERR_RESET_REQUIRED] (no PCI id), or NVML's action."""
    return event(ev.GPU_RESET_REQUIRED, t, host, bus, None, None, source=source, action=action, status=0x62,
                 status_name="NV_ERR_RESET_REQUIRED", location="kernel_channel.c:2827", pci_bus_id=bus)


def link(t: str, host: str, up: bool, dev: str = "mlx5_0/1") -> FaultEvent:
    return event(ev.IB_LINK_UP if up else ev.IB_LINK_DOWN, t, host, dev)


# Two months on n1/n2, plus an untimed P-101-style record on host p101 (dmesg -H deltas):
EVENTS = [
    # SXids: n1 two 22013 non-fatal on nvswitch3 (S-001), one 12028 data-only (S-101, severity from
    # the catalog); n2 a fatal 14008 on nvswitch0, then Xid 74 (10 s) and Xid 145 (20 s) on a GPU,
    # and one SXid of unknown severity.
    sxid("2024-01-01T00:00:00", "n1", 3, "0000:04:00.0", 22013, "non_fatal", link=44),
    sxid("2024-01-05T00:00:00", "n1", 3, "0000:04:00.0", 22013, "non_fatal", link=44),
    sxid("2024-01-10T00:00:00", "n1", 1, "0000:84:00.0", 12028, "non_fatal", source="catalog"),
    sxid("2024-02-01T00:00:00", "n2", 0, "0000:05:00.0", 14008, "fatal", link=3),
    xid("2024-02-01T00:00:10", "n2", 74, "0000:18:00.0"),
    xid("2024-02-01T00:00:20", "n2", 145, "0000:18:00.0"),
    sxid("2024-02-03T00:00:00", "n2", 0, "0000:05:00.0", 19999, "unknown", source="catalog"),
    # PCIe AER: n1's root port 0000:00:03.0 fatal CmpltTO on the GPU's link (P-101): the record,
    # the nvidia and snd_hda_intel "can't recover", the link reset, "device recovery failed",
    # then Xid 79 of that GPU 30 s later.
    # P-101's bit lines: "[ 5] SDES", "[14] CmpltTO (First)"
    aer("2024-01-20T00:00:00", "n1", "0000:00:03.0", "fatal", "CmpltTO", precursor=True,
        bits=((5, "SDES"), (14, "CmpltTO")), affected=("0000:03:00.0", "0000:03:00.1")),
    recovery("2024-01-20T00:00:00.001", "n1", "0000:03:00.0", "no_error_detected_callback", "nvidia"),
    recovery("2024-01-20T00:00:00.002", "n1", "0000:03:00.1", "no_error_detected_callback", "snd_hda_intel"),
    recovery("2024-01-20T00:00:01.050", "n1", "0000:00:03.0", "link_reset", "pcieport"),
    recovery("2024-01-20T00:00:01.060", "n1", "0000:00:03.0", "recovery_failed", "pcieport"),
    xid("2024-01-20T00:00:30", "n1", 79, "0000:03:00.0"),
    # n1: three corrected errors on 0000:00:01.0 (corrected records mark no bit (First)): RxErr
    # (bit 0) in each, BadTLP (bit 6) in the last too
    aer("2024-01-02T00:00:00", "n1", "0000:00:01.0", "corrected", bits=((0, "RxErr"),)),
    aer("2024-01-03T00:00:00", "n1", "0000:00:01.0", "corrected", bits=((0, "RxErr"),)),
    aer("2024-01-04T00:00:00", "n1", "0000:00:01.0", "corrected", bits=((0, "RxErr"), (6, "BadTLP"))),
    # n2: a non-fatal UnsupReq from a NIC, and a firmware-first (GHES, E-004) non-fatal record
    aer("2024-02-10T00:00:00", "n2", "0000:17:00.0", "non_fatal", "UnsupReq", driver="mlx5_core",
        bits=((20, "UnsupReq"),)),
    aer("2024-02-11T00:00:00", "n2", "0000:5e:00.0", "non_fatal", via="ghes"),
    # n2: an nvidia "can't recover" whose record the log lacks: a precursor of its own
    recovery("2024-02-15T00:00:00", "n2", "0000:8a:00.0", "no_error_detected_callback", "nvidia"),
    # p101: P-101 itself, untimed (dmesg -H without an anchor)
    aer(None, "p101", "0000:00:03.0", "fatal", "CmpltTO", precursor=True, bits=((5, "SDES"), (14, "CmpltTO")),
        affected=("0000:03:00.0",)),
    recovery(None, "p101", "0000:03:00.0", "no_error_detected_callback", "nvidia"),
    # Reset required: two W-101 assertions on n1 (no PCI id); on n2 GPU 0009:01:00.0 an Xid 154 to
    # drain_and_reset, NVML's report of the same 5 s later (one report), the same Xid again 10 s
    # after the first (a second report), an Xid 154 to gpu_reset (another action), NVML's state
    # change (not a report), and a day later the change back to none (no report).
    reset("2024-01-25T00:00:00", "n1"),
    reset("2024-01-26T00:00:00", "n1"),
    xid154("2024-02-20T00:00:00", "n2", "0009:01:00.0", "drain_and_reset"),
    reset("2024-02-20T00:00:05", "n2", "0009:01:00.0", "drain_and_reset", source="nvml"),
    xid154("2024-02-20T00:00:10", "n2", "0009:01:00.0", "drain_and_reset"),
    xid154("2024-02-20T00:00:11", "n2", "0009:01:00.0", "gpu_reset", frm="drain_and_reset"),
    event(ev.GPU_RECOVERY_ACTION, "2024-02-20T00:00:12", "n2", "0009:01:00.0", source="nvml", action="gpu_reset",
          previous_action="drain_and_reset", pci_bus_id="0009:01:00.0"),
    xid154("2024-02-21T00:00:00", "n2", "0009:01:00.0", "none", frm="gpu_reset"),
]
DF = tables.events_frame(EVENTS)


def rows(t: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in t.itertuples(index=False)]


def test_frame_carries_the_details() -> None:
    s = DF[DF["kind"] == ev.SXID].iloc[0]
    assert (s["sxid"], s["severity"], s["switch"], s["pci_bus_id"]) == (22013, "non_fatal", "nvidia-nvswitch3",
                                                                        "0000:04:00.0")
    a = DF[DF["kind"] == ev.PCIE_AER].iloc[0]
    assert (a["severity"], a["first_error"], a["category"]) == ("fatal", "CmpltTO", "gpu_lost_precursor")
    x = DF[(DF["kind"] == ev.XID) & (DF["xid"] == 154)]
    assert list(x["action"]) == ["drain_and_reset", "drain_and_reset", "gpu_reset", "none"]
    assert DF.loc[DF["kind"] == ev.XID, "action"].isna().sum() == 3  # 74, 145, 79: no action
    # a journal record (no code outside Xids) keeps its SXid in attrs
    j = FaultEvent.from_dict(EVENTS[0].to_dict())
    assert tables.events_frame([j])["sxid"].tolist() == [22013]
    # a value of the wrong type (another version's journal) is left out, not fatal
    bad = event(ev.SXID, "2024-01-01T00:00:00", "n1", "0000:04:00.0", None, "fatal", sxid="12028", severity=3)
    assert tables.events_frame([bad])[["sxid", "severity"]].isna().all(axis=None)
    a = DF[DF["kind"] == ev.PCIE_AER].iloc[0]
    assert a["errors"] == ("SDES", "CmpltTO") and a["affected_devices"] == ("0000:03:00.0", "0000:03:00.1")
    bad = event(ev.PCIE_AER, "2024-01-01T00:00:00", "n1", "0000:00:01.0", None, "corrected", severity="corrected",
                errors="RxErr", affected_devices=[3, "0000:01:00.0"])
    b = tables.events_frame([bad]).iloc[0]
    assert b["errors"] is None and b["affected_devices"] == ("0000:01:00.0",)


def test_sxid_by_switch() -> None:
    assert rows(tables.sxid_by_switch(DF)) == [
        ("n1", "nvidia-nvswitch3", "0000:04:00.0", 22013, "non_fatal", 2),
        ("n1", "nvidia-nvswitch1", "0000:84:00.0", 12028, "non_fatal", 1),
        ("n2", "nvidia-nvswitch0", "0000:05:00.0", 14008, "fatal", 1),
        ("n2", "nvidia-nvswitch0", "0000:05:00.0", 19999, "unknown", 1),
    ]


def test_pcie_aer_by_device() -> None:
    t = tables.pcie_aer_by_device(DF)
    assert list(t.columns) == ["host", "pci_bus_id", "severity", "count", "first_errors", "errors",
                               "affected_devices"]
    # host, device, severity, records, (First) bits, every bit with the records listing it, the
    # functions that printed "can't recover" (P-101: the GPU and its audio function)
    assert rows(t) == [
        ("n1", "0000:00:01.0", "corrected", 3, "", "RxErr (3); BadTLP (1)", ""),
        ("n1", "0000:00:03.0", "fatal", 1, "CmpltTO (1)", "CmpltTO (1); SDES (1)", "0000:03:00.0, 0000:03:00.1"),
        ("n2", "0000:17:00.0", "non_fatal", 1, "UnsupReq (1)", "UnsupReq (1)", ""),
        ("n2", "0000:5e:00.0", "non_fatal", 1, "", "", ""),
        ("p101", "0000:00:03.0", "fatal", 1, "CmpltTO (1)", "CmpltTO (1); SDES (1)", "0000:03:00.0"),
    ]
    three = tables.events_frame([
        aer("2024-01-01T00:00:00", "h", "0000:00:03.0", "fatal", "CmpltTO", bits=((5, "SDES"), (14, "CmpltTO")),
            affected=("0000:03:00.0",)),
        aer("2024-01-02T00:00:00", "h", "0000:00:03.0", "fatal", "SDES", bits=((5, "SDES"),),
            affected=("0000:03:00.1", "0000:03:00.0")),
        aer("2024-01-03T00:00:00", "h", "0000:00:03.0", "fatal", "SDES", bits=((5, "SDES"),))])
    # SDES in all three records, CmpltTO in one; 03:00.0 lost twice, listed once
    assert rows(tables.pcie_aer_by_device(three)) == [
        ("h", "0000:00:03.0", "fatal", 3, "SDES (2); CmpltTO (1)", "SDES (3); CmpltTO (1)",
         "0000:03:00.0, 0000:03:00.1")]


def test_pcie_aer_by_severity() -> None:
    # fatal: n1's and p101's (both precursors); non_fatal: n2's two; corrected: n1's three
    assert rows(tables.pcie_aer_by_severity(DF)) == [
        ("fatal", 2, 2, 2, 2), ("non_fatal", 2, 1, 2, 0), ("corrected", 3, 1, 1, 0), ("Total", 7, 3, 5, 2)]


def test_gpu_reset_required() -> None:
    t = tables.gpu_reset_required(DF)
    assert list(t.columns) == ["host", "pci_bus_id", "action", "source", "count", "first", "last"]
    got = [(r["host"], r["pci_bus_id"], r["action"], r["source"], r["count"], str(r["first"]), str(r["last"]))
           for r in t.to_dict("records")]
    # NVML's report 5 s after the first Xid 154 is that report: counted once, as the Xid 154
    assert got == [
        ("n1", "", "gpu_reset", "assertion", 2, "2024-01-25 00:00:00+00:00", "2024-01-26 00:00:00+00:00"),
        ("n2", "0009:01:00.0", "drain_and_reset", "xid154", 2, "2024-02-20 00:00:00+00:00",
         "2024-02-20 00:00:10+00:00"),
        ("n2", "0009:01:00.0", "gpu_reset", "xid154", 1, "2024-02-20 00:00:11+00:00", "2024-02-20 00:00:11+00:00"),
    ]
    # events_by_kind counts the gpu_reset_required kind only: the two assertions and NVML's
    # report (5 here), not the Xid 154s (xid events)
    kinds = dict(zip(tables.kind_counts(DF)["kind"], tables.kind_counts(DF)["count"]))
    assert kinds[ev.GPU_RESET_REQUIRED] == 3 and t["count"].sum() == 5


def test_reset_reports_from_other_evidence_far_apart_count_twice() -> None:
    df = tables.events_frame([xid154("2024-02-20T00:00:00", "n2", "0009:01:00.0", "node_reboot"),
                              reset("2024-02-20T00:05:00", "n2", "0009:01:00.0", "node_reboot", source="nvml"),
                              reset("2024-02-20T00:06:00", "n2", None, "gpu_reset", source="kmsg")])
    got = [(r["action"], r["source"], r["count"]) for r in tables.gpu_reset_required(df).to_dict("records")]
    # one row per source: the agent journal's NV_ERR_RESET_REQUIRED line (source kmsg) is an assertion
    assert got == [("gpu_reset", "assertion", 1), ("node_reboot", "nvml", 1), ("node_reboot", "xid154", 1)]


def test_beyond_paper_monthly() -> None:
    t = tables.beyond_paper_monthly(DF)
    assert list(t.columns) == list(tables.BEYOND_PAPER_COLUMNS)
    # month, AER fatal, non_fatal, corrected, SXid fatal, non_fatal, reset-required, precursors
    assert rows(t) == [
        ("2024-01", 1, 0, 3, 0, 3, 2, 1),  # the nvidia "can't recover" 1 ms after its record is that record
        ("2024-02", 0, 2, 0, 1, 0, 3, 1),  # the orphan "can't recover" of 02-15 is a precursor
        ("Total", 1, 2, 3, 1, 3, 5, 2),
    ]


def test_paper_tables_do_not_count_the_new_kinds() -> None:
    paper = [e for e in EVENTS if e.kind == ev.XID and e.code != 154]
    mixed = tables.events_frame(EVENTS)
    only = tables.events_frame(paper)
    pd.testing.assert_frame_equal(tables.table7_memory_network_monthly(mixed),
                                  tables.table7_memory_network_monthly(only))
    assert tables.table5_xid_groups(mixed)["count"].iloc[-1] == len(paper) + 4  # Xid 154 is an Xid


def test_co_occurrence_pairs_of_the_new_kinds() -> None:
    co = stats.co_occurrence(DF, window=60)
    got = {(r["first"], r["then"]): (r["count"], r["hosts"]) for r in co.to_dict("records")}
    # n1: the fatal AER record, Xid 79 30 s later (its recovery lines are no faults); n2: the
    # fatal SXid, Xid 74 10 s and Xid 145 20 s later; the Xid 154 of 02-20 00:00:00, NVML's
    # report 5 s later, the Xid 154s 10 s and 11 s later (same label: no pair)
    assert got == {("pcie_aer:fatal", "Xid 79"): (1, 1), ("sxid:fatal", "Xid 74"): (1, 1),
                   ("sxid:fatal", "Xid 145"): (1, 1), ("Xid 74", "Xid 145"): (1, 1),
                   ("Xid 154", "gpu_reset_required"): (1, 1), ("gpu_reset_required", "Xid 154"): (1, 1)}


def test_aer_labels_are_severities() -> None:
    f = stats.fault_frame(DF)
    aer_labels = f.loc[f["kind"] == ev.PCIE_AER, "label"].tolist()
    # time order, untimed (p101) last: 01-02..04 corrected, 01-20 fatal (a precursor), 02-10/11 non-fatal
    assert aer_labels == ["pcie_aer:corrected"] * 3 + ["pcie_aer:fatal", "pcie_aer:non_fatal", "pcie_aer:non_fatal",
                                                       "pcie_aer:fatal"]
    # the only recovery line left is n2's lost record of 02-15
    rec = f[f["kind"] == ev.PCIE_AER_RECOVERY]
    assert rec[["host", "label"]].values.tolist() == [["n2", "pcie_aer_recovery:gpu_lost_precursor"]]
    # a journal of another version without attrs severity: a category that is one stands for it
    old = event(ev.PCIE_AER, "2024-01-01T00:00:00", "h", "0000:00:01.0", None, "corrected")
    pre = event(ev.PCIE_AER, "2024-01-01T00:10:00", "h", "0000:00:03.0", None, "gpu_lost_precursor")
    assert stats.fault_frame(tables.events_frame([old, pre]))["label"].tolist() == ["pcie_aer:corrected",
                                                                                   "pcie_aer:unknown"]


def test_recovery_lines_are_no_faults_of_their_own() -> None:
    """One fatal AER record with its P-101 recovery lines is one fault; an NVIDIA "can't recover"
    or "recovery failed" with no record (other than a corrected one) within 5 s stands for the
    lost record."""
    one = [aer("2024-03-01T00:00:00", "h", "0000:00:03.0", "fatal", "CmpltTO", precursor=True),
           recovery("2024-03-01T00:00:00.004", "h", "0000:03:00.0", "no_error_detected_callback", "nvidia"),
           recovery("2024-03-01T00:00:00.004", "h", "0000:03:00.1", "no_error_detected_callback", "snd_hda_intel"),
           recovery("2024-03-01T00:00:01.054", "h", "0000:00:03.0", "link_reset", "pcieport"),
           recovery("2024-03-01T00:00:01.054", "h", "0000:00:03.0", "recovery_failed", "pcieport"),
           xid("2024-03-01T00:00:02", "h", 79, "0000:03:00.0")]
    df = tables.events_frame(one)
    m = stats.mtbf(df).set_index("category")["failures"].to_dict()
    assert m == {"uncorrectable": 1, "pcie_aer:fatal": 1, "hardware": 2}
    assert stats.co_occurrence(df)[["first", "then", "count"]].values.tolist() == [["pcie_aer:fatal", "Xid 79", 1]]
    assert stats.repeat_offenders(df)["nodes"]["faults"].tolist() == [2]
    # a non-fatal record of another driver 3 s before an NVIDIA "recovery failed": the line is
    # its recovery; a corrected record 1 s before another "can't recover": that one is a lost
    # record (a corrected error starts no recovery), and so is one 6 s after a fatal record
    lost = [aer("2024-03-02T00:00:00", "h", "0000:17:00.0", "non_fatal", driver="mlx5_core"),
            recovery("2024-03-02T00:00:03", "h", "0000:03:00.0", "recovery_failed", "nvidia"),
            aer("2024-03-03T00:00:00", "h", "0000:00:01.0", "corrected"),
            recovery("2024-03-03T00:00:01", "h", "0000:03:00.0", "no_error_detected_callback", "nvidia"),
            aer("2024-03-04T00:00:00", "h", "0000:00:03.0", "fatal"),
            recovery("2024-03-04T00:00:06", "h", "0000:03:00.0", "no_error_detected_callback", "nvidia")]
    f = stats.fault_frame(tables.events_frame(lost))
    assert f["label"].tolist() == ["pcie_aer:non_fatal", "pcie_aer:corrected", "pcie_aer_recovery:gpu_lost_precursor",
                                   "pcie_aer:fatal", "pcie_aer_recovery:gpu_lost_precursor"]
    assert stats.hardware_mask(f).tolist() == [True, False, True, True, True]


def test_hardware_faults_of_the_new_kinds() -> None:
    rep = stats.repeat_offenders(DF)
    # n2: AER non_fatal x2, SXid fatal, Xid 74, Xid 145, the lost AER record of 02-15 = 6; n1: AER
    # fatal, Xid 79 = 2; p101: AER fatal = 1 (its "can't recover" is its record's). Not hardware:
    # corrected AER, non-fatal/unknown SXids, recovery lines, resets, Xid 154.
    assert rows(rep["nodes"][["host", "faults"]]) == [("n2", 6), ("n1", 2), ("p101", 1)]
    assert rep["nodes"]["share"].tolist() == pytest.approx([600 / 9, 200 / 9, 100 / 9])
    m = stats.mtbf(DF).set_index("category")["failures"].to_dict()
    # untimed events (p101) are not counted in the MTBF
    assert m["hardware"] == 8
    assert {k: v for k, v in m.items() if ":" in k or k == "gpu_reset_required"} == {
        "sxid:fatal": 1, "sxid:non_fatal": 3, "sxid:unknown": 1, "pcie_aer:fatal": 1,
        "pcie_aer:non_fatal": 2, "pcie_aer:corrected": 3, "pcie_aer_recovery:gpu_lost_precursor": 1,
        "gpu_reset_required": 3}
    assert ev.GPU_RECOVERY_ACTION not in m


# ---- ties in time: the order the log printed them ---------------------------------------------

# An SXid error (three lines, folded into one event, held by the parser for more lines) and an
# Xid 74 printed 20 ms after it, all in one second of RFC 3164 syslog. The SXid lines follow the
# driver's NVSWITCH_PRINT_SXID formats (open-gpu-kernel-modules src/common/nvswitch, as in
# real_log_cases S-001), the Xid line the driver's NVLink Xid 74 as simulate prints it.
TIED_LOG = """\
Oct 21 10:00:00 node1 kernel: [  100.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 14008, Data {0x00000001, \
0x00000002, 0x00000003, 0x00000004, 0x00000005, 0x00000006, 0x00000007, 0x00000008, 0x00000009}
Oct 21 10:00:00 node1 kernel: [  100.003100] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 14008, Fatal, Link 03 TS tag \
store fatal ECC
Oct 21 10:00:00 node1 kernel: [  100.005100] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 14008, Severity 1 Engine \
instance 03 Sub-engine instance 00
Oct 21 10:00:00 node1 kernel: [  100.020000] NVRM: Xid (PCI:0000:0e:00): 74, pid='<unknown>', name=<unknown>, NVLink: \
fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)
"""


@pytest.mark.parametrize("cached", [False, True])
def test_ties_keep_the_printed_order(tmp_path: Path, cached: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    from nodewarden.analysis import ingest as ingest_mod
    log = tmp_path / "node1" / "kern.log"
    log.parent.mkdir()
    log.write_text(TIED_LOG)
    os.utime(log, (1_700_000_000, 1_700_000_000))  # long before it is parsed: the cache trusts it
    cache = tmp_path / "cache" if cached else None
    events, _ = ingest_mod.ingest([str(log)], cache_dir=cache)
    got = list(events)
    if cached:  # the second run reads the events (and where each begins) from the cache
        assert list(cache.glob("*.parquet"))
        monkeypatch.setattr(ingest_mod, "_stream_file", lambda *a, **k: pytest.fail("parsed again"))
        events, _ = ingest_mod.ingest([str(log)], cache_dir=cache)
        got = list(events)
    # the parser releases the Xid first (the SXid waits for more of its lines)
    assert [e.kind for e in got] == [ev.XID, ev.SXID] and got[1].attrs["lines"] == 3
    df = tables.events_frame(got)
    assert df["kind"].tolist() == [ev.SXID, ev.XID] and df["time"].nunique() == 1
    co = stats.co_occurrence(df)
    assert co[["first", "then", "count"]].values.tolist() == [["sxid:fatal", "Xid 74", 1]]


def test_printed_order_keeps_inputs_apart() -> None:
    """Positions are compared within one input's run of events only: another file or another
    boot of a journal starts a run of its own; an event of unknown position (NVML's, in an agent
    journal) keeps its place after the event read before it."""
    a, b = ("a.log", None, "file"), ("b.log", None, "file")
    j1, j2, nvml = ("", "boot1", "kmsg"), ("", "boot2", "kmsg"), (None, None, "nvml")
    places = [(a, 50), (a, 10), (a, None), (b, 5), (a, 0), (j1, 7), (nvml, None), (j1, 3), (j2, 1)]
    # a's first run: 10 before 50, the unknown one after the 10 it follows; b; a again (a run of
    # its own); boot1's run, seq 3 before 7 and the NVML event after 7; boot2
    assert tables.printed_order(places) == [1, 2, 0, 3, 4, 7, 5, 6, 8]


# ---- IB outages -------------------------------------------------------------------------------

OUTAGE_EVENTS = [
    link("2023-10-01T00:00:00", "n1", False), link("2023-10-01T00:00:05", "n1", True),    # a cut
    link("2023-10-02T00:00:00", "n1", False), link("2023-10-02T00:02:00", "n1", True),    # 120 s outage
    event(ev.IB_LINK_OUTAGE, "2023-10-02T00:00:00.400", "n1", "mlx5_0/1", source="journal",  # its copy
          duration_s=119.6, rdma_device="mlx5_0", port=1),
    event(ev.IB_LINK_OUTAGE, "2023-10-03T00:00:00", "n2", "mlx5_1/1", source="journal", duration_s=300.0),
    link("2023-10-04T00:00:00", "n2", False, "mlx5_2/1"), link("2023-10-04T00:00:30", "n2", True, "mlx5_2/1"),
    link("2023-10-05T00:00:00", "n2", False, "mlx5_2/1"),                                  # never back up
    xid("2023-10-05T00:10:00", "n2", 43, "0000:18:00.0"),                                  # the logs go on
    link("2023-10-05T00:09:30", "n1", False, "mlx5_3/1"),                                  # 30 s before the end
]


def test_ib_link_outages() -> None:
    t = tables.ib_link_outages(tables.events_frame(OUTAGE_EVENTS))
    got = [(r["host"], r["device"], r["port"], str(r["down"]), str(r["up"]), r["duration_s"])
           for r in t.to_dict("records")]
    assert got[:2] == [
        ("n1", "mlx5_0", 1, "2023-10-02 00:00:00+00:00", "2023-10-02 00:02:00+00:00", 120.0),
        ("n2", "mlx5_1", 1, "2023-10-03 00:00:00+00:00", "2023-10-03 00:05:00+00:00", 300.0),
    ]
    assert got[2][:5] == ("n2", "mlx5_2", 1, "2023-10-05 00:00:00+00:00", "NaT") and pd.isna(got[2][5])
    assert len(got) == 3  # n1's cut is no outage; mlx5_3 went down too shortly before the end to say
    # the cuts are as before
    assert len(tables.flash_cuts(tables.events_frame(OUTAGE_EVENTS))) == 2


# ---- the report ------------------------------------------------------------------------------

NEW_TABLES = ("beyond_paper_monthly", "pcie_aer_by_severity", "pcie_aer_by_device", "sxid_by_switch",
              "gpu_reset_required", "ib_link_outages")


def test_report_with_the_new_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert report.run(DF, IngestStats(files=1, events=len(DF)), out_dir=str(out)) == 0
    for name in NEW_TABLES:
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists(), name
    t = pd.read_csv(out / "sxid_by_switch.csv")
    assert t["count"].sum() == 5
    md = (out / "report.md").read_text()
    assert "## Beyond the paper - monthly PCIe AER records" in md and "sxid_non_fatal" in md
    assert "<th>gpu_lost_precursor</th>" in (out / "report.html").read_text()
    printed = capsys.readouterr().out
    assert "NVSwitch SXid errors by switch and code" in printed and "nvidia-nvswitch3" in printed
    # the note says where each new kind goes: AMD MCA / GHES memory errors are in Table VII
    note = (out / "beyond_paper_monthly.md").read_text()
    assert "kept out of Tables V-VIII" not in note
    assert "AMD MCA and GHES (firmware-first) memory errors are CPU memory ECC errors: Table VII's " \
           "main_memory_cpu_ecc counts them" in note
    assert "Xid 154 is an Xid: Tables V (Other Failures, named in its xids) and VI count it" in note
    resets = (out / "gpu_reset_required.md").read_text()
    assert "events_by_kind counts only the gpu_reset_required kind" in resets and "differ by design" in resets
    t = pd.read_csv(out / "gpu_reset_required.csv", keep_default_na=False)
    assert sorted(t["source"]) == ["assertion", "xid154", "xid154"]
    aer_dev = pd.read_csv(out / "pcie_aer_by_device.csv", keep_default_na=False)
    fatal = aer_dev[(aer_dev["host"] == "n1") & (aer_dev["severity"] == "fatal")].iloc[0]
    assert (fatal["errors"], fatal["affected_devices"]) == ("CmpltTO (1); SDES (1)", "0000:03:00.0, 0000:03:00.1")


def test_report_without_the_new_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fleet with none of the new kinds: every table is written, empty, as "(none)"."""
    df = tables.events_frame([xid("2024-01-01T00:00:00", "a", 79, "0000:07:00.0"),
                              link("2024-01-01T00:10:00", "a", False), link("2024-01-01T00:10:03", "a", True)])
    out = tmp_path / "out"
    assert report.run(df, IngestStats(files=1, events=len(df)), out_dir=str(out)) == 0
    for name in ("pcie_aer_by_device", "sxid_by_switch", "gpu_reset_required", "ib_link_outages"):
        assert pd.read_csv(out / f"{name}.csv").empty, name
        assert "(none)" in (out / f"{name}.md").read_text()
    assert rows(pd.read_csv(out / "beyond_paper_monthly.csv")) == [("Total", 0, 0, 0, 0, 0, 0, 0)]
    assert rows(pd.read_csv(out / "pcie_aer_by_severity.csv")) == [("Total", 0, 0, 0, 0)]
    assert "(none)" in capsys.readouterr().out


def test_report_window_keeps_outages_by_their_start(tmp_path: Path) -> None:
    df = tables.events_frame(OUTAGE_EVENTS)
    tabs, _ = report.build(df, since=dt.datetime(2023, 10, 3, tzinfo=UTC), until=dt.datetime(2023, 10, 6, tzinfo=UTC))
    t = next(t.data for t in tabs if t.name == "ib_link_outages")
    assert list(t["host"]) == ["n2", "n2"] and list(t["device"]) == ["mlx5_1", "mlx5_2"]

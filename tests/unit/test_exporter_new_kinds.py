"""The agent's series for the NVSwitch, PCIe and reset fault kinds (NVSwitch SXid, PCIe AER records
and recovery, GPU-lost precursors, GPU reset required, GHES/MCA memory errors), from FaultEvents
of the shape the parsers hand over (:mod:`nodewarden.parsing.sxid`, :mod:`nodewarden.parsing.aer`,
:mod:`nodewarden.parsing.stream`), with values from the real
cases of tests/fixtures/reference/real_log_cases.md (S-001, S-101, P-101, W-101, X-040, E-101).

The events are built here, not parsed, so that these tests pin the exporter's contract whatever
the parsers' state; tests/e2e/test_agent_kmsg_new_kinds.py runs the same kinds through the real
parsers and /dev/kmsg.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodewarden import events as ev
from nodewarden.agent import exporter as ex
from nodewarden.agent.exporter import Counters, increments, make_registry
from nodewarden.events import FaultEvent
from nodewarden.nvml import GpuMinors

SXID = "nodewarden_nvswitch_sxid_errors_total"
AER = "nodewarden_pcie_aer_logged_errors_total"
AER_RECOVERY = "nodewarden_pcie_aer_recovery_events_total"
PRECURSOR = "nodewarden_gpu_lost_precursor_events_total"
RESET = "nodewarden_gpu_reset_required_events_total"
EDAC = "nodewarden_edac_logged_errors_total"
MCE = "nodewarden_mce_events_total"
XID = "nodewarden_gpu_xid_errors_total"
EVENTS = "nodewarden_collector_events_total"


@pytest.fixture
def gpu_of(tmp_path: Path) -> GpuMinors:
    """procfs with the P-101 GPU (0000:03:00.0) as minor 0 and an X-040 GB200 GPU (0009:01:00.0)
    as minor 2, laid out as the driver lays out /proc/driver/nvidia/gpus."""
    for bdf, minor in (("0000:03:00.0", 0), ("0009:01:00.0", 2)):
        d = tmp_path / "driver" / "nvidia" / "gpus" / bdf
        d.mkdir(parents=True)
        (d / "information").write_text(f"Model: \t\t NVIDIA GPU\nBus Location: \t {bdf}\nDevice Minor: \t {minor}\n")
    return GpuMinors(tmp_path)


def scrape(events: list[FaultEvent], gpu_of, collector: str = ex.KERNEL_LOG) -> dict[tuple[str, frozenset], float]:
    c = Counters()
    for e in events:
        c.add_all(increments(e, gpu_of, collector))
    text = generate_latest(make_registry(c.snapshot)).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def of(s: dict, name: str) -> dict[frozenset, float]:
    """The samples of one series name, by label set."""
    return {labels: v for (n, labels), v in s.items() if n == name}


def L(**labels: str) -> frozenset:
    return frozenset(labels.items())


# ---- events of the parsers' shapes, values from the real cases ----------------------------------

def sxid_s001() -> FaultEvent:
    # S-001: the three lines of one SXid 22013 error folded (Data / "Non-fatal, Link 44 ..." / Severity)
    return FaultEvent(kind=ev.SXID, message="nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 "
                      "Minion Link DLREQ interrupt", raw="", device="0000:04:00.0", code=22013, category="non_fatal",
                      attrs={"switch": "nvidia-nvswitch3", "switch_index": 3, "pci_bus_id": "0000:04:00.0",
                             "sxid": 22013, "severity": "non_fatal", "severity_source": "text", "unit": "minion",
                             "description": "Minion Link DLREQ interrupt", "link": 44, "severity_level": 0,
                             "engine_instance": 44, "subengine_instance": 0,
                             "data": [0x2b, 0x2b, 0, 0x2b, 0x80005302, 0, 0, 0, 0], "lines": 3})


def sxid_s101() -> FaultEvent:
    # S-101: only the Data line of SXid 12028 on nvidia-nvswitch1 0000:84:00.0; severity from the catalog
    return FaultEvent(kind=ev.SXID, message="", raw="", device="0000:84:00.0", code=12028, category="non_fatal",
                      attrs={"switch": "nvidia-nvswitch1", "switch_index": 1, "pci_bus_id": "0000:84:00.0",
                             "sxid": 12028, "severity": "non_fatal", "severity_source": "catalog", "unit": "egress",
                             "description": None, "data": [0x1c0, 0xbd5c8a, 0x500, 0x64, 0, 0x40008000, 0x5a001100, 0, 0],
                             "lines": 1})


def aer_p101() -> FaultEvent:
    # P-101: "Multiple Uncorrected (Fatal) error received: 0000:00:03.0" on the Broadwell root port
    # 8086:6f08, status/mask 00004020/00000000, [5] SDES, [14] CmpltTO (First); the GPU 0000:03:00.0
    # and its HDA function 0000:03:00.1 could not recover: a GPU-lost precursor.
    return FaultEvent(kind=ev.PCIE_AER, message="", raw="", device="0000:00:03.0", category="gpu_lost_precursor",
                      attrs={"severity": "fatal", "severity_text": "Uncorrected (Fatal)", "multiple": True,
                             "type": "Transaction Layer", "agent": "Requester ID", "reporting_device": "0000:00:03.0",
                             "source_device": "0000:00:03.0", "pci_bus_id": "0000:00:03.0", "driver": "pcieport",
                             "vendor_id": 0x8086, "device_id": 0x6F08, "status": 0x4020, "mask": 0,
                             "errors": [{"bit": 5, "name": "SDES", "first": False},
                                        {"bit": 14, "name": "CmpltTO", "first": True}],
                             "first_error": "CmpltTO", "affected_devices": ["0000:03:00.1", "0000:03:00.0"],
                             "via": "kernel"})


def recovery(bdf: str, driver: str, outcome: str, in_record: bool = True) -> FaultEvent:
    # the parser's shape: a line that joined its AER record has its outcome (the record carries the
    # precursor); an nvidia "can't recover"/"recovery failed" with no record is the precursor
    precursor = not in_record and driver == "nvidia" and outcome in ("no_error_detected_callback", "recovery_failed")
    return FaultEvent(kind=ev.PCIE_AER_RECOVERY, message="", raw="", device=bdf,
                      category="gpu_lost_precursor" if precursor else outcome,
                      attrs={"outcome": outcome, "driver": driver, "pci_bus_id": bdf})


def p101_recoveries() -> list[FaultEvent]:
    # P-101's recovery lines, in order: 2x (nvidia can't recover, snd_hda_intel can't recover),
    # 2x pcieport device recovery failed, 1x Root Port link has been reset. The first three
    # come before the record's "received" line (an earlier error's recovery, its record not in
    # the excerpt): no record to join, so that nvidia line is a precursor of its own; the others
    # joined the record.
    return [recovery("0000:03:00.0", "nvidia", "no_error_detected_callback", in_record=False),
            recovery("0000:03:00.1", "snd_hda_intel", "no_error_detected_callback", in_record=False),
            recovery("0000:00:03.0", "pcieport", "recovery_failed", in_record=False),
            recovery("0000:03:00.0", "nvidia", "no_error_detected_callback"),
            recovery("0000:03:00.1", "snd_hda_intel", "no_error_detected_callback"),
            recovery("0000:00:03.0", "pcieport", "link_reset"),
            recovery("0000:00:03.0", "pcieport", "recovery_failed")]


def reset_w101() -> FaultEvent:
    # W-101 node A: "Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @
    # kernel_channel.c:2827", no PCI id
    return FaultEvent(kind=ev.GPU_RESET_REQUIRED, message="", raw="", category="gpu_reset_required",
                      attrs={"action": "gpu_reset", "status": 0x62, "status_name": "NV_ERR_RESET_REQUIRED",
                             "location": "kernel_channel.c:2827", "pci_bus_id": None})


def xid154(bdf: str, frm: tuple[int, str, str], to: tuple[int, str, str], with_name: bool = True) -> FaultEvent:
    attrs = {"pci_bus_id": bdf, "recovery_from": frm[0], "recovery_from_name": frm[1], "recovery_to": to[0],
             "recovery_to_name": to[1]}
    if with_name:
        attrs.update(recovery_action=to[2], recovery_action_from=frm[2])
    return FaultEvent(kind=ev.XID, message="", raw="", device=bdf, code=154, category="other", attrs=attrs)


NONE = (0x0, "None", "none")
DRAIN_AND_RESET = (0x4, "Drain and Reset", "drain_and_reset")
GPU_RESET = (0x1, "GPU Reset Required", "gpu_reset")


def ecc_e101_mca_edac() -> FaultEvent:
    # E-101: the AMD MCA decode (MC18, CPU 1, status 0xdc2040000000011b, Error Addr 0x313c7a020)
    # folded into its EDAC line "EDAC MC0: 1 CE Cannot decode normalized address on mc#0csrow#1channel#3"
    return FaultEvent(kind=ev.CPU_ECC, message="", raw="", device="mc0/mc#0csrow#1channel#3", category="corrected",
                      attrs={"mc": 0, "count": 1, "type": "corrected", "edac_type": "CE", "label": "mc#0csrow#1channel#3",
                             "csrow": 1, "channel": 3, "page": 0, "offset": 0, "via": "edac", "mca_bank": 18,
                             "mca_cpu": 1, "mca_status": 0xDC2040000000011B, "mca_addr": 0x313C7A020,
                             "mca_ipid": 0x9600350F00, "mca_syndrome": 0x9FEC08000A800A01, "hardware_id": 0x96,
                             "mca_status_flags": ["Over", "CE", "MiscV", "AddrV", "SyndV", "CECC"],
                             "address": 0x313C7A020})


def ecc_without_mc(via: str, typ: str, label: str | None = None) -> FaultEvent:
    attrs = {"type": typ, "via": via, "count": 1, "physical_address": 0x313C7A020}
    if label is not None:
        attrs["label"] = label
    return FaultEvent(kind=ev.CPU_ECC, message="", raw="", device=None, category=typ, attrs=attrs)


# ---- tests ---------------------------------------------------------------------------------------

def test_sxid_one_series_per_switch_code_and_severity(gpu_of) -> None:
    s = scrape([sxid_s001(), sxid_s101(), sxid_s001()], gpu_of)
    assert of(s, SXID) == {
        L(switch="nvidia-nvswitch3", pci_bus_id="0000:04:00.0", sxid="22013", severity="non_fatal"): 2,
        L(switch="nvidia-nvswitch1", pci_bus_id="0000:84:00.0", sxid="12028", severity="non_fatal"): 1,
    }
    assert s[(EVENTS, L(collector="kernel_log", kind="sxid"))] == 3
    assert of(s, XID) == {}  # "SXid (" is never an Xid


def test_sxid_severity_outside_its_set_is_unknown_and_a_code_that_is_no_int_is_no_series(gpu_of) -> None:
    odd = sxid_s101()
    odd.attrs["severity"] = "Nonfatal"  # not one of fatal/non_fatal/unknown
    nocode = sxid_s101()
    nocode.attrs["sxid"] = "12028"
    nocode.code = None
    s = scrape([odd, nocode], gpu_of)
    assert of(s, SXID) == {L(switch="nvidia-nvswitch1", pci_bus_id="0000:84:00.0", sxid="12028", severity="unknown"): 1}
    assert s[(EVENTS, L(collector="kernel_log", kind="sxid"))] == 2


def test_p101_aer_record_recoveries_and_gpu_lost_precursors(gpu_of) -> None:
    s = scrape([aer_p101(), *p101_recoveries()], gpu_of)
    assert of(s, AER) == {L(pci_bus_id="0000:00:03.0", severity="fatal"): 1}
    assert of(s, AER_RECOVERY) == {
        L(pci_bus_id="0000:03:00.0", outcome="no_error_detected_callback"): 2,
        L(pci_bus_id="0000:03:00.1", outcome="no_error_detected_callback"): 2,
        L(pci_bus_id="0000:00:03.0", outcome="recovery_failed"): 2,
        L(pci_bus_id="0000:00:03.0", outcome="link_reset"): 1,
    }
    # the fatal record is about the root port; the GPU it precedes is the affected function the
    # nvidia driver knows (minor 0), not the HDA function listed first. One precursor per error:
    # the record (fatal_aer; its nvidia "can't recover" is the record's) and the nvidia "can't
    # recover" before it, whose record the excerpt lacks
    assert of(s, PRECURSOR) == {
        L(gpu="0", pci_bus_id="0000:03:00.0", reason="fatal_aer"): 1,
        L(gpu="0", pci_bus_id="0000:03:00.0", reason="aer_no_error_detected_callback"): 1,
    }
    assert s[(EVENTS, L(collector="kernel_log", kind="pcie_aer"))] == 1
    assert s[(EVENTS, L(collector="kernel_log", kind="pcie_aer_recovery"))] == 7


def test_aer_on_the_gpu_itself_and_on_other_functions(gpu_of) -> None:
    on_gpu = aer_p101()
    on_gpu.device = "0000:03:00.0"
    on_gpu.attrs.update(pci_bus_id="0000:03:00.0", driver="nvidia", vendor_id=0x10DE, device_id=0x2330,
                        severity="non_fatal", severity_text="Uncorrected (Non-Fatal)", affected_devices=[])
    corrected = FaultEvent(kind=ev.PCIE_AER, message="", raw="", device="0000:1a:00.0", category="corrected",
                           attrs={"severity": "corrected", "severity_text": "Corrected", "type": "Physical Layer",
                                  "agent": "Receiver ID", "pci_bus_id": "0000:1a:00.0", "driver": "mlx5_core",
                                  "vendor_id": 0x15B3, "errors": [{"bit": 0, "name": "RxErr", "first": True}],
                                  "via": "kernel"})
    fatal_nic = FaultEvent(kind=ev.PCIE_AER, message="", raw="", device="0000:1a:00.0", category="fatal",
                           attrs={"severity": "fatal", "pci_bus_id": "0000:1a:00.0", "driver": "mlx5_core",
                                  "vendor_id": 0x15B3, "via": "kernel"})
    unknown_gpu = aer_p101()
    unknown_gpu.attrs["affected_devices"] = ["0000:41:00.0", "0000:41:00.1"]  # no minor known: the first printed
    s = scrape([on_gpu, corrected, fatal_nic, unknown_gpu], gpu_of)
    assert of(s, AER) == {L(pci_bus_id="0000:03:00.0", severity="non_fatal"): 1,
                          L(pci_bus_id="0000:1a:00.0", severity="corrected"): 1,
                          L(pci_bus_id="0000:1a:00.0", severity="fatal"): 1,
                          L(pci_bus_id="0000:00:03.0", severity="fatal"): 1}
    assert of(s, PRECURSOR) == {L(gpu="0", pci_bus_id="0000:03:00.0", reason="non_fatal_aer"): 1,
                                L(gpu="", pci_bus_id="0000:41:00.0", reason="fatal_aer"): 1}


def test_ghes_aer_record_counts_like_a_kernel_one(gpu_of) -> None:
    ghes = FaultEvent(kind=ev.PCIE_AER, message="", raw="", device="0000:9b:00.0", category="gpu_lost_precursor",
                      attrs={"severity": "fatal", "pci_bus_id": "0000:9b:00.0", "vendor_id": 0x10DE,
                             "device_id": 0x2330, "via": "ghes"})
    s = scrape([ghes], gpu_of)
    assert of(s, AER) == {L(pci_bus_id="0000:9b:00.0", severity="fatal"): 1}
    assert of(s, PRECURSOR) == {L(gpu="", pci_bus_id="0000:9b:00.0", reason="fatal_aer"): 1}


def test_reset_required_assertion_and_xid_154(gpu_of) -> None:
    # X-040: 0009:01:00 None -> Drain and Reset; 0019:01:00 Drain and Reset -> GPU Reset Required;
    # and a change back to None (no reset needed: the Xid only)
    events = [reset_w101(), xid154("0009:01:00.0", NONE, DRAIN_AND_RESET),
              xid154("0019:01:00.0", DRAIN_AND_RESET, GPU_RESET), xid154("0009:01:00.0", DRAIN_AND_RESET, NONE)]
    s = scrape(events, gpu_of)
    assert of(s, RESET) == {L(gpu="", pci_bus_id="", action="gpu_reset"): 1,
                            L(gpu="2", pci_bus_id="0009:01:00.0", action="drain_and_reset"): 1,
                            L(gpu="", pci_bus_id="0019:01:00.0", action="gpu_reset"): 1}
    assert of(s, XID) == {L(gpu="2", pci_bus_id="0009:01:00.0", xid="154", category="other"): 2,
                          L(gpu="", pci_bus_id="0019:01:00.0", xid="154", category="other"): 1}
    assert s[(EVENTS, L(collector="kernel_log", kind="gpu_reset_required"))] == 1
    assert s[(EVENTS, L(collector="kernel_log", kind="xid"))] == 3


def test_xid_154_without_the_decoded_name_uses_nvmls_numbers(gpu_of) -> None:
    # nvml.h nvmlDeviceGpuRecoveryAction_t: 0 none, 1 gpu reset, 2 node reboot, 3 drain p2p, 4 drain and reset
    events = [xid154("0009:01:00.0", NONE, (0x2, "Node Reboot Required", "node_reboot"), with_name=False),
              xid154("0009:01:00.0", NONE, (0x3, "Drain P2P", "drain_p2p"), with_name=False),
              xid154("0009:01:00.0", NONE, (0x9, "Something New", "x"), with_name=False),
              xid154("0009:01:00.0", GPU_RESET, NONE, with_name=False)]
    s = scrape(events, gpu_of)
    assert of(s, RESET) == {L(gpu="2", pci_bus_id="0009:01:00.0", action="node_reboot"): 1,
                            L(gpu="2", pci_bus_id="0009:01:00.0", action="drain_p2p"): 1,
                            L(gpu="2", pci_bus_id="0009:01:00.0", action="unknown"): 1}


def test_xid_154_of_a_number_nvml_lacks_falls_back_to_the_printed_name(gpu_of) -> None:
    # the parser's decoder (nodewarden.parsing.xid.recovery_action): an unknown number, a known name
    e = xid154("0009:01:00.0", NONE, (0x9, "Node Reboot Required", "node_reboot"), with_name=False)
    assert of(scrape([e], gpu_of), RESET) == {L(gpu="2", pci_bus_id="0009:01:00.0", action="node_reboot"): 1}


def test_reset_required_names_the_gpu_when_the_line_has_its_pci_id(gpu_of) -> None:
    e = reset_w101()
    e.attrs["pci_bus_id"] = "0009:01:00.0"
    odd = reset_w101()
    odd.attrs["action"] = "Reset Required!"  # not an action name: bounded to unknown
    s = scrape([e, odd], gpu_of)
    assert of(s, RESET) == {L(gpu="2", pci_bus_id="0009:01:00.0", action="gpu_reset"): 1,
                            L(gpu="", pci_bus_id="", action="unknown"): 1}


def test_memory_errors_via_edac_ghes_and_mca(gpu_of) -> None:
    events = [ecc_e101_mca_edac(),
              ecc_without_mc("ghes", "uncorrected"),
              ecc_without_mc("mca", "deferred"),
              ecc_without_mc("ghes", "corrected", label="DIMM_A1"),
              ecc_without_mc("mca", "deferred")]
    s = scrape(events, gpu_of)
    assert of(s, EDAC) == {L(controller="mc0", dimm="mc#0csrow#1channel#3", type="corrected"): 1,
                           L(controller="", dimm="", type="uncorrected"): 1,
                           L(controller="", dimm="", type="deferred"): 2,
                           L(controller="", dimm="DIMM_A1", type="corrected"): 1}
    assert s[(EVENTS, L(collector="kernel_log", kind="cpu_ecc"))] == 5


def test_a_memory_error_of_no_known_severity_is_unknown_not_corrected(gpu_of) -> None:
    # a GHES memory section whose CPER severity was not printed or printed "unknown"
    # (cper_severity_str past its table): the parser's type "unknown", and a type outside the set
    s = scrape([ecc_without_mc("ghes", "unknown"), ecc_without_mc("ghes", "recoverable")], gpu_of)
    assert of(s, EDAC) == {L(controller="", dimm="", type="unknown"): 2}


def test_cpu_ecc_without_mc_or_known_via_stays_out_of_the_edac_series(gpu_of) -> None:
    e = ecc_without_mc("something", "corrected")
    s = scrape([e], gpu_of)
    assert of(s, EDAC) == {}
    assert s[(EVENTS, L(collector="kernel_log", kind="cpu_ecc"))] == 1


def test_edac_counts_and_types_as_before(gpu_of) -> None:
    e = ecc_e101_mca_edac()
    e.attrs.update(count=16384)  # E-102: 16384 CE in one line
    fatal = ecc_e101_mca_edac()
    fatal.attrs.update(type="uncorrected", count=2)
    s = scrape([e, fatal], gpu_of)
    assert of(s, EDAC) == {L(controller="mc0", dimm="mc#0csrow#1channel#3", type="corrected"): 16384,
                           L(controller="mc0", dimm="mc#0csrow#1channel#3", type="uncorrected"): 2}


def test_deferred_mce(gpu_of) -> None:
    mce = FaultEvent(kind=ev.MCE, message="", raw="", device="cpu1/bank5", category="deferred",
                     attrs={"type": "deferred", "bank": 5, "cpu": 1})
    s = scrape([mce], gpu_of)
    assert of(s, MCE) == {L(type="deferred"): 1}


def test_polled_collectors_events_of_the_new_kinds_count_only_as_events(gpu_of) -> None:
    nvml = FaultEvent(kind=ev.GPU_RESET_REQUIRED, message="", raw="", source="nvml", device="0000:03:00.0",
                      attrs={"action": "gpu_reset", "pci_bus_id": "0000:03:00.0"})
    change = FaultEvent(kind=ev.GPU_RECOVERY_ACTION, message="", raw="", source="nvml", device="0000:03:00.0",
                        attrs={"action": "gpu_reset", "previous_action": "none", "pci_bus_id": "0000:03:00.0"})
    sysfs = FaultEvent(kind=ev.PCIE_AER, message="", raw="", source="sysfs", device="0000:9b:00.0",
                       attrs={"severity": "fatal", "pci_bus_id": "0000:9b:00.0", "via": "sysfs", "count": 1})
    s = scrape([nvml, change], gpu_of, collector="nvml")
    assert of(s, RESET) == {}
    assert s[(EVENTS, L(collector="nvml", kind="gpu_reset_required"))] == 1
    assert s[(EVENTS, L(collector="nvml", kind="gpu_recovery_action"))] == 1
    s = scrape([sysfs], gpu_of, collector="pcie")
    assert of(s, AER) == {} and of(s, PRECURSOR) == {}
    assert s[(EVENTS, L(collector="pcie", kind="pcie_aer"))] == 1


def test_driver_assertion_counts_as_an_event_only(gpu_of) -> None:
    a = FaultEvent(kind=ev.DRIVER_ASSERTION, message="", raw="",
                   attrs={"expression": "0", "location": "kernel_gsp.c:1476"})  # W-101 node B
    s = scrape([a], gpu_of)
    assert of(s, RESET) == {}
    assert s[(EVENTS, L(collector="kernel_log", kind="driver_assertion"))] == 1


def test_new_series_persist_across_a_restart(gpu_of) -> None:
    c = Counters()
    for e in [sxid_s001(), aer_p101(), *p101_recoveries(), reset_w101(), xid154("0009:01:00.0", NONE, DRAIN_AND_RESET),
              ecc_without_mc("mca", "deferred")]:
        c.add_all(increments(e, gpu_of))
    items = c.to_json()
    names = {i["name"] for i in items}
    assert {SXID, AER, AER_RECOVERY, PRECURSOR, RESET, EDAC}.issubset(names)
    d = Counters()
    assert d.load_json(items) == len(items)
    assert d.snapshot() == c.snapshot()


def test_every_new_family_is_exported_before_its_first_event() -> None:
    text = generate_latest(make_registry(Counters().snapshot)).decode()
    for name in (SXID, AER, AER_RECOVERY, PRECURSOR, RESET):
        base = name[: -len("_total")]
        assert f"# TYPE {base} counter" in text or f"# TYPE {name} counter" in text, name
    fams = {f.name: f for f in ex.FAMILIES}
    assert fams[SXID].labels == ("switch", "pci_bus_id", "sxid", "severity")
    assert fams[AER].labels == ("pci_bus_id", "severity")
    assert fams[AER_RECOVERY].labels == ("pci_bus_id", "outcome")
    assert fams[PRECURSOR].labels == ("gpu", "pci_bus_id", "reason")
    assert fams[RESET].labels == ("gpu", "pci_bus_id", "action")
    assert all(fams[n].persist for n in (SXID, AER, AER_RECOVERY, PRECURSOR, RESET))


def test_the_module_table_documents_every_family() -> None:
    doc = ex.__doc__ or ""
    for fam in ex.FAMILIES:
        short = fam.name[len("nodewarden_"):]
        assert f"``{short}" in doc, short


# ---- through the follower: an SXid error counted once across a restart -----------------------

class _Records:
    """A /dev/kmsg stand-in (KmsgReader's interface): raw records, read once."""

    boot_id = "6f0c2a1e-0000-4000-8000-000000000011"
    overruns = 0

    def __init__(self, records: list[str]) -> None:
        self.records = list(records)

    def read_available(self, limit: int = 100_000) -> list[str]:
        out, self.records = self.records[:limit], self.records[limit:]
        return out

    def wait(self, timeout: float) -> bool:
        return bool(self.records)


def _sxid_group(seq: int, usec: int, severity: str) -> list[str]:
    """S-001's three lines of one SXid 22013 error, as raw /dev/kmsg records (Data first)."""
    head = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, "
    return [f"3,{seq},{usec},-;{head}Data {{0x0000002b, 0x0000002b, 0x00000000, 0x0000002b, 0x80005302, "
            "0x00000000, 0x00000000, 0x00000000, 0x00000000}",
            f"3,{seq + 1},{usec + 3000},-;{head}{severity}, Link 44 Minion Link DLREQ interrupt",
            f"3,{seq + 2},{usec + 5000},-;{head}Severity 0 Engine instance 44 Sub-engine instance 00"]


def test_sxid_errors_in_quick_succession_are_counted_once_when_state_json_is_lost(tmp_path: Path) -> None:
    import datetime as dt
    import os

    from nodewarden.agent import state as st
    from nodewarden.agent.follower import KmsgFollower

    records = (_sxid_group(10, 5_000_000, "Non-fatal") + _sxid_group(13, 6_000_000, "Fatal")
               + _sxid_group(16, 6_800_000, "Non-fatal"))  # three errors within 2 s
    boot = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.timezone.utc)
    store = st.StateStore(tmp_path)
    live = _Records([])
    c = Counters()
    f = KmsgFollower(live, c, store, host="n", gpu_of=lambda _p: "", boot_time=boot, position=None, clock=lambda: 100.0)
    f.catch_up()
    for i in range(0, len(records), 3):  # live: each error's lines in one read, the log idle in between
        live.records = records[i:i + 3]
        f.poll(0.01)
        f.poll(0.01)
    f.commit(force=True)

    def sxid(counters: Counters) -> dict[str, float]:
        return {k[1][3]: v for k, v in counters.snapshot().items() if k[0] == ex.SXID.name}

    assert sxid(c) == {"non_fatal": 2, "fatal": 1}
    os.unlink(tmp_path / "state.json")  # lost: the journal is the authority past the (absent) cursor
    c2 = Counters()
    f2 = KmsgFollower(_Records(records), c2, st.StateStore(tmp_path), host="n", gpu_of=lambda _p: "", boot_time=boot,
                      position=None, clock=lambda: 100.0)
    f2.catch_up()
    f2.poll(0.01)
    assert sxid(c2) == {"non_fatal": 2, "fatal": 1}

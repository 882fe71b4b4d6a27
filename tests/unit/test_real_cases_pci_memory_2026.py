"""Real cases of the reference corpus's "More cases (2026-12)" section for the PCIe and memory
kinds: P-101 (PCIe AER on a GPU's root port, ``dmesg -H`` deltas), E-101 (AMD MCA decode folded
into its EDAC line), E-102 (skx_edac 16384-CE and patrol-scrub records), and E-004's firmware-first
GHES PCIe record.

Inputs are ``tests/fixtures/real_cases/<ID>.log`` (verbatim from the corpus). Expected values are
written from the corpus text ("parser should extract") and the kernel's format strings, never
from parser output; hex values are written as the lines print them.
"""

from __future__ import annotations

import pytest

from nodewarden.parsing.envelope import TimeContext, parse_line
from test_real_cases import REFERENCE, check_events, load_case, parse_case

CTX = TimeContext.make(tz="UTC", reference=REFERENCE)
ROOT_PORT, GPU, HDA = "0000:00:03.0", "0000:03:00.0", "0000:03:00.1"


def REC(device: str, driver: str, outcome: str, category: str, raw_time: str, **kw) -> dict:  # noqa: N802
    """A pcie_aer_recovery event of P-101 (drivers/pci/pcie/err.c, aer.c aer_root_reset)."""
    return dict(kind="pcie_aer_recovery", device=device, pci_bus_id=device, driver=driver, outcome=outcome,
                category=category, raw_time=raw_time, time=None, time_kind="none", monotonic=None, **kw)


P101 = [
    # The first three lines end a record the excerpt does not hold: recovery events on their own
    # (the nvidia line, joined to no record, is a precursor: the lost record's).
    REC(GPU, "nvidia", "no_error_detected_callback", "gpu_lost_precursor", "+0.000844"),
    REC(HDA, "snd_hda_intel", "no_error_detected_callback", "no_error_detected_callback", "+0.000001"),
    REC(ROOT_PORT, "pcieport", "recovery_failed", "recovery_failed", "+0.000008"),
    # One fatal AER record: received line, PCIe Bus Error, device line, two bit lines; the nvidia
    # function could not recover (no AER handler): a GPU-lost precursor though the port is Intel's.
    dict(kind="pcie_aer", device=ROOT_PORT, pci_bus_id=ROOT_PORT, severity="fatal",
         severity_text="Uncorrected (Fatal)", multiple=True, type="Transaction Layer", agent="Requester ID",
         reporting_device=ROOT_PORT, source_device=ROOT_PORT, driver="pcieport", vendor_id=0x8086,
         device_id=0x6f08, status=0x00004020, mask=0x00000000,
         errors=[{"bit": 5, "name": "SDES", "first": False}, {"bit": 14, "name": "CmpltTO", "first": True}],
         first_error="CmpltTO", affected_devices=[GPU, HDA], via="kernel", category="gpu_lost_precursor",
         time=None, time_kind="none", raw_time="+0.000001"),
    # The record's recovery lines joined it: their category is their outcome (the record is the
    # precursor: one error, one precursor).
    REC(GPU, "nvidia", "no_error_detected_callback", "no_error_detected_callback", "+0.000921"),
    REC(HDA, "snd_hda_intel", "no_error_detected_callback", "no_error_detected_callback", "+0.000002"),
    REC(ROOT_PORT, "pcieport", "link_reset", "link_reset", "+1.050439", port="Root", reset_status=0),
    REC(ROOT_PORT, "pcieport", "recovery_failed", "recovery_failed", "+0.000041"),
]

E101 = [  # one event: the EDAC line, carrying the MCA decode printed before it
    dict(kind="cpu_ecc", via="edac", mc=0, csrow=1, channel=3, count=1, type="corrected", edac_type="CE",
         label="mc#0csrow#1channel#3", device="mc0/mc#0csrow#1channel#3", category="corrected",
         operation=None, description="Cannot decode normalized address", page=0x0, offset=0x0, grain=64,
         syndrome=0x800, mca_bank=18, mca_cpu=1, mca_status=0xdc2040000000011b, mca_addr=0x0000000313c7a020,
         mca_ipid=0x0000009600350f00, mca_syndrome=0x9fec08000a800a01, hardware_id=0x96,
         mca_status_flags=["Over", "CE", "MiscV", "AddrV", "SyndV", "CECC"], mca_family=0x17, mca_model=0x31,
         mca_stepping=0x0, mca_bank_name="Unified Memory Controller", mca_ext_error_code=0,
         address=0x313c7a020, monotonic=1533534.946635),
]

E102_DIMM = dict(label="CPU_SrcID#0_MC#0_Chan#0_DIMM#1", device="mc0/CPU_SrcID#0_MC#0_Chan#0_DIMM#1", socket=0,
                 imc=0, channel=0, dimm=1, flags=["OVERFLOW"], type="corrected", edac_type="CE")
E102 = [
    dict(kind="cpu_ecc", mc=0, count=16384, operation="memory read", page=0x20edba9, offset=0x4c0, grain=32,
         syndrome=0x0, address=0x20edba94c0, mce_cpu=0, mce_mcg_status=0x0, mce_bank=7,
         mce_status=0xdc10000001010090, mce_tsc=0x0, mce_addr=0x20edba94c0, mce_misc=0x200006c307e01086,
         mce_cpu_vendor=0, mce_cpuid=0x50654, mce_time=1701869556, mce_socket=0, mce_apic=0x0,
         retry_rd_err_log=[0x0000a20d, 0x00000000, 0x0000ffff, 0x0476f10f, 0x0000fb4b],
         correrrcnt=[0x0000, 0x0000, 0x0000, 0x0000, 0xa9b4, 0x0000, 0x0000, 0x0000],
         time="2023-12-06T21:24:46Z", **E102_DIMM),
    dict(kind="cpu_ecc", mc=0, count=78, operation="memory scrubbing", page=0xd6db0b, offset=0x8c0, grain=32,
         address=0xd6db0b8c0, mce_bank=13, mce_status=0xcc001380000800c0, mce_addr=0xd6db0b8c0,
         mce_misc=0x12213fffffffc086, retry_rd_err_log=[0x0000a20d, 0x00000000, 0xffff0000, 0x0434f10f, 0x000091dd],
         correrrcnt=[0x0000, 0x0000, 0x0000, 0x0000, 0xb424, 0x0000, 0x0000, 0x0000], **E102_DIMM),
]

E004 = [
    dict(kind="cpu_ecc", mc=3, count=1, type="uncorrected", label="CPU_SrcID#1_MC#1_Chan#2_DIMM#0",
         page=0xb757589, offset=0x140, address=0xb757589140, flags=["OVERFLOW"], monotonic=11189.970968),
    # GHES record {1}: its five lines interleaved with an mce: and an EDAC line of another error.
    dict(kind="pcie_aer", via="ghes", ghes_record=1, ghes_source=1, ghes_severity="recoverable",
         severity="non_fatal", severity_text="recoverable", device="0000:5e:00.0", pci_bus_id="0000:5e:00.0",
         vendor_id=0x144d, device_id=0xa808, category="non_fatal", type=None, agent=None, errors=[],
         monotonic=11219.196524),
]

CASES = [
    pytest.param("P-101", P101, id="P-101 fatal AER, nvidia can't recover, dmesg -H deltas"),
    pytest.param("E-101", E101, id="E-101 AMD UMC MCA decode folded into its EDAC line"),
    pytest.param("E-102", E102, id="E-102 skx 16384 CE read and 78 CE scrub"),
    pytest.param("E-004", E004, id="E-004 skx UE and an interleaved GHES PCIe record"),
]


@pytest.mark.parametrize("case, expected", CASES)
def test_case(case: str, expected: list[dict]) -> None:
    events = parse_case(case)
    # raw_time (the stamp as printed) is an event field the shared view leaves out
    assert [e.raw_time for e in events][:len(expected)] == [x.get("raw_time", e.raw_time)
                                                            for x, e in zip(expected, events)]
    check_events(events, [{k: v for k, v in x.items() if k != "raw_time"} for x in expected])


def test_p101_lines_are_kernel_records_with_delta_stamps_and_no_time() -> None:
    # "[  +0.000844]" is a delta from the line before: no absolute time, the text after it is the message.
    rec = parse_line(load_case("P-101")[0], CTX)
    assert (rec.fmt, rec.time, rec.time_kind, rec.monotonic, rec.raw_time) == ("dmesg_delta", None, "none", None,
                                                                               "+0.000844")
    assert rec.message == "nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)"


def test_p101_status_register_holds_the_printed_bits() -> None:
    # error status 0x00004020 = bits 5 (SDES) and 14 (CmpltTO), the two bit lines printed.
    (aer,) = [e for e in parse_case("P-101") if e.kind == "pcie_aer"]
    assert aer.attrs["status"] == (1 << 5) | (1 << 14)


def test_e101_severity_comes_from_the_status_register() -> None:
    # 0xdc2040000000011b: UC (bit 61) clear, Deferred (bit 44) clear -> corrected; CECC is bits 46:45 = 2.
    status = 0xdc2040000000011b
    assert (status >> 61 & 1, status >> 44 & 1, status >> 45 & 3) == (0, 0, 2)
    (e,) = parse_case("E-101")
    assert e.attrs["type"] == "corrected" and e.attrs["mca_status"] == status


@pytest.mark.parametrize("index, count", [(0, 16384), (1, 78)])
def test_e102_count_is_the_mci_status_corrected_error_count(index: int, count: int) -> None:
    # The corpus: count = MCi_STATUS[52:38] of the machine check decoded before the EDAC line.
    e = parse_case("E-102")[index]
    assert e.attrs["count"] == count == (e.attrs["mce_status"] >> 38) & 0x7FFF


def test_e102_correrrcnt_rank_counters_are_hex() -> None:
    a, b = parse_case("E-102")
    assert (a.attrs["correrrcnt"][4], b.attrs["correrrcnt"][4]) == (43444, 46116)

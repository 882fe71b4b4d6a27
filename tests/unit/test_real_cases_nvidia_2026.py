"""Real cases of the reference corpus's "More cases (2026-12)" section (and S-001) for the NVIDIA
kinds: NVSwitch SXid, reset-required assertions, Xid details, hex PCI domains, scanner output.

Inputs are ``tests/fixtures/real_cases/<ID>.log`` (verbatim from the corpus). Expected values are
written from the corpus text ("parser should extract") and the driver's format strings, never
from parser output; hex words are written as the lines print them.
"""

from __future__ import annotations

import re

import pytest

from nodewarden.parsing.envelope import TimeContext, parse_line
from nodewarden.parsing.pci import normalize_pci
from nodewarden.parsing.stream import KernelLogParser
from test_real_cases import REFERENCE, check_events, load_case, parse_case

CTX = TimeContext.make(tz="UTC", reference=REFERENCE)


def SX(**kw) -> dict:  # noqa: N802 - reads like the table it builds
    return {"kind": "sxid", **kw}


def X(**kw) -> dict:  # noqa: N802
    return {"kind": "xid", **kw}


# the four (GPC, TPC, SM) locations and the ESR words the corpus lists.
ESR_SM = [0x80f0017, 0x20, 0x1f81fb60, 0x1174]


def esr(base: int) -> list[list[int]]:
    """The ESR (address, value) pairs of one X-101 line: ``0x..b0=0x80f0017 0x..b4=0x20 0x..a8=... 0x..ac=...``."""
    return [[base + 0x0, ESR_SM[0]], [base + 0x4, ESR_SM[1]], [base - 0x8, ESR_SM[2]], [base - 0x4, ESR_SM[3]]]


P70 = "0000:70:00.0"
T101 = "2026-06-24T15:44:20Z"  # dmesg -T, no zone given: read as UTC here

CASES = [
    pytest.param("S-101", [
        # Only the Data line of the 12028 group: severity from the SXid catalog (FM guide:
        # non-fatal), no description, no link. The JSON line re-prints the same kernel record.
        SX(xid=12028, sxid=12028, switch="nvidia-nvswitch1", switch_index=1, pci_bus_id="0000:84:00.0",
           device="0000:84:00.0", severity="non_fatal", severity_source="catalog", category="non_fatal",
           unit="egress", description=None, link=None, severity_level=None, lines=1,
           data=[0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100,
                 0x00000000, 0x00000000],
           time="2025-01-25T10:34:54.859532Z", time_kind="wall"),
    ], id="S-101 SXid Data line, plain and inside a zap JSON line field"),
    pytest.param("S-001", [  # the three lines of one 22013 are one event
        SX(xid=22013, sxid=22013, switch="nvidia-nvswitch3", switch_index=3, pci_bus_id="0000:04:00.0",
           severity="non_fatal", severity_source="text", severity_text="Non-fatal", link=44,
           description="Minion Link DLREQ interrupt", severity_level=0, engine_instance=44,
           subengine_instance=0, unit="minion", lines=3, monotonic=38.175561,
           data=[0x0000002b, 0x0000002b, 0x00000000, 0x0000002b, 0x80005302, 0x00000000, 0x00000000,
                 0x00000000, 0x00000000]),
    ], id="S-001 SXid 22013 Data/description/Severity"),
    pytest.param("X-101", [  # 8 records, all Xid 13; no pid/name; "MMU Fault" is not Xid 31
        X(xid=13, pci_bus_id=P70, pid=None, process=None, gpc=1, tpc=1, sm=1, sm_exception="warp",
          sm_error="MMU Fault", code_text_mismatch=None, mmu_engine=None, time=T101, time_kind="wall"),
        X(xid=13, pci_bus_id=P70, pid=None, process=None, esr=esr(0x5167b0), gpc=None, time=T101),
        X(xid=13, pci_bus_id=P70, gpc=2, tpc=7, sm=1, sm_error="MMU Fault", code_text_mismatch=None),
        X(xid=13, pci_bus_id=P70, esr=esr(0x52c7b0)),
        X(xid=13, pci_bus_id=P70, gpc=6, tpc=8, sm=0, sm_error="MMU Fault", code_text_mismatch=None),
        X(xid=13, pci_bus_id=P70, esr=esr(0x56d730)),
        X(xid=13, pci_bus_id=P70, gpc=7, tpc=8, sm=0, sm_error="MMU Fault", code_text_mismatch=None),
        X(xid=13, pci_bus_id=P70, esr=esr(0x57d730), category="software"),
    ], id="X-101 Xid 13 SM warp exception MMU Fault"),
    pytest.param("X-102", [
        X(xid=43, pci_bus_id="0009:01:00.0", pid=3188489, process="trigger_xid", channel=0x0b00000a,
          monotonic=1231741.378609, time_kind="mono"),
    ], id="X-102 Xid 43 32-bit channel, domain 0009"),
    pytest.param("W-101", [  # the "…" line between the two pastes is nothing
        dict(kind="gpu_reset_required", status=0x62, status_name="NV_ERR_RESET_REQUIRED",
             location="kernel_channel.c:2827", action="gpu_reset", category="gpu_reset", pci_bus_id=None,
             device=None, gpu=None, expression="status", function="nvAssertOkFailedNoLog",
             monotonic=373871.354096, xid=None),
        dict(kind="driver_assertion", expression="0", location="kernel_gsp.c:1476", status=None,
             function="nvAssertFailedNoLog", monotonic=32.840884, xid=None),
    ], id="W-101 NV_ERR_RESET_REQUIRED assertion and a GSP init assertion"),
    pytest.param("I-101", [  # "can't derive routing ... no GSI" and the driver banner are no events
        dict(kind="net_link_up", pci_bus_id="7657:00:02.0", netdev="enP30295s1", device="enP30295s1",
             monotonic=100.720369),
    ], id="I-101 hex PCI domains, VF at domain 7657"),
]


@pytest.mark.parametrize("case, expected", CASES)
def test_case(case: str, expected: list[dict]) -> None:
    check_events(parse_case(case), expected)


# -- S-101: the scanner's output ---------------------------------------------------------------

def test_s101_the_json_line_is_the_same_kernel_record() -> None:
    parser = KernelLogParser(source="file")
    events = list(parser.feed_lines(load_case("S-101"), CTX))
    assert [e.kind for e in events] == ["sxid"]
    assert parser.stats.duplicates_suppressed == 1 and parser.stats.unparsed == 0


@pytest.mark.parametrize("index, fmt", [
    pytest.param(0, "line+decode+dmesg_iso", id="line prefix"),
    pytest.param(6, "json", id="zap JSON line field"),
])
def test_s101_envelopes_keep_the_kernel_stamp(index: int, fmt: str) -> None:
    # kern/err from the dmesg --decode columns; the kernel's 2025-01-25 stamp (comma decimals),
    # not the scanner's "ts":"2025-01-28T06:47:16Z".
    rec = parse_line(load_case("S-101")[index], CTX)
    assert (rec.fmt, rec.facility, rec.level, rec.time.isoformat()) == (
        fmt, "kern", "err", "2025-01-25T10:34:54.859532+00:00")
    assert rec.message.startswith("nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0,")


def test_s101_yaml_regex_line_is_no_event() -> None:
    lines = load_case("S-101")
    assert lines[4] == "regex: 'SXid.*?: (\\d+),'"
    parser = KernelLogParser()
    assert list(parser.feed_lines(lines[1:6], CTX)) == [] and parser.stats.unparsed == 0


# -- NVLink5 Xid fields ----------------------------------------------------

@pytest.mark.parametrize("case, index, expected", [
    # "sub-code = bits 20-25 of word 0": 0x021425c6 -> 0b100001; 0x000fe406 -> 0.
    pytest.param("X-040", 0, dict(xid=149, nvlink_unit="NETIR_LINK_EVT", link=1, nvlink_intrinfo=0x021425c6,
                                  nvlink_error_status=0x0, nvlink_subcode=0b100001, nvlink_injected=False),
                 id="X-040 149 NETIR_LINK_EVT"),
    pytest.param("X-040", 5, dict(xid=149, nvlink_unit="NETIR", link=-1, nvlink_intrinfo=0x000fe406,
                                  nvlink_subcode=0, nvlink_severity="fatal"), id="X-040 149 Link -1"),
    # err-status is the 2nd register word (0x8).
    pytest.param("X-038", 0, dict(xid=144, nvlink_unit="SAW_MVB", nvlink_intrinfo=0x1, nvlink_error_status=0x8,
                                  nvlink_subcode=0), id="X-038 144 SAW_MVB"),
    pytest.param("X-039", 1, dict(xid=145, nvlink_unit="RLW_RXPIPE", nvlink_xc="XC0", nvlink_intrinfo=0x0409a0c2,
                                  nvlink_error_status=0x8, nvlink_subcode=0), id="X-039 145 RLW_RXPIPE"),
])
def test_nvlink5_words(case: str, index: int, expected: dict) -> None:
    events = [e for e in parse_case(case) if e.kind == "xid"]
    e = events[index]
    got = dict(e.attrs, xid=e.code)
    assert {k: got.get(k) for k in expected} == expected


def test_x040_xid154_recovery_actions_decoded() -> None:
    # "from 0x0 (None) to 0x4 (Drain and Reset)", "from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"
    got = [(e.attrs["pci_bus_id"], e.attrs["recovery_action_from"], e.attrs["recovery_action"])
           for e in parse_case("X-040") if e.code == 154]
    assert got == [("0009:01:00.0", "none", "drain_and_reset"), ("0019:01:00.0", "drain_and_reset", "gpu_reset")]
    assert not [e for e in parse_case("X-040") if e.kind == "gpu_reset_required"]  # an Xid 154 stays one xid


# -- I-101: hex PCI domains --------------------------------------------------------------------

def test_i101_hex_domains_normalize() -> None:
    # 0001..0004 and 000b..000e are the GPUs, 000a the NVSwitch: hex domains with letters.
    bdfs = sorted({m.group(1) for ln in load_case("I-101") for m in [re.search(r" (\w{4}:00:0\d\.0)[: ]", ln)] if m})
    assert bdfs == ["0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0", "000a:00:00.0",
                    "000b:00:00.0", "000c:00:00.0", "000d:00:00.0", "000e:00:00.0", "7657:00:02.0"]
    assert [normalize_pci(b) for b in bdfs] == bdfs
    # the netdev name spells the domain in decimal: enP30295s1 <-> 0x7657
    assert int("7657", 16) == 30295

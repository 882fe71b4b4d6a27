"""NVSwitch SXid lines: every line form the driver prints, the folding of one error's lines into
one ``sxid`` event, bad input, and the SXid catalog.

Lines are built from the driver's format strings (NVIDIA/open-gpu-kernel-modules 595.45.04,
``src/common/nvswitch``; file and macro/function next to each), with values of the kinds real
lines carry (the reference corpus S-001/S-101 and public NVSwitch logs). Expected values are
written from those strings, never from parser output.
"""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from nodewarden.catalog import sxid as sxid_catalog
from nodewarden.parsing import sxid
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser
from nodewarden.parsing.sxid import parse_sxid_line

CTX = TimeContext.make(tz="UTC")

# kernel/inc/common_nvswitch.h, NVSWITCH_PRINT_SXID / NVSWITCH_PRINT_SXID_NO_BBX:
#   "nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " _fmt   (NVLINK_PCI_DEV_FMT "%04x:%02x:%02x.%x")
SW2 = "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): "
SW0 = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): "


def head(code: int, sw: str = SW2) -> str:
    return f"{sw}{code:05d}, "


# -- one line ------------------------------------------------------------------------------------

LINE_FORMS = [
    # kernel/error_nvswitch.c, _nvswitch_dump_error_entry: the first Data record (flags, data[0..7])
    pytest.param(head(12028) + "Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, "
                               "0x5a001100, 0x00000000, 0x00000000}",
                 dict(part="data", sxid=12028, words=[0x1c0, 0xbd5c8a, 0x500, 0x64, 0x0, 0x40008000, 0x5a001100, 0x0,
                                                      0x0]), id="Data 9 words"),
    # same function: the second Data record, data[8..15], printed when they are not all zero
    pytest.param(head(12028) + "Data {0x00000001, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, "
                               "0x00000000, 0x00000002}",
                 dict(part="data2", words=[0x1, 0, 0, 0, 0, 0, 0, 0x2]), id="Data 8 words"),
    # same function: "Severity %d Engine instance %02d Sub-engine instance %02d"
    pytest.param(head(20034) + "Severity 1 Engine instance 28 Sub-engine instance 00",
                 dict(part="severity", severity_level=1, engine_instance=28, subengine_instance=0), id="Severity"),
    # kernel/inc/intr_nvswitch.h, NVSWITCH_REPORT_NONFATAL: "Non-fatal, Link %02d %s%s" (NVSWITCH_FIRST)
    pytest.param(head(19084) + "Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)",
                 dict(part="description", severity_text="Non-fatal", link=29, first=True,
                      description="AN1 Heartbeat Timeout Error"), id="Non-fatal Link (First)"),
    # kernel/inc/intr_nvswitch.h, NVSWITCH_REPORT_FATAL: "Fatal, Link %02d %s%s"
    # (ls10/intr_ls10.c: NVSWITCH_REPORT_FATAL(_HW_DLPL_LTSSM_FAULT_UP, "LTSSM Fault Up", ...))
    pytest.param(head(20034, SW0) + "Fatal, Link 08 LTSSM Fault Up",
                 dict(part="description", severity_text="Fatal", link=8, first=False, description="LTSSM Fault Up",
                      switch="nvidia-nvswitch0", switch_index=0, pci_bus_id="0000:c2:00.0"), id="Fatal Link"),
    # kernel/inc/intr_nvswitch.h, NVSWITCH_REPORT_CORRECTABLE: "Correctable, Link %02d %s%s"
    pytest.param(head(19049) + "Correctable, Link 03 NCISOC HDR ECC limit",
                 dict(part="description", severity_text="Correctable", link=3, description="NCISOC HDR ECC limit"),
                 id="Correctable Link"),
    # kernel/inc/intr_nvswitch.h, NVSWITCH_REPORT_PRI_ERROR_NONFATAL: "Non-fatal, %s, instance=%d, chiplet=%d"
    # (ls10/intr_ls10.c: "PRI WRITE SYS error", NVSWITCH_PPRIV_WRITE_SYS, 0)
    pytest.param(head(10001) + "Non-fatal, PRI WRITE SYS error, instance=0, chiplet=0",
                 dict(part="description", severity_text="Non-fatal", description="PRI WRITE SYS error", instance=0,
                      chiplet=0, link=None), id="Non-fatal PRI instance/chiplet"),
    # kernel/inc/intr_nvswitch.h, NVSWITCH_UNHANDLED_CHECK: "Fatal, unhandled interrupt in %s(%d)"
    pytest.param(head(10003) + "Fatal, unhandled interrupt in _nvswitch_service_nport_fatal_ls10(4127)",
                 dict(part="description", severity_text="Fatal", link=None,
                      description="unhandled interrupt in _nvswitch_service_nport_fatal_ls10(4127)"),
                 id="Fatal without link"),
    # ls10/soe_ls10.c: NVSWITCH_PRINT_SXID(device, NVSWITCH_ERR_HW_SOE_HALT, "SOE HALTED\n")
    pytest.param(head(26006) + "SOE HALTED", dict(part="text", description="SOE HALTED"), id="text SOE HALTED"),
    # ls10/therm_ls10.c: "NVSWITCH Temperature %dC | TSENSE WARN Threshold %dC"
    pytest.param(head(10004) + "NVSWITCH Temperature 97C | TSENSE WARN Threshold 95C",
                 dict(part="text", description="NVSWITCH Temperature 97C | TSENSE WARN Threshold 95C"),
                 id="text thermal"),
]


@pytest.mark.parametrize("message, expected", LINE_FORMS)
def test_line_form(message: str, expected: dict) -> None:
    got = parse_sxid_line(message)
    assert got is not None
    assert {k: got.get(k) for k in expected} == expected
    assert got["pci_bus_id"] == expected.get("pci_bus_id", "0000:c4:00.0")


@pytest.mark.parametrize("message", [
    "nvidia-nvswitch2: open (major=510)",                                 # F-001: not an SXid
    "NVRM: Xid (PCI:0000:c4:00): 74, pid=1, name=x, NVLink: fatal error",  # an Xid
    "regex: 'SXid.*?: (\\d+),'",                                          # S-101's scanner config
    "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): " + "9" * 5000 + ", Data {0x1}",  # digits past the bound
    "python[1]: oops nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 12028, Data {0x1}",  # not at the start
])
def test_not_an_sxid_line(message: str) -> None:
    assert parse_sxid_line(message) is None


def test_redacted_pci_id_is_none() -> None:
    got = parse_sxid_line("nvidia-nvswitch2: SXid (PCI:...): 12028, Non-fatal, Link 01 egress non-posted PRIV error")
    assert (got["pci_bus_id"], got["sxid"], got["link"]) == (None, 12028, 1)


# -- one error, several lines ----------------------------------------------------------------------

def dmesg(t: float, text: str) -> str:
    return f"[{t:12.6f}] {text}"


# ls10/intr_ls10.c, _nvswitch_service_egress_nonfatal_ls10: NVSWITCH_REPORT_NONFATAL(_HW_NPORT_EGRESS_PRIVRSPERR,
# "egress non-posted PRIV error") then NVSWITCH_REPORT_DATA(_HW_NPORT_EGRESS_PRIVRSPERR, data): the
# description, then two error records (Severity + Data each) of the same error.
EGRESS_12028 = [
    dmesg(100.000100, head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error (First)"),
    dmesg(100.000110, head(12028) + "Severity 0 Engine instance 17 Sub-engine instance 00"),
    dmesg(100.000120, head(12028) + "Data {0x00000010, 0x00020000, 0x00000000, 0x00020000, 0x00000000, "
                                    "0x00000000, 0x00000000, 0x00000000, 0x00000000}"),
    dmesg(100.000130, head(12028) + "Severity 0 Engine instance 17 Sub-engine instance 00"),
    dmesg(100.000140, head(12028) + "Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, "
                                    "0x40008000, 0x5a001100, 0x00000000, 0x00000000}"),
]


def events_of(lines: list[str]) -> list:
    return list(KernelLogParser().feed_lines(lines, CTX))


def test_description_and_two_records_are_one_event() -> None:
    (e,) = events_of(EGRESS_12028)
    a = e.attrs
    assert (e.kind, e.code, e.device, e.category) == ("sxid", 12028, "0000:c4:00.0", "non_fatal")
    assert (a["switch"], a["link"], a["first"], a["description"], a["severity_source"], a["lines"]) == (
        "nvidia-nvswitch2", 17, True, "egress non-posted PRIV error", "text", 5)
    assert (a["severity_level"], a["engine_instance"], a["subengine_instance"]) == (0, 17, 0)
    assert a["data"] == [0x10, 0x20000, 0x0, 0x20000, 0, 0, 0, 0, 0]
    assert a["data_extra"] == [[0x1c0, 0xbd5c8a, 0x500, 0x64, 0x0, 0x40008000, 0x5a001100, 0x0, 0x0]]
    assert e.monotonic == 100.0001 and e.raw.count("\n") == 4


def test_second_data_record_extends_the_first() -> None:
    lines = [dmesg(5.0, head(20034) + "Fatal, Link 12 LTSSM Fault Up"),
             dmesg(5.0, head(20034) + "Severity 1 Engine instance 12 Sub-engine instance 00"),
             dmesg(5.0, head(20034) + "Data {0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9}"),
             dmesg(5.0, head(20034) + "Data {0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x10, 0x11}")]
    (e,) = events_of(lines)
    assert (e.category, e.attrs["severity_text"], e.attrs["data"]) == ("fatal", "Fatal", list(range(1, 18)))


def test_two_errors_of_one_code_are_two_events() -> None:
    # two links of one switch, each with its description line (S-001's 22013 on links 43 and 44)
    one = [head(22013, "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): ") + "Non-fatal, Link 43 Minion Link DLREQ interrupt",
           head(22013, "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): ") + "Severity 0 Engine instance 43 Sub-engine instance 00"]
    two = [ln.replace("43", "44") for ln in one]
    got = [(e.attrs["link"], e.attrs["engine_instance"]) for e in events_of([dmesg(38.1, x) for x in one + two])]
    assert got == [(43, 43), (44, 44)]


def test_interleaved_switches_are_not_mixed() -> None:
    a = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): "
    b = "nvidia-nvswitch1: SXid (PCI:0000:c3:00.0): "
    lines = [dmesg(9.0, a + "20034, Fatal, Link 28 LTSSM Fault Up"),
             dmesg(9.0, b + "20034, Fatal, Link 25 LTSSM Fault Up"),
             dmesg(9.0, a + "20034, Severity 1 Engine instance 28 Sub-engine instance 00"),
             dmesg(9.0, b + "20034, Severity 1 Engine instance 25 Sub-engine instance 00"),
             dmesg(9.0, b + "20034, Data {0x19, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}"),
             dmesg(9.0, a + "20034, Data {0x1c, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}")]
    got = sorted((e.attrs["switch"], e.device, e.attrs["link"], e.attrs["engine_instance"], e.attrs["data"][0],
                  e.attrs["lines"]) for e in events_of(lines))
    assert got == [("nvidia-nvswitch0", "0000:c2:00.0", 28, 28, 0x1c, 3),
                   ("nvidia-nvswitch1", "0000:c3:00.0", 25, 25, 0x19, 3)]


def test_data_line_without_header_takes_the_catalog_severity() -> None:
    # 20034 is in the FM guide's fatal table; 11004 (ingress invalid ACL) in its non-fatal one
    lines = [dmesg(1.0, head(20034) + "Data {0x1c, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}"),
             dmesg(1.0, head(11004) + "Data {0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}")]
    got = [(e.code, e.category, e.attrs["severity_source"], e.attrs["unit"], e.attrs["description"])
           for e in events_of(lines)]
    assert got == [(20034, "fatal", "catalog", "dlpl", None), (11004, "non_fatal", "catalog", "ingress", None)]


def test_severity_record_alone_gives_the_severity() -> None:
    # "Severity 1": NVSWITCH_ERROR_SEVERITY_FATAL (interface/ctrl_dev_nvswitch.h), whatever the catalog says
    (e,) = events_of([dmesg(1.0, head(12028) + "Severity 1 Engine instance 05 Sub-engine instance 00")])
    assert (e.category, e.attrs["severity_source"], e.attrs["description"]) == ("fatal", "text", None)


def test_correctable_is_a_non_fatal_record() -> None:
    # NVSWITCH_REPORT_CORRECTABLE logs through NVSWITCH_LOG_NONFATAL_DATA: a non-fatal record
    (e,) = events_of([dmesg(1.0, head(19049) + "Correctable, Link 03 NCISOC HDR ECC limit")])
    assert (e.category, e.attrs["severity_text"]) == ("non_fatal", "Correctable")


def test_soe_halt_lines_are_one_error() -> None:
    # ls10/flcn_ls10.c prints "SOE HALT data[%d] = 0x%16llx" lines after ls10/soe_ls10.c's "SOE HALTED"
    lines = [dmesg(2.0, head(26006) + "SOE HALTED"),
             dmesg(2.0, head(26006) + "SOE HALT data[0] = 0x        4a3c10f2"),
             dmesg(2.0, head(26006) + "SOE HALT data[1] = unavailable")]
    (e,) = events_of(lines)
    assert (e.attrs["description"], e.attrs["details"], e.attrs["lines"], e.attrs["unit"]) == (
        "SOE HALTED", ["SOE HALT data[0] = 0x        4a3c10f2", "SOE HALT data[1] = unavailable"], 3, "soe")


def test_lines_further_apart_than_the_window_are_two_errors() -> None:
    # sxid.WINDOW_S is 0.25 s: lines 2.5 s apart are two errors
    lines = [dmesg(10.0, head(12028) + "Data {0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}"),
             dmesg(12.5, head(12028) + "Severity 0 Engine instance 01 Sub-engine instance 00")]
    assert [e.attrs["lines"] for e in events_of(lines)] == [1, 1]


def test_without_time_sixteen_sxid_lines_end_a_group() -> None:
    first = head(12028) + "Non-fatal, Link 01 egress non-posted PRIV error"
    others = [head(11004) + f"Non-fatal, Link {i:02d} ingress invalid ACL" for i in range(16)]
    late = head(12028) + "Severity 0 Engine instance 01 Sub-engine instance 00"
    got = [(e.code, e.attrs["lines"]) for e in events_of([first, *others, late])]
    assert (12028, 1) in got and got.count((12028, 1)) == 2 and len(got) == 18


def test_kmsg_cursor_holds_an_open_error() -> None:
    p = KernelLogParser(source="kmsg")
    r1 = parse_kmsg_record("3,501,38178720,-;" + head(22013) + "Non-fatal, Link 44 Minion Link DLREQ interrupt", CTX)
    r2 = parse_kmsg_record("3,502,38180708,-;" + head(22013) + "Severity 0 Engine instance 44 Sub-engine instance 00",
                           CTX)
    assert p.feed(r1) == [] and p.feed(r2) == []
    assert p.pending_seqs() == (501,)
    (e,) = p.flush()
    assert (e.attrs["seq"], e.attrs["lines"], p.pending_seqs()) == (501, 2, ())


# -- which lines are one error (sxid.joins_error) ------------------------------------------------------
# kernel/error_nvswitch.c, _nvswitch_dump_error_entry: one "Severity %d Engine instance %02d Sub-engine
# instance %02d" and one "Data {...}" (and maybe the 8-word data[8..15]) per recorded error entry;
# the NVSWITCH_REPORT_* description comes first, NVSWITCH_REPORT_DATA adds a second pair. S-001 shows
# Data, description, Severity; S-101's scanner keeps the Data (and Severity) lines only.

S3 = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): "
S1 = "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): "


def data_words(flags: int, second: int) -> str:
    return (f"Data {{0x{flags:08x}, 0x{second:08x}, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, "
            "0x00000000, 0x00000000}")


@pytest.mark.parametrize("part, severities, datas, described, joins", [
    ("description", 0, 0, False, True), ("description", 0, 1, False, True),    # S-001: Data, then description
    ("description", 1, 0, False, False), ("description", 0, 0, True, False),   # after a Severity / a description
    ("severity", 0, 0, False, True), ("severity", 0, 1, False, True),          # the first pair
    ("severity", 1, 1, True, True),                                            # REPORT_DATA's pair
    ("severity", 1, 1, False, False), ("severity", 1, 0, True, False),         # no description / Data missing
    ("severity", 2, 2, True, False),                                           # at most two pairs
    ("data", 0, 0, False, True), ("data", 1, 0, False, True), ("data", 2, 1, True, True),
    ("data", 0, 1, False, False), ("data", 1, 1, True, False),
    ("data2", 1, 1, True, True), ("text", 0, 0, False, True),
])
def test_joins_error_rule(part: str, severities: int, datas: int, described: bool, joins: bool) -> None:
    assert sxid.joins_error(part, severities, datas, described) is joins


def test_data_description_severity_twice_gives_each_error_its_data() -> None:
    # S-001's order for two links 3 ms apart: link 44's Data is link 44's, not a second record of 43
    lines = [dmesg(38.175561, S3 + "22013, " + data_words(0x2b, 0x2b)),
             dmesg(38.178720, S3 + "22013, Non-fatal, Link 43 Minion Link DLREQ interrupt"),
             dmesg(38.180708, S3 + "22013, Severity 0 Engine instance 43 Sub-engine instance 00"),
             dmesg(38.181561, S3 + "22013, " + data_words(0x2c, 0x2c)),
             dmesg(38.182720, S3 + "22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"),
             dmesg(38.183708, S3 + "22013, Severity 0 Engine instance 44 Sub-engine instance 00")]
    got = [(e.attrs["link"], e.attrs["engine_instance"], e.attrs["data"][:2], e.attrs.get("data_extra"), e.attrs["lines"])
           for e in events_of(lines)]
    assert got == [(43, 43, [0x2b, 0x2b], None, 3), (44, 44, [0x2c, 0x2c], None, 3)]


def test_data_severity_pairs_without_description_are_one_error_each() -> None:
    # S-101's scanner shape, three records 10 ms apart (within WINDOW_S): three errors
    lines = []
    for i in range(3):
        lines += [dmesg(700.1 + i * 0.01, S1 + "12028, " + data_words(0x1c0, 0xbd5c8a + i)),
                  dmesg(700.1001 + i * 0.01, S1 + "12028, Severity 0 Engine instance 00 Sub-engine instance 00")]
    got = [(e.attrs["data"][1], e.attrs["severity_level"], e.attrs.get("data_extra"), e.attrs["lines"])
           for e in events_of(lines)]
    assert got == [(0xbd5c8a, 0, None, 2), (0xbd5c8b, 0, None, 2), (0xbd5c8c, 0, None, 2)]


def test_severity_data_pairs_without_description_are_one_error_each() -> None:
    lines = [dmesg(5.0, head(20034) + "Severity 1 Engine instance 12 Sub-engine instance 00"),
             dmesg(5.0, head(20034) + "Data {0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}"),
             dmesg(5.0, head(20034) + "Severity 1 Engine instance 13 Sub-engine instance 00"),
             dmesg(5.0, head(20034) + "Data {0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}")]
    got = [(e.category, e.attrs["engine_instance"], e.attrs["data"][0], e.attrs["lines"]) for e in events_of(lines)]
    assert got == [("fatal", 12, 0x1, 2), ("fatal", 13, 0x2, 2)]


def test_report_data_records_keep_their_second_words() -> None:
    # description, then two records each with its 8-word data[8..15] line: one error
    lines = [dmesg(5.0, head(20034) + "Fatal, Link 12 LTSSM Fault Up"),
             dmesg(5.0, head(20034) + "Severity 1 Engine instance 12 Sub-engine instance 00"),
             dmesg(5.0, head(20034) + "Data {0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9}"),
             dmesg(5.0, head(20034) + "Data {0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x10, 0x11}"),
             dmesg(5.0, head(20034) + "Severity 1 Engine instance 12 Sub-engine instance 00"),
             dmesg(5.0, head(20034) + "Data {0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29}"),
             dmesg(5.0, head(20034) + "Data {0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31}")]
    (e,) = events_of(lines)
    assert (e.attrs["lines"], e.attrs["data"], e.attrs["data_extra"]) == (
        7, list(range(1, 18)), [list(range(0x21, 0x32))])


def test_without_time_a_full_pair_ends_the_error() -> None:
    # dmesg -H: only the first line of each minute has a time, the "+delta" lines none. The third
    # Data comes an hour later, within 16 SXid lines: it is a new error because the one before
    # already has its Data and Severity.
    lines = ["[Jan25 10:34] " + S1 + "12028, " + data_words(0x1c0, 0xbd5c8a),
             "[  +0.000100] " + S1 + "12028, Severity 0 Engine instance 00 Sub-engine instance 00",
             "[+3600.000000] usb 1-1: new high-speed USB device number 3 using xhci_hcd",
             "[  +1.000000] " + S1 + "12028, " + data_words(0x1c0, 0xbd5c8b),
             "[  +0.000100] " + S1 + "12028, Severity 0 Engine instance 00 Sub-engine instance 00"]
    got = [(e.attrs["data"][1], e.attrs["lines"]) for e in events_of(lines)]
    assert got == [(0xbd5c8a, 2), (0xbd5c8b, 2)]


# -- Data words that are no 0x%08x words -----------------------------------------------------------------

@pytest.mark.parametrize("words, reason", [
    pytest.param("0xZZZZ, 0x00000002, hello, 0x123456789", "'0xZZZZ'", id="not hex"),
    pytest.param("0x00000001, 0x00000002, hello", "'hello'", id="a word"),
    pytest.param("0x00000001, 0x123456789", "'0x123456789'", id="9 hex digits"),
    pytest.param("0x00000001, , 0x00000003", "''", id="empty word"),
    pytest.param(", ".join(["0x1"] * 33), "33 words", id="33 words"),
])
def test_bad_data_word_is_unparsed_and_the_error_still_folds(words: str, reason: str) -> None:
    lines = [dmesg(100.0001, head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error"),
             dmesg(100.00011, head(12028) + "Severity 0 Engine instance 17 Sub-engine instance 00"),
             dmesg(100.00012, head(12028) + "Data {" + words + "}")]
    p = KernelLogParser()
    events = list(p.feed_lines(lines, CTX))
    assert [e.kind for e in events] == ["unparsed", "sxid"] and p.stats.unparsed == 1
    bad, e = events
    assert (bad.attrs["family"], bad.monotonic) == ("sxid", 100.00012) and reason in bad.attrs["reason"]
    assert (e.attrs["description"], e.attrs["severity_level"], e.attrs["data"], e.attrs["lines"]) == (
        "egress non-posted PRIV error", 0, [], 2)


def test_bad_first_record_keeps_its_place() -> None:
    # EGRESS_12028 with its first Data record mangled: still one error; the second record is data_extra
    lines = list(EGRESS_12028)
    lines[2] = dmesg(100.000120, head(12028) + "Data {0x00000010, 0x0002000g, 0x00000000}")
    p = KernelLogParser()
    events = list(p.feed_lines(lines, CTX))
    assert [e.kind for e in events] == ["unparsed", "sxid"] and p.stats.unparsed == 1
    e = events[1]
    assert (e.attrs["lines"], e.attrs["data"], e.attrs["data_extra"]) == (
        4, [], [[0x1c0, 0xbd5c8a, 0x500, 0x64, 0x0, 0x40008000, 0x5a001100, 0x0, 0x0]])


def test_bad_data_line_alone_opens_no_error() -> None:
    p = KernelLogParser()
    events = list(p.feed_lines([dmesg(1.0, head(12028) + "Data {0xZZZZ, 0x00000002}")], CTX))
    assert [(e.kind, e.attrs["family"]) for e in events] == [("unparsed", "sxid")]
    assert parse_sxid_line(head(12028) + "Data {0x00000001, 0xZZZZ}")["words"] is None


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, expected", [
    pytest.param([head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error (First)"], [(12028, 1)],
                 id="description only"),
    pytest.param([head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error",
                  head(12028) + "Severity 0 Engine instance 17 Sub-engine instance 00"], [(12028, 2)],
                 id="no Data line"),
    pytest.param([head(12028) + "Data {0x000001c0, 0x00bd5c8a, 0x0000"], [(12028, 1)], id="Data cut mid-word"),
    pytest.param([head(12028) + "Data {}"], [(12028, 1)], id="Data without words"),
    pytest.param([head(12028)], [(12028, 1)], id="header only"),
    # a Data line after a Data line without a Severity between: the next error's record (sxid.joins_error)
    pytest.param([head(12028) + "Data {0x1, 0x2}", head(12028) + "Data {0x3, 0x4}"], [(12028, 1), (12028, 1)],
                 id="two short Data lines"),
    pytest.param([head(12028) + "Data {0x00000001, 0x00000002, "], [(12028, 1)], id="Data cut after a comma"),
])
def test_truncated_groups_give_their_event(lines: list[str], expected: list) -> None:
    events = events_of(lines)
    assert [(e.code, e.attrs["lines"]) for e in events] == expected
    assert all(e.kind == "sxid" for e in events)


@pytest.mark.parametrize("line", [
    "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): twelve, Data {0x1}",
    "nvidia-nvswitch2: SXid PCI:0000:c4:00.0: 12028, Data {0x1}",
    "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): " + "1" * 40 + ", Data {0x1}",
])
def test_malformed_sxid_line_is_unparsed(line: str) -> None:
    p = KernelLogParser()
    events = list(p.feed_lines([dmesg(1.0, line)], CTX))
    assert [(e.kind, e.attrs["family"]) for e in events] == [("unparsed", "sxid")] and p.stats.unparsed == 1


def test_sxid_quoted_by_another_message_is_no_event() -> None:
    line = dmesg(1.0, "python3[4711]: segfault at 0 in nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 12028, Data {0x1}")
    (e,) = events_of([line])
    assert (e.kind, e.attrs["family"]) == ("unparsed", "sxid")


def test_a_line_with_sxid_is_never_an_xid() -> None:
    lines = [dmesg(1.0, head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error"),
             "Jan  2 11:00:00 node01 kernel: " + head(20034) + "Fatal, Link 08 LTSSM Fault Up"]
    assert {e.kind for e in events_of(lines)} == {"sxid"}


def test_group_split_across_two_files() -> None:
    # a rotation between the description and its first record: the first file gives description and
    # Severity; the second starts with that record's Data, then the REPORT_DATA pair (Severity, Data):
    # without the description, a Severity after a full pair starts a new error (sxid.joins_error)
    first = events_of(EGRESS_12028[:2])
    second = events_of(EGRESS_12028[2:])
    assert [(e.attrs["description"], e.attrs["lines"]) for e in first] == [("egress non-posted PRIV error", 2)]
    assert [(e.attrs["description"], e.attrs["severity_source"], e.attrs["lines"], e.attrs["data"][1])
            for e in second] == [(None, "text", 2, 0x20000), (None, "catalog", 1, 0xbd5c8a)]


def test_many_open_errors_are_bounded() -> None:
    # 300 switches x 1 line each, no time: never more than MAX_PENDING held, every line an event
    lines = [f"nvidia-nvswitch{i}: SXid (PCI:0000:{i % 256:02x}:00.0): 12028, Data {{0x1}}" for i in range(300)]
    p = KernelLogParser(source="kmsg")
    recs = [parse_kmsg_record(f"3,{i},{i},-;{line}", CTX) for i, line in enumerate(lines)]
    got = [p.feed(r) for r in recs]
    assert len(p.pending_seqs()) == sxid.MAX_PENDING
    assert sum(map(len, got)) + len(p.flush()) == 300


# -- the catalog -------------------------------------------------------------------------------------

def catalog_rows() -> list[dict]:
    text = resources.files("nodewarden.catalog").joinpath("sxid_catalog.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_catalog_rows_are_well_formed() -> None:
    rows = catalog_rows()
    codes = [int(r["first"]) for r in rows if r["first"] == r["last"]]
    assert len(codes) == len(set(codes))
    for r in rows:
        assert r["severity"] in ("fatal", "non_fatal", "unknown")
        assert r["severity_basis"] in ("", "fm_guide", "driver_report")
        assert r["fm_class"] in ("", "non_fatal", "fatal", "always_fatal", "other_notable")
        assert (r["severity_basis"] == "fm_guide") == (r["fm_class"] != "")
    # every code lies in a range row of its unit
    ranges = [(int(r["first"]), int(r["last"]), r["unit"]) for r in rows if r["first"] != r["last"]]
    for r in rows:
        if r["first"] == r["last"]:
            assert [u for lo, hi, u in ranges if lo <= int(r["first"]) <= hi] == [r["unit"]]


@pytest.mark.parametrize("code, unit, mnemonic, severity, fm_class", [
    # interface/ctrl_dev_nvswitch.h enum; FM guide DU-09883-001 v1.3 SXid tables
    (12028, "egress", "NVSWITCH_ERR_HW_NPORT_EGRESS_PRIVRSPERR", "non_fatal", "non_fatal"),
    (22013, "minion", "NVSWITCH_ERR_HW_MINION_NONFATAL", "non_fatal", "non_fatal"),
    (11004, "ingress", "NVSWITCH_ERR_HW_NPORT_INGRESS_ACLFAIL", "non_fatal", "non_fatal"),
    (20034, "dlpl", "NVSWITCH_ERR_HW_DLPL_LTSSM_FAULT_UP", "fatal", "fatal"),
    (15001, "route", "NVSWITCH_ERR_HW_NPORT_ROUTE_ROUTEBUFERR", "fatal", "fatal"),
    (12020, "egress", "NVSWITCH_ERR_HW_NPORT_EGRESS_SEQIDERR", "fatal", "always_fatal"),
    (10003, "host", "NVSWITCH_ERR_HW_HOST_UNHANDLED_INTERRUPT", "fatal", "other_notable"),
    (10004, "host", "NVSWITCH_ERR_HW_HOST_THERMAL_EVENT_START", "non_fatal", "other_notable"),
])
def test_catalog_lookup(code: int, unit: str, mnemonic: str, severity: str, fm_class: str) -> None:
    info = sxid_catalog.lookup(code)
    assert (info.unit, info.mnemonic, info.severity, info.fm_class, info.severity_basis) == (
        unit, mnemonic, severity, fm_class, "fm_guide")


def test_catalog_driver_report_severity_and_unknown_codes() -> None:
    # ls10/intr_ls10.c reports RX Short Error Rate only through NVSWITCH_REPORT_NONFATAL
    info = sxid_catalog.lookup(20009)
    assert (info.severity, info.severity_basis, info.name) == ("non_fatal", "driver_report", "RX Short Error Rate")
    assert (sxid_catalog.lookup(12999).unit, sxid_catalog.lookup(12999).severity) == ("egress", "unknown")
    assert (sxid_catalog.lookup(99999).unit, sxid_catalog.lookup(99999).mnemonic) == (None, None)


# -- generated input ---------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodewarden.parsing import xid  # noqa: E402

PIECES = st.sampled_from([
    "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): ", "nvidia-nvswitch", "SXid", "(PCI:", "...", ")", ": ", ", ",
    "22013", "12028", "9" * 30, "Data {", "0x0000002b", "0x", "}", "Severity ", "0 ", "Engine instance 44 ",
    "Sub-engine instance 00", "Non-fatal", "Fatal", "Correctable", "Link ", "-1 ", " (First)", "instance=0",
    "chiplet=", "NVRM: nvAssertOkFailedNoLog: Assertion failed: ", "Reset required [NV_ERR_RESET_REQUIRED] ",
    "(0x00000062) returned from ", "status", " @ ", "kernel_channel.c:2827", "NVRM: GPU3 ", "[ 38.1] ", "line ",
    "kern  :err   : 2025-01-25T10:34:54,859532+00:00 ", '{"line":"', '"}', "\n", " ", "²", "٣",
])
LINES = st.one_of(st.text(max_size=120), st.lists(PIECES, max_size=20).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, max_size=12))
def test_sxid_and_assertion_parsers_never_raise(lines: list[str]) -> None:
    for line in lines:
        for parse in (parse_sxid_line, xid.parse_assertion):
            got = parse(line)
            assert got is None or isinstance(got, dict)
    p = KernelLogParser()
    for e in p.feed_lines(lines, CTX):
        e.to_json()
        assert e.attrs.get("family") != "error", e.attrs  # a parser exception, kept raw by the stream


def test_window_is_shorter_than_the_agents_idle_flush() -> None:
    # The live agent closes every open error after POLL_S without records; a replay of the same
    # log must not fold a later line into the error the live agent already closed.
    from nodewarden.agent.daemon import POLL_S

    assert sxid.WINDOW_S < POLL_S
    late = [dmesg(100.0, head(12028) + "Non-fatal, Link 17 egress non-posted PRIV error"),
            dmesg(100.0 + POLL_S, head(12028) + "Severity 0 Engine instance 17 Sub-engine instance 00")]
    assert [e.attrs["lines"] for e in events_of(late)] == [1, 1]

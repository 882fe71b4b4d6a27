"""Firmware-first and AMD memory errors: GHES/CPER records (nodewarden.parsing.ghes), the AMD MCA
decoder (nodewarden.parsing.mce), EDAC lines with any driver message (nodewarden.parsing.edac),
and their folding into one event when one error is printed two ways (nodewarden.parsing.stream).

Input lines are built from the kernel format strings, provenance next to each:
``drivers/acpi/apei/ghes.c`` (``__ghes_print_estatus``), ``drivers/firmware/efi/cper.c``
(``cper_estatus_print``, ``cper_estatus_print_section``, ``cper_print_mem``,
``cper_mem_err_location``, ``cper_print_pcie``), ``drivers/edac/mce_amd.c`` (``amd_decode_mce``,
``decode_error_status``, ``decode_smca_error``, ``amd_decode_err_code``), ``drivers/edac/edac_mc.c``
(``edac_ce_error``/``edac_ue_error``), ``drivers/edac/ghes_edac.c``, ``drivers/edac/amd64_edac.c``
(``__log_ecc_error``), ``drivers/edac/skx_common.c`` (``skx_mce_output_error``). Expected values
are the formats' arguments, never parser output.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodewarden.parsing import edac, ghes, mce
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import GHES_WINDOW_RECORDS, KernelLogParser, records_from_lines

UTC = dt.timezone.utc
CTX = TimeContext.make(tz="UTC", reference=dt.datetime(2026, 1, 1, tzinfo=UTC))


def run(lines: list[str]) -> tuple[list, KernelLogParser]:
    p = KernelLogParser(source="file")
    return list(p.feed_lines(lines, CTX)), p


def G(seq: int, body: str, t: str = "100.000001") -> str:  # noqa: N802 - a GHES line, "{seq}[Hardware Error]: "
    return f"[{t}] {{{seq}}}[Hardware Error]: {body}"


def A(body: str, t: str = "200.000001") -> str:  # noqa: N802 - an AMD decoder line, HW_ERR "[Hardware Error]: "
    return f"[{t}] [Hardware Error]: {body}"


# -- GHES/CPER lines ------------------------------------------------------------------------------

GHES_LINES = [
    # __ghes_print_estatus: "%s{%u}" HW_ERR "Hardware error from APEI Generic Hardware Error Source: %d"
    ("{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1", 1, "header", dict(source_id=1)),
    # cper_estatus_print: "It has been corrected by h/w and requires no further action", "event severity: %s"
    ("{7}[Hardware Error]: It has been corrected by h/w and requires no further action", 7, "corrected_note", {}),
    *[(f"{{2}}[Hardware Error]: event severity: {s}", 2, "event_severity", dict(severity=s))
      for s in ("recoverable", "fatal", "corrected", "info")],
    # cper_estatus_print_section: "Error %d, type: %s", newpfx one blank deeper
    ("{2}[Hardware Error]:  Error 0, type: corrected", 2, "section", dict(section=0, severity="corrected")),
    ("{2}[Hardware Error]:  fru_text: B1", 2, "other", {}),
    *[(f"{{2}}[Hardware Error]:   section_type: {t}", 2, "section_type", dict(section_type=t))
      for t in ("memory error", "PCIe error", "general processor error", "IA32/X64 processor error")],
    # cper_print_mem: "%s error_status: %s (0x%016llx)" (v5.10+), "error_status: 0x%016llx" (older)
    ("{3}[Hardware Error]:   error_status: Storage error in DRAM memory (0x0000000000000400)", 3, "error_status",
     dict(error_status=0x400, error_status_text="Storage error in DRAM memory")),
    ("{3}[Hardware Error]:   error_status: 0x0000000000000400", 3, "error_status", dict(error_status=0x400)),
    ("{3}[Hardware Error]:   physical_address: 0x0000001234567890", 3, "physical_address",
     dict(physical_address=0x1234567890)),
    ("{3}[Hardware Error]:   physical_address_mask: 0xffffffffffffffc0", 3, "physical_address_mask",
     dict(physical_address_mask=0xffffffffffffffc0)),
    # cper_mem_err_location: "node:%d card:%d ..." (v5.10+), "node: %d card: %d ..." (older)
    ("{3}[Hardware Error]:   node:1 card:0 module:3 rank:1 bank:5 bank_group:1 bank_address:1 device:0 row:4660 "
     "column:1024 bit_position:7", 3, "location",
     dict(location=dict(node=1, card=0, module=3, rank=1, bank=5, bank_group=1, bank_address=1, device=0, row=4660,
                        column=1024, bit_position=7))),
    ("{3}[Hardware Error]:   node: 0 card: 0 module: 2 rank: 0 bank: 3 device: 0 row: 17 column: 8 ", 3,
     "location", dict(location=dict(node=0, card=0, module=2, rank=0, bank=3, device=0, row=17, column=8))),
    ("{3}[Hardware Error]:   error_type: 3, multi-bit ECC", 3, "error_type",
     dict(error_type=3, error_type_text="multi-bit ECC")),
    ("{3}[Hardware Error]:   DIMM location: CPU1_DIMM_A2 ", 3, "dimm_location", dict(dimm_location="CPU1_DIMM_A2")),
    # cper_print_pcie
    ("{4}[Hardware Error]:   port_type: 4, root port", 4, "port_type", dict(port_type=4, port_type_text="root port")),
    ("{4}[Hardware Error]:   command: 0x0547, status: 0x4010", 4, "command", dict(command=0x547, pcie_status=0x4010)),
    ("{1}[Hardware Error]:   device_id: 0000:5e:00.0", 1, "device_bdf", dict(pci_bus_id="0000:5e:00.0")),
    ("{1}[Hardware Error]:   vendor_id: 0x144d, device_id: 0xa808", 1, "vendor", dict(vendor_id=0x144d,
                                                                                     device_id=0xa808)),
    ("{4}[Hardware Error]:   class_code: 060400", 4, "class_code", dict(class_code="060400")),
    ("{4}[Hardware Error]:   aer_uncor_status: 0x00004000, aer_uncor_mask: 0x00000000", 4, "aer_uncor",
     dict(aer_uncor_status=0x4000, aer_uncor_mask=0)),
    ("{4}[Hardware Error]:   aer_uncor_severity: 0x00062030", 4, "aer_uncor_severity",
     dict(aer_uncor_severity=0x62030)),
    ("{4}[Hardware Error]:   TLP Header: 34000000 08000052 00000000 00000000", 4, "tlp",
     dict(tlp_header=[0x34000000, 0x08000052, 0, 0])),
    # cper_print_aer (v3.x-5.14): the section's AER registers through the AER driver's names
    ("{4}[Hardware Error]:   aer_status: 0x00000001, aer_mask: 0x00002000", 4, "aer_status",
     dict(aer_status=1, aer_mask=0x2000)),
    ("{4}[Hardware Error]:   aer_layer=Physical Layer, aer_agent=Receiver ID", 4, "aer_layer",
     dict(type="Physical Layer", agent="Receiver ID")),
]


@pytest.mark.parametrize("line, seq, kind, fields", GHES_LINES, ids=[x[0][:70] for x in GHES_LINES])
def test_ghes_format(line: str, seq: int, kind: str, fields: dict) -> None:
    got = ghes.parse_line(line)
    assert got is not None and got[:2] == (seq, kind)
    assert {k: got[2].get(k) for k in fields} == fields


@pytest.mark.parametrize("line", ["[Hardware Error]: Corrected error, no action required.",
                                  "{x}[Hardware Error]: event severity: fatal", "{1234567890}[Hardware Error]: x",
                                  "{1} [Hardware Error]: event severity: fatal"])
def test_not_a_ghes_line(line: str) -> None:
    assert ghes.parse_line(line) is None


def memory_record(seq: int, severity: str, t: str = "100.000001", pa: str = "0x0000001234567890") -> list[str]:
    return [G(seq, "Hardware error from APEI Generic Hardware Error Source: 0", t),
            G(seq, f"event severity: {severity}", t),
            G(seq, f" Error 0, type: {severity}", t),
            G(seq, "  section_type: memory error", t),
            G(seq, "  error_status: Storage error in DRAM memory (0x0000000000000400)", t),
            G(seq, f"  physical_address: {pa}", t),
            G(seq, "  node:0 card:1 module:2 rank:0 bank:3 device:0 row:4660 column:1024", t),
            G(seq, "  error_type: 2, single-bit ECC", t),
            G(seq, "  DIMM location: CPU0_DIMM_B1 ", t)]


# cper_severity_str prints "unknown" for a severity past its table: no type is guessed for it
@pytest.mark.parametrize("severity, typ", [("corrected", "corrected"), ("recoverable", "uncorrected"),
                                           ("fatal", "uncorrected"), ("info", "corrected"), ("unknown", "unknown")])
def test_a_ghes_memory_record_alone_is_a_cpu_ecc_event(severity: str, typ: str) -> None:
    (e,), p = run(memory_record(3, severity))
    assert (e.kind, e.device, e.category, e.monotonic) == ("cpu_ecc", "CPU0_DIMM_B1", typ, 100.000001)
    assert {k: e.attrs.get(k) for k in ("type", "via", "ghes_severity", "count", "physical_address", "address",
                                        "error_type", "error_type_text", "error_status", "label", "ghes_record")} == {
        "type": typ, "via": "ghes", "ghes_severity": severity, "count": 1, "physical_address": 0x1234567890,
        "address": 0x1234567890, "error_type": 2, "error_type_text": "single-bit ECC", "error_status": 0x400,
        "label": "CPU0_DIMM_B1", "ghes_record": 3}
    assert e.attrs["location"] == dict(node=0, card=1, module=2, rank=0, bank=3, device=0, row=4660, column=1024)
    assert e.raw.count("\n") == 8 and p.stats.unparsed == 0


# ghes_edac_report_mem_error -> edac_raw_mc_handle_error: "%d CE %s%son %s (%s page:0x%lx offset:0x%lx
# grain:%ld syndrome:0x%lx%s%s)", msg = cper_mem_err_type_str, location "node:%d card:%d ...",
# other_detail "status(0x%016llx): <meaning>". Physical address 0x1234567890 = page 0x1234567, offset 0x890.
GHES_EDAC = ("[100.000002] EDAC MC0: 1 CE single-bit ECC on CPU0_DIMM_B1 (node:0 card:1 module:2 rank:0 bank:3 "
             "row:4660 col:1024 page:0x1234567 offset:0x890 grain:1 syndrome:0x0 - status(0x0000000000000400): "
             "Storage error in DRAM memory)")


def test_a_ghes_memory_record_and_its_ghes_edac_line_are_one_event() -> None:
    (e,), p = run(memory_record(3, "corrected") + [GHES_EDAC])
    assert (e.kind, e.device, e.category, e.monotonic) == ("cpu_ecc", "mc0/CPU0_DIMM_B1", "corrected", 100.000002)
    assert {k: e.attrs.get(k) for k in ("mc", "count", "type", "via", "description", "operation", "page", "offset",
                                        "ghes_severity", "physical_address", "address", "error_status",
                                        "error_status_text", "flags")} == {
        "mc": 0, "count": 1, "type": "corrected", "via": "edac", "description": "single-bit ECC", "operation": None,
        "page": 0x1234567, "offset": 0x890, "ghes_severity": "corrected", "physical_address": 0x1234567890,
        "address": 0x1234567890, "error_status": 0x400, "error_status_text": "Storage error in DRAM memory",
        "flags": None}
    assert p.stats.duplicates_suppressed == 1


def test_an_edac_line_of_another_address_is_another_error() -> None:
    evs, _ = run(memory_record(3, "corrected", pa="0x0000000abcdef000") + [GHES_EDAC])
    assert sorted((e.kind, e.attrs["via"], e.attrs["address"]) for e in evs) == [
        ("cpu_ecc", "edac", 0x1234567890), ("cpu_ecc", "ghes", 0xabcdef000)]


# -- both orders: ghes_edac's line before or after its CPER record -------------------------------
#
# drivers/acpi/apei/ghes.c: ghes_proc() (polled, external IRQ, SCI/HED notification) calls
# ghes_print_estatus() and then ghes_do_proc(), which hands each memory section to ghes_edac
# (ghes_edac_report_mem_error directly up to v6.0, through ghes_report_chain since v6.1): record
# first, EDAC line after. ghes_proc_in_irq() (the irq_work that handles what the NMI / SEA / SDEI
# handlers queued) calls ghes_do_proc() first and ghes_print_estatus() after it: EDAC line first.
# ghes_print_estatus() is rate limited (2 records per 5 s) and ghes_estatus_cached() drops a record
# seen in the last 10 s, while ghes_edac reports every error: an EDAC line may have no record.
# The EDAC line below is edac_mc.c edac_ce_error's "%d CE %s%son %s (%s page:0x%lx offset:0x%lx
# grain:%ld syndrome:0x%lx%s%s)" as ghes_edac fills it (v5.10+): msg = cper_mem_err_type_str,
# label "unknown memory" (no DIMM found by the DMI handle), location from the CPER fields, other
# detail "APEI location: <location> status(0x%016llx): <meaning>".


def ghes_edac(t: str | None, page: int, offset: int, rank: int = 0, bank: int = 3, kind: str = "CE",
              label: str = "unknown memory") -> str:
    where = f"node:0 card:1 module:2 rank:{rank} bank:{bank} row:4660 col:1024"
    line = (f"EDAC MC0: 1 {kind} single-bit ECC on {label} ({where} page:0x{page:x} offset:0x{offset:x} grain:1 "
            f"syndrome:0x0 - APEI location: {where} status(0x0000000000000400): Storage error in DRAM memory)")
    return line if t is None else f"[{t}] {line}"


def record(seq: int, t: str | None, pa: int | None, rank: int = 0, bank: int = 3, severity: str = "corrected",
           dimm: str = "not present. DMI handle: 0x0000") -> list[str]:
    """A CPER memory record (__ghes_print_estatus, cper_estatus_print, cper_print_mem); no stamp when t is None."""
    body = ["Hardware error from APEI Generic Hardware Error Source: 0", f"event severity: {severity}",
            f" Error 0, type: {severity}", "  section_type: memory error",
            "  error_status: Storage error in DRAM memory (0x0000000000000400)",
            *([f"  physical_address: 0x{pa:016x}"] if pa is not None else []),
            f"  node:0 card:1 module:2 rank:{rank} bank:{bank} row:4660 column:1024",
            "  error_type: 2, single-bit ECC", f"  DIMM location: {dimm} "]
    return [f"{{{seq}}}[Hardware Error]: {b}" if t is None else G(seq, b, t) for b in body]


PA = 0x1234567890  # page 0x1234567, offset 0x890 in ghes_edac's line (PAGE_SHIFT 12)


@pytest.mark.parametrize("order", ["edac_first", "ghes_first"])
@pytest.mark.parametrize("stamped", [True, False], ids=["stamped", "no_time"])
def test_a_ghes_record_and_its_ghes_edac_line_are_one_event_in_either_order(order: str, stamped: bool) -> None:
    t_edac, t_ghes = ("100.000001", "100.000002") if order == "edac_first" else ("100.000002", "100.000001")
    line = ghes_edac(t_edac if stamped else None, 0x1234567, 0x890)
    rec = record(7, t_ghes if stamped else None, PA)
    (e,), p = run([line, *rec] if order == "edac_first" else [*rec, line])
    assert (e.kind, e.device, e.category) == ("cpu_ecc", "mc0/unknown memory", "corrected")
    assert e.monotonic == (float(t_edac) if stamped else None)  # the EDAC line's event
    assert {k: e.attrs.get(k) for k in ("via", "mc", "count", "type", "label", "page", "offset", "ghes_severity",
                                        "ghes_source", "ghes_record", "physical_address", "address", "error_type",
                                        "error_type_text", "error_status")} == {
        "via": "edac", "mc": 0, "count": 1, "type": "corrected", "label": "unknown memory", "page": 0x1234567,
        "offset": 0x890, "ghes_severity": "corrected", "ghes_source": 0, "ghes_record": 7, "physical_address": PA,
        "address": PA, "error_type": 2, "error_type_text": "single-bit ECC", "error_status": 0x400}
    assert e.attrs["location"] == dict(node=0, card=1, module=2, rank=0, bank=3, row=4660, column=1024)
    assert (p.stats.duplicates_suppressed, p.stats.unparsed, p.stats.events) == (1, 0, 1)


@pytest.mark.parametrize("order", ["edac_first", "ghes_first"])
def test_an_address_less_pair_is_matched_by_severity_and_location(order: str) -> None:
    # CPER_MEM_VALID_PA clear: no physical_address line, ghes_edac prints page:0x0 offset:0x0.
    line, rec = ghes_edac("100.000001", 0, 0), record(2, "100.000001", None, severity="recoverable")
    line = line.replace(" CE ", " UE ")  # ghes_edac: GHES_SEV_RECOVERABLE -> HW_EVENT_ERR_UNCORRECTED ("UE")
    (e,), p = run([line, *rec] if order == "edac_first" else [*rec, line])
    assert (e.attrs["via"], e.attrs["type"], e.attrs["ghes_severity"], e.attrs["ghes_record"], e.attrs["address"]) == (
        "edac", "uncorrected", "recoverable", 2, None)
    assert p.stats.duplicates_suppressed == 1


@pytest.mark.parametrize("order", ["edac_first", "ghes_first"])
def test_two_errors_close_together_stay_two(order: str) -> None:
    pb = 0x0000000abcdef040
    a = (ghes_edac("100.000001", 0x1234567, 0x890), record(1, "100.000002", PA))
    b = (ghes_edac("100.000003", 0xabcdef, 0x40, rank=1), record(2, "100.000004", pb, rank=1))
    lines = [x for line, rec in (a, b) for x in ([line, *rec] if order == "edac_first" else [*rec, line])]
    evs, p = run(lines)
    assert sorted((e.attrs["via"], e.attrs["ghes_record"], e.attrs["physical_address"], e.attrs["address"],
                   e.attrs["location"]["rank"]) for e in evs) == [("edac", 1, PA, PA, 0), ("edac", 2, pb, pb, 1)]
    assert p.stats.duplicates_suppressed == 2


def test_two_address_less_errors_are_told_apart_by_their_location() -> None:
    # ghes_proc_in_irq order for two queued records: EDAC A, record A, EDAC B, record B; only the
    # CPER rank/bank differ. EDAC B must not take record A (it is EDAC A's, still waiting).
    lines = [ghes_edac("100.000001", 0, 0, rank=0, bank=3), *record(1, "100.000002", None, rank=0, bank=3),
             ghes_edac("100.000003", 0, 0, rank=1, bank=5), *record(2, "100.000004", None, rank=1, bank=5)]
    evs, p = run(lines)
    assert [(e.monotonic, e.attrs["ghes_record"], e.attrs["location"]["rank"], e.attrs["location"]["bank"])
            for e in sorted(evs, key=lambda e: e.monotonic)] == [(100.000001, 1, 0, 3), (100.000003, 2, 1, 5)]
    assert p.stats.duplicates_suppressed == 2


@pytest.mark.parametrize("other", [
    dict(kind="UE"),  # another severity class
    dict(label="CPU0_DIMM_A1"),  # another DIMM than the record's
    dict(bank=9),  # another CPER bank
])
def test_an_address_less_edac_line_of_another_error_takes_no_record(other: dict) -> None:
    lines = [ghes_edac("100.000001", 0, 0, **other), *record(4, "100.000002", None, dimm="CPU0_DIMM_B1")]
    evs, p = run(lines)
    assert sorted(e.attrs["via"] for e in evs) == ["edac", "ghes"] and p.stats.duplicates_suppressed == 0


def test_a_ghes_record_without_its_edac_line_is_one_event() -> None:
    (e,), p = run(record(5, "100.000001", PA))
    assert (e.attrs["via"], e.attrs["address"], e.device) == ("ghes", PA, "not present. DMI handle: 0x0000")
    assert p.stats.duplicates_suppressed == 0


def test_a_ghes_edac_line_without_a_record_is_one_event_when_its_window_passes() -> None:
    # its record dropped by ghes_estatus_cached / the print rate limit: the line stands alone.
    p = KernelLogParser(source="file")
    held = list(p.feed_lines([ghes_edac("100.000001", 0x1234567, 0x890)], CTX))  # feed_lines flushes
    assert [(e.kind, e.attrs["via"], e.attrs["address"]) for e in held] == [("cpu_ecc", "edac", PA)]
    assert "ghes_record" not in held[0].attrs
    p = KernelLogParser(source="file")
    recs = list(records_from_lines([ghes_edac("100.000001", 0x1234567, 0x890),
                                    "[101.500000] systemd[1]: Started Session 4 of user root.",
                                    "[102.100000] systemd[1]: Started Session 5 of user root."], CTX))
    assert [len(p.feed(r)) for r in recs] == [0, 0, 1]  # out when a line past 2 s comes
    assert p.flush() == []


def test_a_ghes_edac_line_without_time_waits_for_n_records() -> None:
    p = KernelLogParser(source="file")
    other = [f"EDAC MC0: Giving out device to module skx_edac controller {i}" for i in range(40)]
    recs = list(records_from_lines([ghes_edac(None, 0x1234567, 0x890), *other], CTX))
    counts = [len(p.feed(r)) for r in recs]
    assert sum(counts) == 1 and counts.index(1) == 1 + GHES_WINDOW_RECORDS


def test_a_held_ghes_edac_line_is_named_by_pending_seqs() -> None:
    # /dev/kmsg records ("prio,seq,usec,flags;msg"), as the agent reads them; it flushes when idle.
    lines = [ghes_edac(None, 0x1234567, 0x890), *record(9, None, PA)]
    recs = [parse_kmsg_record(f"4,{100 + i},{100_000_001 + i},-;{m}", CTX) for i, m in enumerate(lines)]
    p = KernelLogParser(source="kmsg")
    assert [e for r in recs for e in p.feed(r)] == []
    assert p.pending_seqs() == tuple(range(100, 100 + len(lines)))  # the EDAC line's seq and the record's
    (e,) = p.flush()
    assert (e.attrs["seq"], e.attrs["via"], e.attrs["ghes_record"], e.attrs["address"]) == (100, "edac", 9, PA)
    assert p.pending_seqs() == ()
    p = KernelLogParser(source="kmsg")  # alone: still named until it is out
    assert p.feed(recs[0]) == [] and p.pending_seqs() == (100,)
    assert [e.attrs["seq"] for e in p.flush()] == [100] and p.pending_seqs() == ()


def test_a_non_ghes_edac_line_is_not_held() -> None:
    # skx_common / amd64_edac lines carry no CPER location: out at once, as before.
    p = KernelLogParser(source="file")
    (rec,) = records_from_lines([UMC_EDAC], CTX)
    assert [e.attrs["via"] for e in p.feed(rec)] == ["edac"] and p.pending_seqs() == ()


def test_interleaved_ghes_records_are_grouped_by_their_number() -> None:
    # E-004: lines of {1} are interleaved with other lines; here two records, and other lines, alternate.
    a, b = memory_record(1, "corrected"), memory_record(2, "recoverable", pa="0x0000000000abc000")
    lines = [x for pair in zip(a, b) for x in pair]
    lines.insert(5, "[100.000001] mce: [Hardware Error]: Machine check events logged")
    evs, p = run(lines)
    assert sorted((e.attrs["ghes_record"], e.attrs["type"], e.attrs["physical_address"]) for e in evs) == [
        (1, "corrected", 0x1234567890), (2, "uncorrected", 0xabc000)]
    assert p.stats.unparsed == 0


@pytest.mark.parametrize("severity, aer_severity", [("corrected", "corrected"), ("recoverable", "non_fatal"),
                                                    ("fatal", "fatal"), ("unknown", "unknown")])
def test_a_ghes_pcie_record_is_a_pcie_aer_event(severity: str, aer_severity: str) -> None:
    # cper_severity_to_aer: recoverable -> AER_NONFATAL, fatal -> AER_FATAL, else correctable; a
    # CPER severity printed "unknown" (cper_severity_str past its table) stays unknown in the event.
    lines = [G(4, "Hardware error from APEI Generic Hardware Error Source: 2"), G(4, f"event severity: {severity}"),
             G(4, f" Error 0, type: {severity}"), G(4, "  section_type: PCIe error"),
             G(4, "  port_type: 0, PCIe end point"), G(4, "  version: 3.0"), G(4, "  command: 0x0546, status: 0x0010"),
             G(4, "  device_id: 0000:41:00.0"), G(4, "  slot: 3"), G(4, "  secondary_bus: 0x00"),
             G(4, "  vendor_id: 0x10de, device_id: 0x2330"), G(4, "  class_code: 030200")]
    if severity == "fatal":  # cper_print_pcie prints the AER registers for fatal errors only (v5.15+)
        lines += [G(4, "  aer_uncor_status: 0x00004000, aer_uncor_mask: 0x00000000"),
                  G(4, "  aer_uncor_severity: 0x00062030"),
                  G(4, "  TLP Header: 40000001 0000000f 90028090 00000000")]
    (e,), p = run(lines)
    assert (e.kind, e.device, e.attrs["via"], e.attrs["severity"], e.attrs["ghes_severity"], e.attrs["vendor_id"],
            e.attrs["device_id"], e.attrs["port_type"]) == ("pcie_aer", "0000:41:00.0", "ghes", aer_severity, severity,
                                                            0x10de, 0x2330, 0)
    # an uncorrected error on an NVIDIA function (vendor 0x10de) is a GPU-lost precursor; one of
    # unknown severity is not known to be uncorrected
    assert e.category == (aer_severity if aer_severity in ("corrected", "unknown") else "gpu_lost_precursor")
    if severity == "fatal":
        assert (e.attrs["status"], e.attrs["errors"], e.attrs["tlp_header"][0]) == (
            0x4000, [{"bit": 14, "name": "CmpltTO", "first": False}], 0x40000001)
    assert p.stats.unparsed == 0


def test_ghes_lines_without_the_record_header_are_unparsed() -> None:
    # A record split across two inputs: the second holds its tail only.
    head = memory_record(5, "corrected")[:4]
    tail = memory_record(5, "corrected")[4:]
    (e,), _ = run(head)
    assert (e.kind, e.attrs["via"], e.attrs.get("physical_address")) == ("cpu_ecc", "ghes", None)
    evs, p = run(tail)
    assert [(e.kind, e.attrs["family"]) for e in evs] == [("unparsed", "ghes")] and p.stats.unparsed == 1


# -- EDAC lines: any driver message between the count and "on" ------------------------------------

EDAC_LINES = [
    # amd64_edac __log_ecc_error: DECODE_OK prints an empty message, the others their error string
    ("EDAC MC0: 1 CE on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x313c7a offset:0x20 grain:64 syndrome:0x800)",
     dict(mc=0, operation=None, description=None, label="mc#0csrow#1channel#3", csrow=1, channel=3,
          address=0x313c7a020)),
    ("EDAC MC0: 1 CE Cannot decode normalized address on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x0 "
     "offset:0x0 grain:64 syndrome:0x800)", dict(description="Cannot decode normalized address", address=None)),
    ("EDAC MC1: 1 UE Failed to map error addr to a csrow on any memory ( page:0x0 offset:0x0 grain:0)",
     dict(mc=1, type="uncorrected", description="Failed to map error addr to a csrow", label="any memory")),
    ("EDAC MC0: 1 CE Unknown syndrome - possible error reporting race on mc#1csrow#0channel#0 (csrow:0 channel:0 "
     "page:0x1000 offset:0x0 grain:64 syndrome:0x0)", dict(description="Unknown syndrome - possible error reporting race")),
    # ghes_edac: cper_mem_err_type_str (v5.x+) / its own table (older), labels from DMI with blanks
    ("EDAC MC0: 1 CE Single-bit ECC on unknown label (node:0 card:0 module:0 page:0x0 offset:0x0 grain:1 syndrome:0x0)",
     dict(description="Single-bit ECC", label="unknown label")),
    ("EDAC MC0: 1 UE multi-bit ECC on unknown memory (node:0 rank:1 page:0x12345 offset:0x678 grain:1 - "
     "status(0x0000000000000400): Storage error in DRAM memory)",
     dict(type="uncorrected", description="multi-bit ECC", label="unknown memory", address=0x12345678,
          error_status=0x400, error_status_text="Storage error in DRAM memory")),
    ("EDAC MC0: 1 CE single-bit ECC on NODE 0 CHANNEL 1 DIMM 0 (node:0 page:0x1 offset:0x2 grain:1 syndrome:0x0)",
     dict(label="NODE 0 CHANNEL 1 DIMM 0", address=0x1002)),
    # skx_common optype strings ("memory <op> error" -> operation) and its " OVERFLOW"/" recoverable" flags
    ("EDAC MC2: 1 UE memory write error on CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1 offset:0x0 "
     "grain:32 -  OVERFLOW recoverable err_code:0x0000:0x00a1 socket:1 imc:0 rank:0 bg:0 ba:0 row:0x1 col:0x0)",
     dict(operation="memory write", flags=["OVERFLOW", "recoverable"], description=None)),
    ("EDAC MC2: 3 CE addr/cmd error on CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x0 offset:0x0 "
     "grain:32 syndrome:0x0 -  err_code:0x0000:0x00b0 socket:1 imc:0 rank:0)",
     dict(count=3, operation=None, description="addr/cmd error", flags=None)),
]


@pytest.mark.parametrize("line, fields", EDAC_LINES, ids=[x[0][:70] for x in EDAC_LINES])
def test_edac_message_variants(line: str, fields: dict) -> None:
    got = edac.parse_edac(line)
    assert got is not None
    assert {k: got.get(k) for k in fields} == fields


def test_edac_deferred_type() -> None:
    assert edac.parse_edac("EDAC MC0: 1 Deferred on mc#0csrow#0channel#0 (csrow:0 page:0x0 offset:0x0 grain:64)")[
        "type"] == "deferred"


@pytest.mark.parametrize("count, parsed", [(1, True), (16384, True), (65535, True), (65536, False),
                                           (2147483649, False), (999999999, False)])
def test_edac_count_is_a_u16(count: int, parsed: bool) -> None:
    # edac_mc_handle_error(..., const u16 error_count, ...) / struct edac_raw_error_desc { u16 error_count; }
    # (include/linux/edac.h): a line cannot report more than 65535 errors; a larger count is a mangled line.
    line = (f"EDAC MC0: {count} CE memory read error on DIMM_A1 (channel:0 slot:0 page:0x4 offset:0x0 grain:8 "
            "syndrome:0x0)")
    got = edac.parse_edac(line)
    assert (got["count"] if got else None) == (count if parsed else None)
    evs, p = run([f"[ 10.000001] {line}"])
    assert [(e.kind, e.attrs.get("count")) for e in evs] == [("cpu_ecc", count) if parsed else ("unparsed", None)]
    assert p.stats.unparsed == (0 if parsed else 1)


# -- AMD MCA decoder --------------------------------------------------------------------------------

AMD_LINES = [
    # decode_error_status (v4.20+; "Deferred error." before "..., no action required." in v5.x)
    *[(f"[Hardware Error]: {t}.", "status_text", dict(status_text=t)) for t in (
        "Corrected error, no action required", "Uncorrected, software restartable error",
        "Uncorrected, software containable error", "System Fatal error", "Deferred error, no action required",
        "Deferred error")],
    # amd_decode_mce: "CPU:%d (%x:%x:%x) MC%d_STATUS[%s|%s|%s|%s|%s" ... "]: 0x%016llx" (v4.20+),
    # "CPU:%d\tMC%d_STATUS[...]" (v3.x-4.x), "MC%d_STATUS[...]" (older)
    ("[Hardware Error]: CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b",
     "status", dict(cpu=1, family=0x17, model=0x31, stepping=0, bank=18, status=0xdc2040000000011b,
                    flags=["Over", "CE", "MiscV", "AddrV", "SyndV", "CECC"])),
    ("[Hardware Error]: CPU:2\tMC4_STATUS[-|UE|MiscV|PCC|AddrV|UECC]: 0xb600000000000813", "status",
     dict(cpu=2, family=None, bank=4, flags=["UE", "MiscV", "PCC", "AddrV", "UECC"])),
    ("[Hardware Error]: MC4_STATUS[-|CE|-|-|AddrV|CECC]: 0x9c6c400001080a13", "status", dict(cpu=None, bank=4)),
    ("[Hardware Error]: Error Addr: 0x0000000313c7a020", "addr", dict(addr=0x313c7a020)),
    ("[Hardware Error]: \tMC4_ADDR: 0x0000000113c7a020", "addr", dict(addr=0x113c7a020)),
    ("[Hardware Error]: PPIN: 0x02b6d2e3b5a7c0e1", "ppin", dict(ppin=0x02b6d2e3b5a7c0e1)),
    ("[Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01", "ipid",
     dict(ipid=0x9600350f00, synd=0x9fec08000a800a01)),
    ("[Hardware Error]: IPID: 0x000700b040000000", "ipid", dict(ipid=0x000700b040000000, synd=None)),
    ("[Hardware Error]: Syndrome1: 0x0000000000000000, Syndrome2: 0x0000000000000000", "synd12", dict(synd1=0)),
    ("[Hardware Error]: TSC: 1234567890123", "tsc", dict(tsc=1234567890123)),
    # decode_smca_error: "%s Ext. Error Code: %d" (+ ", DRAM ECC error." from decode_dram_ecc callers / older)
    ("[Hardware Error]: Unified Memory Controller Ext. Error Code: 0", "ext_error",
     dict(bank_name="Unified Memory Controller", ext_error_code=0, description=None)),
    ("[Hardware Error]: Unified Memory Controller Ext. Error Code: 0, DRAM ECC error.", "ext_error",
     dict(ext_error_code=0, description="DRAM ECC error")),
    ("[Hardware Error]: Bank 21 is reserved.", "bank_reserved", dict(reserved_bank=21)),
    # amd_decode_nb_mce (family 10h-16h): "Northbridge Error (node %d): " + description
    ("[Hardware Error]: Northbridge Error (node 0): DRAM ECC error detected on the NB.", "unit_error",
     dict(bank_name="Northbridge", node=0, description="DRAM ECC error detected on the NB.")),
    # amd_decode_err_code: the decode's last line
    ("[Hardware Error]: cache level: L3/GEN, mem/io: MEM, mem-tx: RD, part-proc: SRC (no timeout)", "err_code",
     dict(err_code="cache level: L3/GEN, mem/io: MEM, mem-tx: RD, part-proc: SRC (no timeout)")),
    ("[Hardware Error]: internal: unknown", "err_code", dict(err_code="internal: unknown")),
]


@pytest.mark.parametrize("line, kind, fields", AMD_LINES, ids=[x[0][18:80] for x in AMD_LINES])
def test_amd_decoder_format(line: str, kind: str, fields: dict) -> None:
    got = mce.parse_amd_line(line)
    assert got is not None and got[0] == kind
    assert {k: got[1].get(k) for k in fields} == fields


# A UMC decode as mce_amd.c prints it for one error (E-101's values) and the EDAC line amd64_edac's
# decode_umc_error prints from inside it, before amd_decode_err_code's last line.
UMC = [A("Corrected error, no action required."),
       A("CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b"),
       A("Error Addr: 0x0000000313c7a020"), A("IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01"),
       A("Unified Memory Controller Ext. Error Code: 0, DRAM ECC error.")]
UMC_EDAC = ("[200.000002] EDAC MC0: 1 CE on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x313c7a offset:0x20 "
            "grain:64 syndrome:0x800)")
ERR_CODE = A("cache level: L3/GEN, mem/io: MEM, mem-tx: RD, part-proc: RES (no timeout)", "200.000003")


def test_umc_decode_and_its_edac_line_are_one_event() -> None:
    (e,), p = run(UMC + [UMC_EDAC, ERR_CODE])
    assert (e.kind, e.device, e.category) == ("cpu_ecc", "mc0/mc#0csrow#1channel#3", "corrected")
    # EDAC page/offset known (0x313c7a << 12 | 0x20): the EDAC address stands, the MCA fields join it
    assert {k: e.attrs[k] for k in ("via", "mca_bank", "mca_cpu", "mca_status", "mca_addr", "hardware_id",
                                    "address")} == dict(via="edac", mca_bank=18, mca_cpu=1,
                                                        mca_status=0xdc2040000000011b, mca_addr=0x313c7a020,
                                                        hardware_id=0x96, address=0x313c7a020)
    assert p.stats.duplicates_suppressed == 1 and p.stats.unparsed == 0


def test_umc_decode_without_an_edac_line_is_a_cpu_ecc_event_of_its_own() -> None:
    (e,), _ = run(UMC + [ERR_CODE])
    assert (e.kind, e.device, e.category, e.attrs["via"], e.attrs["type"], e.attrs["address"], e.attrs["count"]) == (
        "cpu_ecc", "cpu1/bank18", "corrected", "mca", "corrected", 0x313c7a020, 1)


@pytest.mark.parametrize("words, status, typ", [
    # the words and the register disagree: the register wins (UC bit 61, Deferred bit 44)
    ("Corrected error, no action required.", 0xbc2040000000011b, "uncorrected"),   # UC set
    ("Uncorrected, software restartable error.", 0x9c2040000000011b, "corrected"),  # UC clear
    ("Deferred error, no action required.", 0x9c2010000000011b, "deferred"),       # bit 44
    ("Corrected error, no action required.", 0xdc2040000000011b, "corrected"),
])
def test_umc_type_is_read_from_the_status_register(words: str, status: int, typ: str) -> None:
    lines = [A(words), A(f"CPU:1 (19:11:1) MC18_STATUS[-|CE|MiscV|AddrV|-|-|SyndV|-|-|-|-]: 0x{status:016x}"),
             A("IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01")]
    (e,), _ = run(lines + [UMC_EDAC])
    assert (e.attrs["type"], e.category, e.attrs["mca_status"]) == (typ, typ, status)
    (e,), _ = run(lines)  # no EDAC line: the decode's own cpu_ecc event
    assert (e.kind, e.attrs["type"], e.attrs["via"]) == ("cpu_ecc", typ, "mca")


def test_a_decode_of_another_bank_is_an_mce_event_with_its_flags() -> None:
    # IPID HardwareID 0xb0 (not the UMC's 0x96): an Execution Unit error, deferred (bit 44).
    (e,), _ = run([A("Deferred error, no action required."),
                   A("CPU:4 (19:1:1) MC5_STATUS[-|CE|MiscV|AddrV|-|-|SyndV|-|Deferred|-|-]: 0x8c30100000000800"),
                   A("IPID: 0x000500b000000000, Syndrome: 0x0000000000000001"),
                   A("Execution Unit Ext. Error Code: 2"), A("cache level: L1, tx: GEN, mem-tx: GEN")])
    assert (e.kind, e.device, e.category) == ("mce", "cpu4/bank5", "deferred")
    assert {k: e.attrs[k] for k in ("cpu", "bank", "status", "type", "deferred", "uncorrected", "flags", "ipid",
                                    "bank_name", "ext_error_code", "cpu_family", "via")} == dict(
        cpu=4, bank=5, status=0x8c30100000000800, type="deferred", deferred=True, uncorrected=False,
        flags=["CE", "MiscV", "AddrV", "SyndV", "Deferred"], ipid=0x000500b000000000, bank_name="Execution Unit",
        ext_error_code=2, cpu_family=0x19, via="mca")


def test_an_edac_line_past_the_window_is_not_the_decode() -> None:
    late = UMC_EDAC.replace("[200.000002]", "[205.000000]")
    evs, _ = run(UMC + [late])
    assert [(e.kind, e.attrs["via"]) for e in evs] == [("cpu_ecc", "mca"), ("cpu_ecc", "edac")]
    assert "mca_bank" not in evs[1].attrs


@pytest.mark.parametrize("lines", [
    [A("Error Addr: 0x0000000313c7a020")],  # a decode line without its MCn_STATUS line
    [A("Corrected error, no action required.")],  # the words alone (the decode cut off)
    [A("CPU:1 (17:31:0) MC18_STATUS[Over|CE]: 0x1dc2040000000011b")],  # a status past 64 bits
])
def test_malformed_amd_decodes_are_unparsed(lines: list[str]) -> None:
    evs, p = run(lines)
    assert [(e.kind, e.attrs["family"]) for e in evs] == [("unparsed", "mca")] and p.stats.unparsed == 1


def test_a_malformed_status_line_starts_a_decode_whose_fields_go_nowhere() -> None:
    # amd_decode_mce prints one decode per error: decode_error_status's words, then the status line
    # ("CPU:%d (%x:%x:%x) MC%d_STATUS[...]: 0x%016llx", 16 hex digits). A status line with 17 digits is
    # mangled: it still starts its decode (with the words before it), and the Error Addr / IPID lines
    # after it are that decode's; they join neither the EDAC line after them nor the next decode.
    evs, p = run([
        A("Corrected error, no action required.", "1533534.869508"),  # a decode whose status line is missing
        A("Error Addr: 0x0000000313c7a020", "1533534.912122"),
        A("IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01", "1533534.926641"),
        A("Unified Memory Controller Ext. Error Code: 0", "1533534.943278"),
        "[1533534.946635] EDAC MC0: 1 CE Cannot decode normalized address on mc#0csrow#1channel#3 (csrow:1 "
        "channel:3 page:0x0 offset:0x0 grain:64 syndrome:0x800)",
        A("Uncorrected, software containable error.", "1533535.869508"),
        A("CPU:1 (17:31:0) MC18_STATUS[Over|UE|MiscV|AddrV|-|-|SyndV|UECC|-|-|-]: 0x1dc2040000000011b",
          "1533535.884635"),  # 17 hex digits: no 64-bit register
        A("Error Addr: 0x0000000313c7a020", "1533535.912122"),
        A("IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01", "1533535.926641"),
        A("Unified Memory Controller Ext. Error Code: 0", "1533535.943278"),
        "[1533535.946635] EDAC MC0: 1 UE on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x0 offset:0x0 grain:64 "
        "syndrome:0x800)",
        A("CPU:4 (19:11:1) MC5_STATUS[Over|CE|MiscV|-|-|-|-|-|-|-|-]: 0x9c20000000010151", "1533536.884635"),
        A("IPID: 0x000500b000000000", "1533536.884636"),
        A("Execution Unit Ext. Error Code: 0, Watchdog timeout error.", "1533536.884637"),
        A("cache level: L1, tx: INSN, mem-tx: IRD", "1533536.884638"),
    ])
    ce, ue = (e for e in evs if e.kind == "cpu_ecc")
    # the EDAC lines stand alone: page 0 / offset 0 is no address, and no decode gave them one
    assert (ce.attrs["type"], ce.attrs["address"], "mca_addr" in ce.attrs) == ("corrected", None, False)
    assert (ue.attrs["type"], ue.attrs["address"], "mca_addr" in ue.attrs) == ("uncorrected", None, False)
    (m,) = (e for e in evs if e.kind == "mce")
    # the Execution Unit decode has no Error Addr line: none of the mangled decode's fields reach it
    assert (m.device, m.category, m.attrs["status"], m.attrs["ipid"], m.attrs["bank_name"], "addr" in m.attrs) == (
        "cpu4/bank5", "corrected", 0x9c20000000010151, 0x000500b000000000, "Execution Unit", False)
    assert m.monotonic == 1533536.884635 and m.raw.count("\n") == 3  # its own four lines
    unparsed = [e for e in evs if e.kind == "unparsed"]
    assert [(e.attrs["family"], e.monotonic, e.raw.count("\n") + 1) for e in unparsed] == [
        ("mca", 1533534.869508, 4), ("mca", 1533535.869508, 5)]  # each decode's lines, once
    assert len(evs) == 5 and p.stats.unparsed == 2


@pytest.mark.parametrize("words", ["Corrected error, no action required.", "Deferred error, no action required.",
                                   "Uncorrected, software restartable error."])
def test_the_severity_words_start_a_new_decode(words: str) -> None:
    # A decode cut after its status line (no cache level line), then the next error's words: the next
    # decode takes none of the first one's fields.
    evs, _ = run([A("Corrected error, no action required."),
                  A("CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b"),
                  A("Error Addr: 0x0000000313c7a020"),
                  A(words, "200.000002"),
                  A("CPU:4 (19:11:1) MC5_STATUS[Over|CE|MiscV|-|-|-|-|-|-|-|-]: 0x9c20000000010151", "200.000003"),
                  A("cache level: L1, tx: INSN, mem-tx: IRD", "200.000004")])
    assert [(e.kind, e.device) for e in evs] == [("mce", "cpu1/bank18"), ("mce", "cpu4/bank5")]
    assert (evs[0].attrs["addr"], "addr" in evs[1].attrs, evs[1].attrs["status_text"]) == (
        0x313c7a020, False, words.rstrip("."))


# gpud's scanner logs the kernel line it matched under "line" (its own note under "msg").
GPUD = '{"level":"warn","ts":"2025-01-28T06:47:16Z","msg":"known hw error","line":"kern  :err   : %s %s"}'


def test_ghes_and_amd_decoder_lines_in_a_json_wrappers_line_key_are_read() -> None:
    ghes_lines = ["{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1",
                  "{1}[Hardware Error]: event severity: corrected", "{1}[Hardware Error]:  Error 0, type: corrected",
                  "{1}[Hardware Error]:   section_type: memory error",
                  "{1}[Hardware Error]:   physical_address: 0x0000001111111000",
                  "{1}[Hardware Error]:   error_type: 2, single-bit ECC"]
    amd_lines = ["[Hardware Error]: Corrected error, no action required.",
                 "[Hardware Error]: CPU:4 (19:11:1) MC5_STATUS[Over|CE|MiscV|-|-|-|-|-|-|-|-]: 0x9c20000000010151",
                 "[Hardware Error]: IPID: 0x000500b000000000",
                 "[Hardware Error]: cache level: L1, tx: INSN, mem-tx: IRD"]
    lines = [GPUD % (f"2025-01-25T10:35:54,{i:06d}+00:00", m) for i, m in enumerate(ghes_lines)]
    lines += [GPUD % (f"2025-01-25T10:36:54,{i:06d}+00:00", m) for i, m in enumerate(amd_lines)]
    evs, p = run(lines)
    assert [(e.kind, e.category, e.attrs["via"]) for e in evs] == [("cpu_ecc", "corrected", "ghes"),
                                                                   ("mce", "corrected", "mca")]
    assert (evs[0].attrs["physical_address"], evs[0].attrs["error_type"]) == (0x1111111000, 2)
    assert (evs[1].device, evs[1].attrs["status"]) == ("cpu4/bank5", 0x9c20000000010151)
    assert p.stats.unparsed == 0


HW_PIECES = st.sampled_from([
    "{1}[Hardware Error]: ", "[Hardware Error]: ", "  section_type: ", "memory error", "PCIe error",
    "physical_address: 0x", "0000001234567890", "node:0 card:1 ", "error_type: 2, ", "event severity: fatal",
    "Hardware error from APEI Generic Hardware Error Source: 1", "CPU:1 (17:31:0) ", "MC18_STATUS[Over|CE]: 0x",
    "dc2040000000011b", "IPID: 0x", "Error Addr: 0x", "EDAC MC0: 1 CE ", "on unknown memory ", "(page:0x1 offset:0x2)",
    "cache level: L3", "9" * 30, " ", "\n", "[  +0.000001] ", "²",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(HW_PIECES, max_size=10).map("".join), max_size=8))
def test_the_stream_never_raises_on_firmware_and_decoder_text(lines: list[str]) -> None:
    for line in lines:
        ghes.parse_line(line)
        mce.parse_amd_line(line)
        edac.parse_edac(line)
    for e in KernelLogParser().feed_lines(lines, CTX):
        e.to_json()
        assert e.kind != "unparsed" or e.attrs["family"] != "error", e.attrs

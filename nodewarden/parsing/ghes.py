"""Firmware-first hardware errors: APEI GHES records printed as UEFI CPER (``drivers/acpi/apei/ghes.c``
``__ghes_print_estatus``, ``drivers/firmware/efi/cper.c`` ``cper_estatus_print`` and the section
printers ``cper_print_mem`` / ``cper_print_pcie``).

Every line of one record carries the record's sequence number ``{N}`` before ``[Hardware Error]: ``;
sections are indented one blank deeper than the record, their fields two::

    {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
    {1}[Hardware Error]: It has been corrected by h/w and requires no further action   (corrected only)
    {1}[Hardware Error]: event severity: corrected            (recoverable | fatal | corrected | info)
    {1}[Hardware Error]:  Error 0, type: corrected                    (cper_estatus_print_section)
    {1}[Hardware Error]:   section_type: memory error                 (memory error | PCIe error | ...)
    {1}[Hardware Error]:   physical_address: 0x0000001234567000
    {1}[Hardware Error]:   node:0 card:0 module:1 rank:0 bank:3 row:1234 column:8   ("node: 0 card: 0 ..." before v5.10)
    {1}[Hardware Error]:   error_type: 2, single-bit ECC
    {1}[Hardware Error]:   section_type: PCIe error
    {1}[Hardware Error]:   port_type: 4, root port
    {1}[Hardware Error]:   device_id: 0000:5e:00.0
    {1}[Hardware Error]:   vendor_id: 0x144d, device_id: 0xa808
    {1}[Hardware Error]:   aer_uncor_status: 0x00004000, aer_uncor_mask: 0x00000000   (fatal only, v5.15+)

Lines of one record may be interleaved with other kernel lines (E-004): they are grouped by ``{N}``.
:func:`parse_line` is pure (``re.match`` at the start of the driver message, numbers bounded);
:class:`GhesRecord` folds one record's lines; :func:`section_events` turns a record's memory and
PCIe sections into event fields. Other section types (processor, ARM, firmware, CXL) are read and
give no event.
"""

from __future__ import annotations

import re
from typing import Any

from nodewarden.parsing import aer, edac
from nodewarden.parsing.lines import matched_fields

HEAD_RE = re.compile(r"\{(?P<seq>[0-9]{1,9})\}\[Hardware Error\]: ?(?P<body>.*)$", re.S)
HINT_RE = re.compile(r"\{[0-9]+\}\[Hardware Error\]:")
_HEX = r"0x(?P<{}>[0-9a-fA-F]{{1,16}})"
_SEVERITY = r"(?P<severity>recoverable|fatal|corrected|info|unknown)"
_LOCATION_KEYS = ("node", "card", "module", "rank", "bank", "bank_group", "bank_address", "device", "row",
                  "column", "bit_position", "requestor_id", "responder_id", "target_id", "chip_id")
_KV = rf"(?:{'|'.join(_LOCATION_KEYS)}): ?(?:0x[0-9a-fA-F]{{1,16}}|-?[0-9]{{1,10}})"
_LINES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p + r"\s*$")) for k, p in (
    ("header", r"Hardware error from APEI Generic Hardware Error Source: (?P<source_id>[0-9]{1,9})"),
    ("corrected_note", r"It has been corrected by h/w and requires no further action"),
    ("event_severity", rf"event severity: {_SEVERITY}"),
    ("section", rf"Error (?P<section>[0-9]{{1,4}}), type: {_SEVERITY}"),
    ("section_type", r"section[_ ]type: (?P<section_type>\S[^\n]{0,79}?)"),
    ("error_status", r"error_status: (?:(?P<error_status_text>[^()\n]{1,80}) \()?" + _HEX.format("error_status") + r"\)?"),
    ("physical_address", r"physical_address: " + _HEX.format("physical_address")),
    ("physical_address_mask", r"physical_address_mask: " + _HEX.format("physical_address_mask")),
    ("error_type", r"error_type: (?P<error_type>[0-9]{1,3}), (?P<error_type_text>\S[^\n]{0,59}?)"),
    ("dimm_location", r"DIMM location: (?P<dimm_location>\S[^\n]{0,79}?)"),
    ("location", rf"(?P<location>{_KV}(?: {_KV}){{0,15}}) ?"),
    ("port_type", r"port_type: (?P<port_type>[0-9]{1,3}), (?P<port_type_text>\S[^\n]{0,59}?)"),
    ("command", r"command: 0x(?P<command>[0-9a-fA-F]{4}), status: 0x(?P<pcie_status>[0-9a-fA-F]{4})"),
    ("device_bdf", r"device_id: (?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"),
    ("vendor", r"vendor_id: 0x(?P<vendor_id>[0-9a-fA-F]{4}), device_id: 0x(?P<device_id>[0-9a-fA-F]{4})"),
    ("class_code", r"class_code: (?P<class_code>[0-9a-fA-F]{6})"),
    ("aer_cor", r"aer_cor_status: 0x(?P<aer_cor_status>[0-9a-fA-F]{8}), aer_cor_mask: 0x(?P<aer_cor_mask>[0-9a-fA-F]{8})"),
    ("aer_uncor", r"aer_uncor_status: 0x(?P<aer_uncor_status>[0-9a-fA-F]{8}), "
                  r"aer_uncor_mask: 0x(?P<aer_uncor_mask>[0-9a-fA-F]{8})"),
    ("aer_uncor_severity", r"aer_uncor_severity: 0x(?P<aer_uncor_severity>[0-9a-fA-F]{8})"),
    ("tlp", r"(?:TLP Header|aer_tlp_header):(?P<tlp>(?: [0-9a-fA-F]{8}){4})"),
    # cper_print_aer (v3.x-5.14 printed the section's AER registers through the AER driver's tables)
    ("aer_status", r"aer_status: 0x(?P<aer_status>[0-9a-fA-F]{8}), aer_mask: 0x(?P<aer_mask>[0-9a-fA-F]{8})"),
    ("aer_layer", r"aer_layer=(?P<type>[A-Za-z][A-Za-z ]{0,40}?), aer_agent=(?P<agent>[A-Za-z][A-Za-z ]{0,40}?)"),
))
_INTS = {"source_id": 10, "section": 10, "error_status": 16, "physical_address": 16, "physical_address_mask": 16,
         "error_type": 10, "port_type": 10, "command": 16, "pcie_status": 16, "vendor_id": 16, "device_id": 16,
         "aer_cor_status": 16, "aer_cor_mask": 16, "aer_uncor_status": 16, "aer_uncor_mask": 16,
         "aer_uncor_severity": 16, "aer_status": 16, "aer_mask": 16}
# CPER severity (cper_severity_str) -> a memory error's type, and (cper_severity_to_aer in
# drivers/pci/pcie/aer.c) a PCIe error's AER severity. A severity not in these tables (none
# printed, or "unknown") is the event's ``unknown``: the kernel's recovery treats it as correctable
# (cper_severity_to_aer's default), but the record did not say so.
MEMORY_TYPE = {"corrected": "corrected", "recoverable": "uncorrected", "fatal": "uncorrected", "info": "corrected"}
AER_SEVERITY = {"corrected": "corrected", "recoverable": "non_fatal", "fatal": "fatal", "info": "corrected"}


def parse_line(message: str) -> tuple[int, str, dict[str, Any]] | None:
    """One GHES/CPER line -> ``(seq, kind, fields)``, else None.

    ``seq`` is the record's ``{N}``; ``kind`` one of ``header``, ``corrected_note``,
    ``event_severity``, ``section``, ``section_type``, the memory fields (``error_status``,
    ``physical_address``, ``physical_address_mask``, ``location``, ``error_type``,
    ``dimm_location``), the PCIe fields (``port_type``, ``command``, ``device_bdf``, ``vendor``,
    ``class_code``, ``aer_cor``, ``aer_uncor``, ``aer_uncor_severity``, ``tlp``), or ``other``
    (any other line of a record: processor sections, hex dumps, ``fru_text``...). Registers and
    addresses are ints; ``location`` a dict of ints; ``device_bdf`` gives ``pci_bus_id``.
    """
    m = HEAD_RE.match(message)
    if m is None:
        return None
    seq = int(m.group("seq"))
    body = m.group("body").strip()
    for kind, pat in _LINES:
        g = pat.match(body)
        if g is None:
            continue
        f = matched_fields(g, _INTS)
        if kind == "location":
            f["location"] = _location(f["location"])
        elif kind == "device_bdf":
            f["pci_bus_id"] = aer.pci_id(f.pop("bdf"))
        elif kind == "tlp":
            f["tlp_header"] = [int(w, 16) for w in f.pop("tlp").split()]
        return seq, kind, f
    return seq, "other", {"text": body[:200]}


# One "name:value" of a memory section's location line (cper_mem_err_location: "node:0 card:1 ...").
_LOCATION_FIELD = re.compile(r"(\w+): ?(0x[0-9a-fA-F]+|-?[0-9]+)")


def _location(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in _LOCATION_FIELD.findall(text):
        out[k] = int(v, 16) if v.startswith("0x") else int(v)
    return out


class GhesRecord:
    """The lines of one GHES record ``{seq}`` folded: its header fields and its sections.

    ``sections`` is a list of dicts (``section_type``, ``severity`` of the section, and the
    section's fields); a field line before any ``Error N`` / ``section_type`` line starts
    section 0. ``has_header`` is False for a record whose first line was not read (the input
    began in the middle of it)."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.source_id: int | None = None
        self.severity: str | None = None
        self.has_header = False
        self.sections: list[dict[str, Any]] = []

    def add(self, kind: str, f: dict[str, Any]) -> None:
        """Fold one line of the record (``kind``, ``f``: :func:`parse_line`'s kind and fields) in
        place; returns None. ``header`` sets :attr:`has_header` and :attr:`source_id`;
        ``event_severity`` (and ``corrected_note``, when no severity came first) the record's
        :attr:`severity`; ``section`` (``Error N, type: S``) starts a section, as does a
        ``section_type`` line after a section that has one; any other kind but ``other`` (text
        not understood, dropped) updates the last section's fields (starting section 0 when none
        is open). Never raises on :func:`parse_line`'s output."""
        if kind == "header":
            self.has_header, self.source_id = True, f["source_id"]
        elif kind == "event_severity":
            self.severity = f["severity"]
        elif kind == "corrected_note":
            self.severity = self.severity or "corrected"
        elif kind == "section":
            self.sections.append({"section": f["section"], "severity": f["severity"]})
        elif kind == "section_type":
            if not self.sections or "section_type" in self.sections[-1]:
                self.sections.append({"section": len(self.sections)})
            self.sections[-1]["section_type"] = f["section_type"]
        elif kind != "other":
            if not self.sections:
                self.sections.append({"section": 0})
            self.sections[-1].update(f)


def section_events(rec: GhesRecord) -> list[tuple[str, int, dict[str, Any]]]:
    """The event fields of a record's memory and PCIe sections: ``[(kind, section index, attrs)]``
    with kind ``cpu_ecc`` or ``pcie_aer``.

    A memory section: ``type`` (from the CPER severity: ``corrected``/``info`` -> ``corrected``;
    ``recoverable``/``fatal`` -> ``uncorrected``; ``unknown`` when the section and the record
    print none or ``unknown``: a severity the machine did not give is not guessed),
    ``ghes_severity`` as printed (``unknown`` when none), ``count`` 1, ``via="ghes"``,
    ``physical_address`` (= ``address``), ``physical_address_mask``, ``location`` (node, card,
    module, rank, bank, row, column... ints), ``error_type`` / ``error_type_text`` (``2``,
    ``single-bit ECC``), ``error_status``, ``label`` (the ``DIMM location`` text or None).
    A PCIe section: the ``pcie_aer`` attrs of :func:`nodewarden.parsing.aer.new_record` with
    ``via="ghes"``: ``severity`` (``recoverable`` -> ``non_fatal``, ``fatal``, ``corrected``/``info``
    -> ``corrected``, else ``unknown`` as for a memory section), ``severity_text`` the CPER
    word, ``pci_bus_id`` from ``device_id``, ``vendor_id``/``device_id``, ``status``/``mask`` from
    ``aer_uncor_status`` (or ``aer_cor_status``), ``uncor_severity``, ``port_type``...
    Both carry ``ghes_source`` (the error source id) and ``ghes_record`` (``{N}``).
    """
    out: list[tuple[str, int, dict[str, Any]]] = []
    for i, s in enumerate(rec.sections):
        sev = s.get("severity") or rec.severity or "unknown"
        stype = s.get("section_type", "")
        common = {"ghes_severity": sev, "ghes_source": rec.source_id, "ghes_record": rec.seq}
        if stype == "memory error":
            attrs: dict[str, Any] = {"type": MEMORY_TYPE.get(sev, "unknown"), "count": 1, "via": "ghes", **common}
            for k in ("physical_address", "physical_address_mask", "location", "error_type", "error_type_text",
                      "error_status", "error_status_text"):
                if k in s:
                    attrs[k] = s[k]
            attrs["address"] = s.get("physical_address")
            attrs["label"] = s.get("dimm_location")
            out.append(("cpu_ecc", i, attrs))
        elif stype == "PCIe error":
            attrs = aer.new_record(None, None, via="ghes")
            attrs.update(severity=AER_SEVERITY.get(sev, "unknown"), severity_text=sev,
                         pci_bus_id=s.get("pci_bus_id"), **common)
            for k in ("vendor_id", "device_id", "port_type", "port_type_text", "class_code", "tlp_header"):
                if k in s:
                    attrs[k] = s[k]
            if "type" in s:
                attrs.update(type=s["type"], agent=s["agent"])
            if "aer_status" in s:
                attrs.update(status=s["aer_status"], mask=s["aer_mask"])
            elif "aer_uncor_status" in s:
                attrs.update(status=s["aer_uncor_status"], mask=s["aer_uncor_mask"])
            elif "aer_cor_status" in s:
                attrs.update(status=s["aer_cor_status"], mask=s["aer_cor_mask"])
            if "aer_uncor_severity" in s:
                attrs["uncor_severity"] = s["aer_uncor_severity"]
            out.append(("pcie_aer", i, attrs))
    return out


def same_memory_error(fields: dict[str, Any], attrs: dict[str, Any], record_severity: str | None = None) -> bool:
    """Is the EDAC line ``fields`` (:func:`nodewarden.parsing.edac.parse_edac`) ghes_edac's report of
    the memory section ``attrs`` (a ``cpu_ecc`` of :func:`section_events`; ``record_severity`` the
    record's ``event severity``)?

    ghes_edac_report_mem_error (drivers/edac/ghes_edac.c) prints the section it is handed: page =
    ``physical_address >> PAGE_SHIFT``, offset = the rest, when the address is valid; its type from
    the record's severity (corrected -> CE, recoverable -> UE, fatal -> Fatal); the CPER location
    (node, card, module, rank, bank, row, col...) in its detail; the DIMM's DMI label, else
    ``unknown memory`` (``unknown label`` before v5.10). So: when both sides give an address, the
    same error has the same one (``page << s + offset``, 4/16/64 KiB pages); else the same severity
    class, no location field that differs, and, when both name a DIMM, the same DIMM.
    """
    pa = attrs.get("physical_address")
    page, offset = fields.get("page"), fields.get("offset")
    if pa is not None and page is not None and offset is not None and (page or offset):
        return any((page << s) + offset == pa for s in (12, 14, 16))
    classes = {MEMORY_TYPE.get(attrs.get("ghes_severity") or ""), MEMORY_TYPE.get(record_severity or "")}
    if fields.get("type") not in classes:
        return False
    where = attrs.get("location") or {}
    if any(where[k] != v for k, v in edac.cper_location(fields).items() if k in where):
        return False
    label, dimm = " ".join(str(fields.get("label") or "").split()).lower(), attrs.get("label")
    if label in edac.NO_DIMM_LABELS or not dimm or dimm.lower().startswith("not present"):
        return True  # one side names no DIMM: nothing to tell them apart by
    return label == " ".join(dimm.split()).lower()

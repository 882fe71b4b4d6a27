"""Turn a stream of kernel-log records into FaultEvents.

The per-line parsers are pure; this small assembler keeps the little state that real logs
need across lines of one stream (one file, one /dev/kmsg, one host):

* an MCE record is several lines (``CPU N: Machine Check ...``, ``TSC ...``, ``PROCESSOR ...``):
  one event per record;
* the text-only "fallen off the bus" Xid 79 may come split over separate syslog lines, and may
  be printed together with an ``Xid ...: 79`` line for the same GPU: counted once;
* ``NVRM: GPU at PCI:... GPU-<uuid>`` lines map PCI bus ids to GPU UUIDs;
* an NVSwitch SXid error is several lines (description, ``Severity N ...``, ``Data {...}``, a
  second Severity/Data pair): one ``sxid`` event per error (:func:`nodewarden.parsing.sxid.joins_error`
  says which lines are one error), held until its lines are in;
* a kernel record printed twice through two envelopes (a scanner's plain line and its JSON
  log of the same line: same host, message and stamp, another ``fmt``) counts once.

PCIe and firmware-first errors are multi-line records too, held until they end (:meth:`KernelLogParser.flush`
and :meth:`~KernelLogParser.pending_seqs` include them):

* a PCIe AER error record (:mod:`nodewarden.parsing.aer`: ``received`` line, ``PCIe Bus Error``
  block, bits, TLP header) is one ``pcie_aer`` event per block; an uncorrected one is held for its
  recovery lines (``pcie_aer_recovery`` events, released with it; the functions that could not
  recover become its ``affected_devices``) up to ``device recovery failed/successful``; records
  are kept by (host, device), as two root ports' records interleave (:meth:`KernelLogParser._aer_line`);
* a GHES record (:mod:`nodewarden.parsing.ghes`) is grouped by its ``{N}`` (other lines come
  between); its memory and PCIe sections become ``cpu_ecc``/``pcie_aer`` events (``via="ghes"``);
* an AMD MCA decode (:func:`nodewarden.parsing.mce.parse_amd_line`) ends at its ``cache level:``
  line: a memory controller's is a ``cpu_ecc`` event (``via="mca"``), any other bank's an ``mce``;
* one error printed two ways is one event: the EDAC line after an AMD UMC decode or a GHES memory
  section takes their fields; the AER driver's ``pci_print_aer`` lines after a GHES PCIe section
  fold into that section's event. ghes_edac's EDAC line may also come before its GHES record
  (``ghes_proc_in_irq`` reports, then prints; ``ghes_proc`` prints, then reports): such a line is
  held (:meth:`~KernelLogParser.pending_seqs` names it) until a GHES record of the same error
  released within the window gives it its fields, else until the window passes or :meth:`flush`.

Only the kernel makes a fault: each record is read from where its driver message starts
(:func:`nodewarden.parsing.lines.driver_message`); fault text anywhere else (quoted by another
message, a second record glued on the line, a later line of the same record) is counted as
``unparsed``. Records whose syslog ident is not ``kernel`` are skipped (``skipped_non_kernel``).

No I/O: records in (:meth:`KernelLogParser.feed`), events out. Call :meth:`flush` at the end.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import math
import re
from typing import Any, Iterable, Iterator

from nodewarden import events as ev
from nodewarden.events import FaultEvent
from nodewarden.parsing import aer, edac, ghes, ib, mce, sxid, xid
from nodewarden.parsing.envelope import Record, TimeContext, parse_line
from nodewarden.parsing.lines import LINE_END_RE, TRIGGERS, driver_message, split_lines

# Cheap substring tests before any regex: a record that has none of TRIGGERS is not a fault line.
# The list is lines.TRIGGERS, which envelope's JSON unwrapping uses too: add new words THERE.
# An AER record's recovery lines, a GHES record's lines and the EDAC line after it, an AMD MCA
# decode's lines and the EDAC line it causes come within this of each other (or these many
# records, for lines without a time stamp: dmesg -H deltas).
FIRMWARE_WINDOW_S = 2.0
AER_WINDOW_RECORDS = 64
GHES_WINDOW_RECORDS = 32
MCA_WINDOW_RECORDS = 16

# Two reports of one Xid 79 (the text-only form and the Xid line) closer than this are one event.
XID79_WINDOW_S = 60.0
XID79_WINDOW_RECORDS = 50
# MCE follow-up lines belong to the record head printed at most this long before them.
MCE_WINDOW_S = 2.0
# Per-channel Xid 94/95 lines follow their summary line within this window (170 ms seen).
CONTAINED_WINDOW_S = 2.0
# Payload text that belongs to another Xid than the one printed (HyperPod's 71 with the Xid 74
# NVLink text; fault injectors printing an MMU fault under 74): flagged, the printed code kept.
_TEXT_CODES = (("NVLink: fatal error detected", 74), ("MMU Fault: ENGINE", 31), ("fallen off the bus", 79))


def _category(code: int) -> str | None:
    try:
        from nodewarden import catalog
    except ImportError:  # pragma: no cover - the catalog ships with the package
        return None
    return catalog.group_of(code)


@dataclasses.dataclass(eq=False)  # held by identity: one record may be filed under several devices
class _AerGroup:
    """One PCIe AER error record being assembled (:meth:`KernelLogParser._aer_line`): its
    ``received`` line, one ``pcie_aer`` event per ``PCIe Bus Error`` block, the block of each
    device its detail lines fold into (``blocks``) and, for an uncorrected error, the recovery
    events after it. ``keys``: the (host, BDF) it is filed under (the ``received`` source, each
    device that printed a block)."""

    events: list[FaultEvent] = dataclasses.field(default_factory=list)
    received: dict[str, Any] | None = None
    rx_rec: Record | None = None
    rx_used: bool = False
    blocks: dict[str, FaultEvent] = dataclasses.field(default_factory=dict)
    keys: list[tuple[str | None, str]] = dataclasses.field(default_factory=list)
    uncorrected: bool = False
    affected: list[str] = dataclasses.field(default_factory=list)  # functions that could not recover
    nvidia: bool = False  # an nvidia recovery line that is a precursor alone joined it (aer.recovery_category)
    t: float | None = None  # seconds of the last line
    index: int = 0  # record index of the last line
    seqs: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _Held:
    """A GHES record (``data``: :class:`ghes.GhesRecord`) or an AMD MCA decode (``data``: its
    folded fields) whose lines are still coming: first record, raw lines, last line's time and
    index, kmsg seqs; the GHES sections another event took, whether an EDAC line took the decode;
    the record index of the first line. A ghes_edac line waiting for its GHES record (``data``: its
    ``cpu_ecc`` event) is held the same way."""

    rec: Record
    raws: list[str]
    data: Any
    t: float | None = None
    index: int = 0
    seqs: set[int] = dataclasses.field(default_factory=set)
    taken: set[int] = dataclasses.field(default_factory=set)
    merged: bool = False
    start: int = 0


@dataclasses.dataclass
class ParseStats:
    """Counts for one stream: records read, events emitted, fault-looking lines not parsed."""

    records: int = 0
    events: int = 0
    unparsed: int = 0
    skipped_non_kernel: int = 0
    duplicates_suppressed: int = 0


class KernelLogParser:
    """Stateful assembler over one stream of records.

    host: the node the stream comes from when the lines do not say (path, agent hostname).
    source: the ``source`` field of emitted events (``kmsg``, ``file``, ``journal``, ``stdin``).
    single_envelope: every record comes through one envelope (the agent's ``/dev/kmsg``
      records, all ``fmt="kmsg"``): none can be a kernel record re-printed through another, so
      the stream does not remember the records it read for that (up to :data:`_ENVELOPES_KEPT`
      messages); the events are the same.
    """

    def __init__(self, host: str | None = None, source: str = "file", origin: str | None = None,
                 single_envelope: bool = False) -> None:
        self.host = host
        self.source = source
        self.origin = origin
        self.single_envelope = single_envelope
        self.stats = ParseStats()
        self.pci_uuid: dict[tuple[str | None, str], str] = {}
        self._index = 0
        self._pending_mce: FaultEvent | None = None
        self._pending_fallen: dict[str | None, tuple[Record, dict[str, Any], int]] = {}
        self._contained: dict[tuple[str | None, str | None, int], tuple[FaultEvent, float | None, int]] = {}
        self._recent79: dict[tuple[str | None, str], list[tuple[str, float | None, int]]] = collections.defaultdict(list)
        # GPUs whose GSP RPC error prints the driver rate-limits: (host, pci) -> N (1 print in N).
        self._sampled: dict[tuple[str | None, str], int] = {}
        # EDAC drivers print their decode of the machine check before the "N CE/UE ... on <label>"
        # line it causes: (host, mc) -> (fields, seconds, record index).
        self._edac_mce: dict[tuple[str | None, int], tuple[dict[str, Any], float | None, int]] = {}
        # Multi-line records still open: a PCIe AER error record and its recovery (by host and
        # device: the AER handler runs per root port, so two ports' records interleave), a GHES
        # record (by host and {seq}), an AMD MCA decode (by host). Released in order, together.
        self._aer: dict[tuple[str | None, str], _AerGroup] = {}
        self._ghes: dict[tuple[str | None, int], _Held] = {}
        self._mca: dict[str | None, _Held] = {}
        # ghes_edac lines printed before their GHES record (ghes_proc_in_irq prints in that order):
        # (host, held EDAC event), oldest first; a GHES record released within the window takes one.
        self._edac_wait: list[tuple[str | None, _Held]] = []
        # Times (seconds) no held record's window has passed at (see _expire_held): (lo, hi).
        self._calm: tuple[float, float] = (-math.inf, math.inf)
        # NVSwitch SXid errors whose lines are still coming (sxid.SxidGroups), and the kernel records
        # read so far by (host, message, stamp) -> envelopes seen (a record re-printed through another).
        self._sxid = sxid.SxidGroups()
        self._envelopes: dict[tuple[Any, ...], dict[str, int]] = {}

    # -- public API ------------------------------------------------------------------------
    def feed(self, rec: Record) -> list[FaultEvent]:
        """Events completed by this record (often none). Never raises on record content.

        Faults are read where the driver's message starts (:func:`lines.driver_message`). Fault
        text elsewhere is counted as ``unparsed``, never as a fault: inside another message
        (``segfault ... in NVRM: Xid ...``, a second record glued on the line) or on a later line
        of the same record (a kmsg record holding two Xid lines, a dmesg continuation line).

        A record without any of :data:`TRIGGERS` (which the file readers' byte scan never hands
        over, :mod:`nodewarden.parsing.scan`) changes nothing: it neither ends nor joins a held
        record, nor counts in a window of records; only its time stamp may show that a held
        record's time window has passed (the events the file path gives at its next line or
        :meth:`flush`, sooner). Fed every record (the agent) or the candidates only (a file), a
        stream gives the same events.
        """
        self.stats.records += 1
        msg = rec.message
        out: list[FaultEvent] = []
        if not any(t in msg for t in TRIGGERS):
            if self._aer or self._ghes or self._mca or self._edac_wait:  # a held record ends past its window
                out = self._expire_held(rec, by_time_only=True)
                self.stats.events += len(out)
            return out
        self._index += 1
        if rec.ident not in (None, "kernel") or (rec.fmt in ("journal_json", "golog") and not rec.kernel):
            # A daemon quoting a kernel line (mcelog, NPD, a device plugin) is not the kernel.
            dp = xid.parse_device_plugin(msg) if rec.fmt == "golog" else None
            if dp is not None:
                e = self._event(rec, ev.XID, code=dp["xid"], device=dp["gpu_uuid"],
                                attrs={"gpu_uuid": dp["gpu_uuid"], "via": "k8s-device-plugin"},
                                category=_category(dp["xid"]))
                out.append(e)
            else:
                self.stats.skipped_non_kernel += 1
            self.stats.events += len(out)
            return out
        if not self.single_envelope and self._reprinted(rec):
            self.stats.duplicates_suppressed += 1
            return out
        try:
            text = driver_message(msg, bare=rec.fmt in _NO_ENVELOPE)
            later: list[str] = []
            if "\n" in text or any(c in text for c in "\r\x85\u2028\u2029"):
                parts = split_lines(text)
                for i in range(1, len(parts)):
                    if _begins_fault(driver_message(parts[i])):
                        text, later = "\n".join(parts[:i]), parts[i:]
                        rec = dataclasses.replace(rec, message=text)
                        break
            if not self._dispatch(rec, text, out):
                family = _fault_family(text)
                if family is not None:
                    at_start = _begins_fault(text)
                    out.append(self._unparsed(rec, family, f"{_FAMILY_NAMES[family]} line not understood" if at_start
                                              else "fault text inside another message, not where a kernel message starts"))
            else:
                family = _glued_family(text)
                if family is not None:
                    out.append(self._unparsed(rec, family, "a second record's fault text glued on the same line"))
            for line in later:
                if _fault_family(line) is not None:
                    sub = dataclasses.replace(rec, message=line)
                    out.append(self._unparsed(sub, _fault_family(line) or "xid",
                                              "fault text on a later line of one kernel record"))
        except Exception as exc:  # a parser bug must never lose the line: keep it raw
            out.append(self._unparsed(rec, "error", f"{type(exc).__name__}: {exc}"))
        self.stats.events += len(out)
        return out

    def pending_seqs(self) -> tuple[int, ...]:
        """Sequence numbers (kmsg ``seq``) of the records that began events still held: an MCE
        record waiting for its last line, the first half of a split text-only Xid 79, the first
        line of an SXid error still open. A reader that persists a cursor must not count those
        records as done."""
        seqs: set[int] = set()
        if self._pending_mce is not None and self._pending_mce.attrs.get("seq") is not None:
            seqs.add(int(self._pending_mce.attrs["seq"]))
        for rec, _fields, _idx in self._pending_fallen.values():
            if rec.seq is not None:
                seqs.add(rec.seq)
        seqs.update(g.first.seq for g in self._sxid.pending() if g.first.seq is not None)
        seqs |= self._held_seqs()  # AER records and their recovery, GHES records, AMD MCA decodes
        return tuple(sorted(seqs))

    def flush(self) -> list[FaultEvent]:
        """Events still held (an MCE record without its last line, a split Xid 79, the NVSwitch
        SXid errors whose lines may still come)."""
        out: list[FaultEvent] = []
        if self._pending_mce is not None:
            out.append(self._pending_mce)
            self._pending_mce = None
        for host, (rec, fields, _idx) in list(self._pending_fallen.items()):
            # "The NVIDIA GPU ... " never followed by "fallen off the bus": not an Xid 79.
            out.append(self._unparsed(rec, "xid79", "text-only Xid 79 start without its end"))
            del self._pending_fallen[host]
        out.extend(self._sxid_event(g) for g in self._sxid.flush())
        out.extend(self._release_all())  # AER, GHES and AMD MCA records
        self.stats.events += len(out)
        return out

    def feed_lines(self, lines: Iterable[str], ctx: TimeContext | None = None) -> Iterator[FaultEvent]:
        """Convenience: parse raw lines (gluing indented continuation lines) and yield events."""
        for rec in records_from_lines(lines, ctx):
            yield from self.feed(rec)
        yield from self.flush()

    # -- dispatch --------------------------------------------------------------------------
    def _dispatch(self, rec: Record, msg: str, out: list[FaultEvent]) -> bool:
        """Parse ``msg`` (the driver's message of ``rec``). True when a parser understood it
        (an event, or a line the stream keeps state from); False leaves it to :meth:`feed`."""
        host = rec.host or self.host
        if self._aer or self._ghes or self._mca or self._edac_wait:
            out.extend(self._expire_held(rec))
        c = msg[:1]
        if c == "N":
            return msg.startswith("NVRM") and self._nvrm(rec, msg, host, out)
        if c == "n" and msg.startswith("nvidia-nvswitch"):
            return self._sxid_line(rec, msg, host, out)
        if c == "m" and msg.startswith("mce: "):
            head = mce.parse_mce_head(msg)
            if head is not None:
                if self._pending_mce is not None:
                    out.append(self._pending_mce)
                cpu, bank = head["cpu"], head["bank"]
                self._pending_mce = self._event(rec, ev.MCE, device=f"cpu{cpu}/bank{bank}", attrs=head,
                                                category=head["type"])
                return True
            detail = mce.parse_mce_detail(msg)
            if detail is not None:
                pend = self._pending_mce
                if pend is not None and pend.host == host and _close(pend, rec, MCE_WINDOW_S):
                    pend.attrs.update(detail)
                    pend.raw += "\n" + rec.raw
                    if "cpuid" in detail:  # PROCESSOR ... is the record's last line
                        out.append(pend)
                        self._pending_mce = None
                return True
            return False
        if c == "E" and msg.startswith("EDAC"):
            fields = edac.parse_edac(msg)
            if fields is None:
                decode = edac.parse_edac_mce(msg)
                if decode is not None:
                    self._edac_mce_line(host, decode, rec)
                    return True
                return False
            fields.update(self._take_edac_mce(host, fields["mc"], rec))
            merged = self._merge_firmware_first(host, fields, rec)
            device = f"mc{fields['mc']}/{fields['label']}"
            e = self._event(rec, ev.CPU_ECC, device=device, attrs=fields, category=fields["type"])
            if merged or not edac.from_ghes_edac(fields):
                out.append(e)
            else:  # ghes_edac's line: its GHES record may follow (ghes_proc_in_irq order); held for it
                held = _Held(rec=rec, raws=[rec.raw], data=e, start=self._index)
                self._touch(held, rec)
                self._edac_wait.append((host, held))
            return True
        if c == "{":
            line = ghes.parse_line(msg)
            if line is not None:
                self._ghes_line(rec, host, *line, out)
                return True
            return False
        if c == "[" and msg.startswith("[Hardware Error]"):
            amd = mce.parse_amd_line(msg)
            if amd is not None:
                self._mca_line(rec, host, *amd, out)
                return True
            if mce.AMD_HINT_RE.match(msg):  # a status line, mangled: it starts a decode all the same
                self._mca_line(rec, host, "malformed_status", {}, out)
                return True
            return False
        if "AER" in msg or ":  " in msg or "Bus Error" in msg or "aer_" in msg or "link has been reset" in msg:
            line_aer = aer.parse_line(msg)
            if line_aer is not None:
                self._aer_line(rec, host, *line_aer, out)
                return True
        if "Port: " in msg:
            fields = ib.parse_ib_port(msg)
            if fields is not None:
                state = fields["state"]
                kind = ev.IB_LINK_DOWN if state == "DOWN" else ev.IB_LINK_UP if state == "ACTIVE" else ev.IB_PORT_STATE
                out.append(self._event(rec, kind, device=f"{fields['rdma_device']}/{fields['port']}", attrs=fields))
                return True
        if c == "m" and msg.startswith("mlx"):
            fields = ib.parse_net_link(msg)
            if fields is not None:
                kind = ev.NET_LINK_UP if fields["state"] == "up" else ev.NET_LINK_DOWN
                out.append(self._event(rec, kind, device=fields["netdev"], attrs=fields))
                return True
            fields = ib.parse_module_event(msg)
            if fields is not None:
                out.append(self._event(rec, ev.NIC_MODULE, device=fields["pci_bus_id"] or fields.get("nic"),
                                       attrs=fields))
                return True
        return False

    def _nvrm(self, rec: Record, msg: str, host: str | None, out: list[FaultEvent]) -> bool:
        """NVIDIA lines. True when the record was consumed."""
        fields = xid.parse_xid(msg)
        if fields is not None:
            code = fields.pop("xid")
            pci = fields.get("pci_bus_id")
            if pci and (host, pci) in self.pci_uuid:
                fields["gpu_uuid"] = self.pci_uuid[(host, pci)]
            if code == 119 and pci and (host, pci) in self._sampled:
                # Printed after "Rate limiting GSP RPC error prints": one Xid 119 of N is logged.
                fields["sampled_1_in"] = self._sampled[(host, pci)]
            if code == 79 and pci and self._dup79(host, pci, "xid", rec):
                return True
            if code in (94, 95) and self._merge_contained(host, pci, code, fields, rec):
                return True
            mismatch = _text_mismatch(code, fields.get("payload", ""))
            if mismatch is not None:
                fields["code_text_mismatch"] = mismatch
            e = self._event(rec, ev.XID, code=code, device=pci or fields.get("gpu_uuid"), attrs=fields,
                            category=_category(code))
            if code in (94, 95) and "containment" in fields:
                self._contained[(host, pci, code)] = (e, _seconds(rec), self._index)
            out.append(e)
            return True
        if ("Assertion failed" in msg or "Check failed" in msg) and self._nvrm_assertion(rec, msg, out):
            return True
        limited = xid.parse_rate_limit(msg) if "Rate limiting" in msg else None
        if limited is not None:
            self._sampled[(host, limited[0])] = limited[1]
            return True
        if xid.DRIVER_LOAD_RE.match(msg):  # module (re)loaded: rate limits start afresh
            for key in [k for k in self._sampled if k[0] == host]:
                del self._sampled[key]
            return True
        at = xid.parse_gpu_at(msg)
        if at is not None:
            pci, uuid = at
            if uuid:
                self.pci_uuid[(host, pci)] = uuid
            return True
        fallen = xid.parse_fallen_off_bus(msg)
        if fallen is None and xid.FALLEN_TAIL_RE.match(msg) and host in self._pending_fallen:
            prev, fallen, _ = self._pending_fallen.pop(host)
            rec = dataclasses.replace(prev, raw=prev.raw + "\n" + rec.raw)
        if fallen is not None:
            pci = fallen["pci_bus_id"]
            self._pending_fallen.pop(host, None)
            if pci and self._dup79(host, pci, "text", rec):
                return True
            attrs = dict(fallen, via="fallen_off_the_bus")
            if pci and (host, pci) in self.pci_uuid:
                attrs["gpu_uuid"] = self.pci_uuid[(host, pci)]
            out.append(self._event(rec, ev.XID, code=79, device=pci, attrs=attrs, category=_category(79)))
            return True
        start = xid.FALLEN_START_RE.match(msg)
        if start is not None:
            from nodewarden.parsing.pci import normalize_pci
            self._pending_fallen[host] = (rec, {"pci_bus_id": normalize_pci(start.group("pci")),
                                                "pci_ids": start.group("ids")}, self._index)
            return True
        return False

    def _sxid_line(self, rec: Record, msg: str, host: str | None, out: list[FaultEvent]) -> bool:
        """One NVSwitch SXid line: folded into its error (:class:`sxid.SxidGroups`); the errors it
        closes become ``sxid`` events. False when ``msg`` is no SXid line."""
        line = sxid.parse_sxid_line(msg)
        if line is None:
            return False
        key = (host, line["switch"], line["pci_bus_id"], line["sxid"])
        out.extend(self._sxid_event(g) for g in self._sxid.add(key, line, rec, rec.raw, _seconds(rec)))
        if line.get("malformed"):  # a Data line with a bad word: unparsed, the error's other lines still fold
            out.append(self._unparsed(rec, "sxid", line["malformed"]))
        return True

    def _sxid_event(self, group: sxid.SxidGroup) -> FaultEvent:
        """The ``sxid`` event of one folded error: device = switch PCI id, code = SXid, category =
        severity; time, seq and message of its first line, the raw text of all its lines."""
        attrs = group.attrs()
        e = self._event(group.first, ev.SXID, code=attrs["sxid"], device=attrs["pci_bus_id"], attrs=attrs,
                        category=attrs["severity"])
        e.raw = "\n".join(group.raws)
        return e

    def _reprinted(self, rec: Record) -> bool:
        """Is ``rec`` a kernel record this stream has already read through another envelope (a
        scanner printing the kernel line plain and again inside its JSON log)? Same host, same
        message, same stamp (to the microsecond; the kernel's monotonic stamp when there is one),
        a different ``fmt``: each such record pairs with one record of the other envelope. Two
        identical records of one envelope stay two."""
        if rec.monotonic is not None:
            stamp: tuple[str, int] = ("m", round(rec.monotonic * 1e6))
        elif rec.time is not None:
            stamp = ("w", (rec.time - _EPOCH) // _MICROSECOND)
        else:
            return False
        key = (rec.host or self.host, rec.message.strip(), stamp)
        seen = self._envelopes.get(key)
        if seen is None:
            if len(self._envelopes) >= _ENVELOPES_KEPT:
                del self._envelopes[next(iter(self._envelopes))]
            self._envelopes[key] = {rec.fmt: 1}
            return False
        mine = seen.get(rec.fmt, 0)
        seen[rec.fmt] = mine + 1
        return any(n > mine for fmt, n in seen.items() if fmt != rec.fmt)

    def _nvrm_assertion(self, rec: Record, msg: str, out: list[FaultEvent]) -> bool:
        """``NVRM: nvAssert...Failed...: Assertion failed: ...`` (or ``nvCheck...Failed...: Check
        failed: ...``): a ``gpu_reset_required`` event when
        it carries ``NV_ERR_RESET_REQUIRED``, else a ``driver_assertion`` event."""
        fields = xid.parse_assertion(msg)
        if fields is None:
            return False
        if fields.get("status_name") == "NV_ERR_RESET_REQUIRED" or fields.get("status") == xid.NV_ERR_RESET_REQUIRED:
            fields.update(action="gpu_reset", pci_bus_id=None)
            out.append(self._event(rec, ev.GPU_RESET_REQUIRED, attrs=fields, category="gpu_reset"))
        else:
            out.append(self._event(rec, ev.DRIVER_ASSERTION, attrs=fields, category="driver_assertion"))
        return True

    # -- PCIe AER, GHES and AMD MCA records (aer.py, ghes.py, mce.py) ----------------------------
    def _near(self, held: _AerGroup | _Held, rec: Record, records: int) -> bool:
        """Is ``rec`` within the firmware window of the held record's last line (by time, else by
        record count)?"""
        t = _seconds(rec)
        if t is not None and held.t is not None:
            return abs(t - held.t) <= FIRMWARE_WINDOW_S
        return self._index - held.index <= records

    def _touch(self, held: _AerGroup | _Held, rec: Record) -> None:
        t = _seconds(rec)
        held.t = t if t is not None else held.t
        held.index = self._index
        if rec.seq is not None:
            held.seqs.add(rec.seq)
        if held.t is None:  # a record without time: its window is one of records, checked line by line
            self._calm = (math.inf, -math.inf)
        else:
            lo, hi = self._calm
            self._calm = (max(lo, held.t - FIRMWARE_WINDOW_S), min(hi, held.t + FIRMWARE_WINDOW_S))

    def _expire_held(self, rec: Record, by_time_only: bool = False) -> list[FaultEvent]:
        """Release the held records ``rec`` cannot belong to: past their window (``by_time_only``:
        only when both have a time, for a record that is no candidate line: see :meth:`feed`).
        Nothing else ends a held record here: another kernel line printed between a record's
        lines (another CPU's printk) does not.

        ``_calm`` bounds the times within every held record's window (each held line's time
        +- the window, narrowed on every line held, recomputed after a pass): a record stamped
        inside it releases nothing, and the held records are not visited (an AER storm holds
        one record per device)."""
        t = _seconds(rec)
        if t is not None and self._calm[0] <= t <= self._calm[1]:
            return []
        if by_time_only:
            if t is None:
                return []
            past = lambda held, _n: held.t is not None and abs(t - held.t) > FIRMWARE_WINDOW_S  # noqa: E731
        else:
            past = lambda held, n: not self._near(held, rec, n)  # noqa: E731
        out: list[FaultEvent] = []
        for g in self._aer_groups():
            if past(g, AER_WINDOW_RECORDS):
                out.extend(self._release_aer(g))
        for key, h in list(self._ghes.items()):
            if past(h, GHES_WINDOW_RECORDS):
                out.extend(self._release_ghes(key))
        for host, h in list(self._mca.items()):
            if past(h, MCA_WINDOW_RECORDS):
                out.extend(self._release_mca(host))
        for item in list(self._edac_wait):  # after the GHES records: a record released above takes its line
            host, h = item
            if past(h, GHES_WINDOW_RECORDS) and not self._ghes_may_follow(host, h):
                self._edac_wait.remove(item)
                out.append(h.data)
        lo, hi = -math.inf, math.inf
        for held in (*self._aer.values(), *self._ghes.values(), *self._mca.values(),
                     *(h for _host, h in self._edac_wait)):
            if held.t is None:
                lo, hi = math.inf, -math.inf
                break
            lo, hi = max(lo, held.t - FIRMWARE_WINDOW_S), min(hi, held.t + FIRMWARE_WINDOW_S)
        self._calm = (lo, hi)
        return out

    def _held_seqs(self) -> set[int]:
        seqs: set[int] = set()
        for held in (*self._aer.values(), *self._ghes.values(), *self._mca.values(),
                     *(h for _host, h in self._edac_wait)):
            seqs |= held.seqs
        return seqs

    def _aer_groups(self, host: Any = ...) -> list[_AerGroup]:
        """The open AER records (of ``host``, when given), oldest first, each once."""
        groups = dict.fromkeys(self._aer.values())
        return list(groups) if host is ... else [g for g in groups if g.keys[0][0] == host]

    def _release_all(self) -> list[FaultEvent]:
        out: list[FaultEvent] = []
        for g in self._aer_groups():
            out.extend(self._release_aer(g))
        for key in list(self._ghes):
            out.extend(self._release_ghes(key))
        for host in list(self._mca):
            out.extend(self._release_mca(host))
        out.extend(h.data for _host, h in self._edac_wait)  # the ghes_edac lines no GHES record took
        self._edac_wait.clear()
        return out

    def _aer_line(self, rec: Record, host: str | None, kind: str, f: dict[str, Any], out: list[FaultEvent]) -> None:
        """Fold one AER line (:func:`aer.parse_line`) into its open record, or start one.

        A record is the ``received`` line, one ``pcie_aer`` event per ``PCIe Bus Error`` block
        (several when ``Multiple`` errors were collected), their detail lines, and, for an
        uncorrected error, the recovery lines up to ``device recovery failed/successful``.

        The AER handler runs per root port (drivers/pci/pcie/aer.c ``aer_isr`` /
        ``aer_isr_one_error``), so two ports' records may interleave line by line. The
        ``received`` line (``aer_print_port_info``, the root port's prefix) names the error source:
        it opens a record filed under (host, source). The block and detail lines
        (``aer_print_error``: ``pci_err(dev, ...)``) carry the affected device's prefix: they join
        the record filed under it; a block of a device no record is filed under joins the latest
        ``received`` line still waiting for its first block (or a ``Multiple`` one), else starts a
        record. A record ends when the next record of its device starts, when its time window
        passes, at its recovery's last line, or at :meth:`flush`. Recovery lines (err.c
        ``pcie_do_recovery``: the port, the bridge, each function below it) join the latest open
        uncorrected record of the host: the one filed under the line's device or printed by that
        port when there is one."""
        pci = f["pci"]
        if kind == "recovery":
            attrs = {k: f[k] for k in ("outcome", "driver", "port", "reset_status") if k in f}
            attrs["pci_bus_id"] = pci
            g = self._aer_recovering(host, pci, rec, out)
            # a line of a record has its outcome (the record is the precursor); one alone may be one
            e = self._event(rec, ev.PCIE_AER_RECOVERY, device=pci, attrs=attrs,
                            category=aer.recovery_category(f, in_record=g is not None))
            if g is None:
                out.append(e)
                return
            g.events.append(e)
            g.blocks.clear()  # detail lines after the recovery began are no block's
            if f["outcome"] == "no_error_detected_callback":
                g.affected.append(pci)
            # the record carries the precursor the line would alone (nvidia: can't recover, failed)
            g.nvidia = g.nvidia or aer.recovery_category(f) == aer.PRECURSOR
            self._touch(g, rec)
            if f["outcome"] in ("recovered", "recovery_failed"):  # pcie_do_recovery's last line
                out.extend(self._release_aer(g))
            return
        if kind == "received":
            key = (host, f["source_device"] or pci)
            if self._aer_open(key, rec, out) is not None:  # the source's previous record ends
                out.extend(self._release_aer(self._aer[key]))
            g = _AerGroup(received=f, rx_rec=rec, uncorrected=f["severity"] != "corrected")
            self._aer_file(g, key)
        elif kind == "bus_error":
            key = (host, pci)
            g = self._aer_open(key, rec, out)
            if g is not None and not (g.received is not None and not g.rx_used and pci not in g.blocks):
                out.extend(self._release_aer(g))  # the device has its block: this is its next record
                g = None
            if g is None:
                g = next((o for o in reversed(self._aer_groups(host))
                          if o.received is not None and (not o.rx_used or o.received.get("multiple"))
                          and pci not in o.blocks and self._near(o, rec, AER_WINDOW_RECORDS)), None)
                if g is None:
                    g = _AerGroup()
                self._aer_file(g, key)
            start = g.rx_rec if g.rx_rec is not None and not g.rx_used else rec
            e = self._event(start, ev.PCIE_AER, device=pci, attrs=aer.new_record(f, g.received))
            if start is not rec:
                e.raw += "\n" + rec.raw
            g.rx_used = g.received is not None
            g.events.append(e)
            g.blocks[pci] = e
            g.uncorrected = g.uncorrected or f["severity"] != "corrected"
        elif kind == "aer_status":  # pci_print_aer: a firmware-first error, after its GHES record
            key = (host, pci)
            if self._aer_open(key, rec, out) is not None:
                out.extend(self._release_aer(self._aer[key]))
            e = self._take_ghes_pcie(host, pci, rec)
            if e is None:
                attrs = aer.new_record(None, None, via="ghes")
                attrs.update(pci_bus_id=pci, driver=f["driver"])
                e = self._event(rec, ev.PCIE_AER, device=pci, attrs=attrs)
            else:
                e.raw += "\n" + rec.raw
                e.attrs["driver"] = f["driver"]
            aer.fold(e.attrs, kind, f)
            g = _AerGroup(events=[e], blocks={pci: e}, uncorrected=e.attrs.get("severity") not in (None, "corrected"))
            self._aer_file(g, key)
        elif kind == "no_details":  # the root port's note on the source a received line named
            g = self._aer_open((host, f["source_device"] or pci), rec, out)
            if g is None or g.rx_rec is None or g.rx_used:
                return  # nothing to fold it into
            g.received = dict(g.received or {}, details_found=False)
            g.rx_rec = dataclasses.replace(g.rx_rec, raw=g.rx_rec.raw + "\n" + rec.raw)
        else:  # device, bit, tlp, reported_first, aer_layer, aer_uncor_severity: the device's block
            g = self._aer_open((host, pci), rec, out)
            cur = g.blocks.get(pci) if g is not None else None
            if g is None or cur is None:
                out.append(self._unparsed(rec, "aer", f"AER {kind} line without its PCIe Bus Error line"))
                return
            aer.fold(cur.attrs, kind, f)
            cur.raw += "\n" + rec.raw
            if kind == "aer_uncor_severity":
                g.uncorrected = True
        self._touch(g, rec)

    def _aer_open(self, key: tuple[str | None, str], rec: Record, out: list[FaultEvent]) -> _AerGroup | None:
        """The open AER record filed under ``key`` (host, BDF) that ``rec`` may still belong to;
        one whose window has passed is released into ``out`` (None then)."""
        g = self._aer.get(key)
        if g is not None and not self._near(g, rec, AER_WINDOW_RECORDS):
            out.extend(self._release_aer(g))
            return None
        return g

    def _aer_file(self, g: _AerGroup, key: tuple[str | None, str]) -> None:
        self._aer[key] = g
        g.keys.append(key)

    def _aer_recovering(self, host: str | None, pci: str, rec: Record, out: list[FaultEvent]) -> _AerGroup | None:
        """The open uncorrected AER record of ``host`` a recovery line of ``pci`` belongs to:
        the latest one filed under ``pci`` or whose ``received`` line that port printed, else the
        latest (a function below the port: err.c reports each device of the bridge's bus). Records
        whose window has passed are released into ``out``."""
        found: _AerGroup | None = None
        for g in reversed(self._aer_groups(host)):
            if not self._near(g, rec, AER_WINDOW_RECORDS):
                out.extend(self._release_aer(g))
                continue
            if not g.uncorrected:
                continue
            if (host, pci) in g.keys or (g.received is not None and g.received.get("pci") == pci):
                return g
            found = found or g
        return found

    def _release_aer(self, g: _AerGroup) -> list[FaultEvent]:
        """The events of an open AER record, completed (:func:`aer.finish`): a received line no
        block followed is an event of its own (``found no error details``)."""
        for key in g.keys:
            if self._aer.get(key) is g:
                del self._aer[key]
        events = g.events
        if g.received is not None and g.rx_rec is not None and not g.rx_used:
            attrs = aer.new_record(None, g.received)
            events.insert(0, self._event(g.rx_rec, ev.PCIE_AER, device=attrs["pci_bus_id"], attrs=attrs))
        for e in events:
            if e.kind == ev.PCIE_AER:
                if g.affected:
                    e.attrs["affected_devices"] = list(dict.fromkeys(g.affected))
                e.category = aer.finish(e.attrs, g.nvidia)
        return events

    def _ghes_line(self, rec: Record, host: str | None, seq: int, kind: str, f: dict[str, Any],
                   out: list[FaultEvent]) -> None:
        """Fold one ``{seq}[Hardware Error]:`` line into its record (grouped by ``{seq}``: other
        lines may come between)."""
        key = (host, seq)
        h = self._ghes.get(key)
        if h is not None and (kind == "header" or not self._near(h, rec, GHES_WINDOW_RECORDS)):
            out.extend(self._release_ghes(key))
            h = None
        if h is None:
            h = self._ghes[key] = _Held(rec=rec, raws=[rec.raw], data=ghes.GhesRecord(seq), start=self._index)
        else:
            h.raws.append(rec.raw)
        h.data.add(kind, f)
        self._touch(h, rec)

    def _ghes_events(self, h: _Held, only: str | None = None) -> list[tuple[int, FaultEvent]]:
        """The events of a GHES record's memory and PCIe sections not taken yet: (section, event)."""
        rec = dataclasses.replace(h.rec, raw="\n".join(h.raws))
        out: list[tuple[int, FaultEvent]] = []
        for kind, i, attrs in ghes.section_events(h.data):
            if i in h.taken or (only is not None and kind != only):
                continue
            if kind == ev.CPU_ECC:
                out.append((i, self._event(rec, ev.CPU_ECC, device=attrs["label"], attrs=attrs, category=attrs["type"])))
            else:
                out.append((i, self._event(rec, ev.PCIE_AER, device=attrs["pci_bus_id"], attrs=attrs)))
        return out

    def _release_ghes(self, key: tuple[str | None, int]) -> list[FaultEvent]:
        h = self._ghes.pop(key)
        if not h.data.has_header:
            rec = dataclasses.replace(h.rec, raw="\n".join(h.raws))
            return [self._unparsed(rec, "ghes", "GHES record lines without the record's first line")]
        host = key[0]
        events: list[FaultEvent] = []
        for _i, e in self._ghes_events(h):
            if e.kind == ev.PCIE_AER:
                e.category = aer.finish(e.attrs)
            elif e.kind == ev.CPU_ECC:
                waiting = self._waiting_edac(host, h, e)
                if waiting is not None:  # the ghes_edac line printed before this record: one error
                    _fold_ghes_memory(waiting.attrs, e.attrs)
                    self.stats.duplicates_suppressed += 1
                    e = waiting
            events.append(e)
        return events

    def _paired(self, a: _Held, b_t: float | None, b_index: int) -> bool:
        """Is a line at ``b_t`` (seconds) / ``b_index`` (record index) within the firmware window
        of the held line ``a`` (by time, else by record count)?"""
        if a.t is not None and b_t is not None:
            return abs(b_t - a.t) <= FIRMWARE_WINDOW_S
        return abs(b_index - a.index) <= GHES_WINDOW_RECORDS

    def _waiting_edac(self, host: str | None, g: _Held, section: FaultEvent) -> FaultEvent | None:
        """The oldest held ghes_edac event of ``host`` that is the same error as the GHES memory
        section ``section`` of record ``g`` (:func:`ghes.same_memory_error`) and was printed within
        the window of the record's first line; taken off the wait list. None when there is none."""
        for item in self._edac_wait:
            w_host, w = item
            if (w_host == host and self._paired(w, _seconds(g.rec), g.start)
                    and ghes.same_memory_error(w.data.attrs, section.attrs, g.data.severity)):
                self._edac_wait.remove(item)
                return w.data
        return None

    def _ghes_may_follow(self, host: str | None, w: _Held) -> bool:
        """Is a GHES record of ``host`` that began within the window of the held ghes_edac line
        ``w`` still open (its memory section may be that line's error)?"""
        return any(g_host == host and g.data.has_header and self._paired(w, _seconds(g.rec), g.start)
                   for (g_host, _seq), g in self._ghes.items())

    def _take_ghes_pcie(self, host: str | None, pci: str, rec: Record) -> FaultEvent | None:
        """The event of a held GHES record's PCIe section for ``pci``, taken out of the record:
        the AER driver's ``pci_print_aer`` lines that follow are the same error."""
        for (h_host, _seq), h in reversed(list(self._ghes.items())):
            if h_host != host or not self._near(h, rec, GHES_WINDOW_RECORDS):
                continue
            for i, e in self._ghes_events(h, only=ev.PCIE_AER):
                if e.attrs.get("pci_bus_id") == pci:
                    h.taken.add(i)
                    return e
        return None

    def _mca_line(self, rec: Record, host: str | None, kind: str, f: dict[str, Any], out: list[FaultEvent]) -> None:
        """Fold one AMD MCA decoder line into the host's decode. A decode starts with the
        severity words (decode_error_status, v4.20+) or its ``MCn_STATUS`` line (which joins the
        decode only the severity words opened), well-formed or not (``malformed_status``: no
        fields); it ends with its ``cache level:``/``internal:`` line. The lines after a malformed
        status line are that decode's: its fields never reach another decode or an EDAC line."""
        h = self._mca.get(host)
        if h is not None and not self._near(h, rec, MCA_WINDOW_RECORDS):
            out.extend(self._release_mca(host))
            h = None
        opens = kind in ("status_text", "status", "malformed_status")
        if opens and not (kind != "status_text" and h is not None and set(h.data) == {"status_text"}):
            if h is not None:
                out.extend(self._release_mca(host))
            h = self._mca[host] = _Held(rec=rec, raws=[rec.raw], data=dict(f))
        elif h is None:
            out.append(self._unparsed(rec, "mca", "AMD MCA decode line without its MCn_STATUS line"))
            return
        else:
            h.data.update(f)
            h.raws.append(rec.raw)
        if kind == "malformed_status":
            h.data["malformed"] = True
        self._touch(h, rec)
        if kind == "err_code":  # amd_decode_err_code: the decode's last line
            out.extend(self._release_mca(host))

    def _release_mca(self, host: str | None) -> list[FaultEvent]:
        """The event of the host's AMD MCA decode, unless an EDAC line took it: a DRAM error of a
        memory controller is a ``cpu_ecc`` event (``via="mca"``), any other bank an ``mce``."""
        h = self._mca.pop(host)
        if h.merged:
            return []
        f = h.data
        rec = dataclasses.replace(h.rec, raw="\n".join(h.raws))
        if f.get("malformed"):
            return [self._unparsed(rec, "mca", "AMD MCA decode line not understood (its MCn_STATUS line)")]
        if "status" not in f:
            return [self._unparsed(rec, "mca", "AMD MCA decode without its MCn_STATUS line")]
        st = mce.decode_amd_status(f["status"], f.get("family"), f.get("flags"))
        device = f"cpu{f['cpu']}/bank{f['bank']}" if f.get("cpu") is not None else f"bank{f['bank']}"
        if mce.amd_is_memory(f):
            attrs = {"type": st["type"], "count": 1, "via": "mca", **_mca_fields(f), "address": f.get("addr")}
            return [self._event(rec, ev.CPU_ECC, device=device, attrs=attrs, category=st["type"])]
        attrs = {"cpu": f.get("cpu"), "bank": f["bank"], "status": f["status"], **st, "flags": f["flags"], "via": "mca"}
        for k, name in _MCA_MCE_KEYS:
            if k in f:
                attrs[name] = f[k]
        return [self._event(rec, ev.MCE, device=device, attrs=attrs, category=st["type"])]

    def _merge_firmware_first(self, host: str | None, fields: dict[str, Any], rec: Record) -> bool:
        """An EDAC line is the same error as the AMD MCA decode of a memory controller just before
        it (amd64_edac prints it from inside the decode) or as a held GHES memory section of the
        same error (:func:`ghes.same_memory_error`; ghes_proc prints the CPER record, then
        ghes_edac the EDAC line): their fields join the EDAC event, and they give no event of
        their own. ``address``: the EDAC page/offset, else the other's address; the type of an MCA
        decode comes from its status register. True when one joined. (A ghes_edac line printed
        before its record, ghes_proc_in_irq's order, waits for it: :meth:`_release_ghes`.)"""
        h = self._mca.get(host)
        if (h is not None and not h.merged and "status" in h.data and mce.amd_is_memory(h.data)
                and self._near(h, rec, MCA_WINDOW_RECORDS)):
            f = h.data
            fields.update(_mca_fields(f))
            fields["type"] = mce.decode_amd_status(f["status"], f.get("family"), f.get("flags"))["type"]
            if fields.get("address") is None:
                fields["address"] = f.get("addr")
            h.merged, h.seqs = True, set()  # its lines are in the EDAC event now
            self.stats.duplicates_suppressed += 1
            return True
        for (h_host, _seq), g in reversed(list(self._ghes.items())):
            if h_host != host or not self._near(g, rec, GHES_WINDOW_RECORDS):
                continue
            for i, e in self._ghes_events(g, only=ev.CPU_ECC):
                if not ghes.same_memory_error(fields, e.attrs, g.data.severity) or any(
                        w_host == host and w.index < g.start and self._paired(w, _seconds(g.rec), g.start)
                        and ghes.same_memory_error(w.data.attrs, e.attrs, g.data.severity)
                        for w_host, w in self._edac_wait):
                    continue  # another error, or the section of an earlier ghes_edac line still waiting
                g.taken.add(i)
                _fold_ghes_memory(fields, e.attrs)
                self.stats.duplicates_suppressed += 1
                return True
        if fields.get("address") is None and fields.get("mce_addr"):
            fields["address"] = fields["mce_addr"]  # the EDAC driver's own MCE decode (ADDR line)
        return False

    def _edac_mce_line(self, host: str | None, decode: tuple[int, dict[str, Any]], rec: Record) -> None:
        """Keep an EDAC driver's machine-check decode line for the EDAC error line that follows."""
        mc, fields = decode
        prev = self._edac_mce.get((host, mc))
        if "mce_bank" in fields or prev is None:  # the "CPU N: Machine Check Event" line starts a decode
            self._edac_mce[(host, mc)] = (dict(fields), _seconds(rec), self._index)
        else:
            prev[0].update(fields)

    def _take_edac_mce(self, host: str | None, mc: int, rec: Record) -> dict[str, Any]:
        """The decode printed just before this EDAC error line of the same controller, if any."""
        prev = self._edac_mce.pop((host, mc), None)
        if prev is None or "mce_bank" not in prev[0]:
            return {}
        fields, t0, idx = prev
        t = _seconds(rec)
        near = abs(t - t0) <= MCE_WINDOW_S if t is not None and t0 is not None else self._index - idx <= 16
        return fields if near else {}

    def _merge_contained(self, host: str | None, pci: str | None, code: int, fields: dict[str, Any],
                         rec: Record) -> bool:
        """Xid 94/95 prints one summary line (``Contained: SM ... RST: No``) and then one line per
        affected channel; the channel lines are the same error: fold them into the summary."""
        if "containment" in fields:
            return False
        prev = self._contained.get((host, pci, code))
        if prev is None:
            return False
        e, t0, idx = prev
        t = _seconds(rec)
        near = abs(t - t0) <= CONTAINED_WINDOW_S if t is not None and t0 is not None else self._index - idx <= 64
        if not near:
            return False
        if "channel" in fields:
            e.attrs.setdefault("channels", []).append(fields["channel"])
        if fields.get("pid") is not None:
            e.attrs.setdefault("pids", [])
            if fields["pid"] not in e.attrs["pids"]:
                e.attrs["pids"].append(fields["pid"])
        e.raw += "\n" + rec.raw
        self.stats.duplicates_suppressed += 1
        return True

    def _dup79(self, host: str | None, pci: str, form: str, rec: Record) -> bool:
        """True when the other form of the same GPU's Xid 79 was seen just before (count once)."""
        t = _seconds(rec)
        seen = self._recent79[(host, pci)]
        for other_form, other_t, other_idx in seen:
            if other_form == form:
                continue
            if t is not None and other_t is not None:
                if abs(t - other_t) <= XID79_WINDOW_S:
                    self.stats.duplicates_suppressed += 1
                    return True
            elif self._index - other_idx <= XID79_WINDOW_RECORDS:
                self.stats.duplicates_suppressed += 1
                return True
        seen.append((form, t, self._index))
        del seen[:-4]
        return False

    # -- event construction ----------------------------------------------------------------
    def _event(self, rec: Record, kind: str, code: int | None = None, device: str | None = None,
               attrs: dict[str, Any] | None = None, category: str | None = None) -> FaultEvent:
        attrs = dict(attrs or {})
        if rec.facility and rec.facility != "kern":
            # Userspace writes to /dev/kmsg are forced to a non-kernel facility: test traffic or
            # fault injection, kept and counted, but marked.
            attrs["facility"] = rec.facility
            attrs["injected"] = True
        if rec.seq is not None:
            attrs["seq"] = rec.seq
        if rec.boot_id:
            attrs["boot_id"] = rec.boot_id
        if self.origin:
            attrs["origin"] = self.origin
        return FaultEvent(
            kind=kind, message=rec.message, raw=rec.raw, time=rec.time, time_kind=rec.time_kind,
            raw_time=rec.raw_time, monotonic=rec.monotonic, host=rec.host or self.host, source=self.source,
            device=device, code=code, category=category, attrs=attrs, origin=rec.offset,
        )

    def _unparsed(self, rec: Record, family: str, reason: str) -> FaultEvent:
        self.stats.unparsed += 1
        return self._event(rec, ev.UNPARSED, attrs={"family": family, "reason": reason})


# Records without an envelope (a pasted line, a ticket field): the only ones in which a driver's
# message may follow a field glued to it (see lines.driver_message).
_NO_ENVELOPE = frozenset({"bare", "continuation"})
# Kernel records remembered to tell a record re-printed through another envelope (_reprinted).
_ENVELOPES_KEPT = 4096
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)

# Fault text, by family: ``_FAULT_STARTS`` where a driver's message starts (matched at the start),
# ``_FAULT_ANYWHERE`` the same text found anywhere (a quoted or glued fault: unparsed, flagged).
_FAULT_STARTS = (
    ("xid", xid.XID_HINT_RE), ("xid", xid.FALLEN_RE), ("xid", xid.FALLEN_START_RE),
    ("edac", edac.EDAC_HINT_RE), ("mce", mce.MCE_HINT_RE),
    ("ib", ib.IB_PORT_RE), ("ib", ib.NET_LINK_RE), ("ib", ib.MODULE_RE),
    ("sxid", sxid.SXID_HINT_RE), ("nvrm_assert", xid.ASSERT_HINT_RE),
    ("aer", aer.HINT_RE), ("ghes", ghes.HINT_RE), ("mca", mce.AMD_HINT_RE),
)
_FAULT_ANYWHERE = (
    ("xid", re.compile(r"NVRM:?\s*Xid\b|NVRM: (?:The NVIDIA GPU|GPU \S+ GPU has fallen off the bus)")),
    ("edac", re.compile(r"EDAC\b[^\n]*?\bMC[0-9]+: [0-9]+ (?:CE|UE|Fatal|Deferred)\b")),
    ("mce", mce.MCE_HINT_RE),
    ("sxid", sxid.SXID_ANYWHERE_RE), ("nvrm_assert", xid.ASSERT_HINT_RE),
    ("ib", re.compile(r"Port: [0-9]+ Link (?:DOWN|INIT|ARMED|ACTIVE)|mlx[0-9]_core \S+ \S+: Link (?:up|down)\b"
                      r"|Port module event")),
    ("aer", aer.ANYWHERE_RE), ("ghes", ghes.HINT_RE), ("mca", mce.AMD_HINT_RE),
)
# A second record glued after a parsed one: the header of a driver message later on the line.
_GLUED = re.compile(r"(?<=.)(?:NVRM:?\s*Xid\s*\(|EDAC (?:[\w-]+ )?MC[0-9]{1,9}: [0-9]{1,9} (?:CE|UE)\b"
                    r"|mce: \[Hardware Error\]: CPU [0-9]{1,9}: Machine Check)", re.S)
_FAMILY_NAMES = {"xid": "Xid", "edac": "EDAC error", "mce": "Machine Check", "ib": "IB/NIC link",
                 "sxid": "NVSwitch SXid", "nvrm_assert": "NVRM assertion", "aer": "PCIe AER",
                 "ghes": "APEI GHES record", "mca": "AMD MCA decode"}
# An AMD MCA decode's fields as a cpu_ecc event (or the EDAC event it joins) names them, and as an
# mce event does (the names print_mce's records use: cpu, bank, status, addr, ipid, synd...).
_MCA_MCE_KEYS = (("addr", "addr"), ("ipid", "ipid"), ("synd", "synd"), ("synd1", "synd1"), ("synd2", "synd2"),
                 ("ppin", "ppin"), ("tsc", "tsc"), ("family", "cpu_family"), ("model", "cpu_model"),
                 ("stepping", "cpu_stepping"), ("bank_name", "bank_name"), ("ext_error_code", "ext_error_code"),
                 ("description", "description"), ("node", "node"), ("err_code", "err_code"),
                 ("status_text", "status_text"), ("fru_text", "fru_text"))
# A GHES memory section's fields the EDAC line of the same error gains.
_GHES_MEMORY_KEYS = ("ghes_severity", "ghes_source", "ghes_record", "physical_address", "physical_address_mask",
                     "location", "error_type", "error_type_text", "error_status", "error_status_text")


def _fold_ghes_memory(fields: dict[str, Any], attrs: dict[str, Any]) -> None:
    """A GHES memory section's fields (``attrs``) into the EDAC event of the same error
    (``fields``): the CPER fields it lacks; ``address`` the CPER physical address when printed."""
    for k in _GHES_MEMORY_KEYS:
        if k in attrs and k not in fields:
            fields[k] = attrs[k]
    if attrs.get("physical_address") is not None:
        fields["address"] = attrs["physical_address"]


def _mca_fields(f: dict[str, Any]) -> dict[str, Any]:
    """An AMD MCA decode as ``mca_*`` attrs: bank, cpu, status, Error Addr, IPID (and its
    HardwareID, bits 43:32), syndrome, the status flags printed; family/model/stepping, the bank's
    name and extended error code when printed."""
    out: dict[str, Any] = {"mca_bank": f.get("bank"), "mca_cpu": f.get("cpu"), "mca_status": f.get("status"),
                           "mca_addr": f.get("addr"), "mca_ipid": f.get("ipid"), "mca_syndrome": f.get("synd"),
                           "hardware_id": (f["ipid"] >> 32) & 0xFFF if f.get("ipid") is not None else None,
                           "mca_status_flags": f.get("flags", [])}
    for k in ("family", "model", "stepping", "bank_name", "ext_error_code", "description", "status_text"):
        if k in f:
            out["mca_" + k] = f[k]
    return out


def _begins_fault(text: str) -> bool:
    """Does ``text`` (a driver message) start with fault text of any family?"""
    return any(pat.match(text) for _f, pat in _FAULT_STARTS)


def _fault_family(text: str) -> str | None:
    """The family of the fault text ``text`` holds anywhere (``xid``/``edac``/``mce``/``ib``), else None."""
    for family, pat in _FAULT_ANYWHERE:
        if pat.search(text):
            return family
    return None


def _glued_family(text: str) -> str | None:
    """The family of a fault header past the start of ``text`` (a record glued on), else None."""
    m = _GLUED.search(text) if len(text) > 8 else None
    if m is None:
        return None
    return {"N": "xid", "E": "edac", "m": "mce"}[m.group(0)[0]]


def _text_mismatch(code: int, payload: str) -> int | None:
    for text, expected in _TEXT_CODES:
        if text in payload and code != expected:
            return expected
    return None


def _seconds(rec: Record) -> float | None:
    if rec.time is not None:
        return rec.time.timestamp()
    return rec.monotonic


def _close(e: FaultEvent, rec: Record, window: float) -> bool:
    if e.time is not None and rec.time is not None:
        return abs((rec.time - e.time).total_seconds()) <= window
    if e.monotonic is not None and rec.monotonic is not None:
        return abs(rec.monotonic - e.monotonic) <= window
    return True


def group_records(lines: Iterable[str]) -> Iterator[list[str]]:
    """Physical lines grouped into records: an indented line continues the record before it
    (dmesg prints the 2nd.. lines of one printk indented, without a timestamp); blank lines end
    a record and are skipped (as the byte scanner, scan.candidate_records, reads them). Each
    input line is first cut at every line end (:func:`lines.split_lines`: CR, NEL, U+2028 and
    U+2029 end a line as LF does). An indented line that starts the input, and those
    that follow it, continue nothing: each is a record of its own (an indented paste of log lines)."""
    pending: list[str] = []
    for chunk in lines:
        # The line end that file iteration leaves on a line is its own; any other end inside it
        # (a CR, NEL, U+2028 ...) ends a line too, and an empty line after it is a blank line.
        if chunk.endswith("\n"):
            chunk = chunk[:-2] if chunk.endswith("\r\n") else chunk[:-1]
        for line in LINE_END_RE.split(chunk) if any(c in chunk for c in "\n\r\x85\u2028\u2029") else (chunk,):
            if not line.strip():  # a blank line ends a record: an indented line after it continues nothing
                if pending:
                    yield pending
                    pending = []
                continue
            if line[0] in " \t" and pending and pending[0][0] not in " \t":
                pending.append(line)
                continue
            if pending:
                yield pending
            pending = [line]
    if pending:
        yield pending


def records_from_lines(lines: Iterable[str], ctx: TimeContext | None = None) -> Iterator[Record]:
    """Records from physical lines, grouped by :func:`group_records`, envelopes parsed."""
    for group in group_records(lines):
        rec = join_record(group, ctx)
        if rec is not None:
            yield rec


# A /dev/kmsg dictionary line (" SUBSYSTEM=pci", " DEVICE=+pci:0000:01:00.0"): one blank, then
# KEY=value. Raw kmsg dumps and Talos ``talosctl dmesg`` print them under their record.
_KMSG_PROP = re.compile(r" [A-Z][A-Z0-9_]*=")


def join_record(lines: list[str], ctx: TimeContext | None = None) -> Record | None:
    """Parse the first line's envelope; continuation lines join the message with newlines,
    except kmsg dictionary lines, which become ``extra`` properties."""
    if len(lines) > 1 and lines[0].rstrip() == "{":
        rec = _pretty_json(lines, ctx)
        if rec is not None:
            return rec
    rec = parse_line(lines[0], ctx)
    if rec is None or len(lines) == 1:
        return rec
    kmsg = rec.fmt == "kmsg"
    text: list[str] = []
    for line in lines[1:]:
        if kmsg or _KMSG_PROP.match(line):
            k, sep, v = line.strip().partition("=")
            if sep:
                if rec.extra is None:
                    rec.extra = {}
                rec.extra[k] = v
        else:
            text.append(line.strip())
    if text:
        rec.message = rec.message + "\n" + "\n".join(text)
    rec.raw = "\n".join(lines)
    return rec


def _pretty_json(lines: list[str], ctx: TimeContext | None) -> Record | None:
    """An agent's JSON record printed over several lines: ``{`` alone, the members indented. Its
    closing brace is at column 0, so line readers end the record before it: put it back."""
    text = "\n".join(lines)
    if lines[-1].strip() not in ("}", "},"):
        text += "\n}"
    rec = parse_line(text, ctx)
    if rec is None or rec.fmt not in ("json", "journal_json"):
        return None
    rec.raw = "\n".join(lines)
    return rec

"""Turn a stream of kernel-log records into FaultEvents.

The per-line parsers are pure; this small assembler keeps the little state that real logs
need across lines of one stream (one file, one /dev/kmsg, one host):

* an MCE record is several lines (``CPU N: Machine Check ...``, ``TSC ...``, ``PROCESSOR ...``):
  one event per record;
* the text-only "fallen off the bus" Xid 79 may come split over separate syslog lines, and may
  be printed together with an ``Xid ...: 79`` line for the same GPU: counted once;
* ``NVRM: GPU at PCI:... GPU-<uuid>`` lines map PCI bus ids to GPU UUIDs.

Only the kernel makes a fault: each record is read from where its driver message starts
(:func:`nodewarden.parsing.lines.driver_message`); fault text anywhere else (quoted by another
message, a second record glued on the line, a later line of the same record) is counted as
``unparsed``. Records whose syslog ident is not ``kernel`` are skipped (``skipped_non_kernel``).

No I/O: records in (:meth:`KernelLogParser.feed`), events out. Call :meth:`flush` at the end.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Iterable, Iterator

from nodewarden import events as ev
from nodewarden.events import FaultEvent
from nodewarden.parsing import edac, ib, mce, xid
from nodewarden.parsing.envelope import Record, TimeContext, parse_line
from nodewarden.parsing.lines import LINE_END_RE, driver_message, split_lines

# Cheap substring tests before any regex: a record that has none of these is not a fault line.
TRIGGERS = ("NVRM", "Xid", "EDAC", "mce: ", "Port: ", "mlx", "fallen off the bus")

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
    """

    def __init__(self, host: str | None = None, source: str = "file", origin: str | None = None) -> None:
        self.host = host
        self.source = source
        self.origin = origin
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

    # -- public API ------------------------------------------------------------------------
    def feed(self, rec: Record) -> list[FaultEvent]:
        """Events completed by this record (often none). Never raises on record content.

        Faults are read where the driver's message starts (:func:`lines.driver_message`). Fault
        text elsewhere is counted as ``unparsed``, never as a fault: inside another message
        (``segfault ... in NVRM: Xid ...``, a second record glued on the line) or on a later line
        of the same record (a kmsg record holding two Xid lines, a dmesg continuation line).
        """
        self._index += 1
        self.stats.records += 1
        msg = rec.message
        out: list[FaultEvent] = []
        if not any(t in msg for t in TRIGGERS):
            return out
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
        record waiting for its last line, the first half of a split text-only Xid 79. A reader
        that persists a cursor must not count those records as done."""
        seqs: set[int] = set()
        if self._pending_mce is not None and self._pending_mce.attrs.get("seq") is not None:
            seqs.add(int(self._pending_mce.attrs["seq"]))
        for rec, _fields, _idx in self._pending_fallen.values():
            if rec.seq is not None:
                seqs.add(rec.seq)
        return tuple(sorted(seqs))

    def flush(self) -> list[FaultEvent]:
        """Events still held (an MCE record without its last line, a split Xid 79)."""
        out: list[FaultEvent] = []
        if self._pending_mce is not None:
            out.append(self._pending_mce)
            self._pending_mce = None
        for host, (rec, fields, _idx) in list(self._pending_fallen.items()):
            # "The NVIDIA GPU ... " never followed by "fallen off the bus": not an Xid 79.
            out.append(self._unparsed(rec, "xid79", "text-only Xid 79 start without its end"))
            del self._pending_fallen[host]
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
        c = msg[:1]
        if c == "N":
            return msg.startswith("NVRM") and self._nvrm(rec, msg, host, out)
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
            device = f"mc{fields['mc']}/{fields['label']}"
            out.append(self._event(rec, ev.CPU_ECC, device=device, attrs=fields, category=fields["type"]))
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

# Fault text, by family: ``_FAULT_STARTS`` where a driver's message starts (matched at the start),
# ``_FAULT_ANYWHERE`` the same text found anywhere (a quoted or glued fault: unparsed, flagged).
_FAULT_STARTS = (
    ("xid", xid.XID_HINT_RE), ("xid", xid.FALLEN_RE), ("xid", xid.FALLEN_START_RE),
    ("edac", edac.EDAC_HINT_RE), ("mce", mce.MCE_HINT_RE),
    ("ib", ib.IB_PORT_RE), ("ib", ib.NET_LINK_RE), ("ib", ib.MODULE_RE),
)
_FAULT_ANYWHERE = (
    ("xid", re.compile(r"NVRM:?\s*Xid\b|NVRM: (?:The NVIDIA GPU|GPU \S+ GPU has fallen off the bus)")),
    ("edac", re.compile(r"EDAC\b[^\n]*?\bMC[0-9]+: [0-9]+ (?:CE|UE|Fatal|Deferred)\b")),
    ("mce", mce.MCE_HINT_RE),
    ("ib", re.compile(r"Port: [0-9]+ Link (?:DOWN|INIT|ARMED|ACTIVE)|mlx[0-9]_core \S+ \S+: Link (?:up|down)\b"
                      r"|Port module event")),
)
# A second record glued after a parsed one: the header of a driver message later on the line.
_GLUED = re.compile(r"(?<=.)(?:NVRM:?\s*Xid\s*\(|EDAC (?:[\w-]+ )?MC[0-9]{1,9}: [0-9]{1,9} (?:CE|UE)\b"
                    r"|mce: \[Hardware Error\]: CPU [0-9]{1,9}: Machine Check)", re.S)
_FAMILY_NAMES = {"xid": "Xid", "edac": "EDAC error", "mce": "Machine Check", "ib": "IB/NIC link"}


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

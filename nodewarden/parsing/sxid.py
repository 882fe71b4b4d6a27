"""NVSwitch SXid lines (``nvidia-nvswitchN: SXid (PCI:DDDD:BB:DD.F): CODE, ...``) and the grouping
of the lines the driver prints for one error.

Formats, from NVIDIA/open-gpu-kernel-modules (595.45.04), ``src/common/nvswitch``:

* every line: ``NVSWITCH_PRINT_SXID`` / ``NVSWITCH_PRINT_SXID_NO_BBX`` (``kernel/inc/common_nvswitch.h``):
  ``"nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " _fmt`` with the device name
  (``nvswitch3``) and ``NVLINK_PCI_DEV_FMT`` = ``%04x:%02x:%02x.%x`` (full BDF, with function);
* the description line: ``NVSWITCH_REPORT_NONFATAL`` / ``_FATAL`` / ``_CORRECTABLE``
  (``kernel/inc/intr_nvswitch.h``): ``"Non-fatal, Link %02d %s%s"``, ``"Fatal, Link %02d %s%s"``,
  ``"Correctable, Link %02d %s%s"`` (the last ``%s`` is `` (First)`` or empty),
  ``NVSWITCH_REPORT_PRI_ERROR_*``: ``"Non-fatal, %s, instance=%d, chiplet=%d"``, and per-device
  forms (``kernel/inc/error_nvswitch.h``): ``"Correctable, " _fmt``, ``"Non-fatal, Link %02d " _fmt``;
* the error record, ``_nvswitch_dump_error_entry`` (``kernel/error_nvswitch.c``, called by
  ``nvswitch_record_error``): ``"Severity %d Engine instance %02d Sub-engine instance %02d"``
  (severity ``NVSWITCH_ERROR_SEVERITY_NONFATAL`` = 0, ``_FATAL`` = 1,
  ``interface/ctrl_dev_nvswitch.h``), then ``"Data {0x%08x x 9}"`` (flags, data[0..7]) and, when
  data[8..15] are not all zero, a second ``"Data {0x%08x x 8}"``;
* other SXid texts (``"SOE HALTED"``, ``"NVSWITCH Temperature %dC | ..."``, ``"Module %d faulty"``):
  a description without a severity word.

The driver prints the description line, then ``nvswitch_record_error`` prints one Severity/Data
pair per recorded error entry (an error that also logs a captured packet, ``NVSWITCH_REPORT_DATA``,
prints a second pair); pastes also show the order Data, description, Severity (S-001), and
scanners keep only Data and Severity lines (S-101). :class:`SxidGroups` folds the lines of one
error into one group: lines of the same host, switch, PCI id and code within :data:`WINDOW_S`
seconds (or :data:`WINDOW_LINES` SXid lines when a line has no time) belong together as long as
:func:`joins_error` says the line's part fits the lines already folded; else the line starts a
new error.

Pure functions and a small state machine; no I/O, never raises on line content.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from nodewarden.catalog import sxid as sxid_catalog
from nodewarden.parsing.pci import normalize_pci

# Matched at the start of the driver's message (nodewarden.parsing.lines.driver_message). What the
# parentheses hold is a bus id as the driver prints it (redactions allowed, no brackets); the code
# and the switch index are ASCII digits, bounded.
SXID_RE = re.compile(
    r"nvidia-(?P<switch>nvswitch(?P<index>[0-9]{1,4})):\s*SXid\s*\((?P<inner>[^()\[\]\n]{0,48})\)\s*:\s*"
    r"(?P<sxid>[0-9]{1,9})\b,?\s*(?P<rest>.*)", re.S | re.A)
# Something that looks like an SXid line but did not match SXID_RE: counted as unparsed.
SXID_HINT_RE = re.compile(r"nvidia-\S{0,40}:\s*SXid\b", re.A)
# The same text anywhere in a message (quoted by another message, or malformed): unparsed, flagged.
# A scanner's pattern (S-101's ``regex: 'SXid.*?: (\d+),'``) is neither.
SXID_ANYWHERE_RE = re.compile(r"nvidia-\S{0,40}:\s*SXid\b|SXid\s*\((?:PCI:)?[0-9a-fA-F.:]{0,20}\)\s*:\s*[0-9]", re.A)
MAX_DATA_WORDS = 32

_INNER = re.compile(r"(?:PCI:)?\s*(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)?", re.A)
_DATA = re.compile(r"Data\s*\{(?P<words>[^}\n]*)(?P<end>\})?", re.A)
_LINE_BREAK = re.compile(r"\s*\n\s*")  # joined continuation lines: collapsed to one space
# One Data word as _nvswitch_dump_error_entry prints it ("0x%08x" of a 32-bit word).
_WORD = re.compile(r"0x[0-9a-fA-F]{1,8}", re.A)
_SEVERITY = re.compile(
    r"Severity\s+(?P<sev>[0-9]{1,3})\s+Engine instance\s+(?P<eng>[0-9]{1,9})\s+Sub-engine instance\s+"
    r"(?P<sub>[0-9]{1,9})", re.A)
_DESCRIBED = re.compile(r"(?P<word>Non-fatal|Fatal|Correctable)\s*,\s*(?P<text>.*)", re.S | re.A | re.I)
_LINK = re.compile(r"Link\s+(?P<link>-?[0-9]{1,9})\b\s*(?P<text>.*)", re.S | re.A)
_PRI = re.compile(r"(?P<text>.*?),\s*instance=(?P<inst>[0-9]{1,9}),\s*chiplet=(?P<chip>[0-9]{1,9})\s*$", re.S | re.A)
_FIRST = " (First)"

# The printed severity words, and the record's Severity number (NVSWITCH_ERROR_SEVERITY_TYPE).
# The driver logs correctable errors as NONFATAL records (NVSWITCH_REPORT_CORRECTABLE ->
# NVSWITCH_LOG_NONFATAL_DATA): their severity is non_fatal, the word is kept in severity_text.
_WORD_SEVERITY = {"non-fatal": "non_fatal", "fatal": "fatal", "correctable": "non_fatal"}
_LEVEL_SEVERITY = {0: "non_fatal", 1: "fatal"}

# Lines of one error: printed within microseconds of each other (S-001: 6 ms for three lines).
# Kept below the agent's idle flush (``nodewarden.agent.daemon.POLL_S``, 0.5 s without records
# closes every open error): a line later than the window starts a new error in a replay of the log
# as it does live, so both fold the same lines and the journal's event keys agree.
WINDOW_S = 0.25
WINDOW_LINES = 16
# Errors held at once (distinct switches and codes); past this the oldest is emitted.
MAX_PENDING = 256


def parse_sxid_line(message: str) -> dict[str, Any] | None:
    """Fields of one SXid line, or None when ``message`` does not start with an SXid header.

    Returns ``switch`` (``nvidia-nvswitch3``), ``switch_index`` (3), ``pci_bus_id``
    (``DDDD:BB:DD.F`` or None when redacted), ``sxid`` (int) and ``part``, one of:

    * ``data``: ``words`` (ints; the first Data record: flags and data[0..7]);
    * ``data2``: ``words`` (the second Data record of 8 words: data[8..15]);
      a Data line with a word that is not ``0x`` + 1..8 hex digits, or with more than
      :data:`MAX_DATA_WORDS` words, has ``words`` None and ``malformed`` (the reason, for the
      ``unparsed`` event): its words are never shortened or shifted;
    * ``severity``: ``severity_level``, ``engine_instance``, ``subengine_instance`` (ints);
    * ``description``: ``severity_text`` (``Fatal`` | ``Non-fatal`` | ``Correctable`` as printed),
      ``description`` (text after ``Link N`` or after the word, `` (First)`` removed),
      ``first`` (bool), and ``link`` or ``instance``/``chiplet`` (ints) when printed;
    * ``text``: ``description`` (an SXid text without a severity word: ``SOE HALTED``).
    """
    m = SXID_RE.match(message)
    if not m:
        return None
    mi = _INNER.match(m.group("inner").strip())
    out: dict[str, Any] = {
        "switch": "nvidia-" + m.group("switch"), "switch_index": int(m.group("index")),
        "pci_bus_id": normalize_pci(mi.group("pci")) if mi else None, "sxid": int(m.group("sxid")),
    }
    rest = _LINE_BREAK.sub(" ", m.group("rest")).strip().rstrip('",').rstrip()
    md = _DATA.match(rest)
    if md:
        items = [w.strip() for w in md.group("words").split(",")]
        if items == [""]:
            items = []  # "Data {}"
        elif md.group("end") is None and items[-1] == "":
            items.pop()  # the line was cut after a comma
        part = "data2" if len(items) == 8 else "data"
        bad = next((w for w in items if not _WORD.fullmatch(w)), None)
        if bad is not None or len(items) > MAX_DATA_WORDS:
            why = (f"Data word {bad[:24]!r} is not 0x and 1..8 hex digits" if bad is not None
                   else f"Data holds {len(items)} words (at most {MAX_DATA_WORDS})")
            out.update(part=part, words=None, malformed=f"NVSwitch SXid {why}")
        else:
            out.update(part=part, words=[int(w, 16) for w in items])
        return out
    ms = _SEVERITY.match(rest)
    if ms:
        out.update(part="severity", severity_level=int(ms.group("sev")), engine_instance=int(ms.group("eng")),
                   subengine_instance=int(ms.group("sub")))
        return out
    mw = _DESCRIBED.match(rest)
    if mw is None:
        out.update(part="text", description=rest or None)
        return out
    text = mw.group("text").strip()
    first = text.endswith(_FIRST)
    if first:
        text = text[:-len(_FIRST)].rstrip()
    out.update(part="description", severity_text=_spelled(mw.group("word")), first=first)
    ml = _LINK.match(text)
    mp = _PRI.match(text) if ml is None else None
    if ml:
        out["link"] = int(ml.group("link"))
        text = ml.group("text").strip()
    elif mp:
        out.update(instance=int(mp.group("inst")), chiplet=int(mp.group("chip")))
        text = mp.group("text").strip()
    out["description"] = text or None
    return out


def _spelled(word: str) -> str:
    """The severity word as the driver spells it, whatever the case it was transcribed in."""
    return {"non-fatal": "Non-fatal", "fatal": "Fatal", "correctable": "Correctable"}[word.lower()]


def joins_error(part: str, severities: int, datas: int, described: bool) -> bool:
    """Does a line of ``part`` (:func:`parse_sxid_line`) belong to the open error of its key
    (within the window) that holds ``severities`` Severity lines, ``datas`` first-part Data lines
    and a description line or not (``described``)? False: the line starts a new error.

    * a description joins an error without a description and without a Severity line (S-001:
      Data, then description, then Severity); else it starts one;
    * a Severity line joins when every Severity so far has its Data (``datas >= severities``) and
      it is the first pair, or the second pair of a described error (``NVSWITCH_REPORT_DATA``
      after the description's own record): at most two;
    * a Data line joins when a Severity waits for its Data (``severities > datas``), or when the
      error has neither yet (Data first, S-001); else it starts one;
    * the 8-word continuation (``data2``, data[8..15] of the record just printed) and other text
      lines (``SOE HALT data[0] = ...``) always join.

    So description,S,D,S,D is one error; (D,description,S) x2, (D,S) x3 (S-101's scanner) and
    (S,D) x2 are one error per group of lines.
    """
    if part == "description":
        return not described and severities == 0
    if part == "severity":
        return datas >= severities and severities < 2 and (severities == 0 or described)
    if part == "data":
        return severities > datas or (datas == 0 and severities == 0)
    return True


@dataclasses.dataclass
class SxidGroup:
    """The lines of one SXid error, folded. ``first`` is the first line's record (any object: the
    stream keeps its envelope record there), ``raws`` the raw text of every line, ``fields`` what
    the lines said, ``t0``/``n0`` the first line's seconds (or None) and SXid line number,
    ``severities``/``datas`` how many Severity and first-part Data lines it holds."""

    first: Any
    key: tuple[Any, ...]
    t0: float | None
    n0: int
    fields: dict[str, Any]
    raws: list[str]
    parts: set[str] = dataclasses.field(default_factory=set)
    severities: int = 0
    datas: int = 0

    def accepts(self, line: dict[str, Any], t: float | None, n: int) -> bool:
        """Does ``line`` (same key) belong to this error? Near in time (or in SXid lines when
        either has no time), and a part that fits the lines so far (:func:`joins_error`)."""
        if _expired(self, t, n):
            return False
        return joins_error(line["part"], self.severities, self.datas, "description" in self.parts)

    def hold(self, line: dict[str, Any]) -> None:
        """A malformed Data line of this error (counted unparsed by the caller): it keeps its
        place (a later Data line is the error's next record, ``data``/``data_extra`` get an empty
        list for it) but adds no words and no line."""
        if line["part"] == "data":
            self.datas += 1
            if "data" in self.fields:
                self.fields.setdefault("data_extra", []).append([])
            else:
                self.fields["data"] = []

    def fold(self, line: dict[str, Any], raw: str) -> None:
        """Add one parsed line (:func:`parse_sxid_line`) to the error."""
        part, f = line["part"], self.fields
        self.raws.append(raw)
        if part == "data":
            self.datas += 1
            if "data" in f:
                f.setdefault("data_extra", []).append(list(line["words"]))
            else:
                f["data"] = list(line["words"])
        elif part == "data2":
            last = f["data_extra"][-1] if f.get("data_extra") else f.get("data")
            if last is not None and len(last) == 9:
                last.extend(line["words"])  # data[8..15] of the record just printed
            elif "data" in f:
                f.setdefault("data_extra", []).append(list(line["words"]))
            else:
                f["data"] = list(line["words"])
        elif part == "severity":
            self.severities += 1
            if "severity_level" not in f:
                f.update(severity_level=line["severity_level"], engine_instance=line["engine_instance"],
                         subengine_instance=line["subengine_instance"])
        elif part == "description" or not self.parts & {"description", "text"}:
            if part == "description" and "text" in self.parts and f.get("description"):
                f.setdefault("details", []).insert(0, f["description"])  # the text line came first
            for k in ("severity_text", "description", "first", "link", "instance", "chiplet"):
                if k in line:
                    f[k] = line[k]
        elif line.get("description"):  # a further text line of the error ("SOE HALT data[0] = ...")
            f.setdefault("details", []).append(line["description"])
        self.parts.add(part)

    def attrs(self) -> dict[str, Any]:
        """The ``sxid`` event's attrs (see the event shape in the module docstring of
        :mod:`nodewarden.parsing.stream`): severity from the printed word, else from the
        record's Severity number, else the catalog's default (``severity_source`` says which)."""
        f = self.fields
        info = sxid_catalog.lookup(f["sxid"])
        severity, source = None, "text"
        if f.get("severity_text"):
            severity = _WORD_SEVERITY[f["severity_text"].lower()]
        elif f.get("severity_level") in _LEVEL_SEVERITY:
            severity = _LEVEL_SEVERITY[f["severity_level"]]
        if severity is None:
            severity, source = info.severity, "catalog"
        out = {
            "switch": f["switch"], "switch_index": f["switch_index"], "pci_bus_id": f["pci_bus_id"],
            "sxid": f["sxid"], "severity": severity, "severity_source": source,
            "severity_text": f.get("severity_text"), "unit": info.unit, "sxid_name": info.mnemonic,
            "description": f.get("description"), "severity_level": f.get("severity_level"),
            "engine_instance": f.get("engine_instance"), "subengine_instance": f.get("subengine_instance"),
            "data": f.get("data", []), "lines": len(self.raws),
        }
        for k in ("link", "first", "instance", "chiplet", "data_extra", "details"):
            if k in f:
                out[k] = f[k]
        return out


class SxidGroups:
    """The SXid errors of one stream still open. :meth:`add` returns the groups a line closes
    (those past their window, or the same key's group when the line starts a new error);
    :meth:`flush` returns the rest. Groups come back in the order they were opened. A malformed
    Data line (``malformed`` set) never opens an error: it keeps its place in the open one it
    joins (:meth:`SxidGroup.hold`), or closes the open one it would not join."""

    def __init__(self) -> None:
        self._open: dict[tuple[Any, ...], SxidGroup] = {}
        self._lines = 0

    def add(self, key: tuple[Any, ...], line: dict[str, Any], rec: Any, raw: str, t: float | None) -> list[SxidGroup]:
        """Add one parsed SXid line and return the errors it closes, oldest first.

        ``key``: the error's key (host, switch, PCI id, SXid: lines of one key may be one error);
        ``line``: :func:`parse_sxid_line`'s fields (``part``, ``malformed`` when set); ``rec``:
        the line's record (kept as the error's ``first`` when it opens one); ``raw``: its raw
        text; ``t``: its time in seconds (None when it has none: the window is then
        :data:`WINDOW_LINES` SXid lines, else :data:`WINDOW_S`). Returns the groups
        (:class:`SxidGroup`) it closes: other keys' groups past their window, this key's group when the line does not
        join it (:meth:`SxidGroup.accepts`), the oldest open group when :data:`MAX_PENDING` are
        open; ``[]`` when none. Never raises on a parsed line."""
        self._lines += 1
        n = self._lines
        done = [g for k, g in self._open.items() if k != key and _expired(g, t, n)]
        for g in done:
            del self._open[g.key]
        group = self._open.get(key)
        if group is not None and not group.accepts(line, t, n):
            done.append(self._open.pop(key))
            group = None
        if line.get("malformed"):
            if group is not None:
                group.hold(line)
            done.sort(key=lambda g: g.n0)
            return done
        if group is None:
            if len(self._open) >= MAX_PENDING:
                oldest = next(iter(self._open))
                done.append(self._open.pop(oldest))
            fields = {k: line[k] for k in ("switch", "switch_index", "pci_bus_id", "sxid")}
            group = self._open[key] = SxidGroup(first=rec, key=key, t0=t, n0=n, fields=fields, raws=[])
        group.fold(line, raw)
        done.sort(key=lambda g: g.n0)
        return done

    def flush(self) -> list[SxidGroup]:
        """Close every open error (end of the stream): returns the groups (:class:`SxidGroup`) in
        the order they were opened (``[]`` when none); none stays open."""
        done = sorted(self._open.values(), key=lambda g: g.n0)
        self._open.clear()
        return done

    def pending(self) -> list[SxidGroup]:
        """The groups still open (their first records are not done yet)."""
        return list(self._open.values())


def _expired(g: SxidGroup, t: float | None, n: int) -> bool:
    if t is not None and g.t0 is not None:
        return abs(t - g.t0) > WINDOW_S
    return n - g.n0 > WINDOW_LINES

"""Failure-statistics tables of the Fire-Flyer paper (arXiv 2408.14158, Appendix) from events.

Pure functions: a DataFrame of events in, a DataFrame table out. ``events_frame`` builds the
frame from FaultEvents (one row per event).

Tables (column names follow the CSVs of the paper's tables so that they compare cell by cell):

* Table V  ``table5_xid_groups``: group, xids, count, percentage, remedy.
* Table VI ``table6_xid_counts``: group, xid, description, count, percentage.
* Table VII ``table7_memory_network_monthly``: month, main_memory_cpu_ecc, network_flash_cut,
  xid_63, xid_64, xid_79, xid_94, xid_95, total (and a Total row); given the observed span,
  every month of it (zero rows too) and a ``partial`` column.
* Table VIII ``table8_ib_flash_cuts_daily``: date, failure_count (days with cuts only).

IB flash cuts come from two kinds of evidence (``flash_cuts``): kernel-log ``ib_link_down``/
``ib_link_up`` pairs run through :class:`nodewarden.parsing.flashcut.FlashCutDetector` per host,
and ``ib_flash_cut`` events of agent journals. A journal cut of the same host and port within
``skew`` seconds of a log-derived cut is the same cut and counts once. Longer drops are outages
(``ib_link_outages``), listed with their durations.

Beyond the paper (NVSwitch SXid, PCIe AER, reset-required GPUs, AMD MCA and GHES memory errors).
Where the new kinds go (:data:`WHERE_THE_NEW_KINDS_GO`):
NVSwitch SXids, PCIe AER records and recovery lines, ``gpu_reset_required`` reports and
driver assertions are in none of Tables V-VIII; an Xid 154 is an Xid, counted in Tables V and
VI like any other (Table V names it in its row's ``xids``); AMD MCA and GHES memory errors are
CPU memory ECC errors (``cpu_ecc`` events), counted in Table VII's ``main_memory_cpu_ecc`` as
the paper counts CPU memory ECC errors, whatever reports them. The tables of the kinds the
paper does not count:

* ``sxid_by_switch``: host, switch, pci_bus_id, sxid, severity, count (NVSwitch SXid errors).
* ``pcie_aer_by_device``: host, pci_bus_id, severity, count, first_errors, errors,
  affected_devices (PCIe AER records).
* ``pcie_aer_by_severity``: severity, count, hosts, devices, gpu_lost_precursor (and a Total row).
* ``gpu_reset_required``: host, pci_bus_id, action, source, count, first, last (reset-required
  reports).
* ``beyond_paper_monthly``: month, pcie_aer_fatal, pcie_aer_non_fatal, pcie_aer_corrected,
  sxid_fatal, sxid_non_fatal, gpu_reset_required, gpu_lost_precursor (and a Total row).
* ``ib_link_outages``: host, device, port, down, up, duration_s.
"""

from __future__ import annotations

import calendar
import datetime as dt
from pathlib import Path
from typing import Iterable

import pandas as pd

from nodewarden import catalog
from nodewarden import events as ev
from nodewarden import nvml
from nodewarden.events import XID, FaultEvent
from nodewarden.parsing import aer

EVENT_COLUMNS = ("time", "host", "kind", "xid", "category", "device", "pci_bus_id", "source", "count",
                 "sxid", "severity", "switch", "action", "first_error", "duration_s", "errors", "affected_devices")
# The columns after ``count`` hold the attrs the tables beyond the paper need (None elsewhere):
#   sxid         the SXid code of an ``sxid`` event (Int64)
#   severity     ``sxid``/``pcie_aer`` attrs ``severity`` (fatal, non_fatal, corrected, unknown)
#   switch       ``sxid`` attrs ``switch`` (``nvidia-nvswitch3``)
#   action       the recovery action: ``gpu_reset_required``/``gpu_recovery_action`` attrs
#                ``action``, an Xid 154's attrs ``recovery_action`` (the action changed *to*)
#   first_error  ``pcie_aer`` attrs ``first_error`` (the bit name marked ``(First)``)
#   duration_s   ``ib_flash_cut``/``ib_link_outage`` attrs ``duration_s`` (float seconds)
#   errors       ``pcie_aer`` attrs ``errors``: the names of the record's error bits, a tuple
#                (``("SDES", "CmpltTO")``), in the order the record lists them
#   affected_devices  ``pcie_aer`` attrs ``affected_devices``: the functions (PCI ids) that
#                printed "can't recover" for the record, a tuple (empty when none did)
_DETAIL_COLUMNS = EVENT_COLUMNS[9:]

GPU_MEMORY_XIDS = (63, 64, 79, 94, 95)  # Table VII's "GPU memory-related" Xids
TABLE7_COLUMNS = ("month", "main_memory_cpu_ecc", "network_flash_cut",
                  *(f"xid_{c}" for c in GPU_MEMORY_XIDS), "total")
TABLE8_COLUMNS = ("date", "failure_count")
FLASH_CUT_COLUMNS = ("time", "host", "device", "source", "duration_s")
LOG, JOURNAL = "log", "journal"


def events_frame(events: Iterable[FaultEvent]) -> pd.DataFrame:
    """One row per event: time (UTC, NaT when unknown), host, kind, xid (nullable Int64),
    category, device, pci_bus_id, source, count, and the detail columns of :data:`EVENT_COLUMNS`
    (None unless the kind has them).

    Rows are in the order the logs printed the events (:func:`printed_order`), not the order
    the parser released them: it holds a multi-line record (an SXid's three lines, an AER record
    and its recovery lines) until the record is complete, so a one-line Xid printed after the
    record's first line comes out first. The statistics sort by time keeping the frame's order
    for equal times (a log stamped in whole seconds), which is then the printed order."""
    rows = []
    places = []
    for e in events:
        rows.append((_frame_time(e.time), e.host, e.kind, e.code if e.kind == XID else None, e.category, e.device,
                     e.pci_bus_id, e.source, _count(e),
                     *(_details(e) if e.kind in _DETAIL_KINDS or e.code == 154 else _NO_DETAILS)))
        places.append(_place(e))
    return make_frame([rows[i] for i in printed_order(places)])


def _place(e: FaultEvent) -> tuple[tuple, int | None]:
    """(input, position) of an event: input = (the file it was read from, attrs ``origin``; its
    boot id, for an agent journal; its source); position = the byte offset of its first line in
    that input (``FaultEvent.origin``), else the /dev/kmsg sequence number of its first record
    (attrs ``seq``: an agent journal's kernel-log events), else None (unknown: an NVML event)."""
    a = e.attrs
    pos = e.origin
    if pos is None:
        seq = a.get("seq")
        pos = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    origin, boot = a.get("origin"), a.get("boot_id")
    return (origin if isinstance(origin, str) else None, boot if isinstance(boot, str) else None, e.source), pos


def printed_order(places: list[tuple[tuple, int | None]]) -> list[int]:
    """Indices of the events (given as :func:`_place` pairs, in the order they were read) in the
    order their inputs printed them: each run of consecutive events of one input (all hosts of
    a merged log: one file) sorted by position, stably; an event of unknown position stays right
    after the one read before it, in its run. Runs, and so inputs, stay in the order read."""
    keys = []
    run = -1
    prev_input: object = object()
    pos = -1
    for inp, p in places:
        if p is not None:
            if inp != prev_input:
                run, prev_input = run + 1, inp
            pos = p
        elif run < 0:
            run = 0
        keys.append((run, pos))
    return sorted(range(len(places)), key=keys.__getitem__)


_DETAIL_KINDS = frozenset({ev.SXID, ev.PCIE_AER, ev.GPU_RESET_REQUIRED, ev.GPU_RECOVERY_ACTION, ev.IB_FLASH_CUT,
                           ev.IB_LINK_OUTAGE})
_NO_DETAILS = (None,) * len(_DETAIL_COLUMNS)


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _details(e: FaultEvent) -> tuple:
    """(sxid, severity, switch, action, first_error, duration_s, errors, affected_devices) of one
    event (see EVENT_COLUMNS); a value of the wrong type (a journal written by another version)
    is None (a list item of the wrong type is left out)."""
    a = e.attrs
    sxid = severity = switch = action = first = duration = errors = affected = None
    if e.kind == ev.SXID:
        n = a.get("sxid", e.code)
        sxid = n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 else None
        severity, switch = _text(a.get("severity")), _text(a.get("switch"))
    elif e.kind == ev.PCIE_AER:
        severity, first = _text(a.get("severity")), _text(a.get("first_error"))
        errs, devs = a.get("errors"), a.get("affected_devices")
        if isinstance(errs, list):
            errors = tuple(b["name"] for b in errs if isinstance(b, dict) and _text(b.get("name")))
        if isinstance(devs, list):
            affected = tuple(d for d in devs if _text(d))
    elif e.kind in (ev.GPU_RESET_REQUIRED, ev.GPU_RECOVERY_ACTION):
        action = _text(a.get("action"))
    elif e.kind == XID:
        action = _text(a.get("recovery_action"))  # Xid 154: the action changed to
    elif e.kind in (ev.IB_FLASH_CUT, ev.IB_LINK_OUTAGE):
        d = a.get("duration_s")
        duration = float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d < 1e9 else None
    return sxid, severity, switch, action, first, duration, errors, affected


# pandas' nanosecond timestamps span 1677-09-22 .. 2262-04-11: a time outside is a clock gone
# wrong; the event is kept, as one without a time.
_T_MIN = dt.datetime(1677, 9, 23, tzinfo=dt.timezone.utc)
_T_MAX = dt.datetime(2262, 4, 10, tzinfo=dt.timezone.utc)


def _frame_time(t: dt.datetime | None) -> dt.datetime | None:
    return t if t is not None and _T_MIN <= t <= _T_MAX else None


def make_frame(rows: Iterable[tuple]) -> pd.DataFrame:
    """A frame of :data:`EVENT_COLUMNS` from tuples (the columns from ``count`` on may be left out:
    None)."""
    rows = [tuple(r) + (None,) * (len(EVENT_COLUMNS) - len(r)) for r in rows]
    df = pd.DataFrame.from_records(rows, columns=list(EVENT_COLUMNS))
    df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
    for c in ("xid", "count", "sxid"):
        df[c] = df[c].astype("Int64")
    df["duration_s"] = df["duration_s"].astype(float)
    for c in ("host", "kind", "category", "device", "pci_bus_id", "source", "severity", "switch", "action",
              "first_error", "errors", "affected_devices"):
        df[c] = df[c].astype(object)
    return df


def _count(e: FaultEvent) -> int | None:
    """Errors one event stands for: EDAC's ``N CE`` count for cpu_ecc, else None (one)."""
    n = e.attrs.get("count") if e.kind == ev.CPU_ECC else None
    return int(n) if isinstance(n, (int, float)) and 1 <= n <= 1 << 31 else None


def table6_xid_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Table VI: per Xid its group, count and percentage of all Xid events, with a total row.

    Columns: ``group`` (:func:`group_label`: the Table V label, e.g. "Memory ECC Error", where
    the paper's Table VI prints "GPU ECC Error"), ``xid``, ``description``, ``count``,
    ``percentage`` (float, 0-100). Rows in the paper's group order, then by Xid; codes outside the
    catalog come last under "Unknown". An input without Xids gives just the total row (0, 0.0).
    """
    xids = df.loc[df["kind"] == XID, "xid"].dropna().astype(int)
    counts = xids.value_counts()
    total = int(counts.sum())
    order = {g: i for i, g in enumerate(catalog.GROUPS)}
    rows = []
    for code, n in counts.items():
        info = catalog.lookup(int(code))
        rows.append({
            "_order": order.get(info.group, len(order)),
            "group": group_label(info.group, int(code)),
            "xid": int(code),
            "description": info.description,
            "count": int(n),
            "percentage": 100.0 * n / total if total else 0.0,
        })
    table = pd.DataFrame(rows, columns=["_order", "group", "xid", "description", "count", "percentage"])
    table = table.sort_values(["_order", "xid"]).drop(columns="_order").reset_index(drop=True)
    table["xid"] = table["xid"].astype("Int64")
    total_row = pd.DataFrame([{"group": "Total", "xid": pd.NA, "description": "", "count": total,
                               "percentage": 100.0 if total else 0.0}])
    return pd.concat([table, total_row], ignore_index=True)


def group_label(group: str, code: int | None = None) -> str:
    """The one name of a group across the report (Tables V and VI, the figures): the paper's
    Table V label (``catalog.TABLE5_LABELS``: Table V defines the grouping), "Unknown" outside
    the catalog. ``code`` is accepted for callers that label per Xid; every code of a group gets
    the group's name. The paper's Table VI prints other labels for three groups
    (:func:`paper_label_differences`)."""
    return catalog.TABLE5_LABELS.get(group, "Unknown")


def paper_label_differences() -> list[tuple[str, str]]:
    """``(our label, the paper's Table VI label)`` for each group whose Table VI label differs
    from its Table V label (``GPU ECC Error`` for Memory ECC Error...), in the paper's order."""
    return [(catalog.TABLE5_LABELS[g], catalog.GROUP_LABELS[g]) for g in catalog.GROUPS
            if catalog.GROUP_LABELS[g] != catalog.TABLE5_LABELS[g]]


def group_label_note() -> str:
    """A sentence for the report saying where the paper's Table VI labels a group otherwise."""
    diffs = paper_label_differences()
    pairs = "; ".join(f"{ours} is the paper's \"{paper}\"" for ours, paper in diffs)
    return ("Groups are named as in the paper's Table V throughout this report; the paper's Table VI labels "
            f"{len(diffs)} of them otherwise: {pairs}.")


def kind_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Events per kind (``kind``, ``count``), most frequent first."""
    c = df["kind"].value_counts()
    return pd.DataFrame({"kind": c.index, "count": c.values.astype(int)})


def format_percent(table: pd.DataFrame) -> pd.DataFrame:
    """Copy of a table with ``percentage`` printed as the paper does (``42.57%``)."""
    out = table.copy()
    out["percentage"] = out["percentage"].map(lambda v: f"{v:.2f}%")
    out["xid"] = out["xid"].map(lambda v: "" if pd.isna(v) else str(int(v)))
    return out


# ---- Table V ---------------------------------------------------------------------------------

def table5_xid_groups(df: pd.DataFrame) -> pd.DataFrame:
    """Table V: the paper's Xid grouping with the events counted per group and what to do.

    Columns: ``group`` (Table V label), ``xids`` (the codes counted in the row,
    comma-separated: the codes the paper names for the group, then, in code order, the other
    codes of the group that occurred, such as 154 in Other Failures: ``119, 154``; with only the
    paper's codes in the logs the row reads as the paper printed it), ``count`` (Xid events of
    the group, any code the catalog files there), ``percentage`` of all Xid events, ``remedy``
    (catalog.GROUP_REMEDY). One row per group in the paper's order, an "Unknown" row only when
    codes outside the catalog occurred, and a Total row.
    """
    xids = df.loc[df["kind"] == XID, "xid"].dropna().astype(int)
    groups = xids.map(catalog.group_of)
    counts = groups.value_counts()
    total = int(counts.sum())
    named: dict[str, list[int]] = {g: [] for g in catalog.GROUPS}
    for code in catalog.codes():
        info = catalog.lookup(code)
        if info.group_source == "paper" and info.group in named:
            named[info.group].append(code)
    seen = set(xids)
    for code in sorted(seen):
        g = catalog.group_of(code)
        if g in named and code not in named[g]:
            named[g].append(code)  # counted in the row: named after the paper's codes
    rows = []
    for g in catalog.GROUPS:
        n = int(counts.get(g, 0))
        rows.append({"group": catalog.TABLE5_LABELS[g], "xids": ", ".join(map(str, named[g])), "count": n,
                     "percentage": 100.0 * n / total if total else 0.0, "remedy": catalog.GROUP_REMEDY[g]})
    unknown = int(counts.get(catalog.UNKNOWN_GROUP, 0))
    if unknown:
        codes = sorted(set(xids[groups == catalog.UNKNOWN_GROUP]))
        rows.append({"group": "Unknown", "xids": ", ".join(map(str, codes)), "count": unknown,
                     "percentage": 100.0 * unknown / total, "remedy": "Not in the catalog: investigate."})
    rows.append({"group": "Total", "xids": "", "count": total, "percentage": 100.0 if total else 0.0, "remedy": ""})
    return pd.DataFrame(rows, columns=["group", "xids", "count", "percentage", "remedy"])


# ---- IB flash cuts ---------------------------------------------------------------------------

# analyze reads ib_link_down/ib_link_up events up to this many seconds past --until: a cut that
# begins before --until ends at most flash_cuts' max_seconds (60 s) later, and its up line is
# what makes the drop a cut (the report then keeps the cuts by their start, and drops the extra
# lines). Twice max_seconds leaves room for the skew between the log stamps of two files.
FLASH_CUT_GRACE_S = 120.0


def kinds_to_read(kinds: frozenset[str] | None) -> frozenset[str] | None:
    """The event kinds analyze reads to report ``kinds`` (its ``--kind``; None: every kind):
    ``kinds`` itself, plus ``ib_link_down`` and ``ib_link_up`` when it names ``ib_flash_cut``,
    since the cuts of kernel logs are derived from those pairs (:func:`flash_cuts`)."""
    if kinds is None or ev.IB_FLASH_CUT not in kinds:
        return kinds
    return kinds | {ev.IB_LINK_DOWN, ev.IB_LINK_UP}


def flash_cuts(df: pd.DataFrame, max_seconds: float = 60.0, skew: float = 1.0) -> pd.DataFrame:
    """Every IB flash cut in the frame, one row each: ``time`` (the drop), ``host``, ``device``
    (``mlx5_0/1``), ``source`` (``log``: derived from an ib_link_down/ib_link_up pair of at most
    ``max_seconds``; ``journal``: an ``ib_flash_cut`` event), ``duration_s`` (None when unknown).

    Log pairs of each host go through a FlashCutDetector in time order; a longer drop is an
    outage and is not a cut (:func:`ib_link_outages`). A journal cut of the same host and device
    whose time is within ``skew`` seconds of a log-derived cut is that cut, counted once."""
    rows = [(pd.Timestamp(out.time), host, out.device, LOG, out.attrs.get("duration_s"))
            for host, out in _log_drops(df, max_seconds, skew) if out.kind == ev.IB_FLASH_CUT]
    log_cuts = pd.DataFrame(rows, columns=list(FLASH_CUT_COLUMNS))
    jr = df[(df["kind"] == ev.IB_FLASH_CUT) & df["time"].notna()]
    keep = []
    for r in jr.itertuples(index=False):
        same = log_cuts[(log_cuts["host"] == r.host) & (log_cuts["device"] == r.device)]
        if len(same) and ((same["time"] - r.time).abs() <= pd.Timedelta(seconds=skew)).any():
            continue
        keep.append((r.time, r.host, r.device, JOURNAL, None))
    j = pd.DataFrame(keep, columns=list(FLASH_CUT_COLUMNS))
    parts = [p for p in (log_cuts, j) if len(p)]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(FLASH_CUT_COLUMNS))
    out["time"] = pd.to_datetime(out["time"], utc=True)
    return out.sort_values(["time", "host"], kind="stable").reset_index(drop=True)


def _log_drops(df: pd.DataFrame, max_seconds: float, skew: float) -> list[tuple[str | None, FaultEvent]]:
    """(host, event) for every ``ib_flash_cut``/``ib_link_outage`` a FlashCutDetector makes of
    each host's kernel-log ib_link_down/ib_link_up events, in time order."""
    from nodewarden.parsing.flashcut import FlashCutDetector

    out: list[tuple[str | None, FaultEvent]] = []
    links = df[df["kind"].isin([ev.IB_LINK_DOWN, ev.IB_LINK_UP]) & df["time"].notna()]
    links = links.sort_values("time", kind="stable")
    for _, g in links.groupby(links["host"].fillna(""), sort=True):
        det = FlashCutDetector(max_seconds=max_seconds, skew_seconds=skew)
        for r in g.itertuples(index=False):
            e = FaultEvent(kind=r.kind, message="", raw="", time=r.time.to_pydatetime(), host=r.host,
                           source=r.source or "file", device=r.device)
            out += [(r.host, d) for d in det.observe_event(e, now=r.time.timestamp())]
    return out


IB_OUTAGE_COLUMNS = ("host", "device", "port", "down", "up", "duration_s")


def ib_link_outages(df: pd.DataFrame, max_seconds: float = 60.0, skew: float = 1.0) -> pd.DataFrame:
    """IB ports down longer than ``max_seconds`` (DESIGN.md "IB flash cut": outages, counted apart
    from the cuts), one row each: ``host``, ``device`` (``mlx5_0``), ``port`` (Int64), ``down``,
    ``up`` (UTC times), ``duration_s`` (float seconds), in ``down`` order.

    Three kinds of row: an outage the FlashCutDetector makes of a kernel-log down/up pair (as
    :func:`flash_cuts` does for the cuts); a port whose last link line in the frame is a down
    more than ``max_seconds`` before the frame's last event (still down when the logs end:
    ``up`` NaT, ``duration_s`` NaN); an agent journal's ``ib_link_outage`` event (``up`` =
    ``down`` + its ``duration_s``), unless a log-derived outage of that host and port begins
    within ``skew`` seconds of it (the same outage, counted once)."""
    rows: list[tuple] = []
    for host, d in _log_drops(df, max_seconds, skew):
        if d.kind != ev.IB_LINK_OUTAGE:
            continue
        a = d.attrs
        up = a.get("up_at")
        rows.append((host, a.get("rdma_device"), a.get("port"), pd.Timestamp(d.time),
                     pd.Timestamp(up, unit="s", tz="UTC") if up is not None else pd.NaT, a.get("duration_s")))
    timed = df[df["time"].notna()]
    end = timed["time"].max() if len(timed) else None
    links = timed[timed["kind"].isin([ev.IB_LINK_DOWN, ev.IB_LINK_UP])].sort_values("time", kind="stable")
    open_since: dict[tuple, pd.Timestamp | None] = {}
    for r in links.itertuples(index=False):
        key = (r.host, r.device)
        if r.kind == ev.IB_LINK_UP:
            open_since[key] = None
        elif open_since.get(key) is None:
            open_since[key] = r.time
    for (host, device), t in open_since.items():
        if t is not None and end is not None and (end - t).total_seconds() > max_seconds:
            dev, port = _split_port(device)
            rows.append((host, dev, port, t, pd.NaT, None))
    log_rows = list(rows)
    for r in df[(df["kind"] == ev.IB_LINK_OUTAGE) & df["time"].notna()].itertuples(index=False):
        dev, port = _split_port(r.device)
        if any(h == r.host and d == dev and p == port and abs((t - r.time).total_seconds()) <= skew
               for h, d, p, t, _, _ in log_rows):
            continue
        dur = r.duration_s
        up = r.time + pd.Timedelta(seconds=dur) if dur is not None and not pd.isna(dur) else pd.NaT
        rows.append((r.host, dev, port, r.time, up, dur))
    out = pd.DataFrame(rows, columns=list(IB_OUTAGE_COLUMNS))
    out["port"] = out["port"].astype("Int64")
    out["down"] = pd.to_datetime(out["down"], utc=True)
    out["up"] = pd.to_datetime(out["up"], utc=True)
    out["duration_s"] = out["duration_s"].astype(float)
    return out.sort_values(["down", "host", "device"], kind="stable").reset_index(drop=True)


def _split_port(device: str | None) -> tuple[str | None, int | None]:
    """``mlx5_0/1`` -> (``mlx5_0``, 1); a name without a port -> (name, None)."""
    dev, sep, port = (device or "").rpartition("/")
    if sep and dev and port.isdigit() and len(port) <= 4:
        return dev, int(port)
    return device, None


# ---- Tables VII and VIII ---------------------------------------------------------------------

def _month(t: pd.Series) -> pd.Series:
    return t.dt.strftime("%Y-%m")


Span = tuple[dt.date, dt.date]  # first and last day the data covers (UTC), both included


def observed_span(df: pd.DataFrame, since: dt.datetime | None = None,
                  until: dt.datetime | None = None) -> Span | None:
    """First and last day (UTC, inclusive) the data covers: ``since`` .. ``until`` (exclusive)
    where given, else the first and last event's day; None without timed events or bounds."""
    t = df["time"].dropna()
    lo = pd.Timestamp(since) if since is not None else (t.min() if len(t) else None)
    hi = pd.Timestamp(until) - pd.Timedelta(1, "ns") if until is not None else (t.max() if len(t) else None)
    if lo is None or hi is None:
        return None
    lo = lo.tz_convert("UTC") if lo.tzinfo else lo
    hi = hi.tz_convert("UTC") if hi.tzinfo else hi
    return lo.date(), hi.date()


def month_coverage(month: str, span: Span) -> tuple[int, int]:
    """``(days of month covered by span, days in month)`` for ``month`` (``YYYY-MM``) and the
    observed ``span`` (first, last day, inclusive)."""
    y, m = map(int, month.split("-"))
    days = calendar.monthrange(y, m)[1]
    lo = max(span[0], dt.date(y, m, 1))
    hi = min(span[1], dt.date(y, m, days))
    return max(0, (hi - lo).days + 1), days


def span_months(span: Span) -> list[str]:
    """Every month (``YYYY-MM``) from the span's first day's to its last day's."""
    return list(pd.period_range(span[0], span[1], freq="M").astype(str))


def table7_memory_network_monthly(df: pd.DataFrame, cuts: pd.DataFrame | None = None,
                                  span: Span | None = None) -> pd.DataFrame:
    """Table VII: per month (``YYYY-MM``, UTC) CPU memory ECC errors (``main_memory_cpu_ecc``: the
    sum of the cpu_ecc events' EDAC counts, one per event without a count), IB flash cuts
    (``network_flash_cut``, see :func:`flash_cuts`), GPU memory-related Xids 63, 64, 79, 94 and
    95 (``xid_63`` ...), and their ``total``; a Total row last. Events without a time are not
    placed in any month. Without ``span`` months with none of these are left out; with it (the
    observed window, :func:`observed_span`) every month of the window is a row, zero or not, and
    a last column ``partial`` says of a month the window covers only in part how many of its
    days it covers (``12 of 30 days``; empty for a whole month and the Total row)."""
    if cuts is None:
        cuts = flash_cuts(df)
    timed = df[df["time"].notna()]
    parts = {}
    ecc = timed[timed["kind"] == ev.CPU_ECC]
    parts["main_memory_cpu_ecc"] = ecc["count"].fillna(1).astype(int).groupby(_month(ecc["time"])).sum()
    ct = cuts[cuts["time"].notna()]
    parts["network_flash_cut"] = ct.groupby(_month(ct["time"])).size()
    x = timed[timed["kind"] == XID]
    for code in GPU_MEMORY_XIDS:
        xc = x[x["xid"] == code]
        parts[f"xid_{code}"] = xc.groupby(_month(xc["time"])).size()
    months = set().union(*(set(s.index) for s in parts.values()))
    if span is not None:
        months |= set(span_months(span))
    months = sorted(months)
    table = pd.DataFrame({"month": months})
    for col, s in parts.items():
        table[col] = [int(s.get(m, 0)) for m in months]
    cols = list(TABLE7_COLUMNS[1:-1])
    table["total"] = table[cols].sum(axis=1).astype(int) if months else pd.Series(dtype=int)
    total = {"month": "Total", **{c: int(table[c].sum()) for c in TABLE7_COLUMNS[1:]}}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    table = table[list(TABLE7_COLUMNS)].astype({c: int for c in TABLE7_COLUMNS[1:]})
    if span is not None:
        table["partial"] = [partial_month(m, span) for m in table["month"]]
    return table


def partial_month(month: str, span: Span) -> str:
    """``"12 of 30 days"`` for a month (``YYYY-MM``) ``span`` covers only in part; ``""`` for a
    whole month and anything else (the Total row)."""
    if len(month) != 7 or month[4] != "-":
        return ""
    covered, days = month_coverage(month, span)
    return f"{covered} of {days} days" if covered < days else ""


def table8_ib_flash_cuts_daily(cuts: pd.DataFrame) -> pd.DataFrame:
    """Table VIII: IB flash cuts per day (``date`` ``YYYY-MM-DD`` UTC, ``failure_count``), only
    days with cuts (as the paper prints it: a day not listed had none), in date order. Takes
    the frame of :func:`flash_cuts`."""
    ct = cuts[cuts["time"].notna()]
    s = ct.groupby(ct["time"].dt.strftime("%Y-%m-%d")).size()
    return pd.DataFrame({"date": list(s.index), "failure_count": [int(v) for v in s.values]},
                        columns=list(TABLE8_COLUMNS))


def flash_cut_discrepancies(t7: pd.DataFrame, t8: pd.DataFrame, label7: str = "Table VII",
                            label8: str = "Table VIII") -> list[dict]:
    """Months where Table VII's ``network_flash_cut`` differs from the sum of Table VIII's days of
    that month (the paper prints 29 for 2023-10 against 13 days' worth). One dict per month:
    ``month``, ``table7``, ``table8_sum``, ``message``. Only months both tables cover: Table VIII
    may span more months than Table VII (the paper's does)."""
    m7 = {r["month"]: int(r["network_flash_cut"]) for _, r in t7.iterrows() if r["month"] != "Total"}
    days = t8.assign(month=t8["date"].astype(str).str[:7])
    m8 = days.groupby("month")["failure_count"].sum().to_dict()
    first8 = min(m8) if m8 else None
    last8 = max(m8) if m8 else None
    out = []
    for month in sorted(m7):
        if first8 is None or not (first8 <= month <= last8):
            continue
        a, b = m7[month], int(m8.get(month, 0))
        if a != b:
            out.append({"month": month, "table7": a, "table8_sum": b,
                        "message": f"{month}: {label7} counts {a} IB flash cuts, {label8}'s days sum to {b}"})
    return out


# ---- beyond the paper: SXid, PCIe AER, reset-required GPUs -----------------------------------

# Where the kinds beyond the paper are counted (the report's note under the tables beyond the paper).
WHERE_THE_NEW_KINDS_GO = (
    "Where the new kinds go. In none of Tables V-VIII, only in the tables beyond the paper: NVSwitch SXids, "
    "PCIe AER records and their recovery lines, gpu_reset_required reports (NVRM NV_ERR_RESET_REQUIRED "
    "assertions, NVML) and driver assertions. Xid 154 is an Xid: Tables V (Other Failures, named in its xids) "
    "and VI count it like any Xid, and it is a reset-required report here when its new action is not none. "
    "AMD MCA and GHES (firmware-first) memory errors are CPU memory ECC errors: Table VII's main_memory_cpu_ecc "
    "counts them, as the paper counts CPU memory ECC errors whatever reports them (one error once, when its "
    "EDAC line is printed too); an AMD MCA error of a bank other than memory is an mce event, in no paper table. "
    "The MTBF, repeat-offender and co-occurrence tables take the new kinds as their labels (pcie_aer:fatal, "
    "sxid:fatal...): AER recovery lines are left out of them (the record is the fault), but for an NVIDIA "
    "function's that no AER record accompanies (pcie_aer_recovery:gpu_lost_precursor).")

SXID_BY_SWITCH_COLUMNS = ("host", "switch", "pci_bus_id", "sxid", "severity", "count")
PCIE_AER_BY_DEVICE_COLUMNS = ("host", "pci_bus_id", "severity", "count", "first_errors", "errors",
                              "affected_devices")
PCIE_AER_BY_SEVERITY_COLUMNS = ("severity", "count", "hosts", "devices", "gpu_lost_precursor")
GPU_RESET_REQUIRED_COLUMNS = ("host", "pci_bus_id", "action", "source", "count", "first", "last")
# gpu_reset_required ``source``: what reported the reset
RESET_ASSERTION, RESET_XID154, RESET_NVML = "assertion", "xid154", "nvml"
BEYOND_PAPER_COLUMNS = ("month", "pcie_aer_fatal", "pcie_aer_non_fatal", "pcie_aer_corrected", "sxid_fatal",
                        "sxid_non_fatal", "gpu_reset_required", "gpu_lost_precursor")
GPU_LOST_PRECURSOR = aer.PRECURSOR  # the category parsers give a fatal AER on a GPU
AER_SEVERITIES = tuple(reversed(aer.EVENT_SEVERITIES))  # the order of the AER tables: fatal first
NO_ACTION = nvml.RECOVERY_NONE  # a recovery action that asks for nothing (Xid 154 "to 0x0 (None)")
# Reports of the same host, GPU and action from different evidence (an Xid 154 in the kernel log
# and NVML's recovery action in an agent journal) this close together are one report.
RESET_SAME_REPORT_S = 60.0
# A pcie_aer_recovery "can't recover" for an NVIDIA function this close to an uncorrected AER
# record on the same host is that record's recovery, not another precursor (lost_aer_records).
PRECURSOR_SAME_RECORD_S = 5.0


def _keys(t: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``t[cols]`` with missing text as "" so that groupby keeps those rows."""
    out = t[cols].copy()
    for c in cols:
        if out[c].dtype == object:
            out[c] = out[c].fillna("")
    return out


def sxid_by_switch(df: pd.DataFrame) -> pd.DataFrame:
    """NVSwitch SXid errors (``sxid`` events: one per error, its Data/description/Severity lines
    folded by the parser) per host, switch (``nvidia-nvswitch3``), switch PCI id, SXid and
    severity (``fatal``, ``non_fatal``, ``unknown``); most frequent first, then by name. Empty
    (the columns only) when the frame has none."""
    x = _keys(df[df["kind"] == ev.SXID], ["host", "switch", "pci_bus_id", "sxid", "severity"])
    keys = list(SXID_BY_SWITCH_COLUMNS[:-1])
    c = x.groupby(keys, dropna=False).size().reset_index(name="count")
    c["count"] = c["count"].astype(int)
    c["sxid"] = c["sxid"].astype("Int64")
    c = c.sort_values(["count", "host", "switch", "pci_bus_id", "sxid"], ascending=[False, True, True, True, True],
                      kind="stable", na_position="last")
    return c[list(SXID_BY_SWITCH_COLUMNS)].reset_index(drop=True)


def _aer_order(sev: str) -> tuple[int, str]:
    return (AER_SEVERITIES.index(sev) if sev in AER_SEVERITIES else len(AER_SEVERITIES), sev)


def pcie_aer_by_device(df: pd.DataFrame) -> pd.DataFrame:
    """PCIe AER error records (``pcie_aer`` events, kernel or firmware-first GHES) per host,
    device (``pci_bus_id``: the device the record is about) and severity (``fatal``,
    ``non_fatal``, ``corrected``). Rows by host, device, severity (fatal first). Columns after
    ``count``:

    * ``first_errors``: the error bits marked ``(First)`` with how many records named each, most
      frequent first (``CmpltTO (2); SDES (1)``; "" when none named one);
    * ``errors``: every error bit the records list (attrs ``errors``: the ``[ N] Name`` lines, or
      the bits of the status word when the kernel printed none) with how many records listed
      it, most frequent first, then by name (``RxErr (20); BadTLP (3)``; "" when none);
    * ``affected_devices``: the functions that could not recover from the records (attrs
      ``affected_devices``: those that printed ``can't recover (no error_detected callback)``,
      the GPU a fatal error took off the bus, its audio function...), PCI ids sorted,
      comma-separated ("" when none)."""
    a = _keys(df[df["kind"] == ev.PCIE_AER], ["host", "pci_bus_id", "severity", "first_error", "errors",
                                               "affected_devices"])
    rows = []
    for (host, bus, sev), g in a.groupby(["host", "pci_bus_id", "severity"], sort=False):
        firsts = g["first_error"][g["first_error"] != ""].value_counts()
        bits: dict[str, int] = {}
        for names in g["errors"]:
            for name in dict.fromkeys(names or ()):  # a bit counts once per record
                bits[name] = bits.get(name, 0) + 1
        lost = sorted({d for devs in g["affected_devices"] for d in (devs or ())})
        rows.append({"host": host, "pci_bus_id": bus, "severity": sev, "count": len(g),
                     "first_errors": _named_counts(firsts.items()), "errors": _named_counts(bits.items()),
                     "affected_devices": ", ".join(lost)})
    rows.sort(key=lambda r: (r["host"], r["pci_bus_id"], _aer_order(r["severity"])))
    return pd.DataFrame(rows, columns=list(PCIE_AER_BY_DEVICE_COLUMNS)).astype({"count": int})


def _named_counts(items: Iterable[tuple[str, int]]) -> str:
    """``Name (n); Other (m)``, most frequent first, then by name."""
    return "; ".join(f"{name} ({n})" for name, n in sorted(items, key=lambda kv: (-kv[1], kv[0])))


def pcie_aer_by_severity(df: pd.DataFrame) -> pd.DataFrame:
    """PCIe AER records per severity: ``count``, distinct ``hosts`` and ``devices`` (host and PCI
    id), and ``gpu_lost_precursor`` (how many of them were an uncorrected error on an NVIDIA
    function: category ``gpu_lost_precursor``). Rows fatal, non_fatal, corrected, then any other
    severity the parser gave (``""`` when none), and a Total row. Only the Total row (zeros) when
    the frame has no AER record."""
    a = _keys(df[df["kind"] == ev.PCIE_AER], ["host", "pci_bus_id", "severity", "category"])
    rows = []
    for sev in sorted(set(a["severity"]), key=_aer_order):
        g = a[a["severity"] == sev]
        rows.append({"severity": sev, "count": len(g), "hosts": g["host"].nunique(),
                     "devices": len(set(zip(g["host"], g["pci_bus_id"]))),
                     GPU_LOST_PRECURSOR: int((g["category"] == GPU_LOST_PRECURSOR).sum())})
    rows.append({"severity": "Total", "count": len(a), "hosts": a["host"].nunique(),
                 "devices": len(set(zip(a["host"], a["pci_bus_id"]))),
                 GPU_LOST_PRECURSOR: int((a["category"] == GPU_LOST_PRECURSOR).sum())})
    return pd.DataFrame(rows, columns=list(PCIE_AER_BY_SEVERITY_COLUMNS)).astype(
        {c: int for c in PCIE_AER_BY_SEVERITY_COLUMNS[1:]})


def reset_reports(df: pd.DataFrame) -> pd.DataFrame:
    """The frame's reports that a GPU must be reset (or its node rebooted, drained...), one row
    per report, in time order (untimed last): ``gpu_reset_required`` events (an NVRM assertion
    with ``[NV_ERR_RESET_REQUIRED]``, or NVML's recovery action turning to one) and Xid 154
    events whose new action (``action`` column) is not ``none``. ``gpu_recovery_action`` events
    are NVML's state changes behind such reports and are not counted again. A report of the same
    host, GPU and action as the last one counted, from other evidence (kind or source), within
    :data:`RESET_SAME_REPORT_S` is that report (an Xid 154 in the kernel log and NVML's change in
    an agent journal). Columns: those of the frame, ``action`` filled (``gpu_reset`` when an
    assertion names none)."""
    x154 = (df["kind"] == XID) & df["xid"].eq(154).fillna(False).astype(bool)
    r = df[(df["kind"] == ev.GPU_RESET_REQUIRED)
           | (x154 & df["action"].notna() & (df["action"] != NO_ACTION))].copy()
    r["action"] = r["action"].fillna("gpu_reset")
    r = r.sort_values("time", kind="stable", na_position="last")
    keep = []
    last: dict[tuple, tuple] = {}  # (host, bus, action) -> (time, evidence) of the last report kept
    for i, row in zip(r.index, r.itertuples(index=False)):
        key = (row.host, row.pci_bus_id, row.action)
        evidence = (row.kind, row.source)
        prev = last.get(key)
        if (prev is not None and not pd.isna(row.time) and not pd.isna(prev[0]) and prev[1] != evidence
                and (row.time - prev[0]).total_seconds() <= RESET_SAME_REPORT_S):
            continue
        keep.append(i)
        last[key] = (row.time, evidence)
    return r.loc[keep]


def reset_source(kind: str, source: str | None) -> str:
    """What reported a reset-required report: ``xid154`` (an Xid 154 whose new action is not
    none), ``nvml`` (a ``gpu_reset_required`` event of the NVML collector, source ``nvml``), or
    ``assertion`` (the NVRM assertion with ``[NV_ERR_RESET_REQUIRED]`` in the kernel log, read
    from a log or an agent journal)."""
    if kind == XID:
        return RESET_XID154
    return RESET_NVML if source == "nvml" else RESET_ASSERTION


def gpu_reset_required(df: pd.DataFrame) -> pd.DataFrame:
    """Reset-required reports (:func:`reset_reports`) per host, GPU (``pci_bus_id``; "" when the
    driver printed none, as its assertion lines do), ``action`` (``gpu_reset``,
    ``node_reboot``, ``drain_p2p``, ``drain_and_reset``) and ``source`` (:func:`reset_source`:
    ``assertion``, ``xid154``, ``nvml``; a report merged with one of other evidence is the one
    counted first's): ``count``, ``first`` and ``last`` report time (UTC; NaT when untimed). Most
    reports first, then by host, GPU, action, source.

    ``events_by_kind`` counts the ``gpu_reset_required`` kind only (assertions and NVML's
    reports); the Xid 154s here are ``xid`` events there, and a report of two kinds of evidence
    counts once here: the counts differ by design."""
    r = reset_reports(df)
    r = _keys(r.assign(source=[reset_source(k, s) for k, s in zip(r["kind"], r["source"])]),
              ["host", "pci_bus_id", "action", "source", "time"])
    rows = []
    for (host, bus, action, source), g in r.groupby(["host", "pci_bus_id", "action", "source"], sort=False):
        t = g["time"].dropna()
        rows.append({"host": host, "pci_bus_id": bus, "action": action, "source": source, "count": len(g),
                     "first": t.min() if len(t) else pd.NaT, "last": t.max() if len(t) else pd.NaT})
    rows.sort(key=lambda x: (-x["count"], x["host"], x["pci_bus_id"], x["action"], x["source"]))
    out = pd.DataFrame(rows, columns=list(GPU_RESET_REQUIRED_COLUMNS)).astype({"count": int})
    for c in ("first", "last"):
        out[c] = pd.to_datetime(out[c], utc=True)
    return out


def gpu_lost_precursors(df: pd.DataFrame) -> pd.DataFrame:
    """GPU-lost precursors, one row each: every ``pcie_aer`` record of category
    ``gpu_lost_precursor`` (a fatal or non-fatal uncorrected AER on an NVIDIA function, or one
    the nvidia driver could not recover from), and every lost AER record
    (:func:`lost_aer_records`: an NVIDIA function's recovery line that no record took). One
    error, one row."""
    records = df[(df["kind"] == ev.PCIE_AER) & (df["category"] == GPU_LOST_PRECURSOR)]
    lost = df.loc[lost_aer_records(df)]
    return pd.concat([records, lost]).sort_values("time", kind="stable", na_position="last")


def lost_aer_records(df: pd.DataFrame) -> list:
    """Index labels of the frame's *lost AER records*: ``pcie_aer_recovery`` events of category
    ``gpu_lost_precursor`` (an NVIDIA function's ``can't recover (no error_detected callback)``
    or ``device recovery failed`` that joined no AER record: the parser gives a line that joined
    its record the outcome as category) with no ``pcie_aer`` record other than a corrected one
    (a corrected error starts no recovery) on their host within :data:`PRECURSOR_SAME_RECORD_S`
    (:func:`recoveries_without_record`). Each stands for the record the log lacks. The one
    selector of the precursor tables and of the fault frame
    (:func:`nodewarden.analysis.stats.fault_frame`)."""
    rec = df[(df["kind"] == ev.PCIE_AER_RECOVERY) & (df["category"] == GPU_LOST_PRECURSOR)]
    if not len(rec):
        return []
    records = df[(df["kind"] == ev.PCIE_AER) & (df["severity"] != "corrected")]
    return recoveries_without_record(rec, records)


def recoveries_without_record(recoveries: pd.DataFrame, records: pd.DataFrame,
                              window: float = PRECURSOR_SAME_RECORD_S) -> list:
    """Index labels of the rows of ``recoveries`` (``pcie_aer_recovery`` events) that no row of
    ``records`` (``pcie_aer`` events) of the same host is within ``window`` seconds of, either
    side (the kernel prints the recovery lines of a record within milliseconds of it; the window
    allows for stamps of whole seconds and clocks of different sources). An untimed recovery has
    a record when its host has an untimed record (dmesg -H without an anchor: no time to
    compare)."""
    w = pd.Timedelta(seconds=window)
    times = {h: g for h, g in records["time"].groupby(records["host"].fillna(""))} if len(records) else {}
    keep = []
    for i, host, t in zip(recoveries.index, recoveries["host"].fillna(""), recoveries["time"]):
        same = times.get(host, pd.Series([], dtype="datetime64[ns, UTC]"))
        if pd.isna(t):
            if not same.isna().any():
                keep.append(i)
        elif not ((same - t).abs() <= w).any():
            keep.append(i)
    return keep


def beyond_paper_monthly(df: pd.DataFrame) -> pd.DataFrame:
    """A Table VII-style monthly table of the kinds the paper does not count (kept apart: the
    paper's Table VII stays as printed). Per month (``YYYY-MM``, UTC): PCIe AER records by
    severity (``pcie_aer_fatal``, ``pcie_aer_non_fatal``, ``pcie_aer_corrected``), SXid errors by
    severity (``sxid_fatal``, ``sxid_non_fatal``; ``unknown`` ones are in
    :func:`sxid_by_switch` only), reset-required reports (:func:`reset_reports`), and GPU-lost
    precursors (:func:`gpu_lost_precursors`; these are also in the AER columns, so the row has
    no total). Months with none of these are left out; a Total row last (zeros when none).
    Events without a time are not placed in any month."""
    timed = df[df["time"].notna()]
    parts: dict[str, pd.Series] = {}
    aer = timed[timed["kind"] == ev.PCIE_AER]
    for sev in AER_SEVERITIES:
        a = aer[aer["severity"] == sev]
        parts[f"pcie_aer_{sev}"] = a.groupby(_month(a["time"])).size()
    sx = timed[timed["kind"] == ev.SXID]
    for sev in ("fatal", "non_fatal"):
        a = sx[sx["severity"] == sev]
        parts[f"sxid_{sev}"] = a.groupby(_month(a["time"])).size()
    rr = reset_reports(timed)
    parts["gpu_reset_required"] = rr.groupby(_month(rr["time"])).size()
    pre = gpu_lost_precursors(timed)
    parts[GPU_LOST_PRECURSOR] = pre.groupby(_month(pre["time"])).size()
    months = sorted(set().union(*(set(s.index) for s in parts.values())))
    table = pd.DataFrame({"month": months})
    for col, s in parts.items():
        table[col] = [int(s.get(m, 0)) for m in months]
    total = {"month": "Total", **{c: int(table[c].sum()) for c in BEYOND_PAPER_COLUMNS[1:]}}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    return table[list(BEYOND_PAPER_COLUMNS)].astype({c: int for c in BEYOND_PAPER_COLUMNS[1:]})


# ---- comparing with the paper's printed tables -----------------------------------------------

PAPER_FILES = {"table6": ("table6_xid_counts.csv", "xid", ("count",)),
               "table7": ("table7_memory_network_monthly.csv", "month", TABLE7_COLUMNS[1:]),
               "table8": ("table8_ib_flash_cuts_daily.csv", "date", ("failure_count",))}


# The paper's Tables VI, VII and VIII as CSV, shipped with the package (package data; their
# source and what was transcribed: SOURCE.md there). `analyze --paper-tables` with no DIR.
PAPER_DIR = Path(__file__).resolve().with_name("reference") / "fireflyer"


def default_paper_dir() -> Path | None:
    """The paper's tables shipped with nodewarden (:data:`PAPER_DIR`), or None when an
    installation lacks them."""
    return PAPER_DIR if PAPER_DIR.is_dir() else None


def read_paper_table(name: str, paper_dir: str | Path | None = None) -> pd.DataFrame | None:
    """The paper's printed table ``name`` (table6, table7, table8) as a DataFrame, or None when the
    reference CSV is not there."""
    d = Path(paper_dir) if paper_dir is not None else default_paper_dir()
    if d is None or name not in PAPER_FILES:
        return None
    f = d / PAPER_FILES[name][0]
    if not f.is_file():
        return None
    try:
        t = pd.read_csv(f, dtype=str, keep_default_na=False)
    except Exception as e:  # pandas' parser errors, an empty file
        raise ValueError(f"{f}: not a CSV table: {e}") from None
    missing = [c for c in (PAPER_FILES[name][1], *PAPER_FILES[name][2]) if c not in t.columns]
    if missing:
        raise ValueError(f"{f}: no column {', '.join(missing)}")
    return t


def compare_with_paper(table: pd.DataFrame, name: str, paper_dir: str | Path | None = None) -> pd.DataFrame | None:
    """Cells where ``table`` (ours: table6, table7 or table8) differs from the paper's printed one.

    Columns: ``key`` (xid, month or date; "Total" for total rows), ``column``, ``ours``,
    ``paper``. A row one table lacks counts as 0 there; for Tables VII and VIII only the paper's
    period (its first to last month/day) is compared, our total recomputed over it. None when the
    reference is absent."""
    ref = read_paper_table(name, paper_dir)
    if ref is None:
        return None
    _, key, cols = PAPER_FILES[name]

    def keyed(t: pd.DataFrame) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for _, r in t.iterrows():
            total = any(str(v).strip() == "Total" for v in r.values)
            k = "Total" if total else r.get(key)
            if k is None or (not isinstance(k, str) and pd.isna(k)) or str(k) == "":
                continue
            k = str(int(float(k))) if name == "table6" and k != "Total" else str(k)
            out[k] = {c: int(float(r[c])) if str(r.get(c, "")).strip() != "" else 0 for c in cols}
        return out

    ours, theirs = keyed(table), keyed(ref)
    if name in ("table7", "table8"):
        # The paper covers a period (months or days); rows of ours outside it are not differences,
        # and our total is recomputed over that period.
        span = sorted(k for k in theirs if k != "Total")
        if span:
            lo, hi = span[0], span[-1]
            ours = {k: v for k, v in ours.items() if k == "Total" or lo <= k <= hi}
            ours["Total"] = {c: sum(v[c] for k, v in ours.items() if k != "Total") for c in cols}
            if "Total" not in theirs:
                del ours["Total"]
    diffs = []
    for k in sorted(set(ours) | set(theirs), key=lambda v: (v == "Total", v.zfill(12))):
        for c in cols:
            a, b = ours.get(k, {}).get(c, 0), theirs.get(k, {}).get(c, 0)
            if a != b:
                diffs.append({"key": k, "column": c, "ours": a, "paper": b})
    return pd.DataFrame(diffs, columns=["key", "column", "ours", "paper"])


# The fleet and period the paper's tables count (SOURCE.md beside them; fleet_default.toml's
# [fleet]): 1,250 nodes (about 10,000 A100 GPUs) from Table VIII's first day to its last.
PAPER_NODES = 1250
PAPER_SPAN: Span = (dt.date(2023, 4, 19), dt.date(2024, 3, 31))


def _span_days(span: Span) -> int:
    return (span[1] - span[0]).days + 1


def cell_days(name: str, key: str, span: Span | None, period: tuple[str, str] | None = None) -> int:
    """Days of ``span`` (first, last day, inclusive; None: none) a cell of the paper's table
    ``name`` counts over: a Table VI count the whole span; a Table VII month its days in the
    span; a Table VIII date 1 or 0; the ``Total`` of Tables VII and VIII the days of the span in
    ``period`` (the paper's first and last month or date, over which :func:`compare_with_paper`
    recomputes our total)."""
    if span is None:
        return 0
    if name == "table6":
        return _span_days(span)
    if name == "table7":
        if key != "Total":
            return month_coverage(key, span)[0]
        if period is None:
            return _span_days(span)
        months = pd.period_range(period[0], period[1], freq="M").astype(str)
        return sum(month_coverage(m, span)[0] for m in months)
    if key != "Total":
        return int(span[0] <= dt.date.fromisoformat(key) <= span[1])
    if period is None:
        return _span_days(span)
    lo, hi = max(span[0], dt.date.fromisoformat(period[0])), min(span[1], dt.date.fromisoformat(period[1]))
    return max(0, (hi - lo).days + 1)


def paper_period(name: str, paper_dir: str | Path | None = None) -> tuple[str, str] | None:
    """The first and last key (month, date) of the paper's Table VII or VIII; None for Table VI
    or when the reference is absent."""
    ref = read_paper_table(name, paper_dir) if name in ("table7", "table8") else None
    if ref is None:
        return None
    keys = sorted(k for k in ref[PAPER_FILES[name][1]].astype(str) if k and k != "Total")
    return (keys[0], keys[-1]) if keys else None


def paper_scale_differs(nodes: int, span: Span | None) -> bool:
    """Whether a fleet of ``nodes`` observed over ``span`` differs from the paper's
    (:data:`PAPER_NODES` over :data:`PAPER_SPAN`): its counts then differ by size alone."""
    return nodes != PAPER_NODES or span != PAPER_SPAN


def with_rates(diff: pd.DataFrame, name: str, nodes: int, span: Span | None,
               period: tuple[str, str] | None = None) -> pd.DataFrame:
    """``diff`` (:func:`compare_with_paper`) with ``ours_per_node_day`` (our count / (``nodes`` x
    the days of ``span`` the cell covers, :func:`cell_days`)) and ``paper_per_node_day`` (the
    paper's count / (:data:`PAPER_NODES` x the days of :data:`PAPER_SPAN` it covers)); NaN where
    no day is covered."""
    out = diff.copy()

    def rate(counts, n: int, s: Span | None) -> list[float]:
        days = [cell_days(name, str(k), s, period) for k in out["key"]]
        return [c / (n * d) if n and d else float("nan") for c, d in zip(counts, days)]

    out["ours_per_node_day"] = rate(out["ours"], nodes, span)
    out["paper_per_node_day"] = rate(out["paper"], PAPER_NODES, PAPER_SPAN)
    return out


def paper_scale_note(nodes: int, span: Span | None) -> str:
    """One sentence naming the paper's fleet and this one (the note of the paper diffs)."""
    def fleet(n: int, s: Span | None) -> str:
        when = f"{s[0]} .. {s[1]} ({_span_days(s)} days)" if s is not None else "no timed event"
        return f"{n:,} nodes over {when}"
    return f"Compared with the paper's fleet, {fleet(PAPER_NODES, PAPER_SPAN)}; this one: {fleet(nodes, span)}."


# The paper diffs' note on their rate columns (:func:`with_rates`), when the fleets differ.
RATES_NOTE = ("Counts scale with nodes x days: ours_per_node_day and paper_per_node_day give each count per "
              "node-day of the days the cell covers (Table VI: the whole window, Table VII: the month's days "
              "observed, Table VIII: the day).")

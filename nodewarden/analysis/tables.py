"""Failure-statistics tables of the Fire-Flyer paper (arXiv 2408.14158, Appendix) from events.

Pure functions: a DataFrame of events in, a DataFrame table out. ``events_frame`` builds the
frame from FaultEvents (one row per event).

Tables (column names follow the CSVs of the paper's tables so that they compare cell by cell):

* Table V  ``table5_xid_groups``: group, xids, count, percentage, remedy.
* Table VI ``table6_xid_counts``: group, xid, description, count, percentage.
* Table VII ``table7_memory_network_monthly``: month, main_memory_cpu_ecc, network_flash_cut,
  xid_63, xid_64, xid_79, xid_94, xid_95, total (and a Total row).
* Table VIII ``table8_ib_flash_cuts_daily``: date, failure_count (days with cuts only).

IB flash cuts come from two kinds of evidence (``flash_cuts``): kernel-log ``ib_link_down``/
``ib_link_up`` pairs run through :class:`nodewarden.agent.flashcut.FlashCutDetector` per host,
and ``ib_flash_cut`` events of agent journals. A journal cut of the same host and port within
``skew`` seconds of a log-derived cut is the same cut and counts once.
"""

from __future__ import annotations

import datetime as dt

from pathlib import Path
from typing import Iterable

import pandas as pd

from nodewarden import catalog
from nodewarden import events as ev
from nodewarden.events import XID, FaultEvent

EVENT_COLUMNS = ("time", "host", "kind", "xid", "category", "device", "pci_bus_id", "source", "count")

GPU_MEMORY_XIDS = (63, 64, 79, 94, 95)  # Table VII's "GPU memory-related" Xids
TABLE7_COLUMNS = ("month", "main_memory_cpu_ecc", "network_flash_cut",
                  *(f"xid_{c}" for c in GPU_MEMORY_XIDS), "total")
TABLE8_COLUMNS = ("date", "failure_count")
FLASH_CUT_COLUMNS = ("time", "host", "device", "source", "duration_s")
LOG, JOURNAL = "log", "journal"


def events_frame(events: Iterable[FaultEvent]) -> pd.DataFrame:
    """One row per event: time (UTC, NaT when unknown), host, kind, xid (nullable Int64),
    category, device, pci_bus_id, source."""
    rows = [
        (_frame_time(e.time), e.host, e.kind, e.code if e.kind == XID else None, e.category, e.device, e.pci_bus_id,
         e.source, _count(e))
        for e in events
    ]
    return make_frame(rows)


# pandas' nanosecond timestamps span 1677-09-22 .. 2262-04-11: a time outside is a clock gone
# wrong; the event is kept, as one without a time.
_T_MIN = dt.datetime(1677, 9, 23, tzinfo=dt.timezone.utc)
_T_MAX = dt.datetime(2262, 4, 10, tzinfo=dt.timezone.utc)


def _frame_time(t: dt.datetime | None) -> dt.datetime | None:
    return t if t is not None and _T_MIN <= t <= _T_MAX else None


def make_frame(rows: Iterable[tuple]) -> pd.DataFrame:
    """A frame of :data:`EVENT_COLUMNS` from tuples (the last, ``count``, may be left out)."""
    rows = [tuple(r) + (None,) * (len(EVENT_COLUMNS) - len(r)) for r in rows]
    df = pd.DataFrame.from_records(rows, columns=list(EVENT_COLUMNS))
    df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
    df["xid"] = df["xid"].astype("Int64")
    df["count"] = df["count"].astype("Int64")
    for c in ("host", "kind", "category", "device", "pci_bus_id", "source"):
        df[c] = df[c].astype(object)
    return df


def _count(e: FaultEvent) -> int | None:
    """Errors one event stands for: EDAC's ``N CE`` count for cpu_ecc, else None (one)."""
    n = e.attrs.get("count") if e.kind == ev.CPU_ECC else None
    return int(n) if isinstance(n, (int, float)) and 1 <= n <= 1 << 31 else None


def table6_xid_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Table VI: per Xid its group, count and percentage of all Xid events, with a total row.

    Columns: ``group`` (the paper's label, e.g. "NVLink Error"), ``xid``, ``description``, ``count``,
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


def group_label(group: str, code: int) -> str:
    """The paper's Table VI label of a group. Its "other" row holds only GSP Xids (119), so other
    codes of that group are labelled "Other" rather than put under the GSP heading."""
    if group == "other" and code not in (119, 120):
        return "Other"
    return catalog.GROUP_LABELS.get(group, "Unknown")


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

    Columns: ``group`` (Table V label), ``xids`` (the codes the paper names, comma-separated),
    ``count`` (Xid events of the group, any code the catalog files there), ``percentage`` of all
    Xid events, ``remedy`` (catalog.GROUP_REMEDY). One row per group in the paper's order, an
    "Unknown" row only when codes outside the catalog occurred, and a Total row.
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

def flash_cuts(df: pd.DataFrame, max_seconds: float = 60.0, skew: float = 1.0) -> pd.DataFrame:
    """Every IB flash cut in the frame, one row each: ``time`` (the drop), ``host``, ``device``
    (``mlx5_0/1``), ``source`` (``log``: derived from an ib_link_down/ib_link_up pair of at most
    ``max_seconds``; ``journal``: an ``ib_flash_cut`` event), ``duration_s`` (None when unknown).

    Log pairs of each host go through a FlashCutDetector in time order; a longer drop is an
    outage and is not a cut. A journal cut of the same host and device whose time is within
    ``skew`` seconds of a log-derived cut is that cut, counted once."""
    from nodewarden.agent.flashcut import FlashCutDetector

    rows: list[tuple] = []
    links = df[df["kind"].isin([ev.IB_LINK_DOWN, ev.IB_LINK_UP]) & df["time"].notna()]
    links = links.sort_values("time", kind="stable")
    for host, g in links.groupby(links["host"].fillna(""), sort=True):
        det = FlashCutDetector(max_seconds=max_seconds, skew_seconds=skew)
        for r in g.itertuples(index=False):
            e = FaultEvent(kind=r.kind, message="", raw="", time=r.time.to_pydatetime(), host=r.host,
                           source=r.source or "file", device=r.device)
            for out in det.observe_event(e, now=r.time.timestamp()):
                if out.kind == ev.IB_FLASH_CUT:
                    rows.append((pd.Timestamp(out.time), r.host, out.device, LOG, out.attrs.get("duration_s")))
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


# ---- Tables VII and VIII ---------------------------------------------------------------------

def _month(t: pd.Series) -> pd.Series:
    return t.dt.strftime("%Y-%m")


def table7_memory_network_monthly(df: pd.DataFrame, cuts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table VII: per month (``YYYY-MM``, UTC) CPU memory ECC errors (``main_memory_cpu_ecc``: the
    sum of the cpu_ecc events' EDAC counts, one per event without a count), IB flash cuts
    (``network_flash_cut``, see :func:`flash_cuts`), GPU memory-related Xids 63, 64, 79, 94 and
    95 (``xid_63`` ...), and their ``total``; months with none of these are left out; a Total row
    last. Events without a time are not placed in any month."""
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
    months = sorted(set().union(*(set(s.index) for s in parts.values())))
    table = pd.DataFrame({"month": months})
    for col, s in parts.items():
        table[col] = [int(s.get(m, 0)) for m in months]
    cols = list(TABLE7_COLUMNS[1:-1])
    table["total"] = table[cols].sum(axis=1).astype(int) if months else pd.Series(dtype=int)
    total = {"month": "Total", **{c: int(table[c].sum()) for c in TABLE7_COLUMNS[1:]}}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    return table[list(TABLE7_COLUMNS)].astype({c: int for c in TABLE7_COLUMNS[1:]})


def table8_ib_flash_cuts_daily(cuts: pd.DataFrame) -> pd.DataFrame:
    """Table VIII: IB flash cuts per day (``date`` ``YYYY-MM-DD`` UTC, ``failure_count``), only
    days with cuts, in date order. Takes the frame of :func:`flash_cuts`."""
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


# ---- comparing with the paper's printed tables -----------------------------------------------

PAPER_FILES = {"table6": ("table6_xid_counts.csv", "xid", ("count",)),
               "table7": ("table7_memory_network_monthly.csv", "month", TABLE7_COLUMNS[1:]),
               "table8": ("table8_ib_flash_cuts_daily.csv", "date", ("failure_count",))}


def default_paper_dir() -> Path | None:
    """The repository's ``shared/reference/fireflyer`` when it is there (a source checkout)."""
    p = Path(__file__).resolve().parents[3] / "shared" / "reference" / "fireflyer"
    return p if p.is_dir() else None


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

"""Failure-statistics tables of the Fire-Flyer paper (arXiv 2408.14158, Appendix) from events.

Pure functions: a DataFrame of events in, a DataFrame table out. ``events_frame`` builds the
frame from FaultEvents (one row per event).
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from nodewarden import catalog
from nodewarden.events import XID, FaultEvent

EVENT_COLUMNS = ("time", "host", "kind", "xid", "category", "device", "pci_bus_id", "source")


def events_frame(events: Iterable[FaultEvent]) -> pd.DataFrame:
    """One row per event: time (UTC, NaT when unknown), host, kind, xid (nullable Int64),
    category, device, pci_bus_id, source."""
    rows = [
        (e.time, e.host, e.kind, e.code if e.kind == XID else None, e.category, e.device, e.pci_bus_id, e.source)
        for e in events
    ]
    df = pd.DataFrame.from_records(rows, columns=list(EVENT_COLUMNS))
    df["time"] = pd.to_datetime(df["time"], utc=True)
    df["xid"] = df["xid"].astype("Int64")
    return df


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

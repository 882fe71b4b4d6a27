"""Figures of the failure statistics as PNG files (matplotlib, Agg backend: no display needed).

* ``figure10_memory_network_monthly.png``: the paper's Figure 10, monthly memory and network
  failures, GPU against CPU: stacked bars per month of CPU memory ECC errors, IB flash cuts and
  GPU memory-related Xids (63, 64, 79, 94, 95), from Table VII.
* ``figure11_ib_flash_cuts_daily.png``: the paper's Figure 11, IB flash cuts per day, from
  Table VIII.
* ``xids_over_time.png``: Xid events per month (or week) stacked by Table V group.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from nodewarden import catalog  # noqa: E402
from nodewarden.analysis import tables  # noqa: E402

FIGURE10 = "figure10_memory_network_monthly.png"
FIGURE11 = "figure11_ib_flash_cuts_daily.png"
XIDS_OVER_TIME = "xids_over_time.png"


def _empty(ax, text: str = "no events") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _legend_outside(ax) -> None:
    """The legend right of the axes: inside, it would hide the bars of the first months."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig, path: Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


def figure10(t7: pd.DataFrame, path: str | Path) -> Path:
    """Stacked bars per month: CPU memory ECC, IB flash cuts, and the GPU memory Xids."""
    rows = t7[t7["month"] != "Total"]
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    if len(rows):
        series = [("main_memory_cpu_ecc", "CPU memory ECC"), ("network_flash_cut", "IB flash cut")]
        series += [(f"xid_{c}", f"GPU Xid {c}") for c in tables.GPU_MEMORY_XIDS]
        bottom = pd.Series(0, index=range(len(rows)), dtype=float)
        x = list(range(len(rows)))
        for col, label in series:
            vals = rows[col].astype(float).reset_index(drop=True)
            ax.bar(x, vals, bottom=bottom, label=label)
            bottom += vals
        ax.set_xticks(x, rows["month"].tolist(), rotation=45, ha="right")
        _legend_outside(ax)
    else:
        _empty(ax)
    ax.set_ylabel("failures")
    ax.set_title("Monthly memory and network failures (GPU vs CPU)")
    return _save(fig, path)


def figure11(t8: pd.DataFrame, path: str | Path) -> Path:
    """IB flash cuts per day over time (days without cuts are zero)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    if len(t8):
        days = pd.to_datetime(t8["date"])
        ax.bar(days, t8["failure_count"].astype(int), width=1.0, color="tab:red")
        fig.autofmt_xdate()
    else:
        _empty(ax, "no IB flash cuts")
    ax.set_ylabel("IB flash cuts per day")
    ax.set_title("IB link flash cuts per day")
    return _save(fig, path)


def xids_over_time(df: pd.DataFrame, path: str | Path, freq: str = "month") -> Path:
    """Xid events per ``month`` or ``week`` (UTC), stacked by Table V group."""
    x = df[(df["kind"] == "xid") & df["xid"].notna() & df["time"].notna()]
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    if len(x):
        t = x["time"].dt.tz_convert(None)
        period = t.dt.to_period("W" if freq == "week" else "M").astype(str)
        group = x["xid"].astype(int).map(catalog.group_of)
        counts = pd.crosstab(period, group)
        order = [g for g in (*catalog.GROUPS, catalog.UNKNOWN_GROUP) if g in counts.columns]
        counts = counts[order]
        bottom = pd.Series(0.0, index=counts.index)
        pos = list(range(len(counts)))
        for g in order:
            ax.bar(pos, counts[g].astype(float), bottom=bottom.values,
                   label=catalog.TABLE5_LABELS.get(g, "Unknown"))
            bottom += counts[g]
        ax.set_xticks(pos, counts.index.tolist(), rotation=45, ha="right")
        _legend_outside(ax)
    else:
        _empty(ax, "no Xids")
    ax.set_ylabel("Xid events")
    ax.set_title(f"Xid events per {'week' if freq == 'week' else 'month'} by group")
    return _save(fig, path)


def write_figures(df: pd.DataFrame, t7: pd.DataFrame, t8: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write the three PNGs into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [figure10(t7, out / FIGURE10), figure11(t8, out / FIGURE11), xids_over_time(df, out / XIDS_OVER_TIME)]

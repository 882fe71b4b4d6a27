"""Figures of the failure statistics as PNG files (matplotlib, Agg backend: no display needed).

* ``figure10_memory_network_monthly.png``: the paper's Figure 10, monthly memory and network
  failures, GPU against CPU: stacked bars per month of CPU memory ECC errors, IB flash cuts and
  GPU memory-related Xids (63, 64, 79, 94, 95), from Table VII.
* ``figure11_ib_flash_cuts_daily.png``: the paper's Figure 11, IB flash cuts per day, from
  Table VIII.
* ``xids_over_time.png``: Xid events per month (or week) stacked by Table V group.

Counts are whole numbers: the count axes tick at integers only. A series that is zero
throughout (a group with no Xids) is left out of the bars and the legend; with none left the
axes have no ticks and say what is absent ("no data: no IB flash cuts in the window"). A month
the data covers only in part (the first or last of the observed span) is labelled
``2023-04*``, with a footnote ``* partial month: 2023-04: 12 of 30 days``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import matplotlib.dates as mdates  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from nodewarden import catalog  # noqa: E402
from nodewarden.analysis import tables  # noqa: E402

FIGURE10 = "figure10_memory_network_monthly.png"
FIGURE11 = "figure11_ib_flash_cuts_daily.png"
XIDS_OVER_TIME = "xids_over_time.png"


# The figures of a window without their data: what is absent, in the middle of bare axes.
NO_FIGURE10_DATA = "no data: no CPU memory ECC errors, IB flash cuts or GPU memory Xids in the window"
NO_FIGURE11_DATA = "no data: no IB flash cuts in the window"
NO_XID_DATA = "no data: no Xids in the window"


def _empty(ax, text: str) -> None:
    """Bare axes saying ``text``: no ticks (matplotlib's default 0-1 scale would look like data)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)


Span = tables.Span
month_coverage = tables.month_coverage
observed_span = tables.observed_span


def month_labels(months: list[str], span: Span | None) -> tuple[list[str], str]:
    """Tick labels for ``months`` (``YYYY-MM``; other labels, such as weeks, pass unchanged) with
    ``*`` on those ``span`` covers only in part, and the footnote naming them (``""`` when none
    is partial or ``span`` is None)."""
    if span is None:
        return list(months), ""
    labels, notes = [], []
    for m in months:
        if len(m) != 7 or m[4] != "-":
            labels.append(m)
            continue
        covered, days = month_coverage(m, span)
        partial = covered < days
        labels.append(f"{m}*" if partial else m)
        if partial:
            notes.append(f"{m}: {covered} of {days} days")
    return labels, ("* partial month: " + "; ".join(notes)) if notes else ""


def _footnote(fig, text: str) -> None:
    if text:
        fig.text(0.01, 0.01, text, fontsize=8, ha="left", va="bottom")


def _integer_counts(ax) -> None:
    """Counts are whole: ticks at integers only on the count (y) axis."""
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_outside(ax) -> None:
    """The legend right of the axes: inside, it would hide the bars of the first months."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig, path: Path, footnote: str = "") -> Path:
    path = Path(path)
    fig.tight_layout(rect=(0, 0.05, 1, 1) if footnote else (0, 0, 1, 1))
    _footnote(fig, footnote)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


FIGURE10_SERIES = (("main_memory_cpu_ecc", "CPU memory ECC"), ("network_flash_cut", "IB flash cut"),
                   *((f"xid_{c}", f"GPU Xid {c}") for c in tables.GPU_MEMORY_XIDS))


def figure10_series(t7: pd.DataFrame) -> list[tuple[str, str]]:
    """``(column, legend label)`` of the Table VII series Figure 10 draws: those not zero
    throughout (an empty list when all are)."""
    rows = t7[t7["month"] != "Total"]
    return [(c, label) for c, label in FIGURE10_SERIES if (rows[c].astype(float) != 0).any()]


def figure10(t7: pd.DataFrame, path: str | Path, span: Span | None = None) -> Path:
    """Stacked bars per month: CPU memory ECC, IB flash cuts, and the GPU memory Xids; series
    that are zero throughout are not drawn. ``span`` (first, last day observed) marks partial
    months."""
    rows = t7[t7["month"] != "Total"]
    if span is not None and len(rows):  # every observed month, zero where Table VII has no row
        months = pd.period_range(span[0], span[1], freq="M").astype(str)
        rows = (rows.set_index("month").reindex(sorted(set(months) | set(rows["month"])), fill_value=0)
                .rename_axis("month").reset_index())
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    note = ""
    series = figure10_series(t7)
    if len(rows) and series:
        bottom = pd.Series(0, index=range(len(rows)), dtype=float)
        x = list(range(len(rows)))
        for col, label in series:
            vals = rows[col].astype(float).reset_index(drop=True)
            ax.bar(x, vals, bottom=bottom, label=label)
            bottom += vals
        labels, note = month_labels(rows["month"].tolist(), span)
        ax.set_xticks(x, labels, rotation=45, ha="right")
        _legend_outside(ax)
    else:
        _empty(ax, NO_FIGURE10_DATA)
    _integer_counts(ax)
    ax.set_ylabel("failures")
    ax.set_title("Monthly memory and network failures (GPU vs CPU)")
    return _save(fig, path, note)


def figure11(t8: pd.DataFrame, path: str | Path, span: Span | None = None) -> Path:
    """IB flash cuts per day over time (days without cuts are zero): one bar a day, one day wide,
    the x axis over ``span`` (first, last day observed) when given, else over the days with cuts;
    dates ticked as days, never hours."""
    fig, ax = plt.subplots(figsize=(9, 4))
    if len(t8):
        days = pd.to_datetime(t8["date"])
        lo, hi = (pd.Timestamp(span[0]), pd.Timestamp(span[1])) if span else (days.min(), days.max())
        lo, hi = min(lo, days.min()), max(hi, days.max())
        ax.set_xlim(lo, hi + pd.Timedelta(days=1))
        # a span of a few days: every day (the automatic locator would tick hours); longer: automatic
        ax.xaxis.set_major_locator(mdates.DayLocator() if (hi - lo).days < 8
                                   else mdates.AutoDateLocator(minticks=3, maxticks=10))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
        # one day wide, edged, so that neighbouring days' bars stay apart
        ax.bar(days, t8["failure_count"].astype(int), width=1.0, align="edge", color="tab:red",
               edgecolor="black", linewidth=0.6)
        fig.autofmt_xdate()
    else:
        _empty(ax, NO_FIGURE11_DATA)
    _integer_counts(ax)
    ax.set_ylabel("IB flash cuts per day")
    ax.set_title("IB link flash cuts per day")
    return _save(fig, path)


def xids_over_time(df: pd.DataFrame, path: str | Path, freq: str = "month", span: Span | None = None) -> Path:
    """Xid events per ``month`` or ``week`` (UTC), stacked by group (:func:`tables.group_label`);
    groups without Xids are not drawn. ``span`` (first, last day observed) marks partial months."""
    x = df[(df["kind"] == "xid") & df["xid"].notna() & df["time"].notna()]
    fig, ax = plt.subplots(figsize=(9.5, 4.5))
    note = ""
    if len(x):
        t = x["time"].dt.tz_convert(None)
        period = t.dt.to_period("W" if freq == "week" else "M").astype(str)
        group = x["xid"].astype(int).map(catalog.group_of)
        counts = pd.crosstab(period, group)
        order = [g for g in (*catalog.GROUPS, catalog.UNKNOWN_GROUP) if g in counts.columns and counts[g].any()]
        counts = counts[order]
        bottom = pd.Series(0.0, index=counts.index)
        pos = list(range(len(counts)))
        for g in order:
            ax.bar(pos, counts[g].astype(float), bottom=bottom.values,
                   label=tables.group_label(g))
            bottom += counts[g]
        labels, note = month_labels(counts.index.tolist(), span if freq != "week" else None)
        ax.set_xticks(pos, labels, rotation=45, ha="right")
        _legend_outside(ax)
    else:
        _empty(ax, NO_XID_DATA)
    _integer_counts(ax)
    ax.set_ylabel("Xid events")
    ax.set_title(f"Xid events per {'week' if freq == 'week' else 'month'} by group")
    return _save(fig, path, note)


def write_figures(df: pd.DataFrame, t7: pd.DataFrame, t8: pd.DataFrame, out_dir: str | Path,
                  span: Span | None = None) -> list[Path]:
    """Write the three PNGs into ``out_dir``; returns their paths. ``span``: the days observed
    (:func:`observed_span`), to mark partial months; None marks none."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [figure10(t7, out / FIGURE10, span), figure11(t8, out / FIGURE11, span),
            xids_over_time(df, out / XIDS_OVER_TIME, span=span)]

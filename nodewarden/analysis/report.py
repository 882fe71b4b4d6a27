"""``nodewarden analyze``: print the tables, write them as Markdown and CSV, draw the figures,
and write ``report.md`` and a self-contained ``report.html``.

Files written into the output directory (each table as ``NAME.md`` and ``NAME.csv``):
``table5_xid_groups``, ``table6_xid_counts``, ``table7_memory_network_monthly``,
``table8_ib_flash_cuts_daily``, ``repeat_offenders_nodes``, ``repeat_offenders_gpus``,
``repeat_offenders_ib_ports``, ``mtbf_fleet``, ``mtbf_per_node``, ``co_occurrence``,
``events_by_kind``, ``ib_flash_cuts`` (every cut), the tables beyond the paper
(``beyond_paper_monthly``, ``pcie_aer_by_severity``, ``pcie_aer_by_device``, ``sxid_by_switch``,
``gpu_reset_required``, ``ib_link_outages``; see :mod:`nodewarden.analysis.tables`; written, as
"(none)", when the fleet has none of a kind), ``discrepancies``; with ``--paper-tables``
also ``paper_diff_table6``/``7``/``8`` (cells that differ from the paper's printed tables); the
PNG figures of :mod:`nodewarden.analysis.figures`; ``report.md``; ``report.html``.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, TextIO

import pandas as pd

from nodewarden import exitcodes
from nodewarden.analysis import stats as fstats
from nodewarden.analysis import tables
from nodewarden.analysis.ingest import IngestStats
from nodewarden.events import FaultEvent


@dataclass
class Table:
    name: str           # file stem
    title: str
    data: pd.DataFrame  # as written to CSV
    shown: pd.DataFrame  # as printed / written to Markdown and HTML
    printed: bool = True
    note: str = ""


def _fmt_floats(t: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    out = t.copy()
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].map(lambda v: "" if pd.isna(v) else f"{v:.{digits}f}")
    return out


# Columns of percentages (0-100) whose names do not say so, and the names the report gives them
# in every form it writes (CSV, Markdown, HTML, the terminal).
PERCENT_COLUMNS = {"share": "share (%)", "cumulative_share": "cumulative_share (%)"}


def label_percent_columns(t: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``t`` with :data:`PERCENT_COLUMNS` renamed to say they hold percentages."""
    return t.rename(columns=PERCENT_COLUMNS)


def _markdown(t: pd.DataFrame) -> str:
    return t.to_markdown(index=False) if len(t) else "(none)"


def journal_log_discrepancies(df: pd.DataFrame, cuts: pd.DataFrame) -> list[dict]:
    """Months where the flash cuts derived from kernel-log down/up pairs and the agent journals'
    ``ib_flash_cut`` events (before merging) both have data and disagree."""
    log = cuts[cuts["source"] == tables.LOG]
    jr = df[(df["kind"] == "ib_flash_cut") & df["time"].notna()]
    a = log.groupby(log["time"].dt.strftime("%Y-%m")).size() if len(log) else pd.Series(dtype=int)
    b = jr.groupby(jr["time"].dt.strftime("%Y-%m")).size() if len(jr) else pd.Series(dtype=int)
    out = []
    for m in sorted(set(a.index) & set(b.index)):
        if int(a[m]) != int(b[m]):
            out.append({"month": m, "table7": int(a[m]), "table8_sum": int(b[m]),
                        "message": f"{m}: kernel logs give {int(a[m])} IB flash cuts, agent journals record "
                                   f"{int(b[m])} (counted once where they match within 1 s)"})
    return out


def _within(t: pd.Series, lo: pd.Timestamp | None, hi: pd.Timestamp | None) -> pd.Series:
    keep = pd.Series(True, index=t.index)
    if lo is not None:
        keep &= t >= lo
    if hi is not None:
        keep &= t < hi
    return keep


def build(df: pd.DataFrame, since: dt.datetime | None = None, until: dt.datetime | None = None,
          paper_dir: str | Path | None = None, nodes: int | None = None, window: float = 60.0,
          top: int = 10, hosts: Iterable[str] = ()) -> tuple[list[Table], list[str]]:
    """All tables of the report and the discrepancy messages. Flash cuts are derived from all of
    ``df``, then, like every other event, kept when they begin in [``since``, ``until``).
    ``hosts``: the hosts whose logs were read (``IngestStats.hosts()``), nodes of the fleet even
    when they logged no event."""
    cuts = tables.flash_cuts(df)
    df_all = df
    lo = hi = None
    if since is not None or until is not None:
        lo = pd.Timestamp(since) if since is not None else None
        hi = pd.Timestamp(until) if until is not None else None
        df = df[df["time"].isna() | _within(df["time"], lo, hi)]
        cuts = cuts[_within(cuts["time"], lo, hi)]
    t5 = tables.table5_xid_groups(df)
    t6 = tables.table6_xid_counts(df)
    span = tables.observed_span(df, since, until)
    t7 = tables.table7_memory_network_monthly(df, cuts, span)
    t8 = tables.table8_ib_flash_cuts_daily(cuts)
    rep = {k: label_percent_columns(v) for k, v in fstats.repeat_offenders(df, cuts, top=top).items()}
    fleet = fstats.mtbf(df, cuts, since=since, until=until, nodes=nodes, hosts=hosts)
    per_node = fstats.mtbf_per_node(df, cuts, since=since, until=until, hosts=hosts)
    co = fstats.co_occurrence(df, cuts, window=window)
    kinds = tables.kind_counts(df)
    outages = tables.ib_link_outages(df_all)
    if since is not None or until is not None:
        outages = outages[_within(outages["down"], lo, hi)].reset_index(drop=True)
    beyond = tables.beyond_paper_monthly(df)
    aer_sev = tables.pcie_aer_by_severity(df)
    aer_dev = tables.pcie_aer_by_device(df)
    sxid = tables.sxid_by_switch(df)
    resets = tables.gpu_reset_required(df)

    t5_shown = t5.copy()
    t5_shown["percentage"] = t5_shown["percentage"].map(lambda v: f"{v:.2f}%")
    out = [
        Table("table5_xid_groups", "Table V - Xid groups, counts and remedies", t5, t5_shown,
              note=tables.group_label_note()),
        Table("table6_xid_counts", "Table VI - Xid errors by group", t6, tables.format_percent(t6),
              note=tables.group_label_note()),
        Table("table7_memory_network_monthly",
              "Table VII - monthly CPU memory ECC errors, IB flash cuts and GPU memory-related Xids", t7, t7,
              note="Every month of the observation window, months without these faults included; partial: the "
                   "days of a month the window covers, when it covers only some (first and last month)."),
        Table("table8_ib_flash_cuts_daily", "Table VIII - IB flash cuts per day (days with a flash cut)", t8, t8,
              note="Only the days with a flash cut are listed, as in the paper: every other day of the window "
                   "had none."),
        Table("repeat_offenders_nodes", "Repeat offenders - nodes by hardware faults", rep["nodes"],
              _fmt_floats(rep["nodes"])),
        Table("repeat_offenders_gpus", "Repeat offenders - GPUs by hardware Xids", rep["gpus"],
              _fmt_floats(rep["gpus"])),
        Table("repeat_offenders_ib_ports", "Repeat offenders - IB ports by flash cuts", rep["ib_ports"],
              _fmt_floats(rep["ib_ports"])),
        Table("mtbf_fleet", "MTBF per category (fleet)", fleet, _fmt_floats(fleet),
              note="MTBF = observation window x nodes / failures (hours); window = first..last event, or "
                   "--since/--until; nodes = hosts whose logs were read, those that logged no event "
                   "included, unless --nodes is given."),
        Table("mtbf_per_node", "MTBF per node (hardware faults)", per_node, _fmt_floats(per_node), printed=False,
              note="Per node MTBF = observation window / the node's hardware faults (hours)."),
        Table("co_occurrence", f"Faults that come together (same host, within {window:g} s)", co, co,
              note=f"Each fault counts every other fault label seen on its host within {window:g} s after it, "
                   "once per label; faults of the same time in the order the log printed them. PCIe AER records "
                   "are labelled by severity (pcie_aer:fatal...); their recovery lines are no faults of their own, "
                   "but for an NVIDIA function's with no AER record within 5 s (pcie_aer_recovery:"
                   "gpu_lost_precursor)."),
        Table("events_by_kind", "Events by kind", kinds, kinds, note=UNPARSED_KIND_NOTE),
        Table("ib_flash_cuts", "IB flash cuts (every cut)", cuts, _fmt_floats(cuts, 3), printed=False),
        Table("ib_link_outages", "IB link outages (down longer than the 60 s flash-cut limit)", outages,
              _fmt_floats(outages, 3), printed=False,
              note="An empty up and duration: the port was still down when the logs end."),
        Table("beyond_paper_monthly",
              "Beyond the paper - monthly PCIe AER records, NVSwitch SXids, reset-required GPUs and GPU-lost "
              "precursors", beyond, beyond,
              note=tables.WHERE_THE_NEW_KINDS_GO + " In this table: gpu_lost_precursor: uncorrected AER records "
                   "on an NVIDIA function (or one the nvidia driver could not recover from), and NVIDIA functions "
                   "the AER driver could not recover with no uncorrected AER record beside them; the records are "
                   "also in the pcie_aer columns. gpu_reset_required: NVRM NV_ERR_RESET_REQUIRED "
                   "assertions, NVML reset-required reports and Xid 154 changes to an action other than none "
                   "(see gpu_reset_required)."),
        Table("pcie_aer_by_severity", "PCIe AER records by severity", aer_sev, aer_sev),
        Table("pcie_aer_by_device", "PCIe AER records by device", aer_dev, aer_dev, printed=False,
              note="first_errors: the error bits marked (First), with how many records named each; errors: every "
                   "error bit the records list, with how many records listed it; affected_devices: the functions "
                   "that could not recover (printed \"can't recover\"), such as the GPU a fatal error took off "
                   "the bus."),
        Table("sxid_by_switch", "NVSwitch SXid errors by switch and code", sxid, sxid),
        Table("gpu_reset_required", "GPUs the driver says must be reset (or the node rebooted)", resets, resets,
              note="source: assertion (the NVRM NV_ERR_RESET_REQUIRED line), xid154 (an Xid 154 whose new action "
                   "is not none), nvml (NVML's recovery action). An empty pci_bus_id: the driver's assertion names "
                   "no GPU. events_by_kind counts only the gpu_reset_required kind (assertions and NVML); Xid 154s "
                   "are xid events there, and a report seen both in the log and by NVML within 60 s counts once "
                   "here: the counts differ by design."),
    ]
    disc = tables.flash_cut_discrepancies(t7, t8) + journal_log_discrepancies(df, cuts)
    if paper_dir is not None:
        n = int(fleet["nodes"].iloc[0])
        scaled = tables.paper_scale_differs(n, span)
        scale_note = tables.paper_scale_note(n, span)
        if scaled:
            disc.append({"message": f"{scale_note} Counts differ with the size: the paper_diff tables give "
                                    "per-node-day rates beside them."})
            scale_note += " " + tables.RATES_NOTE
        for name, ours in (("table6", t6), ("table7", t7), ("table8", t8)):
            diff = tables.compare_with_paper(ours, name, paper_dir)
            if diff is None:
                disc.append({"message": f"paper {name}: reference CSV not found in {paper_dir}"})
                continue
            if scaled:
                diff = tables.with_rates(diff, name, n, span, tables.paper_period(name, paper_dir))
            shown = diff.copy()
            for c in ("ours_per_node_day", "paper_per_node_day"):
                if c in shown:
                    shown[c] = shown[c].map(lambda v: "" if pd.isna(v) else f"{v:.3g}")
            out.append(Table(f"paper_diff_{name}", f"Cells that differ from the paper's {name}", diff, shown,
                             printed=False, note=scale_note))
            if len(diff):
                disc.append({"message": f"{name}: {len(diff)} cells differ from the paper's printed table "
                                        f"(paper_diff_{name}.csv)"})
        p7, p8 = tables.read_paper_table("table7", paper_dir), tables.read_paper_table("table8", paper_dir)
        if p7 is not None and p8 is not None:
            p7 = p7.astype({c: int for c in tables.TABLE7_COLUMNS[1:]})
            p8 = p8.astype({"failure_count": int})
            disc += tables.flash_cut_discrepancies(p7, p8, "the paper's Table VII", "the paper's Table VIII")
    messages = [d["message"] for d in disc]
    out.append(Table("discrepancies", "Discrepancies", pd.DataFrame({"discrepancy": messages}),
                     pd.DataFrame({"discrepancy": messages}), printed=False))
    return out, messages


UNPARSED_KIND_NOTE = ("unparsed: kernel-log lines that looked like a fault but no parser understood, kept as events "
                      "(after de-duplication and --since/--until). The Data section's \"unparsed lines read\" "
                      "counts them in every input read, with the agent-journal lines that are no event.")


def unparsed_summary(read: int, kept: int) -> str:
    """The Data line on unparsed lines: ``read`` = ``IngestStats.unparsed`` (every input: kernel-log
    lines no parser understood, agent-journal lines that are no event), ``kept`` = events of kind
    ``unparsed`` in the frame (the ``unparsed`` row of Events by kind)."""
    return (f"unparsed lines read: {read} (fault-like log lines no parser understood, and agent-journal lines "
            f"that are no event); kept as events of kind unparsed (Events by kind): {kept}")


def left_out_summary(left_out: list[str], shown: int = 3) -> str:
    """The Data line's part on nodewarden's own outputs found among the inputs and not read
    (``IngestStats.left_out``, one line each saying why): ``""`` when none, else the first
    ``shown`` of them and how many more."""
    if not left_out:
        return ""
    more = f"; and {len(left_out) - shown} more" if len(left_out) > shown else ""
    return f" (left out, nodewarden's own outputs: {'; '.join(left_out[:shown])}{more})"


def hosts_summary(df: pd.DataFrame, hosts: Iterable[str]) -> str:
    """The Data line on hosts: the fleet's nodes (:func:`fstats.fleet_hosts`) and how many of
    them logged no event."""
    every = fstats.fleet_hosts(df, hosts)
    quiet = len(set(every) - set(df["host"].dropna()))
    return f"hosts: {len(every)}" + (f" ({quiet} logged no event)" if quiet else "")


def _summary(stats: IngestStats, df: pd.DataFrame, kinds: pd.DataFrame) -> list[str]:
    """The Data lines; ``kinds`` is the Events by kind table, whose ``unparsed`` row the unparsed
    line names."""
    t = df["time"].dropna()
    span = f"{t.min().isoformat()} .. {t.max().isoformat()}" if len(t) else "none"
    kept = int(kinds.loc[kinds["kind"] == "unparsed", "count"].sum())
    return [f"inputs read: {stats.files}{left_out_summary(stats.left_out)}", f"events: {stats.events}",
            unparsed_summary(stats.unparsed, kept),
            f"copies counted once: {stats.copies_dropped}",
            f"agent-journal records seen before (host, boot id, seq): {stats.journal_duplicates}",
            f"lines user space wrote into the kernel log (not faults): {stats.injected}",
            f"unreadable inputs: {len(stats.errors)}",
            hosts_summary(df, stats.hosts()), f"events without a time: {int(df['time'].isna().sum())}",
            f"time span: {span}"]


def run(events: Iterable[FaultEvent] | pd.DataFrame, stats: IngestStats, out_dir: str | None = None,
        stream: TextIO | None = None, since: dt.datetime | None = None, until: dt.datetime | None = None,
        paper_dir: str | Path | None = None, nodes: int | None = None, window: float = 60.0) -> int:
    """Build the tables from ``events``, print them to ``stream`` (stdout), write tables, figures
    and reports into ``out_dir`` when given. ``events`` may also be an event frame already
    (:func:`tables.events_frame`). Returns 3 when an input could not be read, else 0."""
    stream = stream or sys.stdout
    df = events if isinstance(events, pd.DataFrame) else tables.events_frame(events)
    report_tables, messages = build(df, since=since, until=until, paper_dir=paper_dir, nodes=nodes, window=window,
                                    hosts=stats.hosts())
    for t in report_tables:
        if not t.printed:
            continue
        shown = t.shown.drop(columns=["remedy"]) if t.name == "table5_xid_groups" else t.shown
        print(t.title, file=stream)
        print(shown.to_string(index=False) if len(shown) else "(none)", file=stream)
        print("", file=stream)
    print("Discrepancies", file=stream)
    print("\n".join(f"- {m}" for m in messages) if messages else "(none)", file=stream)
    print("", file=stream)
    summary = _summary(stats, df, next(t.data for t in report_tables if t.name == "events_by_kind"))
    print("; ".join(summary[:5]), file=stream)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for t in report_tables:
            t.data.to_csv(out / f"{t.name}.csv", index=False)
            (out / f"{t.name}.md").write_text(f"# {t.title.replace(' - ', ': ', 1)}\n\n{_markdown(t.shown)}\n"
                                              + (f"\n{t.note}\n" if t.note else ""))
        from nodewarden.analysis import figures
        t7 = next(t.data for t in report_tables if t.name == "table7_memory_network_monthly")
        t8 = next(t.data for t in report_tables if t.name == "table8_ib_flash_cuts_daily")
        pngs = figures.write_figures(df, t7, t8, out, tables.observed_span(df, since, until))
        _write_markdown(out / "report.md", report_tables, messages, summary, pngs)
        _write_html(out / "report.html", report_tables, messages, summary, pngs)
        print(f"wrote {len(report_tables)} tables (.md, .csv), {len(pngs)} figures, "
              f"{out / 'report.md'} and {out / 'report.html'} in {out}", file=stream)
    return exitcodes.INCOMPLETE if stats.errors else exitcodes.OK


FIGURE_TITLES = {
    "figure10_memory_network_monthly.png": "Figure 10 - monthly memory and network failures (GPU vs CPU)",
    "figure11_ib_flash_cuts_daily.png": "Figure 11 - IB flash cuts per day",
    "xids_over_time.png": "Xid events over time by group",
}


def _write_markdown(path: Path, report_tables: list[Table], messages: list[str], summary: list[str],
                    pngs: list[Path]) -> None:
    parts = ["# Failure statistics", "", "## Data", "", *[f"- {s}" for s in summary], "",
             "## Discrepancies", "", *([f"- {m}" for m in messages] or ["(none)"]), "", "## Figures", ""]
    parts += [f"![{FIGURE_TITLES.get(p.name, p.name)}]({p.name})" for p in pngs]
    for t in report_tables:
        if t.name in ("discrepancies",):
            continue
        parts += ["", f"## {t.title}", "", f"Files: [{t.name}.csv]({t.name}.csv), [{t.name}.md]({t.name}.md)", ""]
        if t.name == "ib_flash_cuts":
            parts += [f"{len(t.data)} cuts (see the CSV)."]
            continue
        parts += [_markdown(t.shown)]
        if t.note:
            parts += ["", t.note]
    path.write_text("\n".join(parts) + "\n")


CSS = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}"
       "th,td{border:1px solid #bbb;padding:2px 8px;text-align:left;font-size:90%}th{background:#eee}"
       "img{max-width:100%}")


def _write_html(path: Path, report_tables: list[Table], messages: list[str], summary: list[str],
                pngs: list[Path]) -> None:
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\"><title>Failure statistics</title>",
             f"<style>{CSS}</style></head><body>", "<h1>Failure statistics</h1>", "<h2>Data</h2><ul>",
             *[f"<li>{e(s)}</li>" for s in summary], "</ul>", "<h2>Discrepancies</h2>"]
    parts += ["<ul>" + "".join(f"<li>{e(m)}</li>" for m in messages) + "</ul>"] if messages else ["<p>(none)</p>"]
    parts += ["<h2>Figures</h2>"]
    for p in pngs:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        title = e(FIGURE_TITLES.get(p.name, p.name))
        parts += [f"<figure><img alt=\"{title}\" src=\"data:image/png;base64,{data}\"><figcaption>{title}"
                  "</figcaption></figure>"]
    for t in report_tables:
        if t.name == "discrepancies":
            continue
        parts += [f"<h2 id=\"{e(t.name)}\">{e(t.title)}</h2>",
                  f"<p class=\"files\">Files: <a href=\"{e(t.name)}.csv\">{e(t.name)}.csv</a>, "
                  f"<a href=\"{e(t.name)}.md\">{e(t.name)}.md</a></p>"]
        if t.name == "ib_flash_cuts":
            parts += [f"<p>{len(t.data)} cuts (see the CSV).</p>"]
            continue
        parts += [t.shown.to_html(index=False, border=0, na_rep="") if len(t.shown) else "<p>(none)</p>"]
        if t.note:
            parts += [f"<p>{e(t.note)}</p>"]
    parts += ["</body></html>"]
    path.write_text("\n".join(parts) + "\n")

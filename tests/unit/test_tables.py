"""Tables V, VII, VIII, flash cuts, repeat offenders, MTBF, co-occurrence, figures and the report,
from hand-built event frames whose expected values are worked out by hand below."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from nodewarden.analysis import figures, report, stats, tables
from nodewarden.analysis.ingest import IngestStats
from nodewarden.cli import main

PAPER_DIR = Path(__file__).resolve().parents[2] / "nodewarden" / "analysis" / "reference" / "fireflyer"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def frame(*rows: tuple) -> pd.DataFrame:
    """rows: (time, host, kind, xid, device, pci_bus_id, source[, count])."""
    out = []
    for r in rows:
        t, host, kind, xid, device, bus, source, *count = r
        out.append((t, host, kind, xid, None, device, bus, source, count[0] if count else None))
    return tables.make_frame(out)


def xid(t: str, host: str, code: int, bus: str = "0000:07:00.0") -> tuple:
    return (t, host, "xid", code, None, bus, "file")


def link(t: str, host: str, up: bool, dev: str = "mlx5_0/1") -> tuple:
    return (t, host, "ib_link_up" if up else "ib_link_down", None, dev, None, "file")


def ecc(t: str, host: str, n: int | None = None) -> tuple:
    return (t, host, "cpu_ecc", None, "mc0/DIMM0", None, "file", n)


def journal_cut(t: str, host: str, dev: str = "mlx5_0/1") -> tuple:
    return (t, host, "ib_flash_cut", None, dev, None, "journal")


# Two months, two hosts:
#   2023-10: n1 cpu_ecc x3 (one line "3 CE") + 1 (no count) = 4 errors; n1 mlx5_0/1 drops for 5 s
#            on 10-01 (cut) and for 2 min on 10-02 (outage, not a cut); n2 mlx5_1/1 5 s drop on
#            10-02 (cut); Xid 63 twice, 79 once; Xid 43 (software, not in Table VII).
#   2023-11: n2 journal cut on 11-03; Xid 94 once, 95 once, 64 once; n1 cpu_ecc count 2.
FLEET = frame(
    ecc("2023-10-01T08:00:00Z", "n1", 3),
    ecc("2023-10-20T08:00:00Z", "n1"),
    link("2023-10-01T00:00:00Z", "n1", False), link("2023-10-01T00:00:05Z", "n1", True),
    link("2023-10-02T00:00:00Z", "n1", False), link("2023-10-02T00:02:00Z", "n1", True),
    link("2023-10-02T10:00:00Z", "n2", False, "mlx5_1/1"), link("2023-10-02T10:00:05Z", "n2", True, "mlx5_1/1"),
    xid("2023-10-05T00:00:00Z", "n1", 63), xid("2023-10-06T00:00:00Z", "n1", 63),
    xid("2023-10-07T00:00:00Z", "n2", 79, "0000:0a:00.0"), xid("2023-10-08T00:00:00Z", "n2", 43, "0000:0a:00.0"),
    journal_cut("2023-11-03T00:00:00Z", "n2", "mlx5_1/1"),
    xid("2023-11-04T00:00:00Z", "n1", 94), xid("2023-11-05T00:00:00Z", "n1", 95),
    xid("2023-11-06T00:00:00Z", "n1", 64), ecc("2023-11-07T00:00:00Z", "n1", 2),
)


def test_flash_cuts_from_log_pairs_and_journal() -> None:
    cuts = tables.flash_cuts(FLEET)
    assert list(cuts["host"]) == ["n1", "n2", "n2"]
    assert list(cuts["source"]) == ["log", "log", "journal"]
    assert list(cuts["device"]) == ["mlx5_0/1", "mlx5_1/1", "mlx5_1/1"]
    assert cuts["duration_s"].iloc[0] == 5.0
    # the 2-minute drop on 2023-10-02 is an outage, not a cut
    assert not (cuts["time"].dt.strftime("%Y-%m-%d %H") == "2023-10-02 00").any()


def test_journal_copy_of_a_log_cut_counts_once() -> None:
    df = frame(link("2024-01-01T00:00:00Z", "a", False), link("2024-01-01T00:00:03Z", "a", True),
               journal_cut("2024-01-01T00:00:00.400Z", "a"),  # the same cut, recorded by the agent
               journal_cut("2024-01-01T05:00:00Z", "a"))      # one the log does not show
    cuts = tables.flash_cuts(df)
    assert list(cuts["source"]) == ["log", "journal"]


def test_table7_monthly_values() -> None:
    t7 = tables.table7_memory_network_monthly(FLEET)
    assert list(t7.columns) == list(tables.TABLE7_COLUMNS)
    rows = {r["month"]: r for r in t7.to_dict("records")}
    assert list(t7["month"]) == ["2023-10", "2023-11", "Total"]
    assert rows["2023-10"] == {"month": "2023-10", "main_memory_cpu_ecc": 4, "network_flash_cut": 2, "xid_63": 2,
                               "xid_64": 0, "xid_79": 1, "xid_94": 0, "xid_95": 0, "total": 9}
    assert rows["2023-11"] == {"month": "2023-11", "main_memory_cpu_ecc": 2, "network_flash_cut": 1, "xid_63": 0,
                               "xid_64": 1, "xid_79": 0, "xid_94": 1, "xid_95": 1, "total": 6}
    assert rows["Total"] == {"month": "Total", "main_memory_cpu_ecc": 6, "network_flash_cut": 3, "xid_63": 2,
                             "xid_64": 1, "xid_79": 1, "xid_94": 1, "xid_95": 1, "total": 15}


def test_table8_daily_values_and_agreement() -> None:
    cuts = tables.flash_cuts(FLEET)
    t8 = tables.table8_ib_flash_cuts_daily(cuts)
    assert t8.to_dict("list") == {"date": ["2023-10-01", "2023-10-02", "2023-11-03"], "failure_count": [1, 1, 1]}
    t7 = tables.table7_memory_network_monthly(FLEET, cuts)
    assert tables.flash_cut_discrepancies(t7, t8) == []  # one source: they agree


def test_discrepancy_detection() -> None:
    t7 = pd.DataFrame({"month": ["2023-10", "2023-11", "Total"], "network_flash_cut": [29, 8, 37]})
    t8 = pd.DataFrame({"date": ["2023-10-02", "2023-10-20", "2023-11-05"], "failure_count": [10, 3, 8]})
    d = tables.flash_cut_discrepancies(t7, t8)
    assert [(x["month"], x["table7"], x["table8_sum"]) for x in d] == [("2023-10", 29, 13)]
    assert "29" in d[0]["message"] and "13" in d[0]["message"]


def test_journal_vs_log_mix_is_reported() -> None:
    df = frame(link("2024-01-01T00:00:00Z", "a", False), link("2024-01-01T00:00:03Z", "a", True),
               link("2024-01-02T00:00:00Z", "a", False), link("2024-01-02T00:00:03Z", "a", True),
               journal_cut("2024-01-01T00:00:00Z", "a"))
    cuts = tables.flash_cuts(df)
    assert len(cuts) == 2
    d = report.journal_log_discrepancies(df, cuts)
    assert [(x["month"], x["table7"], x["table8_sum"]) for x in d] == [("2024-01", 2, 1)]


def test_table5_groups_counts_and_remedies() -> None:
    t5 = tables.table5_xid_groups(FLEET)
    assert list(t5.columns) == ["group", "xids", "count", "percentage", "remedy"]
    got = dict(zip(t5["group"], t5["count"]))
    # Xids: 63, 63, 94, 95, 64 (memory ECC: 5), 79 (uncorrectable: 1), 43 (software: 1)
    assert got == {"Software Causes": 1, "NVLink Error": 0, "Memory ECC Error": 5,
                   "Uncorrectable GPU Failures": 1, "Other Failures": 0, "Total": 7}
    row = t5[t5["group"] == "Memory ECC Error"].iloc[0]
    assert row["xids"] == "63, 64, 94, 95"
    assert row["percentage"] == pytest.approx(500 / 7)
    assert "remap" in row["remedy"]


def test_table5_xids_name_every_code_counted() -> None:
    """A row's xids list the codes its count holds: the paper's first, then the others seen (Xid
    154, which the catalog files under Other Failures; Xid 145 under NVLink Error)."""
    df = frame(xid("2024-01-01T00:00:00Z", "a", 119), xid("2024-01-02T00:00:00Z", "a", 154),
               xid("2024-01-03T00:00:00Z", "a", 154), xid("2024-01-04T00:00:00Z", "a", 145),
               xid("2024-01-05T00:00:00Z", "a", 74), xid("2024-01-06T00:00:00Z", "a", 9999))
    t5 = tables.table5_xid_groups(df)
    got = {r["group"]: (r["xids"], r["count"]) for r in t5.to_dict("records")}
    assert got["Other Failures"] == ("119, 154", 3)
    assert got["NVLink Error"] == ("74, 145", 2)
    assert got["Unknown"] == ("9999", 1)
    assert got["Software Causes"] == ("13, 31, 43, 45", 0)  # none seen: the paper's codes only
    # with only the paper's codes, the rows read as the paper printed them
    only = tables.table5_xid_groups(frame(xid("2024-01-01T00:00:00Z", "a", 119)))
    assert dict(zip(only["group"], only["xids"]))["Other Failures"] == "119"


def test_repeat_offenders() -> None:
    rep = stats.repeat_offenders(FLEET)
    # hardware faults: n1: ecc x3 (events) + 63, 63, 94, 95, 64 + 1 cut = 9; n2: 79 + 2 cuts = 3
    # (Xid 43 is software). Total 12.
    nodes = rep["nodes"]
    assert list(nodes["host"]) == ["n1", "n2"] and list(nodes["faults"]) == [9, 3]
    assert list(nodes["share"]) == pytest.approx([75.0, 25.0])
    gpus = rep["gpus"]
    assert list(zip(gpus["host"], gpus["pci_bus_id"], gpus["faults"])) == [("n1", "0000:07:00.0", 5),
                                                                         ("n2", "0000:0a:00.0", 1)]
    ports = rep["ib_ports"]
    assert list(zip(ports["host"], ports["device"], ports["faults"])) == [("n2", "mlx5_1/1", 2),
                                                                        ("n1", "mlx5_0/1", 1)]
    assert ports["share"].iloc[0] == pytest.approx(100 * 2 / 12)


def test_mtbf_fleet_and_per_node() -> None:
    df = frame(xid("2024-01-01T00:00:00Z", "a", 79), xid("2024-01-01T12:00:00Z", "a", 43),
               xid("2024-01-02T00:00:00Z", "b", 63), ecc("2024-01-03T00:00:00Z", "b"),
               xid("2024-01-03T00:00:00Z", "c", 43))
    m = stats.mtbf(df).set_index("category")
    # window 48 h, 3 nodes: 144 node-hours
    assert m.loc["hardware", "failures"] == 3 and m.loc["hardware", "mtbf_hours"] == pytest.approx(48.0)
    assert m.loc["uncorrectable", "mtbf_hours"] == pytest.approx(144.0)
    assert m.loc["software", "failures"] == 2 and m.loc["software", "mtbf_hours"] == pytest.approx(72.0)
    assert m.loc["cpu_ecc", "mtbf_hours"] == pytest.approx(144.0)
    m2 = stats.mtbf(df, since=pd.Timestamp("2024-01-01", tz="UTC"), until=pd.Timestamp("2024-01-11", tz="UTC"),
                    nodes=10).set_index("category")
    assert m2.loc["hardware", "mtbf_hours"] == pytest.approx(240 * 10 / 3)
    per = stats.mtbf_per_node(df)
    assert list(per["host"]) == ["b", "a", "c"]
    assert list(per["hardware_faults"]) == [2, 1, 0]
    assert per["mtbf_hours"].iloc[0] == pytest.approx(24.0) and per["mtbf_hours"].iloc[1] == pytest.approx(48.0)
    assert math.isnan(per["mtbf_hours"].iloc[2])


def test_co_occurrence_of_a_known_chain() -> None:
    df = frame(xid("2024-01-01T00:00:00Z", "a", 48), xid("2024-01-01T00:00:10Z", "a", 63),
               xid("2024-01-01T00:00:30Z", "a", 94), xid("2024-01-01T00:00:40Z", "a", 94),
               xid("2024-01-01T00:05:00Z", "a", 79),                   # 5 min later: alone
               xid("2024-01-01T00:00:05Z", "b", 63),                   # other host: no pair with a
               xid("2024-02-01T00:00:00Z", "c", 48), xid("2024-02-01T00:00:50Z", "c", 63))
    co = stats.co_occurrence(df, window=60)
    got = {(r["first"], r["then"]): (r["count"], r["hosts"]) for r in co.to_dict("records")}
    assert got == {("Xid 48", "Xid 63"): (2, 2), ("Xid 48", "Xid 94"): (1, 1), ("Xid 63", "Xid 94"): (1, 1)}
    assert list(co.iloc[0][["first", "then"]]) == ["Xid 48", "Xid 63"]


def test_compare_with_paper(tmp_path: Path) -> None:
    (tmp_path / "table8_ib_flash_cuts_daily.csv").write_text("date,failure_count\n2023-10-01,2\n2023-10-09,1\n")
    t8 = pd.DataFrame({"date": ["2023-10-01", "2023-10-02"], "failure_count": [2, 4]})
    diff = tables.compare_with_paper(t8, "table8", tmp_path)
    assert diff.to_dict("records") == [{"key": "2023-10-02", "column": "failure_count", "ours": 4, "paper": 0},
                                       {"key": "2023-10-09", "column": "failure_count", "ours": 0, "paper": 1}]
    assert tables.compare_with_paper(t8, "table7", tmp_path) is None  # reference absent


def test_paper_tables_disagree_on_october_2023() -> None:
    p7 = tables.read_paper_table("table7", PAPER_DIR).astype({c: int for c in tables.TABLE7_COLUMNS[1:]})
    p8 = tables.read_paper_table("table8", PAPER_DIR).astype({"failure_count": int})
    d = tables.flash_cut_discrepancies(p7, p8)
    assert [(x["month"], x["table7"], x["table8_sum"]) for x in d] == [("2023-10", 29, 13)]
    assert tables.compare_with_paper(p7, "table7", PAPER_DIR).empty
    assert tables.compare_with_paper(p8, "table8", PAPER_DIR).empty


def test_packaged_paper_tables_are_the_papers() -> None:
    """The CSVs shipped with the package hold the paper's Tables VI, VII and VIII as printed
    (arXiv 2408.14158v2, Appendix): row counts, totals, and cells read off the paper."""
    assert tables.default_paper_dir() == tables.PAPER_DIR == PAPER_DIR
    assert sorted(p.name for p in PAPER_DIR.iterdir()) == sorted(
        [f for f, _, _ in tables.PAPER_FILES.values()] + ["SOURCE.md"])
    source = (PAPER_DIR / "SOURCE.md").read_text()
    assert "2408.14158" in source and all(f in source for f, _, _ in tables.PAPER_FILES.values())

    t6 = tables.read_paper_table("table6", PAPER_DIR)
    rows6 = t6[t6["xid"] != ""]
    assert len(rows6) == 16 and t6.iloc[-1]["gpu_error_type"] == "Total" and t6.iloc[-1]["count"] == "12970"
    assert rows6["count"].astype(int).sum() == 12970
    cell = {int(r["xid"]): r for _, r in rows6.iterrows()}
    assert (cell[74]["gpu_error_type"], cell[74]["count"], cell[74]["percentage_as_printed"]) == (
        "NVLink Error", "5521", "42.57%")
    assert (cell[43]["count"], cell[31]["count"], cell[119]["count"]) == ("4342", "2487", "1")
    for r in cell.values():  # the recomputed column is the count's share, to 4 decimals
        assert float(r["percentage_recomputed"]) == round(100 * int(r["count"]) / 12970, 4)

    t7 = tables.read_paper_table("table7", PAPER_DIR)
    assert list(t7["month"]) == ["2023-10", "2023-11", "2023-12", "2024-01", "2024-02", "2024-03", "Total"]
    n7 = t7.set_index("month").astype(int)
    assert list(n7.loc["Total"]) == [54, 89, 120, 1, 15, 7, 6, 292]
    assert n7.loc["2023-10", "network_flash_cut"] == 29 and n7.loc["2024-03", "xid_79"] == 6
    assert (n7.drop("Total").sum() == n7.loc["Total"]).all()
    assert (n7.drop(columns="total").sum(axis=1) == n7["total"]).all()

    t8 = tables.read_paper_table("table8", PAPER_DIR)
    days = dict(zip(t8["date"], t8["failure_count"].astype(int)))
    assert len(days) == 101 and sum(days.values()) == 213
    assert (min(days), max(days)) == ("2023-04-19", "2024-03-31")
    assert days["2023-05-28"] == 10 and days["2023-06-16"] == 0 and days["2024-02-03"] == 5


def _one_node_logs(root: Path) -> Path:
    node = root / "logs" / "node01"
    node.mkdir(parents=True)
    node.joinpath("kern.log").write_text(
        "2023-10-01T00:00:00+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link DOWN\n"
        "2023-10-01T00:00:05+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link ACTIVE\n"
        "2023-10-01T00:00:10+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n")
    return root / "logs"


def test_analyze_paper_tables_without_dir_uses_the_packaged_ones(tmp_path: Path) -> None:
    logs, out = _one_node_logs(tmp_path), tmp_path / "out"
    assert main(["analyze", str(logs), "--no-cache", "--out", str(out), "--paper-tables"]) == 0
    d6 = pd.read_csv(out / "paper_diff_table6.csv", dtype=str).set_index("key")
    assert (d6.loc["74", "ours"], d6.loc["74", "paper"]) == ("0", "5521")
    assert (d6.loc["79", "ours"], d6.loc["79", "paper"]) == ("1", "37")
    d7 = pd.read_csv(out / "paper_diff_table7.csv", dtype=str)
    oct_cut = d7[(d7["key"] == "2023-10") & (d7["column"] == "network_flash_cut")]
    assert oct_cut[["ours", "paper"]].values.tolist() == [["1", "29"]]
    d8 = pd.read_csv(out / "paper_diff_table8.csv", dtype=str).set_index("key")
    assert (d8.loc["2023-10-01", "ours"], d8.loc["2023-10-01", "paper"]) == ("1", "0")
    disc = (out / "discrepancies.csv").read_text()
    assert "not found" not in disc and "the paper's Table VII" in disc and "2023-10" in disc


def test_analyze_paper_tables_dir_without_tables_is_a_usage_error(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A DIR holding none of the tables (say a log directory taken for DIR) is refused, exit 2."""
    logs = _one_node_logs(tmp_path)
    assert main(["analyze", "--paper-tables", str(logs), str(logs), "--no-cache"]) == 2
    assert "none of the paper's tables there" in capsys.readouterr().err


def _is_png(p: Path) -> bool:
    return p.read_bytes()[:8] == PNG_SIGNATURE and p.stat().st_size > 2000


def test_figures_are_pngs(tmp_path: Path) -> None:
    cuts = tables.flash_cuts(FLEET)
    paths = figures.write_figures(FLEET, tables.table7_memory_network_monthly(FLEET, cuts),
                                  tables.table8_ib_flash_cuts_daily(cuts), tmp_path)
    assert [p.name for p in paths] == ["figure10_memory_network_monthly.png", "figure11_ib_flash_cuts_daily.png",
                                       "xids_over_time.png"]
    assert all(_is_png(p) for p in paths)


def test_report_writes_tables_figures_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = IngestStats(files=2, events=len(FLEET))
    _, messages = report.build(FLEET, paper_dir=tmp_path / "missing")
    assert any("not found" in m for m in messages)
    out = tmp_path / "out"
    assert report.run(FLEET, st, out_dir=str(out)) == 0
    for name in ("table5_xid_groups", "table6_xid_counts", "table7_memory_network_monthly",
                 "table8_ib_flash_cuts_daily", "repeat_offenders_nodes", "repeat_offenders_gpus",
                 "repeat_offenders_ib_ports", "mtbf_fleet", "mtbf_per_node", "co_occurrence"):
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists(), name
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    for header in ("main_memory_cpu_ecc", "network_flash_cut", "failure_count", "mtbf_hours", "remedy"):
        assert f"<th>{header}</th>" in page
    assert "src=\"http" not in page and "<link" not in page
    md = (out / "report.md").read_text()
    assert "figure10_memory_network_monthly.png" in md and "inputs read: 2" in md
    printed = capsys.readouterr().out
    assert "Table VII" in printed and "Table VIII" in printed


def test_analyze_cli_end_to_end(tmp_path: Path) -> None:
    node = tmp_path / "logs" / "node01"
    node.mkdir(parents=True)
    node.joinpath("kern.log").write_text(
        "2023-10-01T00:00:00+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link DOWN\n"
        "2023-10-01T00:00:05+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link ACTIVE\n"
        "2023-10-01T00:00:10+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
        "2023-11-02T00:00:00+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link DOWN\n"
        "2023-11-02T00:02:00+00:00 node01 kernel: mlx5_core 0000:4b:00.0: mlx5_0: Port: 1 Link ACTIVE\n")
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "logs"), "--out", str(out)]) == 0
    t7 = pd.read_csv(out / "table7_memory_network_monthly.csv")
    assert t7.set_index("month").loc["2023-10", ["network_flash_cut", "xid_79", "total"]].tolist() == [1, 1, 2]
    t8 = pd.read_csv(out / "table8_ib_flash_cuts_daily.csv")
    assert t8.to_dict("list") == {"date": ["2023-10-01"], "failure_count": [1]}
    co = pd.read_csv(out / "co_occurrence.csv")
    assert co[["first", "then"]].values.tolist() == [["ib_flash_cut", "Xid 79"]]
    assert _is_png(out / "figure11_ib_flash_cuts_daily.png")


def test_compare_with_paper_keeps_to_the_papers_period(tmp_path: Path) -> None:
    """Months outside the paper's Table VII (it starts in Oct 2023) are not differences, and the
    total is compared over the paper's months only; the Table VI total row is compared too."""
    (tmp_path / "table7_memory_network_monthly.csv").write_text(
        "month,main_memory_cpu_ecc,network_flash_cut,xid_63,xid_64,xid_79,xid_94,xid_95,total\n"
        "2023-10,4,29,21,0,0,0,0,54\n2023-11,14,8,22,0,0,4,0,48\nTotal,18,37,43,0,0,4,0,102\n")
    ours = pd.DataFrame({"month": ["2023-09", "2023-10", "2023-11", "Total"],
                         "main_memory_cpu_ecc": [5, 4, 14, 23], "network_flash_cut": [7, 13, 8, 28],
                         "xid_63": [1, 21, 22, 44], "xid_64": [0] * 4, "xid_79": [0] * 4,
                         "xid_94": [0, 0, 4, 4], "xid_95": [0] * 4, "total": [13, 38, 48, 99]})
    diff = tables.compare_with_paper(ours, "table7", tmp_path)
    assert diff.to_dict("records") == [
        {"key": "2023-10", "column": "network_flash_cut", "ours": 13, "paper": 29},
        {"key": "2023-10", "column": "total", "ours": 38, "paper": 54},
        {"key": "Total", "column": "network_flash_cut", "ours": 21, "paper": 37},
        {"key": "Total", "column": "total", "ours": 86, "paper": 102}]
    (tmp_path / "table6_xid_counts.csv").write_text(
        "gpu_error_type,xid,count,percentage_as_printed,percentage_recomputed\n"
        "NVLink Error,74,3,75.00%,75.0\nSoftware Causes,13,1,25.00%,25.0\nTotal,,4,100.00%,100.0\n")
    t6 = pd.DataFrame({"group": ["Software Causes", "NVLink Error", "Total"], "xid": [13, 74, None],
                       "count": [1, 3, 4]})
    assert tables.compare_with_paper(t6, "table6", tmp_path).empty


def test_the_command_line_s_default_paper_dir_is_the_packaged_one() -> None:
    """cli.py names the directory without importing tables (pandas stays off the agent's import path)."""
    from nodewarden.cli import build_parser
    args = build_parser().parse_args(["analyze", "x", "--paper-tables"])
    assert Path(args.paper_tables).resolve() == tables.PAPER_DIR and tables.PAPER_DIR.is_dir()

"""`nodewarden analyze` counts the fleet it read: every host whose logs were read is a node (the
fleet MTBF's N, the per-node table), nodewarden's own outputs among the inputs are left out and
said so, Table VII lists every month of the window, a bad path or --out stops before any
reading, empty figures say what is absent, and the paper diff names both fleets' sizes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("pandas")

from nodewarden import exitcodes  # noqa: E402
from nodewarden.cli import main  # noqa: E402

XID79 = "{t} {host} kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
NOISE = "{t} {host} kernel: usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _analyze(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["analyze", *argv, "--no-cache", "--jobs", "1", "--quiet"])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def fleet(tmp_path: Path) -> Path:
    """Three nodes' directories: node01 logged an Xid, node02 only an ordinary line, node03's log
    is empty."""
    logs = tmp_path / "logs"
    for host, text in (("node01", XID79.format(t="2024-03-01T10:00:00+00:00", host="node01")
                        + XID79.format(t="2024-03-03T10:00:00+00:00", host="node01")),
                       ("node02", NOISE.format(t="2024-03-02T10:00:00+00:00", host="node02")),
                       ("node03", "")):
        (logs / host).mkdir(parents=True)
        (logs / host / "kern.log").write_text(text)
    return logs


def test_nodes_that_logged_no_event_are_nodes_of_the_fleet(fleet: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, _ = _analyze(capsys, str(fleet), "--out", str(tmp_path / "r"))
    assert rc == exitcodes.OK
    mtbf = {r["category"]: r for r in _rows(tmp_path / "r" / "mtbf_fleet.csv")}
    assert {r["nodes"] for r in mtbf.values()} == {"3"}
    # 48 h between the two Xids x 3 nodes / 2 faults
    assert float(mtbf["hardware"]["mtbf_hours"]) == pytest.approx(48.0 * 3 / 2)
    per_node = {r["host"]: r["hardware_faults"] for r in _rows(tmp_path / "r" / "mtbf_per_node.csv")}
    assert per_node == {"node01": "2", "node02": "0", "node03": "0"}
    assert "- hosts: 3 (2 logged no event)\n" in (tmp_path / "r" / "report.md").read_text()


def test_hosts_and_nodes_options_still_decide_the_fleet(fleet: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert _analyze(capsys, str(fleet), "--hosts", "node01,node03", "--out", str(tmp_path / "h"))[0] == 0
    assert {r["nodes"] for r in _rows(tmp_path / "h" / "mtbf_fleet.csv")} == {"2"}
    assert sorted(r["host"] for r in _rows(tmp_path / "h" / "mtbf_per_node.csv")) == ["node01", "node03"]
    assert _analyze(capsys, str(fleet), "--nodes", "10", "--out", str(tmp_path / "n"))[0] == 0
    assert {r["nodes"] for r in _rows(tmp_path / "n" / "mtbf_fleet.csv")} == {"10"}


def test_a_path_name_and_the_name_the_lines_give_count_once(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "logs" / "n1"  # the directory's name is not the name the kernel lines give
    d.mkdir(parents=True)
    (d / "kern.log.1").write_text(XID79.format(t="2024-03-01T10:00:00+00:00", host="node01.cluster"))
    (d / "kern.log").write_text(NOISE.format(t="2024-03-02T10:00:00+00:00", host="node01.cluster"))
    assert _analyze(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "r"))[0] == 0
    assert [r["host"] for r in _rows(tmp_path / "r" / "mtbf_per_node.csv")] == ["node01.cluster"]


def test_the_ground_truth_of_simulate_is_no_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = tmp_path / "sim"
    assert main(["simulate", "--nodes", "2", "--days", "3", "--out", str(sim), "--quiet"]) == 0
    capsys.readouterr()
    logs = [p for p in sim.rglob("*") if p.is_file() and p.name != "ground_truth.csv"]
    (sim / "copy").mkdir()
    (sim / "copy" / "truth.csv").write_bytes((sim / "ground_truth.csv").read_bytes())  # any name: by its header
    rc, out, _ = _analyze(capsys, str(sim), "--out", str(tmp_path / "r"))
    assert rc == exitcodes.OK
    line = next(x for x in out.splitlines() if x.startswith("inputs read: "))
    assert line.startswith(f"inputs read: {len(logs)} (left out, nodewarden's own outputs: ")
    assert f"{sim / 'ground_truth.csv'}: the ground truth of nodewarden simulate, not read" in line
    assert f"{sim / 'copy' / 'truth.csv'}: the ground truth of nodewarden simulate, not read" in line
    assert {r["nodes"] for r in _rows(tmp_path / "r" / "mtbf_fleet.csv")} == {"2"}  # no host "ground_truth"


def test_a_log_named_ground_truth_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "ground_truth.csv"
    p.write_text(XID79.format(t="2024-03-01T10:00:00+00:00", host="node01"))
    rc, out, _ = _analyze(capsys, str(tmp_path))
    assert rc == exitcodes.OK and "inputs read: 1; events: 1;" in out


def test_an_earlier_report_in_the_logs_directory_is_no_input(fleet: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _analyze(capsys, str(fleet), "--out", str(fleet / "report"))[0] == 0
    rc, out, _ = _analyze(capsys, str(fleet))  # no --out now: the report is found by its report.md
    assert rc == exitcodes.OK
    written = sum(1 for p in (fleet / "report").iterdir() if p.suffix in (".csv", ".md", ".png", ".html"))
    assert f"{fleet / 'report'}: a report of nodewarden analyze ({written} files), not read" in out
    assert "inputs read: 3 (" in out


def test_the_recognised_outputs_are_those_nodewarden_writes(tmp_path: Path) -> None:
    from nodewarden.analysis import report, simulate
    from nodewarden.logfiles import paths
    assert paths.GROUND_TRUTH_HEADER == ",".join(simulate.TRUTH_FIELDS)
    assert paths.GROUND_TRUTH_EXTRA == ",".join(simulate.EXTRA_TRUTH_FIELDS)
    report._write_markdown(tmp_path / "report.md", [], [], [], [])
    assert paths.is_report_dir(["report.md"], str(tmp_path))
    (tmp_path / "report.md").write_text("# My notes\n")
    assert not paths.is_report_dir(["report.md"], str(tmp_path))


def test_a_missing_path_stops_analyze_before_any_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _analyze(capsys, str(tmp_path / "nonexistent"))
    assert rc == exitcodes.USAGE
    assert out == ""
    assert err == f"nodewarden: {tmp_path / 'nonexistent'}: no such file or directory\n"


def test_an_out_the_file_system_refuses_stops_before_reading(fleet: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from nodewarden.analysis import ingest
    monkeypatch.setattr(ingest, "ingest", lambda *a, **k: pytest.fail("the logs were read"))
    rc, out, err = _analyze(capsys, str(fleet), "--out", "/proc/nodewarden-report")
    assert rc == exitcodes.USAGE and out == ""
    assert "--out /proc/nodewarden-report: cannot write the report there" in err
    assert not Path("/proc/nodewarden-report").exists()


def _frame(*events: tuple[str, str, int]):
    """An event frame of Xids (time, host, code)."""
    from nodewarden.analysis import tables
    return tables.make_frame((t, h, "xid", x, None, None, "0000:07:00.0", "file") for t, h, x in events)


def test_table7_lists_every_month_of_the_window_and_marks_partial_ones() -> None:
    from nodewarden.analysis import tables
    df = _frame(("2023-12-20T00:00:00+00:00", "n1", 63), ("2024-02-10T00:00:00+00:00", "n1", 94))
    span = tables.observed_span(df)
    t7 = tables.table7_memory_network_monthly(df, tables.flash_cuts(df), span)
    rows = {r["month"]: r for r in t7.to_dict("records")}
    assert list(rows) == ["2023-12", "2024-01", "2024-02", "Total"]
    assert rows["2024-01"]["total"] == 0 and rows["2024-01"]["partial"] == ""
    assert rows["2023-12"]["partial"] == "12 of 31 days"  # 20th .. 31st
    assert rows["2024-02"]["partial"] == "10 of 29 days"  # 1st .. 10th, a leap year
    assert rows["Total"]["total"] == 2 and rows["Total"]["partial"] == ""


def test_table8_says_it_lists_only_days_with_a_cut() -> None:
    from nodewarden.analysis import report
    tabs, _ = report.build(_frame(("2024-03-01T10:00:00+00:00", "n1", 79)))
    t8 = next(t for t in tabs if t.name == "table8_ib_flash_cuts_daily")
    assert "days with a flash cut" in t8.title


def test_figures_without_data_say_what_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodewarden.analysis import figures, tables
    kept: list = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    df = _frame(("2024-03-01T10:00:00+00:00", "n1", 31))  # an Xid, no flash cut
    figures.figure11(tables.table8_ib_flash_cuts_daily(tables.flash_cuts(df)), tmp_path / "f11.png")
    figures.xids_over_time(df.iloc[:0], tmp_path / "x.png")
    texts = [[t.get_text() for t in fig.axes[0].texts] for fig in kept]
    assert texts == [["no data: no IB flash cuts in the window"], ["no data: no Xids in the window"]]


def test_the_paper_diff_names_both_fleets_and_gives_rates(tmp_path: Path) -> None:
    from nodewarden.analysis import report, tables
    # node n1 and n2 over 2024-03-01 .. 2024-03-10 (10 days): one Xid 31
    df = _frame(("2024-03-01T00:00:00+00:00", "n1", 31), ("2024-03-10T12:00:00+00:00", "n2", 13))
    tabs, messages = report.build(df, paper_dir=tables.PAPER_DIR)
    assert ("Compared with the paper's fleet, 1,250 nodes over 2023-04-19 .. 2024-03-31 (348 days); this one: "
            "2 nodes over 2024-03-01 .. 2024-03-10 (10 days).") in messages[0]
    d6 = next(t for t in tabs if t.name == "paper_diff_table6")
    assert "1,250 nodes" in d6.note
    row = d6.data[d6.data["key"] == "31"].iloc[0]
    paper31 = int(tables.read_paper_table("table6").set_index("xid").loc["31", "count"])
    assert row["ours"] == 1 and row["ours_per_node_day"] == pytest.approx(1 / (2 * 10))
    assert row["paper_per_node_day"] == pytest.approx(paper31 / (1250 * 348))
    d7 = next(t for t in tabs if t.name == "paper_diff_table7").data
    cell = d7[(d7["key"] == "2024-03") & (d7["column"] == "network_flash_cut")].iloc[0]
    assert cell["ours"] == 0 and cell["paper_per_node_day"] == pytest.approx(cell["paper"] / (1250 * 31))
    d8 = next(t for t in tabs if t.name == "paper_diff_table8").data
    outside = d8[d8["key"] == "2023-05-01"]  # a day the paper counts cuts on, outside this window
    assert len(outside) and outside["ours_per_node_day"].isna().all()


def test_the_paper_diff_of_a_fleet_of_the_papers_size_has_no_rates() -> None:
    from nodewarden.analysis import report, tables
    df = _frame(("2023-04-19T00:00:00+00:00", "n1", 31), ("2024-03-31T12:00:00+00:00", "n2", 13))
    tabs, messages = report.build(df, paper_dir=tables.PAPER_DIR, nodes=tables.PAPER_NODES)
    assert not any("Compared with the paper's fleet" in m for m in messages)
    d6 = next(t for t in tabs if t.name == "paper_diff_table6")
    assert list(d6.data.columns) == ["key", "column", "ours", "paper"]
    assert d6.note.startswith("Compared with the paper's fleet, 1,250 nodes")

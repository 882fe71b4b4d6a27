"""The report reads the same everywhere: one name per Xid group, percentage columns that say
so, the unparsed counts named for what they count, and figures a person can read (integer
count axes, no all-zero series, one-day bars apart, partial months marked)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path

import pytest

from nodewarden import catalog
from nodewarden.analysis import figures, report, tables
from nodewarden.analysis.ingest import IngestStats
from nodewarden.cli import main


def xid(t: str, host: str, code: int, bus: str = "0000:07:00.0") -> tuple:
    return (t, host, "xid", code, None, None, bus, "file")


def link(t: str, host: str, up: bool) -> tuple:
    return (t, host, "ib_link_up" if up else "ib_link_down", None, None, "mlx5_0/1", None, "file")


# 2023-10-15 .. 2023-12-03: October and December observed in part (17 of 31, 3 of 31 days).
FLEET = tables.make_frame([
    xid("2023-10-15T01:00:00Z", "n1", 63), xid("2023-10-20T01:00:00Z", "n1", 79),
    xid("2023-11-02T01:00:00Z", "n2", 119), xid("2023-11-03T01:00:00Z", "n2", 31),
    link("2023-11-10T00:00:00Z", "n1", False), link("2023-11-10T00:00:05Z", "n1", True),
    link("2023-11-11T00:00:00Z", "n1", False), link("2023-11-11T00:00:05Z", "n1", True),
    link("2023-11-11T06:00:00Z", "n1", False), link("2023-11-11T06:00:05Z", "n1", True),
    xid("2023-12-03T01:00:00Z", "n2", 74),
])


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("report")
    assert report.run(FLEET, IngestStats(files=1, events=len(FLEET)), out_dir=str(d), stream=io.StringIO()) == 0
    return d


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_tables_v_and_vi_name_each_group_once(out: Path) -> None:
    t5 = {r["group"]: r for r in _csv(out / "table5_xid_groups.csv")}
    t6 = _csv(out / "table6_xid_counts.csv")
    by_xid = {int(r["xid"]): r["group"] for r in t6 if r["xid"]}
    assert by_xid == {63: catalog.TABLE5_LABELS["memory_ecc"], 79: catalog.TABLE5_LABELS["uncorrectable"],
                      119: catalog.TABLE5_LABELS["other"], 31: catalog.TABLE5_LABELS["software"],
                      74: catalog.TABLE5_LABELS["nvlink"]}
    for code, group in by_xid.items():
        assert str(code) in t5[group]["xids"].split(", ")
    page, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    for paper in ("GPU ECC Error", "Uncorrectable Failures", "GPU GSP ERROR"):
        assert paper not in {r["group"] for r in t6}
        # said once, where the paper's label differs, next to each of the two tables
        assert md.count(f'the paper\'s "{paper}"') == 2
        assert page.count(f"the paper&#x27;s &quot;{paper}&quot;") == 2


def test_share_columns_say_they_are_percentages(out: Path) -> None:
    for name in ("repeat_offenders_nodes", "repeat_offenders_gpus", "repeat_offenders_ib_ports"):
        header = (out / f"{name}.csv").read_text().splitlines()[0].split(",")
        assert header[-2:] == ["share (%)", "cumulative_share (%)"], name
        md_header = (out / f"{name}.md").read_text().splitlines()[2]
        assert "share (%)" in md_header and "cumulative_share (%)" in md_header
    nodes = _csv(out / "repeat_offenders_nodes.csv")
    assert sum(float(r["share (%)"]) for r in nodes) == pytest.approx(100.0)
    page = (out / "report.html").read_text()
    assert page.count("<th>share (%)</th>") == 3 and page.count("<th>cumulative_share (%)</th>") == 3
    assert "<th>share</th>" not in page


def test_unparsed_counts_name_what_they_count(tmp_path: Path) -> None:
    """One garbled Xid line in a kernel log (an unparsed event) and one line of an agent
    journal that is no event: 2 lines read unparsed, 1 kept as an event, each named."""
    node = tmp_path / "logs" / "node01"
    node.mkdir(parents=True)
    (node / "kern.log").write_text(
        "2024-01-05T10:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n"
        "2024-01-05T10:00:05+00:00 node01 kernel: NVRM: Xid (PCI:0000:01:00): zz garbled\n")
    (node / "events-node01.jsonl").write_text("not json\n")
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "logs"), "--no-cache", "--out", str(out)]) == 0
    kinds = {r["kind"]: int(r["count"]) for r in _csv(out / "events_by_kind.csv")}
    assert kinds["unparsed"] == 1
    line = report.unparsed_summary(2, 1)
    assert "unparsed lines read: 2" in line and "kept as events of kind unparsed (Events by kind): 1" in line
    for text in ((out / "report.md").read_text(), (out / "report.html").read_text()):
        assert "unparsed lines read: 2 " in text and "(Events by kind): 1" in text
        assert "unparsed fault-like lines" not in text
    assert "agent-journal lines that are no event" in (out / "events_by_kind.md").read_text()


@pytest.fixture()
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """The figures write_figures draws, kept open (by file name) to inspect."""
    kept: list = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    cuts = tables.flash_cuts(FLEET)
    t7, t8 = tables.table7_memory_network_monthly(FLEET, cuts), tables.table8_ib_flash_cuts_daily(cuts)
    paths = figures.write_figures(FLEET, t7, t8, tmp_path, figures.observed_span(FLEET))
    return {p.name: f for p, f in zip(paths, kept)}


def _ax(fig):
    return fig.axes[0]


def test_count_axes_tick_at_integers(drawn: dict) -> None:
    for name, fig in drawn.items():
        ticks = _ax(fig).get_yticks()
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (name, ticks)


def test_series_all_zero_are_left_out(drawn: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    legend10 = [t.get_text() for t in _ax(drawn[figures.FIGURE10]).get_legend().get_texts()]
    # Table VII: IB flash cuts and Xids 63, 79 occurred; no CPU ECC, no Xid 64, 94, 95
    assert legend10 == ["IB flash cut", "GPU Xid 63", "GPU Xid 79"]
    legend_x = [t.get_text() for t in _ax(drawn[figures.XIDS_OVER_TIME]).get_legend().get_texts()]
    assert legend_x == [catalog.TABLE5_LABELS[g] for g in catalog.GROUPS]  # every group once here
    only_sw = tables.make_frame([xid("2023-10-15T01:00:00Z", "n1", 31)])
    kept: list = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    figures.xids_over_time(only_sw, tmp_path / "x.png")
    assert [t.get_text() for t in _ax(kept[0]).get_legend().get_texts()] == [catalog.TABLE5_LABELS["software"]]


def test_figure10_says_what_is_absent_when_all_series_are_zero(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list = []
    monkeypatch.setattr(figures.plt, "close", kept.append)
    t7 = tables.table7_memory_network_monthly(tables.make_frame([xid("2023-10-15T01:00:00Z", "n1", 31)]),
                                              tables.flash_cuts(FLEET.iloc[:0]))
    figures.figure10(t7, tmp_path / "f.png")  # no month rows
    figures.figure10(t7, tmp_path / "g.png", (dt.date(2023, 10, 1), dt.date(2023, 10, 31)))  # a month of zeros
    for fig in kept:
        ax = _ax(fig)
        assert ax.get_legend() is None and not ax.patches
        assert [t.get_text() for t in ax.texts] == [
            "no data: no CPU memory ECC errors, IB flash cuts or GPU memory Xids in the window"]
        # no ticks: matplotlib's default 0-1 scale would pass for counts
        assert not [t for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_visible() and t.get_text()]


def test_figure11_bars_are_one_day_wide_and_edged(drawn: dict) -> None:
    bars = sorted(_ax(drawn[figures.FIGURE11]).patches, key=lambda b: b.get_x())
    assert [b.get_height() for b in bars] == [1, 2]  # 2023-11-10: one cut, 2023-11-11: two
    assert all(b.get_width() == pytest.approx(1.0) for b in bars)  # date units: days
    assert bars[0].get_x() + bars[0].get_width() <= bars[1].get_x() + 1e-9
    assert all(b.get_linewidth() > 0 and b.get_edgecolor()[3] > 0 for b in bars)
    assert all(":" not in t.get_text() for t in _ax(drawn[figures.FIGURE11]).get_xticklabels())


def test_partial_months_are_marked(drawn: dict) -> None:
    assert figures.observed_span(FLEET) == (dt.date(2023, 10, 15), dt.date(2023, 12, 3))
    for name in (figures.FIGURE10, figures.XIDS_OVER_TIME):
        fig = drawn[name]
        labels = [t.get_text() for t in _ax(fig).get_xticklabels()]
        assert labels == ["2023-10*", "2023-11", "2023-12*"], name
        notes = [t.get_text() for t in fig.texts]
        assert notes == ["* partial month: 2023-10: 17 of 31 days; 2023-12: 3 of 31 days"], name


def test_month_coverage() -> None:
    span = (dt.date(2024, 2, 10), dt.date(2024, 3, 31))
    assert figures.month_coverage("2024-02", span) == (20, 29)  # leap year
    assert figures.month_coverage("2024-03", span) == (31, 31)
    assert figures.month_labels(["2024-02", "2024-03"], span) == (["2024-02*", "2024-03"],
                                                                  "* partial month: 2024-02: 20 of 29 days")
    assert figures.month_labels(["2024-02"], None) == (["2024-02"], "")

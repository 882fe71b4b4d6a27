"""`nodewarden analyze` and `events` refuse bad arguments before reading anything: exit 2 with a
message naming the argument, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden import cli, exitcodes

pytest.importorskip("pandas")

LOG = "2024-03-01T10:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    p = tmp_path / "node01.log"
    p.write_text(LOG)
    return p


def _usage(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's own checks
        rc = e.code
    assert rc == exitcodes.USAGE, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, says", [
    (["--tz", "Nowhere/Bogus"], "unknown time zone"),
    (["--tz", ""], "unknown time zone"),
    (["--since", "2024-03-02", "--until", "2024-03-01"], "--since must be before --until"),
    (["--since", "9999-12-31T23:59:59-05:00"], "not an ISO 8601"),
    (["--window", "nan"], "--window"),
    (["--window", "-5"], "--window"),
    (["--window", "inf"], "--window"),
    (["--nodes", "0"], "--nodes"),
    (["--nodes", "-5"], "--nodes"),
    (["--kind", ","], "no kind"),
    (["--hosts", ","], "--hosts names no host"),
])
def test_analyze_refuses(log: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str) -> None:
    assert says in _usage(capsys, ["analyze", str(log), "--no-cache", *extra])


def test_analyze_out_and_paper_tables(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "not a directory" in _usage(capsys, ["analyze", str(log), "--no-cache", "--out", str(log)])
    assert "not a directory" in _usage(capsys, ["analyze", str(log), "--no-cache", "--paper-tables", str(tmp_path / "no")])
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "table6_xid_counts.csv").write_text('garbage,"\n')
    assert "table6_xid_counts.csv" in _usage(capsys, ["analyze", str(log), "--no-cache", "--paper-tables", str(paper)])
    (paper / "table6_xid_counts.csv").write_text("")
    assert "not a CSV table" in _usage(capsys, ["analyze", str(log), "--no-cache", "--paper-tables", str(paper)])
    assert "cannot write the report" in _usage(capsys, ["analyze", str(log), "--no-cache", "--out", "/proc/nodewarden"])


def test_events_refuses_an_empty_window(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--since must be before --until" in _usage(
        capsys, ["events", str(log), "--since", "2024-03-02", "--until", "2024-03-01"])


def test_hosts_matching_nothing_and_one_event(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["analyze", str(log), "--no-cache", "--hosts", "nosuch"]) == exitcodes.OK
    assert "no event of --hosts nosuch" in capsys.readouterr().err
    # one event: no observation span, so no MTBF (not 0 hours)
    assert cli.main(["analyze", str(log), "--no-cache", "--out", str(tmp_path / "r")]) == exitcodes.OK
    import csv
    with open(tmp_path / "r" / "mtbf_fleet.csv") as f:
        rows = {r["category"]: r for r in csv.DictReader(f)}
    assert rows["hardware"]["failures"] == "1" and rows["hardware"]["mtbf_hours"] == ""


def test_sxid_explains_a_code_from_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    # S-101's 12028: an egress non-posted PRIV error, non-fatal in the Fabric Manager guide's table.
    assert cli.main(["sxid", "12028"]) == exitcodes.OK
    out = capsys.readouterr().out
    assert "NVSWITCH_ERR_HW_NPORT_EGRESS_PRIVRSPERR" in out and "egress non-posted PRIV error" in out
    assert "unit:      egress" in out and "severity:  non_fatal" in out
    assert cli.main(["sxid", "99999", "--json"]) == exitcodes.OK
    import json
    assert json.loads(capsys.readouterr().out)["severity"] == "unknown"

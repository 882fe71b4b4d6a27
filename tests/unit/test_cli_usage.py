"""`nodewarden analyze` and `events` refuse bad arguments before reading anything: exit 2 with a
message naming the argument, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import cli, exitcodes

envneeds.module("pandas", "offline analysis, the [analysis] extra")

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


# -- the one place errors become exit codes (cli.main) -----------------------------------------
# An error the user can fix is exit 2 with a message; anything else is exit 3 ("could not
# complete") with its traceback, never exit 2.

def _unexpected(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == exitcodes.INCOMPLETE, argv
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    return err


def test_an_error_building_the_report_is_exit_3_with_its_traceback(
        log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A ValueError out of the report's tables was taken for a bad --paper-tables file (exit 2).
    from nodewarden.analysis import report

    def build(*args, **kwargs):
        raise ValueError("cannot convert float NaN to integer")
    monkeypatch.setattr(report, "build", build)
    err = _unexpected(capsys, ["analyze", str(log), "--no-cache"])
    assert "nodewarden: analyze could not complete: ValueError: cannot convert float NaN to integer" in err


@pytest.mark.parametrize("command", ["analyze", "events"])
def test_an_error_starting_the_read_is_exit_3_with_its_traceback(
        log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str) -> None:
    # Any exception out of ingest() itself was printed as a usage error (exit 2).
    from nodewarden.analysis import ingest

    def broken(*args, **kwargs):
        raise RuntimeError("no free file descriptor")
    monkeypatch.setattr(ingest, "ingest", broken)
    err = _unexpected(capsys, [command, str(log), "--no-cache"])
    assert f"nodewarden: {command} could not complete: RuntimeError: no free file descriptor" in err


def test_an_error_while_events_are_written_is_exit_3_with_its_traceback(
        log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # It left cli.main as an exception (the interpreter's exit 1).
    from nodewarden.events import FaultEvent

    def to_json(self) -> str:
        raise KeyError("attrs")
    monkeypatch.setattr(FaultEvent, "to_json", to_json)
    err = _unexpected(capsys, ["events", str(log), "--no-cache"])
    assert "events could not complete: KeyError: 'attrs'" in err


def test_an_error_of_another_command_is_exit_3(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from nodewarden import catalog
    from nodewarden.catalog import sxid

    def fail(*args, **kwargs):
        raise RuntimeError("catalog damaged")
    monkeypatch.setattr(catalog, "explain", fail)
    monkeypatch.setattr(sxid, "lookup", fail)
    assert "xid could not complete: RuntimeError: catalog damaged" in _unexpected(capsys, ["xid", "79"])
    assert "sxid could not complete" in _unexpected(capsys, ["sxid", "12028"])


def test_a_missing_module_of_our_own_is_exit_3_the_missing_extra_exit_2(
        log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    import nodewarden.analysis as analysis
    for name in ("report", "tables"):
        monkeypatch.delattr(analysis, name)
        monkeypatch.delitem(sys.modules, f"nodewarden.analysis.{name}")
    monkeypatch.setitem(sys.modules, "nodewarden.analysis.report", None)  # a broken install of nodewarden
    assert "ModuleNotFoundError" in _unexpected(capsys, ["analyze", str(log), "--no-cache"])
    monkeypatch.delitem(sys.modules, "nodewarden.analysis.report")
    monkeypatch.setitem(sys.modules, "pandas", None)  # the [analysis] extra not installed
    assert "needs the [analysis] extra" in _usage(capsys, ["analyze", str(log), "--no-cache"])


def test_a_lost_task_is_exit_3_with_the_message_only(log: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from nodewarden.analysis import ingest
    from nodewarden.analysis.cluster import ClusterError

    def lost(*args, **kwargs):
        def events():
            raise ClusterError("the Dask cluster at tcp://h:8786 lost a parsing task")
            yield
        return events(), ingest.IngestStats()
    monkeypatch.setattr(ingest, "ingest", lost)
    for command in ("events", "analyze"):
        assert cli.main([command, str(log), "--no-cache"]) == exitcodes.INCOMPLETE
        err = capsys.readouterr().err
        assert "nodewarden: the Dask cluster at tcp://h:8786 lost a parsing task" in err and "Traceback" not in err


def test_a_closed_stdout_is_exit_0(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["events", str(log), "--no-cache"]) == exitcodes.OK


def test_usage_errors_of_other_commands_stay_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[xid.79]\naction = "explode"\n')
    assert "xid.79.action: invalid action 'explode'" in _usage(capsys, ["xid", "79", "--policy", str(policy)])
    assert "No such file" in _usage(capsys, ["xid", "79", "--policy", str(tmp_path / "none.toml")])
    rates = tmp_path / "rates.toml"
    rates.write_text("[beyond_paper]\nbogus = 1\n")
    assert "rates: [beyond_paper] 'bogus' is not one of" in _usage(
        capsys, ["simulate", "--out", str(tmp_path / "o"), "--rates", str(rates)])


def test_an_unreachable_scheduler_is_exit_2(log: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    envneeds.module("distributed", "analyze --scheduler, the [dask] extra")
    import socket

    from nodewarden.analysis import cluster
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    for command in ("events", "analyze"):
        assert f"cannot reach the Dask scheduler at {address}" in _usage(
            capsys, [command, str(log), "--no-cache", "--scheduler", address])


# -- analyze's window for flash cuts (nodewarden.analysis.tables) --------------------------------

CUT = ("2024-03-01T11:59:30+00:00 node01 kernel: mlx5_core 0000:53:00.0 mlx5_0: Port: 1 Link DOWN\n"
       "2024-03-01T12:00:20+00:00 node01 kernel: mlx5_core 0000:53:00.0 mlx5_0: Port: 1 Link ACTIVE\n")


def test_kinds_to_read() -> None:
    from nodewarden.analysis import tables
    assert tables.kinds_to_read(None) is None
    assert tables.kinds_to_read(frozenset({"xid"})) == {"xid"}
    assert tables.kinds_to_read(frozenset({"xid", "ib_flash_cut"})) == {"xid", "ib_flash_cut", "ib_link_down",
                                                                         "ib_link_up"}
    assert tables.FLASH_CUT_GRACE_S == 120.0  # twice flash_cuts' max_seconds
    assert tables.FLASH_CUT_GRACE_S >= 2 * 60.0


@pytest.mark.parametrize("kind", [[], ["--kind", "ib_flash_cut"]])
def test_a_cut_that_begins_before_until_is_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    kind: list[str]) -> None:
    # Its up line (20 s past --until) is read, so the 50 s drop is a cut of Table VIII's day.
    p = tmp_path / "node01.log"
    p.write_text(CUT)
    out = tmp_path / "r"
    assert cli.main(["analyze", str(p), "--no-cache", "--until", "2024-03-01T12:00:00Z", *kind,
                     "--out", str(out)]) == exitcodes.OK
    import csv
    with open(out / "ib_flash_cuts.csv") as f:
        cuts = list(csv.DictReader(f))
    assert [(c["time"][:19], c["device"], float(c["duration_s"])) for c in cuts] == [
        ("2024-03-01 11:59:30", "mlx5_0/1", 50.0)]
    with open(out / "table8_ib_flash_cuts_daily.csv") as f:
        assert [(r["date"], r["failure_count"]) for r in csv.DictReader(f)] == [("2024-03-01", "1")]


@pytest.mark.parametrize("argv, says", [
    (["xid", "-1"], "codes are 0 or above, got -1"), (["sxid", "-7"], "codes are 0 or above, got -7"),
    (["xid", "4x"], "not a whole number: '4x'"), (["sxid", ""], "not a whole number: ''"),
])
def test_a_negative_or_unreadable_code_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                        says: str) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == exitcodes.USAGE and says in capsys.readouterr().err
    assert cli.main(["xid", "0"]) == exitcodes.OK  # 0 is a code (not in the catalog: explained as unknown)

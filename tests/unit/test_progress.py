"""Progress of simulate, analyze and validate on stderr (nodewarden.progress): plain lines off a
terminal that count up to the total, rich bars on one, nothing with --quiet, and the commands'
output on stdout (and under --out) the same with progress as without."""

from __future__ import annotations

import io
import os
import re
import sys
import types
from pathlib import Path

import pytest

from nodewarden import exitcodes
from nodewarden.analysis.ingest import ingest
from nodewarden.cli import main
from nodewarden.progress import Progress, eta_seconds, for_ingest, for_simulate, format_count, plain_line

REPO = Path(__file__).resolve().parents[2]
SYSFS = REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
SIMULATE = ["simulate", "--nodes", "3", "--days", "5", "--seed", "1"]
VALIDATE = ["validate", "--checks", "links", "--profile", "generic", "--sysfs", str(SYSFS), "--procfs", str(SYSFS)]


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet") / "logs"
    assert main([*SIMULATE, "--out", str(out), "--quiet"]) == exitcodes.OK
    return out


def lines_of(err: str, command: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"nodewarden {command}: ")]


# --- the pure parts --------------------------------------------------------------------------

@pytest.mark.parametrize("elapsed, done, total, left", [
    (10.0, 1, 4, 30.0), (3.0, 3, 3, 0.0), (5.0, 0, 10, None), (5.0, 2, None, None), (2.0, 0.25, 1.0, 6.0),
])
def test_eta_is_the_rate_so_far(elapsed: float, done: float, total: float | None, left: float | None) -> None:
    assert eta_seconds(elapsed, done, total) == left


@pytest.mark.parametrize("done, total, unit, text", [
    (2, 3, "nodes", "2/3 nodes"), (1536, 3 * 2**20, "bytes", "1.5 KiB/3.0 MiB"), (0.4, 1.0, "fraction", "40%"),
    (1234, None, "lines", "1,234 lines"),
])
def test_counts_are_written_in_their_unit(done: float, total: float | None, unit: str, text: str) -> None:
    assert format_count(done, total, unit) == text


def test_a_plain_line_has_count_share_text_and_eta() -> None:
    assert plain_line("simulate", "write", 1, 4, "nodes", "41 lines", 10.0) == \
        "nodewarden simulate: write 1/4 nodes (25%), 41 lines, 10s elapsed, ETA 30s"


def test_plain_lines_are_rate_limited_to_a_tenth_or_a_second_first_and_last_kept() -> None:
    clock, err = Clock(), io.StringIO()
    p = Progress("simulate", stream=err, clock=clock)
    assert p.mode == "plain"  # a StringIO is no terminal
    for n in range(1, 101):  # no time passes: a line per 10 % of the total
        p.update("write", n, total=100, unit="nodes")
    counts = [int(m) for m in re.findall(r"write (\d+)/100", err.getvalue())]
    assert counts == [1, 11, 21, 31, 41, 51, 61, 71, 81, 91, 100]

    err.truncate(0), err.seek(0)
    p = Progress("simulate", stream=err, clock=clock)
    for n in range(1, 1001):  # 1000 steps over 5 s: a line a second, by time, not by share
        clock.t += 0.005
        p.update("write", n, total=1_000_000, unit="nodes")
    assert len(err.getvalue().splitlines()) == 1 + 4  # the first, then one a second (~1 s of 5 s each)
    p.update("write", 1_000_000, total=1_000_000)
    p.update("write", 1_000_000, total=1_000_000)  # the last line once only
    assert err.getvalue().splitlines()[-1].startswith("nodewarden simulate: write 1,000,000/1,000,000 nodes (100%)")
    assert sum("1,000,000/1,000,000" in line for line in err.getvalue().splitlines()) == 1
    p.update("write", 1_000_000, "done", total=1_000_000)  # a new text at the end is shown
    assert err.getvalue().splitlines()[-1].startswith(
        "nodewarden simulate: write 1,000,000/1,000,000 nodes (100%), done")


def test_quiet_draws_nothing_and_closed_draws_no_more() -> None:
    err = io.StringIO()
    p = Progress("analyze", quiet=True, stream=err, tty=True)
    p.update("read", 5, total=10)
    assert p.mode == "quiet" and err.getvalue() == ""
    p = Progress("analyze", stream=err)
    with p:
        p.update("read", 1, total=10)
    p.update("read", 10, total=10)
    assert len(err.getvalue().splitlines()) == 1


# --- the terminal path -----------------------------------------------------------------------

def test_rich_bars_render_on_a_terminal() -> None:
    from rich.console import Console
    screen = io.StringIO()
    with Progress("simulate", console=Console(force_terminal=True, file=screen, width=120)) as p:
        assert p.mode == "rich"
        step = for_simulate(p)
        for n in range(1, 4):
            step(n, 3, 40 * n)
    shown = screen.getvalue()
    assert "\x1b[" in shown  # drawn with terminal codes
    assert "write" in shown and "3/3 nodes" in shown and "120 lines" in shown and "100%" in shown


def test_a_pty_gets_bars_and_a_missing_rich_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    leader, follower = os.openpty()
    with open(follower, "w") as tty, open(leader, "rb", buffering=0):
        p = Progress("analyze", stream=tty)
        assert p.mode == "rich"
        p.update("read", 10, "1/1 files", total=10, unit="bytes")
        p.close()
        monkeypatch.setitem(sys.modules, "rich.progress", None)  # the core install: no rich
        p = Progress("analyze", stream=tty)
        assert p.mode == "plain"
        p.close()


# --- the commands ----------------------------------------------------------------------------

def test_simulate_counts_its_nodes_to_the_total_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SIMULATE, "--out", str(tmp_path / "a")]) == exitcodes.OK
    loud = capsys.readouterr()
    assert main([*SIMULATE, "--out", str(tmp_path / "b"), "--quiet"]) == exitcodes.OK
    quiet = capsys.readouterr()
    lines = lines_of(loud.err, "simulate")
    assert [int(m) for line in lines for m in re.findall(r"write (\d+)/3 nodes", line)] == [1, 2, 3]
    summary_lines = re.search(r'"lines": (\d+)', loud.out).group(1)  # type: ignore[union-attr]
    assert lines[-1].startswith(f"nodewarden simulate: write 3/3 nodes (100%), {int(summary_lines):,} lines")
    assert quiet.err == ""
    assert loud.out == quiet.out
    for path in (tmp_path / "a").rglob("*"):  # the files written are the same too
        if path.is_file():
            assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_analyze_counts_files_bytes_and_events(fleet: Path, tmp_path: Path, jobs: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    args = ["analyze", str(fleet), "--no-cache", "--jobs", jobs]
    assert main([*args, "--out", str(tmp_path / "a")]) == exitcodes.OK
    loud = capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "b"), "--quiet"]) == exitcodes.OK
    quiet = capsys.readouterr()
    files = [p for p in fleet.rglob("*") if p.is_file() and p.name != "ground_truth.csv"]  # simulate's, not read
    lines = lines_of(loud.err, "analyze")
    done = [int(m) for line in lines for m in re.findall(rf"(\d+)/{len(files)} files", line)]
    assert done and done == sorted(done) and done[-1] == len(files)
    assert "(100%)" in lines[-1]
    events = int(re.search(r"(\d+) events", lines[-1]).group(1))  # type: ignore[union-attr]
    truth_rows = len((fleet / "ground_truth.csv").read_text().splitlines()) - 1
    assert events == truth_rows  # every fault of the fleet found
    assert quiet.err == ""
    assert loud.out.replace(str(tmp_path / "a"), str(tmp_path / "b")) == quiet.out
    written = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert written == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.*"))
    for name in written:  # the tables and the report: the same, no progress in them
        if name.suffix in (".md", ".csv"):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_ingest_reports_each_input_as_the_pool_returns_it(fleet: Path) -> None:
    seen = []
    events, stats = ingest([str(fleet)], jobs=2, progress=seen.append)
    n = sum(1 for _ in events)
    sizes = sum(p.stat().st_size for p in fleet.rglob("*") if p.is_file() and p.name != "ground_truth.csv")
    assert [p.inputs_done for p in seen] == list(range(1, stats.files + 1))
    assert {p.inputs for p in seen} == {stats.files}
    assert seen[-1].bytes_done == seen[-1].bytes_total == sizes
    assert seen[-1].events == stats.events == n
    assert {p.host for p in seen} >= {"node0001", "node0002", "node0003"}


def test_validate_reports_each_checks_phases(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from nodewarden.validator import runner
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(monotonic=lambda: 0.0))  # durations in the table
    assert main(VALIDATE) == exitcodes.OK
    loud = capsys.readouterr()
    assert main([*VALIDATE, "--quiet"]) == exitcodes.OK
    quiet = capsys.readouterr()
    assert main([*VALIDATE, "--no-progress"]) == exitcodes.OK
    old = capsys.readouterr()
    lines = lines_of(loud.err, "validate")
    assert lines[0].startswith("nodewarden validate: links 0%, starting")
    assert lines[-1].startswith("nodewarden validate: links 100%, pass")
    assert any(", pcie" in line for line in lines[1:-1])  # a phase the check reports
    assert quiet.err == old.err == ""
    assert loud.out == quiet.out == old.out


def test_for_ingest_draws_the_bytes_of_the_files() -> None:
    clock, err = Clock(), io.StringIO()
    p = Progress("analyze", stream=err, clock=clock)
    step = for_ingest(p)
    step(types.SimpleNamespace(input_id="x", host="node0001", inputs_done=1, inputs=2, bytes_done=0,
                               bytes_total=2048, events=0))
    clock.t += 2.0
    step(types.SimpleNamespace(input_id="y", host="node0002", inputs_done=2, inputs=2, bytes_done=512,
                               bytes_total=2048, events=3))
    assert err.getvalue().splitlines() == [
        "nodewarden analyze: read 0 B/2.0 KiB (0%), 1/2 files, 0 events, node0001, 0s elapsed",
        "nodewarden analyze: read 512 B/2.0 KiB (25%), 2/2 files, 3 events, node0002, 2s elapsed, ETA 6s"]

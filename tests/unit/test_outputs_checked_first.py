"""Every output option is checked before the command's work starts: a path that cannot take the
output exits 2 (usage) naming the option and the path, and the suite, the log reading or the
fleet simulation never starts. Paths under a regular file stand for the unwritable ones: they
fail for root too, where mode bits would not."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodewarden import exitcodes
from nodewarden.cli import main


class Started(BaseException):
    """Raised by the command's work in place of running it (not an Exception: main lets it out)."""


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace each command's work with a recorder that stops the command when it is reached."""
    from nodewarden.analysis import ingest, simulate
    from nodewarden.validator import runner
    started: list[str] = []

    def stand_in(name: str):
        def start(*args, **kwargs):
            started.append(name)
            raise Started(name)
        return start

    monkeypatch.setattr(runner, "run_suite", stand_in("validate"))
    monkeypatch.setattr(ingest, "ingest", stand_in("analyze"))
    monkeypatch.setattr(simulate, "simulate", stand_in("simulate"))
    return started


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    f = tmp_path / "plain"
    f.write_text("a regular file\n")
    return f


def validate(*opts: str) -> list[str]:
    return ["validate", "--checks", "links", "--profile", "generic", "--no-progress", *opts]


def analyze(log: Path, *opts: str) -> list[str]:
    return ["analyze", str(log), "--no-cache", "--jobs", "1", *opts]


def simulate(*opts: str) -> list[str]:
    return ["simulate", "--nodes", "2", "--days", "1", *opts]


@pytest.mark.parametrize("argv, option, under", [
    (validate("--textfile", "{f}/sub"), "--textfile", "{f}/sub"),
    (validate("--textfile", "{f}"), "--textfile", "{f}"),
    (validate("--json", "{f}/sub/report.json"), "--json", "{f}/sub/report.json"),
    (validate("--baseline", "{f}/sub/baseline.json"), "--baseline", "{f}/sub/baseline.json"),
    (analyze(Path("{f}"), "--out", "{f}/sub/deeper"), "--out", "{f}/sub/deeper"),
    (analyze(Path("{f}"), "--out", "{f}"), "--out", "{f}"),
    (simulate("--out", "{f}/sub"), "--out", "{f}/sub"),
    (simulate("--out", "{f}"), "--out", "{f}"),
])
def test_an_output_that_cannot_be_written_stops_before_the_work(
        work: list[str], a_file: Path, capsys: pytest.CaptureFixture[str],
        argv: list[str], option: str, under: str) -> None:
    argv = [a.replace("{f}", str(a_file)) for a in argv]
    assert main(argv) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert f"{option}" in err and under.replace("{f}", str(a_file)) in err
    assert work == []  # nothing ran
    assert a_file.read_text() == "a regular file\n"  # and nothing was written over the file


def test_analyze_out_whose_parents_are_missing_is_made_by_the_command(
        work: list[str], a_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "reports" / "2026-12"
    with pytest.raises(Started):
        main(analyze(a_file, "--out", str(out)))
    assert work == ["analyze"]


@pytest.mark.parametrize("argv", [
    validate("--textfile", "{d}", "--json", "{d}/report.json", "--baseline", "{d}/baseline.json"),
    simulate("--out", "{d}/new/fleet"),
])
def test_writable_outputs_let_the_work_start(work: list[str], tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(Started):
        main([a.replace("{d}", str(tmp_path)) for a in argv])
    assert len(work) == 1


def test_a_broken_symlink_as_out_is_named(work: list[str], a_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert main(simulate("--out", str(tmp_path / "gone" / "fleet"))) == exitcodes.USAGE
    assert "broken symbolic link" in capsys.readouterr().err and work == []

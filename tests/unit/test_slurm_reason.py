"""The Slurm drain reason is cut at a word with ASCII "...", to at most the limit: by the
validator's DRAIN lines (nodewarden.validator.report.cut_reason) and by the Slurm wrapper
(deploy/slurm/nodewarden-healthcheck.sh, NODEWARDEN_REASON_MAX), run against a fake
`nodewarden` and a fake `scontrol` that record their arguments."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from nodewarden.validator import report
from nodewarden.validator.result import CheckResult

HEALTHCHECK = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "nodewarden-healthcheck.sh"
LINKS = "nodewarden links: mlx5_3/1 state DOWN phys_state Polling (expected LinkUp)"  # 74 characters

# (text, limit, reason): the same rule in Python and in the wrapper
CASES = [
    (LINKS, 74, LINKS),  # fits exactly
    (LINKS, 200, LINKS),
    (LINKS, 73, "nodewarden links: mlx5_3/1 state DOWN phys_state Polling (expected..."),
    # "DOWN" ends at 37: with room for 37 characters and the dots it is whole, with 36 it is left out
    (LINKS, 40, "nodewarden links: mlx5_3/1 state DOWN..."),
    (LINKS, 39, "nodewarden links: mlx5_3/1 state..."),
    ("nodewarden gemm: fp16  " + "x" * 300, 128, "nodewarden gemm: fp16..."),  # spaces before the dots dropped
    ("nodewarden: " + "A" * 200, 128, "nodewarden:..."),
    ("Z" * 200, 128, "Z" * 125 + "..."),  # one word longer than the limit: cut hard
    ("Z" * 200, 4, "Z..."),
    ("abc def", 3, "abc"),  # no room for the dots
    ("abc def", 1, "a"),
]


@pytest.mark.parametrize("text, limit, reason", CASES)
def test_cut_reason(text: str, limit: int, reason: str) -> None:
    cut = report.cut_reason(text, limit)
    assert cut == reason
    assert len(cut) <= limit


def test_drain_lines_are_cut_at_a_word() -> None:
    r = CheckResult("links", "fail", reason=" ".join(f"mlx5_{i}/1 state DOWN" for i in range(12)))
    ok = CheckResult("gemm", "pass", reason="fine")
    (line,) = report.drain_lines([r, ok], "node01")
    # 18 + 9 * 20 - 1 = 197 characters of whole words, then the dots: 200
    assert line == "nodewarden links: " + " ".join(f"mlx5_{i}/1 state DOWN" for i in range(9)) + "..."
    assert len(line) == report.REASON_MAX


FAKE_NODEWARDEN = """#!/bin/sh
printf '%s\\n' "$FAKE_OUTPUT"
exit 1
"""
FAKE_SCONTROL = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_LOG/scontrol.args"
"""


@pytest.fixture
def drain_reason(tmp_path: Path):
    """The reason the wrapper gives scontrol for a DRAIN: line, under NODEWARDEN_REASON_MAX."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("nodewarden", FAKE_NODEWARDEN), ("scontrol", FAKE_SCONTROL)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755 | stat.S_IXUSR)

    def run(text: str, limit: int | None) -> str:
        env = {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "FAKE_LOG": str(tmp_path),
               "FAKE_OUTPUT": f"DRAIN: {text}", "NODEWARDEN_NODENAME": "node01",
               "NODEWARDEN_JSON": str(tmp_path / "hc.json"),
               "NODEWARDEN_DEFAULTS": str(tmp_path / "no-defaults"), "TMPDIR": str(tmp_path)}
        if limit is not None:
            env["NODEWARDEN_REASON_MAX"] = str(limit)
        p = subprocess.run(["/bin/sh", str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 1, p.stderr
        args = (tmp_path / "scontrol.args").read_text().splitlines()
        assert args[:3] == ["update", "nodename=node01", "state=drain"]
        return args[3].removeprefix("reason=")

    return run


def test_wrapper_cuts_as_the_validator(drain_reason) -> None:
    for text, limit, reason in CASES:
        assert drain_reason(text, limit) == reason, (text, limit)


def test_wrapper_default_is_128_and_ascii(drain_reason) -> None:
    text = "nodewarden gemm: fp16 40 TFLOP/s \u2265 600 TFLOP/s " + "on GPU 3 " * 20
    reason = drain_reason(text, None)
    assert reason == ("nodewarden gemm: fp16 40 TFLOP/s  600 TFLOP/s " + "on GPU 3 " * 8 + "on GPU...")
    assert len(reason) <= 128 and reason.isascii()

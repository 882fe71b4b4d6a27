"""The environment rule of tests/envneeds.py, run in a child pytest: a missing piece skips the
test outside CI (and the summary groups it by piece) and fails it under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

NEEDS = '''
from tests import envneeds

def test_command():
    envneeds.command("nodewarden-no-such-program", "the demo")

def test_module():
    envneeds.module("nodewarden_no_such_module", "the demo")

@envneeds.needs(True, "demo piece", "the mark")
def test_mark():
    pass

@envneeds.needs(False, "demo piece", "the mark")
def test_present():
    pass

def test_not_built_here():
    envneeds.need("demo wheel", "no wheels here", expected=False)
'''


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_demo.py").write_text(NEEDS)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "tests.conftest", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_piece_skips_and_is_listed(tmp_path: Path) -> None:
    p = run(tmp_path, None)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 4 skipped" in p.stdout
    assert "environment: nodewarden-no-such-program missing: the demo" in p.stdout
    assert "environment pieces missing" in p.stdout
    assert "demo piece: 1 skipped" in p.stdout and "nodewarden_no_such_module: 1 skipped" in p.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_piece_fails(tmp_path: Path, ci: str) -> None:
    p = run(tmp_path, ci)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "CI=true: nodewarden-no-such-program missing: the demo" in p.stdout
    assert "CI=true: nodewarden_no_such_module missing: the demo" in p.stdout
    assert "CI=true: demo piece missing: the mark" in p.stdout
    # a piece not built for this platform stays a skip; a present piece passes
    assert "2 failed, 1 passed, 1 skipped, 1 error" in p.stdout, p.stdout

"""Suite-wide settings: the event cache of `nodewarden events/analyze` (on by default, under
$XDG_CACHE_HOME) goes to a temporary directory, never into the user's home; the environment rule
of tests/envneeds.py (a missing program, package or privilege skips outside CI and fails under
``CI=true``), with its skips grouped by piece at the end of the run."""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter

import pytest

from tests.envneeds import MARKER, SKIP_PREFIX, in_ci, need

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nodewarden-test-cache-")

_ENV_SKIP = re.compile(re.escape(SKIP_PREFIX) + r"(?P<piece>.+?) missing: ")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(piece, why, missing): needs an environment piece (tests/envneeds.py: needs)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers(MARKER):
        if mark.kwargs.get("missing"):
            need(*mark.args, expected=mark.kwargs.get("expected", True))


def environment_skips(reports: list) -> Counter[str]:
    """Count the skips of ``reports`` (test and collection reports) that tests/envneeds.py
    made, per missing piece."""
    pieces: Counter[str] = Counter()
    for report in reports:
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
        m = _ENV_SKIP.search(reason)
        if m:
            pieces[m.group("piece")] += 1
    return pieces


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    pieces = environment_skips(terminalreporter.stats.get("skipped", []))
    if not pieces:
        return
    terminalreporter.section("environment pieces missing (skipped here; CI=true fails them)", yellow=True)
    for piece, n in sorted(pieces.items()):
        terminalreporter.line(f"{piece}: {n} skipped")
    if not in_ci():
        terminalreporter.line("sh tests/run.sh installs them where it can (as root with apt)")

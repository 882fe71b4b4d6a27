"""The README's "what you see" examples are what the commands print today: each ```text block
that starts with a ``$ nodewarden ...`` (or a ``curl`` of /metrics) line is run again here, on the
same inputs the README names, and compared line for line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
FIXTURES = REPO / "tests" / "fixtures"


def block(command_start: str) -> list[str]:
    """The lines after the ``$ <command_start>...`` line of the README's text block, up to its end."""
    m = re.search(r"```text\n(?:[^\n]*\n)*?\$ " + re.escape(command_start) + r"[^\n]*\n((?:(?!```)[^\n]*\n)*)```", README)
    assert m, f"README has no text block running {command_start!r}"
    return m.group(1).splitlines()


def nodewarden(*args: str, env: dict[str, str] | None = None, rc: int = 0) -> list[str]:
    p = subprocess.run([sys.executable, "-m", "nodewarden", *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})}, cwd=REPO)
    assert p.returncode == rc, p.stderr
    return p.stdout.splitlines()


def test_the_xid_example_is_what_xid_prints() -> None:
    assert nodewarden("xid", "79") == block("nodewarden xid 79")


def test_the_events_example_is_what_events_prints() -> None:
    out = nodewarden("events", "--kind", "xid", "tests/fixtures/real_cases/X-001.log")
    fields = ("kind", "xid", "device", "category", "raw_time")  # the README's jq filter
    got = [json.dumps({k: json.loads(line)[k] for k in fields}, separators=(",", ":")) for line in out[:2]]
    assert got == block("nodewarden events --kind xid")


def test_the_metrics_example_lines_are_in_the_golden_file() -> None:
    golden = (REPO / "tests/golden/h100-hgx-ndr-aer.prom").read_text().splitlines()
    pattern = re.compile(r'^nodewarden_(pcie_aer_bit_errors_total|gpu_ecc_errors_total\{gpu="0",scope="volatile")')
    assert [line for line in golden if pattern.search(line)] == block("curl -s localhost:9764/metrics")


def test_the_validate_example_is_what_a_port_down_prints(tmp_path: Path) -> None:
    """The README's tree: h100-hgx-ndr with mlx5_3 port 1 DOWN/Disabled; exit 1 and its DRAIN line."""
    tree = tmp_path / "sys"
    shutil.copytree(FIXTURES / "sysfs/h100-hgx-ndr", tree, symlinks=True)
    port = (tree / "class/infiniband/mlx5_3/ports/1").resolve()
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("3: Disabled\n")
    out = nodewarden("validate", "--checks", "links", "--sysfs", str(tree), "--profile", "h100_sxm5_80gb", "--quiet",
                     env={"COLUMNS": "120"}, rc=1)
    want = block("nodewarden validate --checks links")
    got = [line.rstrip() for line in out if line.strip() and "nodewarden validate" not in line]
    seconds = re.compile(r"\b\d+\.\ds ")  # the time column: this run's, not the README's
    assert [seconds.sub("T.Ts ", line) for line in got] == [seconds.sub("T.Ts ", line) for line in want]


def test_the_analyze_example_is_table_v_of_the_40_node_fleet(tmp_path: Path) -> None:
    nodewarden("simulate", "--nodes", "40", "--out", str(tmp_path / "f40"), "--quiet")
    out = nodewarden("analyze", str(tmp_path / "f40"), "--quiet", "--no-cache")
    want = block("nodewarden analyze f40")
    assert out[:len(want)] == want

"""`nodewarden analyze` over the real-case corpus (tests/fixtures/real_cases, one directory per
case as if each were a node): the counts per kind and per Xid equal the events the corpus says
its cases hold (the expected lists of test_real_cases.py, written from the corpus text)."""

from __future__ import annotations

import collections
import csv
import os
import shutil
from pathlib import Path

import pytest

from tests import envneeds

envneeds.module("pandas", "offline analysis, the [analysis] extra")

from nodewarden.cli import main  # noqa: E402

from test_real_cases import CPU_CASES, FIXTURES, IB_CASES, REFERENCE, XID_CASES  # noqa: E402

CASES = [p.values for p in (*XID_CASES, *CPU_CASES, *IB_CASES)]
# The statistics count what the kernel reported: a case's line that user space wrote into the
# kernel log (facility not kern, X-025's syslog facility) is left out and counted apart.
KERNEL = [e for _, events in CASES for e in events if not e.get("injected")]
INJECTED = sum(1 for _, events in CASES for e in events if e.get("injected"))


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("real")
    stamp = REFERENCE.timestamp()  # year-less stamps take their year from the file's mtime
    for case, _ in CASES:
        d = base / "logs" / case
        d.mkdir(parents=True)
        shutil.copyfile(FIXTURES / f"{case}.log", d / "kern.log")
        os.utime(d / "kern.log", (stamp, stamp))
    assert main(["analyze", str(base / "logs"), "--out", str(base / "report"), "--no-cache"]) == 0
    return base / "report"


def test_lines_user_space_wrote_are_counted_apart(report: Path) -> None:
    text = (report / "report.md").read_text()
    assert f"lines user space wrote into the kernel log (not faults): {INJECTED}" in text


def test_counts_per_kind_are_the_cases_events(report: Path) -> None:
    assert INJECTED >= 1
    want = collections.Counter(e["kind"] for e in KERNEL)
    assert want["xid"] > 50 and want["cpu_ecc"] and want["ib_link_down"]
    got = {r["kind"]: int(r["count"]) for r in _read(report / "events_by_kind.csv")}
    assert got == dict(want)


def test_xid_counts_are_the_cases_xids(report: Path) -> None:
    want = collections.Counter(e["xid"] for e in KERNEL if e["kind"] == "xid")
    rows = _read(report / "table6_xid_counts.csv")
    got = {int(r["xid"]): int(r["count"]) for r in rows if r["group"] != "Total"}
    assert got == dict(want)
    assert [int(r["count"]) for r in rows if r["group"] == "Total"] == [sum(want.values())]

"""`nodewarden simulate` keeps the rates file's rates per node-day: another --nodes scales every
count by nodes / [fleet] nodes, and a --days window keeps the per-day rates (cut inside the
span, the span's schedule again past it). The default fleet is drawn exactly as the paper's
tables say (tests/unit/test_simulate.py checks those numbers).

Where the scaling is a whole number the counts are exact (each draw of the span holds every
count of the rates file). Otherwise each (kind, Xid, table source) group keeps floor or ceil of
n * scale of its n faults: the bounds below are that "within one fault", not a statistical band.
Only the part of a span a window keeps is random (uniform placement over the span): there the
bound is a binomial one, stated where it is used."""

from __future__ import annotations

import collections
import csv
import datetime as dt
import json
import math
import random
from pathlib import Path

import pytest

import test_simulate
from nodewarden.analysis import simulate as sim
from nodewarden.cli import main

# test_simulate.py's small fleet (6 nodes, 30 days, 2023-10-20 .. 2023-11-18: 33 Xid lines, 7 CPU
# ECC, 7 flash cuts), with one noise line per node-day and no reboots: the same faults, less to write
SMALL_RATES = (test_simulate.SMALL_RATES.replace("noise_per_node_day = 15", "noise_per_node_day = 1")
               .replace("reboots_per_node_year = 40", "reboots_per_node_year = 0")
               .replace("rotation_days = 3", "rotation_days = 7"))
assert SMALL_RATES.count("noise_per_node_day = 1\n") == 1 and "reboots_per_node_year = 0" in SMALL_RATES


def _small_rates() -> str:
    return SMALL_RATES


def _groups(faults) -> collections.Counter:
    """Lines per (kind, Xid, table source), the unit the scaling keeps to within one (an Xid 13
    fault is a burst of lines; any other fault one)."""
    c = collections.Counter()
    for f in faults:
        c[(f.kind, f.xid or 0, f.source)] += f.burst
    return c


def _lines(faults) -> collections.Counter:
    """Xid lines per code (an Xid 13 fault is a burst), flash cuts, CPU ECC: what the tables count."""
    c = collections.Counter()
    for f in faults:
        c[(f.kind, f.xid or 0)] += f.burst if f.kind == "xid" else 1
    return c


def _default(scale: float, win_a: int | None = None, win_b: int | None = None, seed: int = 0):
    rates = sim.load_rates()
    a, b = sim.rates_span(rates)
    return sim.window_schedule(rates, random.Random(f"{seed}:schedule"), seed,
                               a if win_a is None else win_a, b if win_b is None else win_b, scale)


def test_default_fleet_draws_the_papers_schedule_unchanged() -> None:
    """1250 nodes over the whole span: nothing scaled, the very schedule the paper's tables give."""
    rates = sim.load_rates()
    assert sim.rates_nodes(rates) == 1250
    alone, a, b = sim._schedule(rates, random.Random("0:schedule"))
    got = _default(1250 / sim.rates_nodes(rates))
    assert [(f.t, f.kind, f.xid, f.source, f.burst) for f in got] == \
        [(f.t, f.kind, f.xid, f.source, f.burst) for f in alone]
    lines = _lines(got)
    assert sum(n for (kind, _), n in lines.items() if kind == "xid") == 12970
    assert lines[("ib_flash_cut", 0)] == 213 and lines[("cpu_ecc", 0)] == 54


@pytest.mark.parametrize("nodes", [625, 20, 40, 311])
def test_fewer_nodes_keep_the_per_node_rates(nodes: int) -> None:
    """N of 1250 nodes: every group keeps floor or ceil of n * N / 1250 of its n faults."""
    full = _groups(_default(1.0))
    scale = nodes / 1250
    got = _groups(_default(scale))
    assert set(got) <= set(full)
    for key, n in full.items():
        assert math.floor(n * scale) <= got[key] <= math.ceil(n * scale), (key, n, got[key])
        # per node: the same rate as the paper's fleet, to within one fault of the smaller fleet
        assert abs(got[key] / nodes - n / 1250) < 1 / nodes
    if nodes == 625:  # even counts halve exactly: Xid 43 (4342), Table VII's Xid 63 (120), CPU ECC (54)
        assert got[("xid", 43, "VI")] == 2171 and got[("xid", 63, "VII")] == 60 and got[("cpu_ecc", 0, "VII")] == 27
        assert got[("xid", 74, "VI")] in (2760, 2761) and got[("ib_flash_cut", 0, "VIII")] in (106, 107)


def test_more_nodes_multiply_every_count_exactly() -> None:
    """2500 nodes: two draws of the span, every count twice the paper's, Table VIII's days included."""
    full, double = _default(1.0), _default(2.0)
    assert _lines(double) == collections.Counter({k: 2 * n for k, n in _lines(full).items()})

    def days(faults) -> collections.Counter:
        return collections.Counter(dt.datetime.fromtimestamp(f.t // sim.US, dt.timezone.utc).date().isoformat()
                                   for f in faults if f.kind == "ib_flash_cut")
    assert days(double) == collections.Counter({d: 2 * n for d, n in days(full).items()})
    triple_and_a_half = _groups(_default(3.5))  # four draws, each group keeping 3.5 times its count
    for k, n in _groups(full).items():
        assert math.floor(3.5 * n) <= triple_and_a_half[k] <= math.ceil(3.5 * n), k


def test_scaling_is_fixed_by_the_seed() -> None:
    def key(faults) -> list[tuple]:
        return [(f.t, f.kind, f.xid, f.source) for f in faults]
    assert key(_default(0.3, seed=7)) == key(_default(0.3, seed=7))
    assert key(_default(0.3, seed=7)) != key(_default(0.3, seed=8))


def test_a_shorter_window_keeps_the_per_day_rates() -> None:
    """The first half of the span: the same faults as the whole span's before its end, Table
    VIII's days inside it exactly, and each Xid spread over the span uniformly: binomial (n
    draws, p = 174/348), within 5 standard deviations of n * p (a fixed draw per seed; the
    band is where a fair one lands)."""
    rates = sim.load_rates()
    a, b = sim.rates_span(rates)
    half = a + 174 * sim.DAY_US
    full, first = _default(1.0), _default(1.0, a, half)
    assert [(f.t, f.kind, f.xid) for f in full if f.t < half] == [(f.t, f.kind, f.xid) for f in first]
    daily = {d: n for d, n in rates["ib_daily"].items() if d < "2023-10-10"}  # 2023-04-19 + 174 days
    cuts = collections.Counter(dt.datetime.fromtimestamp(f.t // sim.US, dt.timezone.utc).date().isoformat()
                               for f in first if f.kind == "ib_flash_cut")
    assert cuts == collections.Counter({d: n for d, n in daily.items() if n})
    for code in (74, 43, 31):
        n, p = rates["xid_year"][str(code)], 174 / 348
        got = sum(1 for f in first if f.kind == "xid" and f.xid == code)
        assert abs(got - n * p) <= 5 * math.sqrt(n * p * (1 - p)), (code, got)


def test_a_window_past_the_span_repeats_it() -> None:
    """Two spans from the start: every count twice; the second span alone: the tables again,
    Table VIII's days shifted by one span (348 days)."""
    rates = sim.load_rates()
    a, b = sim.rates_span(rates)
    span = b - a
    full = _lines(_default(1.0))
    assert _lines(_default(1.0, a, b + span)) == collections.Counter({k: 2 * n for k, n in full.items()})
    second = _default(1.0, b, b + span)
    assert _lines(second) == full
    shifted = collections.Counter(
        (dt.date.fromisoformat(d) + dt.timedelta(days=348)).isoformat() for d, n in rates["ib_daily"].items()
        for _ in range(n))
    assert collections.Counter(dt.datetime.fromtimestamp(f.t // sim.US, dt.timezone.utc).date().isoformat()
                               for f in second if f.kind == "ib_flash_cut") == shifted
    before = _default(1.0, a - span, a)  # a window before the span too
    assert _lines(before) == full


def _truth(root: Path) -> collections.Counter:
    with open(root / "ground_truth.csv") as f:
        return collections.Counter((r["kind"], r["xid"], r["table_source"]) for r in csv.DictReader(f))


def test_cli_half_and_double_the_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rates file is for 6 nodes: 12 nodes write every ground-truth count twice, 3 nodes
    half of each (to within one line), --fault-scale 1 the file's totals."""
    rates = tmp_path / "small.toml"
    rates.write_text(_small_rates())
    runs = {}
    for name, extra in (("n6", ["--nodes", "6"]), ("n12", ["--nodes", "12"]), ("n3", ["--nodes", "3"]),
                        ("n3-totals", ["--nodes", "3", "--fault-scale", "1"])):
        assert main(["simulate", "--out", str(tmp_path / name), "--rates", str(rates), "--seed", "2",
                     "--noise", "1", *extra]) == 0
        runs[name] = (_truth(tmp_path / name), json.loads(capsys.readouterr().out))
    six, twelve, three, totals = (runs[k][0] for k in ("n6", "n12", "n3", "n3-totals"))
    assert [runs[k][1]["fault_scale"] for k in ("n6", "n12", "n3", "n3-totals")] == [1.0, 2.0, 0.5, 1.0]
    assert sum(six.values()) == 7 + 5 + 6 + 8 + 5 + 1 + 1 + 7 + 7  # the file's Xid lines, CPU ECC, cuts
    assert twelve == collections.Counter({k: 2 * n for k, n in six.items()})
    assert totals == six
    for key, n in six.items():  # Xid 13's 7 lines too: 3 or 4, its bursts cut to fit
        assert math.floor(n / 2) <= three[key] <= math.ceil(n / 2), (key, n, three[key])
    # per node: 12 nodes' rate is 6 nodes' exactly
    assert sum(twelve.values()) / 12 == sum(six.values()) / 6
    assert {d.name for d in (tmp_path / "n12").iterdir() if d.is_dir()} == {f"node{h:04d}" for h in range(1, 13)}


@pytest.mark.parametrize("scale", ["-1", "nan", "1e9"])
def test_bad_fault_scale_is_a_usage_error(tmp_path: Path, scale: str, capsys: pytest.CaptureFixture[str]) -> None:
    rates = tmp_path / "small.toml"
    rates.write_text(_small_rates())
    assert main(["simulate", "--out", str(tmp_path / "o"), "--rates", str(rates), "--fault-scale", scale]) == 2
    assert "fault scale must be from 0 to" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("nodes", ["0", "-3", "2.5", '"many"', "true"])
def test_rates_nodes_must_be_a_fleet_size(tmp_path: Path, nodes: str) -> None:
    rates = tmp_path / "bad.toml"
    rates.write_text(_small_rates().replace("nodes = 6", f"nodes = {nodes}"))
    with pytest.raises(ValueError, match=r"\[fleet\] nodes = .* is not a whole number from 1"):
        sim.simulate(tmp_path / "logs", rates=rates)


def test_help_says_the_rates_are_per_node_day(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rates per node-day" in text and "fleet totals for its [fleet] nodes" in text
    assert "--fault-scale" in text and "Per-day rates are kept" in text

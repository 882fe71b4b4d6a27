"""The cpu check: one pinned worker per usable CPU computing known answers. A wrong answer on one
core fails naming that CPU; a core far slower than the median fails by the outlier rule; a
powersave governor warns; frequency and governors come from the run's sysfs/procfs roots."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nodewarden.sysfs import cpufreq
from nodewarden.validator.base import RunContext
from nodewarden.validator.checks import cpu
from nodewarden.validator.result import ERROR, FAIL, PASS, WARN
from nodewarden.validator.runner import run_check

CPUS = sorted(os.sched_getaffinity(0))
# Other test runs share this machine's CPUs: a healthy core may be starved for a moment, so the
# healthy runs hold the slowest core to 10% of the median rather than the default 50%.
SHORT = {"duration_seconds": 0.6, "min_core_ratio": 0.1}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def ctx(sysfs: Path | None = None, procfs: Path | None = None, **params) -> RunContext:
    return RunContext(profile={"cpu": params}, sysfs=sysfs or Path("/sys"), procfs=procfs or Path("/proc"),
                      device="cpu")


# -- known answers ----------------------------------------------------------------------------------

def test_known_digest_is_the_sha256_chain_written_out():
    d = hashlib.sha256(b"nodewarden cpu known-answer v1").digest()
    block = d * 512
    for _ in range(64):
        d = hashlib.sha256(d + block).digest()
    assert d.hex() == cpu.KNOWN_DIGEST == cpu.sha256_chain()


def test_a_flipped_bit_anywhere_in_the_chain_changes_the_digest():
    assert {cpu.sha256_chain(flip_round=k) for k in (0, 31, 63)}.isdisjoint({cpu.KNOWN_DIGEST})


def test_float_kernel_is_exact():
    assert cpu.float_kernel() == cpu.KNOWN_FLOAT_SUM == 3001500.0
    assert cpu.float_kernel(4) == 1.5 * (1 + 2 + 3 + 4)


# -- outlier rule, on measured rates ----------------------------------------------------------------

@pytest.mark.parametrize("rates, ratio, slow_at_half", [
    ({0: 1.0e9}, 1.0, []),
    ({0: 1.0e9, 1: 1.0e9, 2: 1.0e9, 3: 1.0e9}, 1.0, []),
    ({0: 1.0e9, 1: 1.0e9, 2: 1.0e9, 3: 0.4e9}, 0.4, [3]),            # a throttled core
    ({0: 1.0e9, 1: 0.98e9, 2: 1.02e9, 3: 0.6e9}, 0.6 / 0.99, []),    # slower, not an outlier
    ({0: 2.0e9, 1: 0.9e9, 2: 1.0e9, 3: 0.45e9, 4: 1.1e9}, 0.45, [3]),
])
def test_outlier_rule(rates, ratio, slow_at_half):
    assert cpu.slowest_core_ratio(rates) == pytest.approx(ratio)
    assert cpu.slow_cpus(rates, 0.5) == slow_at_half


def test_outlier_rule_needs_rates():
    with pytest.raises(ValueError):
        cpu.slowest_core_ratio({})


# -- governors (sysfs tree as a parameter) ----------------------------------------------------------

def governor_tree(root: Path, governors: dict[int, str]) -> Path:
    """``devices/system/cpu/cpuN/cpufreq/scaling_governor`` as the kernel lays it out."""
    for n, g in governors.items():
        d = root / f"devices/system/cpu/cpu{n}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(g + "\n")
    return root


@pytest.mark.parametrize("governors, summary", [
    ({}, None),
    ({0: "performance", 1: "performance"}, "performance"),
    ({0: "performance", 1: "powersave", 2: "performance"}, "powersave×1, performance×2"),
])
def test_governor_summary(tmp_path, governors, summary):
    tree = governor_tree(tmp_path, governors)
    got = cpufreq.governors(cpufreq.read_cpus(tree, cpus=sorted(governors) + [99]))  # cpu99: no cpufreq
    assert got == governors
    assert cpu.summarize_governors(got) == summary


def test_powersave_governor_warns(tmp_path):
    tree = governor_tree(tmp_path, {c: "powersave" for c in CPUS})
    r = run_check("cpu", ctx(tree, **SHORT))
    assert r.status == WARN, r.reason
    assert "powersave" in r.reason
    assert {m.name: m.value for m in r.measurements}["governor"] == "powersave"


def test_frequency_comes_from_the_runs_sysfs(tmp_path):
    """Divergence: the cpu check measured the frequency with psutil (this machine's /sys and
    /proc) whatever ``ctx.sysfs`` said; now it reads the run's tree, as the links check does:
    the h100 fixture's cpufreq says 2.0 GHz for cpu0..7, a tree without cpufreq falls back to
    the run's procfs cpuinfo."""
    mine = [c for c in CPUS if c < 8]
    if not mine:
        pytest.skip("no usable CPU among the fixture's cpu0..7")
    r = run_check("cpu", ctx(FIXTURES / "h100-hgx-ndr", tmp_path, **{**SHORT, "duration_seconds": 0.2}))
    by_name = {m.name: m for m in r.measurements if m.device is None}
    assert by_name["cpu_frequency"].value == 2_000_000_000 and by_name["cpu_frequency"].unit == "Hz"
    assert r.details["governors"] == {str(c): "performance" for c in mine}
    (tmp_path / "cpuinfo").write_text("".join(f"processor\t: {c}\ncpu MHz\t\t: 1234.500\n" for c in CPUS))
    r = run_check("cpu", ctx(tmp_path / "no-cpufreq", tmp_path, **{**SHORT, "duration_seconds": 0.2}))
    by_name = {m.name: m for m in r.measurements if m.device is None}
    assert by_name["cpu_frequency"].value == 1_234_500_000 and r.details["governors"] == {}


# -- the real path --------------------------------------------------------------------------------

def test_healthy_run_passes_with_a_rate_per_cpu(tmp_path):
    r = run_check("cpu", ctx(governor_tree(tmp_path, {c: "performance" for c in CPUS}), **SHORT))
    assert r.status == PASS, r.reason
    rates = {m.device: m for m in r.measurements if m.name == "sha256_rate"}
    assert sorted(rates) == sorted(f"cpu{c}" for c in CPUS)
    assert all(m.unit == "B/s" and m.value > 1e6 for m in rates.values())
    by_name = {m.name: m for m in r.measurements if m.device is None}
    assert by_name["wrong_answer_cpus"].value == 0 and by_name["wrong_answer_cpus"].threshold == 0
    ratio = by_name["slowest_core_ratio"]
    assert ratio.unit == "ratio" and 0 < ratio.value <= 1 and ratio.threshold == 0.1 and ratio.op == ">="
    assert by_name["governor"].value == "performance"
    workers = r.details["workers"]
    assert all(w["ran_on"] == [int(c)] and w["wrong"] == [] and w["chains"] >= 1 for c, w in workers.items())


def test_wrong_answer_on_one_cpu_fails_naming_it():
    bad = CPUS[-1]
    r = run_check("cpu", ctx(**{**SHORT, "duration_seconds": 0.3, "inject_wrong_answer_cpu": bad}))
    assert r.status == FAIL
    assert f"wrong answer on CPU {bad}:" in r.reason and "SHA-256" in r.reason
    assert {m.name: m.value for m in r.measurements}["wrong_answer_cpus"] == 1
    others = [c for c in CPUS if c != bad]
    assert all(not r.details["workers"][str(c)]["wrong"] for c in others)


def test_defaults_and_quick():
    assert cpu.DEFAULTS["duration_seconds"] == 10 and cpu.QUICK["duration_seconds"] == 3
    assert cpu.DEFAULTS["min_core_ratio"] == 0.5 and cpu.NEEDS == ()


@pytest.mark.parametrize("params", [
    {"duration_seconds": 0},
    {"duration_seconds": "ten"},
    {"duration_seconds": True},
    {"min_core_ratio": 1.5},
    {"inject_wrong_answer_cpu": 10_000},
    {"inject_wrong_answer_cpu": "0"},
])
def test_invalid_params_give_error(params):
    r = run_check("cpu", ctx(**params))
    assert r.status == ERROR
    assert next(iter(params)) in r.reason

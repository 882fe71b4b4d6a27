"""dashboards/mixin/build.py: the committed files are what the code generates, and the
query helpers shared by rules and panels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dashboards.mixin import build, config, promql

REPO = Path(__file__).resolve().parents[2]


def test_committed_files_are_what_the_code_generates() -> None:
    assert build.check() == [], "run python3 -m dashboards.mixin.build and commit the result"


def test_check_names_a_file_edited_by_hand(tmp_path: Path) -> None:
    build.write(tmp_path)
    assert build.check(tmp_path) == []
    alerts = tmp_path / "alerts" / "nodewarden-alerts.yaml"
    alerts.write_text(alerts.read_text().replace("severity: critical", "severity: info", 1))
    assert build.check(tmp_path) == ["alerts/nodewarden-alerts.yaml"]
    r = subprocess.run([sys.executable, "-m", "dashboards.mixin.build", "--check", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "alerts/nodewarden-alerts.yaml: differs" in r.stderr


def test_readme_tables_list_every_alert_and_dashboard() -> None:
    text = (REPO / "dashboards" / "README.md").read_text()
    from dashboards.mixin import grafana, rules
    for group in rules.alert_groups(config.DEFAULT):
        for rule in group["rules"]:
            assert f"[{rule['alert']}](runbooks.md#{rule['alert'].lower()})" in text
    for doc in grafana.dashboards(config.DEFAULT).values():
        assert f"| {doc['title']} |" in text


def test_readme_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        build.readme("# no markers here\n")


def test_overrides_name_the_bad_key() -> None:
    cfg = config.with_overrides(config.DEFAULT, ["fault_window=30s", "flash_cut_storm_count=5"])
    assert (cfg.fault_window, cfg.flash_cut_storm_count) == ("30s", 5)
    with pytest.raises(ValueError, match="unknown mixin setting 'fault_windw'"):
        config.with_overrides(config.DEFAULT, ["fault_windw=30s"])
    with pytest.raises(ValueError, match="flash_cut_storm_count: expected an integer"):
        config.with_overrides(config.DEFAULT, ["flash_cut_storm_count=many"])
    r = subprocess.run([sys.executable, "-m", "dashboards.mixin.build", "--check", "--set", "nope=1"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown mixin setting 'nope'" in r.stderr
    with pytest.raises(ValueError, match="fault_window: expected a Prometheus duration"):
        config.with_overrides(config.DEFAULT, ["fault_window=banana"])
    with pytest.raises(ValueError, match="edac_ce_threshold: expected edac_ce_threshold=VALUE"):
        config.with_overrides(config.DEFAULT, ["edac_ce_threshold"])
    assert config.with_overrides(config.DEFAULT, ["keep_firing_for=0s", "interval=1h30m"]).interval == "1h30m"
    storms = config.with_overrides(config.DEFAULT, ["sxid_storm_count=20", "sxid_storm_window=2h",
                                                    "aer_corrected_storm_count=200", "aer_corrected_storm_window=30m"])
    assert (storms.sxid_storm_count, storms.sxid_storm_window) == (20, "2h")
    assert (storms.aer_corrected_storm_count, storms.aer_corrected_storm_window) == (200, "30m")
    for bad, msg in (("sxid_storm_window=0s", "sxid_storm_window: must be longer than 0"),
                     ("aer_corrected_storm_window=soon", "aer_corrected_storm_window: expected a Prometheus duration"),
                     ("aer_corrected_storm_count=-1", "aer_corrected_storm_count: must be 0 or more")):
        with pytest.raises(ValueError, match=msg):
            config.with_overrides(config.DEFAULT, [bad])
    # values that would build rules promtool rejects, or an alert that always fires
    for bad, msg in (('job_selector=job="x', "job_selector: expected label matchers"),
                     ("interval=0s", "interval: must be longer than 0"),
                     ("edac_ce_threshold=-5", "edac_ce_threshold: must be 0 or more")):
        with pytest.raises(ValueError, match=msg):
            config.with_overrides(config.DEFAULT, [bad])
    cfg = config.with_overrides(config.DEFAULT, ['job_selector=job="nw",env!="dev"',
                                                 'ib_port_selector=device=~"mlx5_[0-7]"'])
    assert cfg.job_selector == 'job="nw",env!="dev"'


def test_check_names_the_command_that_rebuilds_what_it_checked(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "dashboards.mixin.build", "--check", "--out", str(tmp_path),
                        "--set", "fault_window=15m"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1
    assert f"run python3 -m dashboards.mixin.build --out {tmp_path} --set fault_window=15m" in r.stderr
    h = subprocess.run([sys.executable, "-m", "dashboards.mixin.build", "--help"], cwd=REPO,
                       capture_output=True, text=True)
    assert "fault_window='10m'" in h.stdout and "edac_ce_threshold=10" in h.stdout
    assert "sxid_storm_count=10" in h.stdout and "aer_corrected_storm_window='10m'" in h.stdout


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (cluster, node) (rate(nodewarden_gpu_ecc_errors_total{type="corrected"}[5m])) > 0',
     {"nodewarden_gpu_ecc_errors_total"}),
    ('label_replace(nodewarden_gpu_xid_errors_total{xid=~"13|31"}, "action", "restart_app", "", "")',
     {"nodewarden_gpu_xid_errors_total"}),
    ("time() - nodewarden_validator_last_run_timestamp_seconds offset 1h > 8 * 86400",
     {"nodewarden_validator_last_run_timestamp_seconds"}),
    ("a:b:c unless on(job, instance) group_left(gpu) nodewarden_gpu_info", {"a:b:c", "nodewarden_gpu_info"}),
    ("topk(5, sum without (le) (x_total)) * 1e3 / inf", {"x_total"}),
])
def test_metric_names(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


def test_increase_with_first_counts_a_series_born_in_the_window() -> None:
    s = promql.sel(config.DEFAULT, "nodewarden_ib_flash_cuts_total", 'device="mlx5_0"')
    assert s == 'nodewarden_ib_flash_cuts_total{job="nodewarden",device="mlx5_0"}'
    e = promql.increase_with_first(config.DEFAULT, s, "10m")
    then = f"last_over_time({s}[1h] offset 10m)"  # the value before the window, across a gap
    assert f"({s} unless {then})" in e and f"({s} - {then} >= 0)" in e and f"increase({s}[10m])" in e
    assert 'max_over_time(up{job="nodewarden"}[1h] offset 10m) == 1' in e  # scraped within the hour before
    # counters present from the start: the exact difference unless reset inside the window
    w = promql.window_increase(s, "10m")
    assert w == (f"((({s} - {s} offset 10m >= 0) or ({s} < {s} offset 10m)) unless resets({s}[10m]) > 0)"
                 f" or increase({s}[10m])")


@pytest.mark.parametrize(("duration", "factor", "want"), [
    ("10m", 2, "20m"), ("15s", 2, "30s"), ("90s", 2, "3m"), ("1h30m", 2, "3h"), ("500ms", 2, "1s"),
    ("250ms", 2, "500ms"), ("1w", 2, "14d"), ("8d", 1, "8d")])
def test_times_scales_a_duration(duration: str, factor: int, want: str) -> None:
    assert promql.times(duration, factor) == want


@pytest.mark.parametrize("bad", ["", "10", "m10", "10m10m", "1s1m", "1.5h"])
def test_times_refuses_what_is_not_a_duration(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        promql.times(bad, 2)


def test_expand_grafana_substitutes_every_variable() -> None:
    e = promql.expand_grafana('increase(x{node=~"$node",cluster=~"${cluster}"}[$__range]) / $__range_s',
                              range_s=600, node="n1")
    assert e == 'increase(x{node=~"n1",cluster=~".*"}[600s]) / 600'
    assert "$" not in promql.expand_grafana("rate(x[$__rate_interval]) * $__interval_ms")


def test_hardware_xids_follow_the_policy() -> None:
    hw = promql.hardware_xid_codes()
    assert {48, 63, 64, 74, 79, 94, 95}.issubset(hw)
    assert not {13, 31, 43, 45}.intersection(hw)
    by_action = promql.xid_codes_by_action()
    assert 13 in by_action["restart_app"] and 79 in by_action["drain"] and 94 in by_action["reset_gpu"]

"""dashboards/: the alerting and recording rules (mixin/rules.py), their committed files, their
promtool unit tests (dashboards/tests/*.yaml) and the runbooks.

promtool (Debian package ``prometheus``) checks and unit-tests the committed rule files; without
it those tests are skipped, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import yaml

from tests import envneeds

from dashboards.mixin import build, config, promql, rules
from nodewarden.agent import exporter
from nodewarden.collectors import nvml

REPO = Path(__file__).resolve().parents[2]
DASH = REPO / "dashboards"
ALERTS_FILE = DASH / "alerts" / "nodewarden-alerts.yaml"
RULES_FILE = DASH / "rules" / "nodewarden-rules.yaml"
TEST_FILES = sorted((DASH / "tests").glob("*.yaml"))
RUNBOOKS = DASH / "runbooks.md"

# The names the other parts (dashboards, end-to-end test) rely on.
CONTRACT_ALERTS = {
    "NodewardenGpuLost", "NodewardenGpuUncorrectableEcc", "NodewardenGpuRowRemapFailure",
    "NodewardenGpuRowRemapPending", "NodewardenGpuHardwareXid", "NodewardenGpuNvlinkErrors",
    "NodewardenIbFlashCutStorm", "NodewardenIbPortDown", "NodewardenIbPortDegraded",
    "NodewardenEdacUncorrectable", "NodewardenEdacCorrectableRate", "NodewardenMachineCheck",
    "NodewardenPcieLinkDowntrained", "NodewardenValidatorFailed", "NodewardenValidatorStale",
    "NodewardenAgentDown", "NodewardenCollectorFailing", "NodewardenKmsgRecordsLost",
    "NodewardenGpuLostPrecursor", "NodewardenGpuResetRequired", "NodewardenNodeRebootRequired",
    "NodewardenNvswitchFatalSxid", "NodewardenNvswitchSxidStorm", "NodewardenPcieAerUncorrected",
    "NodewardenPcieAerCorrectedStorm",
}
CONTRACT_RECORDS = {
    "gpu_xid:nodewarden_gpu_xid_errors_total:policy",
    "cluster_xid:nodewarden_gpu_xid_errors:interval_increase",
    "cluster:nodewarden_edac_errors:interval_increase",
    "cluster:nodewarden_ib_flash_cuts:interval_increase",
    "cluster_kind:nodewarden_beyond_paper_events:interval_increase",
}
APPLICATION_XIDS = (13, 31, 43, 45)


def _alert_rules(cfg: config.Config = config.DEFAULT) -> list[dict]:
    return [r for g in rules.alert_groups(cfg) for r in g["rules"]]


def _record_rules(cfg: config.Config = config.DEFAULT) -> list[dict]:
    return [r for g in rules.recording_groups(cfg) for r in g["rules"]]


def _promtool() -> str:
    return envneeds.command("promtool", "tests the alert and recording rules (Debian package prometheus)")


# ---- the committed files ---------------------------------------------------------------------

def test_committed_rule_files_are_what_the_code_generates() -> None:
    assert ALERTS_FILE.read_text() == build._yaml({"groups": rules.alert_groups(config.DEFAULT)}), \
        "run python3 -m dashboards.mixin.build"
    assert RULES_FILE.read_text() == build._yaml({"groups": rules.recording_groups(config.DEFAULT)}), \
        "run python3 -m dashboards.mixin.build"


def test_promtool_check_rules() -> None:
    r = subprocess.run([_promtool(), "check", "rules", str(ALERTS_FILE), str(RULES_FILE)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(_alert_rules())} rules found" in r.stdout
    assert f"SUCCESS: {len(_record_rules())} rules found" in r.stdout


def test_promtool_unit_tests_pass() -> None:
    # one promtool per file, side by side: each file's evaluations are independent
    promtool = _promtool()
    procs = {p.name: subprocess.Popen([promtool, "test", "rules", p.name], cwd=DASH / "tests",
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in TEST_FILES}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "SUCCESS" in out, f"{name}:\n{out}"


# ---- the alerts' table, labels and annotations ----------------------------------------------

def test_every_contract_alert_exists_once_with_the_table_severity() -> None:
    got = [r["alert"] for r in _alert_rules()]
    assert sorted(got) == sorted({a.name for a in rules.ALERTS}), "ALERTS and the rules differ"
    assert len(got) == len(set(got))
    assert CONTRACT_ALERTS <= set(got)
    for r in _alert_rules():
        assert r["labels"]["severity"] == rules.BY_NAME[r["alert"]].severity
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert rules.BY_NAME[r["alert"]].meaning


def test_every_contract_recording_rule_exists() -> None:
    assert CONTRACT_RECORDS <= {r["record"] for r in _record_rules()}


def _runbook_sections() -> list[str]:
    return re.findall(r"^## (\S+)\s*$", RUNBOOKS.read_text(), flags=re.M)


def test_every_alert_has_annotations_and_a_runbook_section() -> None:
    sections = _runbook_sections()
    anchors = {s.lower() for s in sections}
    for r in _alert_rules():
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], r["alert"]
        assert "{{ $labels.node }}" in ann["description"], f"{r['alert']}: the description names no node"
        url = ann["runbook_url"]
        assert url == "https://github.com/nodewarden/nodewarden/blob/main/dashboards/runbooks.md#" + r["alert"].lower()
        assert url.rsplit("#", 1)[1] in anchors, f"{r['alert']}: no section ## {r['alert']} in runbooks.md"


def test_every_runbook_section_is_an_alert() -> None:
    sections = _runbook_sections()
    assert len(sections) == len(set(sections))
    assert set(sections) == {r["alert"] for r in _alert_rules()}


def test_device_alerts_name_their_device() -> None:
    device = {"NodewardenGpuLost": "gpu", "NodewardenGpuHardwareXid": "xid", "NodewardenGpuNvlinkErrors": "link",
              "NodewardenIbPortDown": "device", "NodewardenEdacUncorrectable": "dimm",
              "NodewardenPcieLinkDowntrained": "pci_bus_id", "NodewardenValidatorFailed": "check",
              "NodewardenCollectorFailing": "collector", "NodewardenNvswitchFatalSxid": "sxid",
              "NodewardenNvswitchSxidStorm": "switch", "NodewardenPcieAerUncorrected": "aer_severity",
              "NodewardenPcieAerCorrectedStorm": "pci_bus_id", "NodewardenGpuLostPrecursor": "pci_bus_id",
              "NodewardenGpuResetRequired": "action", "NodewardenNodeRebootRequired": "node"}
    by = {r["alert"]: r for r in _alert_rules()}
    for name, label in device.items():
        assert "{{ $labels.%s }}" % label in by[name]["annotations"]["description"], name
    assert "nodewarden xid {{ $labels.xid }}" in by["NodewardenGpuHardwareXid"]["annotations"]["description"]
    assert "{{ $labels.action }}" in by["NodewardenGpuHardwareXid"]["annotations"]["description"]


# ---- configuration ---------------------------------------------------------------------------

def test_for_and_windows_come_from_the_config() -> None:
    zero = dataclasses.replace(config.DEFAULT, for_short="0s", for_long="0s", fault_window="30s",
                               aer_corrected_storm_window="5m")
    assert all("for" not in r for r in _alert_rules(zero))
    assert all("[10m]" not in r["expr"] for r in _alert_rules(zero))
    fors = {r["alert"]: r.get("for") for r in _alert_rules(dataclasses.replace(config.DEFAULT, for_short="2m",
                                                                             for_long="17m"))}
    assert fors["NodewardenGpuLost"] == "2m" and fors["NodewardenAgentDown"] == "2m"
    assert fors["NodewardenIbPortDown"] == "17m" and fors["NodewardenCollectorFailing"] == "17m"
    assert set(fors.values()) <= {None, "2m", "17m"}
    exprs = {r["alert"]: r["expr"] for r in _alert_rules(dataclasses.replace(config.DEFAULT, fault_window="30s",
                                                                           edac_ce_window="12h",
                                                                           edac_ce_threshold=4))}
    assert "[30s]" in exprs["NodewardenGpuHardwareXid"] and "offset 30s" in exprs["NodewardenGpuHardwareXid"]
    assert "[12h]" in exprs["NodewardenEdacCorrectableRate"] and exprs["NodewardenEdacCorrectableRate"].endswith(">= 4")
    storms = dataclasses.replace(config.DEFAULT, sxid_storm_count=25, sxid_storm_window="2h",
                                 aer_corrected_storm_count=300, aer_corrected_storm_window="30m")
    exprs = {r["alert"]: r["expr"] for r in _alert_rules(storms)}
    assert "[2h]" in exprs["NodewardenNvswitchSxidStorm"] and exprs["NodewardenNvswitchSxidStorm"].endswith(">= 25")
    assert "[30m]" in exprs["NodewardenPcieAerCorrectedStorm"]
    assert exprs["NodewardenPcieAerCorrectedStorm"].endswith(">= 300")


def test_new_fault_alerts_keep_their_own_severity_apart_from_the_alert_severity() -> None:
    """The SXid and AER counters carry a ``severity`` label of their own (fatal, non_fatal...),
    which the rule's ``severity`` label (critical, warning) would overwrite: the alerts drop it
    or carry it as ``aer_severity``; the reset and reboot alerts split the recovery actions
    between them (none in neither)."""
    by = {r["alert"]: r for r in _alert_rules()}
    assert by["NodewardenNvswitchFatalSxid"]["expr"].startswith("sum without (severity) (")
    assert 'severity!="fatal"' in by["NodewardenNvswitchSxidStorm"]["expr"]
    assert '"aer_severity", "$1", "severity"' in by["NodewardenPcieAerUncorrected"]["expr"]
    reset, reboot = by["NodewardenGpuResetRequired"]["expr"], by["NodewardenNodeRebootRequired"]["expr"]
    assert 'action!~"none|node_reboot|system_reboot"' in reset and 'action=~"node_reboot|system_reboot"' in reboot
    for name in ("NodewardenGpuResetRequired", "NodewardenNodeRebootRequired"):
        assert by[name]["keep_firing_for"] == config.DEFAULT.keep_firing_for
        assert rules.RESET_EVENTS in by[name]["expr"] and rules.RECOVERY_ACTION in by[name]["expr"]
    # a GPU-lost precursor pages as such, not also as an uncorrected AER of the same function
    assert "unless on(job, instance, pci_bus_id) ((" in by["NodewardenPcieAerUncorrected"]["expr"]


def test_alertmanager_inhibits_what_a_lost_gpu_or_a_precursor_explains() -> None:
    am = yaml.safe_load((REPO / "deploy" / "prometheus" / "alertmanager.yml").read_text())
    rules_by_source: dict[str, list[dict]] = {}
    for rule in am["inhibit_rules"]:
        (source,) = rule["source_matchers"]
        rules_by_source.setdefault(source, []).append(rule)
    lost = rules_by_source['alertname="NodewardenGpuLost"']
    targets = " ".join(m for r in lost for m in r["target_matchers"])
    for name in ("NodewardenGpuLostPrecursor", "NodewardenGpuResetRequired", "NodewardenNodeRebootRequired"):
        assert name in targets
    assert all(r["equal"] == ["cluster", "node", "gpu"] for r in lost)
    (precursor,) = rules_by_source['alertname="NodewardenGpuLostPrecursor"']
    assert precursor["target_matchers"] == ['alertname="NodewardenPcieAerUncorrected"']
    assert precursor["equal"] == ["cluster", "node"]
    names = {r["alert"] for r in _alert_rules()}
    for rule in am["inhibit_rules"]:
        for m in rule["source_matchers"] + rule["target_matchers"]:
            if m.startswith("alertname="):
                assert set(re.findall(r"Nodewarden\w+", m)) <= names, m


def test_ib_port_selector_reaches_every_ib_selector() -> None:
    cfg = dataclasses.replace(config.DEFAULT, ib_port_selector='device=~"mlx5_[0-7]"')
    for r in _alert_rules(cfg):
        for name in promql.metric_names(r["expr"]):
            if name.startswith("nodewarden_ib_"):
                selectors = re.findall(re.escape(name) + r"\{([^}]*)\}", r["expr"])
                assert selectors and all('device=~"mlx5_[0-7]"' in s for s in selectors), (r["alert"], name)


def test_hardware_xid_regex_follows_the_policy_and_leaves_out_application_xids() -> None:
    expr = rules.policy_labels("x")
    hw = re.search(r'"hardware", "true", "xid", "([0-9|]+)"', expr)
    assert hw is not None
    codes = {int(c) for c in hw.group(1).split("|")}
    assert codes == set(promql.hardware_xid_codes())
    assert not codes.intersection(APPLICATION_XIDS)
    assert {48, 63, 64, 74, 79, 94, 95} <= codes
    for action, regex in re.findall(r'"action", "(\w+)", "xid", "([0-9|]+)"', expr):
        assert tuple(int(c) for c in regex.split("|")) == promql.xid_codes_by_action()[action]
    hw_alert = next(r for r in _alert_rules() if r["alert"] == "NodewardenGpuHardwareXid")
    assert 'hardware="true"' in hw_alert["expr"]


# ---- the promtool unit tests -----------------------------------------------------------------

def _test_docs() -> list[tuple[Path, dict]]:
    return [(p, yaml.safe_load(p.read_text())) for p in TEST_FILES]


def test_unit_tests_load_the_committed_rule_files() -> None:
    assert TEST_FILES
    for path, doc in _test_docs():
        assert doc["rule_files"] == ["../alerts/nodewarden-alerts.yaml", "../rules/nodewarden-rules.yaml"], path.name


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for _, doc in _test_docs():
        for case in doc["tests"]:
            for t in case.get("alert_rule_test", []):
                (firing if t.get("exp_alerts") else quiet).add(t["alertname"])
                for a in t.get("exp_alerts") or []:
                    # literal expectations: every firing case states the severity and all three annotations
                    assert a["exp_labels"]["severity"] == rules.BY_NAME[t["alertname"]].severity
                    assert set(a["exp_annotations"]) == {"summary", "description", "runbook_url"}
                    assert "{{" not in a["exp_annotations"]["description"]
    names = {r["alert"] for r in _alert_rules()}
    assert names - firing == set(), "alerts without a case where they fire"
    assert names - quiet == set(), "alerts without a case where they must not fire"


def test_recording_rules_are_unit_tested() -> None:
    tested = {name for _, doc in _test_docs() for case in doc["tests"] for t in case.get("promql_expr_test", [])
              for name in promql.metric_names(t["expr"])}
    assert {r["record"] for r in _record_rules()} <= tested


def test_input_series_carry_the_scrape_labels() -> None:
    for path, doc in _test_docs():
        for case in doc["tests"]:
            for s in case["input_series"]:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', s["series"]))
                assert {"job", "instance", "node"} <= set(labels), (path.name, s["series"])
                if not s["series"].startswith("up{"):
                    assert labels["job"] == "nodewarden", (path.name, s["series"])


# ---- series names ----------------------------------------------------------------------------

def _exported_names() -> set[str]:
    names = {m for p in (REPO / "tests" / "golden").glob("*.prom")
             for m in re.findall(r"^# TYPE (\S+) ", p.read_text(), flags=re.M)}
    # the NVML collector's declared series too: the golden GPUs lack some (a driver without the
    # recovery-action field)
    return (names | {f.name for f in exporter.FAMILIES} | set(nvml.SERIES) | {r["record"] for r in _record_rules()}
            | {"up"})


def test_every_series_a_rule_uses_is_exported() -> None:
    known = _exported_names()
    assert "nodewarden_gpu_lost" in known and "nodewarden_ib_port_info" in known
    for r in _alert_rules() + _record_rules():
        names = promql.metric_names(r["expr"])
        assert names, r
        assert names <= known, (r.get("alert") or r.get("record"), sorted(names - known))


def test_expected_gpus_per_node_pages_a_node_that_boots_short(tmp_path: Path) -> None:
    """Built with ``expected_gpus_per_node=2``: a node that never listed more than one GPU pages;
    one with both does not (the default build only compares a node with its own past)."""
    from dashboards.mixin import build

    cfg = config.with_overrides(config.DEFAULT, ["expected_gpus_per_node=2", "for_long=0s"])
    for rel, text in build.files(cfg).items():
        if rel.endswith(".yaml"):
            (tmp_path / Path(rel).name).write_text(text)
    info = ('nodewarden_gpu_info{{job="nodewarden",instance="{n}:9764",node="{n}",gpu="{g}",minor="{g}",'
            'name="H100",pci_bus_id="0000:1{g}:00.0",uuid="GPU-{n}-{g}"}}')
    up = 'up{{job="nodewarden",instance="{n}:9764",node="{n}"}}'
    test = {"rule_files": ["nodewarden-alerts.yaml", "nodewarden-rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": [
                {"series": up.format(n="short"), "values": "1x30"},
                {"series": info.format(n="short", g=0), "values": "1x30"},
                {"series": up.format(n="full"), "values": "1x30"},
                {"series": info.format(n="full", g=0), "values": "1x30"},
                {"series": info.format(n="full", g=1), "values": "1x30"}],
                "alert_rule_test": [{"eval_time": "20m", "alertname": "NodewardenGpuMissing", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "job": "nodewarden", "instance": "short:9764",
                                   "node": "short"},
                    "exp_annotations": {
                        "summary": "short lists fewer GPUs than it had",
                        "description": next(r for g in rules.alert_groups(cfg) for r in g["rules"]
                                            if r["alert"] == "NodewardenGpuMissing")["annotations"]["description"]
                        .replace("{{ $labels.node }}", "short").replace('{{ printf "%.0f" $value }}', "2"),
                        "runbook_url": config.DEFAULT.runbook_url_base + "nodewardengpumissing"}}]}]}]}
    (tmp_path / "t_test.yaml").write_text(yaml.safe_dump(test))
    r = subprocess.run([_promtool(), "test", "rules", "t_test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _seconds(duration: str) -> float:
    return sum(int(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u]
               for n, u in re.findall(r"([0-9]+)(ms|[smh])", duration))


def test_the_example_scrape_timeout_fits_the_lag_of_the_exact_counts() -> None:
    """promql.interval_increase counts the raw counters one group interval late, which holds
    every scrape that started by then only when the scrape timeout is at most that interval:
    the shipped Prometheus example keeps to it, and the lag is in every raw term."""
    doc = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in doc["scrape_configs"] if j["job_name"] == "nodewarden"]
    timeout = job.get("scrape_timeout", doc.get("global", {}).get("scrape_timeout", "10s"))
    assert _seconds(timeout) <= _seconds(config.DEFAULT.interval), (timeout, config.DEFAULT.interval)
    cfg = dataclasses.replace(config.DEFAULT, interval="30s")
    expr = promql.interval_increase(cfg, 'c{job="nodewarden"}', "30s")
    # every raw term reads the past: "now" one interval back, "then" (and `up`) before two
    terms = re.findall(r'\b(c|up)\{job="nodewarden"\}(\[1h\])?( offset \w+)?', expr)
    assert sorted(terms) == sorted([("c", "", " offset 30s")] * 3 + [("c", "[1h]", " offset 1m")] * 3
                                   + [("up", "[1h]", " offset 1m")]), expr
    recorded = promql.interval_increase(cfg, "p", "30s", born='c{job="nodewarden"}', ignoring="action")
    assert recorded.startswith("(p - last_over_time(p[1h] offset 30s) >= 0)"), recorded
    assert 'last_over_time(c{job="nodewarden"}[1h] offset 1m)' in recorded, recorded

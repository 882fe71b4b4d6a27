"""The Grafana dashboards: the committed JSON is what the code generates, it loads into the
SDK's dashboard model, every panel is complete (title, description, unit, query on the
``${datasource}`` variable), every query selects only series the agent exports or recording
rules the mixin defines, through the job/cluster/node matchers, and every query parses
(promtool)."""

from __future__ import annotations

import copy
import importlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import envneeds

from dashboards.mixin import config, grafana, promql
from nodewarden.agent import exporter
from nodewarden.collectors import nvml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA_DIR = ROOT / "dashboards" / "grafana"
GOLDEN = ROOT / "tests" / "golden"
CFG = config.DEFAULT
UIDS = {"nodewarden-fleet.json": "nodewarden-fleet", "nodewarden-node.json": "nodewarden-node",
        "nodewarden-failure-stats.json": "nodewarden-failure-stats"}
DOCS = grafana.dashboards(CFG)

# PromQL words that are not metric names (functions are skipped because "(" follows them).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
            "unless", "atan2", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
            "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.$:])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def metric_names(expr: str) -> list[tuple[str, str]]:
    """``(name, next char)`` for each metric name in a PromQL expression: identifiers outside
    strings, matchers, ranges and grouping labels that are neither keywords nor functions."""
    e = _STRING.sub('""', expr)
    e = re.sub(r"\$\{?\w+\}?", "1", e)          # Grafana variables ($__range, ${node})
    e = re.sub(r"\{[^}]*\}", "{}", e)
    e = re.sub(r"\[[^\]]*\]", "[]", e)
    e = _GROUPING.sub(" ", e)
    out = []
    for m in _IDENT.finditer(e):
        rest = e[m.end():].lstrip()
        if m.group(1) in KEYWORDS or rest.startswith("("):
            continue
        out.append((m.group(1), e[m.end():m.end() + 1]))
    return out


def recording_rule_names() -> set[str]:
    rules = importlib.import_module("dashboards.mixin.rules")
    return {r["record"] for g in rules.recording_groups(CFG) for r in g["rules"] if "record" in r}


def known_series() -> set[str]:
    """What the agent exports (golden scrapes' TYPE lines, its own families, the NVML
    collector's declared series, which the golden GPUs lack some of) plus ``up`` and the
    mixin's recording rules."""
    names = {"up", *recording_rule_names(), *(f.name for f in exporter.FAMILIES), *nvml.SERIES}
    for path in GOLDEN.glob("*.prom"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# TYPE "):
                names.add(line.split()[2])
    return names


def lint(doc: dict, known: set[str]) -> list[str]:
    """Problems of one dashboard JSON dict (empty when it is fine)."""
    bad = []
    ids = [p.get("id") for p in doc.get("panels", [])] + [q.get("id") for p in doc.get("panels", [])
                                                          for q in p.get("panels") or ()]
    if len(ids) != len(set(ids)) or None in ids:
        bad.append(f"panel ids not unique: {ids}")
    if "schemaVersion" not in doc:
        bad.append("no schemaVersion")
    names = [v["name"] for v in doc.get("templating", {}).get("list", [])]
    has_node = "node" in names
    if names[:3] != ["datasource", "cluster", "node"][:3 if has_node else 2]:
        bad.append(f"variables: {names}")
    for p in grafana.panels(doc):
        title = p.get("title") or f"<panel {p.get('id')}>"
        if not p.get("title"):
            bad.append(f"{title}: no title")
        if not (p.get("description") or "").strip():
            bad.append(f"{title}: no description")
        if not (p.get("fieldConfig", {}).get("defaults", {}).get("unit")):
            bad.append(f"{title}: no unit")
        targets = p.get("targets") or []
        if not targets:
            bad.append(f"{title}: no query")
        if p.get("datasource", {}).get("uid") != "${datasource}":
            bad.append(f"{title}: panel datasource {p.get('datasource')}")
        for t in targets:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                bad.append(f"{title}: target datasource {t.get('datasource')}")
            expr = t.get("expr") or ""
            needles = [f'{CFG.cluster_label}=~"$cluster"'] + ([f'{CFG.node_label}=~"$node"'] if has_node else [])
            for needle in needles:
                if needle not in expr:
                    bad.append(f"{title}: no {needle} in {expr}")
            for sel in re.findall(r"[a-zA-Z_:][\w:]*\{([^}]*)\}", expr):
                if CFG.job_selector not in sel:
                    bad.append(f"{title}: selector without {CFG.job_selector}: {{{sel}}}")
            names = metric_names(expr)
            if not names:
                bad.append(f"{title}: no metric in {expr}")
            for name, nxt in names:
                if name not in known:
                    bad.append(f"{title}: unknown series {name}")
                if nxt != "{":
                    bad.append(f"{title}: {name} without matchers")
    return bad


# ---------------------------------------------------------------------------------------------
# (a) drift

def test_committed_json_is_what_the_code_generates():
    committed = sorted(p.name for p in GRAFANA_DIR.glob("*.json"))
    assert committed == sorted(DOCS), "dashboards/grafana/ holds other files than the code generates"
    for name, doc in DOCS.items():
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        assert (GRAFANA_DIR / name).read_text(encoding="utf-8") == text, (
            f"dashboards/grafana/{name} differs from the code: run python3 -m dashboards.mixin.build")


# ---------------------------------------------------------------------------------------------
# (b) lint

@pytest.mark.parametrize("name", sorted(UIDS))
def test_loads_into_the_sdk_model_and_round_trips(name):
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import prometheus
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

    plugins.register_default_plugins()
    doc = json.loads((GRAFANA_DIR / name).read_text(encoding="utf-8"))
    model = Dashboard.from_json(doc)
    assert model.uid == UIDS[name] and model.schema_version == doc["schemaVersion"]
    assert [type(p) for p in model.panels] == [RowPanel if p["type"] == "row" else Panel for p in doc["panels"]]
    targets = [t for p in model.panels if isinstance(p, Panel) for t in p.targets]
    assert targets and all(isinstance(t, prometheus.Dataquery) for t in targets)
    back = json.loads(json.dumps(model, cls=JSONEncoder))
    # The model fills in the defaults of panel options it decodes (a table's align: auto...);
    # everything the file says must come back.
    assert len(back["panels"]) == len(doc["panels"])
    missing = _missing(doc, back)
    assert missing == [], missing


def _missing(want: object, got: object, path: str = "") -> list[str]:
    """Paths of ``want`` (JSON data) that ``got`` lacks or holds with another value."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [m for k, v in want.items() for m in (_missing(v, got[k], f"{path}.{k}") if k in got else [f"{path}.{k}"])]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [m for i, (a, b) in enumerate(zip(want, got)) for m in _missing(a, b, f"{path}[{i}]")]
    return [] if want == got else [path]


@pytest.mark.parametrize("name", sorted(UIDS))
def test_lint_passes(name):
    doc = json.loads((GRAFANA_DIR / name).read_text(encoding="utf-8"))
    assert doc["uid"] == UIDS[name]
    assert lint(doc, known_series()) == []
    assert len(grafana.panels(doc)) >= (7 if name == "nodewarden-failure-stats.json" else 20)


def test_variables_and_links():
    for name, doc in DOCS.items():
        variables = doc["templating"]["list"]
        ds = variables[0]
        assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
        # the failure statistics read per-cluster recording rules: no node variable there
        expected = (CFG.cluster_label,) if name == "nodewarden-failure-stats.json" else (CFG.cluster_label, CFG.node_label)
        assert [v["name"] for v in variables[1:]] == list(expected)
        for var, label in zip(variables[1:], expected):
            if name == "nodewarden-node.json" and label == CFG.node_label:
                # one node at a time: no multi-select, no All (a fleet's every GPU in one panel)
                assert var["type"] == "query" and not var.get("multi") and not var.get("includeAll")
            else:
                assert var["type"] == "query" and var["multi"] and var["includeAll"] and var["allValue"] == ".*"
            assert var["query"].startswith("label_values(nodewarden_build_info{" + CFG.job_selector)
            assert var["query"].endswith(f", {label})") and var["datasource"]["uid"] == "${datasource}"
        assert any(l["type"] == "dashboards" and "nodewarden" in l["tags"] for l in doc["links"])
    fleet = DOCS["nodewarden-fleet.json"]
    assert any(l.get("url", "").startswith("/d/nodewarden-node") and l["includeVars"] for l in fleet["links"])
    data_links = [l["url"] for p in grafana.panels(fleet) for l in p["fieldConfig"]["defaults"].get("links", [])]
    assert data_links and all("var-node=${__data.fields.node}" in u for u in data_links)


def test_panel_queries_includes_panels_nested_in_rows():
    doc = copy.deepcopy(DOCS["nodewarden-fleet.json"])
    flat = grafana.panel_queries(doc)
    row = next(p for p in doc["panels"] if p["type"] == "row")
    moved = [p for p in doc["panels"] if p["type"] != "row"][:2]
    doc["panels"] = [p for p in doc["panels"] if p not in moved]
    row["panels"], row["collapsed"] = moved, True
    assert sorted(grafana.panel_queries(doc)) == sorted(flat)
    assert ("Xid errors by group", flat[0][1]) == flat[0]


def test_lint_fails_on_a_made_up_metric_and_on_missing_parts():
    doc = copy.deepcopy(DOCS["nodewarden-fleet.json"])
    panel = grafana.panels(doc)[0]
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace(
        "nodewarden_gpu_xid_errors_total{", "nodewarden_gpu_xid_made_up_total{", 1)
    grafana.panels(doc)[1]["fieldConfig"]["defaults"].pop("unit")
    grafana.panels(doc)[2]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prom-1"}
    problems = lint(doc, known_series())
    assert any("unknown series nodewarden_gpu_xid_made_up_total" in p for p in problems), problems
    assert any(p.endswith(": no unit") for p in problems)
    assert any("target datasource" in p for p in problems)


def test_metric_names_tokenizer():
    expr = ('sum by (cluster, node) (increase(nodewarden_edac_correctable_errors_total{job="x",dimm=~"a b"}[5m]))'
            ' / on(job) group_left() max(up{job="x"} offset 30d) > bool 3 unless nodewarden_gpu_lost')
    assert metric_names(expr) == [("nodewarden_edac_correctable_errors_total", "{"), ("up", "{"),
                                  ("nodewarden_gpu_lost", "")]
    assert metric_names(promql.expand_grafana('gpu_xid:nodewarden_gpu_xid_errors_total:policy{a="$node"}')) == [
        ("gpu_xid:nodewarden_gpu_xid_errors_total:policy", "{")]


def test_recording_rules_used_exist_when_rules_are_defined():
    defined = recording_rule_names()
    used = {n for d in DOCS.values() for _, e in grafana.panel_queries(d) for n, _ in metric_names(e) if ":" in n}
    assert used, "the dashboards use the policy recording rule"
    assert used <= defined


# ---------------------------------------------------------------------------------------------
# (c) every query parses

def _promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    rules = [{"record": f"nodewarden:dashboard_lint:q{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}), encoding="utf-8")
    return subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def promtool():
    envneeds.command("promtool", "lints the dashboards' queries (Debian: apt-get install prometheus)")


def test_every_query_parses(promtool, tmp_path):
    exprs = [promql.expand_grafana(e) for d in DOCS.values() for _, e in grafana.panel_queries(d)]
    assert len(exprs) > 50
    assert not [e for e in exprs if "$" in e], "a Grafana variable is left after expand_grafana"
    res = _promtool_check(exprs, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(exprs)} rules found" in res.stdout


def test_promtool_check_rejects_a_broken_query(promtool, tmp_path):
    expr = promql.expand_grafana(grafana.panel_queries(DOCS["nodewarden-node.json"])[0][1])
    res = _promtool_check([expr[:-1]], tmp_path)  # one closing parenthesis short
    assert res.returncode != 0


# ---------------------------------------------------------------------------------------------
# (d) the kernel-log fault kinds beyond Xid/EDAC/IB: NVSwitch SXid, PCIe AER, GPU reset and precursors

NEW_KINDS = ("nodewarden_nvswitch_sxid_errors_total", "nodewarden_pcie_aer_logged_errors_total",
             "nodewarden_pcie_aer_recovery_events_total", "nodewarden_gpu_lost_precursor_events_total",
             "nodewarden_gpu_reset_required_events_total", "nodewarden_gpu_recovery_action")


def _series_by_panel(doc: dict) -> dict[str, set[str]]:
    return {title: {n for t, e in grafana.panel_queries(doc) if t == title for n, _ in metric_names(e)}
            for title, _ in grafana.panel_queries(doc)}


def test_node_dashboard_shows_every_new_series_and_the_sysfs_aer_beside_the_log():
    panels = _series_by_panel(DOCS["nodewarden-node.json"])
    shown = set().union(*panels.values())
    assert set(NEW_KINDS) <= shown
    both = panels["PCIe AER per device: kernel log and sysfs (selected range)"]
    assert {"nodewarden_pcie_aer_logged_errors_total", "nodewarden_pcie_aer_errors_total"} <= both
    # the sysfs severities in the kernel log's words, so that the merge lines the rows up
    (table,) = [p for p in grafana.panels(DOCS["nodewarden-node.json"])
                if p["title"] == "PCIe AER per device: kernel log and sysfs (selected range)"]
    sysfs = table["targets"][1]["expr"]
    assert '"severity", "corrected", "severity", "correctable"' in sysfs
    assert '"severity", "non_fatal", "severity", "nonfatal"' in sysfs


AER_TOTALS, AER_BITS = "nodewarden_pcie_aer_errors_total", "nodewarden_pcie_aer_bit_errors_total"


def test_sysfs_aer_panels_use_the_bits_by_error_and_the_totals_otherwise():
    """The agent's sysfs AER series: totals per function and severity (no ``error`` label) and
    one series per error bit that has counted. A panel that breaks down by ``error`` reads the
    bits; one by severity or device reads the totals; none reads both (that counts twice)."""
    uses = {}
    for name in ("nodewarden-node.json", "nodewarden-fleet.json"):
        for title, expr in grafana.panel_queries(DOCS[name]):
            names = {n for n, _ in metric_names(expr)} & {AER_TOTALS, AER_BITS}
            if names:
                assert len(names) == 1, (title, names)
                (family,) = names
                by_error = bool(re.search(r"\bby \([^)]*\berror\b", expr))
                assert by_error == (family == AER_BITS), (title, expr)
                uses[(name, title)] = family
    assert uses == {
        ("nodewarden-node.json", "PCIe AER errors per device"): AER_BITS,
        ("nodewarden-node.json", "PCIe AER per device: kernel log and sysfs (selected range)"): AER_TOTALS,
        ("nodewarden-fleet.json", "PCIe AER errors by severity"): AER_TOTALS,
    }
    # the bits are born at their first count: the panel counts a series born in the window
    (expr,) = [e for t, e in grafana.panel_queries(DOCS["nodewarden-node.json"]) if t == "PCIe AER errors per device"]
    assert f"{AER_BITS}{{" in expr and " unless last_over_time(" in expr


def test_fleet_dashboard_lists_nodes_with_fatal_sxid_aer_or_reset_and_links_them():
    (table,) = [p for p in grafana.panels(DOCS["nodewarden-fleet.json"])
                if p["title"].startswith("Nodes with fatal SXids, uncorrected AER or GPUs needing a reset")]
    exprs = [t["expr"] for t in table["targets"]]
    assert [bool(t.get("instant")) for t in table["targets"]] == [True] * 5
    assert 'severity="fatal"' in exprs[0] and 'severity=~"fatal|non_fatal"' in exprs[1]
    assert 'action!="none"' in exprs[4]
    assert all(e.startswith(f"sum by ({CFG.cluster_label}, {CFG.node_label}) (") for e in exprs)
    assert table["fieldConfig"]["defaults"]["links"][0]["url"].startswith("/d/nodewarden-node")


def test_recovery_action_timeline_uses_nvml_values():
    from dashboards.mixin import rules
    from dashboards.mixin.grafana import node
    from nodewarden import nvml as nvml_session

    # nvmlDeviceGpuRecoveryAction_t: the mixin's numbers are NVML's, for the names the agent exports
    assert {v: k for k, v in rules.RECOVERY_ACTIONS.items()}.items() <= nvml_session.RECOVERY_ACTIONS.items()
    assert set(node.RECOVERY_STATES) == set(rules.RECOVERY_ACTIONS.values()) | {node.OTHER_ACTION}
    expr = node.recovery_action_value(CFG, "cluster, node, gpu")
    for name, value in rules.RECOVERY_ACTIONS.items():
        assert f'action="{name}"}} == 1) * {value}' in expr
    assert f'action!~"{"|".join(rules.RECOVERY_ACTIONS)}"}} == 1) * {node.OTHER_ACTION}' in expr


def test_failure_stats_keep_the_beyond_the_paper_kinds_apart():
    from dashboards.mixin import rules
    stats_doc = DOCS["nodewarden-failure-stats.json"]
    rows = [p["title"] for p in stats_doc["panels"] if p["type"] == "row"]
    assert rows[-1].startswith("Beyond the paper")
    beyond = [e for t, e in grafana.panel_queries(stats_doc) if t.startswith("Beyond the paper")]
    assert len(beyond) == 2 and all(rules.CLUSTER_BEYOND in e for e in beyond)
    # the paper's tables read only their own recording rules
    for title, expr in grafana.panel_queries(stats_doc):
        if "Table VI" in title or "Table VII" in title:
            assert rules.CLUSTER_BEYOND not in expr, title

"""deploy/prometheus: the example scrape configuration as a real Prometheus loads it.

``promtool check config`` on the example (its rule-file paths pointed at dashboards/), and a
real Prometheus with the example's nodewarden job (its relabelling unchanged) scraping a real
agent under three names: the relabelling must give each target the ``node`` label the alerts
and dashboards group by, keep a ``node`` a target group names itself, and carry ``cluster``.
``amtool check-config`` on the example Alertmanager routing.

Needs ``prometheus``/``promtool`` (Debian: ``apt-get install prometheus``) and, for the routing,
``amtool`` (``prometheus-alertmanager``); skipped otherwise, failed under ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from kmsgtools import free_port
from test_prometheus_e2e import Prom, http_get, start_prometheus, stop, wait_for

from tests import envneeds

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "prometheus"


def _need(tool: str) -> str:
    return envneeds.command(tool, "checks the example config (Debian: apt-get install prometheus prometheus-alertmanager)")


def _example(tmp_path: Path) -> dict:
    """The example config with its absolute paths moved under ``tmp_path`` / dashboards/."""
    doc = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    doc["rule_files"] = [str(REPO / "dashboards" / Path(p).relative_to("/etc/prometheus/nodewarden"))
                         for p in doc["rule_files"]]
    return doc


def test_example_config_passes_promtool(tmp_path: Path) -> None:
    promtool = _need("promtool")
    doc = _example(tmp_path)
    job = doc["scrape_configs"][0]
    job["file_sd_configs"][0]["files"] = [str(DEPLOY / "targets" / "*.yaml")]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(doc))
    out = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 2 rule files found" in out.stdout + out.stderr


def test_example_alertmanager_routing_passes_amtool() -> None:
    amtool = _need("amtool")
    out = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # critical pages, everything else goes to chat
    for labels, receiver in ((["alertname=NodewardenGpuLost", "severity=critical"], "pager"),
                             (["alertname=NodewardenIbFlashCutStorm", "severity=warning"], "chat")):
        r = subprocess.run([amtool, "config", "routes", "test", f"--config.file={DEPLOY / 'alertmanager.yml'}",
                            *labels], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == receiver, (labels, r.stdout, r.stderr)


def test_relabelling_gives_every_target_its_node(tmp_path: Path) -> None:
    _need("prometheus")
    agent_port, prom_port = free_port(), free_port()
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").mkdir()
    doc = _example(tmp_path)
    doc["rule_files"] = []
    doc.pop("alerting")
    doc["global"].update(scrape_interval="1s", scrape_timeout="1s")
    job = doc["scrape_configs"][0]
    job.update(scrape_interval="1s", scrape_timeout="1s")
    job["static_configs"] = [{"targets": [f"127.0.0.1:{agent_port}", f"localhost:{agent_port}",
                                          f"[::1]:{agent_port}"], "labels": {"cluster": "train-a"}}]
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "named.yaml").write_text(yaml.safe_dump(
        [{"targets": [f"127.0.0.1:{agent_port}"], "labels": {"cluster": "train-b", "node": "gpu-node-005"}}]))
    job["file_sd_configs"][0]["files"] = [str(targets / "*.yaml")]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(doc))
    # a report the validate timer (not the agent: --no-validator) wrote into the state directory
    import datetime as dt

    from nodewarden.validator import report
    from nodewarden.validator.result import CheckResult
    (tmp_path / "state").mkdir()
    end = dt.datetime.now(dt.timezone.utc)
    checks = [CheckResult("storage", "fail", reason="/scratch: 120 MB/s below 1 GB/s")]
    report.write_json(report.build(checks, "gpu-node-005", None, "cpu", False, end - dt.timedelta(minutes=5), end, 1),
                      tmp_path / "state" / "validate.json")
    agent_cfg = tmp_path / "agent.toml"
    agent_cfg.write_text("[collectors]\nkernel_log = false\n")

    logs = {"agent": tmp_path / "agent.log", "prometheus": tmp_path / "prometheus.log"}
    procs = {}
    try:
        with open(logs["agent"], "wb") as f:
            procs["agent"] = subprocess.Popen(
                [sys.executable, "-m", "nodewarden", "agent", "--listen", f"127.0.0.1:{agent_port}",
                 "--state-dir", str(tmp_path / "state"), "--sysfs", str(tmp_path / "sys"), "--no-validator",
                 "--hostname", "gpu-node-005",
                 "--config", str(agent_cfg)],
                cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)})
        procs["prometheus"] = start_prometheus(cfg, prom_port, tmp_path, logs["prometheus"])
        prom = Prom(prom_port)
        wait_for("the agent answering", lambda: b"nodewarden_build_info" in http_get(
            f"http://127.0.0.1:{agent_port}/metrics"), procs, logs)

        def nodes() -> dict[tuple[str, str], float]:
            import json
            import urllib.parse
            body = json.loads(http_get(f"{prom.base}/api/v1/query?"
                                       + urllib.parse.urlencode({"query": 'up{job="nodewarden"}'})))
            return {(r["metric"].get("node", ""), r["metric"].get("cluster", "")): float(r["value"][1])
                    for r in body["data"]["result"]}

        wait_for("all four targets scraped", lambda: len(nodes()) == 4, procs, logs)
        seen = nodes()
        assert set(seen) == {("127.0.0.1", "train-a"), ("localhost", "train-a"), ("::1", "train-a"),
                             ("gpu-node-005", "train-b")}, seen
        assert seen[("127.0.0.1", "train-a")] == 1 and seen[("gpu-node-005", "train-b")] == 1
        # the agent's own series carry the same node label as `up`
        assert prom.value('nodewarden_build_info{node="gpu-node-005",cluster="train-b"}') == 1
        # the agent exports the timer's report although its own validator is off
        assert prom.value('nodewarden_validator_check_status{node="gpu-node-005",check="storage",status="fail"}') == 1
        assert prom.value('nodewarden_validator_last_exit_code{node="gpu-node-005"}') == 1
    finally:
        for p in procs.values():
            stop(p)

"""Secure remote scraping through a real Prometheus: the agent serves /metrics over TLS with basic
auth (``--web.config.file``, certificates made by openssl at test time, a bcrypt hash), and
Debian's ``prometheus`` scrapes it with ``scheme: https``, ``tls_config.ca_file`` and
``basic_auth``. A job with the right password is up and its series arrive; jobs with a wrong
password, without credentials or over plain HTTP are down, and Prometheus says why.

Needs ``prometheus`` on PATH (Debian: ``apt-get install prometheus``) and ``openssl``; no root
(the kernel-log collector is off).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import bcrypt
from kmsgtools import free_port
from test_prometheus_e2e import PROMETHEUS, Prom, http_get, start_prometheus, stop, wait_for

from tests import envneeds, tlscerts

REPO = Path(__file__).resolve().parents[2]

pytestmark = [envneeds.needs(PROMETHEUS is None, "prometheus", "scrapes over TLS (Debian: apt-get install prometheus)"),
              envneeds.needs(tlscerts.OPENSSL is None, "openssl", "makes the TLS certificates")]


def test_prometheus_scrapes_over_tls_with_basic_auth(tmp_path: Path) -> None:
    certs = tlscerts.make(tmp_path / "certs")
    password = "correct horse battery staple"
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: certs/{certs.server_cert.name}\n"
                   f"  key_file: certs/{certs.server_key.name}\n"
                   f"basic_auth_users:\n  prometheus: '{bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()}'\n")
    (tmp_path / "proc").mkdir()
    agent_port, prom_port = free_port(), free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        f'listen = "127.0.0.1:{agent_port}"\nstate_dir = "{tmp_path / "state"}"\nhostname = "tls-node"\n'
        f'sysfs = "{tmp_path / "sys"}"\nprocfs = "{tmp_path / "proc"}"\n'
        "[collectors]\nkernel_log = false\nnvml = false\ninfiniband = false\nedac = false\npcie = false\n"
        "netclass = false\n[validator]\nenabled = false\n")
    target = f"['127.0.0.1:{agent_port}']"
    tls = f"    scheme: https\n    tls_config:\n      ca_file: {certs.ca}\n"
    jobs = {
        "good": tls + f"    basic_auth:\n      username: prometheus\n      password: '{password}'\n",
        "wrong_password": tls + "    basic_auth:\n      username: prometheus\n      password: 'Tr0ub4dor&3'\n",
        "no_credentials": tls,
        "plain_http": f"    basic_auth:\n      username: prometheus\n      password: '{password}'\n",
    }
    prom_config = tmp_path / "prometheus.yml"
    prom_config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        + "".join(f"  - job_name: {name}\n{body}    static_configs:\n      - targets: {target}\n"
                  for name, body in jobs.items()))

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    logs = {"agent": tmp_path / "agent.log", "prometheus": tmp_path / "prometheus.log"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with open(logs["agent"], "wb") as f:
            procs["agent"] = subprocess.Popen(
                [sys.executable, "-m", "nodewarden", "agent", "--config", str(config), "--web.config.file", str(web)],
                cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT)
        procs["prometheus"] = start_prometheus(prom_config, prom_port, tmp_path, logs["prometheus"])
        prom = Prom(prom_port)
        wait_for("the good job up", lambda: prom.value('up{job="good"}') == 1, procs, logs)
        wait_for("nodewarden_build_info over TLS", lambda: prom.value(
            'nodewarden_build_info{job="good"}') == 1, procs, logs)
        for job in ("wrong_password", "no_credentials", "plain_http"):
            wait_for(f"the {job} job scraped and down", lambda job=job: prom.value(f'up{{job="{job}"}}') == 0,
                     procs, logs)
        targets = json.loads(http_get(f"{prom.base}/api/v1/targets"))["data"]["activeTargets"]
        errors = {t["labels"]["job"]: t["lastError"] for t in targets}
        assert errors["good"] == ""
        assert "401 Unauthorized" in errors["wrong_password"], errors
        assert "401 Unauthorized" in errors["no_credentials"], errors
        assert errors["plain_http"], errors  # the TLS port gives plain HTTP no answer
        assert prom.value('nodewarden_build_info{job="wrong_password"}') is None
        assert prom.value('min_over_time(up{job="good"}[1m])') == 1
    finally:
        for p in procs.values():
            stop(p)
    text = logs["agent"].read_text()
    assert procs["agent"].returncode == 0, text[-4000:]
    assert "serving https://" in text and "basic auth" in text
    assert "Traceback" not in text, text[-4000:]
    assert "401, wrong password or unknown user 'prometheus'" in text
    assert "401, no basic auth credentials" in text
    assert "TLS handshake failed" in text

"""The exact per-interval counts of ``dashboards/rules/`` (the failure-statistics tables' source)
lose nothing to a scrape that ends after a rule evaluation it started before.

A sample is stamped with its scrape's start and stored when the scrape ends, so a rule evaluation
can fall between the two: it does not see the sample, and the next evaluation reads it as the
value "one interval ago". A difference to that value never counts the rise.

Here Debian's ``prometheus`` evaluates the recording rules (built from the mixin with a 1 s
interval) every second and scrapes six exporter targets every second. Each target is one
cluster, so its counts are apart. The exporter knows when the group evaluates (``lastEvaluation``
in ``/api/v1/rules``). When a scrape starts less than 0.8 s before an evaluation, the exporter
applies the target's next event and holds the response until 0.1 s after that evaluation. The
scrape still ends within its 1 s timeout. The events are Xid, flash-cut and SXid series born
with their first event, and rises of those and of an EDAC counter that was there from the first
scrape. Each held target's sums over the whole run must equal its events. A rule of the test's
own, the difference without the lag, shows that the held scrapes did straddle evaluations: it
misses rises. Targets are phased by Prometheus (a hash of their labels). One whose scrapes all
start too long before an evaluation gets no events. At least one of the six must be held.
About 20 s.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import json
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kmsgtools import free_port
from test_prometheus_e2e import PROMETHEUS, Prom, start_prometheus, stop, wait_for

from tests import envneeds

from dashboards.mixin import build, config, rules

pytestmark = envneeds.needs(PROMETHEUS is None, "prometheus",
                            "evaluates the recording rules (Debian: apt-get install prometheus)")

CFG = dataclasses.replace(config.DEFAULT, interval="1s")
TARGETS = 6
# A target whose first scrape after the warm-up starts at most ELIGIBLE_S before an evaluation is
# held: each of its scrapes that starts at most HOLD_BEFORE_S before one (the phases drift by
# milliseconds) ends HOLD_PAST_S after it, within the 1 s scrape timeout.
ELIGIBLE_S, HOLD_BEFORE_S, HOLD_PAST_S = 0.6, 0.8, 0.05
WARMUP_SCRAPES = 5   # scrapes of each target before its first event (its `up` and EDAC series there)

XID = '{gpu="3",pci_bus_id="0000:5d:00.0",xid="79",category="uncorrectable"}'
CUT = '{device="mlx5_0",port="1"}'
SXID = '{switch="nvswitch0",pci_bus_id="0000:05:00.0",sxid="12024",severity="fatal"}'
EDAC = '{controller="mc0",dimm="CPU_SrcID#0_Ha#0_Chan#0_DIMM#0"}'
# one event a held scrape: (metric, labels, new value); births, then rises
EVENTS = (
    ("nodewarden_gpu_xid_errors_total", XID, 1),
    ("nodewarden_ib_flash_cuts_total", CUT, 1),
    ("nodewarden_nvswitch_sxid_errors_total", SXID, 1),
    ("nodewarden_gpu_xid_errors_total", XID, 3),
    ("nodewarden_ib_flash_cuts_total", CUT, 2),
    ("nodewarden_edac_correctable_errors_total", EDAC, 9),
)
EDAC_START = 5
NOLAG = "test:nodewarden_ib_flash_cuts:nolag_increase"


class Target:
    """One exporter target's counters and event plan."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], int] = {("nodewarden_edac_correctable_errors_total", EDAC): EDAC_START}
        self.scrapes = 0
        self.applied = 0
        self.eligible: bool | None = None  # decided at the first scrape after the warm-up
        self.lock = threading.Lock()

    def exposition(self) -> bytes:
        lines = []
        for (metric, labels), v in sorted(self.values.items()):
            lines += [f"# TYPE {metric} counter", f"{metric}{labels} {v}"]
        return ("\n".join(lines) + "\n").encode()


class Exporter:
    """:data:`TARGETS` HTTP servers on loopback, each serving its :class:`Target` on ``/metrics``,
    holding a scrape over the rule group's next evaluation once :meth:`arm` gave the phase."""

    def __init__(self) -> None:
        self.targets = [Target() for _ in range(TARGETS)]
        self.ports = [free_port() for _ in range(TARGETS)]
        self.phase: tuple[float, float] | None = None  # (an evaluation's wall-clock time, interval s)
        self.holds: list[tuple[int, float, float]] = []  # (target, evaluation time, response time)
        self._servers = [self._server(t, p) for t, p in zip(self.targets, self.ports)]

    def _server(self, target: Target, port: int) -> http.server.ThreadingHTTPServer:
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = exporter.serve(target, time.time())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    def serve(self, target: Target, now: float) -> bytes:
        with target.lock:
            target.scrapes += 1
            hold_until = None
            if self.phase and target.scrapes > WARMUP_SCRAPES and target.applied < len(EVENTS):
                last, interval = self.phase
                k = int((now - last) // interval) + 1
                next_eval = last + k * interval
                if target.eligible is None:
                    target.eligible = next_eval - now <= ELIGIBLE_S
                if target.eligible and next_eval - now <= HOLD_BEFORE_S:
                    metric, labels, value = EVENTS[target.applied]
                    target.values[(metric, labels)] = value
                    target.applied += 1
                    hold_until = next_eval + HOLD_PAST_S
                    self.holds.append((self.targets.index(target), next_eval, hold_until))
            body = target.exposition()
        if hold_until is not None:
            time.sleep(max(0.0, hold_until - time.time()))
        return body

    def close(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()


def rule_file(tmp: Path) -> Path:
    """The recording rules of ``dashboards/`` built from :data:`CFG`, and the test's rule without
    the lag (the plain difference to one interval ago) in the counts' group, evaluated with them."""
    (text,) = [t for rel, t in build.files(CFG).items() if rel.startswith("rules/")]
    doc = yaml.safe_load(text)
    cuts = 'nodewarden_ib_flash_cuts_total{job="nodewarden"}'
    doc["groups"][0]["rules"].append({
        "record": NOLAG, "expr": f"sum by (job, cluster) ({cuts} - {cuts} offset {CFG.interval} >= 0)"})
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def prometheus_config(tmp: Path, ports: list[int], rules_file: Path) -> Path:
    cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [{
            "job_name": "nodewarden",
            "static_configs": [{"targets": [f"127.0.0.1:{p}"], "labels": {"cluster": f"c{n}", "node": f"n{n}"}}
                               for n, p in enumerate(ports)],
        }],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def group_phase(prom: Prom, name: str) -> tuple[float, float] | None:
    for g in json.loads(_get(f"{prom.base}/api/v1/rules"))["data"]["groups"]:
        if g["name"] == name and not g["lastEvaluation"].startswith("0001"):
            return dt.datetime.fromisoformat(_micro(g["lastEvaluation"])).timestamp(), float(g["interval"])
    return None


def _micro(rfc3339: str) -> str:
    """``2026-12-02T03:04:05.123456789Z`` -> ``2026-12-02T03:04:05.123456+00:00`` (fromisoformat
    takes microseconds at most)."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    tz = "+00:00" if rfc3339.endswith("Z") else ""
    if not tz and frac and ("+" in frac or "-" in frac):
        sign = "+" if "+" in frac else "-"
        frac, tz = frac.split(sign, 1)
        tz = sign + tz
    return f"{head}.{(frac or '0')[:6].ljust(6, '0')}{tz}"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2.0) as r:
        return r.read()


def test_a_scrape_that_lands_after_an_evaluation_is_counted_once(tmp_path: Path) -> None:
    exporter = Exporter()
    prom_port = free_port()
    logs = {"prometheus": tmp_path / "prometheus.log"}
    procs: dict[str, Any] = {}
    try:
        procs["prometheus"] = start_prometheus(prometheus_config(tmp_path, exporter.ports, rule_file(tmp_path)),
                                               prom_port, tmp_path, logs["prometheus"])
        prom = Prom(prom_port)
        group = rules.recording_groups(CFG)[0]["name"]
        wait_for("the rule group evaluated", lambda: group_phase(prom, group) is not None, procs, logs)
        exporter.phase = group_phase(prom, group)
        wait_for("every held target's events applied", lambda: all(
            t.eligible is False or t.applied == len(EVENTS) for t in exporter.targets), procs, logs)
        held = [n for n, t in enumerate(exporter.targets) if t.applied == len(EVENTS)]
        assert held, (f"no target's scrapes start within {ELIGIBLE_S}s before an evaluation "
                      f"(phase {exporter.phase}): nothing was held")
        assert all(t.applied in (0, len(EVENTS)) for t in exporter.targets), [t.applied for t in exporter.targets]
        time.sleep(3 * float(exporter.phase[1]) + 0.5)  # the lagged evaluations after the last event
        # the whole run: from before Prometheus's first sample
        span = "[5m]"

        def sums(record: str, by: str) -> dict[tuple[str, str], float]:
            body = json.loads(_get(f"{prom.base}/api/v1/query?query=" + urllib.parse.quote(
                f"sum by (cluster, {by}) (sum_over_time({record}{span}))")))
            return {(r["metric"]["cluster"], r["metric"].get(by, "")): float(r["value"][1])
                    for r in body["data"]["result"]}

        xids = sums(rules.CLUSTER_XID, "xid")
        cuts = sums(rules.CLUSTER_FLASH_CUTS, "job")
        beyond = sums(rules.CLUSTER_BEYOND, "kind")
        edac = sums(rules.CLUSTER_EDAC, "type")
        nolag = sums(NOLAG, "job")
        for n in range(TARGETS):
            c = f"c{n}"
            want = 1 if n in held else 0
            got = {"xid 79": xids.get((c, "79"), 0), "flash cuts": cuts.get((c, "nodewarden"), 0),
                   "sxid_fatal": beyond.get((c, "sxid_fatal"), 0), "edac corrected": edac.get((c, "corrected"), 0)}
            assert got == {"xid 79": 3 * want, "flash cuts": 2 * want, "sxid_fatal": want,
                           "edac corrected": 4 * want}, (c, got, exporter.holds)
        # the held scrapes did land after the evaluation they started before: without the lag
        # the flash cut's rise (1 -> 2, the second cut event) is missed on some target
        missed = [n for n in held if nolag.get((f"c{n}", "nodewarden"), 0) < 1]
        assert missed, f"no held scrape was missed by the difference without the lag: {nolag}, {exporter.holds}"
    finally:
        for p in procs.values():
            stop(p)
        exporter.close()


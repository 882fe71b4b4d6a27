"""Shared by the alerting end-to-end test: a real Alertmanager (Debian ``prometheus-alertmanager``)
on loopback, a watcher that records every alert its API ever listed, and PromQL checks of the
dashboards' queries over Prometheus's HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

# One receiver that sends nothing; groups flushed within a second (the API lists an alert as soon
# as Prometheus posted it; the timers only matter to notifications).
AM_CONFIG = """\
route:
  receiver: "null"
  group_by: [alertname, cluster, node]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: "null"
"""


def start_alertmanager(workdir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """Alertmanager on 127.0.0.1:``port`` with :data:`AM_CONFIG`, its data in ``workdir``,
    clustering (gossip) off, output in ``log``."""
    assert ALERTMANAGER is not None
    config = workdir / "alertmanager.yml"
    config.write_text(AM_CONFIG)
    (workdir / "am-data").mkdir(exist_ok=True)
    with open(log, "wb") as f:
        return subprocess.Popen(
            [ALERTMANAGER, f"--config.file={config}", f"--storage.path={workdir / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            cwd=workdir, stdout=f, stderr=subprocess.STDOUT)


def get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class AlertWatcher:
    """Polls ``GET /api/v2/alerts`` every ``period`` seconds in a thread and keeps every alert it
    ever saw, by its label set: the first and last time seen, its annotations and status. A
    fault alert over a short window resolves again within seconds; the watcher still has it."""

    def __init__(self, port: int, period: float = 0.3) -> None:
        self.url = f"http://127.0.0.1:{port}/api/v2/alerts"
        self.period = period
        self.seen: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alert-watcher", daemon=True)

    def start(self) -> AlertWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def poll(self) -> list[dict[str, Any]]:
        """One API call; records and returns the alerts it lists."""
        alerts = get_json(self.url)
        now = time.monotonic()
        with self._lock:
            for a in alerts:
                key = tuple(sorted(a["labels"].items()))
                rec = self.seen.setdefault(key, {"labels": dict(a["labels"]), "first": now})
                rec.update(last=now, annotations=dict(a.get("annotations") or {}),
                           state=(a.get("status") or {}).get("state"))
        return alerts

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except (OSError, urllib.error.URLError, ValueError):
                self.errors += 1
            self._stop.wait(self.period)

    def alerts(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every alert seen so far (``name``: of that alertname), as records."""
        with self._lock:
            return [dict(r) for r in self.seen.values() if name is None or r["labels"].get("alertname") == name]

    def matching(self, name: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The alerts of ``name`` with ``labels`` (a value ``""``: the label absent, as Prometheus
        drops an empty label)."""
        return [r for r in self.alerts(name) if all(r["labels"].get(k, "") == v for k, v in labels.items())]


def prom_post(base: str, path: str, params: dict[str, str], timeout: float = 10.0) -> dict[str, Any]:
    """POST a form to Prometheus's HTTP API; the decoded body, also for a 400/422 (a query that
    does not parse or fails: ``status`` "error" with ``errorType`` and ``error``)."""
    data = urllib.parse.urlencode(params).encode()
    req = urllib.request.Request(base + path, data=data, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return json.loads(e.read())
        except ValueError:
            return {"status": "error", "errorType": f"http {e.code}", "error": str(e)}


def run_query(base: str, expr: str, *, instant: bool, range_s: int, step_s: int) -> tuple[str | None, int]:
    """Run ``expr`` as Grafana runs a panel's target: always as an instant query (it must parse
    and evaluate), and for a range target (a time series panel) also over the last ``range_s``
    seconds at ``step_s``. Returns (the error, or None; the number of series the panel gets: the
    instant query's for an instant target, the range query's for a range target)."""
    body = prom_post(base, "/api/v1/query", {"query": expr})
    if body.get("status") != "success":
        return f"{body.get('errorType')}: {body.get('error')}", 0
    if instant:
        return None, _count(body["data"])
    end = time.time()
    body = prom_post(base, "/api/v1/query_range", {"query": expr, "start": f"{end - range_s:.3f}",
                                                     "end": f"{end:.3f}", "step": str(step_s)})
    if body.get("status") != "success":
        return f"range query: {body.get('errorType')}: {body.get('error')}", 0
    return None, _count(body["data"])


def _count(data: dict[str, Any]) -> int:
    result = data.get("result")
    if data.get("resultType") in ("scalar", "string"):
        return 1
    return len(result or ())


def oldest_kmsg_seq() -> int:
    """Sequence number of the oldest record the kernel ring buffer still holds (a fresh open of
    ``/dev/kmsg`` reads from there)."""
    for _ in range(5):
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        try:
            head = os.read(fd, 8192).split(b";", 1)[0]
        except BrokenPipeError:  # overwritten between open and read: again
            continue
        finally:
            os.close(fd)
        return int(head.split(b",")[1])
    raise OSError("/dev/kmsg: the oldest record kept being overwritten")

"""The GpuHardwareHealthy node condition, end to end: the real agent (NVML simulator, sysfs
fixture, a FIFO as its kernel log: nothing is written into this machine's /dev/kmsg) publishes
to a fake Kubernetes API server: real HTTPS on loopback with a certificate of a test CA, that
checks the bearer token, the path and the content type, applies the strategic merge of
``status.conditions`` by ``type`` as the API server does, and keeps the Node object. A
recovery action of a GPU makes the condition False and its clearing True again; an API server
that answers 500, hangs or is down never delays /metrics."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

from nodewarden.agent import nodecondition as nc
from nodewarden.catalog.policy import default_policy
from nodewarden.events import iso_utc
from nodewarden.kmsg import seconds_since_boot
from tests import envneeds, nvmlsim, tlscerts

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
NODE = "gpu-node-001"
TOKEN = "sa-token-of-nodewarden"

pytestmark = envneeds.needs(tlscerts.OPENSSL is None, "openssl", "makes the test certificates")


class FakeApiServer:
    """``GET /api/v1/nodes/NODE`` and ``PATCH /api/v1/nodes/NODE/status`` (strategic merge
    patch: conditions merged by type). ``mode``: ``ok``, ``500`` or ``hang``. ``requests``:
    (method, path, content type) of each authorised request; ``refused``: why others were."""

    def __init__(self, certs: tlscerts.Certs) -> None:
        self.node: dict[str, Any] = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE},
                                     "status": {"conditions": [{"type": "Ready", "status": "True",
                                                                "reason": "KubeletReady"}]}}
        self.mode = "ok"
        self.requests: list[tuple[str, str, str | None]] = []
        self.refused: list[str] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _check(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    fake.refused.append(f"{self.command} {self.path}: bad token")
                    self._answer(401, {"kind": "Status", "code": 401})
                    return False
                if fake.mode == "hang":
                    fake.release.wait(30)
                if fake.mode == "500":
                    self._answer(500, {"kind": "Status", "code": 500, "message": "etcdserver: timeout"})
                    return False
                return True

            def do_GET(self) -> None:
                if not self._check():
                    return
                if self.path != f"/api/v1/nodes/{NODE}":
                    fake.refused.append(f"GET {self.path}")
                    return self._answer(404, {"kind": "Status", "code": 404})
                with fake.lock:
                    fake.requests.append(("GET", self.path, None))
                    self._answer(200, fake.node)

            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if not self._check():
                    return
                ctype = self.headers.get("Content-Type")
                if self.path != f"/api/v1/nodes/{NODE}/status":
                    fake.refused.append(f"PATCH {self.path}")
                    return self._answer(404, {"kind": "Status", "code": 404})
                if ctype != "application/strategic-merge-patch+json":
                    fake.refused.append(f"PATCH content type {ctype}")
                    return self._answer(415, {"kind": "Status", "code": 415})
                patch = json.loads(body)
                with fake.lock:
                    fake.requests.append(("PATCH", self.path, ctype))
                    conds = fake.node["status"]["conditions"]
                    for c in patch["status"]["conditions"]:  # patchMergeKey: type
                        for old in conds:
                            if old["type"] == c["type"]:
                                old.update(c)
                                break
                        else:
                            conds.append(dict(c))
                    self._answer(200, fake.node)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(certs.server_cert, certs.server_key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def condition(self) -> dict[str, Any] | None:
        with self.lock:
            for c in self.node["status"]["conditions"]:
                if c["type"] == "GpuHardwareHealthy":
                    return dict(c)
        return None

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port: int, timeout: float) -> tuple[float, str]:
    """(seconds taken, body) of one GET /metrics."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return time.monotonic() - t0, data.decode()


def wait_for(what: str, check: Callable[[], bool], agent: subprocess.Popen[bytes], log: Path,
             timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            pytest.fail(f"agent exited {agent.returncode} waiting for {what}:\n{log.read_text()}")
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


def series(body: str, name: str) -> float:
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@dataclasses.dataclass
class Node:
    """One agent's surroundings: its config, environment, kernel log (a FIFO held open by
    ``writer``: the agent never reads an end of file), /metrics port, state directory."""

    config: Path
    env: dict[str, str]
    kmsg: Path
    writer: int
    port: int
    state: Path
    gpus: list[dict[str, Any]]
    nvml: Path

    def start(self, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as f:
            return subprocess.Popen([sys.executable, "-m", "nodewarden", "agent", "--config", str(self.config),
                                     "--kmsg", str(self.kmsg)], cwd=REPO, env=self.env, stdout=f,
                                    stderr=subprocess.STDOUT)


def prepare(tmp_path: Path, certs: tlscerts.Certs, api: FakeApiServer) -> Node:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(TOKEN + "\n")
    (sa / "ca.crt").write_bytes(certs.ca.read_bytes())
    libdir = nvmlsim.build(tmp_path)
    gpus = nvmlsim.default_gpus(2)
    for g in gpus:
        g["recovery_action"] = 0  # an r570 driver: the field is read
    nvml = nvmlsim.write_state(tmp_path / "nvml.json", gpus=gpus, driver_version="570.86.15")
    kmsg = tmp_path / "kmsg"
    os.mkfifo(kmsg)
    writer = os.open(kmsg, os.O_RDWR | os.O_NONBLOCK)
    (tmp_path / "proc").mkdir()
    port = free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        f'listen = "127.0.0.1:{port}"\nstate_dir = "{tmp_path / "state"}"\nhostname = "{NODE}"\n'
        f'sysfs = "{FIXTURE}"\nprocfs = "{tmp_path / "proc"}"\npoll_interval_seconds = 0.5\n'
        'collector_timeout_seconds = 2\n[validator]\nenabled = false\n'
        f'[kubernetes]\nnode_condition = true\nservice_account_dir = "{sa}"\nheartbeat_seconds = 2\n'
        'request_timeout_seconds = 1\n')
    env = nvmlsim.env(libdir, nvml)
    env.update(PYTHONPATH=str(REPO), NODE_NAME=NODE, KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(api.port))
    return Node(config, env, kmsg, writer, port, tmp_path / "state", gpus, nvml)


def test_the_agent_publishes_the_condition_and_never_blocks_metrics(tmp_path: Path) -> None:
    certs = tlscerts.make(tmp_path / "certs")
    api = FakeApiServer(certs)
    node = prepare(tmp_path, certs, api)
    port, gpus, nvml, writer = node.port, node.gpus, node.nvml, node.writer
    log = tmp_path / "agent.log"
    agent = node.start(log)
    try:
        def cond(status: str, reason: str | None = None) -> Callable[[], bool]:
            def check() -> bool:
                c = api.condition()
                return c is not None and c["status"] == status and (reason is None or c["reason"] == reason)
            return check

        wait_for("GpuHardwareHealthy True", cond("True", "GpuHardwareHealthy"), agent, log)
        healthy = api.condition()
        assert api.requests[0][0] == "GET" and api.refused == []
        assert [c["type"] for c in api.node["status"]["conditions"]] == ["Ready", "GpuHardwareHealthy"]

        # the heartbeat moves, the transition does not
        wait_for("a heartbeat", lambda: api.condition()["lastHeartbeatTime"] != healthy["lastHeartbeatTime"],
                 agent, log, timeout=10)
        assert api.condition()["lastTransitionTime"] == healthy["lastTransitionTime"]

        time.sleep(1.1)  # lastTransitionTime has one-second resolution
        nvmlsim.update_gpu(nvml, 1, {"recovery_action": 1})  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
        wait_for("False GpuResetRequired", cond("False", "GpuResetRequired"), agent, log)
        bad = api.condition()
        bus = gpus[1]["pci_bus_id"].lower()[-12:]  # NVML's 8-digit domain, printed with 4
        assert bad["message"] == f"GPU 1 ({bus}): NVML recovery action gpu_reset", bad
        assert bad["lastTransitionTime"] != healthy["lastTransitionTime"]

        time.sleep(1.1)
        nvmlsim.update_gpu(nvml, 1, {"recovery_action": 0})
        wait_for("True again", cond("True", "GpuHardwareHealthy"), agent, log)
        assert api.condition()["lastTransitionTime"] != bad["lastTransitionTime"]

        # a failing, then a hanging API server: /metrics answers at once, errors are counted
        api.mode = "500"
        wait_for("errors counted", lambda: series(metrics(port, 5)[1],
                 'nodewarden_kubernetes_condition_updates_total{result="error"}') >= 2, agent, log)
        api.mode = "hang"
        time.sleep(1.5)
        for _ in range(5):
            took, body = metrics(port, 5)
            assert took < 0.5 and "nodewarden_gpu_info{" in body
        api.mode = "ok"
        api.release.set()
        nvmlsim.update_gpu(nvml, 0, {"lost": True})
        wait_for("False GpuLost after the outage", cond("False", "GpuLost"), agent, log)
        assert "GPU 0" in api.condition()["message"]
        assert api.refused == []
        _, body = metrics(port, 5)
        assert series(body, 'nodewarden_kubernetes_condition_updates_total{result="ok"}') >= 4

        # down: nothing listens any more, the scrape still answers at once
        api.close()
        time.sleep(1.5)
        took, body = metrics(port, 5)
        assert took < 0.5 and "nodewarden_kubernetes_condition_updates_total" in body
    finally:
        agent.terminate()
        try:
            agent.wait(20)
        finally:
            os.close(writer)
            api.close()
    assert agent.returncode == 0, log.read_text()
    assert log.read_text().count("cannot update the GpuHardwareHealthy condition") <= 3  # once per failing spell


XID79 = "NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
HEALTH_KEYS = {"node", "status", "reason", "error", "updates", "latched", "journal_lines_skipped"}


def healthz(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def xid_total(port: int) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics(port, 5)[1].splitlines()
               if line.startswith("nodewarden_gpu_xid_errors_total{"))


def write_report(state: Path, finished: float) -> None:
    """A passing validator report, as ``nodewarden validate --json`` writes it (atomically)."""
    doc = {"schema": "nodewarden.validate/1", "host": NODE, "exit_code": 0,
           "started": iso_utc(dt.datetime.fromtimestamp(finished - 30, dt.timezone.utc)),
           "finished": iso_utc(dt.datetime.fromtimestamp(finished, dt.timezone.utc)),
           "checks": [{"check": "gemm", "status": "pass", "measurements": []}]}
    tmp = state / "validate.json.tmp"
    tmp.write_text(json.dumps(doc))
    tmp.replace(state / "validate.json")


def test_a_restarted_agent_keeps_the_kernel_log_latch_until_a_passing_report(tmp_path: Path) -> None:
    """An Xid 79 (the policy drains the node) makes the condition False; the agent restarts (the
    kernel log holds nothing new: the event is only in the journal); the condition stays False
    with the same reason, message and lastTransitionTime, the Xid is not counted twice, and a
    passing validator report finished after it sets it True."""
    certs = tlscerts.make(tmp_path / "certs")
    api = FakeApiServer(certs)
    node = prepare(tmp_path, certs, api)
    reason = nc.XID_REASONS[default_policy().action(79)]
    log = tmp_path / "agent.log"

    def cond(status: str, why: str | None = None) -> Callable[[], bool]:
        # the API server holds it, and the agent has had the API's answer to its PATCH (the
        # server stores the condition before it answers: /healthz says "published" after that)
        def check() -> bool:
            c = api.condition()
            if c is None or c["status"] != status or (why is not None and c["reason"] != why):
                return False
            try:
                entry = healthz(node.port)["kubernetes"]
            except OSError:  # not listening yet
                return False
            return entry["status"] == c["status"] and entry["reason"] == c["reason"]
        return check

    def kube(port: int) -> dict[str, Any]:
        entry = healthz(port)["kubernetes"]
        assert set(entry) == HEALTH_KEYS, entry
        assert entry["updates"]["error"] == 0 and entry["updates"]["ok"] >= 1, entry
        return {k: v for k, v in entry.items() if k != "updates"}

    agent = node.start(log)
    try:
        wait_for("GpuHardwareHealthy True", cond("True", "GpuHardwareHealthy"), agent, log)
        usec = int(seconds_since_boot() * 1e6)
        os.write(node.writer, f"3,1,{usec},-;{XID79}\n".encode())
        wait_for(f"False {reason}", cond("False", reason), agent, log)
        bad = api.condition()
        assert bad["message"].startswith("GPU (0000:19:00.0): Xid 79"), bad
        assert kube(node.port) == {"node": NODE, "status": "False", "reason": reason, "error": None, "latched": 1,
                                   "journal_lines_skipped": 0}
        assert xid_total(node.port) == 1
        agent.terminate()
        assert agent.wait(20) == 0, log.read_text()

        agent = node.start(log)
        def nvml_polled() -> bool:
            try:
                return series(metrics(node.port, 5)[1], 'nodewarden_collector_success{collector="nvml"}') == 1
            except OSError:  # not listening yet
                return False

        wait_for("NVML polled", nvml_polled, agent, log)
        patches = sum(1 for r in api.requests if r[0] == "PATCH")
        # a change is sent at once, an unchanged condition with the next heartbeat (2 s)
        wait_for("a patch after NVML's answer", lambda: sum(1 for r in api.requests if r[0] == "PATCH") > patches,
                 agent, log, timeout=10)
        after = api.condition()
        assert {k: after[k] for k in ("status", "reason", "message", "lastTransitionTime")} == {
            k: bad[k] for k in ("status", "reason", "message", "lastTransitionTime")}, (bad, after)
        assert kube(node.port) == {"node": NODE, "status": "False", "reason": reason, "error": None, "latched": 1,
                                   "journal_lines_skipped": 0}
        assert xid_total(node.port) == 1  # persisted, not counted again
        assert "node condition: 1 finding(s) latched from 1 kernel-log event(s)" in log.read_text()

        time.sleep(1.1)  # lastTransitionTime has one-second resolution
        write_report(node.state, time.time())
        wait_for("True after the passing report", cond("True", "GpuHardwareHealthy"), agent, log)
        assert api.condition()["lastTransitionTime"] != bad["lastTransitionTime"]
        assert kube(node.port) == {"node": NODE, "status": "True", "reason": "GpuHardwareHealthy", "error": None,
                                   "latched": 0, "journal_lines_skipped": 0}
        assert api.refused == []
    finally:
        agent.terminate()
        try:
            agent.wait(20)
        finally:
            os.close(node.writer)
            api.close()
    assert agent.returncode == 0, log.read_text()

"""The agent's HTTP endpoint (stdlib ``http.server``, one thread per request):

* ``GET /metrics``: Prometheus text format (``prometheus_client.exposition.generate_latest``)
* ``GET /healthz``: small JSON, 200 when ``ok`` else 503 (see :func:`nodewarden.agent.daemon.health`)
* anything else: 404
"""

from __future__ import annotations

import json
import logging
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:9764``, ``[::1]:9764``, ``:9764`` for all addresses) -> (host, port).

    PORT is 1-65535 in ASCII digits only (no sign, no ``_``, no other script's digits); no
    whitespace or NUL anywhere. Raises ValueError naming what is wrong.
    """
    if any(c.isspace() or c == "\0" for c in text):
        raise ValueError(f"no spaces or control characters allowed in HOST:PORT, got {text!r}")
    host, sep, port = text.rpartition(":")
    if not sep or not port:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets: [{host}]:{port}")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"port {port!r} is not a number (ASCII digits 0-9 only)")
    num = int(port)
    if not 1 <= num <= 65535:
        raise ValueError(f"port {num} is out of range 1-65535")
    return host, num


class AgentHTTPServer(ThreadingHTTPServer):
    """Serves ``registry`` on /metrics and ``health()`` on /healthz. Threads are daemons, so a
    slow client never holds up shutdown."""

    daemon_threads = True

    def __init__(self, addr: tuple[str, int], registry: CollectorRegistry,
                 health: Callable[[], dict[str, Any]]) -> None:
        host = addr[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.registry = registry
        self.health = health
        super().__init__(addr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    server_version = "nodewarden"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = generate_latest(self.server.registry)
            except Exception:  # never expected: the collector serves its last snapshot on errors
                log.exception("rendering /metrics failed")
                self._send(500, b"internal error\n", "text/plain; charset=utf-8")
                return
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            h = self.server.health()
            self._send(200 if h.get("ok") else 503, (json.dumps(h) + "\n").encode(), "application/json")
        elif path == "/":
            self._send(200, b'<html><body><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a>'
                            b"</body></html>\n", "text/html; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s %s", self.address_string(), format % args)

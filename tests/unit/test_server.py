"""The agent's HTTP server (nodewarden.agent.server) and web config (nodewarden.agent.webconfig)
over real sockets on loopback: HEAD, keep-alive, timeouts, the connection cap, one log line per
client error, basic auth with bcrypt, TLS with certificates made by openssl, and every kind of
bad web config stopping the agent at start (exit 2, the file and the key named)."""

from __future__ import annotations

import base64
import gzip
import http.client
import logging
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from tests import envneeds

from nodewarden.agent import exporter as ex
from nodewarden.agent import webconfig as wc
from nodewarden.agent.server import (FD_RESERVE, MIN_CONNECTIONS, AgentHTTPServer, FdLimitError, ServerSettings,
                                     connection_cap)
from tests import tlscerts

REPO = Path(__file__).resolve().parents[2]
SERVER_LOG = "nodewarden.agent.server"


def registry(delay: float = 0.0) -> CollectorRegistry:
    reg = CollectorRegistry()
    if delay:
        class Slow:
            def collect(self) -> Iterator[GaugeMetricFamily]:
                time.sleep(delay)
                yield GaugeMetricFamily("nodewarden_test_slow", "a slow collector", value=1)
        reg.register(Slow())
    else:
        Gauge("nodewarden_test_value", "a test gauge", registry=reg).set(42)
    return reg


class Running:
    def __init__(self, reg: CollectorRegistry | Callable[[], bytes] | None = None, health: Callable[[], dict[str, Any]] | None = None,
                 web: wc.WebConfig | None = None, **settings: Any) -> None:
        self.server = AgentHTTPServer(("127.0.0.1", 0), reg or registry(), health or (lambda: {"ok": True}),
                                      settings=ServerSettings(**settings), web=web)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def serve() -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(*args: Any, **kw: Any) -> Running:
        started.append(Running(*args, **kw))
        return started[-1]
    yield start
    for r in started:
        r.close()


def raw(port: int, request: bytes, timeout: float = 3.0) -> bytes:
    """Send ``request``, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def server_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == SERVER_LOG]


def wait_until(check: Callable[[], bool], deadline_s: float = 5.0) -> None:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < deadline_s, "timed out"
        time.sleep(0.02)


# --- HTTP ------------------------------------------------------------------------------------

def test_get_head_keepalive_and_errors(serve) -> None:
    r = serve(health=lambda: {"ok": False, "why": "test"})
    c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
    c.request("GET", "/metrics")
    g = c.getresponse()
    body = g.read()
    assert g.status == 200 and b"nodewarden_test_value 42.0" in body
    # no Accept: the text format, with the content type prometheus_client gives it (0.0.4)
    assert g.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    assert g.getheader("Content-Encoding") is None and g.getheader("Vary") == "Accept, Accept-Encoding"
    c.request("HEAD", "/metrics")  # the same connection, kept alive
    h = c.getresponse()
    assert h.status == 200 and h.read() == b""
    assert h.getheader("Content-Length") == str(len(body)) and h.getheader("Content-Type") == g.getheader("Content-Type")
    c.request("GET", "/healthz")
    z = c.getresponse()
    assert z.status == 503 and z.read() == b'{"ok": false, "why": "test"}\n'
    c.request("GET", "/nope")
    n = c.getresponse()
    assert n.status == 404 and n.read() == b"not found\n"
    c.request("POST", "/metrics")
    p = c.getresponse()
    assert p.status == 405 and p.getheader("Allow") == "GET, HEAD"
    p.read()
    c.close()
    # HEAD on the wire: headers, no body bytes at all
    out = raw(r.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and rest == b""
    assert f"Content-Length: {len(body)}".encode() in head


PROM2_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.x sends


def get_metrics(c: http.client.HTTPConnection, method: str = "GET", **headers: str) -> tuple[http.client.HTTPResponse, bytes]:
    c.request(method, "/metrics", headers=headers)
    r = c.getresponse()
    return r, r.read()


def test_openmetrics_and_gzip_negotiated_from_kept_bytes(serve) -> None:
    """The agent's Exposition behind the server (given as the daemon gives it, its bound
    ``render``): each format as prometheus_client writes it, with its headers; a scrape of an
    unchanged state formats nothing; a change is served at the next scrape."""
    c = ex.Counters()
    c.add(ex.XID, ("0", "0000:18:00.0", "48", "memory"), 2)
    expo = ex.Exposition(ex.AgentCollector(c.snapshot))
    reg = ex.make_registry(c.snapshot)
    r = serve(expo.render)
    conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
    om, om_body = get_metrics(conn, Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})
    assert om.status == 200 and om.getheader("Content-Encoding") == "gzip"
    assert om.getheader("Content-Type") == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert om.getheader("Vary") == "Accept, Accept-Encoding" and om.getheader("Content-Length") == str(len(om_body))
    assert gzip.decompress(om_body) == openmetrics_latest(reg)
    assert b'nodewarden_gpu_xid_errors_total{category="memory",gpu="0",pci_bus_id="0000:18:00.0",xid="48"} 2.0\n' \
        in gzip.decompress(om_body) and gzip.decompress(om_body).endswith(b"# EOF\n")
    txt, txt_body = get_metrics(conn, **{"Accept-Encoding": "gzip"})
    assert txt.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    assert txt.getheader("Content-Encoding") == "gzip" and gzip.decompress(txt_body) == generate_latest(reg)
    plain, plain_body = get_metrics(conn, Accept="application/openmetrics-text; version=1.0.0")
    assert plain.getheader("Content-Encoding") is None and plain_body == openmetrics_latest(reg)
    head, nothing = get_metrics(conn, "HEAD", Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})
    assert nothing == b"" and head.getheader("Content-Length") == str(len(om_body))
    assert head.getheader("Content-Encoding") == "gzip"
    rendered, compressed = expo.families_rendered, expo.bodies_compressed
    for _ in range(3):  # unchanged: the same bytes, nothing formatted or compressed
        assert get_metrics(conn, Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})[1] == om_body
        assert get_metrics(conn)[1] == generate_latest(reg)
    assert (expo.families_rendered, expo.bodies_compressed) == (rendered, compressed)
    c.add(ex.OVERRUNS)
    again = get_metrics(conn, Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})[1]
    assert gzip.decompress(again) == openmetrics_latest(reg) and b"nodewarden_collector_kmsg_overruns_total 1.0\n" \
        in gzip.decompress(again)
    assert (expo.families_rendered, expo.bodies_compressed) == (rendered + 1, compressed + 1)
    conn.close()


def test_a_registry_is_negotiated_too_and_a_bare_function_is_text(serve) -> None:
    r = serve()  # a registry: rendered at each scrape, as prometheus_client's handler does
    conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
    g, body = get_metrics(conn, Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})
    assert g.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body) == b"# HELP nodewarden_test_value a test gauge\n# TYPE nodewarden_test_value gauge\n" \
        b"nodewarden_test_value 42.0\n# EOF\n"
    conn.close()
    f = serve(lambda: b"nodewarden_test_fixed 1.0\n")
    conn = http.client.HTTPConnection("127.0.0.1", f.port, timeout=3)
    g, body = get_metrics(conn, Accept=PROM2_ACCEPT, **{"Accept-Encoding": "gzip"})
    assert body == b"nodewarden_test_fixed 1.0\n" and g.getheader("Content-Encoding") is None
    assert g.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    conn.close()


def test_a_bad_request_gets_400_and_one_line(serve, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve()
    assert raw(r.port, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request")
    assert raw(r.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").startswith(
        b"HTTP/1.1 413")
    assert raw(r.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000).startswith(
        b"HTTP/1.1 431")
    recs = server_lines(caplog)
    assert len(recs) == 3 and all(x.exc_info is None for x in recs), [x.getMessage() for x in recs]


def test_an_idle_connection_is_closed_after_the_request_timeout(serve, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve(request_timeout_seconds=0.3)
    with socket.create_connection(("127.0.0.1", r.port), timeout=3) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /metr")  # a slow client: part of a request head, then nothing
        assert s.recv(100) == b""  # closed by the server
        assert 0.25 < time.monotonic() - t0 < 2.0
    wait_until(lambda: r.server.connection_count() == 0)
    msgs = [x.getMessage() for x in server_lines(caplog)]
    assert len(msgs) == 1 and "no complete request within 0.3s" in msgs[0]


def test_keepalive_idle_timeout(serve) -> None:
    r = serve(idle_timeout_seconds=0.3, request_timeout_seconds=5)
    with socket.create_connection(("127.0.0.1", r.port), timeout=3) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        t0 = time.monotonic()
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b'{"ok": true}\n')
        assert 0.25 < time.monotonic() - t0 < 2.0


def test_at_the_cap_the_longest_idle_connection_makes_room(serve, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve(max_connections=5)
    idle = [socket.create_connection(("127.0.0.1", r.port), timeout=3) for _ in range(40)]
    try:
        wait_until(lambda: r.server.connection_count() == 5)
        for _ in range(10):  # every scrape answered although 40 idle connections were opened
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
            c.request("GET", "/metrics")
            assert c.getresponse().status == 200
            c.close()
        assert r.server.connection_count() <= 5 + 1
        # the oldest idle ones were closed, the newest kept
        idle[0].settimeout(2)
        assert idle[0].recv(10) == b""
    finally:
        for s in idle:
            s.close()
    lines = [x.getMessage() for x in server_lines(caplog) if "at the cap" in x.getMessage()]
    assert 1 <= len(lines) <= 2  # a summary, not one line per connection


def test_a_client_hanging_up_early_logs_one_line(serve, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve(registry(delay=0.3))
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", r.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.close()  # before the answer
    time.sleep(1.2)
    c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=3)
    c.request("GET", "/metrics")
    assert c.getresponse().status == 200
    recs = server_lines(caplog)
    assert len(recs) == 3, [x.getMessage() for x in recs]
    assert all("closed the connection before the response" in x.getMessage() and x.exc_info is None for x in recs)
    assert r.server.connection_count() <= 1


def test_connection_cap_keeps_file_descriptors_for_the_journal() -> None:
    assert connection_cap(256, limit=1024, in_use=20) == 256
    assert connection_cap(5000, limit=1024, in_use=20) == 1024 - 20 - 2 - FD_RESERVE
    assert connection_cap(5000, limit=1024, in_use=20, reserve=0) == 1002
    with pytest.raises(FdLimitError, match="open-file limit \\(100"):
        connection_cap(256, limit=100, in_use=100 - FD_RESERVE - 2 - MIN_CONNECTIONS + 1)
    assert connection_cap(256, limit=100, in_use=100 - FD_RESERVE - 2 - MIN_CONNECTIONS) == MIN_CONNECTIONS


# --- basic auth and TLS ----------------------------------------------------------------------

def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def web(tmp_path: Path, text: str) -> wc.WebConfig:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return wc.load(p)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth(serve, tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve(web=web(tmp_path, f"basic_auth_users:\n  prom: '{hashed('s3cret')}'\n  other: '{hashed('x')}'\n"))
    c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=5)

    def get(headers: dict[str, str], path: str = "/metrics") -> tuple[int, http.client.HTTPResponse]:
        c.request("GET", path, headers=headers)
        resp = c.getresponse()
        resp.read()
        return resp.status, resp

    st, resp = get({})
    assert st == 401 and resp.getheader("WWW-Authenticate") == 'Basic realm="nodewarden"'
    assert get(basic("prom", "wrong"))[0] == 401
    assert get(basic("nobody", "s3cret"))[0] == 401
    assert get(basic("other", "s3cret"))[0] == 401  # another user's password
    assert get({"Authorization": "Bearer abc"})[0] == 401
    for _ in range(3):  # the second and third from the cache
        assert get(basic("prom", "s3cret"))[0] == 200
    assert get(basic("prom", "s3cret"), "/healthz")[0] == 200
    assert get(basic("prom", "wrong"))[0] == 401  # a cached failure stays a failure
    msgs = [x.getMessage() for x in server_lines(caplog)]
    assert len(msgs) == 6 and all(": 401, " in m for m in msgs), msgs


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tlscerts.Certs:
    if tlscerts.OPENSSL is None:
        envneeds.need("openssl", "makes the TLS tests' certificates")
    return tlscerts.make(tmp_path_factory.mktemp("certs"))


def tls_get(port: int, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> int:
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    try:
        c.request("GET", "/metrics", headers=headers or {})
        resp = c.getresponse()
        body = resp.read()
        if resp.status == 200:
            assert b"nodewarden_test_value 42.0" in body
        return resp.status
    finally:
        c.close()


def test_tls_and_basic_auth(serve, tmp_path, certs, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    r = serve(request_timeout_seconds=1, web=web(tmp_path, (
        f"tls_server_config:\n  cert_file: {certs.server_cert}\n  key_file: {certs.server_key}\n"
        f"http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=3600\n"
        f"basic_auth_users:\n  prom: {hashed('pw')}\n")))
    assert r.server.scheme == "https"
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    assert tls_get(r.port, ctx, basic("prom", "pw")) == 200
    assert tls_get(r.port, ctx, basic("prom", "nope")) == 401
    c = http.client.HTTPSConnection("127.0.0.1", r.port, context=ctx, timeout=5)
    c.request("HEAD", "/metrics", headers=basic("prom", "pw"))
    h = c.getresponse()
    assert h.status == 200 and h.getheader("Strict-Transport-Security") == "max-age=3600"
    c.close()
    # a client that does not trust the server's CA refuses it; plain HTTP gets no answer
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_get(r.port, ssl.create_default_context(cafile=str(certs.other_ca)))
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        hc = http.client.HTTPConnection("127.0.0.1", r.port, timeout=5)
        hc.request("GET", "/metrics")
        hc.getresponse()
    # a TCP connection that never starts the handshake is closed after the request timeout
    with socket.create_connection(("127.0.0.1", r.port), timeout=5) as s:
        assert s.recv(10) == b""
    assert tls_get(r.port, ctx, basic("prom", "pw")) == 200
    wait_until(lambda: r.server.connection_count() == 0)
    handshake = [x for x in server_lines(caplog) if "TLS handshake failed" in x.getMessage()]
    assert len(handshake) == 3 and all(x.exc_info is None for x in handshake)  # one line per failure


def test_client_certificates(serve, tmp_path, certs) -> None:
    r = serve(web=web(tmp_path, (
        f"tls_server_config:\n  cert_file: {certs.server_cert}\n  key_file: {certs.server_key}\n"
        f"  client_ca_file: {certs.ca}\n  client_auth_type: RequireAndVerifyClientCert\n")))
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected)):
        tls_get(r.port, ctx)
    ctx.load_cert_chain(certs.client_cert, certs.client_key)
    assert tls_get(r.port, ctx) == 200
    # a client certificate from another CA is refused
    bad = tlscerts._leaf(certs.other_ca.parent, "intruder", "other-ca", "extendedKeyUsage=clientAuth\n")
    ctx2 = ssl.create_default_context(cafile=str(certs.ca))
    ctx2.load_cert_chain(*bad)
    with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected)):
        tls_get(r.port, ctx2)


# --- bad web configs -------------------------------------------------------------------------

BAD = [
    ("tls_server_config: [unclosed\n", "not valid YAML"),
    ("- a list\n", "expected a mapping of"),
    ("tls_config:\n  cert_file: x\n", "tls_config: unknown key"),
    ("tls_server_config:\n  cert_file: {cert}\n", "tls_server_config.key_file: missing"),
    ("tls_server_config:\n  cert_file: /nonexistent/a.crt\n  key_file: {key}\n",
     "tls_server_config.cert_file: /nonexistent/a.crt: cannot read: No such file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {otherkey}\n", "tls_server_config.cert_file/key_file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {cert}\n", "tls_server_config.cert_file/key_file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n",
     "tls_server_config.client_auth_type: RequireAnyClientCert is not supported"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: Maybe\n",
     "tls_server_config.client_auth_type: expected one of"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {ca}\n",
     "tls_server_config.client_ca_file: set without a client_auth_type"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: VerifyClientCertIfGiven\n",
     "tls_server_config.client_ca_file: missing"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
     "tls_server_config.min_version: expected one of"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
     "tls_server_config.cipher_suites: not supported"),
    ("basic_auth_users:\n  prom: plaintext-password\n", "basic_auth_users.prom: not a bcrypt hash"),
    ("basic_auth_users:\n  prom: '$1$abcdefgh$0123456789012345678901'\n", "basic_auth_users.prom: not a bcrypt hash"),
    ("basic_auth_users: [prom]\n", "basic_auth_users: expected a mapping"),
    ("http_server_config:\n  headers:\n    Set-Cookie: a=b\n", "http_server_config.headers.Set-Cookie: not an allowed"),
]


@pytest.mark.parametrize("text,problem", BAD, ids=[p for _, p in BAD])
def test_bad_web_configs_name_the_file_and_key(tmp_path, certs, text: str, problem: str) -> None:
    p = tmp_path / "web.yml"
    p.write_text(text.format(cert=certs.server_cert, key=certs.server_key, otherkey=certs.other_key, ca=certs.ca))
    with pytest.raises(wc.WebConfigError) as e:
        wc.load(p)
    assert str(e.value).startswith(f"{p}: ") and problem in str(e.value), str(e.value)


def test_good_web_configs(tmp_path, certs) -> None:
    assert wc.load(_write(tmp_path, "")) == wc.WebConfig(source=str(tmp_path / "web.yml"))
    (tmp_path / "tls").mkdir()
    for f in (certs.server_cert, certs.server_key):
        (tmp_path / "tls" / f.name).write_bytes(f.read_bytes())
    cfg = wc.load(_write(tmp_path, "tls_server_config:\n  cert_file: tls/server.crt\n  key_file: tls/server.key\n"
                                   "  min_version: TLS13\nhttp_server_config:\n  http2: false\n"))  # relative paths
    assert cfg.ssl_context is not None and cfg.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert cfg.ssl_context.verify_mode == ssl.CERT_NONE and not cfg.users


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return p


def test_the_agent_stops_at_start_on_a_bad_web_config(tmp_path) -> None:
    p = _write(tmp_path, "basic_auth_users:\n  prom: hunter2\n")
    base = [sys.executable, "-m", "nodewarden", "agent", "--state-dir", str(tmp_path / "state"), "--listen",
            "127.0.0.1:9", "--no-validator"]  # never bound: the web config is refused first
    run = subprocess.run([*base, "--web.config.file", str(p)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 2
    assert f"--web.config.file: {p}: basic_auth_users.prom: not a bcrypt hash" in run.stderr
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[http]\nweb_config_file = "{tmp_path / "absent.yml"}"\n')
    run = subprocess.run([*base, "--config", str(toml)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 2
    assert f"{toml}: http.web_config_file: {tmp_path / 'absent.yml'}: cannot read: No such file" in run.stderr
    assert not (tmp_path / "state").exists()  # stopped before doing anything


def test_http_settings_in_the_agent_config(tmp_path) -> None:
    from nodewarden.agent import config as cf
    toml = tmp_path / "agent.toml"
    toml.write_text('[http]\nweb_config_file = "/etc/w.yml"\nmax_connections = 32\nbacklog = 64\n'
                    "request_timeout_seconds = 2\nidle_timeout_seconds = 30\nwrite_timeout_seconds = 5\n")
    assert cf.load(toml).http == cf.HttpConfig(web_config_file="/etc/w.yml", max_connections=32, backlog=64,
                                               request_timeout_seconds=2, idle_timeout_seconds=30,
                                               write_timeout_seconds=5)
    toml.write_text("[http]\nmax_connections = 0\n")
    with pytest.raises(cf.ConfigError, match="http.max_connections: expected an integer from 1 to"):
        cf.load(toml)
    toml.write_text("[http]\ntimeout = 3\n")
    with pytest.raises(cf.ConfigError, match="http.timeout: unknown key"):
        cf.load(toml)


def test_a_client_that_does_not_read_the_response_is_closed(serve, caplog) -> None:
    caplog.set_level(logging.INFO, SERVER_LOG)
    reg = CollectorRegistry()

    class Big:
        def collect(self) -> Iterator[GaugeMetricFamily]:  # 32 MB: more than the kernel's socket buffers
            yield GaugeMetricFamily("nodewarden_test_big", "x" * (32 << 20), value=1)
    reg.register(Big())
    r = serve(reg, write_timeout_seconds=0.5)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", r.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: any("not read within 0.5s" in x.getMessage() for x in server_lines(caplog)), 15)
    wait_until(lambda: r.server.connection_count() == 0)
    assert len(server_lines(caplog)) == 1


def test_connections_stuck_before_the_tls_handshake_make_room(serve, tmp_path, certs) -> None:
    r = serve(max_connections=5, request_timeout_seconds=30, web=web(tmp_path, (
        f"tls_server_config:\n  cert_file: {certs.server_cert}\n  key_file: {certs.server_key}\n")))
    idle = [socket.create_connection(("127.0.0.1", r.port), timeout=3) for _ in range(30)]
    try:
        wait_until(lambda: r.server.connection_count() == 5)
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        for _ in range(5):
            assert tls_get(r.port, ctx) == 200
        assert r.server.connection_count() <= 5 + 1
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize("text, message", [
    ("[::1:9764", "no closing bracket"),
    ("[::1]", "no port after the brackets"),
    ("::1:9764", "in brackets: [::1]:9764"),
    ("127.0.0.1:0", "port 0"),
    ("127.0.0.1:+9764", "not a number"),
    ("127.0.0.1:٩٧٦٤", "not a number"),
    (" 127.0.0.1:9764", "no spaces"),
])
def test_listen_addresses_refused_with_the_right_hint(text: str, message: str) -> None:
    from nodewarden.agent.config import parse_listen
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_listen(text)
    assert parse_listen("[::1]:9764") == ("::1", 9764)


@pytest.mark.parametrize("host, tls, users, exposed", [
    ("127.0.0.1", False, False, False), ("::1", False, False, False), ("localhost", False, False, False),
    ("", False, False, True), ("0.0.0.0", True, False, True), ("::", False, True, True), ("192.0.2.7", True, True, False),
])
def test_listening_beyond_loopback_without_tls_and_auth_is_warned(host: str, tls: bool, users: bool,
                                                                   exposed: bool) -> None:
    from types import SimpleNamespace
    from nodewarden.agent.daemon import open_to_network
    web = SimpleNamespace(ssl_context=object() if tls else None, users={"prom": b"x"} if users else {})
    warning = open_to_network(host, web if (tls or users) else None)
    assert (warning is not None) == exposed
    if exposed:
        assert "without" in warning and "web_config_file" in warning


def test_http_date_is_the_imf_fixdate_email_utils_gives() -> None:
    import email.utils

    from nodewarden.agent.server import http_date
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"  # RFC 9110's example
    for t in (0.0, 951782400.0, 1709164800.5, 4102444799.0, 1795000000.0):  # 1970, leap days, 2099
        assert http_date(t) == email.utils.formatdate(t, usegmt=True)


def test_an_accept_header_sent_twice_is_read_as_one_list(serve) -> None:
    """RFC 9110 5.3: a field sent in several lines is their comma-joined list; the OpenMetrics
    choice in the second ``Accept`` line counts."""
    c = ex.Counters()
    expo = ex.Exposition(ex.AgentCollector(c.snapshot))
    r = serve(expo)
    got = raw(r.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n"
                      b"Accept: application/openmetrics-text; version=1.0.0\r\nConnection: close\r\n\r\n")
    head = got.split(b"\r\n\r\n", 1)[0].lower()
    assert b"content-type: application/openmetrics-text; version=1.0.0" in head
    assert got.endswith(b"# EOF\n")

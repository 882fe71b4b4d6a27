"""Edges of the agent's lighter parts (its own exposition encoders, asyncio without ssl, the
chunked catch-up): what real scrapers get, the encoders on odd input, a TLS server in a process
whose asyncio has no ssl, and the follower's chunking (one journal append per catch-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import exposition as pe
from prometheus_client.openmetrics import exposition as om

from nodewarden.agent import follower as fw
from nodewarden.agent import state as st
from nodewarden.agent import textformat as tf
from nodewarden.agent.exporter import to_metric

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from test_agent_state import MCE, XID48, Buffer, mces, start, xid48  # noqa: E402

# Accept headers as the scrapers send them (Prometheus scrape/scrape.go acceptHeader; vmagent
# lib/promscrape/client.go; curl; browsers)
SCRAPERS = {
    "prometheus 2.0-2.48": ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                            "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.25", tf.OPENMETRICS),
    "prometheus 2.49+": ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
                         "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", tf.OPENMETRICS),
    "prometheus 3 / alloy / otel": ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                                    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
                                    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                                    tf.OPENMETRICS),
    "prometheus protobuf first": ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                                  "encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,"
                                  "text/plain;version=0.0.4;q=0.2,*/*;q=0.1", tf.OPENMETRICS),
    "vmagent": ("text/plain;version=0.0.4;q=1,*/*;q=0.1", tf.TEXT),
    "curl": ("*/*", tf.TEXT),
    "firefox": ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", tf.TEXT),
    "absent": (None, tf.TEXT),
}


@pytest.mark.parametrize("scraper", SCRAPERS)
def test_real_scrapers_get_the_format_they_prefer(scraper: str) -> None:
    accept, want = SCRAPERS[scraper]
    assert tf.negotiate(accept) is want


def test_an_explicit_refusal_of_openmetrics_beats_application_wildcard() -> None:
    # RFC 9110 12.5.1: the most specific media range wins for a type; openmetrics;q=0 is "not acceptable"
    assert tf.negotiate("application/openmetrics-text;q=0, application/*") is tf.TEXT


@pytest.mark.parametrize("header, want", [("gzip", True), ("gzip, deflate, br", True), ("identity", False),
                                          ("*", True), ("gzip;q=0, *", False), ("*;q=0", False),
                                          ("GZIP ; Q=0.5", True), (None, False), ("", False)])
def test_gzip_accepted(header: str | None, want: bool) -> None:
    assert tf.gzip_accepted(header) is want


class _One:
    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        return [self.metric]


ODD = ["\\", "\n", '"', "\r", "\t", "\0", "\U0001F600", "\u2028", "\x85", "", "\\n", '\\"']


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("kind, name", [(tf.COUNTER, "nodewarden_x_total"), (tf.GAUGE, "nodewarden_g"),
                                        (tf.COUNTER, "nodewarden_x_total_total")])
def test_odd_characters_are_written_as_prometheus_client_writes_them(odd: str, kind: str, name: str) -> None:
    b = tf.Block(name, kind, f"h{odd}e", (((("b", f"v{odd}"), ("a", odd)), -0.0), ((), 1e-320), ((("a", ""),), 2.0**70)))
    metric = to_metric(b)
    assert tf.text_block(b) == pe.generate_latest(_One(metric))
    assert tf.openmetrics_block(b) + tf.OPENMETRICS_EOF == om.generate_latest(_One(metric))


# ---- the chunked catch-up ----------------------------------------------------------------------

def _buffer_with_mce_across_the_chunk_boundary() -> Buffer:
    buf = Buffer()
    buf.log(*["usb 1-1: noise"] * (fw.CATCH_UP_CHUNK - 1), MCE[0], MCE[1], MCE[2], XID48)
    return buf


def test_a_record_split_across_chunks_counts_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    buf_a, buf_b = _buffer_with_mce_across_the_chunk_boundary(), _buffer_with_mce_across_the_chunk_boundary()
    chunked = start(tmp_path / "a", buf_a)
    monkeypatch.setattr(fw, "CATCH_UP_CHUNK", 10**9)
    whole = start(tmp_path / "b", buf_b)
    assert (mces(chunked), xid48(chunked)) == (mces(whole), xid48(whole)) == (1.0, 1.0)


def test_catch_up_journals_and_fsyncs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the chunking, one catch-up was one journal append (one fsync per day file); now it
    # is one per chunk holding a new event: a full 16 MiB ring buffer of faults is ~400 fsyncs.
    buf = Buffer()
    for _ in range(4 * fw.CATCH_UP_CHUNK):
        buf.log(XID48)
    calls = []
    real = st.StateStore.journal
    monkeypatch.setattr(st.StateStore, "journal", lambda self, events: calls.append(len(events)) or real(self, events))
    start(tmp_path, buf)
    assert sum(calls) > 0
    assert len(calls) == 1, f"{len(calls)} journal appends (fsyncs) for one catch-up"


# ---- asyncio imported without ssl ----------------------------------------------------------------

def test_after_import_server_without_tls_a_tls_server_refuses_to_start_saying_why() -> None:
    # asyncio imported with ssl masked keeps ssl = None in its modules for the life of the
    # process: a TLS server there would fail at its first handshake; it refuses at construction.
    code = ("import sys\nfrom nodewarden.agent import daemon\nserver = daemon.import_server(False)\n"
            "import ssl\nfrom nodewarden.agent.webconfig import WebConfig\n"
            "web = WebConfig('web.yml', ssl_context=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))\n"
            "try:\n    server.AgentHTTPServer(('127.0.0.1', 0), lambda: b'', dict, web=web)\n"
            "except RuntimeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "TLS asked for in a process whose asyncio was imported without ssl" in r.stdout, r.stdout
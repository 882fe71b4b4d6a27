"""The /metrics bodies of :class:`nodewarden.agent.exporter.Exposition` in both formats a scraper
can ask for (text 0.0.4, OpenMetrics 1.0.0, each gzipped): byte for byte what prometheus_client
itself gives for the same state (``generate_latest`` and ``openmetrics.exposition.generate_latest``
of ``make_registry``), the format chosen by ``Accept`` as real scrapers send it; each kept between
changes (an unchanged state formats and compresses nothing: the same bytes object comes back,
counted by wrapping the agent's encoders and ``gzip.compress``), and a change formatting only the
family that changed, in each format when that format is next asked for.

The state is real: the polled collectors (InfiniBand, EDAC, PCIe, netclass) on the generated
``h100-hgx-ndr`` sysfs fixture tree, and the agent's counters with label values and help text that need
escaping (quotes, backslashes, newlines, non-ASCII)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, Callable

import pytest
from prometheus_client import exposition as pe
from prometheus_client.openmetrics import exposition as om

from nodewarden import collectors as registry
from nodewarden.agent import exporter as ex
from nodewarden.agent import textformat as tf
from nodewarden.agent.exporter import Counters, make_registry
from nodewarden.collectors.base import GAUGE, Sample

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"

# Accept headers scrapers send: Prometheus 2.x's default (OpenMetrics first), Prometheus 3's
# default (scrape_protocols, q-weighted, UTF-8 names allowed), Prometheus 3 asked for text 1.0.0,
# the old text format, none at all.
PROM2 = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
         "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROM3 = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
         "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
         "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
PROM3_TEXT = "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,*/*;q=0.1"
OLD_TEXT = "text/plain;version=0.0.4"
OM_CT = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_CT = "text/plain; version=0.0.4; charset=utf-8"
ACCEPTS = (PROM2, PROM3, PROM3_TEXT, OLD_TEXT, "application/openmetrics-text", None)


def fixture_samples() -> list[ex.PolledSample]:
    """The polled collectors' samples of one collection on the h100-hgx-ndr tree."""
    out: list[ex.PolledSample] = []
    for entry in registry.REGISTRY:
        if entry.build is None or entry.name not in ("infiniband", "edac", "pcie", "netclass"):
            continue
        snap = entry.build(FIXTURE, "test-node").collect()
        out += [(entry.name, s) for s in snap.samples]
    return out


@pytest.fixture
def state() -> tuple[Counters, list[ex.PolledSample]]:
    c = Counters()
    c.add(ex.XID, ("0", "0000:18:00.0", "48", "memory"), 3)
    c.add(ex.XID, ("", "0000:9a:00.0", "79", "gpu_lost"))
    c.add(ex.EDAC_LOGGED, ("mc0", 'DIMM "A1" \\ slot\nB', "corrected"), 2)  # needs escaping in every format
    c.set(ex.SUCCESS, ("nvml",), 1)
    c.replace(ex.VAL_VALUE, {("gemm", "tflops", "FLOP/s", "0"): 4.1e14})
    polled = fixture_samples()
    assert len(polled) > 100  # the fixture's ports, devices and links
    polled.append(("infiniband", Sample("nodewarden_test_help_escapes", (("where", "é—ü"),), 1.5, GAUGE,
                                        'help with a \\ backslash\nand a newline')))
    return c, polled


class Calls:
    """The agent's two family encoders and gzip.compress, wrapped to count calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.text = self.om = self.gzip = 0
        real_text, real_om, real_gzip = tf.text_block, tf.openmetrics_block, gzip.compress

        def text(*a: Any, **kw: Any) -> bytes:
            self.text += 1
            return real_text(*a, **kw)

        def openmetrics(*a: Any, **kw: Any) -> bytes:
            self.om += 1
            return real_om(*a, **kw)

        def compress(*a: Any, **kw: Any) -> bytes:
            self.gzip += 1
            return real_gzip(*a, **kw)
        monkeypatch.setattr(tf, "text_block", text)
        monkeypatch.setattr(tf, "openmetrics_block", openmetrics)
        monkeypatch.setattr(ex.gzip, "compress", compress)
        self.real_text, self.real_om = pe.generate_latest, om.generate_latest

    def counts(self) -> tuple[int, int, int]:
        return self.text, self.om, self.gzip


def test_every_variant_is_prometheus_clients_bytes_with_its_content_type(state) -> None:
    c, polled = state
    expo = ex.Exposition(ex.AgentCollector(c.snapshot, lambda: list(polled)))
    reg = make_registry(c.snapshot, lambda: list(polled))
    text, openm = pe.generate_latest(reg), om.generate_latest(reg)
    assert text != openm and openm.endswith(b"# EOF\n") and openm.count(b"# EOF") == 1
    assert b'dimm="DIMM \\"A1\\" \\\\ slot\\nB"' in text and b'where="\xc3\xa9\xe2\x80\x94\xc3\xbc"' in openm
    want = {PROM2: (openm, OM_CT), PROM3: (openm, OM_CT), PROM3_TEXT: (text, TEXT_CT), OLD_TEXT: (text, TEXT_CT),
            "application/openmetrics-text": (openm, OM_CT), None: (text, TEXT_CT)}
    for accept in ACCEPTS:
        body, ctype, enc = expo.serve(accept, None)
        assert (body, ctype, enc) == (*want[accept], None), accept
        zbody, zctype, zenc = expo.serve(accept, "gzip, deflate, br")
        assert (zctype, zenc) == (ctype, "gzip") and zbody[:2] == b"\x1f\x8b"
        assert gzip.decompress(zbody) == body and len(zbody) < len(body) / 3
    assert expo.render() == text
    # Accept-Encoding: gzip named (any case, with parameters, x-gzip) or *, with q above 0
    for yes in ("GZIP;q=1.0", "x-gzip", "*", "br, *;q=0.1", "deflate, gzip;q=0.5"):
        assert expo.serve(None, yes)[2] == "gzip", yes
    for no in ("identity", "deflate, br", "", None, "gzip;q=0", "*;q=0", "*, gzip;q=0", "gzip;q=0, *"):
        assert expo.serve(None, no)[2] is None, no


@pytest.mark.parametrize("accept, want", [
    ("text/plain;q=1, application/openmetrics-text;q=0.5", tf.TEXT),       # q decides, not the order
    ("application/openmetrics-text;q=0.2, text/plain;q=0.9", tf.TEXT),
    ("text/plain;q=0.5, application/openmetrics-text;version=1.0.0", tf.OPENMETRICS),
    ("application/openmetrics-text;version=0.0.1", tf.TEXT),  # the pre-1.0 draft: not what is written
    ("application/openmetrics-text;version=2.0.0", tf.TEXT),  # a later major version: not either
    ("application/openmetrics-text;version=1.1.0", tf.OPENMETRICS),
    ("application/openmetrics-text;version=abc", tf.TEXT),    # unreadable version: not this format
    ("application/openmetrics-text; version=1.0.0=x", tf.TEXT),
    ("APPLICATION/OpenMetrics-Text", tf.OPENMETRICS),         # media types are case-insensitive
    ("application/openmetrics-text;q=0", tf.TEXT),            # q=0: not acceptable
    ("application/openmetrics-text;q=abc", tf.OPENMETRICS),   # unreadable q: the default weight
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", tf.TEXT),  # a browser
    ("image/png", tf.TEXT),                                   # nothing acceptable: text, never 406
    (",,;;=,", tf.TEXT),
    ("text/plain;version=0.0.5", tf.TEXT),
    # RFC 9110 12.5.1: a format takes the q of the most specific range naming it
    ("application/openmetrics-text;q=0, application/*", tf.TEXT),        # refused by name, not by the wildcard
    ("application/*", tf.OPENMETRICS),
    ("text/plain;q=0.5, */*;q=0.9", tf.OPENMETRICS),                    # anything else is preferred to text
    ("text/*;q=0.3, application/openmetrics-text;q=0.2", tf.TEXT),
    ("*/*;q=0.5, text/plain;q=0", tf.OPENMETRICS),
])
def test_accept_chooses_by_weight_then_order(accept: str, want: tf.Format) -> None:
    assert tf.negotiate(accept) is want


def test_an_unchanged_state_is_served_as_the_same_bytes_formatting_and_compressing_nothing(state, monkeypatch) -> None:
    c, polled = state
    calls = Calls(monkeypatch)
    expo = ex.Exposition(ex.AgentCollector(c.snapshot, lambda: list(polled)))
    first = {(a, z): expo.serve(a, z)[0] for a in (PROM2, OLD_TEXT) for z in (None, "gzip")}
    n_families = len(list(expo.collector.keyed_families()))
    # each format formatted family by family once, each gzipped body compressed once
    assert calls.counts() == (n_families, n_families, 2)
    assert expo.families_rendered == 2 * n_families and expo.bodies_compressed == 2
    for _ in range(3):
        for (a, z), body in first.items():
            assert expo.serve(a, z)[0] is body
    assert calls.counts() == (n_families, n_families, 2)
    assert expo.families_rendered == 2 * n_families and expo.bodies_compressed == 2


def test_a_change_re_renders_the_changed_family_in_each_format_when_next_asked_for(state, monkeypatch) -> None:
    c, polled = state
    calls = Calls(monkeypatch)
    expo = ex.Exposition(ex.AgentCollector(c.snapshot, lambda: list(polled)))
    reg = make_registry(c.snapshot, lambda: list(polled))

    def fresh() -> tuple[bytes, bytes]:  # prometheus_client's bytes
        return calls.real_text(reg), calls.real_om(reg)

    old = {z: (expo.serve(OLD_TEXT, z)[0], expo.serve(PROM2, z)[0]) for z in (None, "gzip")}
    before = calls.counts()
    c.add(ex.XID, ("0", "0000:18:00.0", "48", "memory"))          # one agent family changes
    text, openm = fresh()
    assert expo.serve(OLD_TEXT, "gzip")[0] is not old["gzip"][0]
    assert gzip.decompress(expo.serve(OLD_TEXT, "gzip")[0]) == text
    assert calls.counts() == (before[0] + 1, before[1], before[2] + 1)  # OpenMetrics not asked for yet
    assert expo.serve(OLD_TEXT, None)[0] == text  # the same render: nothing more formatted or compressed
    assert calls.counts() == (before[0] + 1, before[1], before[2] + 1)
    assert expo.serve(PROM2, None)[0] == openm and gzip.decompress(expo.serve(PROM2, "gzip")[0]) == openm
    assert calls.counts() == (before[0] + 1, before[1] + 1, before[2] + 2)
    assert b"0000:18:00.0" in openm and openm != old[None][1]

    polled[0] = (polled[0][0], Sample(polled[0][1].name, polled[0][1].labels, polled[0][1].value + 1,
                                      polled[0][1].kind, polled[0][1].help))  # one polled family changes
    text, openm = fresh()
    mid = calls.counts()
    assert expo.serve(PROM2, "gzip")[0] != old["gzip"][1] and gzip.decompress(expo.serve(PROM2, "gzip")[0]) == openm
    assert expo.serve(OLD_TEXT, None)[0] == text
    assert calls.counts() == (mid[0] + 1, mid[1] + 1, mid[2] + 1)

    gone = polled.pop()                                            # a family goes away
    text, openm = fresh()
    assert gone[1].name.encode() not in text
    assert expo.serve(OLD_TEXT, None)[0] == text and expo.serve(PROM2, None)[0] == openm
    assert expo.render() == text


def test_the_server_gets_the_same_answer_for_a_registry(state) -> None:
    """A registry given to the HTTP server is negotiated the same way, rendered by prometheus_client
    at each scrape: the same bytes as the agent's own encoders."""
    from nodewarden.agent.server import metrics_body
    c, polled = state
    expo = ex.Exposition(ex.AgentCollector(c.snapshot, lambda: list(polled)))
    served: list[Callable[[str | None, str | None], tuple[bytes, str, str | None]]] = [
        metrics_body(make_registry(c.snapshot, lambda: list(polled))), metrics_body(expo), metrics_body(expo.render)]
    assert served[1] == expo.serve and served[2] == expo.serve
    for accept in ACCEPTS:
        for z in (None, "gzip"):
            answers = [f(accept, z) for f in served]
            plain = [(gzip.decompress(b) if e else b, t, e) for b, t, e in answers]
            assert plain[0] == plain[1] == plain[2], (accept, z)
    text = pe.generate_latest(make_registry(c.snapshot, lambda: list(polled)))
    assert metrics_body(lambda: text)(PROM2, "gzip") == (text, TEXT_CT, None)

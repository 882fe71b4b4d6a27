"""nodewarden.agent.textformat against prometheus_client, the format's authority: for any family
the agent can hold (counter or gauge, legacy names, any label values and HELP text, any float),
the text and OpenMetrics bytes are the library's, byte for byte."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import exposition as pe
from prometheus_client.openmetrics import exposition as om
from prometheus_client.utils import floatToGoString

from nodewarden.agent import textformat as tf
from nodewarden.agent.exporter import to_metric

NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True)
LABEL = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,10}", fullmatch=True)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)  # any character but lone surrogates
VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**60, 2**60).map(float),
                  st.sampled_from([0.0, -0.0, 1e6, 1e7, 1234567.0, 9999999.0, 1e16, 1.5e-7, 123456789.125]))


class _One:
    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        return [self.metric]


@st.composite
def blocks(draw) -> tf.Block:
    kind = draw(st.sampled_from([tf.COUNTER, tf.GAUGE]))
    name = draw(NAME)
    if kind == tf.COUNTER:
        name += "_total"
    elif name.endswith("_total"):
        name += "_x"
    names = draw(st.lists(LABEL, max_size=4, unique=True))
    samples = draw(st.lists(st.tuples(st.lists(TEXT, min_size=len(names), max_size=len(names)), VALUE), max_size=5))
    return tf.Block(name, kind, draw(TEXT), tuple((tuple(zip(names, vals)), v) for vals, v in samples))


@settings(max_examples=400, deadline=None)
@given(blocks())
def test_both_formats_are_prometheus_clients_bytes(block: tf.Block) -> None:
    metric = to_metric(block)
    assert tf.text_block(block) == pe.generate_latest(_One(metric))
    assert tf.openmetrics_block(block) + tf.OPENMETRICS_EOF == om.generate_latest(_One(metric))
    assert tf.TEXT.body([block, block]) == pe.generate_latest(_One(metric)) * 2


@settings(max_examples=2000, deadline=None)
@given(VALUE)
def test_values_are_written_as_go_writes_them(v: float) -> None:
    assert tf.go_float(v) == floatToGoString(v)


def test_values_known() -> None:
    assert [tf.go_float(v) for v in (1.0, 1e6, 1234567.0, 1e7, math.inf, -math.inf, math.nan, -0.0, 2.5e-7)] == \
        ["1.0", "1e+06", "1.234567e+06", "1e+07", "+Inf", "-Inf", "NaN", "-0.0", "2.5e-07"]


def test_a_family_without_samples_and_escapes() -> None:
    b = tf.Block("x_total", tf.COUNTER, 'a "q" \\ b\nc', ())
    assert tf.text_block(b) == b'# HELP x_total a "q" \\\\ b\\nc\n# TYPE x_total counter\n'
    assert tf.openmetrics_block(b) == b'# HELP x a \\"q\\" \\\\ b\\nc\n# TYPE x counter\n'
    g = tf.Block("g", tf.GAUGE, "", ((( ("b", 'v"\n\\'), ("a", "é")), 2.0),))
    assert tf.text_block(g) == '# HELP g \n# TYPE g gauge\ng{a="é",b="v\\"\\n\\\\"} 2.0\n'.encode()

"""The two exposition formats the agent writes, for counter and gauge families: the Prometheus
text format 0.0.4 and OpenMetrics 1.0.0, and the choice between them for a request's
``Accept`` and ``Accept-Encoding`` headers.

The bytes are prometheus_client's: for every family the agent can hold, :func:`text_block` and
:func:`openmetrics_block` write what ``prometheus_client.exposition.generate_latest`` and
``prometheus_client.openmetrics.exposition.generate_latest`` write for the same
``CounterMetricFamily``/``GaugeMetricFamily`` (the tests compare them byte for byte, the
library being the format's authority). The agent does not import prometheus_client to write
them: the package's import runs its HTTP server, WSGI and push-gateway modules (http.server,
urllib.request, wsgiref, ssl and OpenSSL), ~7 MB of the agent's resident memory, to use two
string functions.

A family here is a :class:`Block`: its full sample name (a counter's ends in ``_total``), type,
HELP text and samples ``((label, value), ...) -> float``. Label and metric names are the legacy
Prometheus character set (the exporter checks them, :func:`nodewarden.agent.exporter.check_samples`),
so no escaping scheme of either format changes them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable

COUNTER, GAUGE = "counter", "gauge"

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
OPENMETRICS_EOF = b"# EOF\n"

Labels = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Block:
    """One metric family: ``name`` the samples' name (``..._total`` for a counter), ``type``
    :data:`COUNTER` or :data:`GAUGE`, ``help`` the HELP text (any characters), ``samples``
    (label pairs, value) in the order written; label pairs are written sorted by name."""

    name: str
    type: str
    help: str
    samples: tuple[tuple[Labels, float], ...]


@dataclasses.dataclass(frozen=True)
class Format:
    """An exposition format: ``name`` (``text``/``openmetrics``), its ``Content-Type`` and what it
    writes after the last family (``trailer``)."""

    name: str
    content_type: str
    trailer: bytes

    def block(self, fam: Block) -> bytes:
        """The family's lines in this format (UTF-8)."""
        return openmetrics_block(fam) if self is OPENMETRICS else text_block(fam)

    def body(self, fams: Iterable[Block]) -> bytes:
        """A whole exposition: every family's lines, then the trailer."""
        return b"".join(self.block(f) for f in fams) + self.trailer


TEXT = Format("text", TEXT_CONTENT_TYPE, b"")
OPENMETRICS = Format("openmetrics", OPENMETRICS_CONTENT_TYPE, OPENMETRICS_EOF)


def go_float(v: float) -> str:
    """A sample value as Prometheus writes it: ``+Inf``, ``-Inf``, ``NaN``, Python's shortest
    repr otherwise, switched to an exponent (``1.2345678e+06``) for positive values of 7 or
    more integer digits, as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` does."""
    v = float(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    s = repr(v)
    dot = s.find(".")
    if v > 0 and dot > 6:
        digits = (s[:dot] + s[dot + 1:]).rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample_lines(name: str, samples: Iterable[tuple[Labels, float]]) -> list[str]:
    out = []
    for labels, value in samples:
        if labels:
            inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels))
            out.append(f"{name}{{{inner}}} {go_float(value)}\n")
        else:
            out.append(f"{name} {go_float(value)}\n")
    return out


def text_block(fam: Block) -> bytes:
    """The family in the text format 0.0.4: ``# HELP`` (backslash and newline escaped), ``# TYPE``
    and one line per sample, under the sample name (a counter's HELP/TYPE name ends in ``_total``
    as its samples do)."""
    help_text = fam.help.replace("\\", "\\\\").replace("\n", "\\n")
    head = f"# HELP {fam.name} {help_text}\n# TYPE {fam.name} {fam.type}\n"
    return "".join([head, *_sample_lines(fam.name, fam.samples)]).encode("utf-8")


def openmetrics_block(fam: Block) -> bytes:
    """The family in OpenMetrics 1.0.0: ``# HELP`` (backslash, newline and double quote escaped)
    and ``# TYPE`` under the family name (a counter's without ``_total``), then the samples."""
    base = fam.name[:-len("_total")] if fam.type == COUNTER and fam.name.endswith("_total") else fam.name
    head = f"# HELP {base} {_label_value(fam.help)}\n# TYPE {base} {fam.type}\n"
    return "".join([head, *_sample_lines(fam.name, fam.samples)]).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Content negotiation

def _media_ranges(header: str) -> list[tuple[str, dict[str, str], float]]:
    """``Accept``/``Accept-Encoding`` elements as (lower-cased value, parameters, q) in header
    order; an unparsable ``q`` counts as 1 (RFC 9110 §12.4.2: the default weight)."""
    out = []
    for element in header.split(","):
        parts = [p.strip() for p in element.split(";")]
        if not parts[0]:
            continue
        params: dict[str, str] = {}
        for p in parts[1:]:
            key, sep, val = p.partition("=")
            if sep:
                params[key.strip().lower()] = val.strip().strip('"')
        try:
            q = float(params.get("q", "1"))
        except ValueError:
            q = 1.0
        if math.isnan(q):
            q = 1.0
        out.append((parts[0].lower(), params, q))
    return out


def _version(params: dict[str, str]) -> tuple[int, ...] | None:
    """``version=1.0.0`` as (1, 0, 0); None when absent; () when not dotted numbers."""
    v = params.get("version")
    if v is None:
        return None
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        return ()


def _matches(media: str, params: dict[str, str]) -> list[tuple[Format, int]]:
    """The formats a media range accepts of the two the agent writes, each with how specific the
    range is for it (2: its media type, 1: ``text/*`` or ``application/*``, 0: ``*/*``)."""
    version = _version(params)
    if media == "application/openmetrics-text":
        # 1.x: what we write; no version: any; 0.0.1 (the pre-1.0 draft) and 2.x: not this format
        return [(OPENMETRICS, 2)] if version is None or version[:1] == (1,) else []
    if media == "text/plain":
        # 0.0.4, or 1.0.0 (0.0.4 plus quoted UTF-8 names, which the agent never writes)
        return [(TEXT, 2)] if version is None or version in ((0, 0, 4), (1, 0, 0), (1, 0), (1,)) else []
    if media == "text/*":
        return [(TEXT, 1)]
    if media == "application/*":
        return [(OPENMETRICS, 1)]
    if media == "*/*":
        return [(TEXT, 0), (OPENMETRICS, 0)]
    return []


def negotiate(accept: str | None) -> Format:
    """The format for a request's ``Accept`` header (None: absent). Each format takes the ``q``
    of the most specific media range that names it (RFC 9110 §12.5.1: its type,
    ``application/openmetrics-text`` in version 1.x or without a version, ``text/plain`` in 0.0.4,
    1.0.0 or without a version; then ``text/*``/``application/*``; then ``*/*``), the first among
    equally specific ones; the format with the highest ``q`` above 0 wins, the one whose range
    came first among equals. The text format when neither is acceptable (an absent or unreadable
    header, ``q=0``): a scraper is never refused (no 406), as Prometheus's own exporters do."""
    taken: dict[Format, tuple[int, float, int]] = {}  # format -> (specificity, q, position)
    for pos, (media, params, q) in enumerate(_media_ranges(accept or "")):
        for fmt, specificity in _matches(media, params):
            if fmt not in taken or specificity > taken[fmt][0]:
                taken[fmt] = (specificity, q, pos)
    acceptable = [fmt for fmt, (_, q, _) in taken.items() if q > 0]
    if not acceptable:
        return TEXT
    # highest q, then the range that came first, then (*/* names both) the text format
    return max(acceptable, key=lambda f: (taken[f][1], -taken[f][2], f is TEXT))


def gzip_accepted(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` (None: absent) takes gzip: a ``gzip`` (or ``x-gzip``) element,
    or ``*``, with ``q`` above 0 (``gzip;q=0`` refuses it even after ``*``)."""
    allowed = None
    star = False
    for coding, _params, q in _media_ranges(accept_encoding or ""):
        if coding in ("gzip", "x-gzip"):
            allowed = q > 0 if allowed is None else allowed
        elif coding == "*":
            star = star or q > 0
    return allowed if allowed is not None else star

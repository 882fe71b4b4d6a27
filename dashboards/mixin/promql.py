"""PromQL building blocks shared by the rules and the panels."""

from __future__ import annotations

import re

from nodewarden import catalog

from .config import Config


def sel(cfg: Config, metric: str, *matchers: str) -> str:
    """``metric{job="nodewarden",<matchers>}``."""
    inner = ",".join(m for m in (cfg.job_selector, *matchers) if m)
    return f"{metric}{{{inner}}}"


def exact_increase(series: str, window: str, lookback: str | None = None) -> str:
    """The increase of each counter series since ``window`` ago, without ``increase()``'s
    extrapolation (an integer for integer counters): the difference to the value then, or after
    a counter reset the value itself (counted from 0). The value "then" is the last sample at
    most ``lookback`` before ``window`` ago (default: Prometheus's lookback, 5 minutes), so a
    rise across a scrape gap shorter than ``lookback`` counts. No result for a series without
    such a sample. ``series`` is a selector (no range)."""
    then = f"last_over_time({series}[{lookback}] offset {window})" if lookback else f"{series} offset {window}"
    return f"({series} - {then} >= 0) or ({series} < {then})"


def window_increase(series: str, window: str, lookback: str | None = None) -> str:
    """The increase over ``window`` of counters that exist from the agent's first poll at
    whatever value the hardware holds (GPU ECC, sysfs EDAC, NVLink), where a series first seen
    is old errors, not new ones: :func:`exact_increase`, except for a series that was reset
    inside the window (a GPU reset, a reboot: the exact difference would miss the errors before
    the reset) or that has no sample ``window`` ago (Prometheus or the target were down then),
    which get ``increase()``."""
    return (f"(({exact_increase(series, window, lookback)}) unless resets({series}[{window}]) > 0)"
            f" or increase({series}[{window}])")


_UNIT_S = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_TERM = re.compile(r"([0-9]+)(ms|[ywdhms])")


def times(duration: str, factor: int) -> str:
    """A Prometheus duration ``factor`` times as long: ``times("10m", 2)`` -> ``"20m"``, ``"1h30m"``
    -> ``"3h"``, ``"500ms"`` -> ``"1s"`` (the largest unit that divides it). Raises ValueError for
    what is not a Prometheus duration (units y w d h m s ms, each once, in that order)."""
    terms = _TERM.findall(duration)
    order = [_UNITS.index(u) for _, u in terms]
    if not terms or "".join(n + u for n, u in terms) != duration or order != sorted(set(order)):
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    ms = factor * sum(int(n) * (1 if u == "ms" else 1000 * _UNIT_S[u]) for n, u in terms)
    for unit, secs in _UNIT_S.items():
        if unit not in ("y", "w") and ms % (1000 * secs) == 0:
            return f"{ms // (1000 * secs)}{unit}"
    return f"{ms}ms"


def _born(cfg: Config, series: str, window: str, born: str | None, ignoring: str, lookback: str | None = None) -> str:
    born = born or series
    up = sel(cfg, "up")
    ign = f" ignoring({ignoring})" if ignoring else ""
    if lookback:
        # absent over the whole lookback while the target was scraped within it: new (a first
        # Xid of its code at driver load after a reboot is one)
        then = f"last_over_time({born}[{lookback}] offset {window})"
        seen = f"max_over_time({up}[{lookback}] offset {window}) == 1"
    else:
        then, seen = f"{born} offset {window}", f"{up} offset {window} == 1"
    return f"(({series} unless{ign} {then}) and on(job, instance) ({seen}))"


def increase_with_first(cfg: Config, series: str, window: str, born: str | None = None,
                        ignoring: str = "") -> str:
    """Counter increase over ``window`` that also counts a series born inside it.

    The agent creates a labelled counter (an Xid on a GPU, a flash cut on a port) at its first
    event, with value 1; Prometheus 2's ``increase()`` starts at the first sample it has and
    so never counts that first event. A series absent ``window`` ago while its target was
    scraped then is new: all of its value happened inside the window. Other series: their
    :func:`window_increase`. ``series`` is a selector (no range); ``born`` the series judged
    for birth (default ``series``; a recording rule passes the raw counter it relabels, so
    that loading the rules does not make every old fault new), ``ignoring`` the labels the
    recording rule added. These counters are sparse (one series per device and code that
    had an event), so "before the window" looks back ``cfg.outage_lookback`` (an hour): a rise
    across a node's reboot or a scrape gap counts, and a series seen before it is not new."""
    lb = cfg.outage_lookback
    return f"{_born(cfg, series, window, born, ignoring, lb)} or {window_increase(series, window, lb)}"


def rose_within(cfg: Config, series: str, window: str) -> str:
    """The series of a counter the agent creates at its first event (as for
    :func:`increase_with_first`) that rose within ``window``, also after their target stopped
    being scraped (a node rebooting: its series are stale, and ``increase_with_first`` of a series
    born in the window gives nothing then): the last value within ``window`` above the last one
    before it (within ``cfg.outage_lookback``), a series absent before it while its target was
    scraped, or a counter reset within it. The value is the series' last one, not a count: for
    ``unless`` and ``and``. ``series`` is a selector (no range)."""
    lb = cfg.outage_lookback
    last = f"last_over_time({series}[{window}])"
    then = f"last_over_time({series}[{lb}] offset {window})"
    seen = f"max_over_time({sel(cfg, 'up')}[{lb}] offset {window}) == 1"
    return (f"(({last} unless {then}) and on(job, instance) ({seen})) or ({last} > {then})"
            f" or (increase({series}[{window}]) > 0)")


def interval_increase(cfg: Config, series: str, interval: str, born: str | None = None,
                      ignoring: str = "") -> str:
    """The exact increase of each counter series over one evaluation ``interval``, for a rule
    evaluated every ``interval``: no extrapolation, so ``sum_over_time()`` of it over a range
    telescopes to the range's count (an integer).

    Each evaluation counts what was scraped one interval before it: the series ``interval`` ago
    against its last value before ``2 * interval`` ago (within ``cfg.outage_lookback``, so that a
    rise across a scrape gap, a node's reboot or an agent restart counts, and a series that
    comes back at its old value counts nothing), the value itself after a counter reset, or all
    of a series first seen in between while its target was scraped within the lookback before
    (see :func:`increase_with_first`: an agent creates such a counter at its first event; the
    first scrape of a new target counts nothing).

    The lag is what makes the count exact: a sample is stamped with its scrape's start and
    stored when the scrape ends, so an evaluation can run between the two; a difference to the
    value ``interval`` ago then never sees the rise (the next evaluation reads the late sample
    as the old value). One interval later every scrape that started by then has been stored, as
    long as the scrape timeout is at most ``interval`` (Prometheus's default timeout is 10 s,
    the rules' interval 1 m). Counts appear one interval late.

    ``born`` (given with ``series`` a recording rule of the same group, evaluated just before
    this one, that relabels ``born``): ``series`` is what the group recorded, never late, so its
    own record is compared with its record an interval ago and no lag is needed; a series the
    group has not recorded within the lookback is new unless ``born`` (its raw counter) was
    there within the lookback before the lag (a scrape that landed late, or the rules just
    loaded: old faults are not new). ``ignoring``: the labels the recording rule added."""
    lb, two = cfg.outage_lookback, times(interval, 2)
    up = sel(cfg, "up")
    if born is None:
        now, back = f"{series} offset {interval}", two
        first = f"({now} unless last_over_time({series}[{lb}] offset {two}))"
    else:
        ign = f" ignoring({ignoring})" if ignoring else ""
        now, back = series, interval
        first = (f"({now} unless last_over_time({series}[{lb}] offset {interval})"
                 f" unless{ign} last_over_time({born}[{lb}] offset {two}))")
    then = f"last_over_time({series}[{lb}] offset {back})"
    seen = f"max_over_time({up}[{lb}] offset {back}) == 1"
    return f"({now} - {then} >= 0) or ({now} < {then}) or ({first} and on(job, instance) ({seen}))"


def xid_codes_by_action(policy: catalog.Policy | None = None) -> dict[str, tuple[int, ...]]:
    """Catalogued Xid codes grouped by the policy's action (drain, reset_gpu, restart_app,
    ignore, investigate)."""
    policy = policy or catalog.load_policy()
    out: dict[str, list[int]] = {}
    for code in catalog.codes():
        out.setdefault(policy.action(code), []).append(code)
    return {a: tuple(c) for a, c in sorted(out.items())}


def hardware_xid_codes(policy: catalog.Policy | None = None) -> tuple[int, ...]:
    """Codes the policy marks hardware (they take the node out of scheduling)."""
    policy = policy or catalog.load_policy()
    return tuple(c for c in catalog.codes() if policy.is_hardware(c))


def regex(codes: tuple[int, ...]) -> str:
    """``(48, 63, 79)`` -> ``"48|63|79"`` (anchored by PromQL's ``=~``)."""
    return "|".join(str(c) for c in codes)


def expand_grafana(expr: str, *, range_s: int = 3600, interval_s: int = 60, cluster: str = ".*",
                   node: str = ".*", extra: dict[str, str] | None = None) -> str:
    """Substitute Grafana's template variables so that Prometheus can run a panel's query:
    ``$__range``/``$__interval``/``$__rate_interval`` as durations, ``$cluster``/``$node`` (and
    ``extra``) as regex values (panels use them with ``=~``). ``${name}`` and ``$name`` both."""
    values = {"__range_s": str(range_s), "__range_ms": str(range_s * 1000), "__range": f"{range_s}s",
              "__rate_interval": f"{max(4 * interval_s, 60)}s", "__interval_ms": str(interval_s * 1000),
              "__interval": f"{interval_s}s", "cluster": cluster, "node": node, **(extra or {})}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                       "offset", "bool", "inf", "nan", "atan2", "start", "end"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric (and recording-rule) names an expression selects: identifiers that are not
    functions, keywords, label names of grouping clauses, strings or durations.
    ``sum by (node) (rate(nodewarden_x_total{a="b"}[5m])) > 0`` -> ``{"nodewarden_x_total"}``."""
    text = _STRING.sub('""', expr)
    text = _GROUPING.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = re.sub(r"\boffset\s+-?[0-9a-zA-Z$_]+", " ", text)
    names = set()
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if call or name in _KEYWORDS or re.fullmatch(r"[0-9.]+[smhdwy]?", name):
            continue
        names.add(name)
    return names

"""Pieces the three dashboards share: the template variables, the data source reference, the
selector helper that adds the job/cluster/node matchers, and :func:`panel`, the one place a
panel is made, which forces a unit, a description and the ``${datasource}`` variable.
"""

from __future__ import annotations

from typing import Callable

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, table
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from .. import promql
from ..config import Config

UIDS = {"fleet": "nodewarden-fleet", "node": "nodewarden-node", "stats": "nodewarden-failure-stats"}
TAGS = ["nodewarden", "gpu", "hardware"]
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
BUILD_INFO = "nodewarden_build_info"
XID = "nodewarden_gpu_xid_errors_total"
XID_POLICY = "gpu_xid:nodewarden_gpu_xid_errors_total:policy"  # recording rule: + action, hardware labels
# The validator state of a node, as one number (see validator_state()).
STATE_TEXT = {0: ("no report", "text"), 1: ("pass", "green"), 2: ("warn", "yellow"),
              3: ("stale", "orange"), 4: ("fail", "red")}


def s(cfg: Config, metric: str, *matchers: str) -> str:
    """``metric{job=...,cluster=~"$cluster",node=~"$node",<matchers>}``: every panel query
    selects through this, so each carries the job selector and both variables."""
    return promql.sel(cfg, metric, f'{cfg.cluster_label}=~"$cluster"', f'{cfg.node_label}=~"$node"', *matchers)


def by(cfg: Config, *labels: str) -> str:
    """``cluster, node, <labels>``: the grouping of per-node (and per-device) panels."""
    return ", ".join((cfg.cluster_label, cfg.node_label, *labels))


def variables(cfg: Config, node: bool = True, one_node: bool = False) -> list[cogbuilder.Builder[model.VariableModel]]:
    """``datasource`` (any Prometheus), ``cluster`` and ``node`` (label values of
    ``nodewarden_build_info``, multi-select with All = ``.*``; ``cluster`` may be absent from
    every series, then All matches the empty value). ``node=False``: no node variable, for a
    dashboard of per-cluster recording rules; ``one_node``: the node variable picks one node (no
    multi-select, no All), for a dashboard of one node's devices."""
    def query_var(name: str, label: str, matchers: str, many: bool = True) -> dash.QueryVariable:
        v = (dash.QueryVariable(name).label(label).datasource(DATASOURCE)
             .query(f"label_values({BUILD_INFO}{{{matchers}}}, {label})")
             .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.ALPHABETICAL_ASC))
        if not many:
            return v.multi(False).include_all(False)
        return (v.multi(True).include_all(True).all_value(".*")
                .current(model.VariableOption(selected=True, text="All", value="$__all")))
    out = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_var("cluster", cfg.cluster_label, cfg.job_selector),
    ]
    if node:
        out.append(query_var("node", cfg.node_label, f'{cfg.job_selector},{cfg.cluster_label}=~"$cluster"',
                             many=not one_node))
    return out


def links() -> list[cogbuilder.Builder[model.DashboardLink]]:
    """A drop-down of every nodewarden dashboard (by tag), keeping time range and variables."""
    return [dash.DashboardLink("nodewarden").type(model.DashboardLinkType.DASHBOARDS).tags(["nodewarden"])
            .as_dropdown(True).include_vars(True).keep_time(True)]


def dashboard_link(title: str, key: str, tooltip: str = "") -> dash.DashboardLink:
    """A header link to another nodewarden dashboard (``key`` in :data:`UIDS`), keeping the
    time range and the variables."""
    link = (dash.DashboardLink(title).type(model.DashboardLinkType.LINK).url(f"/d/{UIDS[key]}")
            .include_vars(True).keep_time(True))
    return link.tooltip(tooltip) if tooltip else link


def node_link(cfg: Config) -> dash.DashboardLink:
    """A data link from a row that has ``cluster`` and ``node`` fields to the node dashboard."""
    url = (f"/d/{UIDS['node']}?var-datasource=${{datasource}}"
           f"&var-cluster=${{__data.fields.{cfg.cluster_label}}}&var-node=${{__data.fields.{cfg.node_label}}}"
           "&${__url_time_range}")
    return dash.DashboardLink("Node detail").url(url).type(model.DashboardLinkType.LINK)


def target(expr: str, legend: str = "", *, instant: bool = False, interval: str = "") -> prometheus.Dataquery:
    """A Prometheus query on ``${datasource}``; ``instant`` ones come back as a table."""
    q = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    else:
        q = q.range()
    if interval:
        q = q.interval(interval)
    return q


def mappings(states: dict[int, tuple[str, str]]) -> list[model.ValueMapping]:
    """``{value: (text, color)}`` -> one value mapping."""
    return [model.ValueMap(options={str(v): model.ValueMappingResult(text=t, color=c, index=i)
                                    for i, (v, (t, c)) in enumerate(sorted(states.items()))})]


def thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """``(None, "green"), (1, "red")`` -> absolute thresholds (first step is the base)."""
    return (dash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE)
            .steps([model.Threshold(value=v, color=c) for v, c in steps]))


def policy_increase(cfg: Config, window: str, *matchers: str) -> str:
    """:func:`promql.increase_with_first` over the policy-labelled Xid series (recording rule
    ``XID_POLICY``), judging "new" on the raw counter as the rules do: the recorded series is
    also new right after the rules are first loaded, and every old Xid would count once."""
    return promql.increase_with_first(cfg, s(cfg, XID_POLICY, *matchers), window, born=s(cfg, XID),
                                      ignoring="action, hardware")


def validator_state(cfg: Config, by_labels: str) -> str:
    """One number per node (see :data:`STATE_TEXT`): 4 a check failed or errored, 3 the last
    report is older than ``cfg.validator_stale_seconds``, 2 a check warned, 1 every check passed
    or was skipped, 0 the agent runs but has exported no report. The worst wins. The status
    terms keep their ``status`` label so that ``or`` does not drop one for another."""
    st = lambda st_re: s(cfg, "nodewarden_validator_check_status", f'status=~"{st_re}"')  # noqa: E731
    last_run = s(cfg, "nodewarden_validator_last_run_timestamp_seconds")
    return (f"max by ({by_labels}) ("
            f"(max by ({by_labels}, status) ({st('fail|error')} == 1) * 4)"
            f" or (max by ({by_labels}) (time() - {last_run} > {cfg.validator_stale_seconds}) * 0 + 3)"
            f" or (max by ({by_labels}, status) ({st('warn')} == 1) * 2)"
            f" or (max by ({by_labels}, status) ({st('pass|skip')} == 1))"
            f" or (max by ({by_labels}) ({s(cfg, BUILD_INFO)}) * 0 unless on({by_labels}) {last_run})"
            ")")


def panel(kind: Callable[[], cogbuilder.Builder[model.Panel]], title: str, *, unit: str, description: str,
          targets: list[prometheus.Dataquery], size: tuple[int, int] = (12, 8),
          extra: Callable[[object], object] | None = None) -> cogbuilder.Builder[model.Panel]:
    """The one panel factory: a title, a description, a unit and the ``${datasource}`` variable
    on each panel, at least one query (ValueError otherwise). ``kind`` is a panel builder class
    (``timeseries.Panel``, ``table.Panel``...); ``size`` is (width of 24, height); ``extra`` gets
    the builder for panel-specific options. Ids are given by :func:`build`."""
    if not targets:
        raise ValueError(f"panel {title!r}: no query")
    if not unit or not description.strip():
        raise ValueError(f"panel {title!r}: a unit and a description are required")
    p = kind().title(title).description(description).unit(unit).datasource(DATASOURCE).span(size[0]).height(size[1])
    for i, t in enumerate(targets):
        p = p.with_target(t.ref_id(chr(ord("A") + i)))
    if kind is table.Panel:  # an instant table: its Time column says nothing
        p = p.with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True}}))
    if extra is not None:
        extra(p)
    return p


def build(title: str, uid: str, description: str, cfg: Config,
          sections: list[tuple[str, list[cogbuilder.Builder[model.Panel]]]], node: bool = True,
          one_node: bool = False) -> dash.Dashboard:
    """A dashboard of (row title, panels) sections, with the shared variables (``node``: with
    the node variable), links and tags; rows and panels get ids 1, 2, ... in order."""
    d = (dash.Dashboard(title).uid(uid).description(description).tags(TAGS).editable()
         .tooltip(model.DashboardCursorSync.CROSSHAIR).time("now-24h", "now").refresh("1m").timezone("browser")
         .variables(variables(cfg, node, one_node)).links(links()))
    ids = iter(range(1, 10_000))
    for row_title, row_panels in sections:
        d = d.with_row(dash.Row(row_title).id(next(ids)))
        for p in row_panels:
            d = d.with_panel(p.id(next(ids)))
    return d

"""The three Grafana dashboards, built with Grafana's ``grafana-foundation-sdk``.

``dashboards(cfg)`` gives ``{file name: dashboard JSON dict}`` (plain dicts and lists, ready for
``json.dumps``); :mod:`dashboards.mixin.build` writes them to ``dashboards/grafana/``.
``panel_queries(doc)`` lists every query of one such dict, for the lint and end-to-end tests.
One module per dashboard: :mod:`.fleet`, :mod:`.node`, :mod:`.stats`; shared parts in
:mod:`.common`.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from ..config import Config
from . import fleet, node, stats

FILES = {"nodewarden-fleet.json": fleet, "nodewarden-node.json": node, "nodewarden-failure-stats.json": stats}


def dashboards(cfg: Config) -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON (the SDK model encoded by the SDK's JSONEncoder, read back
    as plain data), for the three dashboards, in a fixed order."""
    return {name: json.loads(json.dumps(mod.dashboard(cfg).build(), cls=JSONEncoder))
            for name, mod in FILES.items()}


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel of a dashboard JSON dict that is not a row, rows' nested panels included,
    in order."""
    out: list[dict[str, Any]] = []
    for p in doc.get("panels") or ():
        if p.get("type") == "row":
            out.extend(panels(p))
        else:
            out.append(p)
    return out


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL expr)`` for every target of every panel (rows' nested panels
    included), in panel order; targets without an ``expr`` are skipped."""
    return [(p.get("title", ""), t["expr"]) for p in panels(doc) for t in p.get("targets") or () if t.get("expr")]

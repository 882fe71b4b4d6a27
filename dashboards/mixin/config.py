"""The mixin's tunables: label names, selectors, windows, thresholds.

Every rule and panel reads them from a :class:`Config`; ``DEFAULT`` is what the committed
files are built with. An operator who wants other values rebuilds the files with a config of
their own (``python3 -m dashboards.mixin.build --set key=value``); the end-to-end test builds
the same rules with short windows and no ``for`` so that alerts fire within seconds.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Config:
    # Selector of the agent's scrape job (every rule and panel query carries it).
    job_selector: str = 'job="nodewarden"'
    # Labels the scrape config adds (deploy/prometheus): `node` from the target's host name,
    # `cluster` from the target group (optional: absent means one cluster).
    node_label: str = "node"
    cluster_label: str = "cluster"
    # Window of "a fault happened recently" alerts (Xid, ECC, EDAC UE, MCE, flash cuts...).
    fault_window: str = "10m"
    # `for` durations; the end-to-end test sets them all to "0s".
    for_short: str = "1m"     # conditions that are faults as soon as seen twice (GPU lost...)
    for_long: str = "10m"     # conditions that may be transient (collector failing, port down)
    # Validator stale: no finished run for longer than this (seconds). The agent runs it weekly.
    validator_stale_seconds: int = 8 * 86400
    # EDAC corrected errors per DIMM that predict failure: mcelog's default page-offlining
    # threshold, "memory-ce-threshold = 10 / 24h".
    edac_ce_threshold: int = 10
    edac_ce_window: str = "24h"
    # IB flash-cut storm on one port: this many flash cuts within the window.
    flash_cut_storm_count: int = 3
    flash_cut_storm_window: str = "1h"
    # Optional extra selector for the IB ports that must be up (e.g. 'device=~"mlx5_[0-7]"').
    ib_port_selector: str = ""
    # Evaluation interval of the rule groups.
    interval: str = "1m"


DEFAULT = Config()


def with_overrides(base: Config, pairs: list[str]) -> Config:
    """``["fault_window=30s", "flash_cut_storm_count=5"]`` -> a Config; raises ValueError
    naming an unknown key or a value of the wrong type."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"unknown mixin setting {key!r} (known: {', '.join(sorted(fields))})")
        current = getattr(base, key)
        try:
            changes[key] = int(value) if isinstance(current, int) else value
        except ValueError:
            raise ValueError(f"{key}: expected an integer, got {value!r}") from None
    return dataclasses.replace(base, **changes)

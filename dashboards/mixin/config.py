"""The mixin's tunables: label names, selectors, windows, thresholds.

Every rule and panel reads them from a :class:`Config`; ``DEFAULT`` is what the committed
files are built with. An operator who wants other values rebuilds the files with a config of
their own (``python3 -m dashboards.mixin.build --set key=value``); the end-to-end test builds
the same rules with short windows and no ``for`` so that alerts fire within seconds.
"""

from __future__ import annotations

import dataclasses
import re


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
    # NVSwitch non-fatal SXid storm on one switch: this many non-fatal (or unknown) SXids within
    # the window. NVIDIA publishes no rate (the Fabric Manager guide calls non-fatal SXids
    # informational); the default is nodewarden's: more than one every six minutes for an hour
    # is a link or port going bad, well before a fatal SXid.
    sxid_storm_count: int = 10
    sxid_storm_window: str = "1h"
    # Corrected PCIe AER errors of one function within the window: DCGM's PCIe replay limit,
    # 8 per minute ("the maximum recommended by RM", DCGM_LIMIT_MAX_PCIREPLAY_RATE in
    # dcgm_gpu_hardware_limits.h), over 10 minutes. Corrected errors (Receiver Error, Bad TLP,
    # Bad DLLP, replay timeouts) are what a link replays for.
    aer_corrected_storm_count: int = 80
    aer_corrected_storm_window: str = "10m"
    # Optional extra selector for the IB ports that must be up (e.g. 'device=~"mlx5_[0-7]"').
    ib_port_selector: str = ""
    # How far before a fault window the event counters (Xid, MCE, flash cuts...) look for their
    # value then: a rise across a reboot or scrape gap shorter than this still counts.
    outage_lookback: str = "1h"
    # A node lists fewer GPUs than it did within this window: a GPU went missing (an unrepaired
    # node keeps paging this long; a GPU taken out on purpose, too).
    gpu_missing_window: str = "7d"
    # The GPUs every node must list (0: only the most each node listed within the window): set
    # it for a fleet of 8-GPU nodes, so that a node that boots with one missing pages too.
    expected_gpus_per_node: int = 0
    # Alerts on a state (a GPU lost, a port down, a failed check) keep firing this long after
    # their condition last held, so that an agent restart or a scrape gap neither resolves
    # them nor pages them again; "0s" turns it off (the end-to-end test).
    keep_firing_for: str = "15m"
    # Where each alert's runbook_url points (the alert's name in lower case is appended).
    runbook_url_base: str = "https://github.com/nodewarden/nodewarden/blob/main/dashboards/runbooks.md#"
    # Evaluation interval of the rule groups.
    interval: str = "1m"


DEFAULT = Config()

# Fields that are Prometheus durations ("30s", "10m", "1h30m", "8d"...).
DURATIONS = frozenset({"fault_window", "for_short", "for_long", "edac_ce_window", "flash_cut_storm_window",
                       "sxid_storm_window", "aer_corrected_storm_window", "outage_lookback", "gpu_missing_window",
                       "keep_firing_for", "interval"})
_DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?")


# Durations that may be 0 (no `for`, no keep_firing_for); the others are windows.
MAY_BE_ZERO = frozenset({"for_short", "for_long", "keep_firing_for"})
SELECTORS = frozenset({"job_selector", "ib_port_selector"})
_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"'
_MATCHERS = re.compile(rf"{_MATCHER}(?:\s*,\s*{_MATCHER})*")


def describe() -> list[str]:
    """``key=default`` for every setting, for ``--help``."""
    return [f"{f.name}={f.default!r}" for f in dataclasses.fields(Config)]


def with_overrides(base: Config, pairs: list[str]) -> Config:
    """``["fault_window=30s", "flash_cut_storm_count=5"]`` -> a Config; raises ValueError
    naming an unknown key, a missing ``=``, or a value of the wrong type (an integer, a
    Prometheus duration)."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if key not in fields:
            raise ValueError(f"unknown mixin setting {key!r} (known: {', '.join(sorted(fields))})")
        if not sep:
            raise ValueError(f"{key}: expected {key}=VALUE")
        current = getattr(base, key)
        if key in DURATIONS and (not value or not _DURATION.fullmatch(value)):
            raise ValueError(f"{key}: expected a Prometheus duration (30s, 10m, 1h, 8d), got {value!r}")
        if key in DURATIONS - MAY_BE_ZERO and not re.search(r"[1-9]", value):
            raise ValueError(f"{key}: must be longer than 0, got {value!r}")
        if key in SELECTORS and value and not _MATCHERS.fullmatch(value):
            raise ValueError(f'{key}: expected label matchers such as job="nodewarden" or '
                             f'device=~"mlx5_[0-7]", got {value!r}')
        try:
            changes[key] = int(value) if isinstance(current, int) else value
        except ValueError:
            raise ValueError(f"{key}: expected an integer, got {value!r}") from None
        if isinstance(current, int) and changes[key] < 0:  # type: ignore[operator]
            raise ValueError(f"{key}: must be 0 or more, got {value!r}")
    return dataclasses.replace(base, **changes)

"""The agent's configuration: a TOML file (``--config FILE``; by default
``/etc/nodewarden/agent.toml`` when it exists) and command-line flags, flags winning.

Keys (``deploy/config/nodewarden-agent.toml`` is a commented example)::

    listen = "127.0.0.1:9764"            # HOST:PORT of /metrics and /healthz
    state_dir = "/var/lib/nodewarden"    # state.json, event journal, validator report
    hostname = "node01"                  # host label of events (default: this machine's name)
    log_level = "info"                   # debug, info, warning, error
    poll_interval_seconds = 10           # how often the polled collectors run
    collector_timeout_seconds = 5        # a collect() running longer is abandoned (success 0)
    sysfs = "/sys"                       # roots the collectors read
    procfs = "/proc"

    [collectors]                         # each true (default) or false
    kernel_log = true
    nvml = true
    infiniband = true
    edac = true
    pcie = true
    netclass = true

    [flash_cut]
    max_seconds = 60                     # a port back within this long had a flash cut

    [journal]
    max_bytes = 268435456                # event journal bound, all files (256 MiB)
    max_age_days = 400                   # journal files older than this are deleted

    [http]                               # the /metrics server (nodewarden.agent.server)
    web_config_file = "/etc/nodewarden/web.yml"  # TLS and basic auth, node_exporter's format
    max_connections = 256                # held at once (fewer when ulimit -n is low)
    backlog = 1024                       # listen backlog
    request_timeout_seconds = 10         # TLS handshake and request head
    idle_timeout_seconds = 120           # a kept-alive connection waiting for its next request
    write_timeout_seconds = 30           # a response read by the client

    [validator]                          # the weekly `nodewarden validate` run
    enabled = true
    interval_days = 7
    jitter_hours = 12                    # per-host offset into each interval (hash of the hostname)
    args = ["--profile", "auto"]         # added to: validate --json <state_dir>/validate.json --no-progress
    timeout_seconds = 3600

A file that is not TOML, an unknown key or table, a value of the wrong type, or a number out of
range is a :class:`ConfigError` naming the file and the key (``agent.toml: journal.max_bytes:
expected an integer``): the agent exits 2 at start, before doing anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from pathlib import Path
from typing import Any, Callable

DEFAULT_PATH = "/etc/nodewarden/agent.toml"
LOG_LEVELS = ("debug", "info", "warning", "error")
COLLECTORS = ("kernel_log", "nvml", "infiniband", "edac", "pcie", "netclass")


class ConfigError(ValueError):
    """An unusable configuration; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class ValidatorConfig:
    enabled: bool = True
    interval_days: float = 7.0
    jitter_hours: float = 12.0
    args: tuple[str, ...] = ("--profile", "auto")
    timeout_seconds: float = 3600.0


@dataclasses.dataclass(frozen=True)
class HttpConfig:
    """The ``[http]`` table; ``web_config_file`` also from ``--web.config.file``."""

    web_config_file: str | None = None
    max_connections: int = 256
    backlog: int = 1024
    request_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 120.0
    write_timeout_seconds: float = 30.0


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """The agent's settings after file and flags are merged. ``source``: the file read, if any."""

    listen: str = "127.0.0.1:9764"
    state_dir: str = "/var/lib/nodewarden"
    hostname: str | None = None
    log_level: str = "info"
    poll_interval_seconds: float = 10.0
    collector_timeout_seconds: float = 5.0
    sysfs: str = "/sys"
    procfs: str = "/proc"
    kmsg: str = "/dev/kmsg"
    boot_id_path: str = "/proc/sys/kernel/random/boot_id"
    collectors: tuple[tuple[str, bool], ...] = tuple((c, True) for c in COLLECTORS)
    flash_cut_max_seconds: float = 60.0
    journal_max_bytes: int = 256 << 20
    journal_max_age_days: float = 400.0
    validator: ValidatorConfig = ValidatorConfig()
    http: HttpConfig = HttpConfig()
    source: str | None = None

    def enabled(self, collector: str) -> bool:
        return dict(self.collectors).get(collector, False)

    @property
    def enabled_collectors(self) -> list[str]:
        return [c for c, on in self.collectors if on]


# ---------------------------------------------------------------------------------------------
# Schema: key -> (checker, field). A checker returns the value or raises _Bad("expected ...").

class _Bad(Exception):
    pass


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise _Bad("expected a string")
    return v


def _nonempty(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _Bad("expected a non-empty string")
    return v


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad("expected true or false")
    return v


def _integer(minimum: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Bad("expected an integer")
        if v < minimum:
            raise _Bad(f"expected an integer >= {minimum}, got {v}")
        return v
    return check


def _number(positive: bool = True) -> Callable[[Any], float]:
    """A number (integer or float, not a boolean); > 0 with ``positive``, else >= 0."""
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Bad("expected a number")
        if v != v or v in (float("inf"), float("-inf")):
            raise _Bad("expected a finite number")
        if positive and v <= 0:
            raise _Bad(f"expected a number > 0, got {v}")
        if not positive and v < 0:
            raise _Bad(f"expected a number >= 0, got {v}")
        return float(v)
    return check


def _log_level(v: Any) -> str:
    if v not in LOG_LEVELS:
        raise _Bad(f"expected one of {', '.join(LOG_LEVELS)}")
    return str(v)


def _listen(v: Any) -> str:
    from nodewarden.agent.server import parse_listen
    s = _nonempty(v)
    try:
        parse_listen(s)
    except ValueError as e:
        raise _Bad(str(e)) from None
    return s


def _string_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Bad("expected a list of strings")
    return tuple(v)


TOP: dict[str, Callable[[Any], Any]] = {
    "listen": _listen, "state_dir": _nonempty, "hostname": _nonempty, "log_level": _log_level,
    "poll_interval_seconds": _number(), "collector_timeout_seconds": _number(),
    "sysfs": _nonempty, "procfs": _nonempty,
}
TABLES: dict[str, dict[str, Callable[[Any], Any]]] = {
    "collectors": {c: _boolean for c in COLLECTORS},
    "flash_cut": {"max_seconds": _number()},
    "journal": {"max_bytes": _integer(1), "max_age_days": _number()},
    "http": {"web_config_file": _nonempty, "max_connections": _integer(1), "backlog": _integer(1),
             "request_timeout_seconds": _number(), "idle_timeout_seconds": _number(),
             "write_timeout_seconds": _number()},
    "validator": {"enabled": _boolean, "interval_days": _number(), "jitter_hours": _number(positive=False),
                  "args": _string_list, "timeout_seconds": _number()},
}


def parse(doc: dict[str, Any], name: str, base: AgentConfig | None = None) -> AgentConfig:
    """``doc`` (a parsed TOML document) applied over ``base`` (default: the defaults). Raises
    ConfigError ``"<name>: <key>: <problem>"`` for the first bad key, in file order."""
    cfg = base or AgentConfig()
    top: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for key, value in doc.items():
        if key in TABLES:
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: {key}: expected a table ([{key}])")
            tables[key] = {}
            for sub, v in value.items():
                check = TABLES[key].get(sub)
                if check is None:
                    raise ConfigError(f"{name}: {key}.{sub}: unknown key (known: {', '.join(TABLES[key])})")
                try:
                    tables[key][sub] = check(v)
                except _Bad as e:
                    raise ConfigError(f"{name}: {key}.{sub}: {e}") from None
        elif key in TOP:
            try:
                top[key] = TOP[key](value)
            except _Bad as e:
                raise ConfigError(f"{name}: {key}: {e}") from None
        else:
            known = ", ".join([*TOP, *(f"[{t}]" for t in TABLES)])
            raise ConfigError(f"{name}: {key}: unknown key (known: {known})")
    changes: dict[str, Any] = dict(top)
    if "collectors" in tables:
        merged = dict(cfg.collectors)
        merged.update(tables["collectors"])
        changes["collectors"] = tuple((c, merged[c]) for c in COLLECTORS)
    if "max_seconds" in tables.get("flash_cut", {}):
        changes["flash_cut_max_seconds"] = tables["flash_cut"]["max_seconds"]
    j = tables.get("journal", {})
    if "max_bytes" in j:
        changes["journal_max_bytes"] = j["max_bytes"]
    if "max_age_days" in j:
        changes["journal_max_age_days"] = j["max_age_days"]
    if "validator" in tables:
        changes["validator"] = dataclasses.replace(cfg.validator, **tables["validator"])
    if "http" in tables:
        changes["http"] = dataclasses.replace(cfg.http, **tables["http"])
    return dataclasses.replace(cfg, **changes)


def load(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and check a config file. Raises ConfigError (unreadable, not TOML, bad keys)."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read: {e.strerror or e}") from None
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{name}: not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{name}: not valid TOML: {e}") from None
    return dataclasses.replace(parse(doc, name), source=name)


def resolve(args: argparse.Namespace, default_path: str = DEFAULT_PATH) -> AgentConfig:
    """The configuration for ``nodewarden agent``: the file (``--config``, else ``default_path``
    when it exists, else none), then the flags that were given (a flag left at None is not).
    Raises ConfigError."""
    path = getattr(args, "config", None)
    if path:
        cfg = load(path)
    elif os.path.exists(default_path):
        cfg = load(default_path)
    else:
        cfg = AgentConfig()
    flags: dict[str, Any] = {}
    for attr in ("listen", "state_dir", "hostname", "log_level", "sysfs", "procfs", "kmsg", "boot_id_path"):
        v = getattr(args, attr, None)
        if v is not None:
            flags[attr] = v
    poll = getattr(args, "poll_interval", None)
    if poll is not None:
        if not poll > 0:
            raise ConfigError(f"--poll-interval: expected a number > 0, got {poll}")
        flags["poll_interval_seconds"] = float(poll)
    web = getattr(args, "web_config_file", None)
    if web is not None:
        if not web:
            raise ConfigError("--web.config.file: expected a file name")
        flags["http"] = dataclasses.replace(cfg.http, web_config_file=web)
    if getattr(args, "no_validator", False):
        flags["validator"] = dataclasses.replace(cfg.validator, enabled=False)
    return dataclasses.replace(cfg, **flags)

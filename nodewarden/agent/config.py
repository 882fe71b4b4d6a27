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

    [collectors]                         # each true (default) or false; the keys are
                                         # nodewarden.collectors.NAMES
    kernel_log = true
    nvml = true
    infiniband = true
    edac = true
    pcie = true
    netclass = true

    [poll_every]                         # a polled collector runs at every Nth poll (1: every
    pcie = 3                             # poll; default 3 for pcie and netclass, 1 for the rest)
    netclass = 3

    [kernel_log]
    accept_injected = false              # count records user space wrote into /dev/kmsg (facility
                                         # not kern) as faults; for end-to-end tests only

    [flash_cut]
    max_seconds = 60                     # a port back within this long had a flash cut

    [journal]
    max_bytes = 268435456                # all journal files (256 MiB): past it, new records dropped
    max_day_bytes = 16777216             # one day's file (16 MiB): past it, that day's records dropped
    max_age_days = 400                   # journal files older than this are deleted (only age deletes)
    source_burst = 1000                  # records one (kind, device) may journal at once ...
    source_rate_per_second = 1           # ... and then per second (token bucket)

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

    [kubernetes]                         # the GpuHardwareHealthy node condition (nodewarden.agent.nodecondition)
    node_condition = false               # publish it on this node's Node object
    node_name = "gpu-node-001"           # default: the NODE_NAME environment variable (downward API)
    kubeconfig = "/etc/nodewarden/kubeconfig"  # default: the pod's service account (in-cluster)
    service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    heartbeat_seconds = 60               # lastHeartbeatTime refreshed this often (and on every change)
    request_timeout_seconds = 10         # one request to the API server: connect, TLS, every read

A file that is not TOML, an unknown key or table, a value of the wrong type, a number out of
its range (below), or a NUL character in a string is a :class:`ConfigError` naming the file and
the key (``agent.toml: journal.max_bytes: expected an integer``), or the flag
(``--poll-interval``): the agent exits 2 at start, before doing anything. A boolean is no
number; NaN and infinities are out of every range.

Numeric settings (key, type, range, unit; :data:`RANGES`, the table the checks use)::

"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping

from nodewarden import collectors
from nodewarden import kmsg as kmsg_reader

DEFAULT_PATH = "/etc/nodewarden/agent.toml"
LOG_LEVELS = ("debug", "info", "warning", "error")
COLLECTORS = collectors.NAMES  # the [collectors] keys: every collector the registry lists, in its order
# [poll_every] defaults: PCIe link states and AER counters, and the Ethernet interfaces, change
# rarely and reach the kernel log when they fail (AER records, NIC link lines); read every third
# poll they cost a third (measured in bench/agent_overhead.py), while the GPUs and the RDMA ports
# (flash cuts) are read at every poll.
POLL_EVERY = {"pcie": 3, "netclass": 3}
POLLED = collectors.POLLED  # the [poll_every] keys


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
class KubernetesConfig:
    """The ``[kubernetes]`` table. ``node_name`` None: the ``NODE_NAME`` environment variable;
    ``kubeconfig`` None: the pod's service account (``service_account_dir``)."""

    node_condition: bool = False
    node_name: str | None = None
    kubeconfig: str | None = None
    service_account_dir: str = "/var/run/secrets/kubernetes.io/serviceaccount"
    heartbeat_seconds: float = 60.0
    request_timeout_seconds: float = 10.0


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
    kmsg: str = kmsg_reader.KMSG
    boot_id_path: str = kmsg_reader.BOOT_ID
    collectors: tuple[tuple[str, bool], ...] = tuple((c, True) for c in COLLECTORS)
    poll_every: tuple[tuple[str, int], ...] = tuple((c, POLL_EVERY.get(c, 1)) for c in POLLED)
    accept_injected: bool = False
    flash_cut_max_seconds: float = 60.0
    journal_max_bytes: int = 256 << 20
    journal_max_day_bytes: int = 16 << 20
    journal_max_age_days: float = 400.0
    journal_source_burst: int = 1000
    journal_source_rate_per_second: float = 1.0
    validator: ValidatorConfig = ValidatorConfig()
    http: HttpConfig = HttpConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    source: str | None = None

    def enabled(self, collector: str) -> bool:
        return dict(self.collectors).get(collector, False)

    @property
    def enabled_collectors(self) -> list[str]:
        return [c for c, on in self.collectors if on]

    def every(self, collector: str) -> int:
        """The ``[poll_every]`` of a polled collector: it runs at every Nth poll."""
        return dict(self.poll_every).get(collector, 1)


# ---------------------------------------------------------------------------------------------
# Schema: key -> (checker, field). A checker returns the value or raises _Bad("expected ...").

class _Bad(Exception):
    pass


def _nonempty(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _Bad("expected a non-empty string")
    if "\0" in v:
        raise _Bad("contains a NUL character")
    return v


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad("expected true or false")
    return v


@dataclasses.dataclass(frozen=True)
class Range:
    """One numeric setting: its key (``table.key`` or a top-level key), ``int`` or ``float``,
    the smallest and largest value accepted (both included), its unit, and why the bounds."""

    key: str
    type: type
    min: float
    max: float
    unit: str
    why: str


# The one table of numeric settings: checked at start (file and flags), and rendered into this
# module's documentation (:func:`ranges_doc`). Bounds keep every later computation finite and
# every thread alive: a day count that overflows a date, an interval that overflows a timer
# or spins a core, a byte bound that cannot hold one day of records.
RANGES: tuple[Range, ...] = (
    Range("poll_interval_seconds", float, 0.1, 86400.0, "s", "below 0.1 s the pollers spin; above a day they never poll"),
    Range("collector_timeout_seconds", float, 0.1, 3600.0, "s", "a collect() call is abandoned after this"),
    *(Range(f"poll_every.{c}", int, 1, 360, "polls", "the collector runs at every Nth poll")
      for c in POLLED),
    Range("flash_cut.max_seconds", float, 1.0, 86400.0, "s", "a down/up pair within this is a flash cut"),
    Range("journal.max_bytes", int, 1 << 20, 1 << 40, "bytes", "all journal files; when reached, new records are dropped"),
    Range("journal.max_day_bytes", int, 64 << 10, 1 << 40, "bytes", "one day's journal file; a storm stops here"),
    Range("journal.max_age_days", float, 1.0, 3660.0, "days", "files older than this are deleted (ten years at most)"),
    Range("journal.source_burst", int, 1, 10 ** 9, "records", "records of one (kind, device) journaled at once"),
    Range("journal.source_rate_per_second", float, 0.001, 1e6, "records/s", "the steady rate per (kind, device)"),
    Range("http.max_connections", int, 1, 1 << 20, "connections", "open at once (also held under the open-file limit)"),
    Range("http.backlog", int, 1, 65535, "connections", "waiting to be accepted (the kernel caps it at somaxconn)"),
    Range("http.request_timeout_seconds", float, 0.1, 3600.0, "s", "for a TLS handshake or a request head"),
    Range("http.idle_timeout_seconds", float, 0.1, 86400.0, "s", "a keep-alive connection waits this long"),
    Range("http.write_timeout_seconds", float, 0.1, 3600.0, "s", "to write a response"),
    Range("validator.interval_days", float, 1 / 24, 366.0, "days", "one hour to a year between runs"),
    Range("validator.jitter_hours", float, 0.0, 8784.0, "h", "per-host offset into each interval"),
    Range("validator.timeout_seconds", float, 1.0, 7 * 86400.0, "s", "a run is terminated after this"),
    Range("kubernetes.heartbeat_seconds", float, 1.0, 86400.0, "s", "the node condition's heartbeat"),
    Range("kubernetes.request_timeout_seconds", float, 0.1, 300.0, "s", "one request to the API server"),
)
RANGE_BY_KEY: dict[str, Range] = {r.key: r for r in RANGES}


def _fmt(v: float) -> str:
    if isinstance(v, int) or (float(v).is_integer() and abs(v) < 1e15):
        return str(int(v))
    return f"{v:.6g}"


def check_number(key: str, v: Any) -> int | float:
    """``v`` checked against the range of ``key`` (:data:`RANGES`): an ``int`` setting takes an
    integer, a ``float`` one an integer or a finite float; a boolean is no number. Returns the
    value (float for a float setting). Raises _Bad("expected ...")."""
    r = RANGE_BY_KEY[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"expected {'an integer' if r.type is int else 'a number'}, got {str(v).lower() if isinstance(v, bool) else repr(v)}")
    if r.type is int and not isinstance(v, int):
        raise _Bad(f"expected an integer, got {_fmt(v) if isinstance(v, float) else repr(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        raise _Bad("expected a finite number")
    if not r.min <= v <= r.max:
        what = "an integer" if r.type is int else "a number"
        raise _Bad(f"expected {what} from {_fmt(r.min)} to {_fmt(r.max)} ({r.unit}), got {_fmt(v)}")
    return v if r.type is int else float(v)


def _ranged(key: str) -> Callable[[Any], Any]:
    return lambda v: check_number(key, v)


def ranges_doc() -> str:
    """The ranges table as text (one line per numeric key), as this module's doc shows it."""
    w = max(len(r.key) for r in RANGES)
    return "\n".join(f"    {r.key:<{w}}  {r.type.__name__:<5}  {_fmt(r.min)} .. {_fmt(r.max)} {r.unit}: {r.why}"
                     for r in RANGES)


def _log_level(v: Any) -> str:
    if v not in LOG_LEVELS:
        raise _Bad(f"expected one of {', '.join(LOG_LEVELS)}")
    return str(v)


def _listen(v: Any) -> str:
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
    "poll_interval_seconds": _ranged("poll_interval_seconds"),
    "collector_timeout_seconds": _ranged("collector_timeout_seconds"),
    "sysfs": _nonempty, "procfs": _nonempty,
}
TABLES: dict[str, dict[str, Callable[[Any], Any]]] = {
    "collectors": {c: _boolean for c in COLLECTORS},
    "poll_every": {c: _ranged(f"poll_every.{c}") for c in POLLED},
    "kernel_log": {"accept_injected": _boolean},
    "flash_cut": {"max_seconds": _ranged("flash_cut.max_seconds")},
    "journal": {k: _ranged(f"journal.{k}") for k in ("max_bytes", "max_day_bytes", "max_age_days",
                                                     "source_burst", "source_rate_per_second")},
    "http": {"web_config_file": _nonempty,
             **{k: _ranged(f"http.{k}") for k in ("max_connections", "backlog", "request_timeout_seconds",
                                                  "idle_timeout_seconds", "write_timeout_seconds")}},
    "validator": {"enabled": _boolean, "interval_days": _ranged("validator.interval_days"),
                  "jitter_hours": _ranged("validator.jitter_hours"), "args": _string_list,
                  "timeout_seconds": _ranged("validator.timeout_seconds")},
    "kubernetes": {"node_condition": _boolean, "node_name": _nonempty, "kubeconfig": _nonempty,
                   "service_account_dir": _nonempty,
                   **{k: _ranged(f"kubernetes.{k}") for k in ("heartbeat_seconds", "request_timeout_seconds")}},
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
    if "poll_every" in tables:
        every = dict(cfg.poll_every)
        every.update(tables["poll_every"])
        changes["poll_every"] = tuple((c, every[c]) for c in POLLED)
    if "accept_injected" in tables.get("kernel_log", {}):
        changes["accept_injected"] = tables["kernel_log"]["accept_injected"]
    if "max_seconds" in tables.get("flash_cut", {}):
        changes["flash_cut_max_seconds"] = tables["flash_cut"]["max_seconds"]
    for k, v in tables.get("journal", {}).items():
        changes[f"journal_{k}"] = v
    if "validator" in tables:
        changes["validator"] = dataclasses.replace(cfg.validator, **tables["validator"])
    if "http" in tables:
        changes["http"] = dataclasses.replace(cfg.http, **tables["http"])
    if "kubernetes" in tables:
        changes["kubernetes"] = dataclasses.replace(cfg.kubernetes, **tables["kubernetes"])
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
            check = TOP.get(attr, _nonempty)
            try:
                flags[attr] = check(v)
            except _Bad as e:
                raise ConfigError(f"--{attr.replace('_', '-')}: {e}") from None
    poll = getattr(args, "poll_interval", None)
    if poll is not None:
        try:
            flags["poll_interval_seconds"] = check_number("poll_interval_seconds", poll)
        except _Bad as e:
            raise ConfigError(f"--poll-interval: {e}") from None
    if getattr(args, "accept_injected", False):
        flags["accept_injected"] = True
    web = getattr(args, "web_config_file", None)
    if web is not None:
        if not web:
            raise ConfigError("--web.config.file: expected a file name")
        flags["http"] = dataclasses.replace(cfg.http, web_config_file=web)
    if getattr(args, "no_validator", False):
        flags["validator"] = dataclasses.replace(cfg.validator, enabled=False)
    return dataclasses.replace(cfg, **flags)


__doc__ = (__doc__ or "") + ranges_doc() + "\n"


if __name__ == "__main__":  # the ranges block of deploy/config/nodewarden-agent.toml
    print("\n".join("#" + line[3:] for line in ranges_doc().splitlines()))


def node_name(cfg: AgentConfig, env: Mapping[str, str] = os.environ) -> str:
    """The node whose condition the agent publishes: ``[kubernetes] node_name``, else the
    ``NODE_NAME`` environment variable. Raises ConfigError naming both when neither is set, or
    when the name is no Kubernetes object name (RFC 1123 subdomain)."""
    where = f"{cfg.source}: kubernetes.node_name" if cfg.source else "kubernetes.node_name"
    name = cfg.kubernetes.node_name or env.get("NODE_NAME", "")
    if not name:
        raise ConfigError(f"{where}: not set, and NODE_NAME is empty (the DaemonSet sets it from spec.nodeName)")
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} is not a Kubernetes node name (lower-case RFC 1123 subdomain)")
    return name


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:9764``, ``[::1]:9764``, ``:9764`` for all addresses) -> (host, port).

    PORT is 1-65535 in ASCII digits only (no sign, no ``_``, no other script's digits); no
    whitespace or NUL anywhere. Raises ValueError naming what is wrong.
    """
    if any(c.isspace() or c == "\0" for c in text):
        raise ValueError(f"no spaces or control characters allowed in HOST:PORT, got {text!r}")
    if text.startswith("[") and (text.endswith("]") or "]" not in text):
        raise ValueError(f"expected [IPv6 address]:PORT, got {text!r} (no port after the brackets)"
                         if text.endswith("]") else f"expected [IPv6 address]:PORT, got {text!r} (no closing bracket)")
    host, sep, port = text.rpartition(":")
    if not sep or not port:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets: [{host.strip('[]')}]:{port}")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"port {port!r} is not a number (ASCII digits 0-9 only)")
    num = int(port)
    if not 1 <= num <= 65535:
        raise ValueError(f"port {num} is out of range 1-65535")
    return host, num

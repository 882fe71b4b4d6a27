"""The agent's configuration: the shipped example loads (and states the defaults), flags win over
the file, and every kind of mistake stops the agent at start with exit 2 and the key named."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nodewarden import collectors
from nodewarden.agent import config as cf
from nodewarden.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "config" / "nodewarden-agent.toml"


def agent_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["agent", *argv])


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "agent.toml"
    p.write_text(text)
    return p


def test_the_shipped_example_loads_and_states_the_defaults() -> None:
    cfg = cf.load(EXAMPLE)
    assert cfg.source == str(EXAMPLE)
    assert dataclasses.replace(cfg, source=None) == cf.AgentConfig()
    assert cfg.enabled_collectors == list(cf.COLLECTORS)
    assert cfg.journal_max_bytes == 256 << 20 and cfg.journal_max_age_days == 400
    assert cfg.validator == cf.ValidatorConfig(enabled=True, interval_days=7, jitter_hours=12,
                                               args=("--profile", "auto"), timeout_seconds=3600)


def test_the_collectors_keys_are_the_registry_names() -> None:
    """One list: a collector added to nodewarden.collectors is a [collectors] key, on by default,
    and the shipped example names it."""
    assert cf.COLLECTORS == collectors.NAMES
    assert tuple(cf.TABLES["collectors"]) == collectors.NAMES
    assert cf.AgentConfig().enabled_collectors == list(collectors.NAMES)
    assert tuple(tomllib.loads(EXAMPLE.read_text())["collectors"]) == collectors.NAMES
    # [poll_every]: the polled ones, in the example with their defaults
    assert tuple(tomllib.loads(EXAMPLE.read_text())["poll_every"]) == collectors.POLLED == tuple(cf.TABLES["poll_every"])
    assert dict(cf.AgentConfig().poll_every) == {**dict.fromkeys(collectors.POLLED, 1), "pcie": 3, "netclass": 3}


def test_every_key_is_read(tmp_path: Path) -> None:
    p = write(tmp_path, """
listen = "[::1]:9100"
state_dir = "/srv/nw"
hostname = "gpu-017"
log_level = "debug"
poll_interval_seconds = 2.5
collector_timeout_seconds = 1
sysfs = "/host/sys"
procfs = "/host/proc"
[collectors]
nvml = false
kernel_log = false
[poll_every]
nvml = 2
pcie = 6
[flash_cut]
max_seconds = 30
[journal]
max_bytes = 1048576
max_age_days = 30
[validator]
enabled = false
interval_days = 14
jitter_hours = 0
args = ["--quick", "--profile", "h100_sxm5_80gb"]
timeout_seconds = 600
""")
    cfg = cf.load(p)
    assert (cfg.listen, cfg.state_dir, cfg.hostname, cfg.log_level) == ("[::1]:9100", "/srv/nw", "gpu-017", "debug")
    assert (cfg.poll_interval_seconds, cfg.collector_timeout_seconds) == (2.5, 1.0)
    assert (cfg.sysfs, cfg.procfs) == ("/host/sys", "/host/proc")
    assert cfg.enabled_collectors == ["infiniband", "edac", "pcie", "netclass"]
    assert not cfg.enabled("kernel_log") and not cfg.enabled("nvml")
    assert dict(cfg.poll_every) == {"nvml": 2, "infiniband": 1, "edac": 1, "pcie": 6, "netclass": 3}
    assert (cfg.every("pcie"), cfg.every("netclass"), cfg.every("edac")) == (6, 3, 1)
    assert (cfg.flash_cut_max_seconds, cfg.journal_max_bytes, cfg.journal_max_age_days) == (30, 1 << 20, 30)
    assert cfg.validator == cf.ValidatorConfig(False, 14, 0, ("--quick", "--profile", "h100_sxm5_80gb"), 600)


@pytest.mark.parametrize("text, message", [
    ("[journal]\nmax_bytes = \"256M\"\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = 1.5\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = true\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = 0\n", "agent.toml: journal.max_bytes: expected an integer from 1048576 to 1099511627776 (bytes), got 0"),
    ("[journal]\nmax_age_days = -1\n", "agent.toml: journal.max_age_days: expected a number from 1 to 3660 (days), got -1"),
    ("[journal]\nmax_size = 1\n", "agent.toml: journal.max_size: unknown key"),
    ("poll_interval_seconds = -10\n", "agent.toml: poll_interval_seconds: expected a number from 0.1 to 86400 (s), got -10"),
    ("poll_interval_seconds = 0\n", "agent.toml: poll_interval_seconds: expected a number from 0.1"),
    ("poll_interval_seconds = nan\n", "agent.toml: poll_interval_seconds: expected a finite number"),
    ("collector_timeout_seconds = \"5s\"\n", "agent.toml: collector_timeout_seconds: expected a number"),
    ("poll_interval = 10\n", "agent.toml: poll_interval: unknown key"),
    ("listen = \"localhost\"\n", "agent.toml: listen: expected HOST:PORT"),
    ("listen = 9764\n", "agent.toml: listen: expected a non-empty string"),
    ("log_level = \"verbose\"\n", "agent.toml: log_level: expected one of debug, info, warning, error"),
    ("hostname = \"\"\n", "agent.toml: hostname: expected a non-empty string"),
    ("[collectors]\nnvml = \"yes\"\n", "agent.toml: collectors.nvml: expected true or false"),
    ("[collectors]\ndcgm = true\n", "agent.toml: collectors.dcgm: unknown key"),
    ("[poll_every]\npcie = 0\n", "agent.toml: poll_every.pcie: expected an integer from 1 to 360 (polls), got 0"),
    ("[poll_every]\npcie = 1.5\n", "agent.toml: poll_every.pcie: expected an integer"),
    ("[poll_every]\nkernel_log = 2\n", "agent.toml: poll_every.kernel_log: unknown key (known: nvml, infiniband"),
    ("collectors = true\n", "agent.toml: collectors: expected a table ([collectors])"),
    ("[flash_cut]\nmax_seconds = 0\n", "agent.toml: flash_cut.max_seconds: expected a number from 1 to 86400"),
    ("[validator]\ninterval_days = -7\n", "agent.toml: validator.interval_days: expected a number from 0.0416667 to 366 (days), got -7"),
    ("[validator]\njitter_hours = -1\n", "agent.toml: validator.jitter_hours: expected a number from 0 to 8784"),
    ("[validator]\nargs = \"--quick\"\n", "agent.toml: validator.args: expected a list of strings"),
    ("[validator]\nargs = [\"--checks\", 3]\n", "agent.toml: validator.args: expected a list of strings"),
    ("[validator]\nenabled = 1\n", "agent.toml: validator.enabled: expected true or false"),
    ("[validator]\ntimeout_seconds = 0\n", "agent.toml: validator.timeout_seconds: expected a number from 1 to 604800"),
    ("[weekly]\nenabled = true\n", "agent.toml: weekly: unknown key"),
    ("listen = \n", "agent.toml: not valid TOML"),
    # values that passed the old checks and then broke the agent
    ("[journal]\nmax_age_days = 1000000\n", "agent.toml: journal.max_age_days: expected a number from 1 to 3660"),
    ("[journal]\nmax_day_bytes = 100\n", "agent.toml: journal.max_day_bytes: expected an integer from 65536"),
    ("[journal]\nsource_burst = 0\n", "agent.toml: journal.source_burst: expected an integer from 1"),
    ("[journal]\nsource_rate_per_second = inf\n", "agent.toml: journal.source_rate_per_second: expected a finite number"),
    ("[validator]\ninterval_days = 1e306\n", "agent.toml: validator.interval_days: expected a number from 0.0416667 to 366 (days), got 1e+306"),
    ("[validator]\ninterval_days = 3e6\n", "agent.toml: validator.interval_days: expected a number from 0.0416667 to 366 (days), got 3000000"),
    ("[validator]\ntimeout_seconds = 1e300\n", "agent.toml: validator.timeout_seconds: expected a number from 1 to 604800"),
    ("[validator]\njitter_hours = true\n", "agent.toml: validator.jitter_hours: expected a number"),
    ("poll_interval_seconds = 1e10\n", "agent.toml: poll_interval_seconds: expected a number from 0.1 to 86400 (s), got 10000000000"),
    ("poll_interval_seconds = inf\n", "agent.toml: poll_interval_seconds: expected a finite number"),
    ("poll_interval_seconds = 1e-9\n", "agent.toml: poll_interval_seconds: expected a number from 0.1 to 86400 (s), got 1e-09"),
    ("poll_interval_seconds = true\n", "agent.toml: poll_interval_seconds: expected a number"),
    ("collector_timeout_seconds = 1e10\n", "agent.toml: collector_timeout_seconds: expected a number from 0.1 to 3600"),
    ("[flash_cut]\nmax_seconds = 1e308\n", "agent.toml: flash_cut.max_seconds: expected a number from 1 to 86400"),
    ("state_dir = \"/var/lib/nw\\u0000x\"\n", "agent.toml: state_dir: contains a NUL character"),
    ("sysfs = \"/sys\\u0000\"\n", "agent.toml: sysfs: contains a NUL character"),
    ("listen = \"127.0.0.1:+9764\"\n", "agent.toml: listen: port '+9764' is not a number (ASCII digits 0-9 only)"),
    ("listen = \"127.0.0.1:\u0669\u0667\u0666\u0664\"\n", "agent.toml: listen: port '\u0669\u0667\u0666\u0664' is not a number"),
    ("listen = \"127.0.0.1:1_9795\"\n", "agent.toml: listen: port '1_9795' is not a number"),
    ("listen = \" 127.0.0.1:9764\"\n", "agent.toml: listen: no spaces or control characters"),
    ("listen = \"127.0.0.1:9764 \"\n", "agent.toml: listen: no spaces or control characters"),
    ("listen = \"127.0.0.1:0\"\n", "agent.toml: listen: port 0 is out of range 1-65535"),
    ("listen = \"127.0.0.1:65536\"\n", "agent.toml: listen: port 65536 is out of range 1-65535"),
])
def test_a_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(cf.ConfigError) as e:
        cf.load(write(tmp_path, text))
    assert message in str(e.value)
    assert str(e.value).startswith(str(tmp_path / "agent.toml") + ": ")


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    p = write(tmp_path, 'listen = "127.0.0.1:1"\nstate_dir = "/x"\npoll_interval_seconds = 60\nsysfs = "/host/sys"\n'
                        "[validator]\nenabled = true\n")
    cfg = cf.resolve(agent_args("--config", str(p), "--listen", "127.0.0.1:2", "--poll-interval", "5",
                                "--no-validator"))
    assert cfg.listen == "127.0.0.1:2" and cfg.poll_interval_seconds == 5 and not cfg.validator.enabled
    assert cfg.state_dir == "/x" and cfg.sysfs == "/host/sys"  # from the file: no flag given
    cfg = cf.resolve(agent_args("--config", str(p), "--sysfs", "/other", "--state-dir", "/y"))
    assert (cfg.sysfs, cfg.state_dir, cfg.validator.enabled) == ("/other", "/y", True)


def test_the_default_file_is_read_only_when_it_exists(tmp_path: Path) -> None:
    assert cf.resolve(agent_args(), default_path=str(tmp_path / "absent.toml")) == cf.AgentConfig()
    p = write(tmp_path, "poll_interval_seconds = 3\n")
    cfg = cf.resolve(agent_args(), default_path=str(p))
    assert cfg.poll_interval_seconds == 3 and cfg.source == str(p)
    with pytest.raises(cf.ConfigError, match="absent.toml: cannot read"):
        cf.resolve(agent_args("--config", str(tmp_path / "absent.toml")))
    with pytest.raises(cf.ConfigError, match="--poll-interval"):
        cf.resolve(agent_args("--poll-interval", "0"), default_path=str(tmp_path / "absent.toml"))


def test_the_agent_exits_2_naming_the_key(tmp_path: Path) -> None:
    p = write(tmp_path, "[journal]\nmax_bytes = \"a lot\"\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "nodewarden", "agent", "--config", str(p), "--state-dir",
                        str(tmp_path / "state")], cwd=REPO, env=env, capture_output=True, timeout=30)
    assert r.returncode == 2
    assert b"agent.toml: journal.max_bytes: expected an integer" in r.stderr
    assert not (tmp_path / "state").exists()  # nothing done before the check


@pytest.mark.parametrize("argv, message", [
    (["--poll-interval", "inf"], "--poll-interval: expected a finite number"),
    (["--poll-interval", "1e10"], "--poll-interval: expected a number from 0.1 to 86400 (s), got 10000000000"),
    (["--poll-interval", "1e-9"], "--poll-interval: expected a number from 0.1 to 86400 (s), got 1e-09"),
    (["--poll-interval", "nan"], "--poll-interval: expected a finite number"),
    (["--listen", "127.0.0.1:+9764"], "--listen: port '+9764' is not a number"),
    (["--listen", "127.0.0.1:0"], "--listen: port 0 is out of range 1-65535"),
    (["--listen", " 127.0.0.1:9764"], "--listen: no spaces or control characters"),
])
def test_a_bad_flag_names_the_flag(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(cf.ConfigError) as e:
        cf.resolve(agent_args(*argv), default_path=str(tmp_path / "absent.toml"))
    assert message in str(e.value)


@pytest.mark.parametrize("text, key", [
    ("[journal]\nmax_age_days = 1000000\n", "journal.max_age_days"),
    ("[validator]\ninterval_days = 1e306\n", "validator.interval_days"),
    ("[validator]\ninterval_days = 3e6\n", "validator.interval_days"),
    ("poll_interval_seconds = 1e10\n", "poll_interval_seconds"),
    ("poll_interval_seconds = 1e-9\n", "poll_interval_seconds"),
    ("state_dir = \"/tmp/x\\u0000y\"\n", "state_dir"),
    ("listen = \"127.0.0.1:1_9795\"\n", "listen"),
    ("listen = \"127.0.0.1:\u0669\u0667\u0666\u0664\"\n", "listen"),
])
def test_the_agent_exits_2_at_start_for_each_value_out_of_range(tmp_path: Path, capsys, text: str, key: str) -> None:
    from nodewarden.cli import main
    p = write(tmp_path, text)
    assert main(["agent", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"agent.toml: {key}: " in err


def test_inf_poll_interval_flag_exits_2(tmp_path: Path, capsys) -> None:
    from nodewarden.cli import main
    assert main(["agent", "--poll-interval", "inf", "--state-dir", str(tmp_path / "s"),
                 "--config", str(write(tmp_path, ""))]) == 2
    assert "--poll-interval: expected a finite number" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_every_numeric_key_has_one_range_and_the_limits_are_accepted(tmp_path: Path) -> None:
    numeric = {k for k, check in cf.TOP.items() if k in cf.RANGE_BY_KEY}
    numeric |= {f"{t}.{k}" for t, keys in cf.TABLES.items() for k in keys if f"{t}.{k}" in cf.RANGE_BY_KEY}
    assert numeric == set(cf.RANGE_BY_KEY)
    for r in cf.RANGES:
        for v in (r.min, r.max):
            table, _, key = r.key.rpartition(".")
            value = int(v) if r.type is int else float(v)
            text = f"[{table}]\n{key} = {value!r}\n" if table else f"{key} = {value!r}\n"
            cf.load(write(tmp_path, text))  # no error at either end


def test_the_largest_values_keep_the_consumers_finite(tmp_path: Path) -> None:
    """What the old checks let through broke these: a date overflow in pruning, a schedule in
    the year 10**300. At the range's ends they compute."""
    import datetime as dt
    from nodewarden.agent import schedule as sc
    from nodewarden.agent import state as st
    top = cf.RANGE_BY_KEY
    store = st.StateStore(tmp_path, max_age_days=top["journal.max_age_days"].max)
    assert store.prune_journal() == []
    interval = top["validator.interval_days"].max * 86400
    off = sc.jitter_offset("gpu-017", top["validator.jitter_hours"].max * 3600, interval)
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc).timestamp()
    due = sc.next_due(None, now, interval, off)
    assert now <= due <= now + interval


def test_the_example_lists_the_ranges_the_checks_use() -> None:
    """deploy/config/nodewarden-agent.toml carries the ranges table, generated from RANGES."""
    text = EXAMPLE.read_text()
    block = "\n".join("#" + line[3:] for line in cf.ranges_doc().splitlines())
    assert block in text, "regenerate the ranges block: python3 -m nodewarden.agent.config"


def test_the_kubernetes_table_is_checked_and_names_the_key() -> None:
    cfg = cf.parse({"kubernetes": {"node_condition": True, "node_name": "gpu-node-001", "heartbeat_seconds": 30}},
                   "agent.toml")
    assert cfg.kubernetes.node_condition and cfg.kubernetes.heartbeat_seconds == 30.0
    assert cf.node_name(cfg, {}) == "gpu-node-001"
    for table, msg in (({"node_condition": "yes"}, "kubernetes.node_condition: expected true or false"),
                       ({"heartbeat_seconds": 0}, "kubernetes.heartbeat_seconds: expected a number from 1"),
                       ({"request_timeout_seconds": 301}, "kubernetes.request_timeout_seconds: expected a number"),
                       ({"node": "x"}, "kubernetes.node: unknown key")):
        with pytest.raises(cf.ConfigError, match=f"agent.toml: {msg}"):
            cf.parse({"kubernetes": table}, "agent.toml")


def test_the_node_name_defaults_to_node_name_and_must_be_a_node_name() -> None:
    cfg = cf.parse({"kubernetes": {"node_condition": True}}, "agent.toml")
    assert cf.node_name(cfg, {"NODE_NAME": "gpu-7.rack-2"}) == "gpu-7.rack-2"
    with pytest.raises(cf.ConfigError, match="kubernetes.node_name: not set, and NODE_NAME is empty"):
        cf.node_name(cfg, {})
    with pytest.raises(cf.ConfigError, match="'GPU_7' is not a Kubernetes node name"):
        cf.node_name(cfg, {"NODE_NAME": "GPU_7"})

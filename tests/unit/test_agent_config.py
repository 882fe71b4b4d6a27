"""The agent's configuration: the shipped example loads (and states the defaults), flags win over
the file, and every kind of mistake stops the agent at start with exit 2 and the key named."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert (cfg.flash_cut_max_seconds, cfg.journal_max_bytes, cfg.journal_max_age_days) == (30, 1 << 20, 30)
    assert cfg.validator == cf.ValidatorConfig(False, 14, 0, ("--quick", "--profile", "h100_sxm5_80gb"), 600)


@pytest.mark.parametrize("text, message", [
    ("[journal]\nmax_bytes = \"256M\"\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = 1.5\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = true\n", "agent.toml: journal.max_bytes: expected an integer"),
    ("[journal]\nmax_bytes = 0\n", "agent.toml: journal.max_bytes: expected an integer >= 1, got 0"),
    ("[journal]\nmax_age_days = -1\n", "agent.toml: journal.max_age_days: expected a number > 0"),
    ("[journal]\nmax_size = 1\n", "agent.toml: journal.max_size: unknown key"),
    ("poll_interval_seconds = -10\n", "agent.toml: poll_interval_seconds: expected a number > 0, got -10"),
    ("poll_interval_seconds = 0\n", "agent.toml: poll_interval_seconds: expected a number > 0"),
    ("poll_interval_seconds = nan\n", "agent.toml: poll_interval_seconds: expected a finite number"),
    ("collector_timeout_seconds = \"5s\"\n", "agent.toml: collector_timeout_seconds: expected a number"),
    ("poll_interval = 10\n", "agent.toml: poll_interval: unknown key"),
    ("listen = \"localhost\"\n", "agent.toml: listen: expected HOST:PORT"),
    ("listen = 9764\n", "agent.toml: listen: expected a non-empty string"),
    ("log_level = \"verbose\"\n", "agent.toml: log_level: expected one of debug, info, warning, error"),
    ("hostname = \"\"\n", "agent.toml: hostname: expected a non-empty string"),
    ("[collectors]\nnvml = \"yes\"\n", "agent.toml: collectors.nvml: expected true or false"),
    ("[collectors]\ndcgm = true\n", "agent.toml: collectors.dcgm: unknown key"),
    ("collectors = true\n", "agent.toml: collectors: expected a table ([collectors])"),
    ("[flash_cut]\nmax_seconds = 0\n", "agent.toml: flash_cut.max_seconds: expected a number > 0"),
    ("[validator]\ninterval_days = -7\n", "agent.toml: validator.interval_days: expected a number > 0"),
    ("[validator]\njitter_hours = -1\n", "agent.toml: validator.jitter_hours: expected a number >= 0"),
    ("[validator]\nargs = \"--quick\"\n", "agent.toml: validator.args: expected a list of strings"),
    ("[validator]\nargs = [\"--checks\", 3]\n", "agent.toml: validator.args: expected a list of strings"),
    ("[validator]\nenabled = 1\n", "agent.toml: validator.enabled: expected true or false"),
    ("[validator]\ntimeout_seconds = 0\n", "agent.toml: validator.timeout_seconds: expected a number > 0"),
    ("[weekly]\nenabled = true\n", "agent.toml: weekly: unknown key"),
    ("listen = \n", "agent.toml: not valid TOML"),
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

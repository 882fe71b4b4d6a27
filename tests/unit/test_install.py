"""``nodewarden install`` and ``nodewarden agent --print-config``: the units as installed pass
``systemd-analyze verify`` and keep the agent's exposure at 2.0 or below, an existing config is
never overwritten, ``--dry-run`` writes nothing, the printed config is the shipped one and loads
as the agent's, the repository's ``deploy/`` copies are the templates' output, and the locations
the agent's sandbox cannot run from are refused with the reason.

``systemd-analyze`` (Debian's systemd package, which tests/run.sh installs) is needed for the
verify and exposure tests: they are skipped without it, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import install
from nodewarden.agent import config as cf

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
MAX_EXPOSURE = 2.0


@functools.cache
def source() -> Path:
    """Where the installs under test run nodewarden from: this checkout, or, when the checkout
    is under /tmp or /var/tmp (which ``install`` rightly refuses: the units' PrivateTmp= hides
    them), a copy of its package in the home directory (a supported location), removed at exit."""
    if install.under(str(REPO), install.TMP_ROOTS) is None:
        return REPO
    dst = Path(tempfile.mkdtemp(prefix="nodewarden-install-test-", dir=Path.home()))
    atexit.register(shutil.rmtree, dst, True)
    shutil.copytree(REPO / "nodewarden", dst / "nodewarden", ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(dst, 0o755)
    return dst


def systemd_analyze() -> str:
    return envneeds.command("systemd-analyze", "verifies the units written (apt-get install systemd)")


def nodewarden(*args: str, env: dict[str, str] | None = None, argv0: list[str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m nodewarden ARGS`` in a child, the repository on PYTHONPATH (carried into the
    units as a source checkout's would be)."""
    e = {**os.environ, "PYTHONPATH": str(source()), **(env or {})}
    return subprocess.run([*(argv0 or [sys.executable, "-m", "nodewarden"]), *args], capture_output=True,
                          text=True, env=e, cwd=cwd or source(), timeout=120)


def exposure(analyze: str, unit: Path) -> float:
    p = subprocess.run([analyze, "security", "--offline=true", str(unit)], capture_output=True, text=True,
                       timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", p.stdout)
    assert m, p.stdout + p.stderr
    return float(m.group(1))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One install into a temporary unit directory and config directory."""
    root = tmp_path_factory.mktemp("install")
    units, conf = root / "units", root / "etc-nodewarden"
    p = nodewarden("install", "--unit-dir", str(units), "--config-dir", str(conf))
    assert p.returncode == 0, p.stdout + p.stderr
    return units, conf, p


# ---- install -----------------------------------------------------------------------------------

def test_install_writes_the_units_for_this_interpreter_and_the_config(installed) -> None:
    units, conf, p = installed
    assert sorted(f.name for f in units.iterdir()) == sorted(install.UNITS)
    agent = (units / install.AGENT_UNIT).read_text()
    command = f"{os.path.abspath(sys.executable)} -m nodewarden"
    # the config written is the one the agent reads: --config names it when not /etc/nodewarden's
    assert f"\nExecStart={command} agent --config {conf / 'agent.toml'} --state-dir /var/lib/nodewarden " \
           "--no-validator\n" in agent
    assert f"\nExecStart={command} validate --no-progress" in (units / "nodewarden-validate.service").read_text()
    assert "@NODEWARDEN@" not in agent and f"Environment=PYTHONPATH={source()}\n" in agent
    assert (conf / "agent.toml").read_text() == install.example_config()
    for f in [*units.iterdir(), conf / "agent.toml"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f  # the dynamic user reads the config
    assert p.stdout.splitlines() == [*(f"wrote {units / u}" for u in install.UNITS), f"wrote {conf / 'agent.toml'}"]


def test_a_home_install_shows_the_agent_only_its_own_directories(installed) -> None:
    """Here or in CI the interpreter may live under /root (pyenv) or not: the agent unit hides
    the homes entirely, or shows just the interpreter's directories read-only."""
    units, _, _ = installed
    agent = (units / install.AGENT_UNIT).read_text()
    prefix = os.path.realpath(sys.base_prefix)
    if install.under(prefix, install.HOME_ROOTS):
        binds = re.search(r"^BindReadOnlyPaths=(.*)$", agent, re.M)
        assert "\nProtectHome=tmpfs\n" in agent and "\nProtectHome=yes\n" not in agent
        assert binds and any(install.under(prefix, [b]) for b in binds.group(1).split())
        assert all(install.under(b, install.HOME_ROOTS) and b not in install.HOME_ROOTS for b in binds.group(1).split())
    else:
        assert "\nProtectHome=yes\n" in agent and "BindReadOnlyPaths=" not in agent


def test_installed_units_verify(installed) -> None:
    analyze = systemd_analyze()
    units, _, _ = installed
    p = subprocess.run([analyze, "verify", "--man=no", *(str(units / u) for u in install.UNITS)],
                       capture_output=True, text=True, timeout=60)
    ours = [line for line in (p.stdout + p.stderr).splitlines() if "nodewarden" in line]
    assert p.returncode == 0 and not ours, p.stdout + p.stderr


def test_installed_agent_exposure(installed) -> None:
    units, _, _ = installed
    assert exposure(systemd_analyze(), units / install.AGENT_UNIT) <= MAX_EXPOSURE


@pytest.mark.parametrize("home", [[], ["/root/.pyenv/versions/3.11.7", "/home/ops/venv"]])
def test_agent_exposure_with_and_without_home_binds(tmp_path: Path, home: list[str]) -> None:
    analyze = systemd_analyze()
    unit = tmp_path / install.AGENT_UNIT
    unit.write_text(install.render(install.AGENT_UNIT, ("/opt/nodewarden/bin/nodewarden",), home))
    assert exposure(analyze, unit) <= MAX_EXPOSURE


def test_an_existing_config_is_kept_and_the_units_replaced(tmp_path: Path) -> None:
    units, conf = tmp_path / "units", tmp_path / "conf"
    conf.mkdir()
    mine = 'listen = "0.0.0.0:9764"\n[http]\nweb_config_file = "/etc/nodewarden/web.yml"\n'
    (conf / "agent.toml").write_text(mine)
    units.mkdir()
    (units / install.AGENT_UNIT).write_text("[Service]\nExecStart=/old/nodewarden agent\n")
    p = nodewarden("install", "--unit-dir", str(units), "--config-dir", str(conf))
    assert p.returncode == 0, p.stderr
    assert (conf / "agent.toml").read_text() == mine
    assert f"kept {conf / 'agent.toml'} (exists)" in p.stdout.splitlines()
    assert "/old/nodewarden" not in (units / install.AGENT_UNIT).read_text()
    assert [f.name for f in units.iterdir() if f.name.startswith(".")] == []  # no temporary file left


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    units, conf = tmp_path / "units", tmp_path / "conf"
    p = nodewarden("install", "--unit-dir", str(units), "--config-dir", str(conf), "--dry-run", "--enable")
    assert p.returncode == 0, p.stderr
    assert list(tmp_path.iterdir()) == []
    for u in install.UNITS:
        assert f"# would write {units / u}\n" in p.stdout
    assert f"# would write {conf / 'agent.toml'}\n{install.example_config()}" in p.stdout
    assert f"ExecStart={os.path.abspath(sys.executable)} -m nodewarden agent " in p.stdout
    assert p.stdout.rstrip().endswith("# would run: systemctl daemon-reload\n# would run: systemctl enable --now "
                                      "nodewarden-agent.service nodewarden-validate.timer")


def fake_systemctl(tmp_path: Path, rc: int) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "systemctl"
    tool.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/systemctl.log"\necho "Failed to connect" >&2\nexit {rc}\n')
    tool.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ.get('PATH', os.defpath)}"}


def test_enable_reloads_and_enables(tmp_path: Path) -> None:
    env = fake_systemctl(tmp_path, 0)
    p = nodewarden("install", "--unit-dir", str(tmp_path / "u"), "--config-dir", str(tmp_path / "c"), "--enable",
                   env=env)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "systemctl.log").read_text().splitlines() == [
        "daemon-reload", "enable --now nodewarden-agent.service nodewarden-validate.timer"]


def test_a_failing_systemctl_is_incomplete(tmp_path: Path) -> None:
    p = nodewarden("install", "--unit-dir", str(tmp_path / "u"), "--config-dir", str(tmp_path / "c"), "--enable",
                   env=fake_systemctl(tmp_path, 1))
    assert p.returncode == 3
    assert "systemctl daemon-reload exited 1: Failed to connect" in p.stderr
    assert (tmp_path / "u" / install.AGENT_UNIT).exists()  # written before: rerun --enable when systemd runs


def test_without_enable_nothing_runs(tmp_path: Path) -> None:
    p = nodewarden("install", "--unit-dir", str(tmp_path / "u"), "--config-dir", str(tmp_path / "c"),
                   env=fake_systemctl(tmp_path, 0))
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "systemctl.log").exists()


def test_an_unwritable_unit_dir_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = nodewarden("install", "--unit-dir", str(blocker / "units"), "--config-dir", str(tmp_path / "c"))
    assert p.returncode == 2
    assert p.stderr.startswith(f"nodewarden: {blocker / 'units' / install.UNITS[0]}: cannot write: ")
    assert not (tmp_path / "c").exists()


def test_the_console_script_is_named_by_its_path(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "nodewarden"
    if not script.is_file():
        pytest.skip(f"no console script beside {sys.executable}")
    p = nodewarden("install", "--unit-dir", str(tmp_path), "--config-dir", str(tmp_path), "--dry-run",
                   argv0=[str(script)])
    assert p.returncode == 0, p.stderr
    assert f"\nExecStart={os.path.realpath(script)} agent --config {tmp_path / 'agent.toml'} --state-dir" in p.stdout


# ---- where nodewarden may run from -------------------------------------------------------------

def test_the_default_config_dir_needs_no_config_flag() -> None:
    text = install.render(install.AGENT_UNIT, ("/usr/local/bin/nodewarden",))
    assert install.with_config(install.AGENT_UNIT, text, Path("/etc/nodewarden")) == text
    assert install.with_config(install.AGENT_UNIT, text, Path("/etc/nodewarden/")) == text
    other = install.with_config(install.AGENT_UNIT, text, Path("/srv/nw"))
    assert "\nExecStart=/usr/local/bin/nodewarden agent --config /srv/nw/agent.toml --state-dir " in other
    assert other.count("--config") == 1 and other.replace(" --config /srv/nw/agent.toml", "") == text
    validate = install.render("nodewarden-validate.service", ("/usr/local/bin/nodewarden",))
    assert install.with_config("nodewarden-validate.service", validate, Path("/srv/nw")) == validate


def test_nodewarden_command() -> None:
    py = "/opt/venv/bin/python3"
    assert install.nodewarden_command("/opt/venv/lib/python3.11/site-packages/nodewarden/__main__.py", py,
                                      None) == (py, "-m", "nodewarden")
    assert install.nodewarden_command(__file__, py, "/usr/bin/nodewarden") == (os.path.realpath(__file__),)
    assert install.nodewarden_command("nodewarden", py, "/usr/local/bin/../bin/nodewarden") == (
        "/usr/local/bin/nodewarden",)
    with pytest.raises(install.InstallError, match="cannot tell where"):
        install.nodewarden_command("nodewarden", py, None)


@pytest.mark.parametrize(("paths", "binds"), [
    (["/usr/local/bin/nodewarden", "/usr/lib/python3.11", "/usr/local/lib/python3.11/dist-packages"], []),
    (["/opt/nodewarden/bin/python3", "/opt/nodewarden", "/usr"], []),
    (["/srv/venvs/nw/bin/nodewarden", "/srv/venvs/nw"], []),
    (["/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages", "/usr/lib"],
     ["/root/.pyenv/versions/3.11.7"]),
    (["/home/ops/venv/bin/nodewarden", "/home/ops/venv", "/home/ops/.pyenv/versions/3.12.1", "/opt/x"],
     ["/home/ops/.pyenv/versions/3.12.1", "/home/ops/venv"]),
    (["/home2/venv", "/rooted/venv"], []),  # not hidden by ProtectHome=
])
def test_bind_paths(paths: list[str], binds: list[str]) -> None:
    assert install.bind_paths(paths) == binds


@pytest.mark.parametrize("path", ["/tmp/venv", "/var/tmp/nw/lib/python3.11/site-packages"])
def test_temporary_directories_are_refused(path: str) -> None:
    with pytest.raises(install.InstallError, match=f"^{re.escape(path)}: nodewarden runs from a temporary directory"):
        install.bind_paths(["/usr", path])


@pytest.mark.parametrize("path", ["/opt/my venv/bin/nodewarden", "/opt/100%/nodewarden", "/opt/$HOME/nw", "nw"])
def test_paths_a_unit_cannot_hold_are_refused(path: str) -> None:
    with pytest.raises(install.InstallError, match="a systemd unit cannot name this path"):
        install.render(install.AGENT_UNIT, (path,))


def test_render() -> None:
    plain = install.render(install.AGENT_UNIT, ("/usr/local/bin/nodewarden",))
    assert plain == (DEPLOY / "systemd" / install.AGENT_UNIT).read_text()
    home = install.render(install.AGENT_UNIT, ("/root/venv/bin/nodewarden",), ["/root/.pyenv/versions/3.11.7",
                                                                             "/root/venv"], "/root/src:/opt/lib")
    assert "\nProtectHome=yes\n" not in home
    assert "\nProtectHome=tmpfs\nBindReadOnlyPaths=/root/.pyenv/versions/3.11.7 /root/venv\n" in home
    assert "\nEnvironment=PYTHONPATH=/root/src:/opt/lib\nExecStart=/root/venv/bin/nodewarden agent " in home
    validate = install.render("nodewarden-validate.service", ("/x/nodewarden",), ["/root/x"], "/opt/lib")
    assert "\nProtectHome=read-only\n" in validate and "BindReadOnlyPaths" not in validate  # root reads homes
    assert "\nEnvironment=PYTHONPATH=/opt/lib\nExecStart=/x/nodewarden validate " in validate
    assert "Environment" not in install.render("nodewarden-validate.timer", ("/x/nodewarden",), [], "/opt/lib")


def test_python_path() -> None:
    assert install.python_path("src::/opt/lib/", "/srv/nw") == "/srv/nw/src:/opt/lib"
    assert install.python_path("", "/") is None and install.python_path(None, "/") is None


def test_a_directory_the_dynamic_user_cannot_read_is_found(tmp_path: Path) -> None:
    private = tmp_path / "private"
    (private / "lib").mkdir(parents=True)
    private.chmod(0o700)
    # the parents above the bound directory are the tmpfs's (0755), not looked at
    assert install.unreadable([str(private / "lib")], [str(private)]) == f"{private} (mode 0700)"
    assert install.unreadable([str(private / "lib")], [str(private / "lib")]) is None
    private.chmod(0o755)
    assert install.unreadable([str(private / "lib")], [str(private)]) is None
    (private / "lib").chmod(0o750)
    assert install.unreadable([str(private / "lib")], [str(private)]) == f"{private / 'lib'} (mode 0750)"


def test_an_interpreter_that_cannot_import_the_agent_is_refused(tmp_path: Path) -> None:
    """As after pip install --user: the service's interpreter finds no nodewarden (here: one
    started without site-packages)."""
    bare = tmp_path / "python3"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    with pytest.raises(install.InstallError, match=r"cannot import the agent: ModuleNotFoundError: No module named "
                                                   r"'nodewarden'\. Install nodewarden into"):
        install.probe(str(bare))


def test_probe_reports_where_the_agent_runs_from() -> None:
    runs = install.probe(sys.executable, str(source()))
    assert runs.package == str(source())
    assert str(source()) in runs.path and sys.prefix in runs.prefixes


# ---- the shipped files -------------------------------------------------------------------------

def test_deploy_copies_are_the_templates_output() -> None:
    for rel, text in install.examples().items():
        assert (DEPLOY / rel).read_text() == text, (
            f"deploy/{rel} is written from nodewarden/deploy/: edit that, then python3 -m nodewarden.install deploy")


def test_print_config_is_the_shipped_example_and_loads(tmp_path: Path) -> None:
    p = nodewarden("agent", "--print-config", cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == install.example_config() == (DEPLOY / "config" / "nodewarden-agent.toml").read_text()
    f = tmp_path / "agent.toml"
    f.write_text(p.stdout)
    assert dataclasses.replace(cf.load(f), source=None) == cf.AgentConfig()


def test_agent_help_names_print_config() -> None:
    p = nodewarden("agent", "--help")
    assert p.returncode == 0
    assert "--print-config" in p.stdout and "deploy/config" not in p.stdout

"""``nodewarden install``: the systemd units and the example agent configuration, for the
nodewarden this interpreter runs.

The units are the package's templates (``nodewarden/deploy/systemd/*.in``) with ``@NODEWARDEN@``
replaced by the command that starts this nodewarden: the resolved path of the ``nodewarden``
script that runs (``sys.argv[0]``, else the ``nodewarden`` on ``PATH``), or
``<sys.executable> -m nodewarden`` when run as ``python -m nodewarden``. They go to
``--unit-dir`` (``/etc/systemd/system``), replacing what is there; the example configuration
(``nodewarden/deploy/agent.toml``, what ``nodewarden agent --print-config`` prints) goes to
``<--config-dir>/agent.toml`` (``/etc/nodewarden``) only when no such file exists: an existing
configuration is never touched. Nothing is enabled unless ``--enable`` (then ``systemctl
daemon-reload`` and ``systemctl enable --now`` of the agent and the validation timer).

Where nodewarden may live. The agent's unit runs as a dynamic user in a sandbox
(``ProtectSystem=strict``, ``ProtectHome=yes``, ``PrivateTmp=yes``), so before writing anything
the interpreter is started as systemd will start it (``python -s`` from ``/`` with ``PATH``
only: no user site-packages, no other ``PYTHON*`` variable) and must import the agent; the
directories it runs from are then judged. A ``PYTHONPATH`` set for ``nodewarden install`` (a
source checkout) is the one variable carried over: into the probe and into both services
(``Environment=PYTHONPATH=...``), entries made absolute.

- ``/usr``, ``/usr/local``, ``/opt/...``, a virtual environment anywhere else outside the
  places below: the units as shipped.
- Under ``/home``, ``/root`` or ``/run/user`` (hidden by ``ProtectHome=yes``; a pyenv or conda
  interpreter in root's home is common on GPU nodes): the home protection is relaxed precisely,
  not refused: ``ProtectHome=tmpfs`` (every home directory empty, read-only) and
  ``BindReadOnlyPaths=`` for just the interpreter's prefixes, the package and the
  ``sys.path`` directories under those roots, read-only. The rest of every home stays hidden,
  the exposure score (``systemd-analyze security``) does not change, and the dynamic user,
  which could not enter a 0700 ``/root``, reaches those directories through the tmpfs (0755).
- Under ``/tmp`` or ``/var/tmp``: refused (``PrivateTmp=`` hides them; they are cleaned).
- Installed with ``pip install --user`` (the dynamic user has no such site-packages) or
  importable only from the current directory: refused, since the service's interpreter cannot
  import it (the error says so).
- A directory the dynamic user cannot read (mode without ``o+rx``, e.g. a umask 077 install):
  refused, naming it.

Errors: :class:`InstallError` (the command line exits 2) for all of the above, a path a unit
cannot hold (quotes, ``%``, ``$``, spaces) and a file that cannot be written;
:class:`SystemctlError` (exit 3) when ``systemctl`` fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Iterable, Sequence

UNITS = ("nodewarden-agent.service", "nodewarden-validate.service", "nodewarden-validate.timer")
ENABLE = ("nodewarden-agent.service", "nodewarden-validate.timer")
AGENT_UNIT = "nodewarden-agent.service"
PLACEHOLDER = "@NODEWARDEN@"
DEFAULT_UNIT_DIR = "/etc/systemd/system"
DEFAULT_CONFIG_DIR = "/etc/nodewarden"
CONFIG_NAME = "agent.toml"  # nodewarden.agent.config.DEFAULT_PATH's file name
# ProtectHome= hides these; PrivateTmp= these (systemd.exec(5)).
HOME_ROOTS = ("/home", "/root", "/run/user")
TMP_ROOTS = ("/tmp", "/var/tmp")
# The command the repository's deploy/ copies are written for (README's system-wide install).
EXAMPLE_COMMAND = ("/usr/local/bin/nodewarden",)
# Characters a unit file takes in a path without quoting or escaping (no %, $, quotes, spaces).
_UNIT_WORD = re.compile(r"[A-Za-z0-9/._+@:,=~-]+")


class InstallError(Exception):
    """Nothing was written: a location the agent's sandbox cannot run from, or a file that
    cannot be written (the message names the path)."""


class SystemctlError(Exception):
    """``systemctl`` failed (its command and output in the message); the files are written."""


# ---- package data ------------------------------------------------------------------------------

def template(unit: str) -> str:
    """The template of ``unit`` (one of :data:`UNITS`), with :data:`PLACEHOLDER`."""
    return (files("nodewarden") / "deploy" / "systemd" / f"{unit}.in").read_text(encoding="utf-8")


def example_config() -> str:
    """The commented default agent configuration (TOML), every key at its default."""
    return (files("nodewarden") / "deploy" / "agent.toml").read_text(encoding="utf-8")


# ---- what to write --------------------------------------------------------------------------------

def nodewarden_command(argv0: str, executable: str, which: str | None) -> tuple[str, ...]:
    """The words that start this nodewarden: ``(executable, "-m", "nodewarden")`` when ``argv0``
    is the package's ``__main__.py`` (``python -m nodewarden``); else the resolved absolute path
    of ``argv0`` when it names a file (a console script), else of ``which`` (``nodewarden`` on
    PATH). Raises InstallError when none is known."""
    if Path(argv0).name == "__main__.py" or argv0 == "-m":
        return (os.path.abspath(executable), "-m", "nodewarden")  # a venv's python: not resolved
    if os.sep in argv0 and os.path.isfile(argv0):
        return (os.path.realpath(argv0),)
    if which:
        return (os.path.realpath(which),)
    raise InstallError(f"cannot tell where the nodewarden being run is installed (argv[0] {argv0!r}, "
                       "none on PATH): run it by its path or as python3 -m nodewarden")


def unit_word(path: str) -> str:
    """``path`` as a unit file word; InstallError for characters that would need quoting."""
    if not path.startswith("/") or not _UNIT_WORD.fullmatch(path):
        raise InstallError(f"{path!r}: a systemd unit cannot name this path as it is (absolute, and only "
                           "letters, digits and / . _ + @ : , = ~ -); install nodewarden under a plainer path")
    return path


def under(path: str, roots: Iterable[str]) -> str | None:
    """The root of ``roots`` that ``path`` is at or below, else None."""
    return next((r for r in roots if path == r or path.startswith(r.rstrip("/") + "/")), None)


def bind_paths(paths: Iterable[str]) -> list[str]:
    """The paths of ``paths`` under :data:`HOME_ROOTS`, without those inside another one, sorted:
    what ``BindReadOnlyPaths=`` must show the agent. Raises InstallError for a path under
    :data:`TMP_ROOTS`."""
    paths = sorted(set(paths))
    for p in paths:
        if under(p, TMP_ROOTS):
            raise InstallError(f"{p}: nodewarden runs from a temporary directory, which the units' "
                               "PrivateTmp=yes hides (and the system cleans); install it elsewhere "
                               "(/usr/local, /opt/nodewarden)")
    home = [p for p in paths if under(p, HOME_ROOTS)]
    return [p for p in home if not any(q != p and under(p, [q]) for q in home)]


def python_path(value: str | None, cwd: str) -> str | None:
    """``PYTHONPATH`` with its entries made absolute (relative to ``cwd``), empty ones dropped;
    None when unset or empty."""
    entries = [os.path.normpath(os.path.join(cwd, e)) for e in (value or "").split(os.pathsep) if e]
    return os.pathsep.join(entries) or None


def render(unit: str, command: Sequence[str], home: Sequence[str] = (), pythonpath: str | None = None) -> str:
    """``unit``'s text for ``command`` (words, see :func:`nodewarden_command`); with ``home``
    (from :func:`bind_paths`), the agent's ``ProtectHome=yes`` becomes ``ProtectHome=tmpfs``
    plus ``BindReadOnlyPaths=`` of those paths; with ``pythonpath`` (absolute entries), each
    service gets ``Environment=PYTHONPATH=`` before its first ``ExecStart=``. Raises
    InstallError for an unquotable path."""
    text = template(unit).replace(PLACEHOLDER, " ".join([unit_word(command[0]), *command[1:]]))
    if pythonpath and unit.endswith(".service"):
        words = [unit_word(e) for e in pythonpath.split(os.pathsep)]
        head, sep, tail = text.partition("\nExecStart=")
        if not sep:
            raise ValueError(f"template {unit}.in: no ExecStart= line")
        text = f"{head}\nEnvironment=PYTHONPATH={os.pathsep.join(words)}{sep}{tail}"
    if home and unit == AGENT_UNIT:
        line = "ProtectHome=yes\n"
        if text.count(line) != 1:
            raise ValueError(f"template {unit}.in: expected one {line.strip()!r} line")
        text = text.replace(line, "# nodewarden runs from a home directory: only these paths of the homes, read-only.\n"
                                  "ProtectHome=tmpfs\n"
                                  f"BindReadOnlyPaths={' '.join(unit_word(p) for p in home)}\n")
    return text


def examples() -> dict[str, str]:
    """The repository's ``deploy/`` copies, by path below ``deploy/``: the units rendered for
    :data:`EXAMPLE_COMMAND` and the example configuration."""
    out = {f"systemd/{u}": render(u, EXAMPLE_COMMAND) for u in UNITS}
    out["config/nodewarden-agent.toml"] = example_config()
    return out


# ---- where this nodewarden runs from ---------------------------------------------------------------

# Run by the interpreter as systemd runs it: imports what the agent imports at start and says
# where that came from.
_PROBE = """\
import json, os, sys
import nodewarden, nodewarden.cli, nodewarden.agent.daemon
print(json.dumps({"package": os.path.dirname(os.path.dirname(os.path.abspath(nodewarden.__file__))),
                  "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],
                  "path": [p for p in sys.path if p and os.path.exists(p)]}))
"""


@dataclasses.dataclass(frozen=True)
class RunsFrom:
    """Where the agent's interpreter reads its code: ``package`` (the directory holding the
    ``nodewarden`` package), ``prefixes`` (sys.prefix, base and exec prefixes), ``path``
    (existing sys.path entries)."""
    package: str
    prefixes: tuple[str, ...]
    path: tuple[str, ...]

    def paths(self, command: Sequence[str]) -> set[str]:
        """Every directory or file the agent must read to start, both as named and resolved."""
        named = [command[0], self.package, *self.prefixes, *self.path]
        return {os.path.abspath(p) for p in named} | {os.path.realpath(p) for p in named}


def probe(executable: str = sys.executable, pythonpath: str | None = None, timeout: float = 60) -> RunsFrom:
    """Start ``executable`` as the service will (``-s``, from ``/``, with ``PATH`` and
    ``pythonpath`` only) and import the agent. Raises InstallError when it cannot (e.g.
    nodewarden installed with ``pip --user``)."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        r = subprocess.run([executable, "-s", "-c", _PROBE], cwd="/", env=env, capture_output=True,
                           text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallError(f"{executable}: cannot run it: {e}") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        raise InstallError(f"{executable}, started as the service starts it (no user site-packages, from /, "
                           f"PYTHONPATH={pythonpath or ''}), cannot import the agent: {last}. Install nodewarden "
                           "into this interpreter's or a virtual environment's site-packages (not with pip "
                           "--user), or set PYTHONPATH to the directories it needs")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return RunsFrom(package=d["package"], prefixes=tuple(d["prefixes"]), path=tuple(d["path"]))


def unreadable(paths: Iterable[str], home: Sequence[str]) -> str | None:
    """The first directory or file the agent's dynamic user (an "other" user) cannot reach among
    ``paths`` and their parents, with its mode; parents above a ``home`` bind path are the
    tmpfs's and not looked at. None when all are readable."""
    for p in sorted(set(paths)):
        bound = next((h for h in home if under(p, [h])), None)
        chain = [Path(p), *Path(p).parents]
        for q in reversed(chain):
            if bound and not under(str(q), [bound]):
                continue
            try:
                st = q.stat()
            except OSError:
                continue  # a sys.path entry that vanished; the probe read what it needed
            need = 0o005 if q.is_dir() else 0o004
            if st.st_mode & need != need:
                return f"{q} (mode {st.st_mode & 0o7777:04o})"
    return None


def home_binds(command: Sequence[str], runs: RunsFrom) -> list[str]:
    """:func:`bind_paths` of what the agent reads, after checking that its user can read it.
    Raises InstallError."""
    paths = runs.paths(command)
    home = bind_paths(paths)
    bad = unreadable(paths, home)
    if bad:
        raise InstallError(f"{bad}: the agent runs as a dynamic user (DynamicUser=yes), which cannot read "
                           "this; make it readable (chmod o+rX) or install nodewarden where it is")
    return home


# ---- writing ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Plan:
    """What ``install`` does: ``units`` (path, text) to write; ``config`` (path, text) to write
    when absent; ``commands`` to run."""
    units: tuple[tuple[Path, str], ...]
    config: tuple[Path, str]
    commands: tuple[tuple[str, ...], ...]


def with_config(unit: str, text: str, config_dir: Path) -> str:
    """The agent unit's ``ExecStart=`` given ``--config <config_dir>/agent.toml`` when that is not
    where the agent looks by default (``/etc/nodewarden/agent.toml``), so the config written is
    the one read; other units and the default directory: ``text`` as it is. Raises InstallError
    for an unquotable path."""
    if unit != AGENT_UNIT or os.path.normpath(str(config_dir)) == DEFAULT_CONFIG_DIR:
        return text
    start = "\nExecStart="
    i = text.index(start) + len(start)
    line_end = text.index("\n", i)
    line = text[i:line_end]
    at = line.index(" agent ") + len(" agent")
    path = unit_word(os.path.abspath(os.path.join(str(config_dir), CONFIG_NAME)))
    return text[:i] + line[:at] + f" --config {path}" + line[at:] + text[line_end:]


def plan(command: Sequence[str], home: Sequence[str], unit_dir: Path, config_dir: Path, enable: bool,
         pythonpath: str | None = None) -> Plan:
    """The files and commands of an install (pure; InstallError for an unquotable path)."""
    units = tuple((unit_dir / u, with_config(u, render(u, command, home, pythonpath), config_dir)) for u in UNITS)
    cmds = ((("systemctl", "daemon-reload"), ("systemctl", "enable", "--now", *ENABLE)) if enable else ())
    return Plan(units=units, config=(config_dir / CONFIG_NAME, example_config()), commands=cmds)


def _write(path: Path, text: str, replace: bool) -> bool:
    """Write ``text`` to ``path`` (mode 0644): atomically replacing it when ``replace``, else only
    when absent. Returns whether it wrote. Raises InstallError naming the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not replace:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return True
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return True
    except OSError as e:
        raise InstallError(f"{path}: cannot write: {e.strerror or e}"
                           + (" (run as root)" if isinstance(e, PermissionError) else "")) from None


def execute(p: Plan, dry_run: bool, out=None) -> None:
    """Carry ``p`` out, reporting each step on ``out`` (stdout); with ``dry_run`` print each
    file's path and text and the commands instead. Raises InstallError, SystemctlError."""
    out = out or sys.stdout
    cfg_path, cfg_text = p.config
    if dry_run:
        for path, text in p.units:
            print(f"# would write {path}\n{text}", file=out)
        if cfg_path.exists():
            print(f"# would keep {cfg_path} (exists)", file=out)
        else:
            print(f"# would write {cfg_path}\n{cfg_text}", file=out)
        for c in p.commands:
            print(f"# would run: {' '.join(c)}", file=out)
        return
    for path, text in p.units:
        _write(path, text, replace=True)
        print(f"wrote {path}", file=out)
    print(f"wrote {cfg_path}" if _write(cfg_path, cfg_text, replace=False) else f"kept {cfg_path} (exists)",
          file=out)
    for c in p.commands:
        if shutil.which(c[0]) is None:
            raise SystemctlError(f"{c[0]} not found: run {' '.join(c)} where systemd runs")
        r = subprocess.run(list(c), capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemctlError(f"{' '.join(c)} exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
        print(f"ran {' '.join(c)}", file=out)


# ---- command line ----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    """``nodewarden install``'s options."""
    p.description = ("Write the systemd units for the nodewarden being run (its absolute path in ExecStart=) "
                     f"and, when absent, {DEFAULT_CONFIG_DIR}/{CONFIG_NAME} (the commented defaults). Refuses, "
                     "with the reason, an install the agent's sandbox cannot run (under /tmp, pip --user); "
                     "one under /home or /root gets only its own directories shown to the agent, read-only.")
    p.add_argument("--unit-dir", default=DEFAULT_UNIT_DIR, metavar="DIR",
                   help=f"where the units go (default {DEFAULT_UNIT_DIR})")
    p.add_argument("--config-dir", default=DEFAULT_CONFIG_DIR, metavar="DIR",
                   help=f"where {CONFIG_NAME} goes when absent (default {DEFAULT_CONFIG_DIR}; "
                        "an existing file is never overwritten)")
    p.add_argument("--enable", action="store_true",
                   help="then systemctl daemon-reload and systemctl enable --now " + " ".join(ENABLE))
    p.add_argument("--dry-run", action="store_true", help="print the files and commands; write and run nothing")


def run(args: argparse.Namespace) -> None:
    """``nodewarden install``. Raises InstallError, SystemctlError."""
    command = nodewarden_command(sys.argv[0], sys.executable, shutil.which("nodewarden"))
    pythonpath = python_path(os.environ.get("PYTHONPATH"), os.getcwd())
    home = home_binds(command, probe(sys.executable, pythonpath))
    execute(plan(command, home, Path(args.unit_dir), Path(args.config_dir), args.enable, pythonpath),
            args.dry_run)


if __name__ == "__main__":  # python3 -m nodewarden.install deploy: the repository's copies, from the templates
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m nodewarden.install DEPLOY_DIR")
    for rel, text in examples().items():
        (Path(sys.argv[1]) / rel).write_text(text, encoding="utf-8")

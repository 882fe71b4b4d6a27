"""The import direction of DESIGN.md ("Layout"), held two ways:

- ``lint-imports`` (import-linter, the [test] extra) checks the contracts of pyproject.toml
  ``[tool.importlinter]`` over every import of the package, those inside functions included;
  each contract is shown to fail on an import that breaks it, in a copy of the package;
- the agent's collectors and the read layer (``nodewarden.sysfs``) never load the validator,
  checked in a fresh interpreter, so that modules other tests imported cannot hide an import.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    """The lint-imports of this Python's environment (installed by the [test] extra)."""
    exe = Path(sys.executable).parent / "lint-imports"
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    assert found, "lint-imports not found: install the [test] extra (pip install -e '.[test]')"
    return found


def _run_lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([_lint_imports(), "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_lint_imports_keeps_every_contract() -> None:
    r = _run_lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    statuses = _statuses(r.stdout)
    assert len(statuses) == 6 and set(statuses.values()) == {"KEPT"}, statuses


# One import per contract that breaks it: (module file, the line appended, contract name, the
# import lint-imports must name).
BREAKS = [
    pytest.param("nodewarden/sysfs/attrs.py", "import nodewarden.validator", "Layers:",
                 "nodewarden.sysfs.attrs -> nodewarden.validator", id="read layer imports the validator"),
    pytest.param("nodewarden/parsing/lines.py", "import nodewarden.sysfs.attrs", "Layers:",
                 "nodewarden.parsing.lines -> nodewarden.sysfs.attrs", id="parsing imports the read layer"),
    pytest.param("nodewarden/collectors/base.py", "import nodewarden.agent.state", "Layers:",
                 "nodewarden.collectors.base -> nodewarden.agent.state", id="a collector imports the agent"),
    pytest.param("nodewarden/analysis/cache.py", "import nodewarden.agent.state", "Layers:",
                 "nodewarden.analysis.cache -> nodewarden.agent.state", id="analysis imports the agent"),
    pytest.param("nodewarden/validator/result.py", "import nodewarden.collectors.base",
                 "Only the agent imports the collectors", "nodewarden.validator.result -> nodewarden.collectors.base",
                 id="the validator imports a collector"),
    pytest.param("nodewarden/cli.py", "import nodewarden.collectors.base",
                 "The command line reaches the collectors only through the agent",
                 "nodewarden.cli -> nodewarden.collectors.base", id="the cli imports a collector"),
    pytest.param("nodewarden/validator/checks/storage.py", "import nodewarden.validator.checks.cpu",
                 "Validator checks never import each other",
                 "nodewarden.validator.checks.storage -> nodewarden.validator.checks.cpu",
                 id="a check imports a check"),
    pytest.param("nodewarden/collectors/base.py", "import nodewarden.collectors.pcie",
                 "Collectors never import each other", "nodewarden.collectors.base -> nodewarden.collectors.pcie",
                 id="collectors import each other"),
    pytest.param("nodewarden/validator/runner.py", "import nodewarden.validator.checks.links",
                 "The validator's runner finds the checks through nodewarden.validator.registry",
                 "nodewarden.validator.runner -> nodewarden.validator.checks.links", id="the runner imports a check"),
    pytest.param("nodewarden/validator/runner.py", "import nodewarden.validator.checks",
                 "The validator's runner finds the checks through nodewarden.validator.registry",
                 "nodewarden.validator.runner -> nodewarden.validator.checks", id="the runner imports the checks package"),
]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layering")
    shutil.copytree(REPO / "nodewarden", root / "nodewarden", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize("path, line, contract, import_", BREAKS)
def test_lint_imports_fails_on_a_broken_contract(package_copy: Path, path: str, line: str, contract: str,
                                                 import_: str) -> None:
    target = package_copy / path
    original = target.read_text()
    target.write_text(original + f"\n{line}  # breaks a contract\n")
    try:
        r = _run_lint(package_copy)
    finally:
        target.write_text(original)
    assert r.returncode == 1, r.stdout + r.stderr
    statuses = _statuses(r.stdout)
    assert [status for name, status in statuses.items() if name.startswith(contract)] == ["BROKEN"], statuses
    assert import_ in " ".join(r.stdout.split()), r.stdout


def _statuses(stdout: str) -> dict[str, str]:
    """Contract name -> ``KEPT``/``BROKEN``, from lint-imports' summary (its lines wrapped)."""
    text = " ".join(stdout.split())
    summary = text.split("Contracts:", 1)[0].split("dependencies.", 1)[-1]  # before the tally
    parts = re.split(r" (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?", summary)
    return {parts[i].strip(" -"): parts[i + 1] for i in range(0, len(parts) - 1, 2)}


@pytest.mark.parametrize("module", [
    "nodewarden.sysfs.attrs", "nodewarden.sysfs.infiniband", "nodewarden.sysfs.pci",
    "nodewarden.sysfs.net", "nodewarden.sysfs.cpufreq", "nodewarden.sysfs.edac",
    "nodewarden.nvml", "nodewarden.kmsg", "nodewarden.logfiles",
    "nodewarden.collectors.edac", "nodewarden.collectors.nvml", "nodewarden.collectors.infiniband", "nodewarden.collectors.netclass",
    "nodewarden.collectors.pcie",
])
def test_module_loads_no_validator_module(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('nodewarden.validator'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"{module} loads {out.strip()}"

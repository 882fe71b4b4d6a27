"""The sysfs fixture trees (tests/fixtures/sysfs, see PROVENANCE.md there) as the collector tests
use them: a private copy per test, attributes rewritten in place."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def copy_tree(name: str, tmp_path: Path) -> Path:
    """A copy of fixture tree ``name`` under ``tmp_path`` (symlinks kept, as sysfs has them)."""
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst, symlinks=True)
    return dst


def put(root: Path, rel: str, value: object) -> None:
    """Write one attribute (``value`` and a newline, as sysfs prints it), creating its directory."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")

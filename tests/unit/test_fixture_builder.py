"""The committed sysfs fixture trees are what their builders write: tests/fixtures/sysfs/
build_fixtures.py (generated trees) and tests/fixtures/sysfs-captured/extract_ttar.py (the tree
extracted from a public capture), each run into a temporary directory and compared with the
committed tree file by file: content bytes, symlink targets as written, and the set of paths."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILDER = _load(FIXTURES / "sysfs" / "build_fixtures.py")
EXTRACTOR = _load(FIXTURES / "sysfs-captured" / "extract_ttar.py")


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """{relative path: ("link", target) | ("file", bytes)} of every file and symlink under ``root``
    (links not followed). Directories are implied by their contents: git keeps no empty one."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
    return out


def differences(want: dict[str, tuple[str, bytes | str]], got: dict[str, tuple[str, bytes | str]]) -> list[str]:
    """What tells the two snapshots apart, one line per path (empty when equal)."""
    lines = [f"only committed: {p}" for p in sorted(want.keys() - got.keys())]
    lines += [f"only rebuilt: {p}" for p in sorted(got.keys() - want.keys())]
    lines += [f"differs: {p}: committed {want[p]!r}, rebuilt {got[p]!r}"
              for p in sorted(want.keys() & got.keys()) if want[p] != got[p]]
    return lines


@pytest.mark.parametrize("name", sorted(BUILDER.TREES))
def test_builder_reproduces_committed_tree(name: str, tmp_path: Path) -> None:
    BUILDER.TREES[name](tmp_path / name)
    committed = snapshot(FIXTURES / "sysfs" / name)
    assert committed, f"tests/fixtures/sysfs/{name} is empty or missing"
    assert differences(committed, snapshot(tmp_path / name)) == []


def test_extractor_reproduces_captured_tree(tmp_path: Path) -> None:
    EXTRACTOR.build(tmp_path / "tree")
    committed = snapshot(FIXTURES / "sysfs-captured" / EXTRACTOR.NAME)
    assert committed
    assert differences(committed, snapshot(tmp_path / "tree")) == []


def test_excerpt_is_its_own_selection() -> None:
    """The committed excerpt holds exactly the records the extractor selects (no record added by
    hand survives a run of ``--excerpt``)."""
    text = EXTRACTOR.EXCERPT.read_text(encoding="utf-8", errors="surrogateescape")
    records = EXTRACTOR.parse_ttar(text, str(EXTRACTOR.EXCERPT))
    assert EXTRACTOR.select(records) == records


def test_differences_names_each_kind() -> None:
    a = {"x": ("file", b"1\n"), "l": ("link", "../x"), "gone": ("file", b"")}
    b = {"x": ("file", b"2\n"), "l": ("link", "../y"), "new": ("file", b"")}
    assert differences(a, b) == ["only committed: gone", "only rebuilt: new",
                                 "differs: l: committed ('link', '../x'), rebuilt ('link', '../y')",
                                 "differs: x: committed ('file', b'1\\n'), rebuilt ('file', b'2\\n')"]

"""The reference data the tests read is inside the repository (tests/fixtures/reference/), the
copies are the files tests/fixtures/reference/SOURCE.md names and hashes, and no test reaches
for a directory beside the checkout."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
REFERENCE = TESTS / "fixtures" / "reference"
SOURCE = REFERENCE / "SOURCE.md"

# A SOURCE.md table row: | `file` | what | source | `sha256` |
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \|.*\| `(?P<sha256>[0-9a-f]{64})` \|$", re.M)
# A path out of the repository: a shared/ directory beside the checkout, a parent of the
# repository root, or more levels up than tests/unit/x.py -> the root.
_OUTSIDE = re.compile(r"\.\./shared|\b(?:REPO|ROOT)\.parent\b|parents\[[3-9]\]")
# A case id of the corpus (real_log_cases.md conventions: X Xid, W NVRM, P PCIe, S NVSwitch, E EDAC, ...).
_CASE_ID = re.compile(r"\b[XWFSNEMRIYP]-\d{3}\b")


def _listed() -> dict[str, str]:
    return {m["file"]: m["sha256"] for m in _ROW.finditer(SOURCE.read_text(encoding="utf-8"))}


def _test_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def test_source_md_lists_exactly_the_copies() -> None:
    present = {p.name for p in REFERENCE.iterdir() if p.name != "SOURCE.md"}
    assert present, REFERENCE
    assert set(_listed()) == present


@pytest.mark.parametrize("name", sorted(_listed()))
def test_copy_is_the_file_source_md_names(name: str) -> None:
    digest = hashlib.sha256((REFERENCE / name).read_bytes()).hexdigest()
    assert digest == _listed()[name], f"{name} changed: update SOURCE.md with where the new text comes from"


def test_catalog_test_reads_the_copy() -> None:
    text = (TESTS / "unit" / "test_catalog.py").read_text(encoding="utf-8")
    assert re.search(r'^REFERENCE = REPO / "tests/fixtures/reference"(\s+#.*)?$', text, re.M), \
        "test_catalog.py reads its facts from tests/fixtures/reference"
    assert "xid_catalog_facts.csv" in _listed()


def test_no_test_reads_outside_the_repository() -> None:
    offenders = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
                 for p in _test_sources()
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if _OUTSIDE.search(line)]
    assert offenders == []


def test_every_cited_case_is_in_the_corpus_copy() -> None:
    corpus = set(_CASE_ID.findall((REFERENCE / "real_log_cases.md").read_text(encoding="utf-8")))
    cited = {(case, str(p.relative_to(REPO))) for p in _test_sources()
             for case in _CASE_ID.findall(p.read_text(encoding="utf-8"))}
    assert len({case for case, _ in cited}) > 50  # the real-case tests cite the corpus throughout
    assert sorted((case, where) for case, where in cited if case not in corpus) == []

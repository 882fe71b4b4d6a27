"""The Xid catalog's two data files, read once on first use through :mod:`importlib.resources`
(nothing is read at import time):

- ``xid_catalog.csv``: one row per Xid 1-172. ``mnemonic``, ``immediate_action``,
  ``investigatory_action`` and ``possible_causes`` are NVIDIA's facts (Xid catalog dated
  2025-10-29, causes from the r555 listing of Sep 2024); ``group`` is the Fire-Flyer paper's
  Table V group (arXiv 2408.14158v2) where ``group_source`` is ``paper``, else nodewarden's
  own assignment; ``description`` is nodewarden's own wording. See ``SOURCES.md``.
- ``policy.toml``: nodewarden's own policy (:mod:`nodewarden.catalog.policy` builds it).

The CSV's cells are kept verbatim in :class:`Row`; :func:`bucket` and :func:`causes` turn the
facts file's "none" phrases into None and ``()``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import tomllib
from importlib import resources
from typing import Any

from nodewarden.catalog.groups import GROUPS

CATALOG_FILE = "xid_catalog.csv"
POLICY_FILE = "policy.toml"

# Provenance of the shipped data (SOURCES.md has the details).
NVIDIA_CATALOG_DATE = "2025-10-29"
NVIDIA_CAUSES_LISTING = "r555 (Sep 2024)"
PAPER = "Fire-Flyer AI-HPC, arXiv 2408.14158v2"

# The facts file's phrases for "no causes": kept verbatim in the CSV, shown as a note.
NO_CAUSES_MARKED = "no cause marked in r555 listing"
NEWER_THAN_LISTING = "not in r555 cause listing (newer code)"
# The facts file's phrase for "no resolution bucket".
NONE_LISTED = "none listed"

CSV_COLUMNS = (
    "xid", "mnemonic", "description", "group", "group_source",
    "immediate_action", "investigatory_action", "possible_causes",
)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of ``xid_catalog.csv``, cells verbatim (``code`` as int); columns in SOURCES.md."""

    code: int
    mnemonic: str
    description: str
    group: str
    group_source: str
    immediate_action: str
    investigatory_action: str
    possible_causes: str


def _read_resource(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def rows() -> dict[int, Row]:
    """The catalog's rows by Xid code (dict of int -> :class:`Row`), read on the first call.

    Raises RuntimeError when the shipped CSV has other columns than :data:`CSV_COLUMNS` or a
    group outside :data:`nodewarden.catalog.groups.GROUPS` (a broken package, never input)."""
    reader = csv.DictReader(io.StringIO(_read_resource(CATALOG_FILE)))
    if tuple(reader.fieldnames or ()) != CSV_COLUMNS:
        raise RuntimeError(f"{CATALOG_FILE}: unexpected columns {reader.fieldnames!r}")
    out: dict[int, Row] = {}
    for rec in reader:
        row = Row(
            code=int(rec["xid"]),
            mnemonic=rec["mnemonic"],
            description=rec["description"],
            group=rec["group"],
            group_source=rec["group_source"],
            immediate_action=rec["immediate_action"],
            investigatory_action=rec["investigatory_action"],
            possible_causes=rec["possible_causes"],
        )
        if row.group not in GROUPS:
            raise RuntimeError(f"{CATALOG_FILE}: Xid {row.code} has unknown group {row.group!r}")
        out[row.code] = row
    return out


@functools.cache
def shipped_policy_data() -> dict[str, Any]:
    """``policy.toml`` parsed (the ``[xid.N]`` and ``[bucket.NAME]`` tables), read on the first call."""
    return tomllib.loads(_read_resource(POLICY_FILE))


def bucket(value: str) -> str | None:
    """An NVIDIA resolution-bucket cell (``RESET_GPU``), or None for :data:`NONE_LISTED`."""
    return None if value == NONE_LISTED else value


def causes(value: str) -> tuple[str, ...]:
    """A ``possible_causes`` cell split at ``;`` (``("HW error", "driver error")``); ``()`` for an
    empty cell or one of the "no causes" phrases."""
    if value in (NO_CAUSES_MARKED, NEWER_THAN_LISTING) or not value:
        return ()
    return tuple(part.strip() for part in value.split(";") if part.strip())


def catalog_version() -> str:
    """The sources and dates of the shipped catalog, as one line (str)."""
    return (
        f"NVIDIA Xid catalog {NVIDIA_CATALOG_DATE} / {NVIDIA_CAUSES_LISTING}; "
        f"Fire-Flyer Table V ({PAPER})"
    )

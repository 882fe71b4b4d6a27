"""Reading sysfs attributes and directories: one small file read, one sorted listing, and the
``N: NAME`` value form several class directories print. Pure apart from the two reads; never raises."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def read_attr(path: Path) -> str | None:
    """A sysfs attribute's text (at most 4 KiB, UTF-8 with replacement), stripped; None when
    absent or unreadable (EINVAL: the kernel refuses e.g. ``speed`` of a down interface)."""
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``mlx5_2`` before ``mlx5_10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def listdir(path: Path) -> list[str]:
    """Entries of ``path`` in :func:`natural_key` order; ``[]`` when absent or unreadable."""
    try:
        return sorted(os.listdir(path), key=natural_key)
    except OSError:
        return []


def parse_code_name(text: str | None) -> tuple[int | None, str | None]:
    """``4: ACTIVE`` -> (4, "ACTIVE"); ``ACTIVE`` -> (None, "ACTIVE"); None -> (None, None)."""
    if not text:
        return None, None
    code, sep, name = text.partition(":")
    if sep and code.strip().isdigit():
        return int(code), name.strip()
    return None, text.strip()


def parse_counter(text: str | None) -> int | None:
    """``"14"`` -> 14; ``"N/A (no PMA)"`` (Y-005), empty or garbage -> None (not available)."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


class AttrReader:
    """Thin sysfs reads that count the files found but unreadable (a read error, ``N/A (no
    PMA)``, a number that is not one), so that one bad file costs one series, never the poll.
    Every module of :mod:`nodewarden.sysfs` reads through one; its ``unreadable`` is the count
    the collectors export as ``nodewarden_collector_unreadable_files``."""

    def __init__(self) -> None:
        self.unreadable = 0

    def text(self, path: Path) -> str | None:
        """The attribute's text, stripped; None when absent or unreadable (counted if present)."""
        try:
            with open(path, "rb") as f:
                return f.read(4096).decode("utf-8", "replace").strip()
        except OSError:
            if os.path.lexists(path):
                self.unreadable += 1
            return None

    def counter(self, path: Path) -> int | None:
        """A non-negative decimal count; None (and counted) when present but not a number."""
        text = self.text(path)
        value = parse_counter(text)
        if value is None and text is not None:
            self.unreadable += 1
        return value

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

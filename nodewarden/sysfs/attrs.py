"""Reading sysfs attributes and directories: one small file read, one sorted listing, and the
value forms several class directories print (``N: NAME``, a decimal count). Pure apart from the
reads; never raises, never blocks.

A sysfs attribute is a regular file. Anything else where one is expected -- a FIFO, a socket, a
device node, a directory -- is refused unread (a FIFO would block the reader for ever), as is a
file that cannot be opened: the field is None, and an :class:`AttrReader` counts the file.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, NamedTuple

ATTR_LIMIT = 4096  # a sysfs attribute is at most one page (Documentation/filesystems/sysfs.rst)


def _read(path: str | os.PathLike[str], limit: int) -> str | None:
    """The text of the regular file ``path`` (at most ``limit`` bytes, UTF-8 with replacement),
    stripped; None when absent, not a regular file, or unreadable. Opened non-blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            data = os.read(fd, left)
            if not data:
                break
            chunks.append(data)
            left -= len(data)
            if left > 0:  # a short read of a regular file is its end (a sysfs show() answers in
                break         # one read): no second read(2) for the EOF
        return b"".join(chunks).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_attr(path: str | os.PathLike[str]) -> str | None:
    """A sysfs attribute's text (at most 4 KiB, UTF-8 with replacement), stripped; None when
    absent, not a regular file, or unreadable (EINVAL: the kernel refuses e.g. ``speed`` of a
    down interface). Not counted: for the attributes whose refusal is their normal answer."""
    return _read(path, ATTR_LIMIT)


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``mlx5_2`` before ``mlx5_10``."""
    return [int(t) if t.isdigit() and t.isascii() else t for t in re.split(r"(\d+)", text)]


def listdir(path: Path) -> list[str]:
    """Entries of ``path`` in :func:`natural_key` order; ``[]`` when absent or unreadable."""
    try:
        return sorted(os.listdir(path), key=natural_key)
    except OSError:
        return []


def printable(name: str) -> str:
    """A directory entry's name as records carry it: the bytes of a name that are no UTF-8 are
    held as surrogates (``eno1\\udcff``), which no label, JSON or terminal can carry; they are
    written ``\\xff`` (``eno1\\xff``), valid UTF-8 kept as it is."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_decimal(text: str) -> bool:
    """ASCII decimal digits only (``str.isdigit`` also accepts ``²`` and other digits ``int``
    refuses)."""
    return text.isascii() and text.isdigit()


class CodeName(NamedTuple):
    """An ``N: NAME`` attribute: ``code`` (None for a text-only value) and ``name``."""

    code: int | None
    name: str | None


def parse_code_name(text: str | None) -> CodeName:
    """``4: ACTIVE`` -> (4, "ACTIVE"); ``ACTIVE`` -> (None, "ACTIVE"); None or empty -> (None, None)."""
    if not text:
        return CodeName(None, None)
    code, sep, name = text.partition(":")
    if sep and is_decimal(code.strip()):
        return CodeName(int(code), name.strip())
    return CodeName(None, text.strip())


def parse_counter(text: str | None) -> int | None:
    """``"14"`` -> 14; ``"N/A (no PMA)"`` (Y-005), empty or garbage -> None (not available)."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if is_decimal(text) else None


class AttrReader:
    """Thin sysfs reads that count the files found but unreadable (a read error, not a regular
    file, ``N/A (no PMA)``, a value that is not of its file's form), so that one bad file costs
    one series, never the poll. Every module of :mod:`nodewarden.sysfs` reads through one; its
    ``unreadable`` is the count the collectors export as ``nodewarden_collector_unreadable_files``."""

    def __init__(self) -> None:
        self.unreadable = 0

    def text(self, path: str | os.PathLike[str], limit: int = ATTR_LIMIT) -> str | None:
        """The attribute's text, stripped; None when absent or unreadable (counted if present).
        ``path`` may be a string: a poll's hot loops join strings (a ``Path`` join costs more
        than the read)."""
        text = _read(path, limit)
        if text is None and os.path.lexists(path):
            self.unreadable += 1
        return text

    def counter(self, path: str | os.PathLike[str]) -> int | None:
        """A non-negative decimal count; None (and counted) when present but not a number."""
        text = self.text(path)
        value = parse_counter(text)
        if value is None and text is not None:
            self.unreadable += 1
        return value

    def parsed(self, text: str | None, value: Any) -> Any:
        """``value`` (what a parser made of ``text``), counting ``text`` as unreadable when it was
        read but the parser made nothing of it (None)."""
        if value is None and text is not None:
            self.unreadable += 1
        return value

    def gone(self, path: Path) -> bool:
        """True (and counted) when the directory ``path`` listed a moment ago is no longer one:
        vanished while read (a GPU that fell off the bus), a dangling link."""
        if os.path.isdir(path):
            return False
        self.unreadable += 1
        return True


class StaticAttrs:
    """The texts of attributes that do not change while their device exists (a PCI function's
    ``vendor``, ``device``, ``class``, maximum link), read once per device directory by a
    collector that polls: kept while the directory is the same one -- same ``st_dev``, ``st_ino``
    and ``st_ctime_ns`` (sysfs gives a device removed and added again a new directory inode; a
    file system that reuses inode numbers changes the ctime) -- and read again when it is not. Only texts that read and parsed are kept (an unreadable file is read,
    and counted, at every poll). :meth:`prune` forgets the directories no longer listed."""

    def __init__(self) -> None:
        self._dirs: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}

    def of(self, d: Path) -> dict[str, Any] | None:
        """The kept values of directory ``d`` (empty when it is new or was replaced); None when
        ``d`` is no directory now (vanished, a dangling link)."""
        try:
            st = os.stat(d)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        key, ident = str(d), (st.st_dev, st.st_ino, st.st_ctime_ns)
        entry = self._dirs.get(key)
        if entry is None or entry[0] != ident:
            entry = self._dirs[key] = (ident, {})
        return entry[1]

    def prune(self, keep: set[str]) -> None:
        """Forget every directory whose path is not in ``keep``."""
        for key in [k for k in self._dirs if k not in keep]:
            del self._dirs[key]

    def __len__(self) -> int:
        return len(self._dirs)


def visit(d: Path, reader: AttrReader, static: StaticAttrs | None, listed: set[str]) -> tuple[bool, dict[str, Any] | None]:
    """(present, kept) for the directory ``d`` a reader listed a moment ago: present False (and
    counted, as :meth:`AttrReader.gone` counts it) when it is no directory now; ``kept`` its
    :meth:`StaticAttrs.of` entry (None without ``static``), its path added to ``listed`` for
    :meth:`StaticAttrs.prune`."""
    if static is None:
        return not reader.gone(d), None
    kept = static.of(d)
    if kept is None:
        reader.unreadable += 1
        return False, None
    listed.add(str(d))
    return True, kept

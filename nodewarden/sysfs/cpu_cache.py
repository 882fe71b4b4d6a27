"""``/sys/devices/system/cpu/cpu<N>/cache/index<M>``: the CPU caches
(Documentation/ABI/testing/sysfs-devices-system-cpu: ``level``, ``size``, ``shared_cpu_list``).
The root is a parameter; read through :class:`~nodewarden.sysfs.attrs.AttrReader`."""

from __future__ import annotations

import re
from pathlib import Path

from nodewarden.sysfs.attrs import AttrReader, listdir

_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.ASCII)
_CPU_DIR = re.compile(r"^cpu\d+$", re.ASCII)
_INDEX_DIR = re.compile(r"^index\d+$", re.ASCII)


def parse_cache_size(text: str | None) -> int | None:
    """Bytes of a cache ``size`` (``32768K``, ``1M``, ``512``); None for another form."""
    m = _SIZE.match((text or "").strip().upper())
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def total_l3_bytes(sysfs: Path, reader: AttrReader | None = None) -> int:
    """Bytes of the distinct L3 caches of all CPUs (``level`` 3, one per ``shared_cpu_list``:
    the CPUs sharing a cache list it alike); 0 without any. A cache whose files cannot be read
    is left out (and counted by ``reader``)."""
    reader = reader if reader is not None else AttrReader()
    root = Path(sysfs) / "devices" / "system" / "cpu"
    seen: dict[str, int] = {}
    for cpu in listdir(root):
        if not _CPU_DIR.match(cpu):
            continue
        for index in listdir(root / cpu / "cache"):
            d = root / cpu / "cache" / index
            if not _INDEX_DIR.match(index) or reader.text(d / "level") != "3":
                continue
            shared = reader.text(d / "shared_cpu_list")
            text = reader.text(d / "size")
            size = reader.parsed(text, parse_cache_size(text))
            if shared is not None and size is not None:
                seen.setdefault(shared, size)
    return sum(seen.values())

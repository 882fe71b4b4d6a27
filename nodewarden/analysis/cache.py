"""Parquet cache of parsed events, so a second run over the same logs reads events, not logs.

One cache file holds the events of a group of input files (the files of one directory read as one
task); each row names the file it came from, and the file's schema metadata lists every file of
the group with its size, mtime_ns and parse counts (files without events included). A file whose
size or mtime changed is re-parsed, and so is one modified within RACY_NS of being parsed (it may
have changed again within the file system's timestamp granularity); the others come from the
cache. The cache file's name is a hash of the group's directory, its first file (absolute and as
given, which events carry), the nodewarden version, a digest of the parsers' code and data
(:func:`parser_digest`: a parser changed without a version change, as in a source checkout or a
patched install) and the parse options (time zone, boot time), so a change of any of them never
reads stale events. A cache file that cannot be
read is ignored and written again.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nodewarden import __version__
from nodewarden.events import FaultEvent, iso_utc

META_KEY = b"nodewarden.files"
FORMAT = 2  # 2: the ``offset`` column (FaultEvent.origin: where the event's first line is in its file)
# A file modified this close to the moment it was parsed may change again with the same mtime
# (file systems stamp with a coarse clock): such an entry is never trusted, the file is parsed.
RACY_NS = 100_000_000

_STR_COLUMNS = ("kind", "time", "time_kind", "raw_time", "host", "source", "device", "category",
                "pci_bus_id", "process", "message", "attrs", "raw")


# The code and data that decide which events a log gives: the parsers, the event record, the catalogs.
_PARSER_FILES = (("parsing", "*.py"), ("catalog", "*.py"), ("catalog", "*.csv"), ("catalog", "*.toml"), ("", "events.py"))


@functools.lru_cache(maxsize=1)
def parser_digest() -> str:
    """SHA-256 (hex, 16 characters) of the package's parser sources and catalog data
    (:data:`_PARSER_FILES`), read once per process; ``""`` when the package is not on a file
    system (a zip import): the version alone names the cache then."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    try:
        for sub, pattern in _PARSER_FILES:
            for f in sorted((root / sub).glob(pattern)):
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    except OSError:
        return ""
    return h.hexdigest()[:16]


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/nodewarden``, else ``~/.cache/nodewarden``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base if base else Path.home() / ".cache") / "nodewarden"


def file_key(path: Path, host: str | None = None) -> tuple[str, int, int, str | None]:
    """(absolute path, size, mtime_ns, host hint) of ``path``: its events hold the host its path
    gave (node07/kern.log read through the fleet directory or on its own); raises OSError."""
    name = os.path.abspath(path)
    st = os.stat(name)
    return name, st.st_size, st.st_mtime_ns, host


def _schema():
    import pyarrow as pa
    fields = [pa.field("file", pa.string())]
    for name in _STR_COLUMNS:
        fields.append(pa.field(name, pa.string()))
    fields += [pa.field("monotonic", pa.float64()), pa.field("xid", pa.int64()), pa.field("code", pa.int64()),
               pa.field("pid", pa.int64()), pa.field("offset", pa.int64())]
    return pa.schema(fields)


def remove_stale_tmp(directory: str | os.PathLike[str]) -> int:
    """Remove the temporary files (``<name>.<pid>.tmp.parquet``) of writers that no longer run
    (a worker killed while it stored, by Ctrl-C or the OOM killer); returns how many."""
    removed = 0
    try:
        names = [p for p in Path(directory).glob("*.tmp.parquet")]
    except OSError:
        return 0
    for p in names:
        try:
            pid = int(p.name.split(".")[-3])
        except (ValueError, IndexError):
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            p.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours
    return True


class EventCache:
    """Cache files under ``directory`` for one set of parse options."""

    def __init__(self, directory: str | os.PathLike[str], tz: str | None = None,
                 boot_time: dt.datetime | None = None) -> None:
        self.directory = Path(directory)
        self.options = json.dumps({"version": __version__, "parsers": parser_digest(), "format": FORMAT, "tz": tz,
                                   "boot_time": iso_utc(boot_time) if boot_time is not None else None},
                                  sort_keys=True)

    def path_for(self, group_dir: Path, first: Path) -> Path:
        # The path as given is part of the name too: events name their file (attrs["origin"]) so.
        ident = json.dumps([str(group_dir.absolute()), str(first.absolute()), str(first), self.options])
        return self.directory / (hashlib.sha256(ident.encode()).hexdigest()[:32] + ".parquet")

    # -- reading -----------------------------------------------------------------------------
    def load(self, cache_path: Path) -> dict[tuple[str, int, int, str | None], tuple[list[FaultEvent], int, int, int]]:
        """``{file key: (events, records, unparsed, parsed_ns)}`` stored in ``cache_path``; {} when
        missing, unreadable, or written for other options."""
        try:
            import pyarrow.parquet as pq
            pf = pq.ParquetFile(cache_path)
            meta = json.loads(pf.metadata.metadata[META_KEY])
            if meta.get("options") != self.options:
                return {}
            out: dict[tuple[str, int, int, str | None], tuple[list[FaultEvent], int, int, int]] = {}
            by_name: dict[str, list[FaultEvent]] = {}
            for f in meta["files"]:
                events: list[FaultEvent] = []
                by_name[f["path"]] = events
                if int(f["mtime_ns"]) >= int(f["parsed_ns"]) - RACY_NS:
                    continue
                key = (f["path"], int(f["size"]), int(f["mtime_ns"]), f.get("host"))
                out[key] = (events, int(f["records"]), int(f["unparsed"]), int(f["parsed_ns"]))
            table = pf.read(use_threads=False)
            cols = {name: table.column(name).to_pylist() for name in table.column_names}
            for i, file in enumerate(cols["file"]):
                d: dict[str, Any] = {name: cols[name][i] for name in cols}
                d["attrs"] = json.loads(d["attrs"]) if d["attrs"] else {}
                e = FaultEvent.from_dict(d)
                e.code = d["code"]
                e.origin = d["offset"]  # the printed order of events of equal time (tables.events_frame)
                by_name[file].append(e)
            return out
        except Exception:  # missing, truncated, corrupt or foreign: parse again
            return {}

    # -- writing -----------------------------------------------------------------------------
    def store(self, cache_path: Path,
              entries: list[tuple[tuple[str, int, int, str | None], list[FaultEvent], int, int, int]]) -> bool:
        """Write ``entries`` ((file key, events, records, unparsed, time.time_ns() before it was
        parsed) per file) to ``cache_path`` atomically. False when they cannot be stored (no
        space, values of other types)."""
        tmp = cache_path.with_name(f"{cache_path.stem}.{os.getpid()}.tmp.parquet")
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
            cols: dict[str, list[Any]] = {name: [] for name in _schema().names}
            files = []
            for (path, size, mtime_ns, host), events, records, unparsed, parsed_ns in entries:
                files.append({"path": path, "size": size, "mtime_ns": mtime_ns, "host": host, "records": records,
                              "unparsed": unparsed, "parsed_ns": parsed_ns})
                for e in events:
                    d = e.to_dict()
                    d["attrs"] = json.dumps(d["attrs"], ensure_ascii=False, separators=(",", ":"), default=str)
                    d["code"] = e.code
                    d["offset"] = e.origin
                    d["file"] = path
                    for name in cols:
                        cols[name].append(d[name])
            meta = json.dumps({"options": self.options, "files": files})
            table = pa.table(cols, schema=_schema().with_metadata({META_KEY: meta.encode()}))
            self.directory.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, cache_path)
            return True
        except BaseException as e:  # Ctrl-C too: no temporary file is left behind
            try:
                tmp.unlink()
            except OSError:
                pass
            if not isinstance(e, Exception):
                raise
            return False

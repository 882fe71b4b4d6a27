"""Which files to read, in what order, and whose host they are: the directory walk, rotated
sets oldest first, and the error that names an input that cannot be read.

Rotation follows logrotate(8): numbered (``kern.log.3.gz`` .. ``kern.log.1``, ``kern.log``) or,
with ``dateext``, dated (``messages-20240101.gz`` .. ``messages``); the live file comes last.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import stat
from pathlib import Path
from typing import Iterable, Iterator

from nodewarden.events import FaultEvent
from nodewarden.parsing.stream import KernelLogParser

log = logging.getLogger(__name__)

# Base names of kernel/system logs: a file so named tells nothing about its host.
_LOG_BASENAMES = ("kern", "syslog", "messages", "dmesg", "journal", "kmsg", "daemon", "warn", "all", "log")
_ROTATED = re.compile(r"^(?P<base>.+?)(?:[.-](?P<num>\d{1,4}|\d{8}))?(?P<comp>\.(?:gz|bz2|xz))?$")

# The agent's state directory (--state-dir, /var/lib/nodewarden; nodewarden.agent.state and
# .schedule write it): its event journal (events-YYYY-MM-DD.jsonl) is an input, its other files
# are the agent's own and no log: the cursor and counters, the validator schedule, the last
# validator report and that run's output, the lock, the Slurm wrapper's report, and the temp and
# set-aside copies of these. A directory holding one of the markers is taken for a state directory.
# The read layer imports nothing above it, so the names are repeated here; a test holds them to
# the agent's constants.
AGENT_STATE_MARKERS = frozenset({"state.json", "agent.lock", "schedule.json"})
AGENT_STATE_FILES = AGENT_STATE_MARKERS | {"validate.json", "validate.log", "healthcheck.json"}
_AGENT_TEMP = re.compile(r"\.(?:tmp(?:-[^/]*)?|corrupt)$")  # state.json.tmp-k3j_2x, state.json.corrupt

# nodewarden's own outputs, which are no logs: the ground truth `nodewarden simulate` writes beside
# the nodes' directories (recognised by its header, the columns of
# nodewarden.analysis.simulate.TRUTH_FIELDS, optionally followed by EXTRA_TRUTH_FIELDS), and a
# report directory `nodewarden analyze --out` wrote (recognised by its report.md's first line):
# its tables (.csv, .md), figures (.png) and report.html. Repeated here for the same reason as
# the agent's names; a test holds them to the writers.
GROUND_TRUTH_HEADER = ("time,host,kind,xid,device,port,down_time,up_time,fault_id,table_source,line_format,"
                       "after_fault_id")
GROUND_TRUTH_EXTRA = "code,severity,category,switch,action,first_error,errors,affected_devices"
REPORT_MARKER = ("report.md", "# Failure statistics")
REPORT_SUFFIXES = (".csv", ".md", ".png", ".html")


class InputError(Exception):
    """An input could not be read (message names it); other inputs go on.

    ``events`` holds what was read before the error (a truncated .gz keeps its readable part);
    ``parser`` the parser's counts for it.
    """

    def __init__(self, message: str, events: list[FaultEvent] | None = None,
                 parser: KernelLogParser | None = None) -> None:
        super().__init__(message)
        self.events = events or []
        self.parser = parser


@dataclasses.dataclass(frozen=True)
class LogFile:
    """One input file and the host its lines belong to when the lines do not say; ``stat`` is
    its ``os.stat`` when the directory walk took it (None: not taken, or the stat failed)."""

    path: Path
    host: str | None
    stat: os.stat_result | None = dataclasses.field(default=None, compare=False, repr=False)


def printable(name: str) -> str:
    """A file name as text that any UTF-8 output takes: bytes of a name that are not UTF-8 (held
    as surrogates by Python) are written as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_agent_state_file(name: str) -> bool:
    """Whether a file of this name in an agent state directory is one of the agent's own files
    (``state.json``, ``schedule.json``, ``validate.json``, ``agent.lock``, ``*.tmp-*`` ...),
    not its event journal nor a log."""
    return name in AGENT_STATE_FILES or _AGENT_TEMP.search(name) is not None


def _first_line(path: str, limit: int = 4096) -> str:
    """The first line of a file (up to ``limit`` bytes, without its line end); "" when it cannot
    be read (the read reports that)."""
    try:
        with open(path, "rb") as f:
            head = f.read(limit)
    except OSError:
        return ""
    return head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")


def is_ground_truth(path: str) -> bool:
    """Whether ``path`` is a ``ground_truth.csv`` that ``nodewarden simulate`` wrote, under any
    name ending ``.csv``: its first line is exactly the simulator's header
    (:data:`GROUND_TRUTH_HEADER`, optionally with :data:`GROUND_TRUTH_EXTRA`)."""
    if not path.endswith(".csv"):
        return False
    return _first_line(path) in (GROUND_TRUTH_HEADER, f"{GROUND_TRUTH_HEADER},{GROUND_TRUTH_EXTRA}")


def is_report_dir(names: Iterable[str], directory: str) -> bool:
    """Whether ``directory`` (holding the files ``names``) is a report ``nodewarden analyze --out``
    wrote: its ``report.md`` begins with the report's title (:data:`REPORT_MARKER`)."""
    name, title = REPORT_MARKER
    return name in names and _first_line(os.path.join(directory, name)) == title


def _host_from_name(name: str) -> str | None:
    stem = name.split(".")[0]
    if not stem or stem.lower() in _LOG_BASENAMES or stem.lower().startswith(_LOG_BASENAMES):
        return None
    return stem


def _rotation_key(name: str) -> tuple[str, int, int, str]:
    """Oldest first within a rotated set: kern.log.3.gz, kern.log.2.gz, kern.log.1, kern.log;
    with dateext, messages-20240101.gz, messages-20240108, messages. The live file comes last."""
    m = _ROTATED.match(name)
    base = m.group("base") if m else name
    num = m.group("num") if m else None
    if num is None:
        return base, 1, 0, name
    if len(num) == 8:  # dateext: a later date is newer
        return base, 0, int(num), name
    return base, 0, -int(num), name  # numbered: a higher number is older


def _walk(top: str, errors: list[InputError], skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, list[os.DirEntry]]]:
    """(directory, its files) depth first, sub-directories in name order, hidden entries skipped.
    Symbolic links to directories are followed (a fleet directory of links to each node's logs),
    each real directory walked once: a second link to it, or a link back up, is not entered."""
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            st = os.stat(d)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as e:
            errors.append(InputError(f"{d}: cannot list directory: {e.strerror or e}"))
            continue
        files, subdirs = [], []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir and skip and os.path.realpath(e.path) in skip:
                continue
            (subdirs if is_dir else files).append(e.path if is_dir else e)
        yield d, files
        stack.extend(sorted(subdirs, reverse=True))


def expand_paths(paths: Iterable[str | os.PathLike[str]],
                 exclude: Iterable[str | os.PathLike[str]] = (),
                 left_out: list[str] | None = None) -> tuple[list[LogFile], list[InputError]]:
    """Files to read, in order, with their host hints; plus the inputs that cannot be read.

    A directory is walked recursively; a file directly under a given directory is named after
    its host (``node07.log`` -> node07) unless it has a log's base name (``kern.log``); a file in a
    sub-directory takes the sub-directory's name (``logs/node07/kern.log`` -> node07). Directories
    are read depth first in name order, a directory's files before its sub-directories; rotated
    sets oldest first; symbolic links to directories are followed, each directory read once.
    Hidden files and the Parquet cache are skipped; FIFOs, sockets and devices found in a
    directory are reported and skipped (given by name, ``/dev/kmsg`` or a pipe is read). A file
    reached twice (given twice, inside a directory also given, or through a link) is read once.
    Directories in ``exclude`` (analyze's own --out) are not walked into. In an agent state
    directory (one holding ``state.json``, ``agent.lock`` or ``schedule.json``) the agent's own
    files (:func:`is_agent_state_file`) are skipped, with an info log record, and are neither
    errors nor unparsed lines; its event journal, and any other file, is taken as usual.
    nodewarden's own outputs found in a directory are no logs and are skipped too: a simulated
    fleet's ground truth (:func:`is_ground_truth`) and the tables, figures and pages of a report
    directory (:func:`is_report_dir`). ``left_out``, when given, gets one line per thing skipped
    so (an excluded directory, a ground truth, a report directory), saying why.
    """
    files: list[LogFile] = []
    errors: list[InputError] = []
    seen: dict[tuple[int, int], int] = {}  # (device, inode) of the files taken -> index: each read once

    def first_time(st: os.stat_result | None, host: str | None = None) -> bool:
        if st is None:
            return True
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            i = seen[ident]
            if files[i].host is None and host is not None:  # reached again where its path names the host
                files[i] = dataclasses.replace(files[i], host=host)
            return False
        seen[ident] = len(files)
        return True

    def skipped(what: str) -> None:
        if left_out is not None:
            left_out.append(what)

    excluded = frozenset(os.path.realpath(x) for x in exclude)
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            top = os.fspath(p)
            for x in sorted(excluded):
                if os.path.isdir(x) and x.startswith(os.path.realpath(top).rstrip(os.sep) + os.sep):
                    skipped(f"{printable(x)}: the report's output directory (--out), not read")
            for dirpath, entries in _walk(top, errors, excluded):
                rel = os.path.relpath(dirpath, top)
                sub = None if rel == os.curdir else rel.split(os.sep, 1)[0]
                entries.sort(key=lambda e: _rotation_key(e.name))
                if any(e.name in AGENT_STATE_MARKERS for e in entries):
                    own = [e.name for e in entries if is_agent_state_file(e.name)]
                    entries = [e for e in entries if not is_agent_state_file(e.name)]
                    log.info("%s: an agent state directory: its event journal is read, not the agent's "
                             "own files (%s)", printable(dirpath), ", ".join(printable(n) for n in own))
                if is_report_dir([e.name for e in entries], dirpath):
                    own = [e for e in entries if e.name.endswith(REPORT_SUFFIXES)]
                    if own:
                        entries = [e for e in entries if not e.name.endswith(REPORT_SUFFIXES)]
                        skipped(f"{printable(dirpath)}: a report of nodewarden analyze ({len(own)} files), not read")
                for e in entries:
                    name = e.name
                    if name.endswith((".parquet", ".json.tmp")):
                        continue
                    try:
                        st = e.stat()
                    except OSError:
                        st = None  # reported when read
                    if st is not None and not stat.S_ISREG(st.st_mode):
                        # A FIFO would block the read for ever; a device or socket is no log file.
                        errors.append(InputError(f"{e.path}: not a regular file (FIFO, socket or device), skipped"))
                        continue
                    if st is not None and is_ground_truth(e.path):
                        skipped(f"{printable(e.path)}: the ground truth of nodewarden simulate, not read")
                        continue
                    host = sub if sub is not None else _host_from_name(name)
                    host = printable(host) if host is not None else None
                    if first_time(st, host):
                        files.append(LogFile(Path(e.path), host, st))
        elif p.exists() or p.is_symlink():
            try:
                st = os.stat(p)
            except OSError:
                st = None
            if first_time(st if st is not None and stat.S_ISREG(st.st_mode) else None):
                files.append(LogFile(p, None))
        else:
            errors.append(InputError(f"{p}: no such file or directory"))
    return files, errors

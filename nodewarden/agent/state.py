"""The agent's state directory: ``state.json`` (kmsg cursor and counter values, one file so that
both change together) and the event journal (``events-YYYY-MM-DD.jsonl``).

Why one file: the cursor says which records are already in the counters. Written together,
atomically (temp file, fsync, ``os.replace``, fsync of the directory), ``state.json`` always
pairs a cursor with the counters it implies.

The journal carries the cursor too, and it is the authority for what lies past ``state.json``:
every kmsg record in it holds its ``attrs.boot_id`` and ``attrs.seq``. Order per batch of
records: journal lines appended (and fsynced) first, then ``state.json``. On restart the
counters are ``state.json``'s, plus the journaled events of this boot that its cursor does not
count (:func:`journal_tail`), counted from the journal itself (the ring buffer may have
overwritten them meanwhile); the replay of the ring buffer then counts and journals only the
events that are in neither. So a crash between the two writes, a ``state.json`` deleted,
truncated or set aside, or one older than the journal, never journals an event twice and never
leaves a journaled event uncounted: events journaled = events counted (plus those dropped by
the journal's bounds, counted but not journaled). Why not one atomic write of both: the
journal is append-only and large; only a rename of a small file is atomic, and the journal's
own records, each naming its (boot, seq), need no second file to agree with.

One agent per directory: :func:`lock_state_dir` (``flock`` on ``agent.lock``).

A read-only or full state directory does not stop the agent: :class:`StateStore` counts the
failed writes (``nodewarden_collector_state_write_errors_total``), logs when writing starts or
stops failing, and reports ``writable`` for ``/healthz``; counting goes on in memory.

File layout (``state.json``, ``"format": 1``)::

    {"format": 1,
     "kmsg": {"boot_id": "<uuid>", "seq": 1234, "held": [1230]},
     "counters": [{"name": "nodewarden_...", "labels": {...}, "value": 3.0}, ...],
     "written": "2026-11-29T10:00:00Z", "version": "0.1.0"}

``kmsg.seq`` is the last ``/dev/kmsg`` record fed to the parser; ``kmsg.held`` the sequence
numbers of records that began events the parser still held (an MCE record waiting for its last
line): those are not counted yet although ``<= seq``.

Threads: the kernel-log follower, the polled collectors' workers and the validator scheduler
all write here. :class:`StateStore` serializes the journal appends; the callers hold one shared
lock around "count, journal, save" so that ``state.json`` always pairs a cursor with the
counters it implies (:mod:`nodewarden.agent.daemon`).

Journal bounds: one file per UTC day, the history ``nodewarden analyze`` reads. Only age
deletes a file (``max_age_days``, default 400: a year of fleet statistics needs a year of
journals, with room for a late analysis), at start, hourly and at a new day's first write. A
storm is bounded where it happens instead: a record is not journaled past its source's token
bucket (``source_burst`` records of one (kind, device) at once, ``source_rate_per_second``
after), past ``max_day_bytes`` in its day's file (default 16 MiB), or past ``max_bytes`` in all
files (default 256 MiB). Such a record is still counted in the fault counters; the journal's
drops are counted by reason in ``nodewarden_collector_journal_dropped_records_total{reason}``
(``day_bytes``, ``total_bytes``, ``source_rate``, ``write_error``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import fcntl
import json
import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from nodewarden import __version__
from nodewarden.events import XID, FaultEvent, iso_utc
from nodewarden.digests import sha256

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
FORMAT = 1
JOURNAL_GLOB = "events-*.jsonl"
JOURNAL_MAX_BYTES = 256 << 20  # default bound on the journal files' total size
JOURNAL_MAX_AGE_DAYS = 400  # default: a journal file older than this many days is deleted


class StateDirError(Exception):
    """The state directory cannot be used at all (not a directory, cannot be created or read)."""


@dataclasses.dataclass(frozen=True)
class KmsgPosition:
    """Where the kernel-log follower stands: ``boot_id`` (``/proc/sys/kernel/random/boot_id``),
    ``seq`` (last record fed to the parser) and ``held`` (seqs of records whose events the parser
    still held, hence not counted yet)."""

    boot_id: str | None
    seq: int
    held: tuple[int, ...] = ()


@dataclasses.dataclass
class AgentState:
    """The content of ``state.json``: the kmsg position and the persisted counter series
    (as :meth:`nodewarden.agent.exporter.Counters.to_json` writes them)."""

    kmsg: KmsgPosition | None = None
    counters: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": FORMAT, "version": __version__,
                             "written": iso_utc(dt.datetime.now(dt.timezone.utc)), "kmsg": None,
                             "counters": self.counters}
        if self.kmsg is not None:
            d["kmsg"] = {"boot_id": self.kmsg.boot_id, "seq": self.kmsg.seq, "held": list(self.kmsg.held)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AgentState:
        """Raises ValueError when ``d`` is not a state of a known format."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"unknown state format {d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
        k = d.get("kmsg")
        pos = None
        if k is not None:
            try:
                pos = KmsgPosition(boot_id=k.get("boot_id"), seq=_seq(k["seq"]),
                                   held=tuple(_seq(s) for s in k.get("held") or ()))
                if pos.boot_id is not None and not isinstance(pos.boot_id, str):
                    raise ValueError("boot_id is not text")
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"bad kmsg cursor {k!r}") from e
        counters = d.get("counters") or []
        if not isinstance(counters, list):
            raise ValueError("counters is not a list")
        for c in counters:
            _check_series(c)
        return cls(kmsg=pos, counters=counters)


SEQ_MAX = (1 << 64) - 1  # /dev/kmsg sequence numbers are u64


def _seq(v: Any) -> int:
    """A kmsg sequence number from state.json: an integer 0..2**64-1 (no bool, no float)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= SEQ_MAX:
        raise ValueError(f"sequence number {v!r} is not an integer 0..2**64-1")
    return v


def _check_series(c: Any) -> None:
    """A persisted counter series: ``name`` text, ``labels`` text to text, ``value`` a finite
    number >= 0 (a counter never goes below 0; ``1e400``, NaN and infinities are no count).
    Raises ValueError."""
    if not isinstance(c, dict) or not isinstance(c.get("name"), str):
        raise ValueError(f"counter {c!r} is not an object with a name")
    labels = c.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError(f"counter {c['name']}: labels are not text")
    v = c.get("value")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"counter {c['name']}: value {v!r} is not a finite number >= 0")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number state.json may hold")


# ---------------------------------------------------------------------------------------------
# Directory, atomic write, load

def prepare_state_dir(path: str | os.PathLike[str]) -> Path:
    """Create the directory (mode 0750, parents too) when missing; return it.

    Raises StateDirError naming the path when it is not a directory, cannot be created, or cannot
    be read. A directory that exists but is read-only is accepted (the agent runs on, see module doc).
    """
    p = Path(path)
    try:
        p.mkdir(mode=0o750, parents=True, exist_ok=True)
    except FileExistsError:
        raise StateDirError(f"{p}: exists and is not a directory") from None
    except OSError as e:
        if not p.is_dir():
            raise StateDirError(f"{p}: cannot create: {e.strerror or e}") from e
    if not p.is_dir():
        raise StateDirError(f"{p}: not a directory")
    try:
        os.listdir(p)
        sf = p / STATE_FILE
        if sf.exists():
            with open(sf, "rb"):
                pass
    except OSError as e:
        raise StateDirError(f"{p}: cannot read: {e.strerror or e}") from e
    return p


LOCK_FILE = "agent.lock"


class StateDirBusy(StateDirError):
    """Another process holds the state directory's lock (a second agent on the same directory)."""


def lock_state_dir(state_dir: Path) -> int:
    """Take the state directory's lock for the life of the process: ``fcntl.flock`` (exclusive,
    not waiting) on ``<state_dir>/agent.lock``, which then holds this process's pid. Returns the
    file descriptor (close it, or exit, to release; it is not inherited by children).

    Two agents on one directory would journal every event twice and overwrite each other's
    ``state.json``: the second one gets StateDirBusy naming the holder's pid. A read-only
    directory where the lock file cannot be created is locked through the directory itself, so
    two agents there exclude each other too. Raises StateDirError when neither can be opened.
    """
    path = state_dir / LOCK_FILE
    writable = True
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError:
        writable = False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            try:
                fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise StateDirError(f"{state_dir}: cannot open {LOCK_FILE}: {e.strerror or e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = ""
        try:
            pid = path.read_text().strip()
            if pid.isdigit():
                holder = f" (pid {pid})"
        except OSError:
            pass
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StateDirBusy(f"{state_dir}: in use by another nodewarden agent{holder}: "
                               f"{LOCK_FILE} is locked; one agent per state directory") from None
        raise StateDirError(f"{state_dir}: cannot lock {LOCK_FILE}: {e.strerror or e}") from e
    if writable:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
    return fd


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a reader (or a crash) sees the old or the new content,
    never a mix: write a temp file in the same directory, fsync it, ``os.replace``, fsync the
    directory. Raises OSError (EROFS, ENOSPC, EACCES...); the temp file is removed on failure."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_state(state_dir: Path) -> AgentState:
    """The saved state, or an empty one when there is none.

    Only ``state.json`` is read: temp files left by a crash mid-write are ignored. A corrupt or
    foreign file is logged, renamed ``state.json.corrupt`` when the directory allows, and an
    empty state returned (counting starts over; the journal keeps the history).
    Raises OSError when the file exists but cannot be read.
    """
    path = state_dir / STATE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return AgentState()
    try:
        return AgentState.from_dict(_verified(json.loads(data, parse_constant=_no_constant)))
    except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
        log.error("%s: unreadable state (%s); starting from empty counters", path, e)
        try:
            os.replace(path, path.with_name(STATE_FILE + ".corrupt"))
        except OSError:
            pass
        return AgentState()


CHECKSUM_KEY = "sha256"


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def state_bytes(state: AgentState) -> bytes:
    """``state.json``'s content: the state and the SHA-256 of its canonical JSON, so that a file
    the agent did not write as it is (edited by hand, a cursor or boot id changed, bit rot) is
    told apart and set aside, never taken for a cursor that would count records twice."""
    doc = state.to_dict()
    doc[CHECKSUM_KEY] = sha256(_canonical(doc)).hexdigest()
    return _canonical(doc)


def _verified(doc: Any) -> Any:
    """``doc`` without its checksum; ValueError when the checksum does not match. A file with no
    checksum (written by nodewarden 0.1.0) is taken as it is."""
    if not isinstance(doc, dict) or CHECKSUM_KEY not in doc:
        return doc
    want = doc.pop(CHECKSUM_KEY)
    if not isinstance(want, str) or sha256(_canonical(doc)).hexdigest() != want:
        raise ValueError("checksum mismatch: not the content the agent wrote")
    return doc


def remove_temp_files(state_dir: Path) -> int:
    """Delete ``state.json.tmp-*`` files a crash left behind. Returns how many. Never raises."""
    n = 0
    try:
        for p in state_dir.glob(STATE_FILE + ".tmp-*"):
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    except OSError:
        pass
    return n


# ---------------------------------------------------------------------------------------------
# Journal

def journal_path(state_dir: Path, when: dt.datetime) -> Path:
    """``<state_dir>/events-YYYY-MM-DD.jsonl`` for the UTC date of ``when``."""
    return state_dir / f"events-{when.astimezone(dt.timezone.utc):%Y-%m-%d}.jsonl"


def append_journal(state_dir: Path, events: Iterable[FaultEvent], now: dt.datetime | None = None) -> int:
    """Append events as JSON lines (:meth:`FaultEvent.to_json`) to the journal file of each event's
    UTC date (``now`` for an undated event), fsync each file. Returns lines written.

    A file whose last line was cut by a crash or a full disk gets a newline first, so that one
    torn line never swallows the next. Raises OSError.
    """
    by_file = journal_lines(state_dir, events, now)
    write_journal_lines(by_file)
    return sum(len(lines) for lines in by_file.values())


def journal_lines(state_dir: Path, events: Iterable[FaultEvent], now: dt.datetime | None = None) -> dict[Path, list[str]]:
    """The JSON lines of ``events`` by journal file (see :func:`append_journal`)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    by_file: dict[Path, list[str]] = {}
    for e in events:
        by_file.setdefault(journal_path(state_dir, e.time or now), []).append(e.to_json())
    return by_file


def write_journal_lines(by_file: Mapping[Path, list[str]]) -> int:
    """Append and fsync (see :func:`append_journal`). Returns bytes written. Raises OSError."""
    written = 0
    for path, lines in sorted(by_file.items()):
        if not lines:
            continue
        data = ("\n".join(lines) + "\n").encode()
        with open(path, "a+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        written += len(data)
    return written


def _journal_date(path: Path) -> dt.date | None:
    """The date in ``events-YYYY-MM-DD.jsonl``, or None."""
    try:
        return dt.date.fromisoformat(path.name[len("events-"):-len(".jsonl")])
    except ValueError:
        return None


def journal_files(state_dir: Path) -> list[tuple[dt.date, Path, int]]:
    """The journal files ``events-YYYY-MM-DD.jsonl`` as (date, path, size), oldest first. Files
    whose name holds no valid date are not the agent's: left alone. Never raises."""
    out = []
    try:
        paths = list(state_dir.glob(JOURNAL_GLOB))
    except OSError:
        return []
    for p in paths:
        day = _journal_date(p)
        if day is None:
            continue
        try:
            size = p.stat().st_size
        except OSError:
            continue
        out.append((day, p, size))
    out.sort()
    return out


def journal_to_prune(files: list[tuple[dt.date, Path, int]], today: dt.date, max_age_days: float) -> list[Path]:
    """Which journal files to delete (pure): those dated more than ``max_age_days`` before
    ``today``, oldest first. Only age deletes: size bounds drop new records instead
    (:class:`StateStore`), so a storm never takes the history the statistics need. ``files`` as
    :func:`journal_files` gives them."""
    try:
        cutoff = today - dt.timedelta(days=max_age_days)
    except OverflowError:  # a bound past year 1: nothing is that old
        return []
    return [p for day, p, _ in sorted(files) if day < cutoff]


def event_key(e: FaultEvent) -> tuple[Any, ...] | None:
    """Identity of a kmsg event across a restart: (boot_id, seq of its first record, kind, code);
    None for an event without a kmsg sequence number. Kind and code are part of it because one
    record may begin more than one event."""
    seq = e.attrs.get("seq")
    if seq is None or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return (e.attrs.get("boot_id"), seq, e.kind, e.code if e.kind == XID else None)


def _lines_backward(f: Any, chunk: int = 1 << 20) -> Iterable[bytes]:
    """The lines of binary file ``f``, last first (without newlines)."""
    pos = f.seek(0, os.SEEK_END)
    rest = b""
    while pos > 0:
        start = max(0, pos - chunk)
        f.seek(start)
        buf = f.read(pos - start) + rest
        pos = start
        lines = buf.split(b"\n")
        if pos > 0:
            rest = lines[0]
            lines = lines[1:]
        for line in reversed(lines):
            if line:
                yield line


def _torn_tail(f: Any, chunk: int = 1 << 16) -> int:
    """Bytes after the last newline of binary file ``f`` (a line cut by a crash mid-append: no
    whole line ends there), 0 for a file that ends with a newline or is empty. Looks at most
    ``chunk`` bytes back (a longer torn line counts as ``chunk``)."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return 0
    start = max(0, end - chunk)
    f.seek(start)
    tail = f.read(end - start)
    nl = tail.rfind(b"\n")
    return len(tail) - nl - 1 if nl >= 0 else len(tail)


def journal_tail(state_dir: Path, boot_id: str | None, pos: KmsgPosition | None,
                 boot_time: dt.datetime | None = None) -> list[FaultEvent]:
    """The journal carries the cursor: every kmsg record in it has ``attrs.boot_id`` and
    ``attrs.seq``. This returns the journaled kmsg events of boot ``boot_id`` that ``pos`` (the
    cursor of ``state.json``) does not count: ``seq > pos.seq`` or in ``pos.held``; all of the
    boot's when ``pos`` is None or of another boot (``state.json`` deleted, truncated, set aside).
    Oldest first, each once (a key, :func:`event_key`, seen twice is one event).

    Files dated from the day before boot on are read newest first, each backwards from its end
    as far as the first record of this boot that ``pos`` counts: events are journaled in cursor
    order, so everything before it is counted too (a held record is in ``pos.held``). After the
    first file that reaches such a record, one older file is read (a held record journaled under
    its own, earlier, date) and no more. No size limit: a
    10,000-record batch cut by a crash is read whole. With ``boot_id`` None (boot id unknown)
    only the part past a cursor of the same unknown boot, dated from ``boot_time`` on, is taken
    (with no such cursor: nothing, a boot's records cannot be told from another's). Never raises: an unreadable file is
    skipped (logged), a foreign line ignored, a torn last line (a crash mid-append) logged and ignored.
    """
    same = pos if pos is not None and pos.boot_id == boot_id else None
    if boot_id is None and same is None:
        return []  # without a boot id, or a cursor of it, one boot's records cannot be told from another's
    held = set(same.held) if same is not None else set()
    first_day = boot_time.astimezone(dt.timezone.utc).date() - dt.timedelta(days=1) if boot_time else None
    since = boot_time - dt.timedelta(minutes=1) if boot_time is not None and boot_id is None else None
    needle = boot_id.encode() if boot_id else b'"seq"'
    found: dict[tuple[Any, ...], FaultEvent] = {}
    order: list[tuple[int, tuple[Any, ...]]] = []
    files_since_stop = None  # files read after the first one that reached a counted record
    for day, path, _ in reversed(journal_files(state_dir)):
        if first_day is not None and day < first_day:
            break
        if files_since_stop is not None:
            if files_since_stop >= 1:
                break  # a held record journaled by its own (earlier) date is in the next older file at most
            files_since_stop += 1
        try:
            with open(path, "rb") as f:
                torn = _torn_tail(f)
                if torn:
                    log.warning("journal file %s ends mid-line (%d byte(s) of a write cut by a crash or a full "
                                "disk): that line is ignored; its event is counted again from the kernel ring "
                                "buffer while the buffer still holds it", path, torn)
                for line in _lines_backward(f):
                    if needle not in line:
                        continue
                    try:
                        d = json.loads(line)
                        attrs = d.get("attrs") or {}
                        seq = attrs.get("seq")
                        if attrs.get("boot_id") != boot_id or isinstance(seq, bool) or not isinstance(seq, int):
                            continue
                        if same is not None and seq <= same.seq and seq not in held:
                            if files_since_stop is None:
                                files_since_stop = 0
                            break  # counted, and so is everything before it in this file
                        e = FaultEvent.from_dict(d)
                    except (ValueError, TypeError, AttributeError, KeyError):
                        continue  # a line cut by a crash, or not the agent's
                    if since is not None and (e.time is None or e.time < since):
                        continue
                    key = event_key(e)
                    if key is not None and key not in found:
                        found[key] = e
                        order.append((seq, key))
        except OSError as err:
            log.warning("cannot read journal file %s at start: %s; its events may be journaled twice",
                        path, err.strerror or err)
    order.sort()
    return [found[k] for _, k in order]


# ---------------------------------------------------------------------------------------------
# The store: writes that may fail without stopping the agent

DROP_REASONS = ("day_bytes", "total_bytes", "source_rate", "write_error")
JOURNAL_MAX_DAY_BYTES = 16 << 20  # default bound on one UTC day's journal file
SOURCE_BURST = 1000  # default: records of one (kind, device) journaled at once ...
SOURCE_RATE = 1.0  # ... and then per second


class SourceBuckets:
    """Token buckets per event source (kind, device): ``burst`` records at once, refilled at
    ``rate`` per second. One GPU's Xid storm then cannot fill the day's journal file and crowd
    out every other part's records. ``clock``: seconds (monotonic)."""

    MAX_SOURCES = 4096  # idle full buckets are forgotten past this many

    def __init__(self, burst: int, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = float(burst)
        self.rate = float(rate)
        self.clock = clock
        self._b: dict[tuple[Any, ...], tuple[float, float]] = {}  # source -> (tokens, at)

    def take(self, source: tuple[Any, ...]) -> bool:
        now = self.clock()
        tokens, at = self._b.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate)
        ok = tokens >= 1.0
        self._b[source] = (tokens - 1.0 if ok else tokens, now)
        if len(self._b) > self.MAX_SOURCES:
            full = [k for k, (t, a) in self._b.items() if t + (now - a) * self.rate >= self.burst]
            for k in full[:len(self._b) - self.MAX_SOURCES // 2]:
                del self._b[k]
        return ok


class StateStore:
    """Writes ``state.json`` and the journal under ``state_dir``; failures are counted, logged once
    per failing spell, and never raised. Keeps the journal within its bounds (module doc).

    Attributes: ``write_errors`` (failed writes since start), ``writable`` (the last write worked,
    or a start-up probe did), ``last_error`` (text of the last failure, or None),
    ``journal_bytes`` (size of the journal files), ``journal_dropped`` (records not journaled
    since start, by reason: :data:`DROP_REASONS`), ``journal_written`` (records journaled since
    start).
    """

    def __init__(self, state_dir: Path, max_bytes: int = JOURNAL_MAX_BYTES,
                 max_age_days: float = JOURNAL_MAX_AGE_DAYS,
                 today: Callable[[], dt.date] = lambda: dt.datetime.now(dt.timezone.utc).date(), *,
                 max_day_bytes: int = JOURNAL_MAX_DAY_BYTES, source_burst: int = SOURCE_BURST,
                 source_rate: float = SOURCE_RATE, clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = state_dir
        self.max_bytes = max_bytes
        self.max_day_bytes = max_day_bytes
        self.max_age_days = max_age_days
        self.today = today
        self.sources = SourceBuckets(source_burst, source_rate, clock)
        self.write_errors = 0
        self.writable = True
        self.last_error: str | None = None
        self.journal_bytes = 0
        self.journal_dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.journal_written = 0
        self._sizes: dict[Path, int] = {}
        self._lock = threading.Lock()
        self._jlock = threading.Lock()  # journal appends and pruning
        self._pruned_on: dt.date | None = None
        self._warned: set[tuple[str, dt.date]] = set()

    def probe(self) -> bool:
        """Try to create and remove a file in the directory; sets and returns ``writable``."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=STATE_FILE + ".tmp-", dir=self.dir)
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            self._failed("probe", e)
            return False
        self._ok()
        return True

    def save(self, state: AgentState) -> bool:
        """Write ``state.json`` atomically. True on success."""
        data = state_bytes(state)
        try:
            write_atomic(self.dir / STATE_FILE, data)
        except OSError as e:
            self._failed(STATE_FILE, e)
            return False
        self._ok()
        return True

    def journal(self, events: list[FaultEvent]) -> bool:
        """Append ``events`` to the journal, within its bounds: a record past its source's rate,
        past ``max_day_bytes`` in its day's file, or past ``max_bytes`` in all files is dropped
        and counted (``journal_dropped``); no file is deleted to make room. True unless the
        write failed (dropped records are no failure)."""
        if not events:
            return True
        with self._jlock:
            today = self.today()
            if self._pruned_on != today:
                self._prune()
            by_file: dict[Path, list[str]] = {}
            total = self.journal_bytes
            now = dt.datetime.now(dt.timezone.utc)
            for e in events:
                if not self.sources.take((e.kind, e.device)):
                    self._drop("source_rate", 1)
                    continue
                path = journal_path(self.dir, e.time or now)
                line = e.to_json()
                size = len(line.encode()) + 1
                if self._sizes.get(path, 0) + size > self.max_day_bytes:
                    self._drop("day_bytes", 1)
                    continue
                if total + size > self.max_bytes:
                    self._drop("total_bytes", 1)
                    continue
                by_file.setdefault(path, []).append(line)
                self._sizes[path] = self._sizes.get(path, 0) + size
                total += size
            n = sum(len(v) for v in by_file.values())
            try:
                self.journal_bytes += write_journal_lines(by_file)
                self.journal_written += n
            except OSError as e:
                self._failed("journal", e)
                self._drop("write_error", n)
                self._resize()
                return False
        return True

    def prune_journal(self) -> list[Path]:
        """Delete journal files older than ``max_age_days`` now (at start, hourly, at a new
        day's first write). Returns the deleted."""
        with self._jlock:
            return self._prune()

    def _prune(self) -> list[Path]:
        files = journal_files(self.dir)
        today = self.today()
        deleted = []
        for p in journal_to_prune(files, today, self.max_age_days):
            try:
                p.unlink()
                deleted.append(p)
            except FileNotFoundError:
                deleted.append(p)
            except OSError as e:
                log.warning("cannot delete old journal file %s: %s", p, e.strerror or e)
        if deleted:
            log.info("event journal: deleted %d file(s) older than %g days (%s .. %s)",
                     len(deleted), self.max_age_days, deleted[0].name, deleted[-1].name)
        self._pruned_on = today
        self._sizes = {p: size for _, p, size in files if p not in deleted}
        self.journal_bytes = sum(self._sizes.values())
        return deleted

    def _resize(self) -> None:
        self._sizes = {p: size for _, p, size in journal_files(self.dir)}
        self.journal_bytes = sum(self._sizes.values())

    def _drop(self, reason: str, n: int) -> None:
        if not n:
            return
        self.journal_dropped[reason] += n
        key = (reason, self.today())
        if key not in self._warned and reason != "write_error":
            self._warned.add(key)
            bound = {"day_bytes": f"[journal] max_day_bytes {self.max_day_bytes}",
                     "total_bytes": f"[journal] max_bytes {self.max_bytes}",
                     "source_rate": f"[journal] source_burst {self.sources.burst:g} / "
                                    f"source_rate_per_second {self.sources.rate:g}"}[reason]
            log.warning("event journal in %s: records past %s are counted but not journaled "
                        "(nodewarden_collector_journal_dropped_records_total{reason=%r}); "
                        "warned once a day", self.dir, bound, reason)

    def _failed(self, what: str, e: OSError) -> None:
        with self._lock:
            self.write_errors += 1
            was = self.writable
            self.writable = False
            self.last_error = f"{what}: {e.strerror or e}"
        if was:
            log.error("state directory %s: cannot write %s: %s; counting goes on in memory "
                      "(nodewarden_collector_state_write_errors_total)", self.dir, what, e.strerror or e)
        else:
            log.debug("state directory %s: cannot write %s: %s", self.dir, what, e)

    def _ok(self) -> None:
        with self._lock:
            was = self.writable
            self.writable = True
        if not was:
            log.warning("state directory %s: writable again", self.dir)

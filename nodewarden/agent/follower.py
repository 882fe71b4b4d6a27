"""Follow ``/dev/kmsg``: read records, parse them into FaultEvents, count, journal, persist;
each event counted exactly once across restarts and crashes.

How "exactly once" works (see also :mod:`nodewarden.agent.state`):

* At start the whole ring buffer is read again, oldest record first, and fed to a fresh parser,
  so that multi-record state (an MCE record's lines, the two forms of an Xid 79, Xid 94/95
  channel lines) is rebuilt exactly as it was. Only the *events* are filtered: an event whose
  first record has ``seq <= cursor.seq`` of the same boot was counted before, unless that seq
  is in ``cursor.held`` (the parser still held it when the cursor was written).
* A different boot id (or, when the boot id is unknown, a buffer that ends before the cursor)
  is a reboot: every event in the buffer is new.
* Records logged while the agent was down are in the buffer after the cursor: counted.
  Records the buffer dropped meanwhile show as a gap in sequence numbers: counted in
  ``nodewarden_collector_kmsg_lost_records_total``.

The record source is a parameter (:class:`RecordSource`): :class:`~nodewarden.kmsg.KmsgReader`
on ``/dev/kmsg`` in the agent, a list of recorded records in unit tests.

Other threads (the polled collectors, :mod:`nodewarden.agent.poller`) count into the same
counters and write the same ``state.json``: every "count, journal, save" step here runs under
``lock``, the lock they take too, so that a ``state.json`` written by anyone holds a cursor and
the counters it implies. The wait for records runs outside it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any, Callable, Iterable, Protocol

from nodewarden.agent import exporter as ex
from nodewarden.agent.exporter import Counters
from nodewarden.agent.state import AgentState, KmsgPosition, StateStore, event_key, journal_tail
from nodewarden.events import FaultEvent
from nodewarden.kmsg import seconds_since_boot
from nodewarden.parsing.envelope import TimeContext, ascii_uint, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser

log = logging.getLogger(__name__)

READ_LIMIT = 10_000  # records handled per batch (a batch is journaled and persisted as one)
# The ring buffer read at start is parsed and journaled this many records at a time: what is
# parsed at once is held at once, and the allocator keeps the peak (a 16 MiB ring buffer holds
# ~100,000 records).
CATCH_UP_CHUNK = 256
CURSOR_COMMIT_S = 5.0  # a cursor that moved over records without events is saved this late at most
RETRY_S = 5.0  # after a failed state.json write, the next try comes this much later at the earliest
# At start, an incomplete record (MCE head without its last line) at the end of the buffer is
# completed at once when the buffer's newest record is older than this: its lines are not coming.
STALE_HELD_S = 2.0  # = the MCE line window of nodewarden.parsing.stream (MCE_WINDOW_S)


class RecordSource(Protocol):
    """What the follower needs from a kmsg reader (KmsgReader's interface)."""

    boot_id: str | None
    overruns: int

    def read_available(self, limit: int = ...) -> list[str]: ...

    def wait(self, timeout: float) -> bool: ...


def record_head(text: str) -> tuple[int | None, int | None]:
    """(seq, usec) from a raw kmsg record ``prio,seq,usec,flags;msg``; None for a field not there
    or not a number the kernel writes (ASCII digits, below 2**64: a 400-digit usec is none)."""
    head = text.split(";", 1)[0].split(",", 3)
    return tuple(ascii_uint(head[i]) if i < len(head) else None for i in (1, 2))  # type: ignore[return-value]


def held_seqs(parser: KernelLogParser) -> tuple[int, ...]:
    """Sequence numbers of records that began events ``parser`` still holds (an MCE record
    waiting for its ``PROCESSOR`` line, the first half of a split "fallen off the bus" Xid 79).
    Such an event is counted only when completed, so the cursor must remember it."""
    return parser.pending_seqs()


def counted_before(event: FaultEvent, pos: KmsgPosition | None) -> bool:
    """True when ``event`` was already counted according to the saved position ``pos`` (same
    boot, its first record at or before the cursor and not held). ``pos`` None: nothing was."""
    if pos is None:
        return False
    seq = event.attrs.get("seq")
    if seq is None or event.attrs.get("boot_id") != pos.boot_id:
        return False
    return int(seq) <= pos.seq and int(seq) not in pos.held


class KmsgFollower:
    """The kernel-log collector of the agent.

    source: records (KmsgReader). counters: where increments go. store: journal and state.json.
    host: host label of events. gpu_of: PCI bus id -> ``gpu`` label (:class:`~nodewarden.nvml.GpuMinors`).
    boot_time: wall time of boot (kmsg stamps are seconds since boot). position: the saved cursor.
    journaled: keys (:func:`~nodewarden.agent.state.event_key`) of events counted already and
    not to be counted or journaled again; at :meth:`catch_up` the journal's events past the
    cursor are added (counted from the journal). clock: seconds since boot now
    (CLOCK_BOOTTIME), to tell at start whether the newest record is old. lock: held while
    counting, journaling and saving (shared with the poller). observer: sees the events counted
    (the flash-cut detector, :class:`nodewarden.agent.poller.FlashCuts`), counts what it derives
    from them and returns those events, journaled with them. accept_injected: count records that
    user space wrote into ``/dev/kmsg`` (facility not ``kern``, attribute ``injected``) as faults;
    False (the default): they count only in ``collector_kmsg_injected_records_total{kind}``, are
    not journaled and never reach the observer (only the kernel makes a fault).
    """

    def __init__(self, source: RecordSource, counters: Counters, store: StateStore, *, host: str | None,
                 gpu_of: Callable[[str | None], str], boot_time: dt.datetime | None,
                 position: KmsgPosition | None, journaled: Iterable[tuple[Any, ...]] = (),
                 clock: Callable[[], float] = seconds_since_boot, lock: threading.RLock | None = None,
                 observer: Callable[[list[FaultEvent]], list[FaultEvent]] | None = None,
                 accept_injected: bool = False) -> None:
        self.source = source
        self.accept_injected = accept_injected
        self.lock = lock if lock is not None else threading.RLock()
        self.observer = observer
        self.counters = counters
        self.store = store
        self.gpu_of = gpu_of
        self.boot_time = boot_time
        self.parser = KernelLogParser(host=host, source="kmsg", single_envelope=True)  # kmsg records only
        self.ctx = TimeContext.make(boot_time=boot_time)
        self.boot_id = source.boot_id
        same_boot = position is not None and position.boot_id == source.boot_id
        if position is not None and not same_boot:
            log.info("boot id changed (%s -> %s): counting the whole kernel ring buffer",
                     position.boot_id, source.boot_id)
        self.resume = position if same_boot else None
        self.journaled = frozenset(journaled) if same_boot else frozenset()
        self.seq: int | None = position.seq if same_boot and position is not None else None
        self.clock = clock
        self.last_record_time: dt.datetime | None = None
        self.last_record_mono: float | None = None  # kmsg stamp (s since boot) of the newest record
        self.events_counted = 0
        self._overruns_seen = source.overruns
        self._counts_dirty = False  # counters changed since the last state.json write
        self._cursor_dirty = False  # only the cursor moved
        self._saved_at = time.monotonic()
        self._retry_at = 0.0
        self._journal_later: list[FaultEvent] | None = None  # events to journal at the end of the catch-up

    # -- one batch -------------------------------------------------------------------------
    def catch_up(self) -> int:
        """At start: read the whole ring buffer, count what was not counted before, persist.
        Returns events counted. Raises OSError from the source."""
        t0 = time.monotonic()
        records: list[str] = []
        while True:
            batch = self.source.read_available(100_000)
            if not batch:
                break
            records.extend(batch)
        with self.lock:
            return self._catch_up(records, t0)

    def _catch_up(self, records: list[str], t0: float) -> int:
        if self.resume is not None and records:
            newest = max((s for s in (record_head(r)[0] for r in records) if s is not None), default=None)
            if newest is not None and newest < self.resume.seq and self.boot_id is not None:
                # The same boot (its id is known and equal): sequence numbers never go back, so
                # the cursor is none the agent wrote. The journal says what was counted.
                top = max((int(e.attrs["seq"]) for e in journal_tail(self.store.dir, self.boot_id, None,
                                                                      self.boot_time)), default=None)
                at = top if top is not None else newest
                log.error("saved cursor %d is past the kernel ring buffer's end %d in the same boot %s: "
                          "not a cursor the agent wrote; resuming after seq %d (%s)", self.resume.seq, newest,
                          self.boot_id, at, "the newest journaled record" if top is not None else "the buffer's end")
                self.resume = KmsgPosition(self.boot_id, at)
                self.journaled, self.seq = frozenset(), at
            elif newest is not None and newest < self.resume.seq:
                log.info("kernel ring buffer ends at seq %d, before the saved cursor %d: a reboot; "
                         "counting the whole buffer", newest, self.resume.seq)
                self.resume, self.journaled, self.seq = None, frozenset(), None
        n = self._count_journal_tail()
        # parsed a chunk at a time (the peak stays small), journaled at once (one append, one fsync)
        self._journal_later = []
        try:
            for i in range(0, len(records), CATCH_UP_CHUNK):
                n += len(self.handle(records[i:i + CATCH_UP_CHUNK]))
        finally:
            held, self._journal_later = self._journal_later, None
            if held:
                self.store.journal(held)
        if held_seqs(self.parser) and (self.last_record_mono is None
                                       or self.clock() - self.last_record_mono > STALE_HELD_S):
            n += len(self.take(self.parser.flush()))
        self.commit(force=True)
        self._timing(t0)
        return n

    def _count_journal_tail(self) -> int:
        """Count the journaled events of this boot the saved cursor does not count (a crash
        between the journal append and ``state.json``, or ``state.json`` lost): from the
        journal, which is the authority past the cursor (:func:`~nodewarden.agent.state.journal_tail`).
        Their keys go into :attr:`journaled`, so the replay neither counts nor journals them
        again. The flash-cut observer sees them (what it derives is journaled already)."""
        tail = journal_tail(self.store.dir, self.boot_id, self.resume, self.boot_time)
        if not self.accept_injected:  # journaled by a run that accepted them: no fault now either
            tail = [e for e in tail if not e.attrs.get("injected")]
        if not tail:
            return 0
        for e in tail:
            self.counters.add_all(ex.increments(e, self.gpu_of))
        if self.observer is not None:
            self.observer(tail)
        self.events_counted += len(tail)
        self.journaled = self.journaled | {k for k in map(event_key, tail) if k is not None}
        top = max(int(e.attrs["seq"]) for e in tail)
        if self.seq is None or top > self.seq:
            self.seq = top  # read before the crash: a gap up to here is no loss
        self._counts_dirty = True
        log.info("journal: %d event(s) of this boot past the saved cursor %s counted from the journal",
                 len(tail), f"{self.resume.seq}" if self.resume is not None else "(none)")
        return len(tail)

    def idle_timeout(self, flush_s: float) -> float | None:
        """How long :meth:`poll` may wait for records: ``flush_s`` while the parser holds an
        incomplete record (it is flushed when nothing came for that long); the time left until a
        moved cursor is due for ``state.json`` (or a failed write for its retry); else None, no
        limit (an idle follower then costs no wake-up at all)."""
        if held_seqs(self.parser):
            return flush_s
        if self._counts_dirty or self._cursor_dirty:
            now = time.monotonic()
            due = max(self._retry_at, self._saved_at + CURSOR_COMMIT_S if not self._counts_dirty else now)
            return max(0.05, due - now)
        return None

    def poll(self, timeout: float | None = 0.5, wake_fd: int | None = None) -> int:
        """Wait up to ``timeout`` seconds (None: no limit) for records, or until ``wake_fd`` is
        readable (a source's ``wait(timeout, wake_fd)``); handle and persist what came. When
        nothing came and the parser holds an incomplete record, flush it (an MCE record completes
        on idle). Returns events counted. Raises OSError from the source."""
        ready = self.source.wait(timeout) if wake_fd is None else self.source.wait(timeout, wake_fd)
        t0 = time.monotonic()
        n = 0
        worked = True
        with self.lock:
            if ready:
                n = len(self.handle(self.source.read_available(READ_LIMIT)))
            elif held_seqs(self.parser):
                n = len(self.take(self.parser.flush()))
            else:
                worked = False
            self.commit()
        if worked:
            self._timing(t0)
        return n

    def handle(self, records: list[str]) -> list[FaultEvent]:
        """Parse raw records, then :meth:`take` the events. Returns the events counted.
        Call with :attr:`lock` held."""
        events: list[FaultEvent] = []
        lost = 0
        for text in records:
            seq, usec = record_head(text)
            if seq is not None:
                if self.seq is not None and seq > self.seq + 1:
                    lost += seq - self.seq - 1
                if self.seq is None or seq > self.seq:
                    self.seq = seq
            if usec is not None:
                self.last_record_mono = usec / 1e6
                if self.boot_time is not None:
                    self.last_record_time = self.boot_time + dt.timedelta(microseconds=usec)
            rec = parse_kmsg_record(text, self.ctx, self.boot_id)
            if rec is not None:
                events.extend(self.parser.feed(rec))
        if lost:
            log.warning("/dev/kmsg: %d record(s) lost (sequence gap)", lost)
            self.counters.add(ex.LOST, (), float(lost))
        overruns = self.source.overruns - self._overruns_seen
        if overruns:
            self.counters.add(ex.OVERRUNS, (), float(overruns))
            self._overruns_seen = self.source.overruns
        if lost or overruns:
            self._counts_dirty = True
        elif records:
            self._cursor_dirty = True
        return self.take(events)

    def take(self, events: list[FaultEvent]) -> list[FaultEvent]:
        """Count the events not counted before this start and journal the ones not journaled yet
        (with what the observer derived from them). Returns the events counted. Call with
        :attr:`lock` held."""
        new = [e for e in events if not counted_before(e, self.resume)]
        if self.journaled:  # counted from the journal at start (_count_journal_tail)
            new = [e for e in new if event_key(e) not in self.journaled]
        if not self.accept_injected:
            new = self._set_aside_injected(new)
        for e in new:
            self.counters.add_all(ex.increments(e, self.gpu_of))
        self.events_counted += len(new)
        to_journal = new
        if new and self.observer is not None:
            to_journal = to_journal + self.observer(new)
        if to_journal:
            if self._journal_later is not None:  # catch-up: journaled once, at its end
                self._journal_later.extend(to_journal)
            else:
                self.store.journal(to_journal)
        if new:
            self._counts_dirty = True
        return new

    def _set_aside_injected(self, events: list[FaultEvent]) -> list[FaultEvent]:
        """The events of kernel records; those of records user space wrote are counted in
        :data:`~nodewarden.agent.exporter.INJECTED` by kind and dropped."""
        kernel = [e for e in events if not e.attrs.get("injected")]
        if len(kernel) != len(events):
            for e in events:
                if e.attrs.get("injected"):
                    self.counters.add(ex.INJECTED, (e.kind,), 1.0)
            self._counts_dirty = True
        return kernel

    def position(self) -> KmsgPosition | None:
        """The cursor to save now."""
        if self.seq is None:
            return None
        return KmsgPosition(self.boot_id, self.seq, held_seqs(self.parser))

    def commit(self, force: bool = False) -> bool:
        """Write ``state.json`` (cursor + counters) when due. True when written.

        Due: at once when counters changed (they and the cursor must reach the disk together);
        within :data:`CURSOR_COMMIT_S` when only the cursor moved (records without events: a
        crash then only re-reads them); after a failed write, not before :data:`RETRY_S`.
        """
        with self.lock:
            return self._commit(force)

    def _commit(self, force: bool) -> bool:
        now = time.monotonic()
        due = force or (now >= self._retry_at and (
            self._counts_dirty or (self._cursor_dirty and now - self._saved_at >= CURSOR_COMMIT_S)))
        if not due:
            return False
        ok = self.store.save(AgentState(kmsg=self.position(), counters=self.counters.to_json()))
        self.counters.set(ex.STATE_ERRORS, (), float(self.store.write_errors))
        if ok:
            self._counts_dirty = self._cursor_dirty = False
            self._saved_at = now
            self._retry_at = 0.0
        else:
            self._retry_at = now + RETRY_S
        return ok

    def _timing(self, t0: float) -> None:
        self.counters.set(ex.DURATION, (ex.KERNEL_LOG,), time.monotonic() - t0)

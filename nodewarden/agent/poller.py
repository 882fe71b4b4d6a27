"""The polled collectors (NVML, sysfs InfiniBand/EDAC/PCIe/net): called every
``poll_interval_seconds`` one after another in a :class:`Runner` thread, each with a timeout
(:meth:`Poller.poll`; a new runner goes on when a call hangs), isolated from the scrape and from
each other (the contract: :mod:`nodewarden.collectors.base`;
the list: :mod:`nodewarden.collectors`, built by :func:`build_collectors`).

Per collector, per poll:

* ``collect()`` returns within ``collector_timeout_seconds``: its snapshot becomes the one the
  scrape serves, ``nodewarden_collector_success{collector}`` 1, ``..._duration_seconds`` and
  ``..._last_success_timestamp_seconds`` set, its events counted and journaled.
* it raises: success 0, the error logged (once per failing spell), the last good snapshot
  still served.
* it does not return in time (an NVML call on a dying GPU can block for minutes): success 0,
  logged, the last good snapshot still served. Its runner thread is left blocking (the next
  collectors are called by a new one); no new call starts
  until it returns, so a wedged driver costs one thread, not one per poll. When the call
  returns at last, its result is taken as any other (events are never dropped: a collector
  reports events since its previous call) and the collector recovers. A thread still blocked
  when the agent stops does not hold its exit (a daemon thread: :class:`Runner`).

The scrape reads the last snapshots under a lock no collector call ever holds: it answers at
once whatever the collectors do.

Events (from the collectors and from the kernel-log follower) also go through the flash-cut
detector (:class:`FlashCuts`): kernel-log and sysfs IB/net link events through
``observe_event``, after every poll of a collector that gives port records (a
:class:`~nodewarden.collectors.base.PortSource`: the InfiniBand collector) its ``ports()``
through ``observe_port``. Its flash-cut and outage events are journaled, counted in
``collector_events_total{collector="flash_cut"}``, and its per-port counts become
``nodewarden_ib_flash_cuts_total`` / ``nodewarden_ib_link_outages_total``, persisted in
``state.json`` like the other counters.

The polled collectors' events go through the AER reconciler (:mod:`nodewarden.agent.aer`)
first: a sysfs ``pcie_aer`` event (the pcie collector's: a rise of a function's AER record
count) is counted only for the records the kernel log did not print, once their wait for it is
over; every other event passes at once. The rule is the event's kind, not the collector's name.

Restart semantics of polled events: they are journaled, then counted and saved with
``state.json`` (under the agent's state lock). A crash between the two leaves an event in the
journal that the restarted counters lack; the collectors' own counter samples (``link_downed``,
ECC counts) are the authoritative totals. The detector's state (a port down, waiting to come
back) does not survive a restart: a drop that spans one is not classified.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from nodewarden import collectors as registry
from nodewarden import events as ev
from nodewarden.agent import exporter as ex
from nodewarden.agent.aer import AerReconciler
from nodewarden.agent.exporter import Counters, PolledSample
from nodewarden.agent.state import StateStore
from nodewarden.collectors.base import Collector, PortSource, Snapshot
from nodewarden.events import FaultEvent, iso_utc
from nodewarden.parsing.flashcut import FlashCutDetector

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 10.0
COLLECTOR_TIMEOUT_S = 5.0
FLASH_CUT = "flash_cut"  # ``collector`` label of the flash-cut detector's events
# Event kinds the flash-cut detector is shown (port and netdev carrier changes).
LINK_KINDS = frozenset({ev.IB_LINK_DOWN, ev.IB_LINK_UP, ev.IB_PORT_STATE, ev.NET_LINK_DOWN, ev.NET_LINK_UP})


class Detector(Protocol):
    """What the agent needs of :class:`nodewarden.parsing.flashcut.FlashCutDetector`."""

    def observe_event(self, event: FaultEvent, now: float) -> list[FaultEvent]: ...

    def observe_port(self, device: str, port: Any, active: bool | None, link_downed: Any,
                     now: float) -> list[FaultEvent]: ...

    def counts(self) -> dict[tuple[Any, Any], dict[str, int]]: ...


# ---------------------------------------------------------------------------------------------
# Flash cuts

class FlashCuts:
    """The flash-cut detector, fed by every thread, its counts turned into persisted counters.

    ``now`` passed to the detector is Unix time in seconds (float): ``clock()`` for port polls,
    the event's own time for a dated event (kernel-log events replayed at start come with their
    original times), ``clock()`` for an undated one. A RoCE port's netdev (``netdev`` of a
    port reading) is mapped to its RDMA port (``map_netdev``) so that the netdev's carrier
    events count for that port. Counts the detector keeps for a netdev it could not map (a
    plain Ethernet interface: port None) are not exported as ``ib_`` series; their events are
    still journaled and counted in ``collector_events_total{collector="flash_cut"}``. Derived
    events without a host get ``host``. Never raises: a detector error is logged and costs that
    observation only.
    """

    def __init__(self, detector: Detector, counters: Counters, clock: Callable[[], float] = time.time,
                 host: str | None = None) -> None:
        self.detector = detector
        self.counters = counters
        self.clock = clock
        self.host = host
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, float]] = {}  # counts() already added
        self._mapped: dict[str, tuple[str, int]] = {}
        self._errors = 0

    def observe_events(self, events: Iterable[FaultEvent]) -> list[FaultEvent]:
        """Show the link events among ``events`` to the detector; count and return what it derives."""
        out: list[FaultEvent] = []
        with self._lock:
            for e in events:
                if e.kind in LINK_KINDS:
                    now = e.time.timestamp() if e.time is not None else self.clock()
                    out.extend(self._call("observe_event", self.detector.observe_event, e, now))
            return self._count(out)

    def observe_ports(self, ports: Iterable[Any]) -> list[FaultEvent]:
        """Show one poll of the InfiniBand ports: records with ``device``, ``port``, ``active``
        (:func:`nodewarden.sysfs.infiniband.port_active`, None when the state was unreadable),
        ``link_downed`` and, optionally, ``netdev`` (:class:`nodewarden.sysfs.infiniband.Port`)."""
        out: list[FaultEvent] = []
        with self._lock:
            now = self.clock()
            for p in ports:
                netdev = getattr(p, "netdev", None)
                mapper = getattr(self.detector, "map_netdev", None)
                if netdev and mapper is not None and self._mapped.get(netdev) != (p.device, p.port):
                    self._call("map_netdev", mapper, netdev, p.device, p.port)
                    self._mapped[netdev] = (p.device, p.port)
                out.extend(self._call("observe_port", self.detector.observe_port, p.device, p.port, p.active,
                                      p.link_downed, now))
            return self._count(out)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> list[FaultEvent]:
        try:
            return list(fn(*args) or [])
        except Exception:
            self._errors += 1
            if self._errors <= 5:
                log.exception("flash-cut detector: %s failed", what)
            return []

    def _count(self, derived: list[FaultEvent]) -> list[FaultEvent]:
        derived = [e if e.host is not None or self.host is None else dataclasses.replace(e, host=self.host)
                   for e in derived]
        for e in derived:
            self.counters.add(ex.EVENTS, (FLASH_CUT, e.kind))
        try:
            counts = self.detector.counts()
        except Exception:
            log.exception("flash-cut detector: counts() failed")
            return derived
        for (device, port), c in counts.items():
            if port is None:
                continue  # a netdev not tied to an RDMA port
            key = (str(device), str(port))
            cuts, outages = float(c.get("flash_cuts", 0)), float(c.get("outages", 0))
            old_cuts, old_outages = self._seen.get(key, (0.0, 0.0))
            # max(): a detector count never takes a persisted counter down
            self.counters.add(ex.FLASH_CUTS, key, max(0.0, cuts - old_cuts))
            self.counters.add(ex.OUTAGES, key, max(0.0, outages - old_outages))
            self._seen[key] = (max(cuts, old_cuts), max(outages, old_outages))
        return derived


def load_detector(max_seconds: float) -> Detector | None:
    """A :class:`~nodewarden.parsing.flashcut.FlashCutDetector` for ``max_seconds`` (a port back
    within that many seconds had a flash cut), or None (logged) when its constructor refuses it."""
    try:
        return FlashCutDetector(max_seconds=max_seconds)
    except Exception:
        log.exception("flash-cut detection disabled: the detector cannot be built")
        return None


# ---------------------------------------------------------------------------------------------
# Counting and journaling the polled collectors' events

class EventSink:
    """Where a polled collector's events go: counted (``collector_events_total`` by collector and
    kind), shown to the flash-cut detector, journaled with what it derives, then ``save()``
    (``state.json``), all under ``lock`` (the agent's state lock, shared with the follower).

    An event without a host gets ``host``; one without a time, now (a copy: the collector's
    object is not changed). ``aer``: every polled collector's events go through it first
    (:class:`nodewarden.agent.aer.AerReconciler`): it holds the sysfs ``pcie_aer`` events (a
    rise of a function's AER record count, which the kernel log usually prints too) until
    their wait is over, and passes the others at once; a held event is counted under the
    collector that gave it, whichever collector's poll releases it. None: all are counted at
    once."""

    def __init__(self, counters: Counters, store: StateStore, *, lock: threading.RLock,
                 save: Callable[[], bool], flash: FlashCuts | None = None, host: str | None = None,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                 aer: AerReconciler | None = None) -> None:
        self.counters = counters
        self.store = store
        self.lock = lock
        self.save = save
        self.flash = flash
        self.host = host
        self.clock = clock
        self.aer = aer
        self._held_by: dict[tuple[str, str], str] = {}  # reconciler key -> the collector whose event it holds

    def take(self, collector: str, events: Sequence[FaultEvent], ports: Sequence[Any] | None = None) -> int:
        """Count and journal ``events`` of ``collector`` and show ``ports`` (the port records of
        a :class:`~nodewarden.collectors.base.PortSource`, when given) to the detector. Returns
        events counted (derived ones, and held ones released now, included)."""
        show_ports = ports is not None and self.flash is not None
        if not events and not show_ports and (self.aer is None or not self.aer.pending()):
            return 0
        now = self.clock()
        events = [e if e.host is not None and e.time is not None
                  else dataclasses.replace(e, host=e.host or self.host, time=e.time or now) for e in events]
        labelled = self._reconcile(collector, events) if self.aer is not None else [(collector, e) for e in events]
        if not labelled and not show_ports:
            return 0
        events = [e for _, e in labelled]
        with self.lock:
            for who, e in labelled:
                self.counters.add_all(ex.increments(e, lambda _pci: "", who))
            derived: list[FaultEvent] = []
            if self.flash is not None:
                derived = self.flash.observe_events(events)
                if ports is not None:
                    derived += self.flash.observe_ports(ports)
            written = list(events) + derived
            if written:
                self.store.journal(written)
                self.save()
        return len(events) + len(derived)

    def flush(self) -> int:
        """Count and journal the events the reconciler still holds (at stop)."""
        if self.aer is None:
            return 0
        events = self.aer.flush()
        if not events:
            return 0
        with self.lock:
            for e in events:
                self.counters.add_all(ex.increments(e, lambda _pci: "", self._holder(e, "")))
            self.store.journal(events)
            self.save()
        return len(events)

    def _reconcile(self, collector: str, events: list[FaultEvent]) -> list[tuple[str, FaultEvent]]:
        """``events`` through the reconciler: (collector label, event) of each event to count now."""
        assert self.aer is not None
        for e in events:
            key = self.aer.key(e)
            if key is not None:
                self._held_by[key] = collector
        return [(self._holder(e, collector), e) for e in self.aer.from_sysfs(events)]

    def _holder(self, e: FaultEvent, default: str) -> str:
        key = self.aer.key(e) if self.aer is not None else None
        return self._held_by.get(key, default) if key is not None else default


# ---------------------------------------------------------------------------------------------
# One collector, one thread

class Worker:
    """One polled collector and the state of its call: ``call()`` runs ``collector.collect()``
    (then ``ports()`` with ``with_ports``) in the calling thread, a :class:`Runner`'s, one call
    at a time; ``on_done(worker, snapshot, ports, error, seconds)`` is called in that thread when
    the call returns, however late."""

    def __init__(self, collector: Collector, name: str, with_ports: bool,
                 on_done: Callable[[Worker, Snapshot | None, list[Any] | None, BaseException | None, float], None]) -> None:
        self.collector = collector
        self.name = name
        self.with_ports = with_ports
        self.on_done = on_done
        self.done = threading.Event()  # the current call has returned (set while idle)
        self.done.set()
        self.handled = threading.Event()  # ... and its result has been handled
        self.handled.set()
        self.started_at: float | None = None  # time.monotonic() of the current call's start
        self.hung = False  # the current call overran its timeout
        self._busy = False
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._busy

    def begin(self) -> bool:
        """Claim the worker for a call (its :meth:`call` follows, in a runner); False when the
        previous call is still running."""
        with self._lock:
            if self._busy:
                return False
            self._busy = True
            self.hung = False
            self.started_at = None
            self.done.clear()
            self.handled.clear()
            return True

    def call(self) -> None:
        """The claimed call: collect, then hand the result on; never raises."""
        t0 = self.started_at = time.monotonic()
        snap: Snapshot | None = None
        ports: list[Any] | None = None
        err: BaseException | None = None
        try:
            snap = self.collector.collect()
            if not isinstance(snap, Snapshot):
                got = type(snap).__name__
                snap = None
                raise TypeError(f"collect() returned {got}, not a Snapshot")
            if self.with_ports:
                assert isinstance(self.collector, PortSource)
                ports = list(self.collector.ports())
        except BaseException as e:  # noqa: BLE001 - isolate everything, even SystemExit, to this collector
            err = e
        seconds = time.monotonic() - t0
        self.done.set()
        try:
            self.on_done(self, snap, ports, err, seconds)
        except Exception:
            log.exception("collector %s: handling its result failed", self.name)
        finally:
            with self._lock:
                self._busy = False
            self.handled.set()

    def release(self) -> None:
        """Give back a claim (:meth:`begin`) whose call will not be made (the agent stops)."""
        with self._lock:
            self._busy = False
        self.done.set()
        self.handled.set()

    def close(self) -> None:
        """The collector's ``close()`` when it has one and no call is running; never raises."""
        close = getattr(self.collector, "close", None)
        if callable(close) and not self._busy:
            try:
                close()
            except Exception:
                log.exception("collector %s: close() failed", self.name)


class Runner:
    """A daemon thread that calls a batch of claimed workers one after another (:meth:`go`);
    ``finished`` is set when a batch is done, ``current`` is the worker in a call.

    A daemon thread of its own, not a ``concurrent.futures.ThreadPoolExecutor(max_workers=1)``:
    the executor's threads are joined when the interpreter exits, so a call hung in a wedged
    driver would keep the stopped agent from exiting until the call returns (minutes, or never);
    a daemon thread is not waited for. :meth:`abandon_if_in` gives up on a runner whose call hangs:
    when (if) the call returns, its result is handed on as any other and the thread ends without
    calling the rest of its batch (a new runner calls them)."""

    def __init__(self, name: str = "collectors") -> None:
        self.finished = threading.Event()
        self.finished.set()
        self.current: Worker | None = None
        self.abandoned = False
        self._batch: list[Worker] = []
        self._closing: list[Worker] | None = None  # set by quit()
        self._lock = threading.Lock()  # current, abandoned, _batch, _closing
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def go(self, batch: Sequence[Worker]) -> None:
        """Call ``batch`` (workers claimed with :meth:`Worker.begin`) in order."""
        with self._lock:
            self.finished.clear()
            self._batch = list(batch)
        self._go.set()

    def abandon_if_in(self, w: Worker) -> bool:
        """Abandon the runner when ``w``'s call is the one running and has not returned; True
        then. Atomic with the runner's move to its next call: no worker of the batch is called
        by this runner after True (a new one calls them)."""
        with self._lock:
            if self.current is w and not w.done.is_set():
                self.abandoned = True
                return True
            return False

    def quit(self, close: Sequence[Worker] = ()) -> None:
        """End the thread: no further call of its batch; then ``close()`` of ``close`` (those
        idle by then)."""
        with self._lock:
            self._closing = list(close)
        self._go.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            with self._lock:
                batch, self._batch = self._batch, []
            for i, w in enumerate(batch):
                with self._lock:
                    if self._closing is not None and not self.abandoned:
                        for left in batch[i:]:
                            left.release()  # claimed, never called: idle again (and closed below)
                    if self.abandoned or self._closing is not None:
                        break
                    self.current = w
                w.call()
                with self._lock:
                    self.current = None
            with self._lock:
                abandoned, closing = self.abandoned, self._closing
            if abandoned:
                return
            self.finished.set()
            if closing is not None:
                for w in closing:
                    w.close()
                return


# ---------------------------------------------------------------------------------------------
# The poller

@dataclasses.dataclass
class Status:
    """What /healthz says of one polled collector."""

    success: bool | None = None  # None: no call has ended yet
    last_success: float | None = None  # Unix time
    error: str | None = None
    failing_since: float | None = None  # Unix time; logged once per failing spell


class Poller:
    """Polls ``collectors`` every ``interval`` seconds, each a :class:`Worker` called by a
    :class:`Runner` with a ``timeout``; serves their last good snapshots (:meth:`samples`) and health (:meth:`health`).
    ``every`` (collector name -> N, default 1): that collector runs at every Nth poll only.

    ``sink`` takes their events (None: events are dropped, for tests of the isolation alone).
    A collector that is a :class:`~nodewarden.collectors.base.PortSource` also has its port
    records shown to the flash-cut detector when the sink has one. ``wall`` gives Unix time.
    Raises ValueError for two collectors of one name, an interval or timeout not above 0, or an
    ``every`` that is no whole number >= 1 or names no collector."""

    def __init__(self, collectors: Sequence[Collector], counters: Counters, sink: EventSink | None = None, *,
                 interval: float = POLL_INTERVAL_S, timeout: float = COLLECTOR_TIMEOUT_S,
                 wall: Callable[[], float] = time.time, every: Mapping[str, int] | None = None) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be > 0")
        every = dict(every or {})
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in every.values()):
            raise ValueError(f"every: a whole number of polls >= 1 per collector (got {every})")
        self.counters = counters
        self.sink = sink
        self.interval = interval
        self.timeout = timeout
        self.wall = wall
        self._lock = threading.Lock()  # snapshots and status only; never held during a call
        self._snaps: dict[str, Snapshot] = {}
        self._status: dict[str, Status] = {}
        self.workers: list[Worker] = []
        names: set[str] = set()
        for c in collectors:
            name = str(getattr(c, "name", "") or type(c).__name__)
            if name in names:
                raise ValueError(f"two polled collectors named {name!r}")
            names.add(name)
            with_ports = isinstance(c, PortSource) and sink is not None and sink.flash is not None
            self.workers.append(Worker(c, name, with_ports, self._done))
            self._status[name] = Status()
        unknown = set(every) - names
        if unknown:
            raise ValueError(f"every: no polled collector named {', '.join(sorted(unknown))}")
        self.every = {w.name: every.get(w.name, 1) for w in self.workers}
        self._polls = 0  # polls begun: a collector runs at those whose number its `every` divides
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._runner: Runner | None = None  # the thread that calls the collectors (a new one after a hang)

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    # -- the loop ----------------------------------------------------------------------------
    def start(self) -> None:
        """Poll in a background thread (first poll at once) until :meth:`stop`."""
        self._thread = threading.Thread(target=self.run, args=(self._stop,), name="poller", daemon=True)
        self._thread.start()

    def stop(self, join_s: float = 2.0) -> None:
        """Stop polling. The runner finishes its batch, closes the collectors that are idle by
        then and ends (waited for up to ``join_s`` in all); a hung call is left to its (daemon)
        thread."""
        self._stop.set()
        end = time.monotonic() + join_s
        if self._thread is not None:
            self._thread.join(join_s)
        runner = self._runner
        if runner is not None:
            runner.quit(self.workers)
            runner.join(max(0.0, end - time.monotonic()))

    def run(self, stop: threading.Event) -> None:
        """Poll every ``interval`` (a poll that overran starts the next at once) until ``stop``."""
        next_t = time.monotonic()
        while not stop.is_set():
            self.poll(stop)
            next_t += self.interval
            now = time.monotonic()
            if next_t < now:
                next_t = now
            stop.wait(next_t - now)

    def poll(self, stop: threading.Event | None = None) -> None:
        """One poll: call each idle worker's collector in turn in the runner thread, waiting until
        the batch is done; a call that overruns its timeout is marked failed and left running
        (its runner abandoned), and the next collectors are called by a new runner. Busy (hung)
        workers are not called again.

        One after another, not all at once: the calls are Python and hold the interpreter lock
        most of the time, so concurrent calls only contend for it (measured: the same poll cost
        2.3 times the CPU when the five collectors ran at once). And in one thread, which this
        one waits for once: every thread wake-up costs CPU (~170 us on a virtual machine). A
        collector that newly hangs delays the ones after it by its timeout in that one poll;
        from the next poll on it is busy and skipped. A collector with ``every`` N runs at the
        first poll and every Nth after it; in between, its last snapshot is served."""
        batch = []
        n, self._polls = self._polls, self._polls + 1
        for w in self.workers:
            if n % self.every[w.name]:
                continue
            if w.begin():
                batch.append(w)
            else:
                log.debug("collector %s: previous call still running (%.0fs); not called again",
                          w.name, time.monotonic() - (w.started_at or time.monotonic()))
        if not batch:
            return
        runner = self._runner = self._runner if self._runner is not None else Runner()
        runner.go(batch)
        waited_for: Worker | None = None
        since = time.monotonic()
        while not runner.finished.is_set():
            if stop is not None and stop.is_set():
                return
            w, now = runner.current, time.monotonic()
            if w is not waited_for:  # the next call began (or is about to)
                waited_for, since = w, (w.started_at or now) if w is not None else now
            left = since + self.timeout - now
            if left <= 0 and w is not None and runner.abandon_if_in(w):
                self._hung(w)
                rest = batch[batch.index(w) + 1:]
                runner = self._runner = Runner()
                if not rest:
                    return
                batch = rest
                runner.go(batch)
                waited_for = None
                continue
            runner.finished.wait(min(max(left, 0.0), 0.1))

    def _hung(self, w: Worker) -> None:
        w.hung = True
        now = self.wall()
        with self._lock:
            st = self._status[w.name]
            first = st.success is not False
            st.success = False
            st.error = f"collect() did not return within {self.timeout:g}s"
            if first:
                st.failing_since = now
        self.counters.set(ex.SUCCESS, (w.name,), 0.0)
        if first:
            log.warning("collector %s: collect() did not return within %gs; serving its last snapshot, "
                        "no new call until this one returns", w.name, self.timeout)

    def _done(self, w: Worker, snap: Snapshot | None, ports: list[Any] | None, err: BaseException | None,
              seconds: float) -> None:
        now = self.wall()
        ok = err is None
        with self._lock:
            if snap is not None:
                self._snaps[w.name] = snap
            st = self._status[w.name]
            was = st.success
            st.success = ok
            if ok:
                st.last_success, st.error, st.failing_since = now, None, None
            else:
                st.error = f"{type(err).__name__}: {err}"
                if was is not False:
                    st.failing_since = now
        self.counters.set(ex.DURATION, (w.name,), seconds)
        self.counters.set(ex.SUCCESS, (w.name,), 1.0 if ok else 0.0)
        if ok:
            self.counters.set(ex.LAST_SUCCESS, (w.name,), now)
            if was is False:
                log.warning("collector %s: working again (the call took %.1fs)", w.name, seconds)
        elif was is not False:
            log.error("collector %s failed: %s: %s; serving its last snapshot", w.name,
                      type(err).__name__, err, exc_info=(type(err), err, err.__traceback__))  # type: ignore[arg-type]
        else:
            log.debug("collector %s still failing: %s", w.name, err)
        if self.sink is not None and (snap is not None or ports is not None):
            self.sink.take(w.name, snap.events if snap is not None else [], ports)

    # -- what the scrape and /healthz read ---------------------------------------------------
    def samples(self) -> list[PolledSample]:
        """The last good snapshot's samples of every collector, in collector order."""
        with self._lock:
            snaps = dict(self._snaps)
        return [(w.name, s) for w in self.workers if w.name in snaps for s in snaps[w.name].samples]

    def health(self) -> dict[str, dict[str, Any]]:
        """Per collector: ``success`` (null before the first call ends), ``last_success`` (UTC
        ISO 8601 or null), ``error``, ``running_for`` (seconds the current call has run when it
        overran its timeout, else null)."""
        out = {}
        with self._lock:
            for w in self.workers:
                st = self._status[w.name]
                ls = dt.datetime.fromtimestamp(st.last_success, dt.timezone.utc) if st.last_success else None
                running = (time.monotonic() - w.started_at) if w.hung and w.busy and w.started_at else None
                out[w.name] = {"success": st.success, "last_success": iso_utc(ls), "error": st.error,
                               "running_for": round(running, 1) if running is not None else None}
        return out


# ---------------------------------------------------------------------------------------------
# Building the collectors

def build_collectors(enabled: Iterable[str], sysfs: str | Path, host: str) -> list[Collector]:
    """The enabled polled collectors (:data:`nodewarden.collectors.REGISTRY` entries with a
    ``build``; the kernel-log collector, the follower, is not one), in registry order, on the
    sysfs root ``sysfs``; ``host`` names the host of their events. A constructor that raises
    disables that collector, with a log line. Raises KeyError for a name not in the registry
    (the configuration accepts only those)."""
    wanted = set(enabled)
    unknown = wanted - set(registry.NAMES)
    if unknown:
        raise KeyError(f"no such collector: {', '.join(sorted(unknown))}")
    out: list[Collector] = []
    for entry in registry.REGISTRY:
        if entry.name not in wanted or entry.build is None:
            continue
        try:
            out.append(entry.build(Path(sysfs), host))
        except Exception:
            log.exception("collector %s disabled: its constructor failed", entry.name)
    return out

"""One PCIe AER error, one event: the kernel log's ``pcie_aer`` records and the pcie collector's
sysfs counters (:mod:`nodewarden.collectors.pcie`) reconciled.

The kernel sees an AER error record once and reports it twice: it adds one to the function's
``aer_dev_<severity>`` counters (``TOTAL_ERR_*`` and a count per error bit) and then, unless
rate-limited, prints the record (``pci_dev_aer_stats_incr()`` then ``aer_print_error()`` in
drivers/pci/pcie/aer.c; ``pci_print_aer()`` does the same for a firmware-first GHES record).
The kernel-log event is the better one (error bits, TLP header, the ``received`` line, the
recovery that follows), so it is *the* event; the pcie collector's rise is a candidate that
stands for the records the log did not print (rate-limited, lost in an overrun, or
``/dev/kmsg`` not followed at all).

Matching, per (PCI function, severity) (the function the record is about: the ``PCIe Bus
Error`` line's prefix, whose counters the kernel raised; severity ``corrected``/``non_fatal``/
``fatal``):

* a kernel-log record that arrives is remembered for ``window_s`` (the pcie collector's
  period, ``poll_every.pcie`` polls, plus :data:`SLACK_S`; older records, replayed from the
  ring buffer at start, are not);
* a sysfs rise of N records, seen by a poll, takes as many remembered records as it can (each
  record used once); the rest wait up to ``slack_s`` for records still to come (the kernel
  raises the counters before it prints, and the follower reads the log up to half a second
  later), each arriving record taking one;
* what is left once ``slack_s`` has passed is one ``pcie_aer`` event of source ``sysfs`` with
  ``count`` the records the log did not print (``logged`` how many it did).

So kmsg first, sysfs first or sysfs only: each record is one event in the journal and in
``collector_events_total`` (``kernel_log`` for a printed record, ``pcie`` for the others). The
kernel-log series (``pcie_aer_logged_errors_total``) count printed records only; the sysfs
counter samples (``pcie_aer_errors_total``) count them all. A candidate still waiting when the
agent stops is emitted then (:meth:`AerReconciler.flush`); one waiting at a crash is lost as
an event (the counters keep it: the next start's first poll is a new baseline).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Callable, Iterable

from nodewarden import events as ev
from nodewarden.events import FaultEvent

SLACK_S = 3.0  # how long a sysfs rise waits for its kernel-log record, and how much older than a poll's interval a record may be
MAX_REMEMBERED = 10_000  # kernel-log records remembered at most (an AER storm on a root port the collector does not read)


def window_for(poll_interval_s: float, pcie_every: int) -> float:
    """How long a kernel-log record stays matchable (:class:`AerReconciler`'s ``window_s``), in
    seconds: a sysfs rise shows at the pcie collector's next poll, ``pcie_every`` agent polls of
    ``poll_interval_s`` apart, plus :data:`SLACK_S`."""
    return pcie_every * poll_interval_s + SLACK_S


@dataclasses.dataclass
class _Pending:
    deadline: float
    event: FaultEvent
    records: int  # records of the rise
    left: int  # not yet matched by a kernel-log record


class AerReconciler:
    """See the module docstring. ``window_s``: how long a kernel-log record stays matchable (the
    pcie collector's period plus ``slack_s``); ``slack_s``: how long a sysfs rise waits; ``clock``: Unix
    time (the kernel-log events' ``time`` is compared with it). Thread-safe."""

    def __init__(self, window_s: float, slack_s: float = SLACK_S, clock: Callable[[], float] = time.time,
                 max_remembered: int = MAX_REMEMBERED) -> None:
        self.window_s = window_s
        self.slack_s = slack_s
        self.clock = clock
        self.max_remembered = max_remembered
        self._lock = threading.Lock()
        self._logged: dict[tuple[str, str], deque[float]] = {}
        self._n_logged = 0
        self._pending: list[_Pending] = []

    @staticmethod
    def key(e: FaultEvent) -> tuple[str, str] | None:
        """(PCI function, severity) of a ``pcie_aer`` event, or None."""
        if e.kind != ev.PCIE_AER:
            return None
        pci = e.device or e.pci_bus_id
        sev = e.attrs.get("severity")
        if not pci or not isinstance(sev, str):
            return None
        return (pci.lower(), sev)

    def observe_kernel(self, events: Iterable[FaultEvent]) -> list[FaultEvent]:
        """Note the kernel-log ``pcie_aer`` events among ``events`` (counted by the follower).
        Returns ``[]`` (the follower's observer signature: nothing derived)."""
        with self._lock:
            now = self.clock()
            for e in events:
                k = self.key(e)
                if k is None or e.source == "sysfs":
                    continue
                t = e.time.timestamp() if e.time is not None else now
                if t < now - self.window_s:
                    continue  # replayed from the ring buffer at start: older than any rise to come
                p = next((p for p in self._pending if p.left > 0 and self.key(p.event) == k), None)
                if p is not None:
                    p.left -= 1  # a rise seen first, its record printed now
                    continue
                if self._n_logged >= self.max_remembered:
                    self._prune(now, force=True)
                self._logged.setdefault(k, deque()).append(t)
                self._n_logged += 1
        return []

    def from_sysfs(self, events: Iterable[FaultEvent]) -> list[FaultEvent]:
        """The events of one polled collector's poll to count now: the non-AER ones as they are,
        its ``pcie_aer`` candidates held (see the module docstring), and earlier candidates
        whose wait is over, with the records the log did not print."""
        out: list[FaultEvent] = []
        with self._lock:
            now = self.clock()
            self._prune(now)
            for e in events:
                k = self.key(e)
                if k is None:
                    out.append(e)
                    continue
                records = e.attrs.get("count")
                records = records if isinstance(records, int) and not isinstance(records, bool) and records > 0 else 1
                logged = self._logged.get(k)
                left = records
                while left and logged:
                    logged.popleft()
                    self._n_logged -= 1
                    left -= 1
                if logged is not None and not logged:
                    del self._logged[k]
                if left:
                    self._pending.append(_Pending(now + self.slack_s, e, records, left))
            out.extend(self._take(lambda p: p.deadline <= now))
        return out

    def flush(self) -> list[FaultEvent]:
        """Every candidate still waiting, with its unmatched records (at stop)."""
        with self._lock:
            return self._take(lambda p: True)

    def pending(self) -> int:
        """Candidates waiting."""
        with self._lock:
            return len(self._pending)

    def _take(self, due: Callable[[_Pending], bool]) -> list[FaultEvent]:
        out, keep = [], []
        for p in self._pending:
            if not due(p):
                keep.append(p)
            elif p.left > 0:
                attrs = dict(p.event.attrs, count=p.left, logged=p.records - p.left)
                out.append(dataclasses.replace(p.event, attrs=attrs, json_cache=None))
        self._pending = keep
        return out

    def _prune(self, now: float, force: bool = False) -> None:
        """Forget records older than the window; with ``force`` (the bound reached), the older
        half of those left too."""
        self._drop_before(now - self.window_s, inclusive=False)
        if force and self._n_logged >= self.max_remembered:
            times = sorted(t for q in self._logged.values() for t in q)
            self._drop_before(times[len(times) - self.max_remembered // 2 - 1], inclusive=True)

    def _drop_before(self, cutoff: float, inclusive: bool) -> None:
        for k in list(self._logged):
            q = self._logged[k]
            while q and (q[0] < cutoff or (inclusive and q[0] == cutoff)):
                q.popleft()
                self._n_logged -= 1
            if not q:
                del self._logged[k]

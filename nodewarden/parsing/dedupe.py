"""Count each kernel record once when it reaches us through several files.

The same printk is often kept in ``kern.log``, ``syslog`` and a ``journalctl`` export of the same
host. Those copies are one event; but two identical lines the kernel printed (an Xid 32 twice
in the same microsecond range) are two. The rule: an event from input A is a copy when an
event from another input B has the same host, kind and message at the same time (same
monotonic stamp, or wall times within :data:`WALL_SLACK_S`) and has not been paired with
another copy from A already. Within one input nothing is ever dropped.
"""

from __future__ import annotations

import collections
from typing import Iterable, Iterator

from nodewarden.events import FaultEvent

WALL_SLACK_S = 1.0


class CopyDeduper:
    """Streaming de-duplicator. ``accept(event, input_id)`` is True for the first copy.

    Entries are bucketed by (host, kind, message) plus their monotonic stamp or wall second;
    within a bucket each input keeps its entries in order, and a pointer per (bucket, other
    input, this input) marks the next entry not yet paired, so each call costs O(inputs).
    """

    def __init__(self) -> None:
        self._buckets: dict[tuple, dict[str, list[_Entry]]] = {}
        self._ptr: dict[tuple, int] = {}
        self.dropped = 0

    def accept(self, e: FaultEvent, input_id: str, scope: str | None = None) -> bool:
        """``scope`` stands for the host when the event names none (the input's directory): two
        host-less files are copies of one log only when they lie side by side, never when they
        are two nodes' ``dmesg.log``."""
        base = (e.host if e.host is not None else ("scope", scope), e.kind, " ".join(e.message.split()))
        wall = e.time.timestamp() if e.time is not None else None
        mono = e.monotonic
        keys: list[tuple] = []
        if mono is not None:
            keys.append(base + ("m", round(mono * 1e6)))
        if wall is not None:
            sec = int(wall)
            keys += [base + ("w", sec), base + ("w", sec - 1), base + ("w", sec + 1)]
        for key in keys:
            bucket = self._buckets.get(key)
            if not bucket:
                continue
            for other, entries in bucket.items():
                if other == input_id:
                    continue
                pkey = (key, other, input_id)
                idx = self._ptr.get(pkey, 0)
                # An entry sits in its monotonic and its wall bucket: the ``paired`` mark keeps it from
                # being taken twice by the same input through both.
                while idx < len(entries) and (input_id in entries[idx].paired or not entries[idx].matches(mono, wall)):
                    idx += 1
                if idx < len(entries):
                    entries[idx].paired.add(input_id)
                    self._ptr[pkey] = idx + 1
                    self.dropped += 1
                    return False
                self._ptr[pkey] = idx
        entry = _Entry(mono, wall)
        if mono is not None:
            self._buckets.setdefault(keys[0], {}).setdefault(input_id, []).append(entry)
        if wall is not None:
            self._buckets.setdefault(base + ("w", int(wall)), {}).setdefault(input_id, []).append(entry)
        return True


class _Entry:
    __slots__ = ("mono", "wall", "paired")

    def __init__(self, mono: float | None, wall: float | None) -> None:
        self.mono, self.wall = mono, wall
        self.paired: set[str] = set()  # inputs whose copy of this record has been dropped

    def matches(self, mono: float | None, wall: float | None) -> bool:
        """Same record: equal monotonic stamps, or wall times within the slack when one side
        has no monotonic stamp (two different monotonic stamps are two records)."""
        if self.mono is not None and mono is not None:
            return abs(self.mono - mono) < 1e-6
        return self.wall is not None and wall is not None and abs(self.wall - wall) <= WALL_SLACK_S


def dedupe(pairs: Iterable[tuple[FaultEvent, str]]) -> Iterator[FaultEvent]:
    """Events with cross-input copies removed, in input order."""
    d = CopyDeduper()
    for e, input_id in pairs:
        if d.accept(e, input_id):
            yield e

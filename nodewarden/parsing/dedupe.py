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
    """Streaming de-duplicator. ``accept(event, input_id)`` is True for the first copy."""

    def __init__(self) -> None:
        # (host, kind, message) -> [(input_id, mono, wall, paired_inputs)]
        self._seen: dict[tuple, list[tuple[str, float | None, float | None, set[str]]]] = collections.defaultdict(list)
        self.dropped = 0

    def accept(self, e: FaultEvent, input_id: str) -> bool:
        key = (e.host, e.kind, " ".join(e.message.split()))
        wall = e.time.timestamp() if e.time is not None else None
        for other_input, mono, other_wall, paired in self._seen[key]:
            if other_input == input_id or input_id in paired:
                continue
            same_mono = mono is not None and e.monotonic is not None and abs(mono - e.monotonic) < 1e-6
            same_wall = wall is not None and other_wall is not None and abs(wall - other_wall) <= WALL_SLACK_S
            if same_mono or (same_wall and (mono is None or e.monotonic is None)):
                paired.add(input_id)
                self.dropped += 1
                return False
        self._seen[key].append((input_id, e.monotonic, wall, set()))
        return True


def dedupe(pairs: Iterable[tuple[FaultEvent, str]]) -> Iterator[FaultEvent]:
    """Events with cross-input copies removed, in input order."""
    d = CopyDeduper()
    for e, input_id in pairs:
        if d.accept(e, input_id):
            yield e

"""The kernel ring buffer: the ``/dev/kmsg`` reader, the boot id, and the two clocks of boot.

``/dev/kmsg`` (Documentation/ABI/testing/dev-kmsg) hands out one record per ``read()``:
``prio,seq,usec,flags[,...];message`` with `` KEY=value`` lines after it. ``usec`` counts on
CLOCK_BOOTTIME, so a record's wall time is the wall time of boot plus its stamp:
:func:`seconds_since_boot` is that clock now, :func:`boot_wall_time` the wall time it started.

The reader keeps no position: the agent's cursor is :class:`nodewarden.agent.state.KmsgPosition`,
which the follower (:mod:`nodewarden.agent.follower`) applies to the events it parses.
Paths are parameters, so tests read the real device and recorded records through the same code.
"""

from __future__ import annotations

import datetime as dt
import errno
import logging
import os
import select
import time
from pathlib import Path
from typing import Iterable, Iterator

from nodewarden.events import FaultEvent
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"  # Documentation/admin-guide/sysctl/kernel.rst: random
READ_BYTES = 16384  # one read() returns one record; the kernel's records are under 8 KiB (CONSOLE_EXT_LOG_MAX)


def read_boot_id(path: str = BOOT_ID) -> str | None:
    """The kernel's boot id (a UUID text, new at each boot) from ``path``, or None when it is
    unreadable or empty."""
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def seconds_since_boot() -> float:
    """Seconds since boot on CLOCK_BOOTTIME (suspend included): the clock of ``/dev/kmsg``'s
    ``usec`` field and of dmesg's ``[mono]`` stamps."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def boot_wall_time() -> dt.datetime:
    """The wall time of boot as an aware UTC datetime: now minus :func:`seconds_since_boot`.
    A record stamped ``usec`` was printed at ``boot_wall_time() + usec`` microseconds (as far as
    the wall clock has not been stepped since boot)."""
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_since_boot())


class KmsgReader:
    """Reads raw records from ``/dev/kmsg`` (Documentation/ABI/testing/dev-kmsg), without blocking.

    ``path``: the device (a copy of it in tests); ``boot_id_path``: where :attr:`boot_id` is read
    from, once, at construction (None when unreadable). A reader that falls behind the ring
    buffer gets EPIPE once: the overrun is counted in :attr:`overruns`, logged, and reading
    resumes at the oldest record still there. :attr:`records` counts the records returned.
    """

    def __init__(self, path: str = KMSG, boot_id_path: str = BOOT_ID) -> None:
        self.path = path
        self.boot_id = read_boot_id(boot_id_path)
        self.overruns = 0
        self.records = 0
        self._fd: int | None = None

    def open(self) -> None:
        """Open the device (non-blocking, from its oldest record). Raises OSError (EACCES
        without CAP_SYSLOG while ``kernel.dmesg_restrict=1``; ENOENT)."""
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    def close(self) -> None:
        """Close the device; a reader not open is left as it is."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> KmsgReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_available(self, limit: int = 100_000) -> list[str]:
        """The records readable now without blocking, oldest first, at most ``limit``: each the
        text of one ``read()`` (invalid UTF-8 replaced). Raises OSError other than EPIPE
        (counted and skipped) and EINVAL (a record larger than the buffer: skipped)."""
        assert self._fd is not None, "open() first"
        out: list[str] = []
        while len(out) < limit:
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:
                    self.overruns += 1
                    log.warning("/dev/kmsg overrun: records were lost before they could be read (%d so far)",
                                self.overruns)
                    continue
                if e.errno == errno.EINVAL:  # record larger than the buffer: cannot happen at 16 KiB
                    continue
                raise
            if not data:
                break
            self.records += 1
            out.append(data.decode("utf-8", "replace"))
        return out

    def wait(self, timeout: float | None, wake_fd: int | None = None) -> bool:
        """Block until a record is readable, ``timeout`` seconds pass (None: no limit) or
        ``wake_fd`` (the read end of a pipe, e.g. the one ``signal.set_wakeup_fd`` writes to)
        is readable, which is then drained (select(2)). True when a record is readable.

        Every wake-up costs CPU (on a virtual machine measured at ~170 us of it, the price of
        the timer and the switch), so an idle reader should wait without a timeout and be
        woken through ``wake_fd``."""
        assert self._fd is not None, "open() first"
        fds = [self._fd] if wake_fd is None else [self._fd, wake_fd]
        r, _, _ = select.select(fds, [], [], timeout)
        if wake_fd is not None and wake_fd in r:
            try:
                while os.read(wake_fd, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        return self._fd in r


def kmsg_events(records: Iterable[str], parser: KernelLogParser, ctx: TimeContext,
                boot_id: str | None) -> Iterator[FaultEvent]:
    """The events of raw kmsg records (as :meth:`KmsgReader.read_available` returns them), fed
    to ``parser`` in order; records that are no kmsg record are skipped. The parser's held
    events are not flushed: the caller does that when the input ends."""
    for text in records:
        rec = parse_kmsg_record(text, ctx, boot_id)
        if rec is not None:
            yield from parser.feed(rec)

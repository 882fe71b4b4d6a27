"""Progress of the long commands (``simulate``, ``analyze``, ``validate``) on standard error.

One :class:`Progress` per command run, holding any number of tasks (a check, the nodes written,
the files read), each with a count ``done`` of ``total`` (nodes, bytes, a check's fraction) and a
line of text (lines written, events found, a check's phase). It draws:

* on a terminal, where ``rich`` can be imported (the ``[validate]`` extra): live ``rich.progress``
  bars with the count, elapsed time and ETA;
* elsewhere (a log file, Slurm, a pipe): one plain line per step, ``nodewarden CMD: TASK done/total
  (pct), text, 3s elapsed, ETA 12s``, at most one a second or one per 10 % of the total, the first and the
  last always;
* with ``quiet``: nothing.

Progress never goes to standard output or into a file a command writes. The agent never imports
this module (it runs ``validate --no-progress`` as a child process).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any, Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")

PLAIN_INTERVAL_S = 1.0  # plain lines: at most one a second per task...
PLAIN_STEP = 0.10  # ...unless the task advanced by this fraction of its total since its last line


def eta_seconds(elapsed_s: float, done: float, total: float | None) -> float | None:
    """Seconds left at the rate so far (``elapsed_s`` for ``done`` of ``total``), or None when
    not known (nothing done yet, no total). 0 once ``done`` reaches ``total``."""
    if total is None or total <= 0 or done <= 0 or elapsed_s < 0:
        return None
    if done >= total:
        return 0.0
    return elapsed_s * (total - done) / done


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``1h02m``; ``?`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``, ``1.0 GiB`` (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_count(done: float, total: float | None, unit: str) -> str:
    """``2/3 nodes``, ``1.5 MiB/3.0 MiB`` (unit ``bytes``), ``40%`` (unit ``fraction``, total 1)."""
    if unit == "fraction":
        return f"{done:.0%}"
    if unit == "bytes":
        return format_bytes(done) + (f"/{format_bytes(total)}" if total is not None else "")
    count = f"{done:,.0f}" + (f"/{total:,.0f}" if total is not None else "")
    return f"{count} {unit}".rstrip()


def plain_line(command: str, name: str, done: float, total: float | None, unit: str, text: str,
               elapsed_s: float) -> str:
    """The plain progress line of one task (no newline): ``nodewarden CMD: NAME COUNT (PCT), TEXT,
    2s elapsed, ETA 3s``; the percentage, times and ETA only where ``total`` is known."""
    line = f"nodewarden {command}: {name} {format_count(done, total, unit)}"
    if total and unit != "fraction":
        line += f" ({min(done / total, 1.0):.0%})"
    if text:
        line += f", {text}"
    if total:
        left = eta_seconds(elapsed_s, done, total)
        line += f", {format_duration(elapsed_s)} elapsed" + (f", ETA {format_duration(left)}" if left else "")
    return line


@dataclasses.dataclass
class _Task:
    name: str
    total: float | None
    unit: str
    started: float
    done: float = 0.0
    text: str = ""
    printed_at: float | None = None  # clock of the last plain line
    printed_done: float = -1.0  # ``done`` of the last plain line
    printed_text: str | None = None  # its text
    handle: Any = None  # rich's task id


class Progress:
    """The progress display of one command (see the module). Use as a context manager, or call
    :meth:`close` at the end; every method is a no-op once closed, or when ``quiet``.

    ``stream``: where it draws (default ``sys.stderr``, looked up when made). ``console``: a
    ``rich.console.Console`` to draw with instead (tests: ``force_terminal=True`` on a StringIO);
    ``tty``: force the choice (None: ``stream.isatty()``). ``clock``: seconds, monotonic."""

    def __init__(self, command: str, *, quiet: bool = False, stream: TextIO | None = None, console: Any = None,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = PLAIN_INTERVAL_S, step: float = PLAIN_STEP) -> None:
        self.command = command
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.interval_s, self.step = clock, interval_s, step
        self.tasks: dict[str, _Task] = {}
        self.closed = quiet
        self._rich: Any = None
        if not quiet and (console is not None or (tty if tty is not None else _isatty(self.stream))):
            self._rich = _rich_progress(self.stream, console)
        # how it draws: quiet, rich or plain
        self.mode = "quiet" if quiet else "rich" if self._rich is not None else "plain"

    def add(self, name: str, total: float | None = None, unit: str = "") -> None:
        """Start task ``name`` (a node count, bytes, ``unit="fraction"`` with ``total=1``); starting
        one that exists restarts it."""
        if self.closed:
            return
        task = _Task(name, total, unit, self.clock())
        if self._rich is not None:
            if not self.tasks:
                self._rich.start()  # drawn from the first task on
            task.handle = self._rich.add_task(name, total=total, text="", count="")
        self.tasks[name] = task

    def update(self, name: str, done: float, text: str = "", total: float | None = None, unit: str = "") -> None:
        """Task ``name`` has ``done`` of its total (or of a new ``total``); ``text``: what it is
        doing, or what it has found so far. An unknown task is started (with ``unit``)."""
        if self.closed:
            return
        task = self.tasks.get(name)
        if task is None:
            self.add(name, total, unit)
            task = self.tasks[name]
        if total is not None:
            task.total = total
        task.done, task.text = done, text
        if self._rich is not None:
            self._rich.update(task.handle, completed=done, total=task.total, text=text,
                              count="" if task.unit == "fraction" else format_count(done, task.total, task.unit))
            return
        now = self.clock()
        finished = task.total is not None and done >= task.total
        if not (task.printed_at is None or finished or now - task.printed_at >= self.interval_s
                or (task.total and (done - task.printed_done) >= self.step * task.total)):
            return
        if finished and task.printed_done >= task.total and text == task.printed_text:  # type: ignore[operator]
            return  # its last line is out (a new text at the end, a check's verdict, is shown)
        task.printed_at, task.printed_done, task.printed_text = now, done, text
        self.stream.write(plain_line(self.command, name, done, task.total, task.unit, text, now - task.started)
                          + "\n")
        self.stream.flush()

    def closing(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, then :meth:`close` once they are all taken (the bars stop before what comes
        after the reading is written)."""
        yield from items
        self.close()

    def close(self) -> None:
        """Stop drawing (the bars stay on the terminal as they were last drawn)."""
        if self.closed:
            return
        self.closed = True
        if self._rich is not None and self.tasks:
            self._rich.stop()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no isatty
        return False


def _rich_progress(stream: TextIO, console: Any) -> Any:
    """A ``rich.progress.Progress`` (not started) drawing on ``console`` (else a Console on ``stream``),
    or None when rich cannot be imported (the core install): then plain lines."""
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, Progress as RichProgress, TaskProgressColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
    except ImportError:
        return None
    return RichProgress(TextColumn("{task.description}"), BarColumn(bar_width=24), TaskProgressColumn(),
                        TextColumn("{task.fields[count]}"), TextColumn("{task.fields[text]}"), TimeElapsedColumn(),
                        TextColumn("ETA"), TimeRemainingColumn(),
                        console=console if console is not None else Console(file=stream),
                        refresh_per_second=4, redirect_stdout=False)  # stdout is the command's output


def for_simulate(progress: Progress) -> Callable[[int, int, int], None]:
    """``simulate``'s ``progress`` callback (nodes written, nodes, lines so far) drawn on
    ``progress``: task ``write``."""
    def step(done: int, total: int, lines: int) -> None:
        progress.update("write", done, f"{lines:,} lines", total=total, unit="nodes")
    return step


def for_ingest(progress: Progress) -> Callable[[Any], None]:
    """``ingest``'s ``progress`` callback (a ``nodewarden.analysis.ingest.ReadProgress``) drawn
    on ``progress``: task ``read``, bytes of the files taken of all, with the files, the events
    found so far and the last file's host."""
    def step(p: Any) -> None:
        where = f", {p.host}" if p.host else ""
        progress.update("read", p.bytes_done, f"{p.inputs_done}/{p.inputs} files, {p.events:,} events{where}",
                        total=p.bytes_total if p.bytes_total else None, unit="bytes")
    return step

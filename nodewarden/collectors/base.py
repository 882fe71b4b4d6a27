"""The contract of a polled collector (NVML, sysfs InfiniBand/EDAC/PCIe/net).

A collector is one module under ``nodewarden.collectors`` with a class implementing
:class:`Collector`. The agent calls ``collect()`` every poll interval, in a worker thread with
a timeout: a collector that raises or hangs is marked failed (``nodewarden_collector_success``
0) and the last good snapshot is served; it never blocks the scrape or the other collectors.

``collect()`` returns a :class:`Snapshot`: the current value of every series the collector
exports (:class:`Sample`), and the fault events it saw since the previous call (a counter
that rose, a GPU that was lost, a port that left ACTIVE). Absent hardware is an empty
snapshot, not an error. Roots (``sysfs``), clocks and libraries are constructor parameters so
that tests point the same code at fixture trees and at the NVML simulator.

What the agent does beyond ``collect()`` depends on what a collector declares, never on its
name: one with a ``ports()`` method (:class:`PortSource`) has its port records shown to the
flash-cut detector after every ``collect()``; one with a ``close()`` method has it called when
the agent stops. The collectors the agent knows are listed in :mod:`nodewarden.collectors`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence, runtime_checkable

from nodewarden.events import FaultEvent
from nodewarden.sysfs.attrs import printable

GAUGE, COUNTER = "gauge", "counter"


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One series value. ``name`` is the full metric name (``nodewarden_ib_port_state``; a
    counter's name ends in ``_total``), ``labels`` a tuple of (name, value) pairs in a fixed
    order, ``value`` in base units, ``kind`` gauge or counter, ``help`` the HELP text."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    kind: str = GAUGE
    help: str = ""


@dataclasses.dataclass
class Snapshot:
    """What one ``collect()`` saw: samples (the whole current state) and new events."""

    samples: list[Sample] = dataclasses.field(default_factory=list)
    events: list[FaultEvent] = dataclasses.field(default_factory=list)

    def add(self, name: str, labels: dict[str, str] | tuple[tuple[str, str], ...], value: float,
            kind: str = GAUGE, help: str = "") -> None:
        lab = tuple(labels.items()) if isinstance(labels, dict) else labels
        if not all(v.isascii() for _, v in lab):
            lab = tuple((k, printable(v)) for k, v in lab)  # a name read from a directory
        self.samples.append(Sample(name, lab, float(value), kind, help))



class Collector(Protocol):
    """A polled source. ``name`` is its registry key and the ``collector`` label of its health
    series. ``collect`` may raise or block: the agent isolates it."""

    name: str

    def collect(self) -> Snapshot: ...


@runtime_checkable
class PortSource(Protocol):
    """A collector that also gives its network ports' records, for the flash-cut detector
    (:class:`nodewarden.agent.poller.FlashCuts`): called right after each ``collect()``, in the
    same worker thread, it returns the records that ``collect()`` read (each with ``device``,
    ``port``, ``link_downed`` and ``active``: :func:`nodewarden.sysfs.infiniband.port_active`,
    None when the state is unreadable; optionally ``netdev``)."""

    def ports(self) -> Sequence[Any]: ...

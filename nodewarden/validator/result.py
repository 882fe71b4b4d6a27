"""What a validator check returns, and how a run's results map to an exit code.

A check never raises: it returns a :class:`CheckResult` whose ``status`` is one of
``pass``, ``warn``, ``fail``, ``skip`` (its hardware is absent: never counted as healthy) or
``error`` (the check itself could not run to completion).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from nodewarden import exitcodes

PASS, WARN, FAIL, SKIP, ERROR = "pass", "warn", "fail", "skip", "error"
STATUSES = (PASS, WARN, FAIL, SKIP, ERROR)


@dataclasses.dataclass
class Measurement:
    """One measured value: ``name`` (``triad_bandwidth``), ``value`` (a number), ``unit`` (``B/s``,
    ``s``, ``FLOP/s``, ``bytes``, ``ratio``...; SI base units), and the ``threshold`` it was held to
    (None when informational) with ``op`` (``>=`` or ``<=``, how value must compare)."""

    name: str
    value: float | int | str | None
    unit: str = ""
    threshold: float | int | None = None
    op: str = ">="
    device: str | None = None

    def ok(self) -> bool | None:
        """True/False against the threshold, None when there is none or no value."""
        if self.threshold is None or not isinstance(self.value, (int, float)):
            return None
        return self.value >= self.threshold if self.op == ">=" else self.value <= self.threshold


@dataclasses.dataclass
class CheckResult:
    """The outcome of one check.

    ``reason`` says in one line why the status is what it is (for a Slurm drain reason when it
    fails); ``action`` what an operator should do; ``details`` any structured extra (failing
    addresses, per-device values). ``device``: where a compute check ran (``cuda`` or ``cpu``;
    None for a check that does not compute, or did not run); ``profile``: the hardware profile
    whose thresholds it was held to.
    """

    check: str
    status: str
    reason: str = ""
    action: str = ""
    measurements: list[Measurement] = dataclasses.field(default_factory=list)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    duration_s: float = 0.0
    device: str | None = None
    profile: str | None = None

    def measure(self, name: str, value: float | int | str | None, unit: str = "", threshold: float | int | None = None,
                op: str = ">=", device: str | None = None) -> Measurement:
        m = Measurement(name, value, unit, threshold, op, device)
        self.measurements.append(m)
        return m

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def status_from_measurements(measurements: Iterable[Measurement]) -> str:
    """``fail`` when a measured value misses its threshold, else ``pass``."""
    return FAIL if any(m.ok() is False for m in measurements) else PASS


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 healthy; 1 unhealthy (a check failed: drain); 3 could not complete (a check errored and
    none failed). Skips and warnings do not make a node unhealthy."""
    statuses = {r.status for r in results}
    if FAIL in statuses:
        return exitcodes.UNHEALTHY
    if ERROR in statuses:
        return exitcodes.INCOMPLETE
    return exitcodes.OK

"""Validator output: the final table, the JSON report, the node_exporter textfile and the
one-line drain reasons.

JSON report schema (``--json FILE``), version 1::

    {
      "schema": "nodewarden.validate/1",
      "host": str, "started": ISO 8601 UTC, "finished": ISO 8601 UTC,
      "profile": str, "quick": bool,
      "device": "cuda" | "cpu" | null,    # where the compute checks ran; null: none ran (none
                                          # asked for, no GPU, or a device that could not be used)
      "device_requested": "auto" | "cuda" | "cpu",
      "exit_code": 0 | 1 | 3,
      "checks": [
        {"check": str, "status": "pass|warn|fail|skip|error", "reason": str, "action": str,
         "duration_s": float,
         "device": "cuda" | "cpu" | null,  # a compute check's device; null: not a compute check,
                                          # or it did not run
         "profile": str | null,           # the hardware profile its thresholds came from
         "measurements": [{"name": str, "value": number|str|null, "unit": str,
                           "threshold": number|null, "op": ">=" | "<=", "device": str|null}],
         "details": {...}}
      ]
    }

Units are SI base units: bytes, seconds, B/s, FLOP/s, ratio.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable, TextIO

from nodewarden.events import iso_utc
from nodewarden.validator.result import ERROR, FAIL, STATUSES, CheckResult

SCHEMA = "nodewarden.validate/1"


def build(results: list[CheckResult], host: str, profile: str, device: str | None, quick: bool,
          started: dt.datetime, finished: dt.datetime, exit_code: int, device_requested: str = "auto") -> dict[str, Any]:
    """The JSON report (schema above)."""
    return {"schema": SCHEMA, "host": host, "started": iso_utc(started), "finished": iso_utc(finished),
            "profile": profile, "device": device, "device_requested": device_requested, "quick": quick,
            "exit_code": exit_code, "checks": [r.to_dict() for r in results]}


def write_json(doc: dict[str, Any], path: str | Path) -> None:
    """Write the report to ``path``: a regular file (or a new one) atomically, a temp file
    renamed over it in the directory of the file a symlink names, so a reader never sees half a
    report; anything else (``/dev/stdout``, a FIFO, a device) is written in place, never replaced.
    Raises OSError."""
    text = json.dumps(doc, indent=2, default=str) + "\n"
    p = Path(os.path.realpath(path))
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(p, "w") as f:
            f.write(text)
        return
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, p)


def output_problem(path: str, directory: bool = False) -> str | None:
    """Why ``path`` cannot take a report (checked before the suite runs), or None. A file:
    its directory must exist and be writable (a non-regular target is written in place: it must
    be writable); ``directory``: an existing, writable directory."""
    if not path:
        return "an empty path"
    real = os.path.realpath(path)
    if directory:
        if not os.path.isdir(real):
            return f"{path}: not a directory"
        return None if os.access(real, os.W_OK) else f"{path}: not writable"
    if os.path.isdir(real):
        return f"{path}: is a directory"
    if os.path.exists(real) and not os.path.isfile(real):
        return None if os.access(real, os.W_OK) else f"{path}: not writable"
    parent = os.path.dirname(real) or "."
    if not os.path.isdir(parent):
        return f"{path}: no directory {parent}"
    return None if os.access(parent, os.W_OK) else f"{path}: directory {parent} not writable"


def _fmt(value: Any, unit: str) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    if unit in ("B/s", "FLOP/s", "bytes", "B", "bit/s", "Hz"):
        for scale, p in prefixes:
            if abs(value) >= scale:
                return f"{value / scale:.3g} {p}{unit}"
    if isinstance(value, float):
        return f"{value:.4g} {unit}".strip()
    return f"{value} {unit}".strip()


def summary_line(r: CheckResult) -> str:
    """The most telling measurement of a result, for the table."""
    for m in r.measurements:
        if m.threshold is not None:
            op = "≥" if m.op == ">=" else "≤"
            return f"{m.name} {_fmt(m.value, m.unit)} ({op} {_fmt(m.threshold, m.unit)})"
    if r.measurements:
        m = r.measurements[0]
        return f"{m.name} {_fmt(m.value, m.unit)}"
    return ""


def print_table(results: Iterable[CheckResult], stream: TextIO) -> None:
    """The final table (rich when installed, else plain text): per check its status, the device a
    compute check ran on (``cuda``/``cpu``; ``-`` when not a compute check or not run), the
    profile its thresholds came from, the most telling measurement, the reason and the time."""
    results = list(results)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None  # type: ignore[assignment]
    if Console is not None:
        console = Console(file=stream, highlight=False, width=max(100, Console(file=stream).width))
        table = Table(title="nodewarden validate")
        for col in ("check", "status", "device", "profile", "measured", "reason", "time"):
            table.add_column(col)
        colours = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim", "error": "magenta"}
        for r in results:
            table.add_row(r.check, f"[{colours[r.status]}]{r.status}[/]", r.device or "-", r.profile or "-",
                          summary_line(r), r.reason, f"{r.duration_s:.1f}s")
        console.print(table)
        return
    for r in results:
        stream.write(f"{r.check:22} {r.status:6} {r.device or '-':5} {r.profile or '-':16} {summary_line(r):48} "
                     f"{r.reason}\n")


REASON_MAX = 200  # characters of a DRAIN:/INCOMPLETE: line; the Slurm wrapper cuts again (128 by default)
ELLIPSIS = "..."  # ASCII: the Slurm wrapper keeps printable ASCII only


def cut_reason(text: str, limit: int = REASON_MAX) -> str:
    """``text`` in at most ``limit`` characters: as it is when it fits, else cut at the last
    space that leaves room for :data:`ELLIPSIS` and ended with it; a first word longer than that
    room is cut mid-word; a ``limit`` of 3 or less is cut hard, without the dots. Trailing
    spaces before the dots are dropped. The Slurm wrapper (deploy/slurm) cuts by the same rule."""
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:max(limit, 0)]
    room = limit - len(ELLIPSIS)
    space = text.rfind(" ", 0, room + 1)  # a space just after the room still ends a whole word
    head = text[:space].rstrip(" ") if space > 0 else ""
    return (head or text[:room]) + ELLIPSIS


def status_lines(results: Iterable[CheckResult], status: str) -> list[str]:
    """One line per check of ``status``, fit for a Slurm drain reason (no newlines, at most
    :data:`REASON_MAX` characters, cut at a word by :func:`cut_reason`)."""
    return [cut_reason(f"nodewarden {r.check}: {r.reason}".replace("\n", " ")) for r in results
            if r.status == status]


def drain_lines(results: Iterable[CheckResult], host: str) -> list[str]:
    """One line per failed check: the Slurm drain reason."""
    return status_lines(results, FAIL)


def incomplete_lines(results: Iterable[CheckResult], host: str) -> list[str]:
    """One line per check that could not complete (status ``error``): what the Slurm wrapper
    logs for exit 3."""
    return status_lines(results, ERROR)


def write_textfile(results: Iterable[CheckResult], directory: str | Path, finished: dt.datetime) -> Path:
    """A ``nodewarden_validator.prom`` file for node_exporter's textfile collector (written
    atomically). Series: ``nodewarden_validator_check_status{check,status}`` (1 for the current
    status), ``nodewarden_validator_check_value{check,metric,unit,device}``,
    ``nodewarden_validator_last_run_timestamp_seconds``."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    reg = CollectorRegistry()
    status = Gauge("nodewarden_validator_check_status", "Current status of each check (1 for the status it has)",
                   ["check", "status"], registry=reg)
    value = Gauge("nodewarden_validator_check_value", "Values measured by the validator's checks",
                  ["check", "metric", "unit", "device"], registry=reg)
    last = Gauge("nodewarden_validator_last_run_timestamp_seconds", "End of the last validator run (Unix time)",
                 registry=reg)
    for r in results:
        for s in STATUSES:
            status.labels(r.check, s).set(1 if r.status == s else 0)
        for m in r.measurements:
            if isinstance(m.value, (int, float)) and not isinstance(m.value, bool):
                value.labels(r.check, m.name, m.unit, m.device or "").set(float(m.value))
    last.set(finished.timestamp())
    path = Path(directory) / "nodewarden_validator.prom"
    write_to_textfile(str(path), reg)
    return path

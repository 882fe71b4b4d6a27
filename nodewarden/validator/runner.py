"""Run the checks of a suite in order, isolate their failures, hold results to a baseline."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any, Iterable

from nodewarden.validator import registry
from nodewarden.validator.base import RunContext
from nodewarden.validator.result import ERROR, FAIL, PASS, SKIP, WARN, CheckResult

BASELINE_TOLERANCE = 0.10  # a rate may fall this far below the node's own healthy baseline


def check_params(name: str, params: dict[str, Any]) -> None:
    """Validate check ``name``'s parameters before anything runs, as its ``run()`` would (its
    ``validate_params``/``checked_params``). Raises ValueError naming the parameter."""
    import os
    mod = registry.get(name)
    if hasattr(mod, "checked_params"):
        mod.checked_params(params)
    elif hasattr(mod, "validate_params"):
        if name == "cpu":
            mod.validate_params(params, sorted(os.sched_getaffinity(0)))
        else:
            mod.validate_params(params)


def params_for(name: str, ctx: RunContext) -> dict[str, Any]:
    """A check's parameters: its DEFAULTS, then QUICK (with --quick), then the profile's table
    (which carries the config file and --set overrides)."""
    mod = registry.get(name)
    params = dict(getattr(mod, "DEFAULTS", {}))
    if ctx.quick:
        params.update(getattr(mod, "QUICK", {}))
    params.update(ctx.profile.get(name, {}) or {})
    return params


def run_check(name: str, ctx: RunContext) -> CheckResult:
    """Run one check; never raises. Absent needs give ``skip``; an exception gives ``error``.

    A compute check (one that needs ``torch``) runs on the run's compute device
    (:meth:`RunContext.compute`); where there is none it is ``skip`` (no GPU on the node) or
    ``error`` (the device asked for, or the node's NVIDIA GPUs, could not be used), never run on
    the CPU unless ``--device cpu`` asked for it. Every result carries the profile it was held
    to; a compute check's result also the device it ran on (``cuda``/``cpu``, None when it did
    not run)."""
    t0 = time.monotonic()
    compute = None
    try:
        mod = registry.get(name)
        needs = tuple(getattr(mod, "NEEDS", ()))
        if "torch" in needs:
            compute = ctx.compute()
        reason = ctx.missing(tuple(n for n in needs if n != "torch"))
        if compute is not None and compute.device is None:
            result = CheckResult(name, compute.status or ERROR, reason=compute.reason, action=compute.action)
        elif reason is not None:
            result = CheckResult(name, SKIP, reason=reason)
        else:
            result = mod.run(ctx, params_for(name, ctx))
    except Exception as e:  # a check's bug or an unexpected environment: reported, not fatal
        result = CheckResult(name, ERROR, reason=f"{type(e).__name__}: {e}",
                             action="report this as a nodewarden bug with the traceback",
                             details={"traceback": traceback.format_exc(limit=8)})
    result.duration_s = round(time.monotonic() - t0, 3)
    result.profile = result.profile or ctx.profile.get("name")
    if compute is not None and result.device is None:
        result.device = compute.device
    return result


def run_suite(names: Iterable[str], ctx: RunContext) -> list[CheckResult]:
    """Results of the named checks, in order; baseline comparison applied when one is given."""
    results = []
    for name in names:
        ctx.progress(name, 0.0, "starting")
        r = run_check(name, ctx)
        if ctx.baseline is not None:
            compare_to_baseline(r, ctx.baseline)
        ctx.progress(name, 1.0, r.status)
        results.append(r)
    return results


def _key(m: Any) -> str:
    return f"{m.name}@{m.device}" if m.device else m.name


def baseline_from(results: Iterable[CheckResult]) -> dict[str, Any]:
    """A baseline document: every rate (unit ending in ``/s``) measured by a passing check."""
    doc: dict[str, Any] = {"version": 1, "checks": {}}
    for r in results:
        if r.status != PASS:
            continue
        rates = {_key(m): m.value for m in r.measurements
                 if m.unit.endswith("/s") and isinstance(m.value, (int, float))}
        if rates:
            doc["checks"][r.check] = rates
    return doc


def compare_to_baseline(r: CheckResult, baseline: dict[str, Any], tolerance: float | None = None) -> None:
    """Add ``<name>_vs_baseline`` ratios to ``r`` (threshold 1 - tolerance) and fail a passing
    check whose rate fell below its baseline."""
    tol = baseline.get("tolerance", BASELINE_TOLERANCE) if tolerance is None else tolerance
    ref = baseline.get("checks", {}).get(r.check)
    if not ref or r.status not in (PASS, WARN):
        return
    worse = []
    for m in list(r.measurements):
        base = ref.get(_key(m))
        if not isinstance(base, (int, float)) or base <= 0 or not isinstance(m.value, (int, float)):
            continue
        ratio = m.value / base
        r.measure(f"{m.name}_vs_baseline", round(ratio, 4), "ratio", threshold=round(1 - tol, 4), device=m.device)
        if ratio < 1 - tol:
            worse.append(f"{_key(m)} {ratio:.0%} of baseline")
    if worse:
        r.status = FAIL
        r.reason = "below this node's baseline: " + ", ".join(worse)
        r.action = r.action or "drain and investigate: the node was faster when its baseline was recorded"


def load_baseline(path: str | Path) -> dict[str, Any] | None:
    """The baseline at ``path``, or None when the file does not exist yet.

    Raises ValueError for a file that is not a baseline document, or whose ``tolerance`` is not
    a fraction in [0, 1)."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a nodewarden baseline (not JSON: {e})") from None
    if not isinstance(doc, dict) or "checks" not in doc:
        raise ValueError(f"{path}: not a nodewarden baseline (no 'checks' key)")
    tol = doc.get("tolerance", BASELINE_TOLERANCE)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise ValueError(f"{path}: tolerance must be a fraction from 0 to below 1 (got {tol!r})")
    return doc


__all__ = ["run_check", "run_suite", "params_for", "baseline_from", "compare_to_baseline", "load_baseline",
           "ERROR", "FAIL", "PASS", "SKIP", "WARN"]

"""``nodewarden validate``: pick the checks and the profile, run, report, map to an exit code."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import socket
import sys
from pathlib import Path
from typing import TextIO

from nodewarden import exitcodes, nvml
from nodewarden.validator import profiles, registry, report, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.result import exit_code


class _Progress:
    """The checks' progress callback (:data:`nodewarden.validator.base.Progress`) drawn by
    :class:`nodewarden.progress.Progress`: one task per check, its fraction done and its phase
    (the check's text: the bytes or passes done where it counts them); rich bars on a terminal,
    rate-limited lines elsewhere (logs, Slurm), nothing with ``--quiet``."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        from nodewarden.progress import Progress
        self.display = Progress("validate", quiet=not enabled, stream=stream)

    def __call__(self, check: str, fraction: float, text: str) -> None:
        self.display.update(check, min(max(fraction, 0.0), 1.0), text, total=1.0, unit="fraction")

    def close(self) -> None:
        self.display.close()


def parse_checks(text: str | None, quick: bool) -> list[str]:
    """``a,b`` -> names in suite order (None: the suite, or the quick one); raises ValueError
    naming an unknown check, or for a selection that names none (``""``, ``,``)."""
    if text is None:
        return list(registry.QUICK_NAMES if quick else registry.NAMES)
    wanted = [t.strip() for t in text.split(",") if t.strip()]
    if not wanted:
        raise ValueError(f"--checks {text!r} names no check; known: {', '.join(registry.NAMES)}")
    unknown = [w for w in wanted if w not in registry.NAMES]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(registry.NAMES)}")
    return [n for n in registry.NAMES if n in wanted]


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("checks:   " + ", ".join(registry.NAMES))
        print("quick:    " + ", ".join(registry.QUICK_NAMES))
        print("profiles: auto, " + ", ".join(profiles.names()))
        return exitcodes.OK
    try:
        names = parse_checks(args.checks, args.quick)
        profile = profiles.resolve(args.profile, timeout_s=args.nvml_timeout)
        sets = list(args.set or [])
        if args.storage_path:
            sets.append(f"storage.path={args.storage_path!r}".replace("'", '"'))
        profile = profiles.apply_config(profile, args.config, sets)
        for name in names:  # a parameter a check would refuse stops the run before anything runs
            try:
                runner.check_params(name, runner.params_for(name, RunContext(profile=profile, quick=args.quick)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{name}: {e}") from None
        for opt, root in (("--sysfs", args.sysfs), ("--procfs", args.procfs)):
            if not Path(root).is_dir():  # a typo would judge nothing (and mix in this machine's reads)
                raise ValueError(f"{opt} {root}: no such directory")
        for opt, path, is_dir in (("--json", args.json, False), ("--textfile", args.textfile, True)):
            problem = report.output_problem(path, is_dir) if path is not None else None
            if problem:
                raise ValueError(f"{opt}: {problem}")
        baseline = runner.load_baseline(args.baseline) if args.baseline else None
        if args.baseline and baseline is None:  # recorded after a healthy run: checked before it
            problem = report.output_problem(args.baseline)
            if problem:
                raise ValueError(f"--baseline: {problem}")
        if baseline is not None and args.tolerance is not None:
            baseline["tolerance"] = args.tolerance
    except (ValueError, OSError) as e:
        print(f"nodewarden validate: {e}", file=sys.stderr)
        return exitcodes.USAGE
    progress = _Progress(sys.stderr, not args.no_progress)
    ctx = RunContext(profile=profile, sysfs=Path(args.sysfs), procfs=Path(args.procfs), device=args.device,
                     quick=args.quick, progress=progress, baseline=baseline)
    host = socket.gethostname()
    started = dt.datetime.now(dt.timezone.utc)
    try:
        results = runner.run_suite(names, ctx)
    finally:
        progress.close()
    finished = dt.datetime.now(dt.timezone.utc)
    code = exit_code(results)
    report.print_table(results, sys.stdout)
    for line in report.drain_lines(results, host):
        print(f"DRAIN: {line}")
    for line in report.incomplete_lines(results, host):
        print(f"INCOMPLETE: {line}")
    compute = ctx.resolved_compute  # None when no compute check was asked for
    doc = report.build(results, host, profile.get("name", "?"), compute.device if compute else None, args.quick,
                       started, finished, code, device_requested=args.device)
    try:
        if args.json:
            report.write_json(doc, args.json)
        if args.textfile:
            report.write_textfile(results, args.textfile, finished)
        if args.baseline and baseline is None and code == exitcodes.OK:
            report.write_json(runner.baseline_from(results), args.baseline)
            print(f"nodewarden validate: recorded baseline {args.baseline}", file=sys.stderr)
    except OSError as e:
        print(f"nodewarden validate: cannot write output: {e}", file=sys.stderr)
        return exitcodes.INCOMPLETE if code == exitcodes.OK else code
    return code


def _tolerance_arg(text: str) -> float:
    """``--tolerance``: a finite fraction in [0, 1) (NaN, infinities and negatives refused)."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0 <= x < 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a fraction from 0 to below 1: {text!r}")
    return x


def _seconds_arg(text: str) -> float:
    """A finite number of seconds above 0 and at most a day (NaN, infinities refused)."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0 < x <= 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number of seconds above 0 and at most 86400: {text!r}")
    return x


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checks", help=f"comma-separated subset of: {', '.join(registry.NAMES)}")
    p.add_argument("--quick", action="store_true", help="the prolog gate: a subset with small sizes (< 45 s)")
    p.add_argument("--profile", default="auto", help="hardware profile, or auto (from the GPU's NVML name)")
    p.add_argument("--nvml-timeout", type=_seconds_arg, default=nvml.DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="bound on --profile auto's NVML query: a driver that does not answer in time gives the "
                        f"generic profile and fails the NVML checks (default {nvml.DEFAULT_TIMEOUT_S:g}; the "
                        "checks' own bound is their nvml_timeout_seconds)")
    p.add_argument("--config", metavar="FILE", help="TOML with [checks.NAME] threshold/parameter overrides")
    p.add_argument("--set", action="append", metavar="CHECK.KEY=VALUE", help="override one parameter (repeatable)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="where the compute checks run: auto (the node's GPUs; skipped without one), cuda "
                        "(absent: could not complete), cpu (the same code on host memory, on purpose)")
    p.add_argument("--storage-path", help="directory the storage check writes into (default: /var/tmp when writable, else the temp dir)")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--textfile", metavar="DIR", help="write nodewarden_validator.prom for node_exporter")
    p.add_argument("--baseline", metavar="FILE",
                   help="hold rates to this node's recorded baseline; records it when FILE does not exist")
    p.add_argument("--tolerance", type=_tolerance_arg, metavar="FRACTION",
                   help="allowed drop below the baseline, 0 to below 1 (default 0.10)")
    p.add_argument("--sysfs", default="/sys", metavar="DIR",
                   help="read the machine's /sys from DIR (a copy of a /sys tree, e.g. the test trees tests/fixtures/sysfs/*); NVML is "
                        "then not queried unless a check's nvml=true")
    p.add_argument("--procfs", default="/proc", metavar="DIR", help="read /proc (cpuinfo, meminfo) from DIR")
    p.add_argument("--quiet", "--no-progress", dest="no_progress", action="store_true",
                   help="no progress on stderr")
    p.add_argument("--list", action="store_true", help="list the checks and profiles and exit")

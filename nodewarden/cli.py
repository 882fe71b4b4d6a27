"""Command line: argument parsing, dispatch and exit codes only; the work is done in the subpackages.

Exit codes (nodewarden.exitcodes): 0 ok/healthy, 1 unhealthy, 2 usage or configuration error,
3 could not complete (an input could not be read, the cluster lost a task, or an unexpected
error: then with its traceback). :func:`main` is the one place that maps errors to them; the
commands raise :class:`UsageError` for what the user can fix and return the others' codes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import traceback
from typing import Any, Callable, Sequence

from nodewarden import __version__, exitcodes
from nodewarden.events import KINDS, parse_iso_utc

SIGINT_EXIT = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


class UsageError(Exception):
    """A usage or configuration error the user can fix: exit 2 (``exitcodes.USAGE``), the
    message (naming the argument or file) on stderr, no traceback."""


def _time_arg(text: str) -> dt.datetime:
    """``2024-03-01``, ``2024-03-01T12:00``, ``2024-03-01T12:00:00Z`` or with an offset; naive is UTC."""
    try:
        return parse_iso_utc(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date/time: {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return n


def _code_arg(text: str) -> int:
    """An Xid/SXid code: a whole number 0 or above (the driver prints them unsigned)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"codes are 0 or above, got {n}")
    return n


def _seconds_arg(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not 0 <= x <= 366 * 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number of seconds from 0 to a year: {text!r}")
    return x


def _kinds_arg(text: str) -> frozenset[str]:
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    if not kinds:
        raise argparse.ArgumentTypeError("no kind given")
    unknown = kinds - set(KINDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    return kinds


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose arguments may be added at its first use: ``populate`` (a
    function of the parser) is called once, before the first parse or help text. A subcommand's
    options that need imports of their own (``validate``'s: the validator's checks and profiles)
    are declared so, and running another command (the agent) never loads those modules."""

    def __init__(self, *args: Any, populate: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._populate = populate

    def _populated(self) -> None:
        populate, self._populate = self._populate, None
        if populate is not None:
            populate(self)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._populated()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._populated()
        return super().format_usage()

    def format_help(self) -> str:
        self._populated()
        return super().format_help()


def _add_validate_arguments(p: argparse.ArgumentParser) -> None:
    from nodewarden.validator.main import add_arguments
    add_arguments(p)


def _add_install_arguments(p: argparse.ArgumentParser) -> None:
    from nodewarden.install import add_arguments
    add_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nodewarden", description="GPU-node hardware validator and fault telemetry.")
    p.add_argument("--version", action="version", version=f"nodewarden {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add_input_options(sp: argparse.ArgumentParser) -> None:
        def jobs_arg(text: str) -> int:
            n = int(text) if text.strip().isdigit() else 0
            if n < 1:
                raise argparse.ArgumentTypeError(f"not a positive number of processes: {text!r}")
            return n

        sp.add_argument("paths", nargs="+", metavar="PATH",
                        help="log files (plain, .gz, .bz2, .xz), directories of nodes' logs, agent journals, or - for stdin")
        sp.add_argument("--since", type=_time_arg, help="only events at or after this time (UTC unless an offset is given)")
        sp.add_argument("--until", type=_time_arg, help="only events before this time")
        sp.add_argument("--kind", type=_kinds_arg, help=f"comma-separated kinds ({', '.join(KINDS)})")
        sp.add_argument("--tz", default="UTC",
                        help="time zone of stamps printed without an offset (dmesg -T, syslog); default UTC")
        sp.add_argument("--boot-time", type=_time_arg,
                        help="wall time of boot, to date monotonic-only stamps ([  123.456]) of one boot's logs")
        sp.add_argument("--no-dedupe", action="store_true",
                        help="keep copies of one record seen through several files")
        sp.add_argument("--jobs", type=jobs_arg, metavar="N",
                        help="processes reading files (default: all CPUs; 1 reads them one after another)")
        sp.add_argument("--cache", metavar="DIR",
                        help="cache of parsed events, reused while a file is unchanged "
                             "(default $XDG_CACHE_HOME/nodewarden or ~/.cache/nodewarden)")
        sp.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
        sp.add_argument("--scheduler", metavar="ADDRESS",
                        help="parse the files on the Dask cluster of this scheduler (tcp://HOST:8786; the "
                             "[dask] extra); its workers must see the same paths")

    # validate's options are added when `validate` is parsed (or its help shown): they import the
    # validator, which no other command needs
    va = sub.add_parser("validate", help="run the hardware validation suite (exit 0 healthy, 1 drain)",
                        populate=_add_validate_arguments)
    va.set_defaults(func=cmd_validate)

    ev = sub.add_parser("events", help="print fault events found in logs as JSON lines")
    add_input_options(ev)
    ev.add_argument("--stats", action="store_true", help="print input/parse counts to stderr at the end")
    ev.add_argument("--injected", action="store_true",
                    help="also list events of lines user space wrote into the kernel log (syslog facility "
                         "not kern, flagged \"injected\"); left out by default, as analyze and the agent do")
    ev.set_defaults(func=cmd_events)

    an = sub.add_parser("analyze", help="failure statistics (Fire-Flyer Tables V-VIII, figures) from a fleet's logs")
    add_input_options(an)
    an.add_argument("--out", metavar="DIR",
                    help="write the tables (Markdown, CSV), figures (PNG), report.md and report.html into DIR")
    an.add_argument("--hosts", help="comma-separated hosts to include")
    an.add_argument("--paper-tables", metavar="DIR", nargs="?",
                    const=os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis", "reference",
                                       "fireflyer"),
                    help="compare each table cell by cell with the Fire-Flyer paper's (arXiv 2408.14158, Tables "
                         "VI-VIII); with no DIR the copies shipped with nodewarden "
                         "(nodewarden/analysis/reference/fireflyer), else DIR's CSVs of the same names "
                         "(table6_xid_counts.csv, table7_memory_network_monthly.csv, table8_ib_flash_cuts_daily.csv)")
    an.add_argument("--nodes", type=_positive_int, metavar="N",
                    help="fleet size for the fleet MTBF (default: the hosts whose logs were read, "
                         "those that logged no event included)")
    an.add_argument("--window", type=_seconds_arg, default=60.0, metavar="SECONDS",
                    help="window of faults that come together on one host (default 60)")
    an.add_argument("--quiet", action="store_true", help="no progress on stderr")
    an.set_defaults(func=cmd_analyze)

    xi = sub.add_parser("xid", help="explain an Xid code")
    xi.add_argument("code", type=_code_arg)
    xi.add_argument("--json", action="store_true", help="print as JSON")
    xi.add_argument("--policy", metavar="FILE", help="operator policy TOML overriding the shipped one")
    xi.set_defaults(func=cmd_xid)

    sx = sub.add_parser("sxid", help="explain an NVSwitch SXid code")
    sx.add_argument("code", type=_code_arg)
    sx.add_argument("--json", action="store_true", help="print as JSON")
    sx.set_defaults(func=cmd_sxid)

    si = sub.add_parser("simulate", help="write a synthetic fleet's kernel logs and their ground truth",
                        description="Per-node rotated kernel logs under DIR/<host>/ and DIR/ground_truth.csv; "
                                    "fault rates from a TOML file (default: the Fire-Flyer 2 tables). The file's "
                                    "counts are fleet totals for its [fleet] nodes over its start..end, taken as "
                                    "rates per node-day (the default's 12,970 Xids on 1250 nodes over 348 days: "
                                    "0.030 Xids per node-day); the default fleet (1250 nodes, "
                                    "2023-04-19..2024-03-31) holds the paper's Tables VI-VIII exactly.")
    si.add_argument("--nodes", type=int,
                    help="number of nodes (default: the rates file's [fleet] nodes, 1250). The file's counts are "
                         "for its nodes over its span, i.e. rates per node-day: N nodes get N/nodes times each "
                         "count (to within one fault), so a smaller or larger fleet keeps the per-node rates")
    si.add_argument("--days", type=int,
                    help="days to simulate from --start (default: the rates file's span, 348 days). Per-day rates "
                         "are kept: a shorter window holds the part of the span's faults inside it, a longer one "
                         "repeats the span's schedule")
    si.add_argument("--fault-scale", type=float, metavar="F",
                    help="multiply the rates file's fault counts by F instead of by --nodes / its nodes "
                         "(1: the file's fleet-wide totals on any number of nodes)")
    si.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
    si.add_argument("--seed", type=int, default=0, help="random seed; the same seed writes the same files")
    si.add_argument("--rates", metavar="FILE",
                    help="rates TOML (default: nodewarden/analysis/fleet_default.toml); its [beyond_paper] counts "
                         "turn on kinds the paper does not count (NVSwitch SXid, PCIe AER, reset-required GPUs, "
                         "AMD MCA and GHES memory errors; all 0 by default), [xid_year] \"154\" Xid 154")
    si.add_argument("--start", type=lambda t: dt.date.fromisoformat(t), metavar="YYYY-MM-DD",
                    help="first day (default: the rates file's start, 2023-04-19)")
    si.add_argument("--noise", type=float, metavar="LINES", help="ordinary kernel lines per node per day (mean)")
    si.add_argument("--quiet", action="store_true", help="no progress on stderr")
    si.set_defaults(func=cmd_simulate)

    ag = sub.add_parser("agent", help="follow the kernel log, poll NVML and sysfs, serve /metrics (systemd service)",
                        description="Flags override the configuration file (--print-config prints the commented "
                                    "default one, every key).")
    ag.add_argument("--config", metavar="FILE",
                    help="TOML configuration (default: /etc/nodewarden/agent.toml when it exists)")
    ag.add_argument("--listen", help="HOST:PORT for /metrics and /healthz (default 127.0.0.1:9764)")
    ag.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                    help="TLS and basic auth for /metrics and /healthz: a Prometheus exporter web config "
                         "(YAML, as node_exporter's; see README)")
    ag.add_argument("--state-dir", help="cursor, counters, event journal, validator report (default /var/lib/nodewarden)")
    ag.add_argument("--kmsg", help=argparse.SUPPRESS)
    ag.add_argument("--boot-id-path", help=argparse.SUPPRESS)
    ag.add_argument("--sysfs", help="sysfs root the polled collectors read (default /sys)")
    ag.add_argument("--procfs", help="procfs root (GPU minor numbers from driver/nvidia/gpus; default /proc)")
    ag.add_argument("--poll-interval", type=float, metavar="SECONDS",
                    help="seconds between polls of NVML and sysfs (default 10)")
    ag.add_argument("--no-validator", action="store_true", help="do not run the weekly validation")
    ag.add_argument("--accept-injected", action="store_true",
                    help="count records user space wrote into /dev/kmsg (facility not kern) as faults "
                         "(end-to-end tests; default: counted apart in "
                         "nodewarden_collector_kmsg_injected_records_total)")
    ag.add_argument("--hostname", help="host label of events (default: this machine's name)")
    ag.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="default info")
    ag.add_argument("--print-config", action="store_true",
                    help="print the commented default configuration (TOML, every key) and exit")
    ag.set_defaults(func=cmd_agent)

    # install's options are added when `install` is parsed: nodewarden.install is its own
    ins = sub.add_parser("install", help="write the systemd units (and /etc/nodewarden/agent.toml when absent) "
                                         "for this nodewarden", populate=_add_install_arguments)
    ins.set_defaults(func=cmd_install)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return its exit code.

    The one place errors become exit codes: argparse's own checks exit 2 (SystemExit);
    :class:`UsageError` is 2 with its message; ``ClusterError`` (a worker process died, the
    Dask cluster lost a task) is 3 with its message; a closed stdout (``events ... | head``)
    is 0; Ctrl-C is 130; any other exception is a bug or a fault this code did not foresee:
    its traceback on stderr and 3 (``exitcodes.INCOMPLETE``, could not complete), never 2.
    """
    args = build_parser().parse_args(argv)  # the parser is not kept: ~130 KB for the agent's lifetime
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        print(f"nodewarden: {e}", file=sys.stderr)
        return exitcodes.USAGE
    except BrokenPipeError:  # `nodewarden events ... | head`
        try:
            sys.stdout = None  # type: ignore[assignment]
        finally:
            return exitcodes.OK
    except KeyboardInterrupt:
        return SIGINT_EXIT
    except Exception as e:  # noqa: BLE001 - the one catch-all: report it, never as a usage error
        if _is_cluster_error(e):
            print(f"nodewarden: {e}", file=sys.stderr)
            return exitcodes.INCOMPLETE
        traceback.print_exc(file=sys.stderr)
        print(f"nodewarden: {args.command} could not complete: {type(e).__name__}: {e}", file=sys.stderr)
        return exitcodes.INCOMPLETE


def _is_cluster_error(e: BaseException) -> bool:
    """Whether ``e`` is a ``nodewarden.analysis.cluster.ClusterError``. Only a command that imported
    that module can raise one: it is looked up in ``sys.modules``, so that the commands that do not
    read logs (the agent) never load the analysis package."""
    cluster = sys.modules.get("nodewarden.analysis.cluster")
    return cluster is not None and isinstance(e, cluster.ClusterError)


def _ingest(args: argparse.Namespace, kinds: frozenset[str] | None, hosts: frozenset[str] | None = None,
            link_grace_s: float = 0.0, progress: Callable[[Any], None] | None = None):
    """``ingest()`` of the command's inputs: (events iterator, stats). ``kinds`` (None: every
    kind), ``hosts`` and ``link_grace_s`` as :class:`nodewarden.analysis.ingest.Filters` takes
    them. Raises UsageError when ``--scheduler`` cannot be used (unreachable, no [dask] extra)."""
    from nodewarden.analysis.cluster import ClusterError
    from nodewarden.analysis.ingest import Filters, ingest

    def on_error(msg: str) -> None:
        print(f"nodewarden: {msg}", file=sys.stderr)

    # Only the kernel makes a fault: lines user space wrote into the kernel log (facility not
    # kern) are left out and counted (`events --injected` lists them, flagged).
    filters = Filters(since=args.since, until=args.until, kinds=kinds, hosts=hosts, link_grace_s=link_grace_s,
                      kernel_only=not getattr(args, "injected", False))
    cache_dir = None
    if not getattr(args, "no_cache", True):
        from nodewarden.analysis.cache import default_dir
        cache_dir = args.cache or default_dir()
    try:
        return ingest(args.paths, filters=filters, tz=args.tz, boot_time=args.boot_time,
                      dedupe=not args.no_dedupe, on_error=on_error, jobs=getattr(args, "jobs", 1),
                      cache_dir=cache_dir, scheduler=getattr(args, "scheduler", None),
                      exclude=[args.out] if getattr(args, "out", None) else [], progress=progress)
    except ClusterError as e:  # raised at once only for a --scheduler that cannot be used
        raise UsageError(str(e)) from e


def _input_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the input options of events/analyze (``--tz``, the window), or None."""
    from zoneinfo import ZoneInfo
    try:
        if args.tz.upper() != "UTC":
            ZoneInfo(args.tz)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return f"unknown time zone {args.tz!r}"
    if args.since is not None and args.until is not None and args.since >= args.until:
        return "--since must be before --until"
    return None


def cmd_events(args: argparse.Namespace) -> int:
    problem = _input_usage(args)
    if problem:
        raise UsageError(problem)
    events, stats = _ingest(args, args.kind)
    out = sys.stdout
    write = out.write
    for e in events:
        write(e.to_json())
        write("\n")
    out.flush()
    if args.stats:
        print(json.dumps({"files": stats.files, "candidate_records": stats.records, "events": stats.events,
                          "unparsed": stats.unparsed, "copies_dropped": stats.copies_dropped,
                          "journal_duplicates": stats.journal_duplicates, "injected": stats.injected,
                          "errors": len(stats.errors)}), file=sys.stderr)
    return exitcodes.INCOMPLETE if stats.errors else exitcodes.OK


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        from nodewarden.analysis import report, tables
    except ImportError as e:
        if (e.name or "").partition(".")[0] == "nodewarden":  # our own module: a bug, not the extra
            raise
        raise UsageError(f"analyze needs the [analysis] extra (pandas): {e}") from e
    problem = _analyze_usage(args)
    if problem:
        raise UsageError(problem)
    hosts = frozenset(h.strip() for h in args.hosts.split(",") if h.strip()) if args.hosts else None
    from nodewarden.progress import Progress, for_ingest
    progress = Progress("analyze", quiet=getattr(args, "quiet", False))
    events, stats = _ingest(args, tables.kinds_to_read(args.kind), hosts, link_grace_s=tables.FLASH_CUT_GRACE_S,
                            progress=for_ingest(progress))
    try:
        rc = report.run(progress.closing(events), stats, out_dir=args.out, since=args.since, until=args.until,
                        paper_dir=args.paper_tables, nodes=args.nodes, window=args.window)
    except OSError as e:
        if args.out is not None and _names_path_in(e, args.out):  # --out not writable
            raise UsageError(f"cannot write the report: {e}") from e
        raise
    finally:
        progress.close()
    if hosts is not None and stats.events == 0:
        print(f"nodewarden: no event of --hosts {','.join(sorted(hosts))} in the inputs", file=sys.stderr)
    return rc


def _names_path_in(e: OSError, directory: str) -> bool:
    """Whether ``e`` is about ``directory`` or a path below it (its ``filename``/``filename2``)."""
    top = os.path.abspath(directory)
    for name in (e.filename, e.filename2):
        if name is None:
            continue
        path = os.path.abspath(os.fsdecode(name))
        if path == top or path.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False


def _out_dir_problem(option: str, path: str) -> str | None:
    """Why ``path`` cannot be the output directory of ``option`` (analyze's and simulate's
    ``--out``), or None; checked before any work. An existing directory must be writable; a
    missing one is made by the command, parents too, so its nearest existing ancestor must be a
    writable directory (a path under a regular file fails for root as well). Nothing is created."""
    if not path:
        return f"{option}: an empty path"
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        if os.path.islink(probe):
            return f"{option} {path}: {probe} is a broken symbolic link"
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        if probe == os.path.abspath(path):
            return f"{option} {path}: exists and is not a directory"
        return f"{option} {path}: cannot be created, {probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{option} {path}: {probe} is not writable"
    # Mode bits do not tell root that a file system refuses new entries (/proc, read-only): a
    # directory is made there and removed at once.
    import tempfile
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".nodewarden-probe-", dir=probe))
    except OSError as e:
        return f"{option} {path}: cannot write the report there: {e.strerror or e} ({probe})"
    return None


def _analyze_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with analyze's arguments (checked before any log is read), or None. The
    ``--paper-tables`` files are read here, so a file that is no table is a usage error."""
    from nodewarden.analysis import tables
    problem = _input_usage(args)
    if problem:
        return problem
    for path in args.paths:  # a report of the other inputs would pass for the fleet's
        if path != "-" and not os.path.lexists(path):
            return f"{path}: no such file or directory"
    if args.out is not None and (problem := _out_dir_problem("--out", args.out)):
        return problem
    if args.paper_tables is not None and not os.path.isdir(args.paper_tables):
        return f"--paper-tables {args.paper_tables}: not a directory"
    if args.paper_tables is not None:
        found = 0
        for name in tables.PAPER_FILES:
            try:
                found += tables.read_paper_table(name, args.paper_tables) is not None
            except ValueError as e:  # not a CSV table, or a column missing
                return str(e)
        if not found:  # e.g. a log directory taken for DIR: `analyze --paper-tables LOGS OTHER`
            return (f"--paper-tables {args.paper_tables}: none of the paper's tables there "
                    f"({', '.join(f for f, _, _ in tables.PAPER_FILES.values())})")
    if args.hosts is not None and not any(h.strip() for h in args.hosts.split(",")):
        return "--hosts names no host"
    return None


def cmd_xid(args: argparse.Namespace) -> int:
    from nodewarden import catalog
    try:
        policy = catalog.load_policy(path=args.policy) if args.policy else None
    except (OSError, ValueError) as e:  # the operator's policy file: unreadable, or not a policy
        raise UsageError(str(e)) from e
    if args.json:
        print(json.dumps(catalog.as_dict(args.code, policy), indent=2))
    else:
        print(catalog.explain(args.code, policy))
    return exitcodes.OK


def cmd_sxid(args: argparse.Namespace) -> int:
    import dataclasses

    from nodewarden.catalog import sxid
    info = sxid.lookup(args.code)
    if args.json:
        print(json.dumps(dataclasses.asdict(info), indent=2))
        return exitcodes.OK
    basis = {"fm_guide": "NVIDIA Fabric Manager User Guide", "driver_report": "the driver's report macro"}
    lines = [f"SXid {info.code}  {info.mnemonic or '(not in the driver list)'}"]
    if info.name:
        lines.append(f"  {info.name}")
    lines.append(f"  unit:      {info.unit or 'unknown'}")
    lines.append(f"  severity:  {info.severity}" + (f" (from {basis.get(info.severity_basis, info.severity_basis)})"
                                                    if info.severity_basis else ""))
    if info.fm_class:
        lines.append(f"  Fabric Manager class: {info.fm_class}")
    lines.append("  catalog:   nodewarden/catalog/sxid_catalog.csv (sources in catalog/SOURCES.md)")
    print("\n".join(lines))
    return exitcodes.OK


def cmd_validate(args: argparse.Namespace) -> int:
    from nodewarden.validator import main as validator_main
    return validator_main.run(args)


def cmd_simulate(args: argparse.Namespace) -> int:
    from nodewarden.analysis import simulate
    from nodewarden.progress import Progress, for_simulate
    problem = _out_dir_problem("--out", args.out)
    if problem:  # before the schedule is drawn: a big fleet takes a while
        raise UsageError(problem)
    try:
        with Progress("simulate", quiet=getattr(args, "quiet", False)) as progress:
            summary = simulate.simulate(args.out, nodes=args.nodes, days=args.days, seed=args.seed, rates=args.rates,
                                        start=args.start, noise_per_node_day=args.noise, fault_scale=args.fault_scale,
                                        progress=for_simulate(progress))
    except (OSError, ValueError) as e:  # --out not writable; a --rates file that is no fleet's rates
        raise UsageError(str(e)) from e
    print(json.dumps(summary))
    return exitcodes.OK


def cmd_agent(args: argparse.Namespace) -> int:
    if args.print_config:
        from nodewarden.install import example_config
        sys.stdout.write(example_config())
        return exitcodes.OK
    from nodewarden.agent import daemon
    return daemon.run(args)


def cmd_install(args: argparse.Namespace) -> int:
    from nodewarden import install
    try:
        install.run(args)
    except install.InstallError as e:
        raise UsageError(str(e)) from e
    except install.SystemctlError as e:
        print(f"nodewarden: {e}", file=sys.stderr)
        return exitcodes.INCOMPLETE
    return exitcodes.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

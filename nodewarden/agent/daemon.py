"""``nodewarden agent``: follow the kernel log, poll NVML and sysfs, count fault events and
flash cuts, run the validator weekly, serve ``/metrics``.

Threads: the main thread follows ``/dev/kmsg`` (:class:`~nodewarden.agent.follower.KmsgFollower`,
blocked in select(2) until a record comes, without a timeout unless the parser holds an
incomplete record (:data:`POLL_S`) or a cursor waits to be saved; SIGTERM/SIGINT end the wait
through ``signal.set_wakeup_fd``); the poller and the runner thread that calls the polled
collectors one after another (a new one after a hung call; :mod:`nodewarden.agent.poller`);
the validator scheduler and its subprocess
(:mod:`nodewarden.agent.schedule`); an hourly journal pruner; an HTTP server thread answering
scrapes from a snapshot of the counters and the collectors' last snapshots
(:mod:`nodewarden.agent.server`). Counting, journaling and saving ``state.json`` happen under
one lock (:attr:`Agent.lock`), shared by the follower and the collectors' event sink, so that a
``state.json`` always holds a cursor and the counters it implies. No scrape ever waits on it.
The follower's events are shown to the flash-cut detector and to the AER reconciler
(:mod:`nodewarden.agent.aer`), which keeps the pcie collector's sysfs AER rises that the kernel
log printed from becoming second events (:func:`kernel_observer`).

Configuration: :mod:`nodewarden.agent.config` (TOML file and flags, flags winning).

Failure behaviour:

* A bad configuration file, ``--listen`` malformed or not bindable, ``--state-dir`` not a
  directory / not creatable / not readable, or in use by another agent (its ``agent.lock``
  held, :func:`nodewarden.agent.state.lock_state_dir`), a ``--web.config.file`` that is not
  valid (:mod:`nodewarden.agent.webconfig`), an open-file limit too low for the HTTP server: a
  message naming the file and key or the option on stderr, exit code 2.
* ``/dev/kmsg`` cannot be opened (no CAP_SYSLOG while ``kernel.dmesg_restrict=1``) or fails
  while reading: logged, ``nodewarden_collector_success{collector="kernel_log"} 0``, retried every
  :data:`KMSG_RETRY_S` seconds; ``/metrics`` and ``/healthz`` keep answering.
* A polled collector whose constructor fails: that collector disabled, logged. One that raises or
  hangs: its ``collector_success`` 0, its last snapshot served (:mod:`nodewarden.agent.poller`).
* State directory read-only or full: logged, counted in
  ``nodewarden_collector_state_write_errors_total``, counting goes on in memory.
* SIGTERM/SIGINT: polling stopped, a validator run terminated, state written, device closed,
  exit code 0.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import types
from typing import Any, Callable

from nodewarden import __version__, exitcodes
from nodewarden.agent import config as cf
from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent import webconfig
from nodewarden.agent.aer import AerReconciler
from nodewarden.agent.aer import window_for as aer_window_for
from nodewarden.agent.exporter import Counters, SeriesKey
from nodewarden.agent.follower import KmsgFollower
from nodewarden.agent.poller import EventSink, FlashCuts, Poller, build_collectors, load_detector
from nodewarden.agent.schedule import REPORT_FILE, ReportWatcher, Scheduler
from nodewarden.events import FaultEvent, iso_utc
from nodewarden.kmsg import KmsgReader, boot_wall_time
from nodewarden.nvml import GpuMinors

log = logging.getLogger("nodewarden.agent")

POLL_S = 0.5  # longest wait for kernel records: bounds stop latency and the MCE idle flush
KMSG_RETRY_S = 10.0  # seconds between attempts to (re)open /dev/kmsg
PRUNE_S = 3600.0  # journal files past their age or size bound are deleted this often


class Agent:
    """The kernel-log side of the agent: owns the reader and follower, saves ``state.json``,
    reports health.

    ``position`` comes from ``state.json``; the counters are already loaded with its values;
    the follower counts the journal's events past it at catch-up (see
    :mod:`nodewarden.agent.state`). ``journaled``: keys of events not to count again (none at start).
    ``observer``: the flash-cut detector's :meth:`~nodewarden.agent.poller.FlashCuts.observe_events`.
    """

    def __init__(self, cfg: cf.AgentConfig, counters: Counters, store: st.StateStore,
                 position: st.KmsgPosition | None, journaled: frozenset[tuple[Any, ...]], host: str,
                 observer: Callable[[list[FaultEvent]], list[FaultEvent]] | None = None) -> None:
        self.cfg = cfg
        self.counters = counters
        self.store = store
        self.position = position
        self.journaled = journaled
        self.host = host
        self.observer = observer
        self.lock = threading.RLock()
        self.gpu_of = GpuMinors(cfg.procfs)
        self.reader: KmsgReader | None = None
        self.follower: KmsgFollower | None = None
        self.kmsg_error: str | None = None
        self._warned_open = False
        self.poller: Poller | None = None
        self.scheduler: Scheduler | None = None
        self.node_condition: Any = None  # nodewarden.agent.nodecondition.NodeConditionPublisher when on
        if cfg.enabled(ex.KERNEL_LOG):
            counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 0.0)
        counters.set(ex.STATE_ERRORS, (), float(store.write_errors))

    def open_kmsg(self) -> bool:
        """Open ``--kmsg``, count what the ring buffer holds that was not counted before. True when
        following. Errors are logged and reported in metrics and /healthz, never raised."""
        kmsg = self.cfg.kmsg
        reader = KmsgReader(kmsg, self.cfg.boot_id_path)
        try:
            reader.open()
        except OSError as e:
            self._kmsg_failed(f"cannot open {kmsg}: {e.strerror or e}", first=not self._warned_open)
            self._warned_open = True
            return False
        if reader.boot_id is None:
            log.warning("%s unreadable: a reboot is recognised by sequence numbers only", self.cfg.boot_id_path)
        follower = KmsgFollower(reader, self.counters, self.store, host=self.host, gpu_of=self.gpu_of,
                                boot_time=boot_wall_time(), position=self.position, journaled=self.journaled,
                                lock=self.lock, observer=self.observer,
                                accept_injected=self.cfg.accept_injected)
        try:
            n = follower.catch_up()
        except OSError as e:
            reader.close()
            self._kmsg_failed(f"cannot read {kmsg}: {e.strerror or e}", first=True)
            return False
        with self.lock:
            self.reader, self.follower, self.journaled = reader, follower, frozenset()
        self.kmsg_error = None
        self._warned_open = False
        self.counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 1.0)
        log.info("following %s (boot %s, up to seq %s): %d event(s) counted from the ring buffer",
                 kmsg, reader.boot_id, follower.seq, n)
        return True

    def follow(self, stop: threading.Event, wake_fd: int | None = None) -> None:
        """Run until ``stop`` is set. ``wake_fd``: the read end of the pipe ``signal.set_wakeup_fd``
        writes to, so that an idle follower waits without a timeout (no periodic wake-up: each
        costs CPU) and a signal still ends the wait at once; without it, it wakes every
        :data:`POLL_S` to look at ``stop``."""
        while not stop.is_set():
            if self.follower is None:
                if not self.open_kmsg():
                    stop.wait(KMSG_RETRY_S)
                continue
            try:
                if wake_fd is None:
                    self.follower.poll(POLL_S)
                else:
                    self.follower.poll(self.follower.idle_timeout(POLL_S), wake_fd)
            except OSError as e:
                self._kmsg_failed(f"reading {self.cfg.kmsg}: {e.strerror or e}", first=True)
                self.close()

    def close(self) -> None:
        """Persist (cursor + counters) and close the device. Never raises."""
        with self.lock:
            if self.follower is not None:
                self.follower.commit(force=True)
                self.position = self.follower.position()
            if self.reader is not None:
                self.reader.close()
            self.reader = self.follower = None

    def save_state(self) -> bool:
        """Write ``state.json`` now: the follower's cursor (or the saved one while there is no
        follower) and the counters, under :attr:`lock`. The polled collectors' sink calls this."""
        with self.lock:
            pos = self.follower.position() if self.follower is not None else self.position
            ok = self.store.save(st.AgentState(kmsg=pos, counters=self.counters.to_json()))
            self.counters.set(ex.STATE_ERRORS, (), float(self.store.write_errors))
            return ok

    def snapshot(self) -> dict[SeriesKey, float]:
        """What a scrape renders: the counters, with the state directory's gauges refreshed."""
        self.counters.set(ex.STATE_ERRORS, (), float(self.store.write_errors))
        self.counters.set(ex.JOURNAL_BYTES, (), float(self.store.journal_bytes))
        for reason, n in self.store.journal_dropped.items():
            self.counters.set(ex.JOURNAL_DROPPED, (reason,), float(n))
        return self.counters.snapshot()

    def _kmsg_failed(self, msg: str, first: bool) -> None:
        self.kmsg_error = msg
        self.counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 0.0)
        if first:
            log.error("%s; kernel-log events are not counted until it works (retrying every %gs)",
                      msg, KMSG_RETRY_S)
        else:
            log.debug("%s", msg)

    def health(self) -> dict[str, Any]:
        """The /healthz body: ``ok`` (kmsg followed, unless the kernel-log collector is off, and
        state directory writable), ``kmsg_readable``, ``last_record_time`` (kernel time of the
        newest record read, UTC ISO 8601, or null), ``state_dir_writable``, ``events_counted``
        (kernel-log events, since start), errors, ``collectors`` (each polled collector's
        health), ``validator`` (null when off), ``version``, ``host``. A failing polled collector
        does not make ``ok`` false: its ``collector_success`` says so, and the node may lack the
        hardware it reads."""
        f = self.follower
        kmsg_ok = f is not None
        kmsg_needed = self.cfg.enabled(ex.KERNEL_LOG)
        return {
            "ok": (kmsg_ok or not kmsg_needed) and self.store.writable,
            "kmsg_readable": kmsg_ok,
            "last_record_time": iso_utc(f.last_record_time) if f is not None else None,
            "state_dir_writable": self.store.writable,
            "events_counted": f.events_counted if f is not None else 0,
            "kmsg_error": self.kmsg_error,
            "state_error": self.store.last_error,
            "collectors": self.poller.health() if self.poller is not None else {},
            "validator": self.scheduler.health() if self.scheduler is not None else None,
            "kubernetes": self.node_condition.health() if self.node_condition is not None else None,
            "version": __version__,
            "host": self.host,
        }


def kernel_observer(flash: FlashCuts | None, aer: AerReconciler | None
                    ) -> Callable[[list[FaultEvent]], list[FaultEvent]] | None:
    """What sees the kernel-log events counted: the flash-cut detector (its derived events are
    returned and journaled) and the AER reconciler (notes the ``pcie_aer`` records)."""
    if flash is None and aer is None:
        return None

    def observe(events: list[FaultEvent]) -> list[FaultEvent]:
        if aer is not None:
            aer.observe_kernel(events)
        return flash.observe_events(events) if flash is not None else []

    return observe


def also_observe(observer: Callable[[list[FaultEvent]], list[FaultEvent]] | None,
                 watch: Callable[[list[FaultEvent]], None]) -> Callable[[list[FaultEvent]], list[FaultEvent]]:
    """``observer`` with ``watch`` shown the same events first (the node condition's latch)."""
    def observe(events: list[FaultEvent]) -> list[FaultEvent]:
        watch(events)
        return observer(events) if observer is not None else []

    return observe


def node_condition_publisher(cfg: cf.AgentConfig, agent_of: Callable[[], "Agent"], counters: Counters) -> Any:
    """The node-condition publisher of ``[kubernetes] node_condition = true``
    (:mod:`nodewarden.agent.nodecondition`, imported only then, with http.client and ssl).
    Raises ConfigError naming the key (no node name, unusable credentials)."""
    from nodewarden.agent import nodecondition as nc
    from nodewarden.catalog.policy import default_policy

    k = cfg.kubernetes
    node = cf.node_name(cfg)
    key = "kubernetes.kubeconfig" if k.kubeconfig else "kubernetes.service_account_dir"
    try:
        creds = nc.load_credentials(k.kubeconfig, k.service_account_dir)
    except nc.CredentialsError as e:
        raise cf.ConfigError(f"{cfg.source + ': ' if cfg.source else ''}{key}: {e}") from None

    def samples() -> list[Any]:
        poller = agent_of().poller
        return poller.samples() if poller is not None else []

    def gpu_of(pci: str) -> str:
        return agent_of().gpu_of(pci) if pci else ""

    return nc.NodeConditionPublisher(
        creds, node, samples, counters.snapshot, nvml_enabled=cfg.enabled("nvml"),
        interval_s=min(cfg.poll_interval_seconds, 10.0), heartbeat_s=k.heartbeat_seconds,
        timeout_s=k.request_timeout_seconds, policy_action=default_policy().action, gpu_of=gpu_of)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _usage(msg: str) -> int:
    print(f"nodewarden: {msg}", file=sys.stderr)
    return exitcodes.USAGE


def _prune_loop(store: st.StateStore, stop: threading.Event) -> None:
    while not stop.wait(PRUNE_S):
        try:
            store.prune_journal()
        except Exception:
            log.exception("pruning the event journal failed")


def _report_loop(reports: ReportWatcher, stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        try:
            reports.poll()
        except Exception:
            log.exception("reading the validator report failed")


def open_to_network(host: str, web: Any) -> str | None:
    """Why serving on ``host`` with web config ``web`` exposes the node's fault history and the
    agent itself to the network (a non-loopback address without TLS or without basic auth), or
    None."""
    import ipaddress
    try:
        loopback = host not in ("", "0.0.0.0", "::") and ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    missing = [what for what, have in (("TLS", web is not None and web.ssl_context is not None),
                                       ("basic auth", web is not None and bool(web.users))) if not have]
    if not missing:
        return None
    return (f"listening beyond this machine without {' or '.join(missing)}: anyone who reaches it reads "
            "this node's fault history; set [http] web_config_file (see README)")


def import_server(tls: bool) -> types.ModuleType:
    """:mod:`nodewarden.agent.server`, imported for this process. Without TLS, the first import of
    asyncio here is made with ``ssl`` absent (``None`` in ``sys.modules``: the import system
    then raises ImportError, https://docs.python.org/3/reference/import.html#the-module-cache),
    which asyncio's modules take as "no TLS support" (their ``try: import ssl``): the agent
    then never maps OpenSSL (ssl, _ssl, libssl, libcrypto: ~4.5 MB resident, measured by
    ``bench/agent_overhead.py``). ``ssl`` is importable again afterwards, but asyncio keeps
    no TLS for the life of the process (an :class:`AgentHTTPServer` with TLS then refuses to
    start, saying so); a process that already imported asyncio or ssl keeps them as they are.
    The agent reads its web configuration once, at start, so TLS cannot be asked for later."""
    if tls or "asyncio" in sys.modules or "ssl" in sys.modules:
        return importlib.import_module("nodewarden.agent.server")
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        return importlib.import_module("nodewarden.agent.server")
    finally:
        del sys.modules["ssl"]


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT. Returns the exit code: 0 after a clean stop, 2 for a
    bad configuration, ``--listen`` or ``--state-dir`` (message on stderr)."""
    try:
        cfg = cf.resolve(args)
    except cf.ConfigError as e:
        return _usage(str(e))
    _setup_logging(cfg.log_level)

    def opt(flag: str, key: str) -> str:  # how to name a setting in a message: its flag or its file key
        given = getattr(args, flag.lstrip("-").replace("-", "_"), None) is not None
        return flag if given or cfg.source is None else f"{cfg.source}: {key}"

    host = cfg.hostname or socket.gethostname()
    try:
        addr = cf.parse_listen(cfg.listen)
    except ValueError as e:
        return _usage(f"{opt('--listen', 'listen')}: {e}")
    try:
        web = webconfig.load(cfg.http.web_config_file) if cfg.http.web_config_file else None
    except webconfig.WebConfigError as e:
        flag = getattr(args, "web_config_file", None) is not None or cfg.source is None
        return _usage(f"{'--web.config.file' if flag else f'{cfg.source}: http.web_config_file'}: {e}")
    try:
        state_dir = st.prepare_state_dir(cfg.state_dir)
        lock_fd = st.lock_state_dir(state_dir)  # held until the process exits
        saved = st.load_state(state_dir)
    except st.StateDirError as e:
        return _usage(f"{opt('--state-dir', 'state_dir')}: {e}")
    except OSError as e:
        return _usage(f"{opt('--state-dir', 'state_dir')}: {cfg.state_dir}: cannot read {st.STATE_FILE}: "
                      f"{e.strerror or e}")

    store = st.StateStore(state_dir, max_bytes=cfg.journal_max_bytes, max_age_days=cfg.journal_max_age_days,
                          max_day_bytes=cfg.journal_max_day_bytes, source_burst=cfg.journal_source_burst,
                          source_rate=cfg.journal_source_rate_per_second)
    if store.probe():
        st.remove_temp_files(state_dir)
    store.prune_journal()
    counters = Counters()
    counters.load_json(saved.counters)
    detector = load_detector(cfg.flash_cut_max_seconds)
    flash = FlashCuts(detector, counters, host=host) if detector is not None else None
    collectors = build_collectors(cfg.enabled_collectors, cfg.sysfs, host)
    # The polled collectors' sysfs AER rises and the kernel log's AER records: one event per error.
    aer = AerReconciler(window_s=aer_window_for(cfg.poll_interval_seconds, cfg.every("pcie"))) if collectors else None
    observer = kernel_observer(flash, aer)
    publisher = None
    if cfg.kubernetes.node_condition:
        try:
            publisher = node_condition_publisher(cfg, lambda: agent, counters)
        except cf.ConfigError as e:
            return _usage(str(e))
        observer = also_observe(observer, publisher.observe)
    agent = Agent(cfg, counters, store, saved.kmsg, frozenset(), host, observer=observer)
    agent.node_condition = publisher
    sink: EventSink | None = None
    if collectors:
        sink = EventSink(counters, store, lock=agent.lock, save=agent.save_state, flash=flash, host=host, aer=aer)
        agent.poller = Poller(collectors, counters, sink, interval=cfg.poll_interval_seconds,
                              timeout=cfg.collector_timeout_seconds,
                              every={c.name: cfg.every(c.name) for c in collectors})
    # validate.json is exported whoever writes it: this agent's schedule, the validate timer,
    # a Slurm health check, an operator (ReportWatcher).
    reports = ReportWatcher(counters, state_dir / REPORT_FILE, host=host)
    if cfg.validator.enabled:
        v = cfg.validator
        agent.scheduler = Scheduler(counters, state_dir, host, interval_days=v.interval_days,
                                    jitter_hours=v.jitter_hours, args=v.args, timeout_s=v.timeout_seconds)
        reports.seen_now()  # exported by the scheduler at start
    else:
        reports.poll()
    if publisher is not None:  # the kernel-log latch of the last run, after the report is exported
        publisher.relatch(state_dir, cfg.journal_max_age_days)

    server_module = import_server(tls=web is not None and web.ssl_context is not None)
    AgentHTTPServer, FdLimitError, ServerSettings = (server_module.AgentHTTPServer, server_module.FdLimitError,
                                                     server_module.ServerSettings)
    try:
        polled = agent.poller.samples if agent.poller is not None else None
        if publisher is not None:
            polled_of = polled
            polled = lambda: [*(polled_of() if polled_of is not None else []), *publisher.samples()]  # noqa: E731
        exposition = ex.Exposition(ex.AgentCollector(agent.snapshot, polled))
        h = cfg.http
        server = AgentHTTPServer(addr, exposition, agent.health, web=web, settings=ServerSettings(
            max_connections=h.max_connections, backlog=h.backlog, request_timeout_seconds=h.request_timeout_seconds,
            idle_timeout_seconds=h.idle_timeout_seconds, write_timeout_seconds=h.write_timeout_seconds))
    except FdLimitError as e:
        return _usage(str(e))
    except OSError as e:
        return _usage(f"{opt('--listen', 'listen')} {cfg.listen}: cannot listen: {e.strerror or e}")
    except (OverflowError, ValueError) as e:
        return _usage(f"{opt('--listen', 'listen')} {cfg.listen}: {e}")
    http = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    http.start()
    exposure = open_to_network(addr[0], web)
    if exposure:
        log.warning("%s: %s", cfg.listen, exposure)
    log.info("nodewarden %s agent on %s: serving %s://%s/metrics (%s, at most %d connections), state in %s%s; "
             "polled collectors: %s; validator: %s", __version__, host, server.scheme, cfg.listen,
             f"web config {web.source}{', basic auth' if web.users else ''}" if web else "no TLS, no auth",
             server.cap, state_dir,
             f", config {cfg.source}" if cfg.source else "",
             ", ".join(n if agent.poller.every[n] == 1 else f"{n} (every {agent.poller.every[n]} polls)"
                       for n in agent.poller.names) if agent.poller is not None else "none",
             "on" if agent.scheduler is not None else "off")

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    wake_r, wake_w = os.pipe()  # a signal writes a byte here: the idle follower's wait ends at once
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    old_wakeup_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    pruner = threading.Thread(target=_prune_loop, args=(store, stop), name="journal-prune", daemon=True)
    pruner.start()
    watcher = threading.Thread(target=_report_loop, args=(reports, stop, cfg.poll_interval_seconds),
                               name="validator-report", daemon=True)
    watcher.start()
    if agent.poller is not None:
        agent.poller.start()
    if agent.scheduler is not None:
        agent.scheduler.start()
    if publisher is not None:
        publisher.start()
        log.info("publishing node condition %s of node %s to %s:%d (credentials: %s)", "GpuHardwareHealthy",
                 publisher.node, publisher.creds.host, publisher.creds.port, publisher.creds.source)
    try:
        if cfg.enabled(ex.KERNEL_LOG):
            agent.follow(stop, wake_r)
        else:
            log.info("kernel-log collector off ([collectors] kernel_log = false)")
            while not stop.wait(60.0):  # the signal handler sets it; the timeout only bounds a missed wake-up
                pass
    finally:
        stop.set()
        signal.set_wakeup_fd(old_wakeup_fd)
        for fd in (wake_r, wake_w):
            os.close(fd)
        if agent.poller is not None:
            agent.poller.stop()
        if sink is not None:
            sink.flush()  # AER rises still waiting for their kernel-log record
        if agent.scheduler is not None:
            agent.scheduler.stop()
        if publisher is not None:
            publisher.stop()
        agent.close()
        agent.save_state()
        server.shutdown()
        server.server_close()
    log.info("stopped")
    os.close(lock_fd)
    return exitcodes.OK

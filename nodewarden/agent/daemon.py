"""``nodewarden agent``: follow the kernel log, count fault events, serve ``/metrics``.

Threads: the main thread follows ``/dev/kmsg`` (:class:`~nodewarden.agent.follower.KmsgFollower`,
waking at least every :data:`POLL_S` seconds); an HTTP server thread answers scrapes from a
snapshot of the counters (:mod:`nodewarden.agent.server`).

Failure behaviour:

* ``--listen`` malformed or not bindable, ``--state-dir`` not a directory / not creatable /
  not readable: a message naming the option on stderr, exit code 2.
* ``/dev/kmsg`` cannot be opened (no CAP_SYSLOG while ``kernel.dmesg_restrict=1``) or fails
  while reading: logged, ``nodewarden_collector_success{collector="kernel_log"} 0``, retried every
  :data:`KMSG_RETRY_S` seconds; ``/metrics`` and ``/healthz`` keep answering.
* State directory read-only or full: logged, counted in
  ``nodewarden_collector_state_write_errors_total``, counting goes on in memory.
* SIGTERM/SIGINT: state written, device closed, exit code 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from typing import Any

from nodewarden import __version__, exitcodes
from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent.exporter import Counters, GpuMinors
from nodewarden.agent.follower import KmsgFollower
from nodewarden.agent.server import AgentHTTPServer, parse_listen
from nodewarden.collectors.kernel_log import KmsgReader, boot_time_now
from nodewarden.events import iso_utc

log = logging.getLogger("nodewarden.agent")

POLL_S = 0.5  # longest wait for kernel records: bounds stop latency and the MCE idle flush
KMSG_RETRY_S = 10.0  # seconds between attempts to (re)open /dev/kmsg


class Agent:
    """The kernel-log side of the agent: owns the reader and follower, reports health.

    ``position`` and ``journaled`` come from ``state.json`` and the journal (see
    :mod:`nodewarden.agent.state`); the counters are already loaded with the saved values.
    """

    def __init__(self, args: argparse.Namespace, counters: Counters, store: st.StateStore,
                 position: st.KmsgPosition | None, journaled: frozenset[tuple[Any, ...]], host: str) -> None:
        self.args = args
        self.counters = counters
        self.store = store
        self.position = position
        self.journaled = journaled
        self.host = host
        self.gpu_of = GpuMinors(args.procfs)
        self.reader: KmsgReader | None = None
        self.follower: KmsgFollower | None = None
        self.kmsg_error: str | None = None
        self._warned_open = False
        counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 0.0)
        counters.set(ex.STATE_ERRORS, (), float(store.write_errors))

    def open_kmsg(self) -> bool:
        """Open ``--kmsg``, count what the ring buffer holds that was not counted before. True when
        following. Errors are logged and reported in metrics and /healthz, never raised."""
        reader = KmsgReader(self.args.kmsg, self.args.boot_id_path)
        try:
            reader.open()
        except OSError as e:
            self._kmsg_failed(f"cannot open {self.args.kmsg}: {e.strerror or e}", first=not self._warned_open)
            self._warned_open = True
            return False
        if reader.boot_id is None:
            log.warning("%s unreadable: a reboot is recognised by sequence numbers only", self.args.boot_id_path)
        follower = KmsgFollower(reader, self.counters, self.store, host=self.host, gpu_of=self.gpu_of,
                                boot_time=boot_time_now(), position=self.position, journaled=self.journaled)
        try:
            n = follower.catch_up()
        except OSError as e:
            reader.close()
            self._kmsg_failed(f"cannot read {self.args.kmsg}: {e.strerror or e}", first=True)
            return False
        self.reader, self.follower, self.journaled = reader, follower, frozenset()
        self.kmsg_error = None
        self._warned_open = False
        self.counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 1.0)
        log.info("following %s (boot %s, up to seq %s): %d event(s) counted from the ring buffer",
                 self.args.kmsg, reader.boot_id, follower.seq, n)
        return True

    def follow(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set."""
        while not stop.is_set():
            if self.follower is None:
                if not self.open_kmsg():
                    stop.wait(KMSG_RETRY_S)
                continue
            try:
                self.follower.poll(POLL_S)
            except OSError as e:
                self._kmsg_failed(f"reading {self.args.kmsg}: {e.strerror or e}", first=True)
                self.close()

    def close(self) -> None:
        """Persist (cursor + counters) and close the device. Never raises."""
        if self.follower is not None:
            self.follower.commit(force=True)
            self.position = self.follower.position()
        if self.reader is not None:
            self.reader.close()
        self.reader = self.follower = None

    def _kmsg_failed(self, msg: str, first: bool) -> None:
        self.kmsg_error = msg
        self.counters.set(ex.SUCCESS, (ex.KERNEL_LOG,), 0.0)
        if first:
            log.error("%s; kernel-log events are not counted until it works (retrying every %gs)",
                      msg, KMSG_RETRY_S)
        else:
            log.debug("%s", msg)

    def health(self) -> dict[str, Any]:
        """The /healthz body: ``ok`` (kmsg followed and state directory writable), ``kmsg_readable``,
        ``last_record_time`` (kernel time of the newest record read, UTC ISO 8601, or null),
        ``state_dir_writable``, ``events_counted`` (since start), errors, ``version``, ``host``."""
        f = self.follower
        kmsg_ok = f is not None
        return {
            "ok": kmsg_ok and self.store.writable,
            "kmsg_readable": kmsg_ok,
            "last_record_time": iso_utc(f.last_record_time) if f is not None else None,
            "state_dir_writable": self.store.writable,
            "events_counted": f.events_counted if f is not None else 0,
            "kmsg_error": self.kmsg_error,
            "state_error": self.store.last_error,
            "version": __version__,
            "host": self.host,
        }


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _usage(msg: str) -> int:
    print(f"nodewarden: {msg}", file=sys.stderr)
    return exitcodes.USAGE


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT. Returns the exit code: 0 after a clean stop, 2 for a
    bad ``--listen`` or an unusable ``--state-dir`` (message on stderr)."""
    _setup_logging(args.log_level)
    host = args.hostname or socket.gethostname()
    try:
        addr = parse_listen(args.listen)
    except ValueError as e:
        return _usage(f"--listen: {e}")
    try:
        state_dir = st.prepare_state_dir(args.state_dir)
        saved = st.load_state(state_dir)
    except st.StateDirError as e:
        return _usage(f"--state-dir: {e}")
    except OSError as e:
        return _usage(f"--state-dir: {args.state_dir}: cannot read {st.STATE_FILE}: {e.strerror or e}")

    store = st.StateStore(state_dir)
    if store.probe():
        st.remove_temp_files(state_dir)
    counters = Counters()
    counters.load_json(saved.counters)
    agent = Agent(args, counters, store, saved.kmsg, st.journaled_keys(state_dir, saved.kmsg), host)

    try:
        server = AgentHTTPServer(addr, ex.make_registry(counters.snapshot), agent.health)
    except OSError as e:
        return _usage(f"--listen {args.listen}: cannot listen: {e.strerror or e}")
    except (OverflowError, ValueError) as e:
        return _usage(f"--listen {args.listen}: {e}")
    http = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="http", daemon=True)
    http.start()
    log.info("nodewarden %s agent on %s: serving http://%s/metrics, state in %s",
             __version__, host, args.listen, state_dir)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.follow(stop)
    finally:
        agent.close()
        server.shutdown()
        server.server_close()
    log.info("stopped")
    return exitcodes.OK

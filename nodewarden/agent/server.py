"""The agent's HTTP endpoint:

* ``GET``/``HEAD /metrics``: the Prometheus text format, or OpenMetrics 1.0 when ``Accept`` asks for
  it, gzipped when ``Accept-Encoding`` allows it (:mod:`nodewarden.agent.textformat`: the
  bytes of prometheus_client's ``generate_latest``), kept between changes, family by family and
  per format, by :class:`nodewarden.agent.exporter.Exposition`. ``Vary: Accept,
  Accept-Encoding``.
* ``GET``/``HEAD /healthz``: small JSON, 200 when ``ok`` else 503 (see :func:`nodewarden.agent.daemon.health`)
* ``/``: a link page; anything else 404, other methods 405.

One asyncio event loop in its own thread (:meth:`AgentHTTPServer.serve_forever`), HTTP/1.1 with
keep-alive parsed by ``h11``, TLS by the standard ``ssl`` module, basic auth with bcrypt hashes
(:mod:`nodewarden.agent.webconfig`). Rendering, ``health()`` and bcrypt run in small thread
pools, so the loop always accepts and times out connections. Why not prometheus-client's
``start_http_server`` or ``http.server``: a thread per connection, no read timeout, no
connection cap, no auth; an idle connection there holds a thread and a file descriptor for
ever, and at ``ulimit -n`` the accept loop spins on EMFILE while the event journal cannot open
its files.

Bounds (:class:`ServerSettings`, the ``[http]`` table of the agent's configuration):

* connections: at most :func:`connection_cap` at once, and one being accepted
  (``max_connections``, and never more than the open-file limit less the file descriptors the
  agent already holds and :data:`FD_RESERVE` kept for the journal, ``state.json`` and the
  collectors). At the cap, the
  connection that has waited longest for a request (idle keep-alive, a TLS handshake or a
  request head not complete) is closed to make room; when every connection is being answered,
  accepting pauses and new ones wait in the listen backlog (``backlog``).
* time: a TLS handshake, and the first request head, within ``request_timeout_seconds``; the
  next request on a kept-alive connection within ``idle_timeout_seconds`` (its head then
  within ``request_timeout_seconds``); a response written within ``write_timeout_seconds``.
* size: a request head of at most :data:`MAX_HEAD_BYTES`; requests with a body are refused (413).

Client errors (a bad request, a timeout, a hang-up before the response, a failed TLS handshake,
a refused password) are logged as one line each at INFO, never with a traceback; closing idle
connections at the cap is summed up in one line at most every :data:`EVICT_LOG_S` seconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import errno
import gzip
import http
import json
import logging
import os
import resource
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import h11
from nodewarden.agent import textformat as tf
from nodewarden.agent.exporter import Exposition
from nodewarden.agent.webconfig import BasicAuth, WebConfig, parse_basic

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

FD_RESERVE = 64  # file descriptors never used for connections: journal, state.json, sysfs, NVML
MIN_CONNECTIONS = 8  # an open-file limit leaving fewer is refused at start
MAX_HEAD_BYTES = 16 << 10  # request line and headers
MAX_PIPELINED_BYTES = 64 << 10  # bytes a client may send ahead while its request is answered
ACCEPT_BATCH = 64  # connections accepted per wake-up of the loop
EVICT_LOG_S = 10.0  # at most one summary line about closed idle connections this often
ACCEPT_RETRY_S = 1.0  # accepting pauses this long after EMFILE/ENFILE/ENOBUFS/ENOMEM
TEXT = "text/plain; charset=utf-8"
VARY = b"Accept, Accept-Encoding"

# (Accept, Accept-Encoding) header values (None: absent) -> (body, Content-Type, Content-Encoding or None)
MetricsBody = Callable[[str | None, str | None], tuple[bytes, str, str | None]]



_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(t: float | None = None) -> str:
    """``t`` (seconds since the epoch; default now) as an HTTP ``Date`` value, RFC 9110 5.6.7's
    IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``): what ``email.utils.formatdate(usegmt=True)``
    gives, without loading the email package into the agent (0.4 MB resident)."""
    g = time.gmtime(t)
    return (f"{_DAYS[g.tm_wday]}, {g.tm_mday:02d} {_MONTHS[g.tm_mon - 1]} {g.tm_year:04d} "
            f"{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} GMT")

class FdLimitError(ValueError):
    """The open-file limit leaves too few file descriptors for connections."""


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Bounds of the HTTP server (see the module docstring); seconds, counts."""

    max_connections: int = 256
    backlog: int = 1024
    request_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 120.0
    write_timeout_seconds: float = 30.0


def open_fds() -> int:
    """File descriptors this process holds now (``/proc/self/fd``; 16 when unreadable)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16


def connection_cap(max_connections: int, limit: int | None = None, in_use: int | None = None,
                   reserve: int = FD_RESERVE) -> int:
    """Connections the server may hold at once (pure but for its defaults): ``max_connections``,
    or fewer so that ``in_use`` descriptors + connections + the listening socket + the one being
    accepted while another closes + ``reserve`` stay within ``limit`` (default: the soft ``RLIMIT_NOFILE``; ``in_use``: :func:`open_fds`).
    Raises :class:`FdLimitError` when that leaves fewer than :data:`MIN_CONNECTIONS`."""
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return max_connections
    used = open_fds() if in_use is None else in_use
    room = limit - used - 2 - reserve
    if room < MIN_CONNECTIONS:
        raise FdLimitError(f"the open-file limit ({limit}, ulimit -n / LimitNOFILE=) leaves {max(room, 0)} "
                           f"file descriptors for HTTP connections ({used} in use, {reserve} kept for the "
                           f"journal and collectors); at least {MIN_CONNECTIONS} are needed: raise it")
    return min(max_connections, room)


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"
    return str(addr)


def metrics_body(metrics: Exposition | Any | Callable[[], bytes]) -> MetricsBody:
    """What :class:`AgentHTTPServer` serves on /metrics for its ``metrics`` argument:

    * an :class:`~nodewarden.agent.exporter.Exposition`, or its bound ``render``: its
      :meth:`~nodewarden.agent.exporter.Exposition.serve` (every format, bytes kept between changes);
    * a prometheus_client registry (anything with ``collect()``): rendered by prometheus_client
      and compressed at each scrape, in the format
      :meth:`~nodewarden.agent.exporter.Exposition.negotiate` picks;
    * any other function returning bytes: those bytes, as the text format
      (:data:`~nodewarden.agent.textformat.TEXT_CONTENT_TYPE`), never compressed.
    """
    if isinstance(metrics, Exposition):
        return metrics.serve
    owner = getattr(metrics, "__self__", None)
    if isinstance(owner, Exposition) and getattr(metrics, "__func__", None) is Exposition.render:
        return owner.serve
    if hasattr(metrics, "collect"):
        registry = metrics

        def baked(accept: str | None, accept_encoding: str | None) -> tuple[bytes, str, str | None]:
            from prometheus_client import exposition, openmetrics
            fmt, gz = Exposition.negotiate(accept, accept_encoding)
            encoder = openmetrics.exposition.generate_latest if fmt is tf.OPENMETRICS else exposition.generate_latest
            body = encoder(registry)  # type: ignore[arg-type]
            return (gzip.compress(body), fmt.content_type, "gzip") if gz else (body, fmt.content_type, None)
        return baked
    assert callable(metrics)
    render = metrics
    return lambda _accept, _encoding: (render(), tf.TEXT_CONTENT_TYPE, None)


class AgentHTTPServer:
    """Serves ``metrics`` on /metrics and ``health()`` on /healthz at ``addr``; ``web``: TLS,
    basic auth and extra headers (None: plain HTTP, no auth). ``metrics``: the agent's
    :class:`~nodewarden.agent.exporter.Exposition` (every format, bytes kept between changes),
    a registry (rendered at each scrape), or a function returning text-format bytes
    (:func:`metrics_body`).

    The socket is bound and listening when the constructor returns (OSError when it cannot be;
    :class:`FdLimitError` when the open-file limit is too low). :meth:`serve_forever` runs the
    loop in the calling thread until :meth:`shutdown`; :meth:`server_close` closes the socket.
    """

    def __init__(self, addr: tuple[str, int], metrics: Exposition | Any | Callable[[], bytes],
                 health: Callable[[], dict[str, Any]], settings: ServerSettings | None = None,
                 web: WebConfig | None = None) -> None:
        self.metrics = metrics_body(metrics)
        self.health = health
        self.settings = settings or ServerSettings()
        self.web = web
        self.cap = connection_cap(self.settings.max_connections)
        self.auth = BasicAuth(web.users) if web is not None and web.users else None
        self.ssl_context: ssl.SSLContext | None = web.ssl_context if web is not None else None
        if self.ssl_context is not None and asyncio.sslproto.ssl is None:
            raise RuntimeError("TLS asked for in a process whose asyncio was imported without ssl "
                               "(nodewarden.agent.daemon.import_server(tls=False)): serve TLS from a new process")
        self.extra_headers = [(k.encode(), v.encode()) for k, v in (web.headers if web is not None else ())]
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        # [::] takes IPv4 too, as the kernel's default (net.ipv6.bindv6only=0) would
        dual = family == socket.AF_INET6 and addr[0] == "::" and socket.has_dualstack_ipv6()
        self.socket = socket.create_server(addr, family=family, backlog=self.settings.backlog, dualstack_ipv6=dual)
        self.socket.setblocking(False)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self._conns: dict[_Conn, None] = {}  # insertion-ordered set
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._accepting = False
        self._accept_paused_until = 0.0
        self._render = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="http-render")
        self._bcrypt = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-auth")
        self._evicted = 0
        self._evicted_logged = 0
        self._evict_log_at = 0.0
        self._last_emfile_log = 0.0

    # -- life cycle ------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def connection_count(self) -> int:
        """Connections held now (accepted and not yet closed)."""
        return len(self._conns)

    def serve_forever(self) -> None:
        """Run the event loop until :meth:`shutdown`."""
        try:
            asyncio.run(self._serve())
        finally:
            self._done.set()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop :meth:`serve_forever` (from another thread) and wait up to ``timeout`` seconds."""
        if not self._started.is_set():
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # loop already closed
                pass
        self._done.wait(timeout)

    def server_close(self) -> None:
        self.socket.close()
        self._render.shutdown(wait=False, cancel_futures=True)
        self._bcrypt.shutdown(wait=False, cancel_futures=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._stop = asyncio.Event()
        self._resume_accept()
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            self._pause_accept()
            for c in list(self._conns):
                c.abort()
            await asyncio.sleep(0)  # let the transports close their sockets

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        log.warning("http: %s%s", context.get("message", "error"), f": {exc!r}" if exc else "")

    # -- accepting -------------------------------------------------------------------------

    def _resume_accept(self) -> None:
        if not self._accepting and self._loop is not None and self.socket.fileno() >= 0:
            self._loop.add_reader(self.socket, self._on_accept)
            self._accepting = True

    def _pause_accept(self) -> None:
        if self._accepting and self._loop is not None:
            self._loop.remove_reader(self.socket)
            self._accepting = False

    def _on_accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if len(self._conns) > self.cap:
                # one over, the one accepted last: wait until a connection closes (an evicted one
                # on the next turn of the loop, else one being answered); _release resumes
                self._pause_accept()
                return
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    now = time.monotonic()
                    if now - self._last_emfile_log > 60:
                        log.warning("http: cannot accept connections: %s (%d held); pausing %gs",
                                    e.strerror or e, len(self._conns), ACCEPT_RETRY_S)
                        self._last_emfile_log = now
                    self._pause_accept()
                    self._accept_paused_until = now + ACCEPT_RETRY_S
                    assert self._loop is not None
                    self._loop.call_later(ACCEPT_RETRY_S, self._resume_accept)
                    return
                raise
            if len(self._conns) >= self.cap:
                self._evict()
            self._open(sock, addr)

    def _open(self, sock: socket.socket, addr: Any) -> None:
        assert self._loop is not None
        c = _Conn(self, _peer(addr), sock)
        self._conns[c] = None
        tls = self.ssl_context
        c.task = self._loop.create_task(self._loop.connect_accepted_socket(
            lambda: c, sock, ssl=tls, ssl_handshake_timeout=self.settings.request_timeout_seconds if tls else None))
        c.task.add_done_callback(c.opened)

    def _evict(self) -> None:
        """Close the connection that has waited longest for a request, if any."""
        waiting = [c for c in self._conns if c.state in ("handshake", "idle") and not c.closing]
        if not waiting:
            return
        oldest = min(waiting, key=lambda c: c.since)
        log.debug("http: at the cap of %d connections: closing %s (waiting %.1fs)", self.cap, oldest.peer,
                  time.monotonic() - oldest.since)
        oldest.abort()
        self._evicted += 1
        now = time.monotonic()
        if now - self._evict_log_at >= EVICT_LOG_S:
            log.info("http: at the cap of %d connections: closed %d connection(s) waiting longest for a request",
                     self.cap, self._evicted - self._evicted_logged)
            self._evicted_logged, self._evict_log_at = self._evicted, now

    def _release(self, c: _Conn) -> None:
        self._conns.pop(c, None)
        if (len(self._conns) <= self.cap and self._stop is not None and not self._stop.is_set()
                and time.monotonic() >= self._accept_paused_until):
            self._resume_accept()

    # -- answering -------------------------------------------------------------------------

    async def respond(self, req: h11.Request, peer: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body) for ``req``. Raises nothing a client can cause."""
        method = req.method.decode("ascii", "replace")
        target = req.target.decode("ascii", "replace")
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, [(b"Allow", b"GET, HEAD")], b"method not allowed\n"
        if self.auth is not None:
            creds = parse_basic(_header(req, b"authorization"))
            ok = False
            if creds is not None:
                ok_cached = self.auth.cached(creds)
                if ok_cached is None:
                    assert self._loop is not None
                    ok_cached = await self._loop.run_in_executor(self._bcrypt, self.auth.check, creds)
                ok = ok_cached
            if not ok:
                log.info("http: %s %s %s: 401, %s", peer, method, target,
                         f"wrong password or unknown user {creds[0]!r}" if creds else "no basic auth credentials")
                return 401, [(b"WWW-Authenticate", b'Basic realm="nodewarden"')], b"Unauthorized\n"
        if path == "/metrics":
            assert self._loop is not None
            try:
                body, content_type, encoding = await self._loop.run_in_executor(
                    self._render, self.metrics, _header(req, b"accept"), _header(req, b"accept-encoding"))
            except Exception:  # never expected: the collector serves its last snapshot on errors
                log.exception("rendering /metrics failed")
                return 500, [], b"internal error\n"
            headers = [(b"Content-Type", content_type.encode("latin-1")), (b"Vary", VARY)]
            if encoding is not None:
                headers.append((b"Content-Encoding", encoding.encode("latin-1")))
            return 200, headers, body
        if path == "/healthz":
            assert self._loop is not None
            try:
                h = await self._loop.run_in_executor(self._render, self.health)
            except Exception:
                log.exception("/healthz failed")
                return 500, [], b"internal error\n"
            return (200 if h.get("ok") else 503), [(b"Content-Type", b"application/json")], \
                (json.dumps(h) + "\n").encode()
        if path == "/":
            return 200, [(b"Content-Type", b"text/html; charset=utf-8")], \
                b'<html><body><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a></body></html>\n'
        return 404, [], b"not found\n"


def _header(req: h11.Request, name: bytes) -> str | None:
    """The value of header ``name`` (lower case), its lines joined with commas when it came more
    than once (RFC 9110 5.3); None when absent."""
    values = [v.decode("latin-1") for k, v in req.headers if k == name]
    return ", ".join(values) if values else None


class _Conn(asyncio.Protocol):
    """One connection: ``state`` handshake (TLS) -> idle (waiting for a request) -> busy
    (answering) -> idle ...; ``since``: when it entered that state (monotonic)."""

    def __init__(self, server: AgentHTTPServer, peer: str, sock: socket.socket) -> None:
        self.server = server
        self.peer = peer
        self.sock = sock
        self.state = "handshake"
        self.since = time.monotonic()
        self.closing = False
        self.task: asyncio.Task[Any] | None = None
        self.answer: asyncio.Task[Any] | None = None
        self.transport: asyncio.Transport | None = None
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.request: h11.Request | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_kind = ""
        self.writable = asyncio.Event()
        self.writable.set()
        self.released = False

    # -- set-up and tear-down ----------------------------------------------------------------

    def opened(self, task: asyncio.Task[Any]) -> None:
        """Done callback of ``connect_accepted_socket``: the TLS handshake failed or timed out
        (or the connection was closed during it)."""
        if task.cancelled() or task.exception() is not None:
            exc = None if task.cancelled() else task.exception()
            if exc is not None and not self.closing:
                log.info("http: %s: TLS handshake failed: %s", self.peer, _why(exc))
            self.sock.close()
            self._release()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()
        elif self.task is not None and not self.task.done():
            self.task.cancel()
        else:
            self.sock.close()
            self._release()

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self._cancel_timer()
            self.server._release(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.closing:
            transport.abort()
            return
        self._idle(self.server.settings.request_timeout_seconds, "request")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state == "busy" and not self.closing:
            log.info("http: %s: client closed the connection before the response was sent%s", self.peer,
                     f" ({_why(exc)})" if exc else "")
        self.closing = True
        if self.answer is not None and not self.answer.done():
            self.answer.cancel()
        self.transport = None
        self._release()

    def eof_received(self) -> bool | None:
        return None  # close

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- timers ----------------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _arm(self, seconds: float, kind: str) -> None:
        self._cancel_timer()
        assert self.server._loop is not None
        self.timer = self.server._loop.call_later(seconds, self._timeout)
        self.timer_kind = kind

    def _idle(self, seconds: float, kind: str) -> None:
        self.state = "idle"
        self.since = time.monotonic()
        self._arm(seconds, kind)

    def _timeout(self) -> None:
        self.timer = None
        if self.closing:
            return
        if self.timer_kind == "keepalive":
            log.debug("http: %s: idle keep-alive connection closed", self.peer)
        elif self.timer_kind == "request":
            log.info("http: %s: no complete request within %gs: closed", self.peer,
                     self.server.settings.request_timeout_seconds)
        else:
            log.info("http: %s: response not read within %gs: closed", self.peer,
                     self.server.settings.write_timeout_seconds)
        self.abort()

    # -- reading ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closing or self.state == "closing":
            return
        self.h11.receive_data(data)
        if self.state == "idle":
            if self.timer_kind == "keepalive":  # a request begins: its head is due soon
                self._arm(self.server.settings.request_timeout_seconds, "request")
            self._process()
        elif len(self.h11.trailing_data[0]) > MAX_PIPELINED_BYTES:
            log.info("http: %s: more than %d bytes sent ahead of the response: closed", self.peer,
                     MAX_PIPELINED_BYTES)
            self.abort()

    def _process(self) -> None:
        while self.state == "idle" and not self.closing:
            try:
                ev = self.h11.next_event()
            except h11.RemoteProtocolError as e:
                log.info("http: %s: bad request: %s", self.peer, e)
                self._reply_now(e.error_status_hint, b"bad request\n")
                return
            if ev is h11.NEED_DATA or ev is h11.PAUSED:
                return
            if isinstance(ev, h11.Request):
                self.request = ev
                if _has_body(ev):
                    log.info("http: %s: %s %s with a body: 413", self.peer, ev.method.decode("ascii", "replace"),
                             ev.target.decode("ascii", "replace"))
                    self._reply_now(413, b"request bodies are not accepted\n")
                    return
            elif isinstance(ev, h11.EndOfMessage):
                req, self.request = self.request, None
                assert req is not None
                self.state = "busy"
                self.since = time.monotonic()
                self._cancel_timer()
                assert self.server._loop is not None
                self.answer = self.server._loop.create_task(self._answer(req))
                return
            elif isinstance(ev, h11.ConnectionClosed):
                if self.transport is not None:
                    self.transport.close()
                return

    def _reply_now(self, status: int, body: bytes) -> None:
        """An error response, then close."""
        self.state = "busy"
        self._cancel_timer()
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE) and self.transport is not None:
            try:
                out = self.h11.send(h11.Response(status_code=status, reason=_reason(status), headers=self._headers(
                    [(b"Content-Type", TEXT.encode()), (b"Content-Length", str(len(body)).encode()),
                     (b"Connection", b"close")])))
                out += self.h11.send(h11.Data(data=body)) + self.h11.send(h11.EndOfMessage())
                self.transport.write(out)
            except h11.LocalProtocolError:
                pass
        self._close_after_write()

    def _close_after_write(self) -> None:
        """Close once what is buffered is written; abort if that takes longer than the write timeout."""
        self.state = "closing"
        if self.transport is not None:
            self.transport.close()
            self._arm(self.server.settings.write_timeout_seconds, "write")

    def _headers(self, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        return [(b"Date", http_date().encode()), (b"Server", b"nodewarden"),
                *self.server.extra_headers, *extra]

    # -- answering -------------------------------------------------------------------------

    async def _answer(self, req: h11.Request) -> None:
        try:
            status, headers, body = await self.server.respond(req, self.peer)
            if self.closing or self.transport is None or self.transport.is_closing():
                return
            hdrs = self._headers([*headers, (b"Content-Length", str(len(body)).encode())])
            if not any(k == b"Content-Type" for k, _ in headers):
                hdrs.append((b"Content-Type", TEXT.encode()))
            out = self.h11.send(h11.Response(status_code=status, reason=_reason(status), headers=hdrs))
            if req.method != b"HEAD":
                out += self.h11.send(h11.Data(data=body))
            out += self.h11.send(h11.EndOfMessage())
            self.transport.write(out)
            if not self.writable.is_set():
                try:
                    await asyncio.wait_for(self.writable.wait(), self.server.settings.write_timeout_seconds)
                except asyncio.TimeoutError:
                    log.info("http: %s: response not read within %gs: closed", self.peer,
                             self.server.settings.write_timeout_seconds)
                    self.abort()
                    return
            if self.closing or self.transport is None:
                return
            if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is not h11.DONE:
                self._close_after_write()
                return
            self.h11.start_next_cycle()
            self._idle(self.server.settings.idle_timeout_seconds, "keepalive")
            if self.h11.trailing_data[0]:
                self._arm(self.server.settings.request_timeout_seconds, "request")
                self._process()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here, not the client's doing: one traceback, the connection closed
            log.exception("http: %s: answering failed", self.peer)
            self.abort()


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _has_body(req: h11.Request) -> bool:
    for k, v in req.headers:
        if k == b"transfer-encoding" or (k == b"content-length" and v.strip() not in (b"0", b"")):
            return True
    return False


def _why(exc: BaseException) -> str:
    ssl = sys.modules.get("ssl")  # not imported: the server has no TLS (nodewarden.agent.daemon.import_server)
    if ssl is not None and isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__

"""The webhook's listener: it accepts connections, bounds them, and hands each whole request to one function.

kube-apiserver is the only client. Each connection (:mod:`enclave_admission.connection`) parses its requests
and calls :data:`Respond` with each whole one, answering from the callback that completes it; this module
decides which connections exist at all, how many at once, and for how long.

What one replica holds is bounded, so a flood (forged or not) costs a refusal, not the process: past
``max_connections`` a new connection is closed at once, and a body chunk that would take the request bytes
buffered by all connections past ``max_buffered`` is answered ``503`` and its connection closed (kube-apiserver
then applies the hook's failure policy, as for any other failed call). With a client CA, connections whose
certificate names none of ``client_names`` are closed before a byte is read; a connection without a certificate
(kube-apiserver's conversion calls carry none) is served only ``open_paths`` (``/convert``): any other request
line is answered ``403`` as soon as its headers are read, before its body is, and the connection closed.

Strangers cannot starve kube-apiserver of connections (docs/architecture.md, "Who may call admission"). The
listener accepts connections itself, so it sees them before their TLS handshake: at most
``max_handshakes`` handshakes are in progress at once, ``max_handshakes_per_source`` from one address, and
past either the *oldest* one is dropped (a real client finishes its handshake in milliseconds, an idle
stranger is the one that waited longest); a handshake takes at most ``handshake_timeout``. A connection
without a client certificate never takes one of the ``max_connections`` slots: it is one of at most
``max_anonymous`` (``max_anonymous_per_source`` per address, the oldest dropped past either), closed after its
one answer and aborted if its request is not whole within ``anonymous_timeout`` of the handshake (without a
path it may ask for, at once). Every connection must begin a request within ``first_request_timeout`` of its
handshake, have the request line and headers within ``header_timeout`` of the request's first byte, and the
whole request within ``request_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import Gauge

from enclave_admission.connection import CLOSED, Connection, DateHeader

log = logging.getLogger(__name__)

HANDSHAKES = Gauge("enclave_admission_handshakes", "Webhook connections accepted whose TLS handshake is in progress")
ANONYMOUS = Gauge(
    "enclave_admission_anonymous_connections",
    "Webhook connections without a client certificate while client authentication is on (served /convert only)",
)
BUFFERED = Gauge(
    "enclave_admission_buffered_request_bytes",
    "Request body bytes held by all webhook connections (bounded by --max-buffered-bytes)",
)

Answer = tuple[int, bytes]
"""HTTP status and JSON body."""
Respond = Callable[[str, str, bytes, bool], "Answer | Awaitable[Answer]"]
"""(method, path, body, trusted) -> the answer, or an awaitable of it for the few decisions that write (quota
reservations on a QuantityLedger); must not raise (an exception is answered 500). ``trusted`` is False for a
connection without a client certificate while client authentication is on: it may reach no decision."""


@dataclass(frozen=True)
class Limits:
    max_body: int = 3 * 1024 * 1024
    """kube-apiserver caps objects near 1.5 MiB; an AdmissionReview carries up to two of them."""
    max_head: int = 64 * 1024
    """Request line and headers together; the parser would otherwise buffer a header of any length."""
    idle_timeout: float = 120.0
    """Longer than kube-apiserver's idle timeout (90 s), so the client closes first and never sends a review
    on a connection the server is closing."""
    first_request_timeout: float = 120.0
    """A new connection must begin a request within this of its handshake. As long as :attr:`idle_timeout`, not
    shorter: kube-apiserver's HTTP client dials a connection per review waiting for one and, when another frees
    first, parks the new one unused in its idle pool; closing it earlier races the review later sent on it,
    which then fails ("server closed idle connection") and kube-apiserver answers the user 500 (seen in the
    starvation tests under load at 10 s). Strangers are fenced otherwise: without a certificate by
    :attr:`anonymous_timeout`, and by the NetworkPolicy when client authentication is off."""
    header_timeout: float = 10.0
    """A request's line and headers must be whole within this of its first byte (slowloris)."""
    request_timeout: float = 30.0
    """A request whose first byte arrived must be whole within this."""
    sweep_interval: float = 1.0
    """How often the timeouts above are checked: they hold to within this."""
    handshake_timeout: float = 5.0
    """A TLS handshake takes kube-apiserver milliseconds; one not done within this is dropped."""
    max_handshakes: int = 512
    """TLS handshakes in progress at once; past it the oldest is dropped to make room."""
    max_handshakes_per_source: int = 128
    """Handshakes in progress from one address; past it that address's oldest is dropped. kube-apiserver
    itself opens a connection per review it has no idle one for, so a burst of concurrent writes is a burst of
    handshakes from its address: at 32, sixty concurrent creates had it evict its own (seen in CI)."""
    max_connections: int = 1000
    """Open connections per replica (without those of :attr:`max_anonymous`); kube-apiserver needs about one per
    review in flight."""
    max_anonymous: int = 256
    """Connections without a client certificate at once (client authentication on); past it the oldest is
    dropped. They never take a :attr:`max_connections` slot."""
    max_anonymous_per_source: int = 32
    """Of those, from one address; past it that address's oldest is dropped. kube-apiserver's conversion calls
    are among them, each done within milliseconds, so the oldest is a stranger's."""
    anonymous_timeout: float = 5.0
    """A connection without a client certificate must have sent its one request whole within this of its
    handshake (kube-apiserver's conversion call sends it at once)."""
    max_buffered: int = 64 * 1024 * 1024
    """Request body bytes all connections together may hold: about twenty 3 MiB reviews at once, well inside
    the chart's memory limit however many connections send large bodies."""
    client_names: frozenset[str] = frozenset()
    """Common or DNS names one of which a verified client certificate must carry; empty: any."""
    require_client_certificate: bool = False
    """Client authentication is on (the TLS context asks for a certificate and verifies one that is presented):
    a connection without one is served ``open_paths`` only. Off: every connection is served every path."""
    open_paths: frozenset[str] = frozenset()
    """What a connection without a client certificate may still ask for when ``require_client_certificate``
    is on: paths whose answers depend on nothing but the request (CRD conversion), for callers that cannot
    present one."""


class _Pending:
    """An accepted connection whose handshake is in progress."""

    def __init__(self, source: str, accepted: socket.socket) -> None:
        self.source = source
        self.socket = accepted
        self.started = False
        """The socket was handed to the loop (which closes it from then on)."""


class Listener:
    """Serves ``respond`` on a TCP port, with TLS when given a context."""

    def __init__(self, respond: Respond, limits: Limits | None = None) -> None:
        self.respond = respond
        self.limits = limits or Limits()
        self.connections: set[Connection] = set()
        """Every connection past its handshake."""
        self.anonymous: dict[Connection, None] = {}
        """Connections without a client certificate (client authentication on), oldest first."""
        self.handshakes: dict[asyncio.Task[None], _Pending] = {}
        """Accepted connections in their TLS handshake, oldest first."""
        self.buffered = 0
        """Request body bytes held by all connections together."""
        self.date = DateHeader()
        self.stopping = False
        self.port = 0
        self._drained = asyncio.Event()
        self._socket: socket.socket | None = None
        self._ssl: ssl.SSLContext | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_by_source: dict[str, dict[asyncio.Task[None], None]] = {}
        self._anonymous_by_source: dict[str, dict[Connection, None]] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        """Listen on ``host:port`` (0: any free port, read back from :attr:`port`)."""
        self._loop = asyncio.get_running_loop()
        BUFFERED.set_function(lambda: float(self.buffered))
        HANDSHAKES.set_function(lambda: float(len(self.handshakes)))
        ANONYMOUS.set_function(lambda: float(len(self.anonymous)))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.create_server((host, port), family=family, backlog=1024)
        listening.setblocking(False)
        self._socket = listening
        self._ssl = ssl_context
        self.port = listening.getsockname()[1]
        self._loop.add_reader(listening.fileno(), self._accept)
        self._sweeper = asyncio.create_task(self._sweep(), name="webhook-connection-sweeper")

    def _accept(self) -> None:
        """Take what the kernel has queued: a task per connection for its handshake, within the limits."""
        listening = self._socket
        if listening is None:
            return
        for _ in range(128):  # then let the loop serve the connections it has
            try:
                accepted, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors or memory: make room by the oldest handshake, retry in a moment.
                    log.warning("cannot accept webhook connections", extra={"error": str(err)})
                    self._evict_handshake(next(iter(self.handshakes), None))
                    self.loop.remove_reader(listening.fileno())
                    self.loop.call_later(0.1, self._resume_accepting)
                    return
                raise
            accepted.setblocking(False)
            with contextlib.suppress(OSError):
                accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            source = str(address[0])
            mine = self._pending_by_source.setdefault(source, {})
            if len(mine) >= self.limits.max_handshakes_per_source:
                self._evict_handshake(next(iter(mine)))
            if len(self.handshakes) >= self.limits.max_handshakes:
                self._evict_handshake(next(iter(self.handshakes)))
            pending = _Pending(source, accepted)
            task = self.loop.create_task(self._handshake(pending))
            self.handshakes[task] = pending
            self._pending_by_source.setdefault(source, {})[task] = None

    def _resume_accepting(self) -> None:
        if self._socket is not None and not self.stopping:
            self.loop.add_reader(self._socket.fileno(), self._accept)

    def _evict_handshake(self, task: asyncio.Task[None] | None, reason: str = "evicted") -> None:
        if task is None:
            return
        pending = self.handshakes.get(task)
        if pending is None:
            return
        if reason:
            CLOSED.labels(reason).inc()
        task.cancel()  # connect_accepted_socket closes the transport when its wait is cancelled
        if not pending.started:  # the socket never reached the loop: nobody else will close it
            pending.socket.close()
        self._handshake_done(task)

    def _handshake_done(self, task: asyncio.Task[None]) -> None:
        pending = self.handshakes.pop(task, None)
        if pending is None:
            return
        mine = self._pending_by_source.get(pending.source)
        if mine is not None:
            mine.pop(task, None)
            if not mine:
                del self._pending_by_source[pending.source]

    async def _handshake(self, pending: _Pending) -> None:
        """Hand the connection to the loop's transport; a TLS handshake within ``handshake_timeout``."""
        # Set in the same step that hands the socket over (connect_accepted_socket attaches it before it first
        # waits), so an eviction knows whether the socket is still this listener's to close.
        pending.started = True
        task = asyncio.current_task()
        source, accepted = pending.source, pending.socket
        try:
            if self._ssl is None:
                await self.loop.connect_accepted_socket(lambda: Connection(self, source), accepted)
            else:
                await self.loop.connect_accepted_socket(
                    lambda: Connection(self, source),
                    accepted,
                    ssl=self._ssl,
                    ssl_handshake_timeout=self.limits.handshake_timeout,
                )
        except asyncio.CancelledError:
            pass  # evicted (counted there) or the listener stopped
        except (OSError, ssl.SSLError, TimeoutError) as err:  # a timeout is ConnectionAbortedError on both loops
            CLOSED.labels("handshake").inc()
            log.debug("webhook handshake failed", extra={"source": source, "error": str(err)})
        finally:
            if task is not None:
                self._handshake_done(task)

    def admit_anonymous(self, connection: Connection) -> None:
        """Count a connection without a certificate, dropping the oldest past the limits."""
        limits = self.limits
        mine = self._anonymous_by_source.setdefault(connection.source, {})
        if len(mine) >= limits.max_anonymous_per_source:
            self._evict_anonymous(next(iter(mine)))
        if len(self.anonymous) >= limits.max_anonymous:
            self._evict_anonymous(next(iter(self.anonymous)))
        self.anonymous[connection] = None
        self._anonymous_by_source.setdefault(connection.source, {})[connection] = None

    def _evict_anonymous(self, connection: Connection) -> None:
        connection.abort("evicted")
        self._unlist_anonymous(connection)

    def _unlist_anonymous(self, connection: Connection) -> None:
        if connection not in self.anonymous:
            return
        del self.anonymous[connection]
        mine = self._anonymous_by_source.get(connection.source)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._anonymous_by_source[connection.source]

    async def stop(self, grace: float = 10.0) -> None:
        """Stop accepting, close idle connections, give requests in progress ``grace`` seconds to finish."""
        if self._socket is None:
            return
        self.stopping = True
        self.loop.remove_reader(self._socket.fileno())
        self._socket.close()
        for task in list(self.handshakes):
            self._evict_handshake(task, reason="")
        for connection in list(self.connections):
            if connection.started is None and connection.queued is None:
                connection.close("shutdown")
        if self.connections:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation of the stop that meets
            # the last connection's end in the same loop step.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._drained.wait()
        for connection in list(self.connections):
            connection.abort("shutdown")
        if self._sweeper is not None:
            self._sweeper.cancel()
            # Wait for it to end without taking its CancelledError for ours: a stop cancelled meanwhile ends so.
            await asyncio.wait([self._sweeper])
        self._socket = None

    def forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self._unlist_anonymous(connection)
        if self.stopping and not self.connections:
            self._drained.set()

    async def _sweep(self) -> None:
        """Close connections past one of their time limits (see :class:`Limits`)."""
        limits = self.limits
        while True:
            await asyncio.sleep(limits.sweep_interval)
            now = self.loop.time()
            for connection in list(self.connections):
                if connection.closing:
                    continue
                started = connection.started
                if connection.anonymous and now - connection.made > limits.anonymous_timeout:
                    connection.abort("anonymous-timeout")
                elif started is not None:
                    if now - started > limits.request_timeout:
                        connection.abort("slow-request")
                    elif connection.head >= 0 and now - started > limits.header_timeout:
                        connection.abort("slow-headers")
                elif connection.queued is not None:
                    continue  # an awaited answer is on its way
                elif connection.requests == 0:
                    if now - connection.made > limits.first_request_timeout:
                        connection.abort("no-request")
                elif now - connection.last > limits.idle_timeout:
                    connection.close("idle")

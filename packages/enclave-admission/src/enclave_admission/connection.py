"""One webhook connection: httptools parses, one synchronous function answers, answers leave in request order.

kube-apiserver is the only client: it POSTs one AdmissionReview at a time on keep-alive TLS connections and
waits for the answer. Every decision is made from memory without awaiting anything, so a request needs no
task, no stream and no request object: the parser's callbacks collect the URL and body, and the answer is
written from the callback that completes the message. Against aiohttp's web server, which builds all of
those for each request, this cuts the CPU per review by more than half (docs/benchmarks.md).

What HTTP needs and this keeps: llhttp (through httptools) does the parsing, chunked bodies included;
answers go out in request order (pipelining); ``Connection: close`` and HTTP/1.0 are honoured; bodies over
the limit get ``413``, request lines and headers over theirs ``431`` (before the parser buffers more),
and malformed requests ``400``, each closing the connection; ``Expect: 100-continue``
is answered; a client that stops reading stops being read (flow control). Connections idle longer than
kube-apiserver keeps them (90 s) are closed, and so are requests that do not arrive whole in time.

Which connections exist at all, and for how long, is the :mod:`enclave_admission.listener`'s business: it
accepts them, bounds how many and whose, and sweeps them against the time limits of
:class:`~enclave_admission.listener.Limits`; a connection counts its own bytes and requests for it.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Final, cast

import httptools
import orjson
from prometheus_client import Counter, Gauge

if TYPE_CHECKING:
    from enclave_admission.listener import Answer, Listener

log = logging.getLogger(__name__)

CONNECTIONS = Gauge("enclave_admission_connections", "Open webhook connections (kube-apiserver keeps them alive)")
CLOSED = Counter(
    "enclave_admission_connections_closed_by_server_total",
    "Connections the server closed, by reason (idle, no-request, slow-headers, slow-request, malformed, too-large, "
    "over-capacity, evicted, handshake, unauthenticated, anonymous-timeout, shutdown)",
    ["reason"],
)
_REASONS: Final = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


_INTERNAL: Final[Answer] = (500, b'{"error":"internal error; see the admission server\'s log"}')


class DateHeader:
    """The ``Date`` header, formatted once a second rather than once a response."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = email.utils.formatdate(now, usegmt=True).encode()
        return self._value


class Connection(asyncio.Protocol):
    """One client connection: parser callbacks in, answers out, in order."""

    def __init__(self, listener: Listener, source: str) -> None:
        self.listener = listener
        self.source = source
        """The peer's address (per-source limits)."""
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.size = 0
        self.head = 0
        """Bytes received since the request began while its headers are incomplete; -1 once they are."""
        self.head_size = 0
        """Request target and header fields of the request in progress, as parsed."""
        self.started: float | None = None
        """When the request in progress began; None between requests."""
        self.held = 0
        """Body bytes of the request in progress counted in :attr:`Listener.buffered`."""
        self.last = 0.0
        """When the last answer was written (or the connection made)."""
        self.made = 0.0
        """When the handshake completed."""
        self.requests = 0
        """Requests begun on this connection."""
        self.closing = False
        self.anonymous = False
        """No client certificate although client authentication is on: only ``open_paths`` are answered, once."""
        self.queued: deque[tuple[asyncio.Future[Answer] | Answer, bool]] | None = None
        """Answers not written yet behind an awaited one, in request order (None: nothing awaited)."""
        self.max_head = listener.limits.max_head
        self.max_body = listener.limits.max_body
        self.time = listener.loop.time

    # -- transport ---------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.last = self.made = self.time()
        listener = self.listener
        listener.connections.add(self)
        CONNECTIONS.inc()
        limits = listener.limits
        peercert = transport.get_extra_info("peercert")  # verified by the handshake when presented at all
        if limits.require_client_certificate and not peercert:
            self.anonymous = True
            if not limits.open_paths:
                self.abort("unauthenticated")
                return
            listener.admit_anonymous(self)
            return
        if len(listener.connections) - len(listener.anonymous) > limits.max_connections:
            self.abort("over-capacity")
            return
        if limits.client_names and not _names(peercert) & limits.client_names:
            log.warning("webhook client certificate names no allowed client; connection closed")
            self.abort("unauthenticated")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.release()
        CONNECTIONS.dec()
        self.listener.forget(self)

    def release(self) -> None:
        """Stop counting this request's body bytes (answered, refused or gone)."""
        if self.held:
            self.listener.buffered -= self.held
            self.held = 0

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if self.head >= 0:
            self.head += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(400, "protocol upgrades are not served here", "malformed")
        except httptools.HttpParserCallbackError:  # raised by our own callback: already logged and answered
            self.close()
        except httptools.HttpParserError as err:
            self.fail(400, f"malformed HTTP request: {err}", "malformed")
        if self.head > self.max_head:  # headers still incomplete: the parser buffers them whole
            self._head_too_large()

    def pause_writing(self) -> None:
        """The client is not reading its answers: stop reading its requests until it does."""
        if self.transport is not None and not self.closing:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()

    # -- parser callbacks --------------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.requests += 1
        self.release()
        self.url = b""
        self.body = []
        self.size = 0
        self.head_size = 0
        self.started = self.time()

    def on_headers_complete(self) -> None:
        self.head = -1
        if self.anonymous and _path(self.url) not in self.listener.limits.open_paths:
            self.fail(
                403,
                "a client certificate is required for this path; without one only "
                f"{', '.join(sorted(self.listener.limits.open_paths)) or 'nothing'} is served",
                "unauthenticated",
            )

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_size += len(url)
        if self.head_size > self.max_head:
            self._head_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        # once per header of every request: the size check inline, the Expect test only on a name that long
        self.head_size += len(name) + len(value) + 4
        if self.head_size > self.max_head:
            self._head_too_large()
        elif (
            len(name) == 6
            and name.lower() == b"expect"
            and value.lower() == b"100-continue"
            and not self.closing
            and self.transport is not None
        ):
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _head_too_large(self) -> None:
        self.fail(431, f"request line and headers over {self.max_head} bytes", "too-large")

    def on_body(self, chunk: bytes) -> None:
        if self.closing:
            return
        size = len(chunk)
        self.size += size
        if self.size > self.max_body:
            self.fail(413, f"request body over {self.max_body} bytes", "too-large")
            return
        listener = self.listener
        if listener.buffered + size > listener.limits.max_buffered:
            self.fail(503, "the admission server holds as many request bytes as it may; try again", "over-capacity")
            return
        listener.buffered += size
        self.held += size
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.closing:
            return
        if self.parser.should_upgrade():
            self.fail(400, "protocol upgrades are not served here", "malformed")
            return
        url = self.url
        path = _path(url)
        if path is None:
            self.fail(400, f"malformed request target {url[:200]!r}", "malformed")
            return
        method = self.parser.get_method().decode("ascii", "replace")
        try:
            answer = self.listener.respond(method, path, b"".join(self.body), not self.anonymous)
        except Exception:
            log.exception("answering failed", extra={"path": path})
            answer = _INTERNAL
        # A caller without a certificate gets one answer per connection: it holds nothing between requests.
        keep = self.parser.should_keep_alive() and not self.listener.stopping and not self.anonymous
        self.release()
        self.body = []
        self.head = 0
        self.started = None
        self.last = self.time()
        if type(answer) is tuple and self.queued is None:  # the synchronous path: written at once
            self.write(answer[0], answer[1], keep)
        else:
            self._enqueue(answer, keep)

    def _enqueue(self, answer: Answer | Awaitable[Answer], keep: bool) -> None:
        """An awaited answer, or any answer behind one: written in request order as each completes."""
        if self.queued is None:
            self.queued = deque()
        if type(answer) is tuple:
            self.queued.append((answer, keep))
            return
        future = asyncio.ensure_future(cast("Awaitable[Answer]", answer))
        self.queued.append((future, keep))
        future.add_done_callback(lambda _: self._flush())

    def _flush(self) -> None:
        queued = self.queued
        while queued:
            pending, keep = queued[0]
            if isinstance(pending, asyncio.Future):
                if not pending.done():
                    return
                try:
                    answer = pending.result()
                except Exception:
                    log.exception("answering failed")
                    answer = _INTERNAL
            else:
                answer = pending
            queued.popleft()
            self.last = self.time()
            self.write(answer[0], answer[1], keep and not self.listener.stopping)
        self.queued = None
        if self.listener.stopping and self.started is None:
            self.close("shutdown")

    # -- answers -----------------------------------------------------------------------------------------------

    def write(self, status: int, payload: bytes, keep: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = b"HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (
            status,
            _REASONS.get(status, "Error").encode(),
            self.listener.date.header(),
            len(payload),
            b"" if keep else b"Connection: close\r\n",
        )
        self.transport.write(head + payload)
        if not keep:
            self.close()

    def fail(self, status: int, message: str, reason: str) -> None:
        """Answer ``status`` and close: after a framing error nothing later on the connection can be trusted."""
        if self.closing:
            return
        CLOSED.labels(reason).inc()
        self.release()
        self.body = []
        self.write(status, orjson.dumps({"error": message}), keep=False)
        self.close()

    def close(self, reason: str = "") -> None:
        if reason and not self.closing:
            CLOSED.labels(reason).inc()
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self, reason: str) -> None:
        if not self.closing:
            CLOSED.labels(reason).inc()
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


def _path(url: bytes) -> str | None:
    """The path of a request target; None when it is malformed."""
    if url[:1] == b"/" and b"#" not in url:  # origin form, as kube-apiserver sends (`/path?timeout=10s`)
        return url.partition(b"?")[0].decode("utf-8", "replace")
    try:
        return str(httptools.parse_url(url).path.decode("utf-8", "replace"))
    except httptools.HttpParserInvalidURLError:
        return None


def _names(peercert: Any) -> frozenset[str]:
    """Common names and DNS names of a verified peer certificate (``SSLSocket.getpeercert()`` form)."""
    if not isinstance(peercert, dict):
        return frozenset()
    names: set[str] = set()
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                names.add(str(value))
    for key, value in peercert.get("subjectAltName") or ():
        if key == "DNS":
            names.add(str(value))
    return frozenset(names)

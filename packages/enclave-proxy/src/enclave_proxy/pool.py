"""Kept-open HTTP/1.1 connections to kube-apiserver, for the requests the proxy passes through.

Why not aiohttp's client (which the proxy used first): per request it builds a URL, a ClientRequest and a
ClientResponse, copies the headers twice, arms timers and trace hooks; that was half of the proxy's CPU per
forwarded GET (docs/benchmarks.md, the forwarding row). Here a request is one ``bytes`` written in one piece on a
connection taken from the idle list, and the answer is parsed by llhttp (``httptools``, already the admission
server's parser) straight into the chunks the handler hands on: a small answer whole, a watch chunk by chunk.

Each connection carries one request at a time. It goes back to the idle list only when its answer was read to
the end and kube-apiserver kept it alive; any other ending (the client left mid-answer, a parse error, a
timeout) closes it, so a half-read answer can never be taken for the next request's. A reused connection that
kube-apiserver closed while it sat idle fails before a byte of answer: an idempotent request is then sent once
more on a new connection.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from typing import cast

import httptools

IDLE_SECONDS = 30.0
"""An idle connection older than this is closed rather than reused (kube-apiserver may have dropped it)."""
CONNECT_SECONDS = 10.0
BUFFER = 1024 * 1024
"""Bytes of answer queued for a slow client before reading from kube-apiserver pauses."""
RETRIED = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods sent again when a reused connection turns out closed: safe to repeat."""


class UpstreamUnavailableError(ConnectionError):
    """kube-apiserver could not be reached, or dropped the connection before answering (answered 502)."""


class Exchange(asyncio.Protocol):
    """One connection to kube-apiserver and the answer now being read on it (llhttp's callbacks fill it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.head_seen = False
        self.head_only = False
        self.keep_alive = False
        """A HEAD's answer: complete at its headers (its Content-Length counts no body), then closed."""
        self.complete = False
        self.received = False
        self.error: BaseException | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.Protocol -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(UpstreamUnavailableError(f"kube-apiserver's answer does not parse: {err}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_seen and not self.complete and not self._delimited():
            self.complete = True  # an answer that ends with the connection (neither length nor chunks)
            self._wake()
        elif not self.complete:
            lost = UpstreamUnavailableError(f"kube-apiserver closed the connection: {exc or 'end of stream'}")
            lost.__cause__ = exc
            self._fail(lost)

    # -- llhttp's callbacks -----------------------------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status >= 200:
            self.head_seen = True
            self.complete = self.head_only
            self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.queued += len(body)
        if self.queued > BUFFER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status < 200:  # 100 Continue and the like: the real answer follows
            self.reason, self.headers = b"", []
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the message is over
        self._wake()

    # -- the handler's side -----------------------------------------------------------------------------------

    def header(self, name: bytes) -> bytes | None:
        for have, value in self.headers:
            if have.lower() == name:
                return value
        return None

    def _delimited(self) -> bool:
        """Whether the answer says where it ends (a length, chunks, or no body by its status)."""
        if self.status in (204, 304) or self.header(b"content-length") is not None:
            return True
        return b"chunked" in (self.header(b"transfer-encoding") or b"").lower()

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def changed(self) -> None:
        """Until llhttp's callbacks or the connection's end change something the handler waits for."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def body_now(self) -> bytes:
        """The whole body, once :attr:`complete`."""
        body = b"".join(self.chunks)
        self.chunks.clear()
        self.queued = 0
        return body

    async def read(self) -> bytes:
        """The next piece of the body as it arrives; ``b""`` at its end."""
        while not self.chunks:
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            await self.changed()
        chunk = self.chunks.popleft()
        self.queued -= len(chunk)
        if self._paused and self.queued <= BUFFER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        if self.head_only or self.closed or self.error is not None:
            return False
        return self.complete and self.keep_alive

    def reset(self) -> None:
        self.status, self.reason, self.headers = 0, b"", []
        self.chunks.clear()
        self.queued = 0
        self.head_seen = self.complete = self.received = self.keep_alive = False

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    """At most ``limit`` connections to ``host:port``, reused one request at a time."""

    def __init__(
        self, host: str, port: int, context: ssl.SSLContext | None, server_name: str | None, *, limit: int
    ) -> None:
        self.host = host
        self.port = port
        self.context = context
        self.server_name = (server_name or host) if context is not None else None
        self.idle: list[Exchange] = []
        self.slots = asyncio.Semaphore(limit)

    async def _connect(self) -> Exchange:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                _, exchange = await loop.create_connection(
                    Exchange, self.host, self.port, ssl=self.context, server_hostname=self.server_name
                )
        except (OSError, TimeoutError, ssl.SSLError) as err:
            raise UpstreamUnavailableError(f"cannot connect to kube-apiserver: {err}") from err
        return exchange

    def _reuse(self) -> Exchange | None:
        oldest = time.monotonic() - IDLE_SECONDS
        while self.idle:
            exchange = self.idle.pop()
            if not exchange.closed and exchange.idle_since > oldest:
                exchange.reset()
                return exchange
            exchange.close()
        return None

    async def send(self, method: str, message: bytes) -> Exchange:
        """Write ``message`` (head and body) on a connection and wait for the answer's head. The caller reads
        the body and must :meth:`release` the exchange. Raises :class:`UpstreamUnavailableError`."""
        await self.slots.acquire()
        exchange: Exchange | None = None
        try:
            exchange = self._reuse()
            reused = exchange is not None
            while True:
                if exchange is None:
                    exchange = await self._connect()
                assert exchange.transport is not None
                exchange.head_only = method == "HEAD"
                exchange.transport.write(message)
                # the answer's status line and headers (inline: one coroutine less per request)
                while not exchange.head_seen and exchange.error is None:
                    await exchange.changed()
                if exchange.head_seen:
                    return exchange
                error = exchange.error
                assert error is not None
                if not (reused and not exchange.received and method in RETRIED):
                    raise error
                exchange.close()
                exchange, reused = None, False
        except BaseException:
            if exchange is not None:
                exchange.close()
            self.slots.release()
            raise

    def release(self, exchange: Exchange) -> None:
        """Give back a connection :meth:`send` returned: kept for the next request only if its answer was read
        to the end and kube-apiserver keeps it alive."""
        if exchange.reusable():
            exchange.idle_since = time.monotonic()
            self.idle.append(exchange)
        else:
            exchange.close()
        self.slots.release()

    def close(self) -> None:
        for exchange in self.idle:
            exchange.close()
        self.idle.clear()

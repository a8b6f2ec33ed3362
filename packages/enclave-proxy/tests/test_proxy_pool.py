"""The kept-open connections to kube-apiserver (enclave_proxy.pool) against a scripted HTTP/1.1 server: reuse,
a stale connection retried only for idempotent requests, answers streamed, and a half-read answer never reused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from enclave_proxy.forward import _lines
from enclave_proxy.pool import Pool, UpstreamUnavailableError

Script = Callable[[bytes, asyncio.StreamWriter], None]


def plain(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Upstream:
    """A loopback server answering each request head with ``answer(head, writer)``; counts connections."""

    def __init__(self, answer: Script) -> None:
        self.answer = answer
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.answer(head, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


async def started(answer: Script) -> Upstream:
    upstream = Upstream(answer)
    upstream.server = await asyncio.start_server(upstream._serve, "127.0.0.1", 0)
    return upstream


async def body(pool: Pool, method: str = "GET") -> bytes:
    exchange = await pool.send(method, f"{method} / HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    try:
        out = b""
        while chunk := await exchange.read():
            out += chunk
        return out
    finally:
        pool.release(exchange)


@pytest.fixture
async def ok() -> AsyncIterator[Upstream]:
    upstream = await started(lambda head, writer: writer.write(plain(b"hello")))
    yield upstream
    assert upstream.server is not None
    upstream.server.close()


async def test_sequential_requests_share_one_connection(ok: Upstream) -> None:
    pool = Pool("127.0.0.1", ok.port, None, None, limit=4)
    assert [await body(pool) for _ in range(5)] == [b"hello"] * 5
    assert ok.connections == 1
    pool.close()


async def test_a_connection_closed_while_idle_is_retried_for_a_get(ok: Upstream) -> None:
    pool = Pool("127.0.0.1", ok.port, None, None, limit=4)
    assert await body(pool) == b"hello"
    pool.idle[0].transport.abort()  # type: ignore[union-attr]  # as if kube-apiserver had dropped it
    pool.idle[0].closed = False  # ... and the proxy had not noticed yet
    assert await body(pool) == b"hello"
    assert ok.connections == 2
    pool.close()


async def test_a_post_on_a_dropped_connection_is_not_sent_twice() -> None:
    seen: list[bytes] = []

    def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        seen.append(head)
        writer.transport.abort()  # the request arrived, no answer comes back

    upstream = await started(answer)
    pool = Pool("127.0.0.1", upstream.port, None, None, limit=4)
    with pytest.raises(UpstreamUnavailableError):
        await body(pool, "POST")
    assert len(seen) == 1
    pool.close()


async def test_a_chunked_answer_streams_and_the_connection_is_kept() -> None:
    def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")

    upstream = await started(answer)
    pool = Pool("127.0.0.1", upstream.port, None, None, limit=4)
    assert await body(pool) == b"abcde"
    assert await body(pool) == b"abcde"
    assert upstream.connections == 1
    pool.close()


async def test_a_half_read_answer_is_never_reused() -> None:
    def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")  # a watch: no end yet

    upstream = await started(answer)
    pool = Pool("127.0.0.1", upstream.port, None, None, limit=4)
    exchange = await pool.send("GET", b"GET /?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await exchange.read() == b"abc"
    pool.release(exchange)  # the client left mid-watch
    assert pool.idle == []
    assert exchange.closed
    pool.close()


async def test_a_head_answer_ends_at_its_headers() -> None:
    upstream = await started(lambda head, writer: writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"))
    pool = Pool("127.0.0.1", upstream.port, None, None, limit=4)
    assert await asyncio.wait_for(body(pool, "HEAD"), 5) == b""
    pool.close()


async def test_unreachable_upstream_is_unavailable() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    pool = Pool("127.0.0.1", port, None, None, limit=1)
    with pytest.raises(UpstreamUnavailableError):
        await body(pool)
    assert pool.slots._value == 1  # the slot came back


def test_an_identity_that_would_end_a_header_line_is_refused() -> None:
    assert _lines([("Impersonate-User", "alice")]) == b"Impersonate-User: alice\r\n"
    for forged in ("alice\r\nImpersonate-Group: system:masters", "a\nb", "a\0b"):
        with pytest.raises(ValueError, match="cannot carry"):
            _lines([("Impersonate-User", forged)])

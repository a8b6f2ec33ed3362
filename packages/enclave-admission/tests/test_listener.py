"""The webhook listener speaks HTTP/1.1 as a client would expect, byte by byte on a raw socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import orjson
import pytest
from prometheus_client import REGISTRY

from enclave_admission.listener import Answer, Limits, Listener

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def closed_by_server(reason: str) -> float:
    return REGISTRY.get_sample_value("enclave_admission_connections_closed_by_server_total", {"reason": reason}) or 0.0


def open_connections() -> float:
    return REGISTRY.get_sample_value("enclave_admission_connections") or 0.0


def echo(method: str, path: str, body: bytes, trusted: bool = True) -> Answer:
    if path == "/explode":
        raise RuntimeError("boom")
    return 200, orjson.dumps({"method": method, "path": path, "body": body.decode()})


@contextlib.asynccontextmanager
async def listening(limits: Limits | None = None) -> AsyncIterator[Listener]:
    listener = Listener(echo, limits)
    await listener.start("127.0.0.1", 0, None)
    try:
        yield listener
    finally:
        await listener.stop(grace=1)


async def connect(listener: Listener) -> Stream:
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: webhook", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def closed(reader: asyncio.StreamReader) -> bool:
    """The server closed the connection (EOF within a few seconds)."""
    return await asyncio.wait_for(reader.read(), 5) == b""


async def last_answer(listener: Listener, raw: bytes) -> tuple[int, dict[str, str]]:
    """Send ``raw`` on a new connection; the answer, after checking the server closed the connection."""
    reader, writer = await connect(listener)
    writer.write(raw)
    status, headers, _ = await read_answer(reader)
    assert headers["connection"] == "close"
    assert await closed(reader)
    return status, headers


async def test_keep_alive_serves_many_requests_on_one_connection() -> None:
    async with listening() as listener:
        before = open_connections()
        reader, writer = await connect(listener)
        for index in range(3):
            writer.write(post("/namespaces", f"review-{index}".encode()))
            status, headers, body = await read_answer(reader)
            assert status == 200
            assert headers["content-type"] == "application/json"
            assert "date" in headers
            assert orjson.loads(body) == {"method": "POST", "path": "/namespaces", "body": f"review-{index}"}
        assert open_connections() == before + 1
        writer.close()


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(b"".join(post(f"/p{index}", b"x") for index in range(5)))
        paths = [orjson.loads((await read_answer(reader))[2])["path"] for _ in range(5)]
        assert paths == [f"/p{index}" for index in range(5)]
        writer.close()


async def test_chunked_body_and_query_string() -> None:
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(
            b"POST /namespaces?timeout=5s HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )
        status, _, body = await read_answer(reader)
        assert status == 200
        assert orjson.loads(body) == {"method": "POST", "path": "/namespaces", "body": "hello world"}
        writer.close()


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/namespaces", "/namespaces"),
        ("/namespaces?timeout=10s", "/namespaces"),  # what kube-apiserver sends
        ("/namespaces/mutate?timeout=10s&x=%2F", "/namespaces/mutate"),
        ("/name%73paces", "/name%73paces"),  # not decoded: no path is served under two spellings
        ("http://webhook:9443/namespaces?timeout=10s", "/namespaces"),  # absolute form
    ],
)
async def test_the_path_is_the_request_target_without_its_query(target: str, path: str) -> None:
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(post(target, b"{}"))
        status, _, body = await read_answer(reader)
        assert status == 200
        assert orjson.loads(body)["path"] == path
        writer.close()


@pytest.mark.parametrize("header", ["Expect: 100-continue", "EXPECT: 100-Continue"])
async def test_expect_continue_gets_the_interim_answer_first(header: str) -> None:
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(post("/namespaces", b"{}", header))
        assert (await read_answer(reader))[0] == 100
        assert (await read_answer(reader))[0] == 200
        writer.close()


async def test_body_over_the_limit_is_refused_and_the_connection_closed() -> None:
    async with listening(Limits(max_body=1024)) as listener:
        reader, writer = await connect(listener)
        writer.write(post("/namespaces", b"x" * 4096))
        status, headers, body = await read_answer(reader)
        assert status == 413
        assert headers["connection"] == "close"
        assert "1024" in orjson.loads(body)["error"]
        assert await closed(reader)


async def test_oversized_headers_are_refused_before_the_parser_buffers_them() -> None:
    before = closed_by_server("too-large")
    async with listening(Limits(max_head=4096)) as listener:
        status, _ = await last_answer(listener, post("/namespaces", b"{}", "X-Padding: " + "a" * 10_000))
        assert status == 431
        # a header that never ends is not buffered past the limit either
        unfinished = b"POST /namespaces HTTP/1.1\r\nX-Padding: " + b"a" * 10_000
        assert (await last_answer(listener, unfinished))[0] == 431
        # a large body is not a large head
        reader, writer = await connect(listener)
        writer.write(post("/namespaces", b"b" * 100_000))
        assert (await read_answer(reader))[0] == 200
        writer.close()
    assert closed_by_server("too-large") == before + 2


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT-HTTP\r\n\r\n",
        b"POST /namespaces HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    ],
    ids=["garbage", "conflicting-lengths", "upgrade"],
)
async def test_malformed_requests_get_400_and_a_closed_connection(raw: bytes) -> None:
    before = closed_by_server("malformed")
    async with listening() as listener:
        assert (await last_answer(listener, raw))[0] == 400
    assert closed_by_server("malformed") == before + 1


async def test_connection_close_and_http_1_0_end_after_the_answer() -> None:
    async with listening() as listener:
        for request in (
            post("/namespaces", b"a", "Connection: close"),
            b"POST /namespaces HTTP/1.0\r\nContent-Length: 1\r\n\r\na",
        ):
            assert (await last_answer(listener, request))[0] == 200


async def test_an_answer_that_raises_is_a_500_and_the_connection_lives_on() -> None:
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(post("/explode", b""))
        assert (await read_answer(reader))[0] == 500
        writer.write(post("/namespaces", b""))
        assert (await read_answer(reader))[0] == 200
        writer.close()


async def test_idle_connections_and_slow_requests_are_closed() -> None:
    limits = Limits(idle_timeout=0.3, request_timeout=0.3, sweep_interval=0.05)
    idle_before, slow_before = closed_by_server("idle"), closed_by_server("slow-request")
    async with listening(limits) as listener:
        idle_reader, idle_writer = await connect(listener)
        idle_writer.write(post("/namespaces", b""))
        assert (await read_answer(idle_reader))[0] == 200
        slow_reader, slow_writer = await connect(listener)
        slow_writer.write(b"POST /namespaces HTTP/1.1\r\nHost: web")  # and never the rest
        assert await closed(idle_reader)
        assert await closed(slow_reader)
        assert not listener.connections
    assert closed_by_server("idle") == idle_before + 1
    assert closed_by_server("slow-request") == slow_before + 1


async def test_stop_closes_idle_connections_and_refuses_new_ones() -> None:
    listener = Listener(echo)
    await listener.start("127.0.0.1", 0, None)
    reader, writer = await connect(listener)
    writer.write(post("/namespaces", b""))
    assert (await read_answer(reader))[0] == 200
    await listener.stop(grace=1)
    assert await closed(reader)
    with pytest.raises(ConnectionRefusedError):
        await connect(listener)


async def test_connections_past_the_cap_are_closed_at_once() -> None:
    async with listening(Limits(max_connections=3)) as listener:
        before = closed_by_server("over-capacity")
        kept = [await connect(listener) for _ in range(3)]
        extra = [await connect(listener) for _ in range(2)]
        for reader, _ in extra:
            assert await closed(reader)
        assert closed_by_server("over-capacity") == before + 2
        for reader, writer in kept:  # the first three still answer
            writer.write(post("/namespaces", b"x"))
            assert (await read_answer(reader))[0] == 200
            writer.close()


async def test_bytes_in_flight_stay_under_the_cap_with_many_large_bodies() -> None:
    """Twelve 1 MiB reviews arrive at once, each stalled half-way; the replica holds at most 4 MiB of them,
    refuses the rest with 503 (the apiserver's failure policy decides), and serves the held ones."""
    cap, body = 4 * 1024 * 1024, 1024 * 1024
    async with listening(Limits(max_buffered=cap)) as listener:
        before = closed_by_server("over-capacity")
        streams = [await connect(listener) for _ in range(12)]
        peak = 0
        for _reader, writer in streams:
            writer.write(
                post("/namespaces", b"")[:-4].replace(b"Content-Length: 0", f"Content-Length: {body}".encode())
            )
            writer.write(b"\r\n\r\n" + b"a" * (body // 2))
            await writer.drain()
        for _ in range(100):  # until every half body arrived or was refused
            await asyncio.sleep(0.02)
            peak = max(peak, listener.buffered)
        assert peak <= cap
        assert REGISTRY.get_sample_value("enclave_admission_buffered_request_bytes") == listener.buffered
        refused, served = 0, 0
        for reader, writer in streams:
            try:
                writer.write(b"a" * (body // 2))
                await writer.drain()
                status, _, _ = await read_answer(reader)
            except (
                ConnectionError,
                RuntimeError,
                asyncio.IncompleteReadError,
            ):  # RuntimeError: uvloop's closed transport
                status = 503  # closed with the 503 still unread: the client's late bytes made it a reset
            peak = max(peak, listener.buffered)
            if status == 503:
                refused += 1
            else:
                assert status == 200
                served += 1
            writer.close()
        assert peak <= cap
        assert served >= 2
        assert refused >= 4  # 12 half bodies are 6 MiB: a third cannot be held
        assert served + refused == len(streams)
        assert closed_by_server("over-capacity") >= before + refused
        assert listener.buffered == 0

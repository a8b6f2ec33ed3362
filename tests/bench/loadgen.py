"""A lean closed-loop HTTPS load generator for the admission benchmark.

The load generator shares the machine's two cores with the server it measures, so whatever it spends per
request is taken from the server. aiohttp's client spent about 250 µs of CPU per AdmissionReview, as much as
the server: at concurrency 32 the table measured the client as much as the server. This one sends
pre-encoded HTTP/1.1 requests on keep-alive TLS connections (as kube-apiserver's webhook client keeps them)
and reads each answer by its Content-Length in protocol callbacks on uvloop, and still checks every answer:
status 200 and the AdmissionReview response for the request's own uid. Its CPU per review is a column of the
table, next to the server's.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
import uvloop

from enclave_core.runtime.options import HostPort


def address_of(url: str) -> HostPort:
    """The ``host:port`` of an ``https://host:port/...`` URL."""
    return HostPort.parse(url.removeprefix("https://").split("/", 1)[0])


@dataclass(frozen=True)
class LoadResult:
    wall: float
    """Seconds from the first request sent to the last answer read."""
    latencies: list[float]
    """Seconds per request, as the client saw them."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall


def encode(target: HostPort, path: str, review: dict[str, Any]) -> tuple[str, bytes]:
    """(uid, the whole HTTP/1.1 request) for one AdmissionReview."""
    body = orjson.dumps(review)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return str(review["request"]["uid"]), head.encode() + body


class _Client(asyncio.Protocol):
    """One keep-alive connection: sends the next request from the callback that reads the last answer, so the
    generator needs no task, future or stream per request."""

    def __init__(self, pending: list[tuple[str, bytes]], latencies: list[float], done: asyncio.Future[None]) -> None:
        self.pending = pending
        self.latencies = latencies
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.uid = ""
        self.sent = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done() and self.uid:
            self.done.set_exception(AssertionError(f"connection lost waiting for {self.uid!r}: {exc}"))

    def send_next(self) -> None:
        assert self.transport is not None
        if not self.pending:
            self.uid = ""
            if not self.done.done():
                self.done.set_result(None)
            return
        self.uid, request = self.pending.pop()
        self.sent = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
        self.latencies.append(time.perf_counter() - self.sent)
        try:
            if head[9:12] != b"200":
                raise AssertionError(f"HTTP {head[9:12].decode()}: {body[:300]!r}")
            if (uid := orjson.loads(body)["response"]["uid"]) != self.uid:
                raise AssertionError(f"answer for {uid!r} to request {self.uid!r}")
        except AssertionError as err:
            if not self.done.done():
                self.done.set_exception(err)
            return
        self.send_next()


def closed_loop(
    targets: Sequence[HostPort], path: str, context: ssl.SSLContext, reviews: list[dict[str, Any]], concurrency: int
) -> LoadResult:
    """Send ``reviews`` with ``concurrency`` connections, each one request in flight at a time, on a uvloop
    of its own (the lightest loop we have: the generator's CPU is taken from the server's).

    Connections are spread round-robin over ``targets``, as a Service spreads kube-apiserver's connections
    over the admission replicas; all are opened before the clock starts.
    """
    encoded = [encode(targets[0], path, review) for review in reviews]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_closed_loop(targets, context, encoded, concurrency))


async def _closed_loop(
    targets: Sequence[HostPort], context: ssl.SSLContext, encoded: list[tuple[str, bytes]], concurrency: int
) -> LoadResult:
    loop = asyncio.get_running_loop()
    pending = list(reversed(encoded))
    latencies: list[float] = []
    clients: list[_Client] = []
    for index in range(concurrency):
        target = targets[index % len(targets)]
        _, client = await loop.create_connection(
            lambda: _Client(pending, latencies, loop.create_future()), target.host, target.port, ssl=context
        )
        clients.append(client)
    try:
        started = time.perf_counter()
        for client in clients:
            client.send_next()
        await asyncio.gather(*(client.done for client in clients))
        wall = time.perf_counter() - started
    finally:
        for client in clients:
            if client.transport is not None:
                client.transport.close()
    return LoadResult(wall, latencies)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

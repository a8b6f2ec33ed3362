"""A request passed through (enclave_proxy.forward) against a scripted kube-apiserver and a real aiohttp server:
the answer relayed as kube-apiserver sent it (end-to-end headers, status, body), a complete answer sent back
as one aiohttp ``Response`` (its head and body leave in one write), and the proxy's own credentials asked for
once per :data:`~enclave_proxy.forward.CREDENTIALS_SECONDS`, not once per request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from enclave_core.kube.connection import Connection, Credentials
from enclave_proxy.forward import CREDENTIALS_SECONDS, Upstream
from enclave_proxy.identity import Identity

OWNER = Identity(user="alice", groups=("enclave.dev", "system:authenticated"))
ANSWER = (
    b"HTTP/1.1 200 OK\r\nAudit-Id: a-1\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
    b"Keep-Alive: timeout=5\r\nX-Kubernetes-Pf-Flowschema-Uid: f-1\r\nContent-Length: 13\r\n\r\n"
    b'{"kind":"cm"}'
)


@dataclass
class CountingCredentials(Credentials):
    """A bearer token whose every ask is counted."""

    asked: int = 0

    async def headers(self) -> dict[str, str]:
        self.asked += 1
        return {"Authorization": f"Bearer proxy-{self.asked}"}


@dataclass
class Front:
    """An aiohttp low-level server whose every request is forwarded by ``upstream``; the responses it built."""

    upstream: Upstream
    clock: list[float]
    """The upstream's clock, moved by hand."""
    port: int = 0
    responses: list[web.StreamResponse] = field(default_factory=list)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        response = await self.upstream.forward(request, OWNER)
        self.responses.append(response)
        return response

    async def get(self, method: str = "GET") -> bytes:
        """One request on a fresh connection; everything the front sent back until it closed."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(
            f"{method} /api/v1/namespaces/a/configmaps/c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        try:
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()


@pytest.fixture
async def kube_apiserver() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A scripted kube-apiserver answering :data:`ANSWER` (its HEAD answer without the body); the heads it got."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                heads.append(head)
                writer.write(ANSWER[: ANSWER.index(b"\r\n\r\n") + 4] if head.startswith(b"HEAD") else ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1]), heads
    server.close()


@pytest.fixture
async def front(kube_apiserver: tuple[int, list[bytes]]) -> AsyncIterator[tuple[Front, CountingCredentials]]:
    credentials = CountingCredentials()
    now = [100.0]
    api = Connection(f"http://127.0.0.1:{kube_apiserver[0]}", credentials=credentials)
    served = Front(Upstream(api, connections=4, clock=lambda: now[0]), now)
    runner = web.ServerRunner(web.Server(served.handle, access_log=None))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.port = int(runner.addresses[0][1])
    yield served, credentials
    await runner.cleanup()
    await served.upstream.close()


async def test_a_complete_answer_is_relayed_in_one_response(front: tuple[Front, CountingCredentials]) -> None:
    served, _ = front
    answer = await served.get()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    assert body == b'{"kind":"cm"}'
    assert headers["content-length"] == "13"
    assert headers["audit-id"] == "a-1"
    assert headers["x-kubernetes-pf-flowschema-uid"] == "f-1"
    assert headers["content-type"] == "application/json"
    assert "keep-alive" not in headers  # hop-by-hop: kube-apiserver's connection, not the client's
    assert [type(response) for response in served.responses] == [web.Response]  # head and body in one write


async def test_a_head_answer_has_no_body(front: tuple[Front, CountingCredentials]) -> None:
    served, _ = front
    answer = await served.get("HEAD")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\n")
    assert b"Audit-Id: a-1" in answer


async def test_the_proxy_credentials_are_asked_for_once_a_second(
    front: tuple[Front, CountingCredentials], kube_apiserver: tuple[int, list[bytes]]
) -> None:
    served, credentials = front
    for _ in range(5):
        await served.get()
    assert credentials.asked == 1
    served.clock[0] += CREDENTIALS_SECONDS
    await served.get()
    assert credentials.asked == 2
    sent = kube_apiserver[1]
    assert [head.count(b"Authorization: Bearer proxy-1") for head in sent[:5]] == [1] * 5
    assert b"Authorization: Bearer proxy-2" in sent[5]
    assert all(b"Impersonate-User: alice" in head for head in sent)

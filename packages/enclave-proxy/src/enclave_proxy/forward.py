"""Everything the proxy does not answer itself, passed to kube-apiserver as the caller.

Each request goes upstream with the proxy's own credentials and the caller's identity in impersonation
headers (:func:`enclave_proxy.identity.impersonation_headers`); the caller's ``Authorization`` and any
``Impersonate-*`` header never travel. Bodies stream both ways unchanged (the answer's bytes as they come, so
a watch's chunks reach the client one by one; compressed answers stay compressed).

Upgraded connections (``kubectl exec``, ``attach``, ``port-forward``: WebSocket, or SPDY/3.1 from older
clients) are relayed byte for byte: the proxy opens its own TLS connection to kube-apiserver, sends the
rewritten request, and once kube-apiserver answers ``101 Switching Protocols`` pipes both directions until
either side closes. The client's side is taken over from aiohttp after the request was parsed (its protocol's
payload parser becomes the pipe), before the ``101`` goes out, so no byte of the new protocol is read as HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from enclave_core.kube.connection import Connection

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers of one connection, not of the request: never copied across (aiohttp sets its own)."""
MAX_BODY = 16 * 1024 * 1024
"""Request bodies the proxy buffers at most (kube-apiserver refuses most writes over 3 MiB anyway)."""
MAX_HEAD = 64 * 1024
PIPE_BUFFER = 1024 * 1024
"""Bytes queued toward one side of an upgraded connection before the other side's reading pauses."""


def upstream_headers(
    request: web.Request, identity: CIMultiDict[str], credentials: Mapping[str, str]
) -> CIMultiDict[str]:
    """The caller's headers without its credentials, hop-by-hop headers and ``Impersonate-*``, plus the proxy's
    credentials and the caller's identity."""
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in request.headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower == "authorization" or lower.startswith("impersonate-"):
            continue
        headers.add(name, value)
    headers.update(credentials)
    headers.extend(identity)
    return headers


class Upstream:
    """kube-apiserver as the proxy reaches it: the address, TLS and credentials of ``api`` (its kubeconfig or
    in-cluster account) with a session of its own that does not decompress (bodies pass through as sent)."""

    def __init__(self, api: Connection, *, connections: int) -> None:
        self.api = api
        self.connections = connections
        parts = urlsplit(api.host)
        self.scheme = parts.scheme
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | bool = api.tls.context() if parts.scheme == "https" else False
        self.server_name = api.tls.server_name or None
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=self.ssl),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, request: web.Request, identity: CIMultiDict[str]) -> web.StreamResponse:
        """Send ``request`` upstream as ``identity``; stream the answer back."""
        headers = upstream_headers(request, identity, await self.api.headers())
        body = await request.read() if request.body_exists else None
        kwargs: dict[str, Any] = {}
        if self.server_name:
            kwargs["server_hostname"] = self.server_name
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0)
        async with self.session().request(
            request.method,
            self.api.host + request.path_qs,
            headers=headers,
            data=body,
            timeout=timeout,
            allow_redirects=False,
            **kwargs,
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers.add(name, value)
            if answer.content_length is not None and "chunked" not in answer.headers.get("Transfer-Encoding", ""):
                response.content_length = answer.content_length
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def upgrade(self, request: web.Request, identity: CIMultiDict[str]) -> web.StreamResponse:
        """Relay an upgrade request (WebSocket or SPDY) byte for byte once kube-apiserver switches protocols."""
        body = await request.read() if request.body_exists else b""
        headers = upstream_headers(request, identity, await self.api.headers())
        headers["Host"] = f"{self.host}:{self.port}"
        headers["Connection"] = "Upgrade"
        headers["Upgrade"] = request.headers.get("Upgrade", "")
        if body:
            headers["Content-Length"] = str(len(body))
        head = f"{request.method} {request.path_qs} HTTP/1.1\r\n".encode()
        head += b"".join(f"{name}: {value}\r\n".encode() for name, value in headers.items()) + b"\r\n"
        async with asyncio.timeout(10.0):  # not wait_for: on Python 3.11 it can drop the task's cancellation
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=self.ssl or None,
                server_hostname=(self.server_name or self.host) if self.ssl else None,
                limit=MAX_HEAD,
            )
        try:
            writer.write(head + body)
            async with asyncio.timeout(60.0):
                answer = await reader.readuntil(b"\r\n\r\n")
            status, answer_headers = _parse_head(answer)
            if status != 101:
                return await _plain_answer(status, answer_headers, reader)
            return await _splice(request, status, answer_headers, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _parse_head(head: bytes) -> tuple[int, CIMultiDict[str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ValueError(f"kube-apiserver answered {lines[0]!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.add(name.strip(), value.strip())
    return int(parts[1]), headers


async def _plain_answer(status: int, headers: CIMultiDict[str], reader: asyncio.StreamReader) -> web.Response:
    """An upgrade kube-apiserver refused (a 4xx Status, say): read its body and answer it normally."""
    length = headers.get("Content-Length", "")
    async with asyncio.timeout(60.0):
        if length.isdigit() and int(length) <= MAX_BODY:
            body = await reader.readexactly(int(length))
        else:
            body = await reader.read(MAX_BODY)
    kept = {name: value for name, value in headers.items() if name.lower() not in HOP_BY_HOP}
    return web.Response(status=status, body=body, headers=kept)


class _Pipe:
    """Stands in for aiohttp's payload parser on the client's connection once it is upgraded: every byte the
    client sends goes to kube-apiserver's socket (reading from the client pauses while that socket's buffer is
    full)."""

    def __init__(self, writer: asyncio.StreamWriter, client: asyncio.Transport) -> None:
        self.writer = writer
        self.client = client
        self.closed = asyncio.Event()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if self.writer.is_closing():
            return True, b""
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > PIPE_BUFFER:
            self.client.pause_reading()
            asyncio.get_running_loop().create_task(self._resume())
        return False, b""

    async def _resume(self) -> None:
        with contextlib.suppress(Exception):
            await self.writer.drain()
        with contextlib.suppress(Exception):
            self.client.resume_reading()

    def feed_eof(self) -> None:
        with contextlib.suppress(Exception):
            if self.writer.can_write_eof():
                self.writer.write_eof()
        self.closed.set()


async def _splice(
    request: web.Request,
    status: int,
    headers: CIMultiDict[str],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> web.StreamResponse:
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("the client left before the upgrade")
    response = web.StreamResponse(status=status)
    for name, value in headers.items():
        if name.lower() not in ("content-length", "transfer-encoding"):
            response.headers.add(name, value)
    pipe = _Pipe(writer, transport)
    protocol = request.protocol
    protocol.keep_alive(False)
    protocol.set_parser(cast(Any, pipe))  # before the 101 leaves: the client's next byte is the new protocol's
    await response.prepare(request)
    await response.write(b"")  # the 101 now, not with the first byte of payload
    try:
        while chunk := await reader.read(65536):
            await response.write(chunk)
    except (ConnectionError, OSError):
        pass
    finally:
        transport.close()
    return response

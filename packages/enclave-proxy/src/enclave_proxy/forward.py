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
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
from aiohttp import web
from multidict import CIMultiDict

from enclave_core.kube.connection import Connection
from enclave_proxy.identity import Identity, impersonation_headers
from enclave_proxy.pool import Exchange, Pool, UpstreamUnavailableError

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


DROPPED = frozenset(name.encode() for name in HOP_BY_HOP | {"authorization", "expect"})
"""Request headers never sent on (``Expect``: the proxy has read the body already)."""
CREDENTIALS_SECONDS = 1.0
"""How long the proxy's own credential headers are reused before they are asked for again (a token file is re-read
every minute and an exec credential renewed before it expires; asking per request cost coroutines and dicts)."""
MAX_NAMES = 1_000
"""Header names of kube-apiserver's answers decoded once and remembered (it sends a handful; a bound all the same)."""
_NAMES: dict[bytes, str] = {}
MAX_IDENTITIES = 10_000
"""Encoded identities remembered at most; past that the cache starts over."""


def _lines(headers: Iterable[tuple[str, str]]) -> bytes:
    """``Name: value`` lines; ValueError for a value that would end the line or the head early."""
    out = []
    for name, value in headers:
        if "\r" in value or "\n" in value or "\0" in value:
            raise ValueError(f"header {name} cannot carry {value!r}")
        out.append(f"{name}: {value}\r\n")
    return "".join(out).encode()


def _status(code: int, reason: str, message: str) -> web.Response:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body |= {"message": message, "reason": reason, "code": code}
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


def _end_to_end(exchange: Exchange) -> list[tuple[str, str]]:
    """kube-apiserver's answer headers without the hop-by-hop ones, as ``str`` pairs."""
    kept = []
    for raw_name, raw_value in exchange.headers:
        name = _NAMES.get(raw_name)
        if name is None:
            name = raw_name.decode("latin-1")
            if len(_NAMES) < MAX_NAMES:
                _NAMES[raw_name] = name
        if name.lower() not in HOP_BY_HOP:
            kept.append((name, raw_value.decode("utf-8", "replace")))
    return kept


async def _answer(request: web.BaseRequest, exchange: Exchange) -> web.StreamResponse:
    """kube-apiserver's answer to the client: the status and end-to-end headers, then the body: in one write
    when it is all here (most answers: an aiohttp ``Response`` sends its head and body as one TLS record and one
    ``send``, where a prepared ``StreamResponse`` sends its head at once and the body after it), else each piece as
    it comes (a watch, a large list)."""
    reason = exchange.reason.decode("latin-1") or None
    headers = CIMultiDict(_end_to_end(exchange))
    bodiless = exchange.status in (204, 304) or request.method == "HEAD"
    if exchange.complete and not bodiless:
        return web.Response(status=exchange.status, reason=reason, body=exchange.body_now(), headers=headers)
    response = web.StreamResponse(status=exchange.status, reason=reason, headers=headers)
    if exchange.complete:
        await response.prepare(request)
        await response.write_eof(exchange.body_now())
        return response
    length = exchange.header(b"content-length")
    if length is not None and length.isdigit() and not bodiless:
        response.content_length = int(length)
    await response.prepare(request)
    while chunk := await exchange.read():
        await response.write(chunk)
    await response.write_eof()
    return response


def upstream_headers(
    request: web.BaseRequest, identity: CIMultiDict[str], credentials: Mapping[str, str]
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
    in-cluster account), and a :class:`~enclave_proxy.pool.Pool` of kept-open connections to it."""

    def __init__(self, api: Connection, *, connections: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.clock = clock
        self.connections = connections
        parts = urlsplit(api.host)
        self.scheme = parts.scheme
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        context = api.tls.context() if parts.scheme == "https" else None
        self.ssl: ssl.SSLContext | bool = context or False
        self.server_name = api.tls.server_name or None
        self.pool = Pool(self.host, self.port, context, self.server_name, limit=connections)
        self._host_line = f"Host: {parts.netloc}\r\n".encode()
        self._credentials: tuple[tuple[str, str], ...] = ()
        self._credential_lines = b""
        self._credentials_until = 0.0
        self._identities: dict[Identity, bytes] = {}

    async def close(self) -> None:
        self.pool.close()

    async def _credential_block(self) -> bytes:
        """The proxy's own credential headers, asked for at most every :data:`CREDENTIALS_SECONDS` and encoded
        again only when they change (a re-read token file)."""
        moment = self.clock()
        if moment < self._credentials_until:
            return self._credential_lines
        self._credentials_until = moment + CREDENTIALS_SECONDS
        now = tuple((await self.api.headers()).items())
        if now != self._credentials:
            self._credential_lines = _lines(now)
            self._credentials = now
        return self._credential_lines

    def _identity_block(self, identity: Identity) -> bytes:
        """The caller's ``Impersonate-*`` headers, encoded once per identity (a caller's burst reuses them)."""
        block = self._identities.get(identity)
        if block is None:
            block = _lines(impersonation_headers(identity).items())
            if len(self._identities) >= MAX_IDENTITIES:
                self._identities.clear()
            self._identities[identity] = block
        return block

    async def message(self, request: web.BaseRequest, identity: Identity) -> bytes:
        """The request as kube-apiserver gets it: the caller's request line and headers without its credentials,
        hop-by-hop headers and ``Impersonate-*``, plus the proxy's credentials and the caller's identity, and the
        body. Raises ValueError for an identity no header can carry."""
        target = request.raw_path
        if not target.startswith("/"):  # an absolute-form target: send the path only
            target = request.path_qs
        parts = [f"{request.method} {target} HTTP/1.1\r\n".encode(), self._host_line]
        for name, value in request.raw_headers:
            lower = name.lower()
            if lower in DROPPED or lower.startswith(b"impersonate-"):
                continue
            parts += (name, b": ", value, b"\r\n")
        parts.append(await self._credential_block())
        parts.append(self._identity_block(identity))
        body = await request.read() if request.body_exists else b""
        if body or request.method in ("POST", "PUT", "PATCH"):
            parts.append(b"Content-Length: %d\r\n" % len(body))
        parts += (b"\r\n", body)
        return b"".join(parts)

    async def forward(self, request: web.BaseRequest, identity: Identity) -> web.StreamResponse:
        """Send ``request`` upstream as ``identity``; a small answer goes back whole, a longer one (a watch, a
        large list) chunk by chunk as it arrives."""
        try:
            message = await self.message(request, identity)
        except ValueError as err:
            return _status(400, "BadRequest", str(err))
        try:
            exchange = await self.pool.send(request.method, message)
        except UpstreamUnavailableError as err:
            log.warning("kube-apiserver unavailable", extra={"error": str(err)})
            return _status(502, "ServiceUnavailable", "enclave-proxy cannot reach kube-apiserver; retry")
        try:
            return await _answer(request, exchange)
        finally:
            self.pool.release(exchange)

    async def upgrade(self, request: web.BaseRequest, identity: CIMultiDict[str]) -> web.StreamResponse:
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
    request: web.BaseRequest,
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

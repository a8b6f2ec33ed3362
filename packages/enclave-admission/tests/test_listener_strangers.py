"""Strangers cannot hold the listener's slots: handshakes, connections without a client certificate and slow
requests are each bounded in time and number, and kube-apiserver's certificate is still served meanwhile.

Real TLS on loopback with short limits, on both event loops (see conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from prometheus_client import REGISTRY
from test_listener import closed, closed_by_server, post, read_answer

from enclave_admission.listener import Answer, Limits, Listener
from enclave_core.pki import CertificateAuthority, KeyPair

APISERVER = "kube-apiserver-webhook"


def answer(method: str, path: str, body: bytes, trusted: bool = True) -> Answer:
    return 200, orjson.dumps({"path": path, "trusted": trusted})


@dataclass
class Pki:
    ca: CertificateAuthority
    serving: ssl.SSLContext
    directory: Path

    def client(self, pair: KeyPair | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca.pair.cert_pem.decode())
        if pair is not None:
            (self.directory / "c.crt").write_bytes(pair.cert_pem)
            (self.directory / "c.key").write_bytes(pair.key_pem)
            context.load_cert_chain(self.directory / "c.crt", self.directory / "c.key")
        return context

    def apiserver(self) -> ssl.SSLContext:
        return self.client(self.ca.issue(APISERVER, server=False, client=True))


def pki(directory: Path) -> Pki:
    ca = CertificateAuthority.generate("test-ca")
    serving = ca.issue("admission", ip_addresses=["127.0.0.1"])
    (directory / "tls.crt").write_bytes(serving.cert_pem)
    (directory / "tls.key").write_bytes(serving.key_pem)
    (directory / "ca.crt").write_bytes(ca.pair.cert_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    context.load_verify_locations(cafile=str(directory / "ca.crt"))
    context.verify_mode = ssl.CERT_OPTIONAL
    return Pki(ca, context, directory)


def client_auth(**limits: float | int) -> Limits:
    return Limits(
        client_names=frozenset({APISERVER}),
        require_client_certificate=True,
        open_paths=frozenset({"/convert"}),
        sweep_interval=0.05,
        **limits,  # type: ignore[arg-type]  # each a float or int field of Limits
    )


@contextlib.asynccontextmanager
async def serving(context: ssl.SSLContext | None, limits: Limits) -> AsyncIterator[Listener]:
    listener = Listener(answer, limits)
    await listener.start("127.0.0.1", 0, context)
    try:
        yield listener
    finally:
        await listener.stop(grace=1)


async def served(listener: Listener, context: ssl.SSLContext, path: str = "/namespaces") -> int:
    """One request on a new TLS connection with ``context``: its status."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", listener.port, ssl=context), 5)
    try:
        writer.write(post(path, b"{}"))
        return (await read_answer(reader))[0]
    finally:
        writer.close()


async def raw(listener: Listener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection that never starts a TLS handshake."""
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def no_certificate(
    listener: Listener, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", listener.port, ssl=context), 5)


def gauge(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_a_connection_that_never_handshakes_is_closed_after_the_handshake_timeout(tmp_path: Path) -> None:
    keys = pki(tmp_path)
    before = closed_by_server("handshake")
    async with serving(keys.serving, client_auth(handshake_timeout=0.3)) as listener:
        reader, _ = await raw(listener)
        assert await closed(reader)
        assert not listener.handshakes
    assert closed_by_server("handshake") == before + 1


@pytest.mark.parametrize("bound", ["max_handshakes_per_source", "max_handshakes"])
async def test_past_the_handshake_bound_the_oldest_is_dropped_and_the_apiserver_still_served(
    tmp_path: Path, bound: str
) -> None:
    """Loopback is one source, so both bounds see the same five idle connections."""
    keys = pki(tmp_path)
    before = closed_by_server("evicted")
    async with serving(keys.serving, client_auth(**{bound: 3})) as listener:
        idle = [await raw(listener) for _ in range(5)]
        for reader, _ in idle[:2]:  # the two oldest made room
            assert await closed(reader)
        assert len(listener.handshakes) == 3
        assert gauge("enclave_admission_handshakes") == 3
        assert await served(listener, keys.apiserver()) == 200  # drops the next oldest, then completes
        assert closed_by_server("evicted") == before + 3
        for _, writer in idle:
            writer.close()


async def test_without_a_certificate_one_answer_then_closed(tmp_path: Path) -> None:
    keys = pki(tmp_path)
    async with serving(keys.serving, client_auth()) as listener:
        reader, writer = await no_certificate(listener, keys.client())
        writer.write(post("/convert", b"{}"))
        status, headers, body = await read_answer(reader)
        assert status == 200
        assert orjson.loads(body) == {"path": "/convert", "trusted": False}
        assert headers["connection"] == "close"
        assert await closed(reader)
        assert not listener.anonymous


async def test_without_a_certificate_and_no_open_path_the_connection_is_closed_after_the_handshake(
    tmp_path: Path,
) -> None:
    keys = pki(tmp_path)
    before = closed_by_server("unauthenticated")
    limits = Limits(client_names=frozenset({APISERVER}), require_client_certificate=True)
    async with serving(keys.serving, limits) as listener:
        reader, _ = await no_certificate(listener, keys.client())
        assert await closed(reader)
        assert await served(listener, keys.apiserver()) == 200
    assert closed_by_server("unauthenticated") == before + 1


async def test_a_connection_without_a_certificate_that_sends_nothing_is_closed_after_the_anonymous_timeout(
    tmp_path: Path,
) -> None:
    keys = pki(tmp_path)
    before = closed_by_server("anonymous-timeout")
    async with serving(keys.serving, client_auth(anonymous_timeout=0.3)) as listener:
        silent, _ = await no_certificate(listener, keys.client())
        slow, slow_writer = await no_certificate(listener, keys.client())
        slow_writer.write(b"POST /convert HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert await closed(silent)
        assert await closed(slow)
    assert closed_by_server("anonymous-timeout") == before + 2


async def test_connections_without_a_certificate_take_no_slot_and_the_oldest_make_room(tmp_path: Path) -> None:
    """Twelve strangers against a replica of two slots, four strangers in all and two per address: the oldest
    strangers are dropped, and kube-apiserver's two connections are served beside the newest."""
    keys = pki(tmp_path)
    limits = client_auth(max_connections=2, max_anonymous=4, max_anonymous_per_source=2)
    before = closed_by_server("evicted")
    async with serving(keys.serving, limits) as listener:
        strangers = [await no_certificate(listener, keys.client()) for _ in range(12)]
        for reader, _ in strangers[:10]:
            assert await closed(reader)
        assert len(listener.anonymous) == 2
        assert gauge("enclave_admission_anonymous_connections") == 2
        apiserver = [await no_certificate(listener, keys.apiserver()) for _ in range(2)]
        for reader, writer in apiserver:
            writer.write(post("/namespaces", b"{}"))
            status, _, body = await read_answer(reader)
            assert status == 200
            assert orjson.loads(body)["trusted"] is True
        for reader, writer in strangers[10:]:  # the newest two strangers are still answered (once)
            writer.write(post("/convert", b"{}"))
            assert (await read_answer(reader))[0] == 200
        for _, writer in apiserver:
            writer.close()
    assert closed_by_server("evicted") == before + 10


async def test_a_connection_that_never_begins_a_request_is_closed() -> None:
    before = closed_by_server("no-request")
    async with serving(None, Limits(first_request_timeout=0.3, sweep_interval=0.05)) as listener:
        reader, _ = await raw(listener)
        assert await closed(reader)
        assert not listener.connections
    assert closed_by_server("no-request") == before + 1


async def test_headers_that_trickle_in_are_cut_off_before_the_request_timeout() -> None:
    """Slowloris: a byte of header now and then keeps the connection busy, never whole."""
    before = closed_by_server("slow-headers")
    limits = Limits(header_timeout=0.3, request_timeout=30, sweep_interval=0.05)
    async with serving(None, limits) as listener:
        reader, writer = await raw(listener)
        writer.write(b"POST /namespaces HTTP/1.1\r\n")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not reader.at_eof() and loop.time() < deadline:
            with contextlib.suppress(ConnectionError, RuntimeError):  # RuntimeError: uvloop's closed transport
                writer.write(b"X")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(1), 0.05)
        assert reader.at_eof()
        assert loop.time() < deadline
    assert closed_by_server("slow-headers") == before + 1

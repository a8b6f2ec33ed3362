"""Snapshot streams are mutual TLS: a real publisher refuses clients without a certificate of the service CA.

The certificates come from the plans enclave-config writes into the ``enclave-tls`` Secret
(``enclave_config.tls.plan``) and each component's client Secret (``tls.plan_client``), so the test proves
that what the Secrets hold works for both ends, and that the shared serving key is no client identity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from enclave_config import tls
from enclave_core.pki import CertificateAuthority
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.subscriber import SnapshotSubscriber

NAMES = ["localhost"]


def _write(directory: Path, files: dict[str, bytes]) -> dict[str, str]:
    paths = {}
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        paths[name] = str(path)
    return paths


@pytest.fixture
async def publisher(tmp_path: Path) -> AsyncIterator[tuple[int, dict[str, bytes]]]:
    """A TenantService publisher with TLS from the Secret's plan, one snapshot published."""
    data = tls.plan({}, dns_names=NAMES, ip_addresses=["127.0.0.1"], validity=timedelta(days=1)).data
    hub = SnapshotHub("test")
    hub.publish("Tenancy", b'{"tenants": []}')
    server = SnapshotServer(
        "127.0.0.1:0",
        tls_source=lambda: (data[tls.TLS_CERT], data[tls.TLS_KEY]),
        client_ca=lambda: data[tls.CA_CERT],
    )
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    await server.start()
    try:
        yield server.port, data
    finally:
        await server.stop(0)


async def _first(port: int, ca: bytes, key: bytes | None = None, cert: bytes | None = None) -> Snapshot:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    options = [("grpc.ssl_target_name_override", "localhost")]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        stub: Any = tenants_pb2_grpc.TenantServiceStub(channel)  # type: ignore[no-untyped-call]
        async for snapshot in stub.Watch(WatchRequest(subscriber="t"), timeout=5):
            assert isinstance(snapshot, Snapshot)
            return snapshot
    raise AssertionError("stream ended without a snapshot")


async def test_a_client_without_a_certificate_is_refused(publisher: tuple[int, dict[str, bytes]]) -> None:
    port, data = publisher
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _first(port, data[tls.CA_CERT])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_client_certificate_of_another_ca_is_refused(publisher: tuple[int, dict[str, bytes]]) -> None:
    port, data = publisher
    stranger = CertificateAuthority.generate("another-ca").issue("intruder", client=True, server=False)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _first(port, data[tls.CA_CERT], stranger.key_pem, stranger.cert_pem)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_server_only_certificate_of_the_right_ca_is_refused(publisher: tuple[int, dict[str, bytes]]) -> None:
    """The EKU matters: a certificate the CA issued for serving only is not a client identity."""
    port, data = publisher
    ca = CertificateAuthority.from_pem(data[tls.CA_CERT], data[tls.CA_KEY])
    server_only = ca.issue("a-server", dns_names=NAMES, server=True, client=False)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _first(port, data[tls.CA_CERT], server_only.key_pem, server_only.cert_pem)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_serving_certificate_is_no_client_identity(publisher: tuple[int, dict[str, bytes]]) -> None:
    """Every pod that serves holds the serving key: it must not open a stream (serverAuth only)."""
    port, data = publisher
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _first(port, data[tls.CA_CERT], data[tls.TLS_KEY], data[tls.TLS_CERT])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_components_client_secret_streams_as_a_subscriber(
    publisher: tuple[int, dict[str, bytes]], tmp_path: Path
) -> None:
    port, data = publisher
    client = tls.plan_client({}, data, "enclave-admission", validity=timedelta(days=1)).data
    files = _write(tmp_path, client)
    arrived = asyncio.Event()
    subscriber = SnapshotSubscriber(
        f"127.0.0.1:{port}",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=["Tenancy"],
        on_snapshot=lambda _snapshot: arrived.set(),
        subscriber="test",
        ca_file=files["ca.crt"],
        server_name="localhost",
        client_cert_file=files["tls.crt"],
        client_key_file=files["tls.key"],
    )
    task = asyncio.create_task(subscriber.run())
    try:
        await asyncio.wait_for(arrived.wait(), timeout=10)
        assert subscriber.ready
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_tls_without_client_authentication_is_refused() -> None:
    data = tls.plan({}, dns_names=NAMES, ip_addresses=[], validity=timedelta(days=1)).data
    with pytest.raises(ValueError, match="without client authentication"):
        SnapshotServer("0.0.0.0:0", tls_source=lambda: (data[tls.TLS_CERT], data[tls.TLS_KEY]))

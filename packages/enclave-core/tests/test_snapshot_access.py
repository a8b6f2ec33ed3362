"""Who may subscribe to what: the table (pure), the identity a client certificate carries, and a real TLS
publisher applying both to ``Watch``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import grpc
import pytest

from enclave_core.identity import component_named
from enclave_core.pki import CertificateAuthority, KeyPair, component_of, component_uri, issue_component_client
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots import access
from enclave_core.snapshots.configuration import CONFIG_KIND
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.rules import RULES_KIND
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.tenancy import TENANCY_KIND

CA = CertificateAuthority.generate("enclave-test-ca")
SERVING = CA.issue("enclave-tenants", dns_names=["localhost"])
DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("component", "kinds", "allowed"),
    [
        ("enclave-admission", [RULES_KIND, TENANCY_KIND], True),
        ("enclave-admission", [CONFIG_KIND], True),
        ("enclave-pools", [CONFIG_KIND], True),
        ("enclave-pools", [RULES_KIND], False),
        ("enclave-tenants", [TENANCY_KIND], False),
        ("enclave-replication", [CONFIG_KIND, RULES_KIND], False),
        ("enclave-admission", ["SomethingNew"], False),
        ("enclave-proxy", [CONFIG_KIND, TENANCY_KIND], True),
        ("enclave-proxy", [RULES_KIND], False),
        ("enclave-stranger", [CONFIG_KIND], False),
        (None, [CONFIG_KIND], False),
    ],
)
def test_the_table(component: str | None, kinds: list[str], allowed: bool) -> None:
    assert (access.refusal(component, kinds) == "") is allowed


def test_a_refusal_names_the_kinds_refused() -> None:
    assert access.refusal("enclave-pools", [CONFIG_KIND, RULES_KIND, TENANCY_KIND]) == (
        "enclave-pools may not subscribe to Rules, Tenancy"
    )


def test_every_kind_has_subscribers_and_every_subscriber_a_certificate() -> None:
    assert all(access.SUBSCRIBERS.values())
    assert "enclave-config" not in access.CLIENT_COMPONENTS, "config subscribes to nothing"
    assert set(access.CLIENT_COMPONENTS) == set().union(*access.SUBSCRIBERS.values())
    assert access.readable("enclave-tenants") == [CONFIG_KIND]


def test_only_a_client_certificate_with_one_component_uri_is_an_identity() -> None:
    assert component_of(issue_component_client(CA, "enclave-admission", DAY).certificate) == "enclave-admission"
    assert component_of(SERVING.certificate) is None, "a serving certificate names no component"
    named_by_cn = CA.issue("enclave-admission", server=False, client=True)
    assert component_of(named_by_cn.certificate) is None, "the CN alone is not the identity"
    server_only = CA.issue("x", uris=[component_uri("enclave-admission")], server=True, client=False)
    assert component_of(server_only.certificate) is None, "clientAuth is required"
    two = CA.issue("x", uris=[component_uri("enclave-admission"), component_uri("enclave-pools")], client=True)
    assert component_of(two.certificate) is None, "two identities are none"
    nested = CA.issue("x", uris=[component_uri("enclave-admission/extra")], client=True)
    assert component_of(nested.certificate) is None


def test_the_uris_name_one_component_or_none() -> None:
    """The URI rule on its own, as a publisher applies it to the handshake's ``peer_uri`` list."""
    assert component_named([component_uri("enclave-admission"), "spiffe://other/x"]) == "enclave-admission"
    assert component_named([]) is None
    assert component_named([component_uri("")]) is None
    assert component_named([component_uri("a"), component_uri("b")]) is None
    assert component_named([component_uri("a/b")]) is None
    assert component_named(["spiffe://enclave.dev/componentx/enclave-admission"]) is None


@pytest.fixture
async def tenants_publisher() -> AsyncIterator[int]:
    """A TenantService publisher over mutual TLS, holding Tenancy and Rules."""
    hub = SnapshotHub("test")
    hub.publish(TENANCY_KIND, b'{"tenants": []}')
    hub.publish(RULES_KIND, b"{}")
    server = SnapshotServer(
        "127.0.0.1:0", tls_source=lambda: (SERVING.cert_pem, SERVING.key_pem), client_ca=lambda: CA.pair.cert_pem
    )
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    await server.start()
    try:
        yield server.port
    finally:
        await server.stop(0)


async def _kinds(port: int, client: KeyPair, kinds: list[str]) -> set[str]:
    """The kinds the publisher sends before its first heartbeat."""
    credentials = grpc.ssl_channel_credentials(CA.pair.cert_pem, client.key_pem, client.cert_pem)
    options = [("grpc.ssl_target_name_override", "localhost")]
    seen: set[str] = set()
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        stub: Any = tenants_pb2_grpc.TenantServiceStub(channel)  # type: ignore[no-untyped-call]
        request = WatchRequest(subscriber="test", kinds=kinds, heartbeat_seconds=1)
        async for snapshot in stub.Watch(request, timeout=5):
            assert isinstance(snapshot, Snapshot)
            if snapshot.heartbeat:
                break
            seen.add(snapshot.kind)
    return seen


async def test_a_component_reads_the_kinds_it_may(tenants_publisher: int) -> None:
    admission = issue_component_client(CA, "enclave-admission", DAY)
    assert await _kinds(tenants_publisher, admission, [RULES_KIND]) == {RULES_KIND}
    assert await _kinds(tenants_publisher, admission, []) == {RULES_KIND, TENANCY_KIND}


@pytest.mark.parametrize("kinds", [[RULES_KIND], [], [CONFIG_KIND, TENANCY_KIND]])
async def test_a_component_asking_for_a_kind_it_may_not_read_is_denied(
    tenants_publisher: int, kinds: list[str]
) -> None:
    pools = issue_component_client(CA, "enclave-pools", DAY)
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await _kinds(tenants_publisher, pools, kinds)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_certificate_naming_no_component_is_denied(tenants_publisher: int) -> None:
    anonymous = CA.issue("enclave-admission", server=False, client=True)
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await _kinds(tenants_publisher, anonymous, [RULES_KIND])
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "names no Enclave component" in str(denied.value.details())


async def test_a_certificate_naming_two_components_is_denied(tenants_publisher: int) -> None:
    two = CA.issue("x", uris=[component_uri("enclave-admission"), component_uri("enclave-proxy")], client=True)
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await _kinds(tenants_publisher, two, [RULES_KIND])
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_serving_certificate_naming_a_component_is_refused_by_the_handshake(tenants_publisher: int) -> None:
    """The publisher reads the identity from the handshake's ``peer_uri`` without looking at the usages: this is
    the check that a certificate without clientAuth never gets that far."""
    server_only = CA.issue("x", uris=[component_uri("enclave-admission")], server=True, client=False)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _kinds(tenants_publisher, server_only, [RULES_KIND])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_publisher_loads_no_x509_library() -> None:
    """The gRPC runtime every component imports (server included) leaves ``cryptography`` out: about 12 MB of
    resident memory per process (docs/decisions/0007)."""
    code = "import sys, enclave_core.runtime.grpc; print('cryptography' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert loaded.stdout.strip() == "False"

"""The HTTP side: routing, error answers (never an allow), the response format, metrics; and certificate
renewal on a live HTTPS listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from admission_helpers import ALICE, decode_patch, make_state, namespace, review, tenant
from aiohttp import ClientError, ClientSession, TCPConnector
from cryptography import x509
from prometheus_client import REGISTRY

from enclave_admission.certificates import ServingCertificate
from enclave_admission.listener import Limits
from enclave_admission.server import AdmissionServer
from enclave_admission.state import State
from enclave_core.api.names import TENANT_LABEL
from enclave_core.pki import CertificateAuthority
from enclave_core.snapshots.replication import ReplicationSnapshot


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def client_for(state: State) -> AsyncIterator[ClientSession]:
    """A session on the real listener (plain HTTP on loopback) answering from ``state``."""
    server = AdmissionServer(state)
    await server.start("127.0.0.1", 0, None)
    try:
        async with ClientSession(base_url=f"http://127.0.0.1:{server.port}") as session:
            yield session
    finally:
        await server.stop()


async def test_mutation_answer_carries_a_base64_json_patch() -> None:
    async with client_for(make_state([tenant("solar", "alice")])) as client:
        body = review(ALICE, "CREATE", namespace("dev"))
        before = metric("enclave_admission_decisions_total", path="/namespaces/mutate", result="patched")
        answer = await client.post("/namespaces/mutate", json=body)
        assert answer.status == 200
        data = await answer.json()
        assert data["apiVersion"] == "admission.k8s.io/v1"
        assert data["response"]["uid"] == body["request"]["uid"]
        assert data["response"]["allowed"] is True
        assert data["response"]["patchType"] == "JSONPatch"
        assert {"op": "add", "path": "/metadata/labels", "value": {TENANT_LABEL: "solar"}} in decode_patch(data)
        after = metric("enclave_admission_decisions_total", path="/namespaces/mutate", result="patched")
        assert after == before + 1


async def test_one_structured_log_line_per_decision(caplog: pytest.LogCaptureFixture) -> None:
    async with client_for(make_state([tenant("solar", "alice")])) as client:
        with caplog.at_level(logging.INFO, logger="enclave_admission.decisions"):
            await client.post("/namespaces/mutate", json=review(ALICE, "CREATE", namespace("dev")))
        records = [r for r in caplog.records if r.name == "enclave_admission.decisions"]
        assert len(records) == 1
        assert records[0].__dict__["tenant"] == "solar"
        assert records[0].__dict__["result"] == "patched"
        assert records[0].__dict__["object"] == "dev"


async def test_denial_has_status_message() -> None:
    async with client_for(make_state([tenant("solar", "alice"), tenant("wind", "alice")])) as client:
        answer = await client.post("/namespaces/mutate", json=review(ALICE, "CREATE", namespace("dev")))
        data = await answer.json()
        assert data["response"]["allowed"] is False
        assert data["response"]["status"]["code"] == 403
        assert "solar, wind" in data["response"]["status"]["message"]


async def test_unknown_path_malformed_body_and_not_ready_are_errors_never_allows() -> None:
    async with client_for(make_state([])) as ready, client_for(State()) as waiting:
        unknown = await ready.post("/validate-everything", json=review(ALICE, "CREATE", namespace("x")))
        assert unknown.status == 404
        assert "/namespaces" in (await unknown.json())["error"]
        assert (await ready.post("/namespaces", data=b"{not json")).status == 400
        assert (await ready.post("/namespaces", json={"kind": "Pod"})).status == 400
        wrong_types = review(ALICE, "CREATE", namespace("x"))
        wrong_types["request"]["userInfo"] = "alice"
        wrong_types["request"]["kind"] = ["Namespace"]
        refused = await ready.post("/namespaces", json=wrong_types)
        assert refused.status == 400
        assert "malformed AdmissionReview" in (await refused.json())["error"]
        assert (await ready.get("/namespaces")).status == 405
        assert (await waiting.post("/namespaces", json=review(ALICE, "CREATE", namespace("x")))).status == 503


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_renewed_certificate_is_served_to_new_connections_without_restart() -> None:
    ca = CertificateAuthority.generate("test-ca")
    first = ca.issue("admission", ip_addresses=["127.0.0.1"], validity=timedelta(hours=1))
    second = ca.issue("admission", ip_addresses=["127.0.0.1"], validity=timedelta(hours=2))
    certificate = ServingCertificate()
    assert certificate.load(first.cert_pem, first.key_pem)
    assert not certificate.load(first.cert_pem, first.key_pem)  # unchanged: nothing to do
    assert not certificate.load(second.cert_pem, first.key_pem)  # mismatched pair: keep the old one
    server = AdmissionServer(make_state([tenant("solar", "alice")]))
    port = _free_port()
    await server.start("127.0.0.1", port, certificate.context)
    trust = ssl.create_default_context(cadata=ca.pair.cert_pem.decode())

    async def served_serial() -> int:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return int(x509.load_der_x509_certificate(der).serial_number)

    try:
        assert await served_serial() == first.certificate.serial_number
        async with ClientSession(connector=TCPConnector(ssl=trust)) as session:
            kept = await session.post(
                f"https://127.0.0.1:{port}/namespaces", json=review(ALICE, "CREATE", namespace("x"))
            )
            assert kept.status == 200
            assert certificate.load(second.cert_pem, second.key_pem)
            assert await served_serial() == second.certificate.serial_number
            # the connection opened before the renewal keeps working
            again = await session.post(
                f"https://127.0.0.1:{port}/namespaces", json=review(ALICE, "CREATE", namespace("y"))
            )
            assert again.status == 200
    finally:
        await server.stop()


async def test_with_client_authentication_a_caller_without_a_certificate_gets_only_convert(tmp_path: Any) -> None:
    """kube-apiserver calls conversion webhooks without a client certificate: the handshake lets such a caller
    in (CERT_OPTIONAL), the listener answers it ``/convert`` and nothing else (403 before the body is read),
    while a certificate from another CA never completes the handshake and one with another name is closed."""
    ca = CertificateAuthority.generate("test-ca")
    serving = ca.issue("admission", ip_addresses=["127.0.0.1"])
    apiserver = ca.issue("kube-apiserver-webhook", server=False, client=True)
    stranger = ca.issue("someone-else", server=False, client=True)
    foreign = CertificateAuthority.generate("other-ca").issue("kube-apiserver-webhook", server=False, client=True)
    (tmp_path / "ca.crt").write_bytes(ca.pair.cert_pem)
    certificate = ServingCertificate()
    assert certificate.load(serving.cert_pem, serving.key_pem)
    certificate.require_clients(str(tmp_path / "ca.crt"))
    limits = Limits(
        client_names=frozenset({"kube-apiserver-webhook"}),
        require_client_certificate=True,
        open_paths=frozenset({"/convert"}),
    )
    server = AdmissionServer(make_state([tenant("solar", "alice")]))
    await server.start("127.0.0.1", 0, certificate.context, limits)

    def context(pair: Any = None) -> ssl.SSLContext:
        trust = ssl.create_default_context(cadata=ca.pair.cert_pem.decode())
        if pair is not None:
            (tmp_path / "c.crt").write_bytes(pair.cert_pem)
            (tmp_path / "c.key").write_bytes(pair.key_pem)
            trust.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
        return trust

    conversion = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u1", "desiredAPIVersion": "enclave.dev/v1beta1", "objects": []},
    }
    url = f"https://127.0.0.1:{server.port}"
    before = metric("enclave_admission_requests_total", path="/namespaces")
    try:
        async with ClientSession(connector=TCPConnector(ssl=context())) as anonymous:
            converted = await anonymous.post(f"{url}/convert", json=conversion)
            assert converted.status == 200
            assert (await converted.json())["response"]["uid"] == "u1"
            for path in ("/namespaces", "/namespaces/mutate", "/resources", "/metrics", "/nowhere"):
                refused = await anonymous.post(f"{url}{path}", json=review(ALICE, "CREATE", namespace("x")))
                assert refused.status == 403, path
                assert "client certificate is required" in (await refused.json())["error"]
        assert metric("enclave_admission_requests_total", path="/namespaces") == before, "never reached a decision"
        async with ClientSession(connector=TCPConnector(ssl=context(apiserver))) as authenticated:
            answered = await authenticated.post(f"{url}/namespaces", json=review(ALICE, "CREATE", namespace("x")))
            assert answered.status == 200
            assert (await authenticated.post(f"{url}/convert", json=conversion)).status == 200
        for pair in (stranger, foreign):
            async with ClientSession(connector=TCPConnector(ssl=context(pair))) as refused_session:
                with pytest.raises((OSError, ssl.SSLError, ClientError)):
                    await refused_session.post(f"{url}/convert", json=conversion)
    finally:
        await server.stop()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _replication_subscriber(clock: _Clock) -> Any:
    """A real subscriber (no stream: its messages are handed in) with a 4 s staleness bound."""
    from enclave_core.proto.enclave.replication.v1 import replication_pb2_grpc
    from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
    from enclave_core.snapshots.subscriber import SnapshotSubscriber

    subscriber = SnapshotSubscriber(
        "replication:9090",
        replication_pb2_grpc.ReplicationServiceStub,
        kinds=["Replication"],
        on_snapshot=lambda _: None,
        subscriber="test",
        staleness=4.0,
        clock=clock,
    )
    subscriber.receive(Snapshot(kind="Replication", revision=1, incarnation="r/1", payload=b"{}"))
    subscriber.receive(Snapshot(kind="Replication", revision=1, incarnation="r/1", heartbeat=True))
    return subscriber


def _replication_update() -> dict[str, Any]:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "solar-dev"}}
    return review(
        ALICE,
        "UPDATE",
        config_map,
        config_map,
        resource="configmaps",
        kind="ConfigMap",
        namespace="solar-dev",
    )


async def test_a_stale_replication_snapshot_stops_only_the_replication_hooks() -> None:
    """Past the bound, ``/replication`` (fail closed) denies naming the snapshot and ``/replication/mutate``
    (fail open) answers 503, while the namespace hooks decide as before."""
    from enclave_admission.server import Freshness

    clock = _Clock()
    subscriber = _replication_subscriber(clock)
    freshness = Freshness()
    freshness.watch("Replication", lambda: subscriber.unavailable("Replication"))
    state = make_state([tenant("solar", "alice")])
    state.expect_replication = True
    state.set_replication(ReplicationSnapshot())
    server = AdmissionServer(state, freshness=freshness)
    await server.start("127.0.0.1", 0, None)
    try:
        async with ClientSession(base_url=f"http://127.0.0.1:{server.port}") as session:
            fresh = await (await session.post("/replication", json=_replication_update())).json()
            assert fresh["response"]["allowed"] is True
            clock.now += 10
            stale = await (await session.post("/replication", json=_replication_update())).json()
            assert stale["response"]["allowed"] is False
            message = stale["response"]["status"]["message"]
            assert "the Replication snapshot is stale: replication:9090 has not confirmed it for 10 s" in message
            assert "fail closed" in message
            assert stale["response"]["status"]["code"] == 403
            assert metric("enclave_admission_decisions_total", path="/replication", result="denied") >= 1
            mutate = await session.post("/replication/mutate", json=_replication_update())
            assert mutate.status == 200, "the deprecated-settings mutation reads no snapshot"
            created = await session.post("/namespaces/mutate", json=review(ALICE, "CREATE", namespace("dev")))
            assert (await created.json())["response"]["allowed"] is True
    finally:
        await server.stop()


async def test_a_replication_snapshot_not_arrived_yet_refuses_its_hook_and_nothing_else() -> None:
    state = make_state([tenant("solar", "alice")])
    state.expect_replication = True
    server = AdmissionServer(state)
    answer = server.answer("POST", "/replication", orjson.dumps(_replication_update()))
    assert isinstance(answer, tuple)
    decided = orjson.loads(answer[1])["response"]
    assert decided["allowed"] is False
    assert "no Replication snapshot yet" in decided["status"]["message"]
    namespaces = server.answer("POST", "/namespaces/mutate", orjson.dumps(review(ALICE, "CREATE", namespace("d"))))
    assert isinstance(namespaces, tuple)
    assert orjson.loads(namespaces[1])["response"]["allowed"] is True


def test_fail_open_paths_are_the_hooks_registered_with_failure_policy_ignore() -> None:
    from enclave_admission.defaults import url_client, webhooks
    from enclave_admission.routes import FAILS_OPEN, ROUTES, SNAPSHOTS

    rendered = webhooks(
        url_client("https://127.0.0.1:1"), nodes=True, quotas=True, pools=True, replication=True, globalquotas=True
    ).to_k8s()
    policies: dict[str, str] = {}
    for configuration in (rendered["mutating"], rendered["validating"]):
        for hook in configuration["webhooks"]:
            policies[hook["path"]] = hook["failurePolicy"]
    assert {path for path, policy in policies.items() if policy == "Ignore"} == FAILS_OPEN
    assert set(SNAPSHOTS) <= set(ROUTES)


async def test_an_unauthenticated_caller_reaches_no_decision_reservation_or_event() -> None:
    """The listener refuses such a request before its body; the server refuses it again where the writes are."""
    state = make_state([tenant("solar", "alice", namespace_quota=1)])
    server = AdmissionServer(state)
    before = metric("enclave_admission_requests_total", path="/namespaces")
    answer = server.answer("POST", "/namespaces", orjson.dumps(review(ALICE, "CREATE", namespace("solar-x"))), False)
    assert isinstance(answer, tuple)
    assert answer[0] == 403
    assert b"client certificate is required" in answer[1]
    assert metric("enclave_admission_requests_total", path="/namespaces") == before
    assert not state.reservations.pending(state.tenancy.tenants[0])


def test_a_stale_replication_snapshot_still_lets_enclaves_own_components_through() -> None:
    """The protection hook passes Enclave's service accounts whatever the snapshot says, so staleness must not
    stop enclave-tenants removing a RoleBinding (a removed owner would keep admin until the publisher is back)."""
    from enclave_admission.server import Freshness

    clock = _Clock()
    subscriber = _replication_subscriber(clock)
    freshness = Freshness()
    freshness.watch("Replication", lambda: subscriber.unavailable("Replication"))
    state = make_state([tenant("solar", "alice")])
    state.namespace = "enclave-system"
    state.expect_replication = True
    state.set_replication(ReplicationSnapshot())
    server = AdmissionServer(state, freshness=freshness)
    clock.now += 10
    component = _replication_update()
    component["request"]["userInfo"] = {"username": "system:serviceaccount:enclave-system:enclave-tenants"}
    for body, allowed in ((component, True), (_replication_update(), False)):
        answer = server.answer("POST", "/replication", orjson.dumps(body))
        assert isinstance(answer, tuple)
        assert orjson.loads(answer[1])["response"]["allowed"] is allowed

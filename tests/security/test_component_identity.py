"""Each component speaks for itself on the snapshot streams: attacks with a certificate that is not the caller's.

Before each component had its own client certificate, every pod held one key (the serving certificate, valid for
client auth too) and a publisher checked only that a client's certificate chained to the service CA: a
compromised enclave-pools pod, or a leak of any pod's key, could subscribe to every tenant's rules and tenancy.
Now enclave-config issues one client certificate per component (``enclave-tls-client-<component>``) and a
publisher answers only the kinds that component consumes (``enclave_core.snapshots.access``).

Against the fence (real enclave-config, enclave-tenants and enclave-admission processes, the streams over mutual
TLS with the certificates enclave-config wrote, mounted for each process as the kubelet does): the attacker holds
a Secret's key, as a compromised pod of that component would, and dials enclave-tenants' snapshot service.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import grpc
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.pki import CertificateAuthority, KeyPair, component_uri
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import WatchRequest
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.rules import RULES_KIND
from enclave_core.snapshots.tenancy import TENANCY_KIND
from enclave_testing.certificates import SERVING_SECRET, client_secret_name
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll


def _secret(stack: TenancyStack, name: str) -> dict[str, bytes]:
    """The data of Secret ``name`` of the stack's namespace, once enclave-config has written it."""
    core = client.CoreV1Api(stack.kube)

    def read() -> dict[str, bytes] | None:
        try:
            data = core.read_namespaced_secret(name, stack.namespace).data or {}
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return {key: base64.b64decode(value) for key, value in data.items()} or None

    found: dict[str, bytes] = poll(read, timeout=30, what=f"Secret {name} written by enclave-config")
    return found


def _tenants_target(stack: TenancyStack) -> str:
    return next(running.grpc_target for running in stack.processes if running.spec.name == "tenants")


def _watch(stack: TenancyStack, cert: bytes, key: bytes, kinds: list[str]) -> set[str]:
    """Subscribe to enclave-tenants' ``kinds`` presenting ``cert``: the kinds sent before the first heartbeat."""
    ca = _secret(stack, SERVING_SECRET)["ca.crt"]
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    seen: set[str] = set()
    with grpc.secure_channel(_tenants_target(stack), credentials) as channel:
        stub: Any = tenants_pb2_grpc.TenantServiceStub(channel)  # type: ignore[no-untyped-call]
        request = WatchRequest(subscriber="attacker", kinds=kinds, heartbeat_seconds=1, itemized=True)
        for message in stub.Watch(request, timeout=15):
            if message.heartbeat:
                break
            seen.add(message.kind)
    return seen


def _client(stack: TenancyStack, component: str) -> KeyPair:
    data = _secret(stack, client_secret_name(component))
    return KeyPair(data["tls.crt"], data["tls.key"])


def _refused(stack: TenancyStack, pair: KeyPair, kinds: list[str]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as refused:
        _watch(stack, pair.cert_pem, pair.key_pem, kinds)
    code: grpc.StatusCode = refused.value.code()
    return code


def test_admissions_own_certificate_subscribes_to_the_rules(fence: TenancyStack) -> None:
    """The allowed caller: admission's certificate reads what admission consumes (and the real admission process
    is ready, having subscribed with it)."""
    admission = _client(fence, "admission")
    assert _watch(fence, admission.cert_pem, admission.key_pem, [RULES_KIND, TENANCY_KIND]) == {
        RULES_KIND,
        TENANCY_KIND,
    }


@pytest.mark.parametrize("component", ["pools", "quotas", "globalquotas", "replication", "tenants"])
@pytest.mark.parametrize("kind", [RULES_KIND, TENANCY_KIND])
def test_another_components_certificate_subscribing_to_tenant_data_is_refused(
    fence: TenancyStack, component: str, kind: str
) -> None:
    """A compromised controller pod (its own key, valid and of the right CA) asks for the tenants' rules or
    tenancy, which only admission consumes."""
    assert _refused(fence, _client(fence, component), [kind]) == grpc.StatusCode.PERMISSION_DENIED


def test_another_components_certificate_asking_for_every_kind_is_refused(fence: TenancyStack) -> None:
    """Asking for no kind in particular ("all of them") is narrowed to what the caller may read: here, nothing."""
    assert _refused(fence, _client(fence, "pools"), []) == grpc.StatusCode.PERMISSION_DENIED


def test_the_shared_serving_key_as_a_client_is_refused(fence: TenancyStack) -> None:
    """Every serving pod mounts the serving key; it used to be every subscriber's client certificate too."""
    serving = _secret(fence, SERVING_SECRET)
    assert _refused(fence, KeyPair(serving["tls.crt"], serving["tls.key"]), [RULES_KIND]) == (
        grpc.StatusCode.UNAVAILABLE
    )


def test_a_certificate_of_another_ca_claiming_admission_is_refused(fence: TenancyStack) -> None:
    """Anyone can mint a certificate that names enclave-admission; only the service CA's counts."""
    forged = CertificateAuthority.generate("enclave-webhook-ca").issue(
        "enclave-admission", uris=[component_uri("enclave-admission")], server=False, client=True
    )
    assert _refused(fence, forged, [RULES_KIND]) == grpc.StatusCode.UNAVAILABLE


def test_a_client_certificate_is_rotated_and_the_new_one_subscribes(fence: TenancyStack) -> None:
    """A client certificate past its renewal point is re-issued by enclave-config (same CA, same identity), and
    the new one subscribes. The planted one is what enclave-config would have issued with a 3-second validity:
    renewed once a third of it is left."""
    name = client_secret_name("admission")
    serving = _secret(fence, SERVING_SECRET)
    ca = CertificateAuthority.from_pem(serving["ca.crt"], serving["ca.key"])
    short = ca.issue(
        "enclave-admission",
        uris=[component_uri("enclave-admission")],
        server=False,
        client=True,
        validity=timedelta(seconds=3),
    )
    planted = {"tls.crt": short.cert_pem, "tls.key": short.key_pem}
    body = {"data": {key: base64.b64encode(value).decode() for key, value in planted.items()}}
    client.CoreV1Api(fence.kube).patch_namespaced_secret(name, fence.namespace, body)

    def renewed() -> KeyPair | None:
        data = _secret(fence, name)
        if data["tls.crt"] == short.cert_pem:
            return None
        return KeyPair(data["tls.crt"], data["tls.key"])

    fresh: KeyPair = poll(renewed, timeout=60, what="enclave-config re-issues the expiring client certificate")
    assert fresh.remaining_fraction() > 0.9
    assert fresh.certificate.subject.rfc4514_string() == "CN=enclave-admission"
    assert _watch(fence, fresh.cert_pem, fresh.key_pem, [RULES_KIND]) == {RULES_KIND}

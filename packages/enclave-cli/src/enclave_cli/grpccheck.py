"""``enclave doctor``'s look at the components' gRPC side: health, and the snapshot revisions they publish.

In a cluster the snapshot streams are mutual TLS (enclave-core's ``SnapshotServer`` refuses plaintext off
loopback and requires a client certificate), so the checks speak it when given the same three files a
subscriber uses: the CA that signs the components' certificates and a client certificate and key it issued
(``--grpc-ca-file``, ``--grpc-client-cert``, ``--grpc-client-key``, the flags and ``ENCLAVE_GRPC_*``
variables admission itself takes). ``--grpc-server-name`` overrides the name checked in the server's
certificate when the address is a port-forward (``127.0.0.1``) rather than the Service name.

The revisions come from the publishers' own ``Watch`` stream: the doctor subscribes like admission does
(itemized, so no state is assembled for it), takes the kind, revision and incarnation of the first message
of each kind (the current state is sent at once) and hangs up at the first heartbeat, a second at most.
Admission's side (the revision it decides from, per kind) is read from its ``/metrics``
(``enclave_admission_snapshot_revision``) and ``/readyz``.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass
from typing import Any

SERVICES = (
    "enclave.config.v1.ConfigService",
    "enclave.tenants.v1.TenantService",
    "enclave.quotas.v1.QuotaService",
    "enclave.pools.v1.PoolService",
    "enclave.replication.v1.ReplicationService",
    "enclave.globalquotas.v1.GlobalQuotaService",
)
"""Every snapshot service a component may serve: each is asked in turn; the one not served answers
UNIMPLEMENTED."""
TIMEOUT = 3.0


@dataclass(frozen=True)
class Tls:
    """What a subscriber presents: the CA, a client certificate and key, and the expected server name."""

    ca: bytes
    cert: bytes
    key: bytes
    server_name: str = ""

    @classmethod
    def from_files(cls, ca_file: str, cert_file: str, key_file: str, server_name: str = "") -> Tls | None:
        """None without a CA (plaintext); the files' contents otherwise (OSError for one that cannot be read)."""
        if not ca_file:
            return None
        with open(ca_file, "rb") as ca, open(cert_file, "rb") as cert, open(key_file, "rb") as key:
            return cls(ca.read(), cert.read(), key.read(), server_name)


@dataclass(frozen=True)
class Published:
    kind: str
    revision: int
    incarnation: str
    service: str


def channel(address: str, tls: Tls | None) -> Any:
    import grpc

    if tls is None:
        return grpc.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert
    )
    options = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
    return grpc.secure_channel(address, credentials, options=options)


def health(chan: Any) -> str:
    """The ``grpc.health.v1`` status name (``SERVING``...); raises ``grpc.RpcError`` when it cannot be asked."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    answer = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


def published(chan: Any) -> list[Published]:
    """The current revision of every kind the endpoint publishes (empty when it serves no snapshot service)."""
    import grpc

    from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest

    found: dict[str, Published] = {}
    for service in SERVICES:
        watch = chan.unary_stream(
            f"/{service}/Watch",
            request_serializer=WatchRequest.SerializeToString,
            response_deserializer=Snapshot.FromString,
        )
        stream = watch(WatchRequest(subscriber="enclave-doctor", heartbeat_seconds=1, itemized=True), timeout=TIMEOUT)
        try:
            for message in stream:
                if message.heartbeat:
                    break
                found.setdefault(message.kind, Published(message.kind, message.revision, message.incarnation, service))
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                continue
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED or not found:
                raise
        finally:
            stream.cancel()
        if found:
            break
    return sorted(found.values(), key=lambda p: p.kind)


_SAMPLE = re.compile(r'^enclave_admission_snapshot_revision\{kind="([^"]+)"\}\s+([0-9.e+]+)\s*$', re.MULTILINE)


def admission_revisions(base_url: str) -> tuple[dict[str, int], str]:
    """(kind -> revision admission decides from, its ``/readyz`` answer) from admission's probe listener."""
    base = base_url.rstrip("/")
    with urllib.request.urlopen(f"{base}/metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    revisions = {kind: int(float(value)) for kind, value in _SAMPLE.findall(text)}
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=TIMEOUT) as answer:
            ready = answer.read().decode().strip()
    except urllib.error.HTTPError as err:  # 503 with the closed gates
        ready = err.read().decode().strip()
    return revisions, ready

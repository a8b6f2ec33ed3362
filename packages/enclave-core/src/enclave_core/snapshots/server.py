"""A gRPC server that streams a hub's snapshots, with standard health checking and TLS.

Every snapshot service in protos/ has the same ``Watch`` method, so one servicer class serves them all;
``register`` is the generated ``add_<Service>Servicer_to_server`` function of the service being offered.
Plaintext is allowed only on loopback: in a cluster the stream carries tenant data, so it is mutual TLS: the
server presents the service certificate and accepts only clients whose certificate the service CA signed
(for client authentication), so a pod that can merely reach the port reads nothing. Over TLS each stream is
then authorised by the component the client certificate names (:mod:`enclave_core.snapshots.access`): a
component asking for a kind it does not consume gets PERMISSION_DENIED. Plaintext (loopback only: the same pod
or host) carries no identity and is not authorised.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import Counter, Gauge

from enclave_core.identity import component_named
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest
from enclave_core.snapshots import access
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.subscriber import HEARTBEAT_METADATA

log = logging.getLogger(__name__)

SUBSCRIBERS = Gauge("enclave_snapshot_subscribers", "Open snapshot streams", ["service"])
DENIED = Counter(
    "enclave_snapshot_denied_total",
    "Watch calls refused because the caller's component may not read a kind",
    ["service"],
)


def peer_component(context: grpc.aio.ServicerContext) -> str | None:
    """The component named by the peer's client certificate (verified by the handshake), or None.

    Read from gRPC's auth context, which lists the verified certificate's URI SANs as ``peer_uri``: no X.509
    parsing here, so a publisher does not load ``cryptography`` (docs/decisions/0007). The handshake has
    already refused a certificate without clientAuth among its usages (BoringSSL verifies a client
    certificate for the SSL-client purpose: a serving certificate fails with "unsupported certificate
    purpose"), the other half of :func:`enclave_core.pki.component_of`'s rule.
    """
    uris = context.auth_context().get("peer_uri") or []
    try:
        return component_named(uri.decode() for uri in uris)
    except UnicodeDecodeError:
        return None


class HubServicer:
    """Implements ``Watch`` for any snapshot service; with ``authorise`` (TLS), only for the kinds the caller's
    component may read (a request naming no kind is narrowed to those)."""

    def __init__(self, hub: SnapshotHub, service: str, *, authorise: bool = False) -> None:
        self.hub = hub
        self.service = service
        self.authorise = authorise

    async def Watch(self, request: WatchRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[Snapshot]:  # noqa: N802 - gRPC method name
        kinds = list(request.kinds)
        if self.authorise:
            component = peer_component(context)
            if not kinds and component is not None:
                # "Every kind": those of this publisher the component may read; none is a refusal, not a
                # stream that stays silent forever.
                kinds = [kind for kind in access.readable(component) if self.hub.publishes(kind)]
            why = access.refusal(component, kinds) or (
                "" if kinds else f"{component} may subscribe to none of what {self.service} publishes"
            )
            if why:
                DENIED.labels(self.service).inc()
                log.warning(
                    "subscription refused",
                    extra={"subscriber": request.subscriber, "service": self.service, "reason": why},
                )
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        log.info("subscriber connected", extra={"subscriber": request.subscriber, "service": self.service})
        SUBSCRIBERS.labels(self.service).inc()
        # A heartbeat period the subscriber asked for, kept within sane bounds; 0 (older subscribers): none.
        heartbeat = min(max(request.heartbeat_seconds, 1), 300) if request.heartbeat_seconds else 0
        if heartbeat:
            # Announced before the first snapshot: the subscriber applies its staleness bound from the start,
            # even if this publisher stops before its first heartbeat.
            await context.send_initial_metadata(((HEARTBEAT_METADATA, str(heartbeat)),))
        try:
            async for snapshot in self.hub.stream(kinds, heartbeat=heartbeat, itemized=request.itemized):
                yield snapshot
        finally:
            SUBSCRIBERS.labels(self.service).dec()
            log.info("subscriber left", extra={"subscriber": request.subscriber, "service": self.service})


def _is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


SERVER_OPTIONS = [
    # Ping subscribers on idle connections so a vanished one (node gone, partition) is noticed and its
    # stream released; accept the subscribers' own keepalive pings (grpc's default would punish them).
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]

TlsSource = Callable[[], "tuple[bytes, bytes] | None"]
"""Returns the current (certificate chain PEM, private key PEM); consulted on every handshake cycle."""


CaSource = Callable[[], "bytes | None"]
"""Returns the current CA bundle (PEM) that client certificates must chain to."""


def file_tls_source(cert_file: str, key_file: str) -> TlsSource:
    def read() -> tuple[bytes, bytes]:
        with open(cert_file, "rb") as cert, open(key_file, "rb") as key:
            return cert.read(), key.read()

    return read


def file_ca_source(ca_file: str) -> CaSource:
    def read() -> bytes:
        with open(ca_file, "rb") as handle:
            return handle.read()

    return read


class SnapshotServer:
    """Owns the grpc.aio server: the snapshot service, the health service and the listening port."""

    def __init__(
        self,
        address: str,
        *,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        tls_source: TlsSource | None = None,
        client_ca_file: str = "",
        client_ca: CaSource | None = None,
    ) -> None:
        if tls_source is None and tls_cert_file:
            tls_source = file_tls_source(tls_cert_file, tls_key_file)
        if client_ca is None and client_ca_file:
            client_ca = file_ca_source(client_ca_file)
        if tls_source is None and not _is_loopback(address):
            raise ValueError(
                f"refusing plaintext gRPC on {address}: give --grpc-tls-cert/--grpc-tls-key "
                "(or --grpc-tls-secret), or bind to loopback"
            )
        if tls_source is not None and client_ca is None:
            raise ValueError(
                f"refusing gRPC TLS on {address} without client authentication: give --grpc-ca-file "
                "(the service CA that signs subscribers' certificates) or serve from --grpc-tls-secret"
            )
        self.address = address
        self.tls_source = tls_source
        self.client_ca = client_ca
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = 0

    def add(self, register: Callable[[Any, grpc.aio.Server], None], hub: SnapshotHub, service: str) -> None:
        register(HubServicer(hub, service, authorise=self.tls_source is not None), self.server)

    async def start(self) -> None:
        source = self.tls_source
        if source is None:
            self.port = self.server.add_insecure_port(self.address)
        else:
            ca_source = self.client_ca
            assert ca_source is not None
            initial, initial_ca = source(), ca_source()
            if initial is None or not initial_ca:
                raise RuntimeError("no TLS certificate or client CA available for the gRPC listener yet")
            last: list[tuple[tuple[bytes, bytes], bytes]] = [(initial, initial_ca)]

            def fetch() -> grpc.ServerCertificateConfiguration:
                # Consulted on every handshake cycle: a renewed certificate (or CA) is used without a restart;
                # a source that fails or is empty for a moment keeps the last good one.
                try:
                    pair, ca = source() or last[0][0], ca_source() or last[0][1]
                except OSError:
                    pair, ca = last[0]
                last[0] = (pair, ca)
                cert, key = pair
                return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

            credentials = grpc.dynamic_ssl_server_credentials(fetch(), fetch, require_client_authentication=True)
            self.port = self.server.add_secure_port(self.address, credentials)
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)

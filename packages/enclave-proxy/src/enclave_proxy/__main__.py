"""``python -m enclave_proxy`` / ``enclave-proxy``: the tenant-facing kube-apiserver proxy's process.

Every replica is the same (no leader): it follows the Tenancy snapshot of enclave-tenants (and the
configuration of enclave-config, for who is a tenant user and the default proxy settings), keeps informers on
the kinds it filters (namespaces, nodes, PersistentVolumes, storage, ingress, priority, runtime and gateway
classes), and serves HTTPS. Ready once it listens, has listed namespaces and nodes and holds the snapshots. docs/proxy.md says how to point a
kubeconfig at it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import ssl
import sys
from collections.abc import Mapping

from aiohttp import web

from enclave_core.api.names import PROXY_MANAGER
from enclave_core.kube.rest import Kube
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import HostPort, add_common_flags, add_env_option, check_duration, env_default
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView
from enclave_proxy.forward import Upstream
from enclave_proxy.identity import ImpersonationReviewer, TokenReviewer
from enclave_proxy.listing import KINDS, ClusterIndex
from enclave_proxy.server import ProxyServer
from enclave_proxy.visibility import Visibility

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 5.0
"""Seconds in-flight requests get to finish on SIGTERM; open watches are then ended (clients re-watch)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-proxy", description=__doc__)
    add_common_flags(parser, probe_port=8086, leader_election=False)
    parser.add_argument(
        "--identity",
        default=env_default("ENCLAVE_IDENTITY", f"{socket.gethostname()}-{os.getpid()}"),
        help="this replica's name in snapshot subscriptions (env ENCLAVE_IDENTITY, default host-pid)",
    )
    add_env_option(
        parser,
        "listen-address",
        "0.0.0.0:9443",
        "host:port of the HTTPS listener kubeconfigs point at",
        env="ENCLAVE_PROXY_ADDRESS",
    )
    add_env_option(parser, "tls-cert-file", "", "PEM serving certificate, required", env="ENCLAVE_PROXY_TLS_CERT")
    add_env_option(parser, "tls-key-file", "", "PEM key of --tls-cert-file", env="ENCLAVE_PROXY_TLS_KEY")
    add_env_option(
        parser,
        "tls-reload-interval",
        "30s",
        "how often the serving certificate and client CA files are checked for a renewal, which new connections "
        "then use",
        env="ENCLAVE_PROXY_TLS_RELOAD_INTERVAL",
    )
    add_env_option(
        parser,
        "client-ca-file",
        "",
        "PEM CA whose client certificates authenticate callers (CN user, O groups); empty: bearer tokens only",
        env="ENCLAVE_PROXY_CLIENT_CA",
    )
    add_env_option(
        parser,
        "token-cache-ttl",
        "10s",
        "how long a TokenReview's answer is reused for the same token; a revoked token keeps working through "
        "the proxy this long at most",
        env="ENCLAVE_PROXY_TOKEN_CACHE_TTL",
    )
    add_env_option(
        parser,
        "upstream-connections",
        "1024",
        "connections to kube-apiserver at most; each pass-through watch holds one",
        type=int,
        env="ENCLAVE_PROXY_UPSTREAM_CONNECTIONS",
    )
    grpc.add_subscription_flags(parser, "config", "tenants")
    args = parser.parse_args(argv)
    if not args.tls_cert_file or not args.tls_key_file:
        parser.error("--tls-cert-file and --tls-key-file are required: the proxy serves HTTPS only")
    if not args.tenants_endpoint:
        parser.error("--tenants-endpoint is required: the proxy decides what tenant users see from its snapshot")
    args.token_ttl = check_duration(parser, args, "token-cache-ttl").total_seconds()
    args.tls_reload = check_duration(parser, args, "tls-reload-interval").total_seconds()
    if args.tls_reload <= 0:
        parser.error("--tls-reload-interval must be positive")
    if args.upstream_connections < 1:
        parser.error("--upstream-connections must be at least 1")
    return args


def server_context(cert: str, key: str, client_ca: str) -> ssl.SSLContext:
    """TLS 1.2+ with the serving pair; with a client CA, a client certificate is asked for and verified when
    sent (optional: callers with bearer tokens send none)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _versions(*paths: str) -> tuple[tuple[int, int, int], ...]:
    """What identifies each file's content cheaply: a renewal (the kubelet's atomic swap of a mounted Secret, or
    a file rewritten in place) changes the inode, size or modification time of what the path resolves to."""
    found = []
    for path in paths:
        if not path:
            continue
        stat = os.stat(path)
        found.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


async def reload_certificates(context: ssl.SSLContext, args: argparse.Namespace) -> None:
    """Load a renewed serving certificate (and client CA) into the listener's context: new connections present
    it, open ones keep theirs. A half-written pair (the key not yet matching) is retried at the next check."""
    paths = (args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    seen = await asyncio.to_thread(_versions, *paths)
    while True:
        await asyncio.sleep(args.tls_reload)
        try:
            now = await asyncio.to_thread(_versions, *paths)
            if now == seen:
                continue
            context.load_cert_chain(args.tls_cert_file, args.tls_key_file)
            if args.client_ca_file:
                context.load_verify_locations(cafile=args.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            log.warning("serving certificate not reloaded; retrying", extra={"error": str(err)})
            continue
        seen = now
        log.info("serving certificate reloaded")


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = Kube(process.api, field_manager=PROXY_MANAGER)
    visibility = Visibility()
    indexes = [ClusterIndex(kube, kind) for kind in KINDS]

    def snapshots_changed() -> None:
        for index in indexes:
            index.snapshots_changed()

    def accept_tenancy(snapshot: Snapshot) -> None:
        visibility.set_tenancy(TenancySnapshot.model_validate_json(snapshot.payload))
        snapshots_changed()

    def accept_views(views: Mapping[str, TenantView], snapshot: Snapshot) -> None:
        visibility.set_tenancy(TenancySnapshot.from_views(views.values()))
        snapshots_changed()

    def accept_config(snapshot: Snapshot) -> None:
        visibility.set_config(EffectiveConfiguration.model_validate_json(snapshot.payload))
        snapshots_changed()

    grpc.subscribe_tenancy(process, args.tenants_endpoint, accept_tenancy, accept_views)
    if args.config_endpoint:
        grpc.subscribe(process, args.config_endpoint, config_pb2_grpc.ConfigServiceStub, CONFIG_KIND, accept_config)
    else:
        log.warning("no --config-endpoint: tenant users are the enclave.dev group and tenant owners")
    process.readiness.add("listening")

    async def synced(index: ClusterIndex, gate: str) -> None:
        await index.synced.wait()
        process.readiness.set(gate)

    for index in indexes:
        process.spawn(index.run(), f"{index.kind.resource}-informer")
        if index.kind.required:  # the others may be absent (a CRD not installed): passed through until listed
            gate = f"{index.kind.resource}-synced"
            process.readiness.add(gate)
            process.spawn(synced(index, gate), gate)
    upstream = Upstream(process.api, connections=args.upstream_connections)
    reviewer = TokenReviewer(kube, ttl=args.token_ttl)
    impersonation = ImpersonationReviewer(kube, ttl=args.token_ttl)
    server = ProxyServer(upstream, reviewer, impersonation, visibility, indexes)
    runner = web.ServerRunner(server.server(), shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    address = HostPort.parse(args.listen_address)
    context = server_context(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    site = web.TCPSite(runner, address.host, address.port, ssl_context=context)
    process.spawn(reload_certificates(context, args), "tls-reload")
    try:
        await site.start()
        process.readiness.set("listening")
        log.info("serving", extra={"address": str(address), "client_ca": bool(args.client_ca_file)})
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await upstream.close()


def main(argv: list[str] | None = None) -> int:
    return component.run("proxy", parse_args(argv), body)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m enclave_admission`` / ``enclave-admission``: the admission webhook server's process.

Every replica is the same: it subscribes to the snapshot services (ConfigService, TenantService), loads its
serving certificate, and answers AdmissionReviews from memory. There is no leader: any replica answers any
request. Ready once the core snapshots (configuration, Tenancy, Rules) arrived and are fresh and a certificate
is loaded. The optional ones (Replication, QuotaTargets, Pools, GlobalQuotas) are reported in ``/readyz`` but
never make the replica unready: while one is missing or stale only the hooks that read it stop deciding
(docs/architecture.md, "Who an outage blocks").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import socket
import sys
from collections.abc import Iterator, Mapping

from prometheus_client import REGISTRY, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from enclave_admission import server as server_module
from enclave_admission.certificates import ServingCertificate
from enclave_admission.events import DenyEvents
from enclave_admission.limits import add_limit_flags, limits_from
from enclave_admission.server import AdmissionServer, Freshness
from enclave_admission.state import State
from enclave_core.api import names
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import Kube
from enclave_core.ledger import LedgerClient
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.globalquotas.v1 import globalquotas_pb2_grpc
from enclave_core.proto.enclave.pools.v1 import pools_pb2_grpc
from enclave_core.proto.enclave.quotas.v1 import quotas_pb2_grpc
from enclave_core.proto.enclave.replication.v1 import replication_pb2_grpc
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import HostPort, add_common_flags, add_env_option, check_duration, env_default
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.globalquotas import GLOBALQUOTAS_KIND, GlobalQuotasSnapshot
from enclave_core.snapshots.pools import POOLS_KIND, PoolsSnapshot
from enclave_core.snapshots.quotas import QUOTAS_KIND, QuotaTargets
from enclave_core.snapshots.replication import REPLICATION_KIND, ReplicationSnapshot
from enclave_core.snapshots.rules import RULES_KIND, RulesSnapshot
from enclave_core.snapshots.subscriber import SnapshotSubscriber
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView

log = logging.getLogger(__name__)

SNAPSHOT_REVISION = Gauge(
    "enclave_admission_snapshot_revision", "Revision of the snapshot decisions are made from", ["kind"]
)
TENANT_LEDGERS = Gauge(
    "enclave_admission_tenant_ledgers", "Tenants whose namespace quota admission reserves on a QuantityLedger"
)
QUOTAS = Gauge("enclave_admission_quotas", "Custom quotas in the QuotaTargets snapshot decisions are made from")
BUILD = Gauge(
    "enclave_admission_build_info",
    "Always 1; compiled=true when the per-review modules run compiled by mypyc (the wheel's default build)",
    ["compiled"],
)


def compiled() -> bool:
    """Whether the per-review modules are mypyc-compiled (an editable or ENCLAVE_MYPYC=0 install is not)."""
    return not str(server_module.__file__).endswith(".py")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-admission", description=__doc__)
    add_common_flags(parser, probe_port=8081, leader_election=False)
    parser.add_argument(
        "--identity",
        default=env_default("ENCLAVE_IDENTITY", ""),
        help="this replica's name in snapshot subscriptions and events (env ENCLAVE_IDENTITY, default host-pid)",
    )
    add_env_option(parser, "webhook-address", "0.0.0.0:9443", "host:port of the HTTPS webhook listener")
    add_env_option(
        parser, "tls-cert-file", "", "PEM serving certificate of the webhook, when not read from --tls-secret-name"
    )
    add_env_option(parser, "tls-key-file", "", "PEM key of --tls-cert-file")
    add_env_option(parser, "tls-secret-name", "", "Secret in --namespace holding tls.crt/tls.key, watched for renewals")
    add_env_option(
        parser,
        "client-ca-file",
        "",
        "PEM CA bundle: every webhook connection must present a client certificate it signed, as kube-apiserver "
        "does when configured for webhook client authentication (docs/architecture.md); empty accepts any "
        "caller (then a NetworkPolicy must keep everyone but kube-apiserver out)",
    )
    add_env_option(
        parser,
        "client-allowed-names",
        "",
        "comma-separated common names or DNS names, one of which the client certificate must carry; empty "
        "accepts any certificate --client-ca-file signed",
    )
    add_limit_flags(parser)
    grpc.add_subscription_flags(parser, "config", "tenants", "quotas", "pools", "globalquotas", "replication")
    add_env_option(
        parser,
        "reservation-ttl",
        "60s",
        "how long a quota reservation holds unconfirmed before the quota controller drops it",
    )
    args = parser.parse_args(argv)
    if args.client_allowed_names and not args.client_ca_file:
        parser.error("--client-allowed-names needs --client-ca-file: names are read from a verified certificate")
    if not args.config_endpoint:
        parser.error("--config-endpoint (or ENCLAVE_CONFIG_ENDPOINT) is required")
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        parser.error("--tls-cert-file and --tls-key-file go together")
    if not (args.tls_cert_file or args.tls_secret_name):
        parser.error("give --tls-cert-file/--tls-key-file or --tls-secret-name: the webhook is served over HTTPS")
    args.reservation_ttl = check_duration(parser, args, "reservation-ttl")
    if not args.identity:
        args.identity = f"{socket.gethostname()}-{os.getpid()}"
    return args


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    state = State(
        expect_tenancy=bool(args.tenants_endpoint),
        expect_quotas=bool(args.quotas_endpoint),
        expect_pools=bool(args.pools_endpoint),
        expect_globalquotas=bool(args.globalquotas_endpoint),
        namespace=args.namespace,
        expect_replication=bool(args.replication_endpoint),
        expect_rules=bool(args.tenants_endpoint),
    )
    kube = Kube(process.api, field_manager=names.ADMISSION_MANAGER)
    events = DenyEvents(EventRecorder(kube, names.ADMISSION_MANAGER))
    certificate = ServingCertificate()
    freshness = Freshness()

    def accept_config(snapshot: Snapshot) -> None:
        state.set_config(EffectiveConfiguration.model_validate_json(snapshot.payload))
        SNAPSHOT_REVISION.labels(CONFIG_KIND).set(snapshot.revision)
        log.info("configuration snapshot", extra={"revision": snapshot.revision})

    def accept_tenancy(snapshot: Snapshot) -> None:
        tenancy = TenancySnapshot.model_validate_json(snapshot.payload)
        state.set_tenancy(tenancy)
        TENANT_LEDGERS.set(sum(1 for view in tenancy.tenants if view.namespace_ledger))
        SNAPSHOT_REVISION.labels(TENANCY_KIND).set(snapshot.revision)
        log.info("tenancy snapshot", extra={"revision": snapshot.revision, "tenants": len(tenancy.tenants)})

    def accept_views(views: Mapping[str, TenantView], snapshot: Snapshot) -> None:
        # Itemized: only the tenants that changed were parsed (see enclave_core.snapshots.hub).
        state.set_tenancy(TenancySnapshot.from_views(views.values()))
        TENANT_LEDGERS.set(sum(1 for view in views.values() if view.namespace_ledger))
        SNAPSHOT_REVISION.labels(TENANCY_KIND).set(snapshot.revision)
        log.info("tenancy snapshot", extra={"revision": snapshot.revision, "tenants": len(views)})

    def accept_pools(snapshot: Snapshot) -> None:
        pools = PoolsSnapshot.model_validate_json(snapshot.payload)
        state.set_pools(pools)
        SNAPSHOT_REVISION.labels(POOLS_KIND).set(snapshot.revision)
        log.info("pools snapshot", extra={"revision": snapshot.revision, "pools": len(pools.pools)})

    def accept_replication(snapshot: Snapshot) -> None:
        replication = ReplicationSnapshot.model_validate_json(snapshot.payload)
        state.set_replication(replication)
        SNAPSHOT_REVISION.labels(REPLICATION_KIND).set(snapshot.revision)
        log.info("replication snapshot", extra={"revision": snapshot.revision, "objects": len(replication.objects)})

    def accept_rules(snapshot: Snapshot) -> None:
        rules = RulesSnapshot.model_validate_json(snapshot.payload)
        state.set_rules(rules)
        SNAPSHOT_REVISION.labels(RULES_KIND).set(snapshot.revision)
        log.info("rules snapshot", extra={"revision": snapshot.revision, "namespaces": len(rules.namespaces)})

    grpc.subscribe(process, args.config_endpoint, config_pb2_grpc.ConfigServiceStub, CONFIG_KIND, accept_config)
    if args.replication_endpoint:
        # Optional: while it is missing or stale only the replication hooks stop deciding (not readiness).
        _optional(
            freshness,
            grpc.subscribe(
                process,
                args.replication_endpoint,
                replication_pb2_grpc.ReplicationServiceStub,
                REPLICATION_KIND,
                accept_replication,
                gate=False,
            ),
        )
    if args.pools_endpoint:
        _optional(
            freshness,
            grpc.subscribe(
                process, args.pools_endpoint, pools_pb2_grpc.PoolServiceStub, POOLS_KIND, accept_pools, gate=False
            ),
        )

    def accept_globalquotas(snapshot: Snapshot) -> None:
        quotas = GlobalQuotasSnapshot.model_validate_json(snapshot.payload)
        state.set_globalquotas(quotas)
        SNAPSHOT_REVISION.labels(GLOBALQUOTAS_KIND).set(snapshot.revision)
        log.info("global quotas snapshot", extra={"revision": snapshot.revision, "quotas": len(quotas.quotas)})

    if args.globalquotas_endpoint:
        _optional(
            freshness,
            grpc.subscribe(
                process,
                args.globalquotas_endpoint,
                globalquotas_pb2_grpc.GlobalQuotaServiceStub,
                GLOBALQUOTAS_KIND,
                accept_globalquotas,
                gate=False,
            ),
        )
    if args.tenants_endpoint:
        grpc.subscribe_tenancy(process, args.tenants_endpoint, accept_tenancy, accept_views)
        grpc.subscribe(process, args.tenants_endpoint, tenants_pb2_grpc.TenantServiceStub, RULES_KIND, accept_rules)
    else:
        log.warning("no --tenants-endpoint: running without tenants (tenant users own nothing)")
    process.readiness.add_check("serving-certificate", certificate.loaded.is_set)

    tasks = [asyncio.create_task(events.run(), name="deny-events")]
    if args.quotas_endpoint:
        tasks.append(asyncio.create_task(_follow_quotas(process, kube, state, freshness), name="quota-ledgers"))
    elif args.globalquotas_endpoint or args.tenants_endpoint:  # global quotas, tenant namespace quotas
        tasks.append(asyncio.create_task(_follow_ledgers(process, kube, state), name="quota-ledgers"))
    if args.tls_cert_file:
        watch = certificate.watch_files(args.tls_cert_file, args.tls_key_file)
    else:
        watch = certificate.watch_secret(kube, args.namespace, args.tls_secret_name)
    tasks.append(asyncio.create_task(watch, name="serving-certificate"))
    if args.client_ca_file:
        certificate.require_clients(args.client_ca_file)
    server = AdmissionServer(state, events, freshness=freshness)
    try:
        await certificate.loaded.wait()
        address = HostPort.parse(args.webhook_address)
        await server.start(address.host, address.port, certificate.context, limits_from(args))
        BUILD.labels(str(compiled()).lower()).set(1)
        log.info(
            "serving admission webhooks",
            extra={"address": f"{address.host}:{server.port}", "compiled": compiled()},
        )
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await server.stop()


class _LedgerMetrics(Collector):
    """The ledger client's counts, read at scrape time (it is shared code and keeps plain integers)."""

    def __init__(self, ledgers: LedgerClient) -> None:
        self.ledgers = ledgers

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "enclave_admission_ledger_writes", "QuantityLedger status writes that succeeded", value=self.ledgers.writes
        )
        yield CounterMetricFamily(
            "enclave_admission_ledger_conflicts",
            "QuantityLedger writes refused with 409 Conflict and retried on a fresh read",
            value=self.ledgers.conflicts,
        )


def _optional(freshness: Freshness, subscriber: SnapshotSubscriber) -> None:
    """The hooks that read the subscriber's kinds ask it whether they may decide (see Freshness)."""
    for kind in subscriber.kinds:
        freshness.watch(kind, functools.partial(subscriber.unavailable, kind))


async def _follow_quotas(process: component.Component, kube: Kube, state: State, freshness: Freshness) -> None:
    """Subscribe to QuotaTargets and keep the ledgers of Enclave's namespace in memory (a watch), so a
    reservation starts from a fresh copy and only a conflict costs a read."""

    def accept_quotas(snapshot: Snapshot) -> None:
        targets = QuotaTargets.model_validate_json(snapshot.payload)
        state.set_quotas(targets)
        SNAPSHOT_REVISION.labels(QUOTAS_KIND).set(snapshot.revision)
        QUOTAS.set(len(targets.quotas))
        log.info("quota targets snapshot", extra={"revision": snapshot.revision, "quotas": len(targets.quotas)})

    _optional(
        freshness,
        grpc.subscribe(
            process,
            process.args.quotas_endpoint,
            quotas_pb2_grpc.QuotaServiceStub,
            QUOTAS_KIND,
            accept_quotas,
            gate=False,
        ),
    )
    await _follow_ledgers(process, kube, state)


async def _follow_ledgers(process: component.Component, kube: Kube, state: State) -> None:
    """Keep the ledgers of Enclave's namespace in memory (a watch), so a reservation (custom or global quota,
    tenant namespace quota) starts from a fresh copy and only a conflict costs a read."""
    if state.ledgers is None:
        state.ledgers = LedgerClient(kube, process.namespace)
        REGISTRY.register(_LedgerMetrics(state.ledgers))
    state.reservation_ttl = process.args.reservation_ttl
    await state.ledgers.informer().run()


def main(argv: list[str] | None = None) -> int:
    return component.run("admission", parse_args(argv), body)


if __name__ == "__main__":
    sys.exit(main())

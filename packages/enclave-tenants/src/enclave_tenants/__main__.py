"""``python -m enclave_tenants`` / ``enclave-tenants``: the tenants component's process.

Every replica watches and serves ``TenantService``; the Lease holder also writes. The global settings it
needs (administrators, service-account promotion, RBAC role names, the events namespace) come from
enclave-config's ``ConfigService`` when ``--config-endpoint`` is given, else documented defaults apply.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.durations import parse_duration
from enclave_core.kube.events import EventRecorder
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import add_common_flags, add_resync_flag, env_default, env_flag
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_tenants.bindings import MANAGER, Grant
from enclave_tenants.controller import Settings, TenantsController

TENANTS_GC_THRESHOLDS = "20000,10,100"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-tenants", description=__doc__)
    # Its caches hold every namespace, RoleBinding and RuleStatus and each plan allocates as many objects again:
    # with CPython's default thresholds, full collections walking all of it were about three quarters of a plan's
    # time at 10,000 namespaces (docs/benchmarks.md, "Scale"). Young collections stay frequent.
    add_common_flags(parser, probe_port=8082, gc=TENANTS_GC_THRESHOLDS)
    grpc.add_server_flags(parser)
    grpc.add_subscription_flags(parser, "config")
    add_resync_flag(parser)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=int(env_default("ENCLAVE_CONCURRENCY", "32")),
        help="namespaces written in parallel (env ENCLAVE_CONCURRENCY)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=int(env_default("ENCLAVE_BATCH_SIZE", "300")),
        help="namespaces written per round of the write loop; each round is followed by the statuses it affects, "
        "so status follows a long burst (env ENCLAVE_BATCH_SIZE)",
    )
    parser.add_argument(
        "--managed-metadata",
        action=argparse.BooleanOptionalAction,
        default=env_flag("ENCLAVE_MANAGED_METADATA", True),
        help="reconcile rules' managed labels and annotations onto existing objects; needs list and patch on every "
        "namespaced resource, which --no-managed-metadata makes unnecessary (env ENCLAVE_MANAGED_METADATA)",
    )
    parser.add_argument(
        "--namespace-grant",
        action="append",
        default=[grant for grant in env_default("ENCLAVE_NAMESPACE_GRANTS", "").split(",") if grant.strip()],
        metavar="CLUSTERROLE=SERVICEACCOUNT",
        help="bind CLUSTERROLE in every tenant namespace to SERVICEACCOUNT of --namespace (repeatable): what an "
        "Enclave component needs only in tenant namespaces, e.g. its list/patch for managed metadata or "
        "enclave-replication's impersonation of tenant service accounts, is granted there and nowhere else "
        "(env ENCLAVE_NAMESPACE_GRANTS, comma-separated, before the flags)",
    )
    args = parser.parse_args(argv)
    try:
        args.grants = tuple(Grant.parse(text, args.namespace) for text in args.namespace_grant)
    except ValueError as err:
        parser.error(f"--namespace-grant: {err}")
    try:
        parse_duration(args.resync)
    except ValueError as err:
        parser.error(f"--resync: {err}")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    return args


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = process.kube(MANAGER)
    hub = SnapshotHub(args.identity)
    settings = Settings(
        resync_seconds=parse_duration(args.resync).total_seconds(),
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        namespace=args.namespace,
        managed_metadata=args.managed_metadata,
        grants=args.grants,
    )
    controller = TenantsController(
        kube, settings, hub, EventRecorder(kube, MANAGER), wait_for_configuration=bool(args.config_endpoint)
    )
    process.state["controller"] = controller
    process.started.set()
    if args.config_endpoint:
        # Follow enclave-config's effective configuration; the readiness gate waits for the first one.
        grpc.subscribe(
            process,
            args.config_endpoint,
            config_pb2_grpc.ConfigServiceStub,
            CONFIG_KIND,
            lambda snapshot: controller.set_configuration(EffectiveConfiguration.model_validate_json(snapshot.payload)),
        )
    register = tenants_pb2_grpc.add_TenantServiceServicer_to_server
    gates = {"informers-synced": controller.synced, "reconciled": controller.reconciled}
    await grpc.run_controller(process, kube, hub, register, "TenantService", controller, gates)


def main(argv: list[str] | None = None) -> int:
    return component.run("tenants", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

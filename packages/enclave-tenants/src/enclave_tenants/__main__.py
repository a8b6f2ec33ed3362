"""``python -m enclave_tenants`` / ``enclave-tenants``: the tenants component's process.

Every replica watches and serves ``TenantService``; the Lease holder also writes. The global settings it
needs (administrators, service-account promotion, RBAC role names, the events namespace) come from
enclave-config's ``ConfigService`` when ``--config-endpoint`` is given, else documented defaults apply.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.api.names import TENANTS_MANAGER
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import (
    add_env_option,
    add_env_switch,
    env_default,
    parse_controller_args,
)
from enclave_tenants.bindings import Grant
from enclave_tenants.controller import Settings, TenantsController

TENANTS_GC_THRESHOLDS = "20000,10,100"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # Its caches hold every namespace, RoleBinding and RuleStatus and each plan allocates as many objects again:
    # with CPython's default thresholds, full collections walking all of it were about three quarters of a plan's
    # time at 10,000 namespaces (docs/benchmarks.md, "Scale"). Young collections stay frequent.
    parser = grpc.controller_parser(
        "enclave-tenants",
        __doc__,
        probe_port=8082,
        gc=TENANTS_GC_THRESHOLDS,
        concurrency=(32, "namespaces written in parallel"),
    )
    add_env_option(
        parser,
        "batch-size",
        "300",
        "namespaces written per round of the write loop; each round is followed by the statuses it affects, "
        "so status follows a long burst",
        type=int,
    )
    add_env_switch(
        parser,
        "managed-metadata",
        True,
        "reconcile rules' managed labels and annotations onto existing objects; needs list and patch on every "
        "namespaced resource, which --no-managed-metadata makes unnecessary",
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
    args = parse_controller_args(parser, argv)
    try:
        args.grants = tuple(Grant.parse(text, args.namespace) for text in args.namespace_grant)
    except ValueError as err:
        parser.error(f"--namespace-grant: {err}")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    return args


body = grpc.snapshot_body(
    TENANTS_MANAGER, TenantsController, Settings, tenants_pb2_grpc.add_TenantServiceServicer_to_server, "TenantService"
)


def main(argv: list[str] | None = None) -> int:
    return component.run("tenants", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

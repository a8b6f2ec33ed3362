"""``python -m enclave_config`` / ``enclave-config``: the configuration component's process."""

from __future__ import annotations

import argparse
import sys

from enclave_config.controller import ConfigController, Settings
from enclave_core.api.names import CONFIG_MANAGER
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import (
    add_env_option,
    add_env_switch,
    add_resync_flag,
    check_duration,
    check_resync_flag,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = grpc.controller_parser("enclave-config", __doc__, probe_port=8081, follow_config=False)
    add_env_option(
        parser,
        "service-configuration-name",
        "default",
        "the ServiceConfiguration this process owns",
        env="ENCLAVE_SERVICE_CONFIGURATION",
    )
    add_env_option(
        parser,
        "tls-validity",
        "8760h",
        "validity of generated serving and component client certificates; renewed when a third is left",
    )
    add_resync_flag(parser)
    add_env_option(
        parser,
        "owner-cluster-role",
        "",
        "ClusterRole that owns the generated webhook configurations and RBAC, so that deleting it (helm "
        "uninstall) garbage-collects them; deleting the ServiceConfiguration never does",
    )
    add_env_switch(
        parser,
        "manage-crds",
        False,
        "point Enclave's CRDs' conversion webhook at the admission server with the webhook CA, and migrate "
        "objects stored in an old version; one enclave-config per cluster does it",
    )
    args = parser.parse_args(argv)
    # What Settings holds under these names (enclave_core.runtime.options.settings_from)
    args.tls_validity = check_duration(parser, args, "tls-validity")
    args.resync_seconds = check_resync_flag(parser, args)
    args.name = args.service_configuration_name
    args.extra_tls_names = grpc_service_names(args.namespace)
    return args


def grpc_service_names(namespace: str) -> tuple[str, ...]:
    """Names the serving certificate must cover so components can reach each other's gRPC services over TLS."""
    names = ["localhost"]
    for name in ("config", "tenants", "quotas", "globalquotas", "pools", "replication"):
        service = f"enclave-{name}"
        names += [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    return tuple(names)


body = grpc.snapshot_body(
    CONFIG_MANAGER,
    ConfigController,
    Settings,
    config_pb2_grpc.add_ConfigServiceServicer_to_server,
    "Config",
    gates=("reconciled",),
)


def main(argv: list[str] | None = None) -> int:
    return component.run("config", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

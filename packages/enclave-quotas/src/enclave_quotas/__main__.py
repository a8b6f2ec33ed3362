"""``python -m enclave_quotas`` / ``enclave-quotas``: the custom quota component's process.

Every replica watches, counts and serves ``QuotaService`` (kind ``QuotaTargets``); the Lease holder also
writes: ledgers, quota status, Events, and the rules of the generic quota hook. From enclave-config's stream
(``--config-endpoint``) it takes the events namespace for GlobalCustomQuotas (``spec.events.namespace``, default
``default`` as the spec says) and, unless ``--webhook-configuration`` names one, the hook's configuration.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.api.names import QUOTAS_MANAGER
from enclave_core.proto.enclave.quotas.v1 import quotas_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import (
    add_env_option,
    add_env_switch,
    add_resync_flag,
    check_resync_flag,
)
from enclave_quotas.controller import QuotasController, Settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = grpc.controller_parser("enclave-quotas", __doc__, probe_port=8083, grpc_port=9092)
    add_resync_flag(parser)
    add_env_option(
        parser,
        "webhook-configuration",
        "",
        "ValidatingWebhookConfiguration holding the quota hook; default: the one the ServiceConfiguration names "
        "(with --config-endpoint), else enclave-validating-webhook-configuration",
    )
    add_env_option(
        parser, "webhook-name", "quotas.enclave.dev", "the generic quota hook whose rules this component sets"
    )
    add_env_switch(
        parser,
        "metrics-tenant-labels",
        False,
        "expose per-quota metrics of namespaced CustomQuotas and per-claim metrics "
        "(options.emitMetricPerClaimUsage), whose labels carry tenants' namespace and object names, to whoever "
        "can scrape /metrics; off: only cluster-scoped GlobalCustomQuotas get series",
    )
    args = parser.parse_args(argv)
    args.resync_seconds = check_resync_flag(parser, args)
    return args


body = grpc.snapshot_body(
    QUOTAS_MANAGER, QuotasController, Settings, quotas_pb2_grpc.add_QuotaServiceServicer_to_server, "QuotaService"
)


def main(argv: list[str] | None = None) -> int:
    return component.run("quotas", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

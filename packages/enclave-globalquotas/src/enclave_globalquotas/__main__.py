"""``python -m enclave_globalquotas`` / ``enclave-globalquotas``: the global quotas component's process.

Every replica watches and serves the GlobalResourceQuotas snapshot on ``GlobalQuotaService``; the Lease holder also
writes (ResourceQuotas, ledgers, rule quotas, status). The events namespace comes from enclave-config's
``ConfigService`` when ``--config-endpoint`` is given, else ``default``.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.api.names import GLOBALQUOTAS_MANAGER
from enclave_core.proto.enclave.globalquotas.v1 import globalquotas_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import parse_controller_args
from enclave_globalquotas.controller import GlobalQuotasController, Settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = grpc.controller_parser(
        "enclave-globalquotas",
        __doc__,
        probe_port=8084,
        grpc_port=9092,
        concurrency=(16, "ResourceQuotas written in parallel"),
    )
    return parse_controller_args(parser, argv)


body = grpc.snapshot_body(
    GLOBALQUOTAS_MANAGER,
    GlobalQuotasController,
    Settings,
    globalquotas_pb2_grpc.add_GlobalQuotaServiceServicer_to_server,
    "GlobalQuotaService",
)


def main(argv: list[str] | None = None) -> int:
    return component.run("globalquotas", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

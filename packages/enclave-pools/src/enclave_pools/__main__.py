"""``python -m enclave_pools`` / ``enclave-pools``: the resource pools component's process.

Every replica watches and serves ``PoolService`` (the ``ResourcePools`` snapshot admission decides claims
from); the Lease holder also writes: pool finalizers and status (the ledger of bindings), the ResourceQuotas
pools provision, claim status and Events. The events namespace for pools (cluster-scoped) comes from
enclave-config's ``ConfigService`` when ``--config-endpoint`` is given, else ``default``.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.api.names import POOLS_MANAGER
from enclave_core.proto.enclave.pools.v1 import pools_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import parse_controller_args
from enclave_pools.controller import PoolsController, Settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = grpc.controller_parser(
        "enclave-pools", __doc__, probe_port=8085, concurrency=(16, "namespaces (quota, then claims) written at once")
    )
    return parse_controller_args(parser, argv)


body = grpc.snapshot_body(
    POOLS_MANAGER, PoolsController, Settings, pools_pb2_grpc.add_PoolServiceServicer_to_server, "PoolService"
)


def main(argv: list[str] | None = None) -> int:
    return component.run("pools", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

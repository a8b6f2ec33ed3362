"""``python -m enclave_replication`` / ``enclave-replication``: the replication component's process.

Every replica watches and serves ``ReplicationService`` (which objects are managed, for admission's protection
hook); the Lease holder also reconciles, acting as each resource's service account. The impersonation defaults
and the events namespace come from enclave-config's ``ConfigService`` when ``--config-endpoint`` is given.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.kube.events import EventRecorder
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.replication.v1 import replication_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import add_common_flags, env_default
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_replication.controller import ReplicationController, Settings
from enclave_replication.names import COMPONENT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-replication", description=__doc__)
    add_common_flags(parser, probe_port=8085)
    grpc.add_server_flags(parser, default_port=9093)
    grpc.add_subscription_flags(parser, "config")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=int(env_default("ENCLAVE_CONCURRENCY", "4")),
        help="replication objects reconciled in parallel (env ENCLAVE_CONCURRENCY)",
    )
    parser.add_argument(
        "--writes",
        type=int,
        default=int(env_default("ENCLAVE_WRITES", "16")),
        help="writes in flight per replication object (env ENCLAVE_WRITES)",
    )
    args = parser.parse_args(argv)
    if args.concurrency < 1 or args.writes < 1:
        parser.error("--concurrency and --writes must be at least 1")
    return args


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = process.kube(COMPONENT)
    hub = SnapshotHub(args.identity)
    controller = ReplicationController(
        kube,
        hub,
        EventRecorder(kube, COMPONENT),
        Settings(concurrency=args.concurrency, writes=args.writes),
        wait_for_configuration=bool(args.config_endpoint),
    )
    process.state["controller"] = controller
    process.started.set()
    if args.config_endpoint:
        grpc.subscribe(
            process,
            args.config_endpoint,
            config_pb2_grpc.ConfigServiceStub,
            CONFIG_KIND,
            lambda snapshot: controller.set_configuration(EffectiveConfiguration.model_validate_json(snapshot.payload)),
        )
    register = replication_pb2_grpc.add_ReplicationServiceServicer_to_server
    gates = {"informers-synced": controller.synced}
    await grpc.run_controller(process, kube, hub, register, "ReplicationService", controller, gates)


def main(argv: list[str] | None = None) -> int:
    return component.run("replication", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

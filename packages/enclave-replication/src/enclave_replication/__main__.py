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
from enclave_replication.adoption import DEFAULT_ADOPTABLE
from enclave_replication.controller import ReplicationController, Settings
from enclave_replication.names import COMPONENT
from enclave_replication.sandbox import Budget


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
    parser.add_argument(
        "--adopt-field-managers",
        default=env_default("ENCLAVE_ADOPT_FIELD_MANAGERS", ",".join(DEFAULT_ADOPTABLE)),
        help="comma-separated field managers (a trailing * matches a prefix) whose objects policy.creation Merge "
        "may adopt; an object another manager keeps is reported as AdoptionConflict "
        "(env ENCLAVE_ADOPT_FIELD_MANAGERS)",
    )
    add_render_flags(parser)
    args = parser.parse_args(argv)
    if args.concurrency < 1 or args.writes < 1:
        parser.error("--concurrency and --writes must be at least 1")
    if args.render_workers < 1 or args.render_memory_mib < 16:
        parser.error("--render-workers must be at least 1 and --render-memory-mib at least 16")
    if args.render_cpu_seconds <= 0 or args.render_wall_seconds < args.render_cpu_seconds:
        parser.error("--render-cpu-seconds must be positive and --render-wall-seconds at least as long")
    return args


def add_render_flags(parser: argparse.ArgumentParser) -> None:
    """The budget of one template render in the worker pool (enclave_replication.sandbox)."""
    parser.add_argument(
        "--render-cpu-seconds",
        type=float,
        default=float(env_default("ENCLAVE_RENDER_CPU_SECONDS", "2")),
        help="CPU seconds one template render may use (RLIMIT_CPU in its worker, counted in whole seconds) "
        "(env ENCLAVE_RENDER_CPU_SECONDS)",
    )
    parser.add_argument(
        "--render-wall-seconds",
        type=float,
        default=float(env_default("ENCLAVE_RENDER_WALL_SECONDS", "10")),
        help="wall seconds after which a render's worker is killed (env ENCLAVE_RENDER_WALL_SECONDS)",
    )
    parser.add_argument(
        "--render-memory-mib",
        type=int,
        default=int(env_default("ENCLAVE_RENDER_MEMORY_MIB", "128")),
        help="memory a render worker may allocate beyond its own start-up size (RLIMIT_AS) "
        "(env ENCLAVE_RENDER_MEMORY_MIB)",
    )
    parser.add_argument(
        "--render-workers",
        type=int,
        default=int(env_default("ENCLAVE_RENDER_WORKERS", "2")),
        help="render worker processes, started on the first render; one tenant uses at most one at a time "
        "(env ENCLAVE_RENDER_WORKERS)",
    )


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = process.kube(COMPONENT)
    hub = SnapshotHub(args.identity)
    controller = ReplicationController(
        kube,
        hub,
        EventRecorder(kube, COMPONENT),
        Settings(
            concurrency=args.concurrency,
            writes=args.writes,
            adoptable_managers=tuple(m.strip() for m in args.adopt_field_managers.split(",") if m.strip()),
            render=Budget(
                cpu_seconds=args.render_cpu_seconds,
                wall_seconds=args.render_wall_seconds,
                memory_bytes=args.render_memory_mib << 20,
                workers=args.render_workers,
            ),
        ),
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

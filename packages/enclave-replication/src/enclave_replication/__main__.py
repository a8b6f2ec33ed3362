"""``python -m enclave_replication`` / ``enclave-replication``: the replication component's process.

Every replica watches and serves ``ReplicationService`` (which objects are managed, for admission's protection
hook); the Lease holder also reconciles, acting as each resource's service account. The impersonation defaults
and the events namespace come from enclave-config's ``ConfigService`` when ``--config-endpoint`` is given.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.api.names import REPLICATION_MANAGER
from enclave_core.proto.enclave.replication.v1 import replication_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import add_concurrency_flag, add_env_option
from enclave_replication.adoption import DEFAULT_ADOPTABLE
from enclave_replication.controller import ReplicationController, Settings
from enclave_replication.sandbox import Budget


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = grpc.controller_parser("enclave-replication", __doc__, probe_port=8085, grpc_port=9093)
    add_concurrency_flag(parser, 4, "replication objects reconciled in parallel")
    add_env_option(parser, "writes", "16", "writes in flight per replication object", type=int)
    add_env_option(
        parser,
        "adopt-field-managers",
        ",".join(DEFAULT_ADOPTABLE),
        "comma-separated field managers (a trailing * matches a prefix) whose objects policy.creation Merge "
        "may adopt; an object another manager keeps is reported as AdoptionConflict",
    )
    add_render_flags(parser)
    args = parser.parse_args(argv)
    if args.concurrency < 1 or args.writes < 1:
        parser.error("--concurrency and --writes must be at least 1")
    if args.render_workers < 1 or args.render_memory_mib < 16:
        parser.error("--render-workers must be at least 1 and --render-memory-mib at least 16")
    if args.render_cpu_seconds <= 0 or args.render_wall_seconds < args.render_cpu_seconds:
        parser.error("--render-cpu-seconds must be positive and --render-wall-seconds at least as long")
    # What Settings holds under these names (enclave_core.runtime.options.settings_from)
    args.adoptable_managers = tuple(m.strip() for m in args.adopt_field_managers.split(",") if m.strip())
    args.render = Budget(
        cpu_seconds=args.render_cpu_seconds,
        wall_seconds=args.render_wall_seconds,
        memory_bytes=args.render_memory_mib << 20,
        workers=args.render_workers,
    )
    return args


def add_render_flags(parser: argparse.ArgumentParser) -> None:
    """The budget of one template render in the worker pool (enclave_replication.sandbox)."""
    add_env_option(
        parser,
        "render-cpu-seconds",
        "2",
        "CPU seconds one template render may use (RLIMIT_CPU in its worker, counted in whole seconds)",
        type=float,
    )
    add_env_option(
        parser, "render-wall-seconds", "10", "wall seconds after which a render's worker is killed", type=float
    )
    add_env_option(
        parser,
        "render-memory-mib",
        "128",
        "memory a render worker may allocate beyond its own start-up size (RLIMIT_AS)",
        type=int,
    )
    add_env_option(
        parser,
        "render-workers",
        "2",
        "render worker processes, started on the first render; one tenant uses at most one at a time",
        type=int,
    )


body = grpc.snapshot_body(
    REPLICATION_MANAGER,
    ReplicationController,
    Settings,
    replication_pb2_grpc.add_ReplicationServiceServicer_to_server,
    "ReplicationService",
    gates=("informers-synced",),
)


def main(argv: list[str] | None = None) -> int:
    return component.run("replication", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m enclave_globalquotas`` / ``enclave-globalquotas``: the global quotas component's process.

Every replica watches and serves the GlobalResourceQuotas snapshot on ``GlobalQuotaService``; the Lease holder also
writes (ResourceQuotas, ledgers, rule quotas, status). The events namespace comes from enclave-config's
``ConfigService`` when ``--config-endpoint`` is given, else ``default``.
"""

from __future__ import annotations

import argparse
import sys

from enclave_core.durations import parse_duration
from enclave_core.kube.events import EventRecorder
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.globalquotas.v1 import globalquotas_pb2_grpc
from enclave_core.runtime import component, grpc
from enclave_core.runtime.options import add_common_flags, env_default
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_globalquotas.controller import GlobalQuotasController, Settings
from enclave_globalquotas.naming import MANAGER


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-globalquotas", description=__doc__)
    add_common_flags(parser, probe_port=8084)
    grpc.add_server_flags(parser, default_port=9092)
    grpc.add_subscription_flags(parser, "config")
    parser.add_argument(
        "--resync", default=env_default("ENCLAVE_RESYNC", "60s"), help="period of a full pass without changes"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=int(env_default("ENCLAVE_CONCURRENCY", "16")),
        help="ResourceQuotas written in parallel (env ENCLAVE_CONCURRENCY)",
    )
    args = parser.parse_args(argv)
    try:
        parse_duration(args.resync)
    except ValueError as err:
        parser.error(f"--resync: {err}")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return args


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = process.kube(MANAGER)
    hub = SnapshotHub(args.identity)
    settings = Settings(resync_seconds=parse_duration(args.resync).total_seconds(), concurrency=args.concurrency)
    controller = GlobalQuotasController(
        kube,
        settings,
        hub,
        EventRecorder(kube, MANAGER),
        ledger_namespace=args.namespace,
        wait_for_configuration=bool(args.config_endpoint),
    )
    process.state["controller"] = controller
    process.started.set()
    process.readiness.add("informers-synced")
    process.readiness.add("reconciled")
    if args.config_endpoint:
        grpc.subscribe(
            process,
            args.config_endpoint,
            config_pb2_grpc.ConfigServiceStub,
            CONFIG_KIND,
            lambda snapshot: controller.set_configuration(EffectiveConfiguration.model_validate_json(snapshot.payload)),
        )
    register = globalquotas_pb2_grpc.add_GlobalQuotaServiceServicer_to_server
    async with grpc.serve_snapshots(process, kube, hub, register, "GlobalQuotaService"):

        async def open_gates() -> None:
            await controller.synced.wait()
            process.readiness.set("informers-synced")
            await controller.reconciled.wait()
            process.readiness.set("reconciled")

        process.spawn(open_gates(), "readiness")
        await controller.run()


def main(argv: list[str] | None = None) -> int:
    return component.run("globalquotas", parse_args(argv), body, component.lead_controller)


if __name__ == "__main__":
    sys.exit(main())

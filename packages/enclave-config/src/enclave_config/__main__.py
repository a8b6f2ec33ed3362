"""``python -m enclave_config`` / ``enclave-config``: the configuration component's process."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta

from enclave_config.controller import ConfigController, Settings
from enclave_core.durations import parse_duration
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import Kube
from enclave_core.kube.tls_secret import TlsSecretSource
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.runtime import component
from enclave_core.runtime.options import add_common_flags, env_default
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.server import SnapshotServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enclave-config", description=__doc__)
    add_common_flags(parser, probe_port=8081)
    parser.add_argument(
        "--service-configuration-name",
        default=env_default("ENCLAVE_SERVICE_CONFIGURATION", "default"),
        help="the ServiceConfiguration this process owns (env ENCLAVE_SERVICE_CONFIGURATION)",
    )
    parser.add_argument(
        "--grpc-address",
        default=env_default("ENCLAVE_GRPC_ADDRESS", "127.0.0.1:9090"),
        help="ConfigService listener; a non-loopback address needs --grpc-tls-cert/--grpc-tls-key",
    )
    parser.add_argument("--grpc-tls-cert", default=env_default("ENCLAVE_GRPC_TLS_CERT", ""))
    parser.add_argument("--grpc-tls-key", default=env_default("ENCLAVE_GRPC_TLS_KEY", ""))
    parser.add_argument(
        "--grpc-tls-secret",
        default=env_default("ENCLAVE_GRPC_TLS_SECRET", ""),
        help="serve gRPC with the certificate in this kubernetes.io/tls Secret of --namespace (the one this "
        "component maintains when enableTLSReconciler is on); read through a watch, renewals apply live",
    )
    parser.add_argument(
        "--tls-validity",
        default=env_default("ENCLAVE_TLS_VALIDITY", "8760h"),
        help="validity of generated serving certificates; renewed when a third is left (env ENCLAVE_TLS_VALIDITY)",
    )
    parser.add_argument(
        "--resync", default=env_default("ENCLAVE_RESYNC", "60s"), help="period of a full reconcile without changes"
    )
    args = parser.parse_args(argv)
    for flag in ("tls_validity", "resync"):
        try:
            parse_duration(getattr(args, flag))
        except ValueError as err:
            parser.error(f"--{flag.replace('_', '-')}: {err}")
    return args


async def body(process: component.Component) -> None:
    args = process.args
    assert process.api is not None
    kube = Kube(process.api, field_manager="enclave-config")
    hub = SnapshotHub(args.identity)
    settings = Settings(
        name=args.service_configuration_name,
        namespace=args.namespace,
        extra_tls_names=grpc_service_names(args.namespace),
        tls_validity=timedelta(seconds=parse_duration(args.tls_validity).total_seconds()),
        resync_seconds=parse_duration(args.resync).total_seconds(),
    )
    controller = ConfigController(kube, settings, hub, EventRecorder(kube, "enclave-config"))
    process.state["controller"] = controller
    process.started.set()
    secret = TlsSecretSource(kube, args.namespace, args.grpc_tls_secret) if args.grpc_tls_secret else None
    server = SnapshotServer(
        args.grpc_address,
        tls_cert_file=args.grpc_tls_cert,
        tls_key_file=args.grpc_tls_key,
        tls_source=secret.current if secret else None,
    )
    server.add(config_pb2_grpc.add_ConfigServiceServicer_to_server, hub, "ConfigService")
    process.readiness.add("reconciled")
    process.readiness.add("grpc")
    tasks = [asyncio.create_task(controller.run())]
    if secret is not None:
        tasks.append(asyncio.create_task(secret.run()))
    try:
        if secret is not None:
            # The Secret may be ours to create: reconcile first, serve once it holds a certificate.
            await secret.wait_ready()
        await server.start()
        process.readiness.set("grpc")
        await controller.reconciled.wait()
        process.readiness.set("reconciled")
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await server.stop()


async def lead(process: component.Component) -> None:
    """While this replica holds the Lease it is the writer; the reconcile loop itself runs everywhere."""
    await process.started.wait()
    controller: ConfigController = process.state["controller"]
    controller.set_leading(True)
    try:
        await asyncio.Event().wait()
    finally:
        controller.set_leading(False)


def grpc_service_names(namespace: str) -> tuple[str, ...]:
    """Names the serving certificate must cover so components can reach each other's gRPC services over TLS."""
    names = ["localhost"]
    for name in ("config", "tenants", "quotas", "globalquotas", "pools", "replication"):
        service = f"enclave-{name}"
        names += [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    return tuple(names)


def main(argv: list[str] | None = None) -> int:
    return component.run("config", parse_args(argv), body, lead)


if __name__ == "__main__":
    sys.exit(main())

"""The gRPC side of a component: its snapshot service and its subscriptions, configured the same way everywhere.

Every stream off loopback is mutual TLS with the one service CA of the ``enclave-tls`` Secret: publishers
present its serving certificate and require a client certificate it signed; subscribers verify the publisher
and present their component's own client certificate (``enclave-tls-client-<component>``, which names the
component), and publishers answer only the kinds that component may read (``enclave_core.snapshots.access``;
see docs/architecture.md).

Flags: ``--grpc-address`` and a TLS source for the server (``--grpc-tls-cert``/``--grpc-tls-key`` files with
``--grpc-ca-file`` to verify clients, or ``--grpc-tls-secret`` read through a watch, whose ``ca.crt`` verifies
clients); ``--<publisher>-endpoint`` per subscription, ``--grpc-ca-file`` to verify publishers and
``--grpc-client-cert``/``--grpc-client-key`` to present to them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import grpc

from enclave_core import invalidation
from enclave_core.durations import parse_duration
from enclave_core.kube import informer
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import Kube
from enclave_core.kube.tls_secret import TlsSecretSource
from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.runtime.component import Body, Component
from enclave_core.runtime.options import (
    PYTHON_GC_THRESHOLDS,
    add_common_flags,
    add_controller_flags,
    add_env_option,
    settings_from,
)
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.subscriber import ItemsConsumer, SnapshotSubscriber
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView

log = logging.getLogger(__name__)


def _add_ca_flag(parser: argparse.ArgumentParser) -> None:
    """``--grpc-ca-file`` serves both sides (publishers verify clients, subscribers verify publishers)."""
    if any("--grpc-ca-file" in action.option_strings for action in parser._actions):
        return
    add_env_option(
        parser,
        "grpc-ca-file",
        "",
        "the service CA bundle: verifies publishers when subscribing and client certificates when serving TLS "
        "from files; empty means plaintext subscriptions, loopback only",
    )


def add_server_flags(parser: argparse.ArgumentParser, default_port: int = 9090) -> None:
    add_env_option(
        parser,
        "grpc-address",
        f"127.0.0.1:{default_port}",
        "snapshot service listener; a non-loopback address needs TLS",
    )
    add_env_option(parser, "grpc-tls-cert", "", "PEM serving certificate of the snapshot service")
    add_env_option(parser, "grpc-tls-key", "", "PEM key of --grpc-tls-cert")
    add_env_option(
        parser,
        "grpc-tls-secret",
        "",
        "serve with the certificate of this kubernetes.io/tls Secret of --namespace, read through a watch so "
        "renewals apply live; its ca.crt verifies clients",
    )
    _add_ca_flag(parser)


def controller_parser(
    prog: str,
    description: str | None,
    *,
    probe_port: int,
    grpc_port: int = 9090,
    follow_config: bool = True,
    gc: str = PYTHON_GC_THRESHOLDS,
    concurrency: tuple[int, str] | None = None,
) -> argparse.ArgumentParser:
    """The parser every controller component starts from: the common flags (leader election included), its
    snapshot service's, and, unless it is enclave-config itself, ``--config-endpoint`` with the subscriber's TLS
    flags (what :func:`snapshot_body` subscribes with). ``concurrency`` (default, help) adds
    ``--resync`` and ``--concurrency`` (:func:`enclave_core.runtime.options.add_controller_flags`)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_common_flags(parser, probe_port=probe_port, gc=gc)
    add_server_flags(parser, default_port=grpc_port)
    if follow_config:
        add_subscription_flags(parser, "config")
    if concurrency is not None:
        add_controller_flags(parser, concurrency=concurrency[0], concurrency_help=concurrency[1])
    return parser


def add_subscription_flags(parser: argparse.ArgumentParser, *publishers: str) -> None:
    for name in publishers:
        add_env_option(parser, f"{name}-endpoint", "", f"host:port of enclave-{name}'s snapshot service")
    _add_ca_flag(parser)
    add_env_option(
        parser,
        "grpc-client-cert",
        "",
        "PEM certificate presented to publishers: this component's client certificate, issued by the service CA "
        "and naming the component; needed with --grpc-ca-file",
    )
    add_env_option(parser, "grpc-client-key", "", "PEM key of --grpc-client-cert")
    add_env_option(
        parser,
        "snapshot-staleness",
        "120s",
        "not ready once a publisher has not confirmed a snapshot (by a change or a heartbeat) for this long; "
        "decisions still use the last good snapshot, 0 disables",
    )
    add_env_option(
        parser, "grpc-server-name", "", "TLS name expected of the publishers when it differs from the endpoint host"
    )


def subscribe(
    process: Component,
    endpoint: str,
    stub: Callable[[grpc.aio.Channel], Any],
    kind: str,
    accept: Callable[[Snapshot], None],
    *,
    items: ItemsConsumer | None = None,
    gate: bool = True,
) -> SnapshotSubscriber:
    """Subscribe to ``kind`` at ``endpoint`` for the life of the process; readiness gate ``snapshot:<kind>``
    stays closed until ``accept`` has taken a snapshot, and closes again when the publisher has not confirmed
    it for ``--snapshot-staleness`` (the last good one keeps serving decisions meanwhile). With ``items``, an
    itemized kind arrives as items and deltas (``accept`` still takes whole payloads from older publishers).
    ``gate=False``: the check is reported in ``/readyz`` but never makes the process unready (the consumer
    copes with the snapshot's absence itself, as admission's hooks do).

    Every subscription to the ServiceConfiguration also sets the process's cache invalidation period from
    it (``spec.cacheInvalidation``, :mod:`enclave_core.invalidation`), so no component wires that itself."""
    args = process.args
    if kind == CONFIG_KIND:
        accept = _following_invalidation(accept)
    if args.grpc_ca_file and not (args.grpc_client_cert and args.grpc_client_key):
        raise ValueError(
            "--grpc-ca-file needs --grpc-client-cert and --grpc-client-key: publishers accept only clients "
            "with a certificate of the service CA"
        )
    subscriber = SnapshotSubscriber(
        endpoint,
        stub,
        kinds=[kind],
        on_snapshot=accept,
        subscriber=f"{process.name}/{args.identity}",
        ca_file=args.grpc_ca_file,
        server_name=args.grpc_server_name,
        client_cert_file=args.grpc_client_cert,
        client_key_file=args.grpc_client_key,
        staleness=parse_duration(args.snapshot_staleness or "0").total_seconds(),
        items=items,
    )
    process.readiness.add_check(
        f"snapshot:{kind}", lambda: subscriber.ready, gating=gate, detail=lambda: subscriber.unavailable(kind)
    )
    process.spawn(subscriber.run(), f"subscriber-{kind}")
    return subscriber


def subscribe_tenancy(
    process: Component,
    endpoint: str,
    accept: Callable[[Snapshot], None],
    accept_views: Callable[[Mapping[str, TenantView], Snapshot], None],
) -> SnapshotSubscriber:
    """Subscribe to enclave-tenants' Tenancy snapshot, itemized (one item per tenant, only the changed ones
    parsed): ``accept_views`` takes the current tenants, ``accept`` a whole payload from an older publisher."""
    items = ItemsConsumer(parse=TenancySnapshot.parse_item, accept=accept_views)
    return subscribe(process, endpoint, tenants_pb2_grpc.TenantServiceStub, TENANCY_KIND, accept, items=items)


def _following_invalidation(accept: Callable[[Snapshot], None]) -> Callable[[Snapshot], None]:
    """``accept``, then the accepted configuration's ``spec.cacheInvalidation`` as the process's period."""

    def accept_and_follow(snapshot: Snapshot) -> None:
        accept(snapshot)
        try:
            config = EffectiveConfiguration.model_validate_json(snapshot.payload)
            invalidation.set_period(parse_duration(config.spec.cache_invalidation).total_seconds())
        except ValueError:  # the consumer took it; the period alone stays as it was
            log.warning("cannot read spec.cacheInvalidation; keeping the period", extra={"kind": snapshot.kind})

    return accept_and_follow


async def _wait_for_files(*paths: str) -> None:
    def present() -> bool:
        return all(os.path.exists(path) for path in paths)

    while not await asyncio.to_thread(present):  # noqa: ASYNC110 - the kubelet fills the mount; no event to await
        await asyncio.sleep(1.0)


@contextlib.asynccontextmanager
async def serve_snapshots(
    process: Component,
    kube: Kube,
    hub: SnapshotHub,
    register: Callable[[Any, grpc.aio.Server], None],
    service: str,
) -> AsyncIterator[SnapshotServer]:
    """Serve ``hub`` as ``service`` for the duration of the block; readiness gate ``grpc`` opens once listening.

    With ``--grpc-tls-secret`` the listener waits for the Secret to hold a certificate (for enclave-config,
    the Secret is its own to create), so the wait runs in the background rather than blocking the block.
    """
    args = process.args
    # The hub vouches for its state only while the process's watches work: a publisher cut off from the
    # apiserver keeps its streams alive but lets subscribers' staleness bounds run (docs/architecture.md, Faults).
    hub.confirming = informer.watching
    # ... and the moment they work again, every stream hears it (not one heartbeat later).
    forget_resumed = informer.on_watching_resumed(hub.reconfirm)
    secret = TlsSecretSource(kube, args.namespace, args.grpc_tls_secret) if args.grpc_tls_secret else None
    server = SnapshotServer(
        args.grpc_address,
        tls_cert_file=args.grpc_tls_cert,
        tls_key_file=args.grpc_tls_key,
        tls_source=secret.current if secret else None,
        client_ca_file="" if secret else args.grpc_ca_file,
        client_ca=secret.ca if secret else None,
    )
    server.add(register, hub, service)
    process.readiness.add("grpc")

    async def start() -> None:
        if secret is not None:
            await secret.wait_ready()
        if args.grpc_tls_cert:
            # A mounted Secret that enclave-config has not created yet: wait (not ready) instead of crash-looping.
            await _wait_for_files(args.grpc_tls_cert, args.grpc_tls_key, args.grpc_ca_file)

        await server.start()
        process.readiness.set("grpc")

    tasks = [process.spawn(start(), "grpc-start")]
    if secret is not None:
        tasks.append(process.spawn(secret.run(), "grpc-tls-secret"))
    try:
        yield server
    finally:
        forget_resumed()
        for task in tasks:
            task.cancel()
        await server.stop()


class Controller(Protocol):
    """What :func:`run_controller` needs of a component's controller: its run loop (the events its readiness
    gates follow are passed as ``gates``, since controllers name and order them differently)."""

    async def run(self) -> None: ...


class SnapshotController(Controller, Protocol):
    """What :func:`snapshot_body` needs: the run loop, writes switched on while leading
    (:func:`enclave_core.runtime.component.lead_controller`), and enclave-config's configuration waited for
    and taken (:class:`enclave_core.runtime.controller.ControllerBase`)."""

    def set_leading(self, leading: bool) -> None: ...

    def wait_for_configuration(self) -> None: ...

    def set_configuration(self, config: EffectiveConfiguration) -> None: ...


S = TypeVar("S")


GATE_EVENTS = {"informers-synced": "synced", "reconciled": "reconciled"}
"""Readiness gate -> the controller's ``asyncio.Event`` attribute that opens it (every controller spells them so)."""


def snapshot_body(
    manager: str,
    controller: Callable[[Kube, S, SnapshotHub, EventRecorder], SnapshotController],
    settings: type[S],
    register: Callable[[Any, grpc.aio.Server], None],
    service: str,
    *,
    gates: Sequence[str] = ("informers-synced", "reconciled"),
) -> Body:
    """The ``body`` of every controller component's ``__main__`` (what it and ``enclave-host`` run, with
    ``component.lead_controller`` as the leader work), so an entry point is only what differs: its flags.

    The body builds ``settings`` from the parsed flags (:func:`enclave_core.runtime.options.settings_from`: each
    field the flag of its name, so ``parse_args`` leaves a value it computes on ``args`` under its field's name),
    then ``controller(kube, settings, hub, events)`` (a :class:`~enclave_core.runtime.controller.ControllerBase`)
    from the Lease-fenced API client writing as field manager ``manager``, the hub it publishes and an Event
    recorder of ``manager``; the controller goes to ``process.state`` for the leader work. With
    ``--config-endpoint`` set, the controller waits for enclave-config's configuration (``wait_for_configuration``:
    a controller whose loop gates on it publishes and writes nothing before) and takes each one published
    (``set_configuration``; the readiness gate ``snapshot:ServiceConfiguration`` waits for the first). Then the
    hub is served as ``service`` (``register`` adds its servicer) and the controller runs, each of ``gates``
    (names in :data:`GATE_EVENTS`) opening in order as its event is set.
    """

    async def body(process: Component) -> None:
        args = process.args
        assert process.api is not None
        kube = process.kube(manager)
        hub = SnapshotHub(args.identity)
        built = controller(kube, settings_from(settings, args), hub, EventRecorder(kube, manager))
        process.state["controller"] = built
        process.started.set()
        endpoint = getattr(args, "config_endpoint", "")
        if endpoint:
            built.wait_for_configuration()

            def accept(snapshot: Snapshot) -> None:
                built.set_configuration(EffectiveConfiguration.model_validate_json(snapshot.payload))

            subscribe(process, endpoint, config_pb2_grpc.ConfigServiceStub, CONFIG_KIND, accept)
        events = {name: getattr(built, GATE_EVENTS[name]) for name in gates}
        await run_controller(process, kube, hub, register, service, built, events)

    return body


async def run_controller(
    process: Component,
    kube: Kube,
    hub: SnapshotHub,
    register: Callable[[Any, grpc.aio.Server], None],
    service: str,
    controller: Controller,
    gates: dict[str, asyncio.Event],
) -> None:
    """Serve the controller's snapshots and run it, opening each readiness gate when its event is set.

    Every controller component ends its body this way: a gate per condition the process must reach before
    subscribers and probes may trust it (``informers-synced``, ``reconciled``), in the order given, so a
    replica that has not listed its kinds never reports ready.
    """
    for name in gates:
        process.readiness.add(name)
    async with serve_snapshots(process, kube, hub, register, service):

        async def open_gates() -> None:
            for name, event in gates.items():
                await event.wait()
                process.readiness.set(name)

        process.spawn(open_gates(), "readiness")
        await controller.run()

"""The subscribing side of a snapshot stream: reconnect with backoff, keep the last good snapshot.

A subscriber is what lets admission decide from memory: it holds the newest snapshot of every kind it wants,
reports ready only once each has arrived, and keeps serving from the last good state while the publisher
restarts (a rolling update of a controller must not fail admission calls).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest

log = logging.getLogger(__name__)


@dataclass
class SubscriberState:
    """What has arrived so far, for readiness and diagnostics."""

    latest: dict[str, Snapshot] = field(default_factory=dict)
    connected: bool = False
    reconnects: int = 0


class SnapshotSubscriber:
    """Watches one snapshot service and hands every new snapshot to ``on_snapshot``."""

    def __init__(
        self,
        target: str,
        stub_factory: Callable[[grpc.aio.Channel], Any],
        *,
        kinds: list[str],
        on_snapshot: Callable[[Snapshot], None],
        subscriber: str,
        ca_file: str = "",
        server_name: str = "",
        client_cert_file: str = "",
        client_key_file: str = "",
        initial_backoff: float = 0.2,
        max_backoff: float = 5.0,
    ) -> None:
        self.target = target
        self.stub_factory = stub_factory
        self.kinds = kinds
        self.on_snapshot = on_snapshot
        self.subscriber = subscriber
        self.ca_file = ca_file
        self.server_name = server_name
        self.client_cert_file = client_cert_file
        self.client_key_file = client_key_file
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.state = SubscriberState()

    @property
    def ready(self) -> bool:
        """Every wanted kind has arrived at least once (it may be stale while the publisher is away)."""
        return all(kind in self.state.latest for kind in self.kinds)

    def _channel(self) -> grpc.aio.Channel:
        if not self.ca_file:
            return grpc.aio.insecure_channel(self.target)
        # Read on every connection: a renewed CA or client certificate is used from the next reconnect on.
        with open(self.ca_file, "rb") as handle:
            ca = handle.read()
        cert = key = None
        if self.client_cert_file:
            with open(self.client_cert_file, "rb") as cert_handle, open(self.client_key_file, "rb") as key_handle:
                cert, key = cert_handle.read(), key_handle.read()
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return grpc.aio.secure_channel(self.target, credentials, options=options)

    async def run(self) -> None:
        """Until cancelled: connect, stream, and on any failure back off and reconnect."""
        backoff = self.initial_backoff
        while True:
            try:
                async with self._channel() as channel:
                    stream = self.stub_factory(channel).Watch(
                        WatchRequest(subscriber=self.subscriber, kinds=self.kinds)
                    )
                    async for snapshot in stream:
                        if not self.state.connected:
                            self.state.connected = True
                            log.info("snapshot stream connected", extra={"target": self.target})
                        backoff = self.initial_backoff
                        self._accept(snapshot)
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as err:
                log.warning(
                    "snapshot stream down; keeping last good state",
                    extra={"target": self.target, "code": err.code().name, "retry_in": round(backoff, 2)},
                )
            except Exception:
                log.exception("snapshot stream failed", extra={"target": self.target})
            self.state.connected = False
            self.state.reconnects += 1
            await asyncio.sleep(backoff * (0.5 + random.random()))  # jitter spreads a fleet's reconnects
            backoff = min(self.max_backoff, backoff * 2)

    def _accept(self, snapshot: Snapshot) -> None:
        previous = self.state.latest.get(snapshot.kind)
        if (
            previous is not None
            and previous.incarnation == snapshot.incarnation
            and previous.revision >= snapshot.revision
        ):
            return
        self.state.latest[snapshot.kind] = snapshot
        try:
            self.on_snapshot(snapshot)
        except Exception:  # a bad payload must not kill the stream; the previous state stays in use
            log.exception("rejected snapshot", extra={"kind": snapshot.kind, "revision": snapshot.revision})

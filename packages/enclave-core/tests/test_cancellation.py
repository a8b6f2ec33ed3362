"""A cancellation that meets the end of a timed wait stops the task: the hub's stream, waiting for news or its
next heartbeat, and the subscriber's read of its next message (not ``asyncio.wait_for``, which on Python 3.11
returns the result and drops the cancel, so a stream outlives the server or subscriber that stopped it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.subscriber import SnapshotSubscriber
from enclave_testing.waiting import assert_cancel_is_kept

KIND = "Tenancy"


async def test_a_hub_stream_cancelled_as_news_arrives_stops() -> None:
    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        hub = SnapshotHub("test")

        async def consume() -> None:
            async for _ in hub.stream(heartbeat=60.0):
                pass

        return consume(), lambda: hub.publish(KIND, b"{}")

    await assert_cancel_is_kept(attempt)


class _Stream:
    """A gRPC response stream whose next message comes when the test says."""

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.cancelled = False

    async def read(self) -> Snapshot:
        await self.sent.wait()
        return Snapshot(kind=KIND, revision=1)

    def cancel(self) -> None:
        self.cancelled = True


async def test_a_subscriber_cancelled_as_a_message_arrives_stops() -> None:
    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        subscriber = SnapshotSubscriber(
            "127.0.0.1:1",
            tenants_pb2_grpc.TenantServiceStub,
            kinds=[KIND],
            on_snapshot=lambda _: None,
            subscriber="test",
            staleness=40,
        )
        subscriber.state.heartbeats_announced = True  # the read is bounded by three heartbeat periods
        stream = _Stream()
        return subscriber._next(stream), stream.sent.set

    await assert_cancel_is_kept(attempt)

"""Itemized snapshots: the whole tenancy once (chunked under gRPC's message limit), then only what changed.

At 10,000 tenants the whole Tenancy is several MiB, over gRPC's default 4 MiB message limit; sent whole on
every change it broke the stream around 7,000 tenants and made every admission replica re-parse everything.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from enclave_core.api.meta import Entity
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.hub import CHUNK_BYTES, SnapshotHub
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.subscriber import ItemsConsumer, SnapshotSubscriber
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView


def tenant(index: int, *, quota: int | None = None) -> TenantView:
    """A tenant of realistic size: three owners, four namespaces, a node selector."""
    name = f"tenant-{index:05}"
    return TenantView(
        name=name,
        uid=f"0b6f7130-0000-4000-8000-{index:012}",
        owners=[
            Entity(kind="User", name=f"alice-{index}@example.com"),
            Entity(kind="Group", name=f"team-{index}-admins"),
            Entity(kind="ServiceAccount", name=f"system:serviceaccount:{name}-ci:deployer"),
        ],
        namespaces=[f"{name}-{env}" for env in ("dev", "staging", "prod", "tools")],
        namespace_quota=quota or 10,
        node_selector={"pool": f"pool-{index % 7}", "tier": "standard"},
    )


def items_of(views: list[TenantView]) -> dict[str, bytes]:
    return TenancySnapshot(tenants=views).items()


class Collector:
    """Admission's side of an itemized subscription, counting what it parsed."""

    def __init__(self) -> None:
        self.views: Mapping[str, TenantView] = {}
        self.revision = 0
        self.parsed = 0
        self.accepted = asyncio.Event()
        self.reject = False

    def parse(self, value: bytes) -> TenantView:
        self.parsed += 1
        return TenancySnapshot.parse_item(value)

    def accept(self, views: Mapping[str, TenantView], snapshot: Snapshot) -> None:
        if self.reject:
            raise ValueError("refused by the test")
        self.views, self.revision = views, snapshot.revision
        self.accepted.set()

    def consumer(self) -> ItemsConsumer:
        return ItemsConsumer(parse=self.parse, accept=self.accept)


async def until(check: Callable[[], bool], seconds: float = 30.0) -> None:
    """Bounded poll: a deadline, not a timed assertion (the timing is a row in tests/bench)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _live(hub: SnapshotHub, collector: Collector) -> AsyncIterator[SnapshotSubscriber]:
    server = SnapshotServer("127.0.0.1:0")
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    await server.start()
    subscriber = SnapshotSubscriber(
        f"127.0.0.1:{server.port}",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[TENANCY_KIND],
        on_snapshot=lambda _s: None,
        subscriber="test",
        items=collector.consumer(),
    )
    task = asyncio.create_task(subscriber.run())
    try:
        yield subscriber
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await server.stop(0)


async def test_ten_thousand_tenants_stream_and_a_change_arrives_alone() -> None:
    views = [tenant(i) for i in range(10_000)]
    hub = SnapshotHub("tenants")
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    whole = hub.latest(TENANCY_KIND)
    assert whole is not None
    assert len(whole.payload) > 4 * 1024 * 1024, "the test must exceed gRPC's default message limit"
    collector = Collector()
    live = _live(hub, collector)
    subscriber = await anext(live)
    try:
        await until(lambda: len(collector.views) == 10_000)
        assert subscriber.ready
        assert collector.parsed == 10_000
        # One tenant changes: one item travels, one item is parsed, the rest is reused as is.
        views[4242] = tenant(4242, quota=99)
        published = hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
        assert published is not None
        target = published.revision
        await until(lambda: collector.revision == target)
        assert collector.views["tenant-04242"].namespace_quota == 99
        assert collector.parsed == 10_001
        assert len(collector.views) == 10_000
        # A removal and an addition.
        del views[0]
        views.append(tenant(10_000))
        published = hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
        assert published is not None
        target = published.revision
        await until(lambda: collector.revision == target)
        assert "tenant-00000" not in collector.views
        assert "tenant-10000" in collector.views
        assert collector.parsed == 10_002
    finally:
        await live.aclose()  # type: ignore[attr-defined]


async def test_the_whole_state_is_chunked_and_deltas_span_skipped_revisions() -> None:
    hub = SnapshotHub("tenants")
    views = [tenant(i) for i in range(3000)]
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    stream = hub.stream([TENANCY_KIND], itemized=True)
    first: list[Snapshot] = []
    while not first or first[-1].more:
        first.append(await anext(stream))
    assert len(first) > 1
    assert all(sum(len(i.key) + len(i.value) for i in m.items) <= CHUNK_BYTES for m in first)
    assert sum(len(m.items) for m in first) == 3000
    assert not any(m.delta for m in first)
    # Three revisions published before the stream reads again: one delta spanning them.
    views[1] = tenant(1, quota=5)
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    views[2] = tenant(2, quota=6)
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    del views[3]
    last = hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    assert last is not None
    delta = await anext(stream)
    assert delta.delta
    assert not delta.more
    assert delta.revision == last.revision
    assert sorted(i.key for i in delta.items) == ["tenant-00001", "tenant-00002"]
    assert list(delta.removed) == ["tenant-00003"]
    # Publishing the same state again is no revision at all.
    assert hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants") is None
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_subscriber_that_does_not_take_items_gets_the_whole_payload() -> None:
    hub = SnapshotHub("tenants")
    views = [tenant(i) for i in range(3)]
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    stream = hub.stream([TENANCY_KIND])
    whole = await anext(stream)
    assert not whole.items
    assert TenancySnapshot.model_validate_json(whole.payload) == TenancySnapshot(tenants=views)
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_rejected_itemized_revision_keeps_the_previous_state_and_the_next_one_is_whole() -> None:
    views = [tenant(i) for i in range(5)]
    hub = SnapshotHub("tenants")
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    collector = Collector()
    live = _live(hub, collector)
    subscriber = await anext(live)
    try:
        await until(lambda: len(collector.views) == 5)
        before = collector.revision
        collector.reject = True
        views[0] = tenant(0, quota=1)
        hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
        await until(lambda: subscriber.state.rejected == 1)
        assert collector.revision == before
        assert collector.views["tenant-00000"].namespace_quota == 10
        collector.reject = False
        views[1] = tenant(1, quota=2)
        published = hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
        assert published is not None
        target = published.revision
        await until(lambda: collector.revision == target)
        # The rejected change is not lost: it is part of what the consumer now holds.
        assert collector.views["tenant-00000"].namespace_quota == 1
        assert collector.views["tenant-00001"].namespace_quota == 2
    finally:
        await live.aclose()  # type: ignore[attr-defined]


def test_items_parse_with_unknown_fields() -> None:
    document: dict[str, Any] = json.loads(tenant(1).model_dump_json())
    document["fromTheFuture"] = True
    document["owners"][0]["alsoNew"] = 1
    assert TenancySnapshot.parse_item(json.dumps(document).encode()) == tenant(1)


async def test_a_reconnect_to_the_same_publisher_parses_nothing_again() -> None:
    hub = SnapshotHub("tenants")
    views = [tenant(i) for i in range(50)]
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    collector = Collector()
    subscriber = SnapshotSubscriber(
        "unused:1",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[TENANCY_KIND],
        on_snapshot=lambda _s: None,
        subscriber="test",
        items=collector.consumer(),
    )

    async def connect() -> AsyncIterator[Snapshot]:
        subscriber._stream_raw.clear()  # what run() does on every new connection
        stream = hub.stream([TENANCY_KIND], itemized=True)
        message = await anext(stream)
        await subscriber.receive_items(message)
        return stream

    first = await connect()
    assert collector.parsed == 50
    second = await connect()  # the same incarnation and revision again: confirmed, not re-parsed
    assert collector.parsed == 50
    views[7] = tenant(7, quota=3)
    hub.publish_items(TENANCY_KIND, items_of(views), envelope="tenants")
    await subscriber.receive_items(await anext(second))
    assert collector.parsed == 51
    assert collector.views["tenant-00007"].namespace_quota == 3
    for stream in (first, second):
        await stream.aclose()  # type: ignore[attr-defined]

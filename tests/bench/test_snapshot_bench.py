"""Snapshot streams at scale: the itemized Tenancy over a real gRPC stream, publisher and subscriber in one
process (so each row includes both sides' CPU on one loop).

Rows per tenancy size: the first sync (publish -> every tenant accepted), and a one-tenant change
(publish -> accepted), median and worst of several rounds; plus the bytes a change puts on the wire against
the whole payload a change cost before itemized streams. Target: a change reaches the subscriber in under a
second at 10,000 tenants, printed. Asserted under ``tox -e bench`` (:mod:`sizes`), as ratios of the same run: a
change costs the itemized stream under a hundredth of the whole payload on the wire, and less time than the whole
payload took at the largest size both run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping

from sizes import Budget, enforce, sized

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.subscriber import ItemsConsumer, SnapshotSubscriber
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView

SIZES = sized((1_000, 5_000, 10_000), (50,))
ROUNDS = sized(7, 2)
WHOLE_SIZES = SIZES[:2]
"""The stream as it was before itemized streams, for the ratio; 10,000 tenants that way takes minutes."""


def _tenant(index: int, quota: int = 10) -> TenantView:
    from enclave_core.api.meta import Entity

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
        namespace_quota=quota,
        node_selector={"pool": f"pool-{index % 7}", "tier": "standard"},
    )


async def _measure(size: int, itemized: bool = True) -> dict[str, float]:
    views = [_tenant(i) for i in range(size)]
    hub = SnapshotHub("bench")
    server = SnapshotServer("127.0.0.1:0")
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    await server.start()
    accepted: dict[int, float] = {}
    arrived = asyncio.Event()

    def accept(items: Mapping[str, TenantView], snapshot: Snapshot) -> None:
        TenancySnapshot.from_views(items.values()).namespace_owner  # noqa: B018 - what admission builds per snapshot
        accepted[snapshot.revision] = time.perf_counter()
        arrived.set()

    def accept_whole(snapshot: Snapshot) -> None:
        # The way every change was taken before itemized streams: parse the whole tenancy, on the loop.
        TenancySnapshot.model_validate_json(snapshot.payload).namespace_owner  # noqa: B018
        accepted[snapshot.revision] = time.perf_counter()
        arrived.set()

    subscriber = SnapshotSubscriber(
        f"127.0.0.1:{server.port}",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[TENANCY_KIND],
        on_snapshot=accept_whole,
        subscriber="bench",
        items=ItemsConsumer(parse=TenancySnapshot.parse_item, accept=accept) if itemized else None,
    )
    task = asyncio.create_task(subscriber.run())
    try:
        started = time.perf_counter()
        first = hub.publish_items(TENANCY_KIND, TenancySnapshot(tenants=views).items(), envelope="tenants")
        assert first is not None
        while first.revision not in accepted:
            await arrived.wait()
            arrived.clear()
        sync = accepted[first.revision] - started
        whole = hub.latest(TENANCY_KIND)
        assert whole is not None
        changes = []
        for round_ in range(ROUNDS):
            views[round_ * 7 % size] = _tenant(round_ * 7 % size, quota=100 + round_)
            items = TenancySnapshot(tenants=views).items()  # the publisher re-encodes; only one item differs
            started = time.perf_counter()
            published = hub.publish_items(TENANCY_KIND, items, envelope="tenants")
            assert published is not None
            while published.revision not in accepted:
                await arrived.wait()
                arrived.clear()
            changes.append(accepted[published.revision] - started)
        return {
            "sync": sync,
            "median": statistics.median(changes),
            "worst": max(changes),
            "whole_bytes": len(whole.payload),
            "delta_bytes": len(items[views[0].name]) if itemized else len(whole.payload),
        }
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.stop(0)


def test_itemized_tenancy_at_scale() -> None:
    rows = [("itemized", size, asyncio.run(_measure(size))) for size in SIZES]
    rows += [("whole (before)", size, asyncio.run(_measure(size, itemized=False))) for size in WHOLE_SIZES]
    print()
    print(
        "| stream | tenants | first sync (s) | change -> accepted, median (ms) | worst (ms) "
        "| whole payload (KiB) | one change on the wire (B) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, size, row in rows:
        print(
            f"| {mode} | {size:,} | {row['sync']:.2f} | {row['median'] * 1000:.1f} | {row['worst'] * 1000:.1f} "
            f"| {row['whole_bytes'] / 1024:,.0f} | {row['delta_bytes']:,} |"
        )
    itemized = {size: row for mode, size, row in rows if mode == "itemized"}
    whole = {size: row for mode, size, row in rows if mode != "itemized"}
    largest = max(whole)
    at = itemized[largest]
    enforce(
        Budget("100 x change/whole bytes", at["delta_bytes"] * 100 / at["whole_bytes"], 1),
        Budget(f"change time itemized/whole at {largest:,}", at["median"] / whole[largest]["median"], 1),
    )

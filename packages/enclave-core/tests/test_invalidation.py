"""spec.cacheInvalidation: every cache is rebuilt from a fresh read once per period, spread so caches do not
rebuild together; informers on virtual time against a scripted apiserver, subscribers against a real stream."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY
from test_snapshot_items import Collector, _live, until

from enclave_core import invalidation
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.runtime.grpc import _following_invalidation
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView
from enclave_testing import virtualtime


@pytest.fixture(autouse=True)
def default_period() -> Iterator[None]:
    """The period is the process's: every test leaves the default behind."""
    yield
    invalidation.set_period(invalidation.DEFAULT_PERIOD)


def _count(cache: str) -> float:
    return REGISTRY.get_sample_value("enclave_cache_invalidations_total", {"cache": cache}) or 0.0


# -- the period and its spread -----------------------------------------------------------------------------


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, 0.999999, -1.0, 2.0])
def test_a_cache_is_due_within_the_last_fifth_of_the_period_never_after_it(draw: float) -> None:
    due = invalidation.due_after(3600.0, draw)
    assert 3600.0 * (1 - invalidation.SPREAD) <= due <= 3600.0


def test_caches_started_together_are_due_apart() -> None:
    """One helm install starts every replica at once: their draws, not their start, decide when they relist."""
    draws = random.Random(7)
    dues = sorted(invalidation.due_after(86400.0, draws.random()) for _ in range(50))
    assert dues[-1] - dues[0] > 0.5 * invalidation.SPREAD * 86400.0, "50 caches bunched within a tenth of the period"
    assert len(set(dues)) == 50


def test_each_fresh_read_draws_a_new_fraction() -> None:
    """A cache unlucky once (due with another) is not due with it forever."""

    async def body() -> None:
        fractions = iter([0.1, 0.9])
        deadline = invalidation.Deadline(draw=lambda: next(fractions))
        invalidation.set_period(100.0)
        assert deadline.at == pytest.approx(98.0)
        await asyncio.sleep(50)
        deadline.restart()
        assert deadline.at == pytest.approx(50 + 82.0)

    virtualtime.run(body())


def test_no_period_below_the_validations_floor_is_obeyed() -> None:
    invalidation.set_period(0.001)
    assert invalidation.period() == invalidation.MINIMUM_PERIOD


def test_a_timeout_of_the_block_itself_is_not_an_invalidation() -> None:
    async def body() -> None:
        deadline = invalidation.Deadline(draw=lambda: 0.0)
        deadline.restart()
        due: asyncio.Timeout | None = None
        with pytest.raises(TimeoutError):
            async with invalidation.expiring(deadline) as due:
                raise TimeoutError("a read of the block's own")
        assert due is not None
        assert not due.expired()
        with pytest.raises(TimeoutError):
            async with invalidation.expiring(deadline) as due:
                await asyncio.sleep(2 * invalidation.DEFAULT_PERIOD)
        assert due.expired()

    virtualtime.run(body())


def test_a_shorter_period_moves_a_waiting_deadline() -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        deadline = invalidation.Deadline(draw=lambda: 0.0)
        deadline.restart()

        async def shorten() -> None:
            await asyncio.sleep(10)
            invalidation.set_period(30.0)

        task = asyncio.create_task(shorten())
        with pytest.raises(TimeoutError):
            async with invalidation.expiring(deadline):
                await asyncio.sleep(2 * invalidation.DEFAULT_PERIOD)
        assert loop.time() == pytest.approx(30.0)
        await task

    virtualtime.run(body())


# -- informers -------------------------------------------------------------------------------------------------


def obj(name: str, rv: int) -> JSON:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


class SilentKube:
    """An apiserver whose watches never deliver anything: every change after a list is one the watch missed."""

    def __init__(self, objects: list[JSON]) -> None:
        self.objects = objects
        self.lists: list[float] = []
        self.listed = asyncio.Condition()

    async def list(self, path: str, **_: Any) -> JSON:
        self.lists.append(asyncio.get_running_loop().time())
        async with self.listed:
            self.listed.notify_all()
        return {"metadata": {"resourceVersion": "100"}, "items": [dict(o) for o in self.objects]}

    async def until_listed(self, times: int) -> None:
        async with self.listed:
            await self.listed.wait_for(lambda: len(self.lists) >= times)

    async def watch(self, path: str, **_: Any) -> Any:
        await asyncio.Event().wait()
        yield {}  # never reached: the watch is silent


def test_an_informer_relists_each_period_and_reports_what_its_watch_missed() -> None:
    async def body() -> None:
        invalidation.set_period(10.0)
        kube = SilentKube([obj("kept", 1), obj("deleted", 2)])
        changed: list[str] = []
        informer = Informer(kube, "/x", on_change=changed.append, name="test-missed")  # type: ignore[arg-type]
        before = _count("test-missed")
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        changed.clear()
        kube.objects = [obj("kept", 1), obj("created", 3)]  # written while the watch heard nothing
        await kube.until_listed(2)
        await asyncio.sleep(0.1)  # virtual: the list's diff reported
        assert 8.0 <= kube.lists[1] - kube.lists[0] <= 10.0, "relisted outside the last fifth of the period"
        assert sorted(changed) == ["created", "deleted"], "the relist reports what the watch missed, only that"
        assert sorted(informer.items) == ["created", "kept"]
        assert _count("test-missed") == before + 1
        await kube.until_listed(4)
        gaps = [b - a for a, b in zip(kube.lists, kube.lists[1:], strict=False)]
        assert all(8.0 <= gap <= 10.0 for gap in gaps), gaps
        assert not informer.failing, "an invalidation is not a failure: the process still vouches for its caches"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    virtualtime.run(body())


def test_a_new_period_reaches_an_informer_already_watching() -> None:
    async def body() -> None:
        kube = SilentKube([obj("a", 1)])
        informer = Informer(kube, "/x", name="test-period")  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        await asyncio.sleep(60)
        assert len(kube.lists) == 1  # the default period: a day
        invalidation.set_period(5.0)  # a configuration arrives: 60 s already past, due at once
        await asyncio.sleep(1)
        assert len(kube.lists) == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    virtualtime.run(body())


# -- subscribers -----------------------------------------------------------------------------------------------


class Counting(Collector):
    """Admission's side, also keeping how many tenants each state handed to it held."""

    def __init__(self) -> None:
        super().__init__()
        self.accepts: list[int] = []

    def accept(self, views: Mapping[str, TenantView], snapshot: Snapshot) -> None:
        super().accept(views, snapshot)
        self.accepts.append(len(views))


async def test_a_subscriber_retakes_the_whole_snapshot_each_period_and_stays_ready() -> None:
    views = [TenantView(name=f"t{i}", uid=f"u{i}", namespace_quota=1) for i in range(5)]
    hub = SnapshotHub("tenants")
    hub.publish_items(TENANCY_KIND, TenancySnapshot(tenants=views).items(), envelope="tenants")
    collector = Counting()
    before = _count(f"snapshot:{TENANCY_KIND}")
    live = _live(hub, collector)
    subscriber = await anext(live)
    try:
        await until(lambda: collector.accepts == [5])
        assert collector.parsed == 5
        invalidation.set_period(1.0)
        # The same revision again, handed over whole and parsed anew: the consumer rebuilds from a fresh copy.
        await until(lambda: len(collector.accepts) >= 2)
        assert collector.accepts[:2] == [5, 5]
        assert collector.parsed >= 10
        assert subscriber.ready
        assert _count(f"snapshot:{TENANCY_KIND}") >= before + 1
        assert subscriber.state.reconnects == 0, "an invalidation is not a lost stream"
    finally:
        await live.aclose()  # type: ignore[attr-defined]


def test_a_configuration_snapshot_sets_the_processs_period() -> None:
    taken: list[int] = []
    accept = _following_invalidation(lambda snapshot: taken.append(snapshot.revision))
    config = effective("default", 1, ServiceConfigurationSpec.model_validate({"cacheInvalidation": "2m30s"}))
    accept(Snapshot(kind="ServiceConfiguration", revision=4, payload=config.model_dump_json(by_alias=True).encode()))
    assert taken == [4]
    assert invalidation.period() == 150.0

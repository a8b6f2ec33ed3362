"""The one controller loop (enclave_core.runtime.loops): Lease gating, when a pass comes back, backoff, metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loop_testing import DEADLINE, running, until
from prometheus_client import CollectorRegistry, Counter, Histogram

from enclave_core.runtime.loops import DONE, ControllerLoop, LoopMetrics, Result


def _metrics() -> tuple[LoopMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = LoopMetrics(
        passes=Counter("t_reconciles_total", "passes", ["result"], registry=registry),
        duration=Histogram("t_reconcile_seconds", "seconds", registry=registry),
        publishes=Counter("t_snapshots_total", "snapshots", ["result"], registry=registry),
    )
    return metrics, registry


class Recorder:
    """A reconcile that records when it ran and answers from a script (a Result, or an exception to raise)."""

    def __init__(self, *script: Result | Exception) -> None:
        self.script = list(script)
        self.times: list[float] = []
        self.ran = asyncio.Event()
        self.reconciled_before: list[bool] = []
        self.loop: ControllerLoop | None = None

    async def __call__(self) -> Result:
        self.times.append(time.monotonic())
        if self.loop is not None:
            self.reconciled_before.append(self.loop.reconciled.is_set())
        self.ran.set()
        answer = self.script.pop(0) if self.script else DONE
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def passes(self, count: int) -> None:
        await until(lambda: len(self.times) >= count, self.ran)


def _loop(reconcile: Callable[[], Awaitable[Result]], metrics: LoopMetrics, **options: Any) -> ControllerLoop:
    loop = ControllerLoop("test", informers=[], reconcile=reconcile, resync_seconds=3600, metrics=metrics, **options)
    if isinstance(reconcile, Recorder):
        reconcile.loop = loop
    return loop


async def test_a_follower_does_not_reconcile_and_is_reconciled_the_lease_holder_reconciles_on_change() -> None:
    metrics, registry = _metrics()
    reconcile = Recorder()
    async with running(_loop(reconcile, metrics)) as loop:
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
        assert loop.synced.is_set()
        assert reconcile.times == []  # not leading: nothing written, and ready all the same
        loop.set_leading(True)
        await reconcile.passes(1)
        loop.changed("a/b")
        await reconcile.passes(2)
    assert registry.get_sample_value("t_reconciles_total", {"result": "ok"}) == 2
    assert registry.get_sample_value("t_reconcile_seconds_count") == 2


async def test_an_every_replica_reconcile_runs_without_the_lease_and_reads_leading() -> None:
    metrics, _ = _metrics()
    seen: list[bool] = []
    ran = asyncio.Event()
    loop: ControllerLoop | None = None

    async def reconcile() -> Result:
        assert loop is not None
        seen.append(loop.leading)
        ran.set()
        return DONE

    loop = _loop(reconcile, metrics, leader_only=False)
    async with running(loop):
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
        loop.set_leading(True)
        await until(lambda: len(seen) >= 2, ran)
    assert seen[:2] == [False, True]


async def test_requeue_after_brings_a_pass_back_without_a_change() -> None:
    metrics, _ = _metrics()
    reconcile = Recorder(Result(requeue_after=0.05), DONE)
    loop = _loop(reconcile, metrics)
    loop.set_leading(True)
    async with running(loop):
        await reconcile.passes(2)
    assert reconcile.times[1] - reconcile.times[0] >= 0.05


async def test_requeue_at_once_runs_rounds_and_reconciled_waits_for_the_last() -> None:
    metrics, _ = _metrics()
    reconcile = Recorder(Result(requeue_after=0), Result(requeue_after=0), DONE)
    loop = _loop(reconcile, metrics)
    loop.set_leading(True)
    async with running(loop):
        await reconcile.passes(3)
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
    assert reconcile.reconciled_before == [False, False, False]


async def test_a_failed_pass_backs_off_doubling_and_a_success_resets_the_backoff() -> None:
    metrics, registry = _metrics()
    boom = RuntimeError("apiserver unreachable")
    reconcile = Recorder(boom, boom, Result(requeue_after=0.01), boom, DONE)
    loop = _loop(reconcile, metrics)
    loop.set_leading(True)
    async with running(loop):
        await reconcile.passes(5)
    gaps = [b - a for a, b in zip(reconcile.times, reconcile.times[1:], strict=False)]
    assert gaps[0] >= 0.5  # 0.5 s, then doubled
    assert gaps[1] >= 1.0
    assert gaps[3] < 1.0  # the success in between reset it to 0.5 s
    assert gaps[3] >= 0.5
    assert registry.get_sample_value("t_reconciles_total", {"result": "error"}) == 3
    assert registry.get_sample_value("t_reconciles_total", {"result": "ok"}) == 2


async def test_a_change_ends_a_backoff_early() -> None:
    metrics, _ = _metrics()
    reconcile = Recorder(RuntimeError("conflict"), DONE)
    loop = _loop(reconcile, metrics)
    loop.set_leading(True)
    async with running(loop):
        await reconcile.passes(1)
        loop.changed()
        await reconcile.passes(2)
    assert reconcile.times[1] - reconcile.times[0] < 0.5


async def test_publish_runs_on_every_replica_and_a_failed_compile_keeps_the_stream() -> None:
    metrics, registry = _metrics()
    compiled: list[int] = []
    progress = asyncio.Event()

    def publish() -> None:
        compiled.append(len(compiled))
        progress.set()
        if len(compiled) == 2:
            raise ValueError("a bad object")

    loop = _loop(Recorder(), metrics, publish=publish)
    async with running(loop):
        await asyncio.wait_for(loop.published.wait(), DEADLINE)
        loop.changed()
        loop.changed()
        await until(lambda: len(compiled) >= 2, progress)
        loop.changed()
        await until(lambda: len(compiled) >= 3, progress)
    assert registry.get_sample_value("t_snapshots_total", {"result": "error"}) == 1
    assert registry.get_sample_value("t_snapshots_total", {"result": "ok"}) == 2


async def test_nothing_runs_before_the_gate_and_synced_waits_for_synced_after() -> None:
    metrics, _ = _metrics()
    discovered, configured = asyncio.Event(), asyncio.Event()
    reconcile = Recorder()
    loop = _loop(reconcile, metrics, gate=configured, synced_after=[discovered])
    loop.set_leading(True)
    async with running(loop):
        for _ in range(10):
            await asyncio.sleep(0)
        assert not loop.synced.is_set()
        discovered.set()
        await asyncio.wait_for(loop.synced.wait(), DEADLINE)
        for _ in range(10):
            await asyncio.sleep(0)
        assert reconcile.times == []
        assert not loop.reconciled.is_set()
        configured.set()
        await reconcile.passes(1)

"""The per-key option of the controller loop (enclave_core.runtime.keyed): dedupe, one reconcile per key at a time,
bounded workers in key order, per-key timers and backoff, Lease gating."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
from loop_testing import until
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from enclave_core.runtime.keyed import KeyedQueue
from enclave_core.runtime.loops import DONE, LoopMetrics, Result


class Keys:
    """A per-key reconcile that records what ran and answers from a script per key (a Result, or an exception);
    a key in ``hold`` waits until released."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float]] = []
        self.script: dict[str, list[Result | Exception]] = {}
        self.hold: dict[str, asyncio.Event] = {}
        self.running: set[str] = set()
        self.most_at_once = 0
        self.overlapped: list[str] = []
        self.ran = asyncio.Event()

    async def __call__(self, key: str) -> Result:
        if key in self.running:
            self.overlapped.append(key)
        self.running.add(key)
        self.most_at_once = max(self.most_at_once, len(self.running))
        self.runs.append((key, asyncio.get_running_loop().time()))
        self.ran.set()
        try:
            if key in self.hold:
                await self.hold[key].wait()
            answers = self.script.get(key) or []
            answer = answers.pop(0) if answers else DONE
            if isinstance(answer, Exception):
                raise answer
            return answer
        finally:
            self.running.discard(key)

    def count(self, key: str) -> int:
        return sum(1 for ran, _ in self.runs if ran == key)

    def times(self, key: str) -> list[float]:
        return [at for ran, at in self.runs if ran == key]

    async def until(self, done: Callable[[], bool]) -> None:
        await until(done, self.ran)


async def _turns(count: int = 20) -> None:
    """Let every ready task run a few times (no clock involved): what would have started has."""
    for _ in range(count):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def working(
    queue: KeyedQueue, may_work: Callable[[], bool] = lambda: True, metrics: LoopMetrics | None = None
) -> AsyncIterator[KeyedQueue]:
    task = asyncio.create_task(queue.run(may_work, metrics))
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_key_named_by_many_events_is_reconciled_once() -> None:
    keys = Keys()
    queue = KeyedQueue("t", keys, workers=2)
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    async with working(queue):
        await keys.until(lambda: keys.count("a") > 0 and keys.count("b") > 0)
        await _turns()
    assert keys.count("a") == 1 == keys.count("b")


async def test_a_key_added_during_its_reconcile_runs_again_after_it_never_beside_it() -> None:
    keys = Keys()
    keys.hold["a"] = asyncio.Event()
    queue = KeyedQueue("t", keys, workers=4)
    async with working(queue):
        queue.add("a")
        await keys.until(lambda: keys.count("a") == 1)
        queue.add("a")  # the change may have come after the reconcile read the caches
        queue.add("a")
        await _turns()
        assert keys.count("a") == 1
        assert "a" not in queue
        keys.hold["a"].set()
        await keys.until(lambda: keys.count("a") == 2)
        await _turns()
    assert keys.count("a") == 2
    assert keys.overlapped == []


async def test_workers_are_bounded_and_take_the_smallest_key_first() -> None:
    keys = Keys()
    release = asyncio.Event()
    for name in "edcba":
        keys.hold[name] = release
    registry = CollectorRegistry()
    depth = Gauge("t_queue_depth", "keys waiting", registry=registry)
    queue = KeyedQueue("t", keys, workers=2, depth=depth)
    for name in "edcba":
        queue.add(name)
    assert registry.get_sample_value("t_queue_depth") == 5
    async with working(queue):
        await keys.until(lambda: len(keys.runs) == 2)
        await _turns()
        assert [key for key, _ in keys.runs] == ["a", "b"]
        assert registry.get_sample_value("t_queue_depth") == 3
        release.set()
        await keys.until(lambda: len(keys.runs) == 5)
    assert [key for key, _ in keys.runs] == ["a", "b", "c", "d", "e"]
    assert keys.most_at_once == 2


async def test_a_failing_key_backs_off_alone_and_a_success_resets_it() -> None:
    keys = Keys()
    keys.script["bad"] = [RuntimeError("one"), RuntimeError("two"), RuntimeError("three"), DONE]
    registry = CollectorRegistry()
    metrics = LoopMetrics(
        passes=Counter("t_reconciles_total", "reconciles", ["result"], registry=registry),
        duration=Histogram("t_reconcile_seconds", "seconds", registry=registry),
    )
    queue = KeyedQueue("t", keys, workers=1, backoff_first=0.05, backoff_max=0.15)
    async with working(queue, metrics=metrics):
        queue.add("bad")
        queue.add("good")
        await keys.until(lambda: keys.count("bad") == 4)
        await _turns()
        assert keys.count("good") == 1  # not held up by the other key's failures
        assert queue.timer("bad") is None  # the success said nothing is due
    bad = keys.times("bad")
    gaps = [later - earlier for earlier, later in itertools.pairwise(bad)]
    assert gaps[0] >= 0.05
    assert gaps[1] >= 0.1
    assert gaps[2] >= 0.15
    assert registry.get_sample_value("t_reconciles_total", {"result": "error"}) == 3
    assert registry.get_sample_value("t_reconciles_total", {"result": "ok"}) == 2
    assert registry.get_sample_value("t_reconcile_seconds_count") == 5
    # The backoff starts again from the first after a success.
    keys.script["bad"] = [RuntimeError("again"), DONE]
    async with working(queue):
        queue.add("bad")
        await keys.until(lambda: keys.count("bad") == 6)
    first, second = keys.times("bad")[-2:]
    assert 0.05 <= second - first < 0.1 + 1.0  # the first backoff again (loose above: a loaded host)


async def test_a_result_sets_the_keys_timer_requeues_it_or_cancels_it() -> None:
    keys = Keys()
    keys.script["later"] = [Result(requeue_after=0.05), DONE]
    keys.script["now"] = [Result(requeue_after=0), DONE]
    keys.script["never"] = [Result(requeue_after=3600), DONE]
    queue = KeyedQueue("t", keys, workers=2)
    async with working(queue):
        for name in ("later", "now", "never"):
            queue.add(name)
        await keys.until(lambda: keys.count("later") == 2 and keys.count("now") == 2)
        timer = queue.timer("never")
        assert timer is not None
        assert timer > 3000
        queue.add("never")  # a change: reconciled again, and its answer (DONE) cancels the hour's timer
        await keys.until(lambda: keys.count("never") == 2)
        await _turns()
        assert queue.timer("never") is None
    later = keys.times("later")
    assert later[1] - later[0] >= 0.05


async def test_keys_wait_for_the_lease_and_are_worked_once_it_is_held() -> None:
    keys = Keys()
    leading = False
    queue = KeyedQueue("t", keys, workers=2)
    async with working(queue, lambda: leading):
        queue.add("a")
        queue.add("b")
        await _turns()
        assert keys.runs == []
        assert len(queue) == 2  # kept: the replica that gains the Lease starts from what changed
        leading = True
        queue.wake()
        await keys.until(lambda: len(keys.runs) == 2)
        leading = False
        queue.add("c")
        await _turns()
        assert keys.count("c") == 0


async def test_stopping_cancels_every_timer() -> None:
    keys = Keys()
    keys.script["a"] = [Result(requeue_after=3600)]
    queue = KeyedQueue("t", keys, workers=1)
    async with working(queue):
        queue.add("a")
        await keys.until(lambda: keys.count("a") == 1)
        await _turns()
        assert queue.timer("a") is not None
    assert queue.timer("a") is None


def test_a_queue_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        KeyedQueue("t", Keys(), workers=0)

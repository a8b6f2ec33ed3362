"""The batched-rounds option of the controller loop (``ControllerLoop(hints=...)``, enclave-tenants' shape): a round
only when the hints name work, rounds back to back while work is left, a resync on a fixed period that marks
everything, a failed round's backoff run out, a follower that keeps nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loop_testing import DEADLINE, running, until
from prometheus_client import CollectorRegistry, Counter, Histogram

from enclave_core.runtime.loops import DONE, ControllerLoop, LoopMetrics, Result


class Work:
    """Hints (a count of keys left) and a reconcile that takes ``batch`` of them per round."""

    def __init__(self, batch: int = 1) -> None:
        self.left = 0
        self.batch = batch
        self.rounds: list[float] = []
        self.everything = 0
        self.forgotten = 0
        self.fail: list[Exception] = []
        self.answer: Result | None = None
        """Returned by a round that leaves nothing (default: DONE)."""
        self.loop: ControllerLoop | None = None
        self.reconciled_before: list[bool] = []
        self.ran = asyncio.Event()

    def has_work(self) -> bool:
        return self.left > 0

    def look_at_everything(self) -> None:
        self.everything += 1
        self.left = max(self.left, 1)

    def forget_work(self) -> None:
        self.forgotten += 1
        self.left = 0

    async def reconcile(self) -> Result:
        self.rounds.append(time.monotonic())
        if self.loop is not None:
            self.reconciled_before.append(self.loop.reconciled.is_set())
        self.ran.set()
        if self.fail:
            raise self.fail.pop(0)
        self.left = max(0, self.left - self.batch)
        if self.left:
            return Result(requeue_after=0)
        return self.answer or DONE

    async def until(self, done: Callable[[], bool]) -> None:
        await until(done, self.ran)


def _loop(work: Work, resync: float = 3600) -> tuple[ControllerLoop, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = LoopMetrics(
        passes=Counter("t_reconciles_total", "passes", ["result"], registry=registry),
        duration=Histogram("t_reconcile_seconds", "seconds", registry=registry),
    )
    loop = ControllerLoop(
        "test", informers=[], reconcile=work.reconcile, resync_seconds=resync, metrics=metrics, hints=work
    )
    work.loop = loop
    return loop, registry


async def _turns(count: int = 50) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_round_runs_only_when_the_hints_name_work_and_an_idle_wake_counts_no_pass() -> None:
    work = Work()
    work.left = 1
    loop, registry = _loop(work)
    loop.set_leading(True)
    async with running(loop):
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
        assert len(work.rounds) == 1
        for _ in range(5):
            loop.again()  # wakes with nothing dirty: an informer event the last round already took
            await _turns()
        assert len(work.rounds) == 1
        assert registry.get_sample_value("t_reconciles_total", {"result": "ok"}) == 1
        work.left = 1
        loop.again()
        await work.until(lambda: len(work.rounds) == 2)


async def test_rounds_run_back_to_back_while_work_is_left_and_reconciled_waits_for_the_last() -> None:
    work = Work(batch=2)
    work.left = 7
    loop, _ = _loop(work)
    loop.set_leading(True)
    async with running(loop):
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
    assert len(work.rounds) == 4  # 2 + 2 + 2 + 1, with no change between them
    assert work.reconciled_before == [False, False, False, False]


async def test_the_resync_marks_everything_on_its_period_even_under_a_stream_of_changes() -> None:
    work = Work()
    loop, _ = _loop(work, resync=0.2)
    loop.set_leading(True)
    async with running(loop):
        started = time.monotonic()
        while time.monotonic() - started < 0.7:  # a change every 20 ms, each round finding nothing
            loop.again()
            await asyncio.sleep(0.02)
        await work.until(lambda: work.everything >= 2)
    assert work.everything >= 2
    assert len(work.rounds) >= work.everything  # each resync's look at everything was a round


async def test_a_failed_round_marks_everything_and_waits_out_its_backoff_through_changes() -> None:
    work = Work()
    work.fail = [RuntimeError("the API went away")]
    work.left = 1
    loop, registry = _loop(work)
    loop.set_leading(True)
    async with running(loop):
        await work.until(lambda: len(work.rounds) == 1)
        for _ in range(5):
            loop.again()  # changes during the backoff do not cut it short
            await _turns()
        assert len(work.rounds) == 1
        await work.until(lambda: len(work.rounds) == 2)
    assert work.rounds[1] - work.rounds[0] >= 0.5  # the first backoff
    assert work.everything == 1
    assert registry.get_sample_value("t_reconciles_total", {"result": "error"}) == 1
    assert registry.get_sample_value("t_reconciles_total", {"result": "ok"}) == 1


async def test_a_follower_keeps_no_hints_and_runs_no_round() -> None:
    work = Work()
    work.left = 3
    loop, _ = _loop(work)
    async with running(loop):
        await asyncio.wait_for(loop.reconciled.wait(), DEADLINE)
        assert work.rounds == []
        assert work.left == 0
        assert work.forgotten >= 1
        work.left = 2
        loop.set_leading(True)
        await asyncio.wait_for(work.until(lambda: work.left == 0), DEADLINE)
    assert len(work.rounds) == 2


async def test_a_due_time_survives_idle_wakes() -> None:
    work = Work()
    work.left = 1
    work.answer = Result(requeue_after=0.3)  # e.g. a failed write to retry, a reservation that expires
    loop, _ = _loop(work)
    loop.set_leading(True)
    async with running(loop):
        await work.until(lambda: len(work.rounds) == 1)
        work.answer = None
        for _ in range(3):
            loop.again()  # no work: no round, and the due time is kept
            await _turns()
        assert len(work.rounds) == 1
        await work.until(lambda: len(work.rounds) == 2)
    assert work.rounds[1] - work.rounds[0] >= 0.3

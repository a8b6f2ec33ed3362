"""The per-key option of the controller loop: a queue of keys, each reconciled on its own.

Where one pass over everything is too coarse (enclave-replication: every replication object acts as its own
identity, reads its own sources and has its own ``resyncPeriod``), the loop's write side is a queue of keys
worked by a bounded number of workers instead of one pass, with the same contract per key:
``reconcile(key) -> Result``. What the queue guarantees:

- **dedupe**: a key waiting is queued once, however many events name it;
- **one at a time per key**: a key added while it is being reconciled waits until that reconcile ends and then
  runs again (the change may have come after the reconcile read the caches), never in parallel with itself;
- **bounded workers**: at most ``workers`` reconciles at once, the smallest key first (deterministic: the same
  order on every replica and after a restart);
- **when to come back, per key**: ``Result(requeue_after=s)`` sets the key's timer to ``s`` seconds (replacing
  the one before), ``Result(0)`` queues it again at once, ``Result(None)`` cancels its timer (nothing due but the
  next change);
- **per-key backoff**: a reconcile that raises comes back after its key's backoff, doubling per failure of that
  key up to ``backoff_max``, reset by its next success; one failing key never slows the others;
- **Lease gating**: workers take keys only while ``may_work()`` (the loop's ``leading``); keys keep being queued
  meanwhile, so a replica that gains the Lease starts from what changed.

The loop (:class:`enclave_core.runtime.loops.ControllerLoop`) owns the queue as its write side; a controller
feeds it from its informers' handlers with :meth:`KeyedQueue.add`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import Gauge

from enclave_core.runtime.loops import BACKOFF_FIRST, BACKOFF_MAX, LoopMetrics, Result

log = logging.getLogger(__name__)

KeyReconcile = Callable[[str], Awaitable[Result]]


class KeyedQueue:
    """Keys to reconcile, their timers and their backoff (see the module docstring)."""

    def __init__(
        self,
        name: str,
        reconcile: KeyReconcile,
        *,
        workers: int,
        depth: Gauge | None = None,
        backoff_first: float = BACKOFF_FIRST,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        """``depth``: a gauge of the keys waiting. The loop's :class:`LoopMetrics` time and count each reconcile
        (:meth:`run`)."""
        if workers < 1:
            raise ValueError("a keyed queue needs at least one worker")
        self.name = name
        self._reconcile = reconcile
        self.workers = workers
        self._metrics: LoopMetrics | None = None
        self._depth = depth
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._backoff: dict[str, float] = {}
        """Key -> the wait before its next retry, for keys whose last reconcile raised."""
        self._wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, key: str) -> bool:
        return key in self._queued

    def add(self, key: str) -> None:
        """Queue ``key`` (an informer's handler): once, and after its running reconcile if it has one."""
        if key in self._busy:
            self._again.add(key)
        else:
            self._queued.add(key)
        self._count()
        self._wakeup.set()

    def add_after(self, key: str, seconds: float) -> None:
        """Queue ``key`` in ``seconds``, replacing the timer it had."""
        self.cancel(key)
        self._timers[key] = asyncio.get_running_loop().call_later(seconds, self._due, key)

    def cancel(self, key: str) -> None:
        """Drop ``key``'s timer (it stays queued if it is)."""
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def timer(self, key: str) -> float | None:
        """Seconds until ``key``'s timer fires (None: no timer)."""
        handle = self._timers.get(key)
        return None if handle is None else max(0.0, handle.when() - asyncio.get_running_loop().time())

    def wake(self) -> None:
        """Let the workers look at ``may_work`` again (the Lease changed)."""
        self._wakeup.set()

    def close(self) -> None:
        """Cancel every timer (the loop stops)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    async def run(self, may_work: Callable[[], bool], metrics: LoopMetrics | None = None) -> None:
        """The workers, until cancelled; they take keys only while ``may_work()``, and count into ``metrics``."""
        self._metrics = metrics
        try:
            await asyncio.gather(*(self._worker(may_work) for _ in range(self.workers)))
        finally:
            self.close()

    def _due(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _count(self) -> None:
        if self._depth is not None:
            self._depth.set(len(self._queued))

    async def _worker(self, may_work: Callable[[], bool]) -> None:
        while True:
            while not self._queued or not may_work():
                self._wakeup.clear()
                await self._wakeup.wait()
            key = min(self._queued)
            self._queued.discard(key)
            self._count()
            self._busy.add(key)
            try:
                await self._one(key)
            finally:
                self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)

    async def _one(self, key: str) -> None:
        """One reconcile of ``key``, timed and counted; its Result or its failure sets when it comes back."""
        started = time.monotonic()
        try:
            result = await self._reconcile(key)
        except Exception:
            log.exception("reconcile failed", extra={"controller": self.name, "object": key})
            if self._metrics is not None and self._metrics.passes is not None:
                self._metrics.passes.labels("error").inc()
            wait = self._backoff.get(key, self.backoff_first)
            self._backoff[key] = min(self.backoff_max, wait * 2)
            self.add_after(key, wait)
            return
        finally:
            if self._metrics is not None:
                self._metrics.duration.observe(time.monotonic() - started)
        if self._metrics is not None and self._metrics.passes is not None:
            self._metrics.passes.labels("ok").inc()
        self._backoff.pop(key, None)
        if result.requeue_after is None:
            self.cancel(key)
        elif result.requeue_after <= 0:
            self.cancel(key)
            self._again.add(key)  # queued again as the worker lets go of it
        else:
            self.add_after(key, result.requeue_after)

"""The two loops of a controller that publishes a snapshot and writes on the Lease holder.

The *publish* loop recompiles the snapshot on every change and publishes it at once; it never waits on the
API, so admission sees a change within milliseconds even while writes are slow. The *write* loop, active only
while ``leading``, converges the cluster on the same plan, after every change and at least every
``resync_seconds`` (a safety net for a missed event); a failed pass is retried with backoff (0.5 s to 30 s),
and a pass that changes something triggers the next through the watch events its writes cause. Both start
once every informer has listed and ``gate`` (e.g. "the configuration arrived") is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from enclave_core.kube.informer import Informer

log = logging.getLogger(__name__)


class ControllerLoops:
    """Publish on every replica, write on the leader; ``changed()`` wakes both."""

    def __init__(
        self,
        name: str,
        *,
        informers: Sequence[Informer],
        publish: Callable[[], Any],
        reconcile: Callable[[], Awaitable[None]],
        resync_seconds: float,
        passes: Counter,
        publishes: Counter,
        duration: Histogram,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self.informers = list(informers)
        self._publish = publish
        self._reconcile = reconcile
        self.resync_seconds = resync_seconds
        self._passes = passes
        self._publishes = publishes
        self._duration = duration
        self.gate = gate
        self.leading = False
        self.synced = asyncio.Event()
        self.published = asyncio.Event()
        self.reconciled = asyncio.Event()
        self._publish_trigger = asyncio.Event()
        self._write_trigger = asyncio.Event()

    def changed(self, _key: str = "") -> None:
        self._publish_trigger.set()
        self._write_trigger.set()

    def again(self) -> None:
        """Ask for another write pass (something was left to do, e.g. a conflict to re-read)."""
        self._write_trigger.set()

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.changed()

    async def run(self) -> None:
        tasks = [asyncio.create_task(informer.run(), name=informer.name) for informer in self.informers]
        try:
            await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
            self.synced.set()
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.gather(self._publish_loop(), self._write_loop())
        finally:
            for task in tasks:
                task.cancel()

    async def _publish_loop(self) -> None:
        while True:
            self._publish_trigger.clear()
            try:
                self._publish()
                self._publishes.labels("ok").inc()
                self.published.set()
            except Exception:  # never let a bad object stop the stream; the last good snapshot stays
                log.exception("compiling the snapshot failed", extra={"controller": self.name})
                self._publishes.labels("error").inc()
            await self._publish_trigger.wait()

    async def _write_loop(self) -> None:
        backoff = 0.5
        while True:
            self._write_trigger.clear()
            wait = self.resync_seconds
            if self.leading:
                started = time.monotonic()
                try:
                    await self._reconcile()
                    self._passes.labels("ok").inc()
                    backoff = 0.5
                except Exception:
                    log.exception("reconcile failed", extra={"controller": self.name})
                    self._passes.labels("error").inc()
                    wait, backoff = backoff, min(30.0, backoff * 2)
                self._duration.observe(time.monotonic() - started)
            self.reconciled.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._write_trigger.wait(), timeout=wait)

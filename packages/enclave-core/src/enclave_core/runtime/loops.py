"""The one controller loop: a reconcile says when to come back, the runtime owns everything around it.

**The contract.** A controller writes ``async def reconcile() -> Result`` and nothing else of the loop. It reads
the informers' caches, converges the cluster on what they say, and returns :class:`Result`: ``requeue_after``
seconds when something time-driven is due (a certificate to renew, a reservation that expires, a conflict to
re-read), ``0`` when work is left that a bounded pass did not get to, ``None`` when nothing is due but the next
change. Raising means the pass failed: it is retried with backoff (0.5 s doubling to 30 s, reset by a pass that
succeeds; a change wakes it earlier). Problems a user must fix are not errors: the reconcile reports them in
``status.conditions`` and an Event and returns normally, so a bad object never becomes a crash loop.

*Why a small Result rather than a float or a bool.* The five loops this replaces returned a float (seconds,
where "nothing due" was spelt as the resync period, so every reconcile knew the loop's resync), a bool ("run
again soon", the delay hidden in a timer the controller set), or nothing (a timer again). One named field says
which at the call site (``Result(requeue_after=5.0)``), ``None`` keeps the resync the loop's business, and a
per-key reconcile (replication) returns the same type for its key. It is controller-runtime's
``Result{RequeueAfter}`` with the error as an exception, as Python has them.

**What the runtime owns** (:class:`ControllerLoop`): starting the informers and waiting for their first list
(``synced``), an optional ``gate`` (e.g. "the configuration arrived"), the *publish* loop (when the controller
publishes a snapshot: recompiled on every change, on every replica, never waiting on the API, so admission sees
a change within milliseconds even while writes are slow), the *write* loop (after every change, at least every
``resync_seconds`` as a safety net for a missed event, and when a Result asks), the backoff, the metrics
(:class:`LoopMetrics`: passes by result, pass duration, snapshots by result) and the Lease gating: a
``leader_only`` reconcile runs only on the Lease holder; one that also publishes or counts on every replica
(``leader_only=False``) runs everywhere and reads :attr:`ControllerLoop.leading` before it writes. A pass whose
writes change something is followed by the next through the watch events those writes cause.

**Options of the same loop, not twins of it.** Batched rounds (enclave-tenants: a bounded round, then another
at once while work is left) are ``Result(requeue_after=0)``: the loop yields to the event loop (the watches and
the publish loop run between rounds) and goes again; ``reconciled`` opens only after a pass that left nothing
immediate. A per-key queue (enclave-replication: ``reconcile(key) -> Result`` with workers, per-key timers and
per-key backoff) drives the same pass accounting (:meth:`ControllerLoop._pass`) from a queue instead of a
trigger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram

from enclave_core.kube.informer import Informer

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


@dataclass(frozen=True, slots=True)
class Result:
    """When a reconcile wants to run again regardless of changes: ``None`` not before the next change (or the
    resync), ``0`` at once (work left over), else within ``requeue_after`` seconds."""

    requeue_after: float | None = None


DONE = Result()
"""Nothing due until the next change or resync."""


@dataclass(frozen=True)
class LoopMetrics:
    """The metrics every controller loop exports, under one naming scheme (:meth:`standard`)."""

    passes: Counter
    """Passes of the write loop, by ``result`` (``ok``, ``error``)."""
    duration: Histogram
    """Seconds per pass."""
    publishes: Counter | None = None
    """Snapshots compiled, by ``result``; None for a controller without a publish loop."""

    @classmethod
    def standard(cls, component: str, *, publishes: bool = False, what: str = "snapshots") -> LoopMetrics:
        """``enclave_<component>_reconciles_total{result}``, ``enclave_<component>_reconcile_seconds`` and, with
        ``publishes``, ``enclave_<component>_snapshots_total{result}``. Call once per process (module level):
        the default registry refuses a second metric of a name."""
        return cls(
            passes=Counter(
                f"enclave_{component}_reconciles_total", f"Passes of the {component} write loop", ["result"]
            ),
            duration=Histogram(
                f"enclave_{component}_reconcile_seconds", f"Duration of one {component} write-loop pass"
            ),
            publishes=(
                Counter(f"enclave_{component}_snapshots_total", f"{what} compiled by {component}", ["result"])
                if publishes
                else None
            ),
        )


class ControllerLoop:
    """Informers, a publish loop on every replica and a write loop gated on the Lease; ``changed()`` wakes both.

    ``synced``, ``published`` and ``reconciled`` are the events the readiness gates follow
    (:data:`enclave_core.runtime.grpc.GATE_EVENTS`); a controller exposes them as its own attributes.
    """

    def __init__(
        self,
        name: str,
        *,
        informers: Sequence[Informer],
        reconcile: Callable[[], Awaitable[Result]],
        resync_seconds: float,
        metrics: LoopMetrics,
        publish: Callable[[], Any] | None = None,
        gate: asyncio.Event | None = None,
        leader_only: bool = True,
        synced_after: Sequence[asyncio.Event] = (),
        settle_seconds: float = 0.0,
    ) -> None:
        """``synced_after``: events that must be set too, after the informers listed, before ``synced`` (e.g. API
        discovery). ``settle_seconds``: after each wake, how long to let a burst of watch events land before the
        pass that handles them all."""
        self.name = name
        self.informers = list(informers)
        self._publish = publish
        self._reconcile = reconcile
        self.resync_seconds = resync_seconds
        self.metrics = metrics
        self.gate = gate
        self.leader_only = leader_only
        self._synced_after = list(synced_after)
        self.settle_seconds = settle_seconds
        self.leading = False
        self.synced = asyncio.Event()
        self.published = asyncio.Event()
        self.reconciled = asyncio.Event()
        self._publish_trigger = asyncio.Event()
        self._write_trigger = asyncio.Event()
        self._backoff = BACKOFF_FIRST

    def changed(self, _key: str = "") -> None:
        """An informer's ``on_change``: recompile the snapshot and run a write pass."""
        self._publish_trigger.set()
        self._write_trigger.set()

    def again(self) -> None:
        """Ask for another write pass now (e.g. a write met a conflict and the watch brings the newer copy)."""
        self._write_trigger.set()

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.changed()

    async def run(self) -> None:
        tasks = [asyncio.create_task(informer.run(), name=informer.name) for informer in self.informers]
        try:
            await self.run_loops()
        finally:
            for task in tasks:
                task.cancel()

    async def run_loops(self) -> None:
        """The loops, once every informer has listed (``run`` starts them; a test that fills the caches by hand
        and sets their ``synced`` runs this alone)."""
        await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
        for event in self._synced_after:
            await event.wait()
        self.synced.set()
        if self.gate is not None:
            await self.gate.wait()
        loops = [self._write_loop()]
        if self._publish is not None:
            loops.append(self._publish_loop(self._publish))
        await asyncio.gather(*loops)

    async def _publish_loop(self, publish: Callable[[], Any]) -> None:
        publishes = self.metrics.publishes
        while True:
            self._publish_trigger.clear()
            try:
                publish()
                if publishes is not None:
                    publishes.labels("ok").inc()
                self.published.set()
            except Exception:  # never let a bad object stop the stream; the last good snapshot stays
                log.exception("compiling the snapshot failed", extra={"controller": self.name})
                if publishes is not None:
                    publishes.labels("error").inc()
            await self._publish_trigger.wait()

    async def _pass(self, reconcile: Callable[[], Awaitable[Result]]) -> float | None:
        """One reconcile, counted and timed; the seconds until the next pass is due (``None``: the resync).

        A failure is logged and counted, and comes back after the backoff, which doubles up to
        :data:`BACKOFF_MAX` until a pass succeeds."""
        started = time.monotonic()
        try:
            result = await reconcile()
        except Exception:
            log.exception("reconcile failed", extra={"controller": self.name})
            self.metrics.passes.labels("error").inc()
            wait, self._backoff = self._backoff, min(BACKOFF_MAX, self._backoff * 2)
            return wait
        finally:
            self.metrics.duration.observe(time.monotonic() - started)
        self.metrics.passes.labels("ok").inc()
        self._backoff = BACKOFF_FIRST
        return result.requeue_after

    async def _write_loop(self) -> None:
        while True:
            self._write_trigger.clear()
            due: float | None = None
            if self.leading or not self.leader_only:
                due = await self._pass(self._reconcile)
            if due is not None and due <= 0:
                await asyncio.sleep(0)  # work left: the watches and the publish loop run between rounds
                continue
            self.reconciled.set()
            wait = self.resync_seconds if due is None else min(due, self.resync_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._write_trigger.wait(), timeout=wait)
            if self.settle_seconds:
                await asyncio.sleep(self.settle_seconds)

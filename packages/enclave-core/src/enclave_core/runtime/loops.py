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

**Options of the same loop, not twins of it.** Three shapes of controller run on it:

- *one pass* (config, quotas, pools, globalquotas): each pass compares everything with the caches;
- *batched rounds with hints* (enclave-tenants, ``hints=``): at 10,000 namespaces a pass over everything is too
  long to run per change, so the controller keeps hints of where work is (:class:`Hints`) and each pass is a
  bounded round over some of it, returning ``Result(requeue_after=0)`` while more is left: the loop yields to the
  event loop (the watches and the publish loop run between rounds) and goes again, and ``reconciled`` opens only
  after a round that left nothing immediate. The loop runs a round only when the hints say there is work
  (an idle wake costs nothing and counts no pass), tells the hints to look at everything at each resync (on a
  fixed period, even under a stream of changes: the safety net must not depend on quiet) and after a failed
  round, drops them on a replica without the Lease, and lets a failed round's backoff run out (the retry looks
  at everything anyway; changes meanwhile are gathered into it rather than each starting a full retry);
- *a per-key queue* (enclave-replication, ``queue=``): ``reconcile(key) -> Result`` per object, worked by
  bounded workers with dedupe, per-key timers and per-key backoff (:mod:`enclave_core.runtime.keyed`); the loop
  owns it in place of the write loop, with the same informers, gate, publish loop, metrics and Lease gating.

Two more options serve large controllers: ``release_memory`` hands freed heap back to the system when a burst of
passes ends (:mod:`enclave_core.runtime.memory`), and ``publish_yield_after`` keeps a long snapshot compile from
starving the write loop (see :meth:`ControllerLoop._publish_loop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Counter, Histogram

from enclave_core.kube.informer import Informer
from enclave_core.runtime import memory

if TYPE_CHECKING:
    from enclave_core.runtime.keyed import KeyedQueue

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


class Hints(Protocol):
    """Where a controller of batched rounds keeps track of its work (``ControllerLoop(hints=...)``): hints, never
    the truth, each round comparing what they name with the caches."""

    def has_work(self) -> bool:
        """Whether a round has anything to do now (time-driven work that came due included)."""
        ...

    def look_at_everything(self) -> None:
        """The resync, or a failed round: every key is to be looked at again."""
        ...

    def forget_work(self) -> None:
        """No Lease: keep nothing (a replica that gains it starts from everything)."""
        ...


@dataclass(frozen=True)
class LoopMetrics:
    """The metrics every controller loop exports, under one naming scheme (:meth:`standard`)."""

    passes: Counter | None
    """Passes of the write loop (per key with a queue), by ``result`` (``ok``, ``error``); None where a component
    counts its reconciles its own way (enclave-replication, by kind and outcome)."""
    duration: Histogram
    """Seconds per pass."""
    publishes: Counter | None = None
    """Snapshots compiled, by ``result``; None for a controller without a publish loop."""

    @classmethod
    def standard(cls, component: str, *, publishes: bool = False, what: str = "snapshots") -> LoopMetrics:
        """``enclave_<component>_reconciles_total{result}``, ``enclave_<component>_reconcile_seconds`` and, with
        ``publishes``, ``enclave_<component>_snapshots_total{result}``; the same object for a component every
        time (the default registry refuses a second metric of a name, and a test builds many controllers)."""
        known = _STANDARD.get(component)
        if known is not None:
            return known
        known = _STANDARD[component] = cls(
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
        return known


_STANDARD: dict[str, LoopMetrics] = {}


class ControllerLoop:
    """Informers, a publish loop on every replica and a write loop gated on the Lease; ``changed()`` wakes both.

    ``synced``, ``published`` and ``reconciled`` are the events the readiness gates follow
    (:data:`enclave_core.runtime.grpc.GATE_EVENTS`); a controller exposes them as its own attributes.
    """

    def __init__(
        self,
        name: str,
        informers: Sequence[Informer],
        reconcile: Callable[[], Awaitable[Result]] | None = None,
        resync_seconds: float = 0.0,
        *,
        metrics: LoopMetrics | None = None,
        publish: Callable[[], Any] | None = None,
        gate: asyncio.Event | None = None,
        leader_only: bool = True,
        synced_after: Sequence[asyncio.Event] = (),
        settle_seconds: float = 0.0,
        hints: Hints | None = None,
        queue: KeyedQueue | None = None,
        release_memory: bool = False,
        publish_yield_after: float | None = None,
    ) -> None:
        """Either ``reconcile`` (one pass, run at least every ``resync_seconds``) or ``queue`` (per-key reconciles,
        each key's Result its own resync). ``metrics``: :meth:`LoopMetrics.standard` of ``name`` unless given.
        ``synced_after``: events that must be set too, after the informers
        listed, before ``synced`` (e.g. API discovery). ``settle_seconds``: after each wake, how long to let a
        burst of watch events land before the pass that handles them all. ``hints``, ``queue``,
        ``release_memory``, ``publish_yield_after``: the options in the module docstring."""
        if (reconcile is None) == (queue is None):
            raise ValueError("a controller loop takes a reconcile or a keyed queue, not both")
        if reconcile is not None and resync_seconds <= 0:
            raise ValueError("a reconcile needs a positive resync_seconds")
        self.name = name
        self.informers = list(informers)
        self._publish = publish
        self._reconcile = reconcile
        self.queue = queue
        self.hints = hints
        self._memory = memory.Releaser() if release_memory else None
        self.publish_yield_after = publish_yield_after
        self.resync_seconds = resync_seconds
        self.metrics = metrics or LoopMetrics.standard(name, publishes=publish is not None)
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
        self._failed = False
        """Whether the last pass raised (batched rounds let its backoff run out)."""

    @property
    def write_wanted(self) -> asyncio.Event:
        """Set when a write pass is asked for (a change, :meth:`again`); cleared as a pass begins. Tests read it to
        tell which changes wake the controller."""
        return self._write_trigger

    def changed(self, _key: str = "") -> None:
        """An informer's ``on_change``: recompile the snapshot and run a write pass."""
        self._publish_trigger.set()
        self._write_trigger.set()

    def republish(self) -> None:
        """Recompile the snapshot only (a change no write depends on)."""
        self._publish_trigger.set()

    def again(self) -> None:
        """Ask for another write pass now (e.g. a write met a conflict and the watch brings the newer copy)."""
        self._write_trigger.set()

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.changed()
        if self.queue is not None:
            self.queue.wake()

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
        loops = [self.queue.run(self._may_reconcile, self.metrics)] if self.queue is not None else [self._write_loop()]
        if self._publish is not None:
            loops.append(self._publish_loop(self._publish))
        await asyncio.gather(*loops)

    def _may_reconcile(self) -> bool:
        return self.leading or not self.leader_only

    async def _publish_loop(self, publish: Callable[[], Any]) -> None:
        """Compile and publish after every change. With ``publish_yield_after``, a compile that took longer makes
        the next one wait as long again: a compile covers everything, and at thousands of objects compiling on
        every watch event of a burst would starve the write loop on this same event loop; changes that arrive
        meanwhile are coalesced into the next compile, so at most half of the process goes to compiling, and
        small compiles publish at once."""
        publishes = self.metrics.publishes
        while True:
            self._publish_trigger.clear()
            started = time.monotonic()
            try:
                publish()
                if publishes is not None:
                    publishes.labels("ok").inc()
                self.published.set()
            except Exception:  # never let a bad object stop the stream; the last good snapshot stays
                log.exception("compiling the snapshot failed", extra={"controller": self.name})
                if publishes is not None:
                    publishes.labels("error").inc()
            took = time.monotonic() - started
            await self._publish_trigger.wait()
            if self.publish_yield_after is not None and took > self.publish_yield_after:
                await asyncio.sleep(min(took, 2.0))

    async def _pass(self, reconcile: Callable[[], Awaitable[Result]]) -> float | None:
        """One reconcile, counted and timed; the seconds until the next pass is due (``None``: the resync).

        A failure is logged and counted, and comes back after the backoff, which doubles up to
        :data:`BACKOFF_MAX` until a pass succeeds."""
        started = time.monotonic()
        try:
            result = await reconcile()
        except Exception:
            log.exception("reconcile failed", extra={"controller": self.name})
            self._failed = True
            if self.metrics.passes is not None:
                self.metrics.passes.labels("error").inc()
            wait, self._backoff = self._backoff, min(BACKOFF_MAX, self._backoff * 2)
            return wait
        finally:
            self.metrics.duration.observe(time.monotonic() - started)
        if self.metrics.passes is not None:
            self.metrics.passes.labels("ok").inc()
        self._failed = False
        self._backoff = BACKOFF_FIRST
        return result.requeue_after

    async def _write_loop(self) -> None:
        assert self._reconcile is not None
        reconcile, hints = self._reconcile, self.hints
        now = time.monotonic()
        resync_at, due_at = now + self.resync_seconds, float("inf")
        while True:
            self._write_trigger.clear()
            now = time.monotonic()
            if now >= resync_at:
                resync_at = now + self.resync_seconds
                if hints is not None:
                    hints.look_at_everything()
            passed, failed = False, False
            if not self._may_reconcile():
                due_at = float("inf")
                if hints is not None:
                    hints.forget_work()
            elif hints is None or hints.has_work() or now >= due_at:
                if self._memory is not None:
                    self._memory.worked()
                due = await self._pass(reconcile)
                passed, failed = True, self._failed
                now = time.monotonic()
                due_at = float("inf") if due is None else now + due
                if hints is None:
                    resync_at = now + self.resync_seconds  # a full pass is a resync
                elif failed:
                    hints.look_at_everything()  # what the failed round had taken is looked at again
            if passed and due_at <= now:
                await asyncio.sleep(0)  # work left: the watches and the publish loop run between rounds
                continue
            self.reconciled.set()
            if hints is not None and failed:
                await asyncio.sleep(max(0.0, due_at - time.monotonic()))  # the backoff runs out (module docstring)
                continue
            if hints is not None and self._may_reconcile() and hints.has_work():
                await asyncio.sleep(0)  # work arrived during the round
                continue
            if self._memory is not None:
                self._memory.idle()  # a burst of passes ended: give back what it freed
            wait = max(0.0, min(resync_at, due_at) - time.monotonic())
            # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose event is set as the task is cancelled
            # returns and drops the cancellation, and the loop (and the process's shutdown) would go on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._write_trigger.wait()
            if self.settle_seconds:
                await asyncio.sleep(self.settle_seconds)

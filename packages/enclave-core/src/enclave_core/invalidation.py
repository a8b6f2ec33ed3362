"""``spec.cacheInvalidation``: no cache of this process is older than that period.

A watch is only as good as the events it is sent. One that misses an event (a proxy or apiserver that
dropped it, a bug in an echo check, an object written while the stream was cut and resumed past it) leaves
the cache wrong with no further event to correct it. So every cache is thrown away and rebuilt from a fresh
read at least once per period: an informer relists (the list is diffed against the cache, so objects the
watch missed are reported to the controller and objects gone are dropped) and a snapshot subscriber
reconnects and hands its consumer the whole fresh snapshot, rebuilding what it derived from the old one.

Each cache keeps its own :class:`Deadline`: due a random fraction (up to :data:`SPREAD`) short of the period
after its last fresh read, redrawn every time, so the replicas and components of a cluster, started together
by one ``helm install``, drift apart instead of relisting every kind at the same moment. The period is the
component's (:func:`set_period`): components take it from the ServiceConfiguration snapshot they follow
(``enclave_core.runtime.grpc.subscribe``), enclave-config from the configuration it publishes; the spec's
default (24h) applies until one arrives. A new period moves every deadline at once (a shorter one may make
some due at once).

Time is the running loop's (``loop.time()``), so the virtual-time tests can run a day in a millisecond.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

from prometheus_client import Counter, Gauge

log = logging.getLogger(__name__)

DEFAULT_PERIOD: Final = 86400.0
"""The specification's default ``cacheInvalidation`` (24h), in force until a configuration says otherwise."""

SPREAD: Final = 0.2
"""Up to this fraction of the period is drawn off each cache's deadline: at 24h, the relists of a cluster's
caches spread over the last 4.8 hours of the period instead of landing together."""

MINIMUM_PERIOD: Final = 1.0
"""The validation's floor (``spec.cacheInvalidation`` must be at least 1s): no period below it is obeyed."""

INVALIDATIONS = Counter(
    "enclave_cache_invalidations_total",
    "Caches rebuilt from a fresh read because spec.cacheInvalidation ran out, by cache (informer or snapshot kind)",
    ["cache"],
)
LAST_INVALIDATION = Gauge(
    "enclave_cache_last_invalidation_timestamp_seconds", "Unix time of the cache's last invalidation", ["cache"]
)


class _Component(threading.local):
    """The period and the waiting deadlines of the component running on this thread. A process of its own has
    one; ``enclave_core.runtime.host`` runs each hosted component on a thread and loop of its own, and a
    deadline may only be moved from the loop it waits on, so each follows its own subscription."""

    period: float = DEFAULT_PERIOD

    def __init__(self) -> None:
        self.moved: set[Callable[[], None]] = set()


_here = _Component()


def period() -> float:
    """The component's invalidation period, in seconds."""
    return _here.period


def set_period(seconds: float) -> None:
    """Obey a new period (clamped to :data:`MINIMUM_PERIOD`); every waiting cache's deadline moves with it."""
    seconds = max(MINIMUM_PERIOD, seconds)
    if seconds == _here.period:
        return
    log.info("cache invalidation period", extra={"seconds": seconds, "was": _here.period})
    _here.period = seconds
    for moved in list(_here.moved):
        moved()


def due_after(period_seconds: float, draw: float) -> float:
    """Seconds from a fresh read to the cache's next invalidation, for a ``draw`` in [0, 1): never more than
    the period (the spec's promise), never less than ``1 - SPREAD`` of it (no relist storm)."""
    return period_seconds * (1.0 - SPREAD * min(max(draw, 0.0), 1.0))


def expire(deadline: Deadline) -> None:
    """Make ``deadline`` due now, on the loop it waits on: the block :func:`expiring` runs over it ends as if its
    period had run out. A host's shared informer (``enclave_core.kube.shared``) relists so when the period of
    one of the components reading it runs out, its own being the host's."""
    deadline.since = float("-inf")
    for moved in list(_here.moved):
        moved()


def invalidated(cache: str) -> None:
    """Count an invalidation of ``cache`` and note its time (the metrics an operator reads)."""
    INVALIDATIONS.labels(cache).inc()
    LAST_INVALIDATION.labels(cache).set(time.time())


class Deadline:
    """When one cache is next due: :meth:`restart` after each fresh read (list, whole snapshot)."""

    def __init__(self, draw: Callable[[], float] = random.random) -> None:
        self._draw = draw
        self.since = 0.0
        """Loop time of the last fresh read."""
        self.fraction = draw()

    def restart(self) -> None:
        """A fresh read just happened: the next one is due a newly drawn fraction short of a period from now."""
        self.since = asyncio.get_running_loop().time()
        self.fraction = self._draw()

    @property
    def at(self) -> float:
        """Loop time at which the cache is due under the current period."""
        return self.since + due_after(_here.period, self.fraction)


@contextlib.asynccontextmanager
async def expiring(deadline: Deadline) -> AsyncIterator[asyncio.Timeout]:
    """Run the block until ``deadline`` (moved along when the period changes); the block is then cancelled
    and ``TimeoutError`` raised, with the yielded timeout's ``expired()`` true (a TimeoutError of the block's
    own, e.g. a network read, leaves it false)."""
    async with asyncio.timeout_at(deadline.at) as timeout:

        def moved() -> None:
            if not timeout.expired():
                timeout.reschedule(deadline.at)

        _here.moved.add(moved)
        try:
            yield timeout
        finally:
            _here.moved.discard(moved)

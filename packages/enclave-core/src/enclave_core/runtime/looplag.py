"""How late a component's event loop runs what is due: the one figure that says whether something on the loop
(a long computation, a blocking call) holds every other task of that component back.

A task sleeps ``interval`` and records how much later than asked it woke up. A loop that is never blocked
wakes it within a millisecond; a loop blocked for 2 s records ~2 s. :mod:`enclave_core.runtime.host` runs
several components in one interpreter, each on a loop and thread of its own, and this is how it shows that a
component which stalls does not stall its neighbours (``enclave_event_loop_lag_seconds{component=...}``).
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import Histogram

LAG = Histogram(
    "enclave_event_loop_lag_seconds",
    "how much later than due the component's event loop woke a task, sampled every 0.25 s",
    ["component"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

INTERVAL = 0.25
"""Four wake-ups a second: negligible idle CPU, and no stall of a quarter second or more goes unseen."""


async def watch(component: str, interval: float = INTERVAL) -> None:
    """Record the loop's lag under ``component`` until cancelled."""
    histogram = LAG.labels(component)
    clock = time.monotonic
    while True:
        before = clock()
        await asyncio.sleep(interval)
        histogram.observe(max(0.0, clock() - before - interval))

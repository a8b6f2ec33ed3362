"""An asyncio event loop on virtual time, for unit tests of timing-sensitive code without real waiting.

The loop's clock (``loop.time()``, which ``asyncio.sleep``, ``asyncio.timeout`` and ``wait_for`` all use)
starts at 0 and jumps forward to the next timer whenever nothing is ready to run, so a test of a 15-second
lease runs in milliseconds and its timing is exact and repeatable. Code under test must read time from the
running loop (``asyncio.get_running_loop().time()``), never ``time.monotonic()`` directly. A test can also
jump the clock itself (``advance``) to model a process that was paused (SIGSTOP, a VM pause): timers then
fire late, as they would on resume.

Only timers advance the clock: a loop that would block on real I/O with no timer pending is a test bug and
raises instead of hanging.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real file descriptors (the loop's self-pipe) without blocking; a wait becomes a clock jump."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("virtual-time loop would block forever: nothing scheduled and no timer pending")
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock is virtual (see the module docstring)."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward, as if the process had been paused for ``seconds``."""
        self._now += max(0.0, seconds)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a fresh virtual-time loop."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coroutine)

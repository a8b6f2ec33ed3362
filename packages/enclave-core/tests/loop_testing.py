"""What the controller loop's unit tests share: waiting for progress with a deadline, and a loop run for a block
(:func:`enclave_testing.memorykube.running`, which the controllers' own loop tests use too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from enclave_testing.memorykube import running

__all__ = ["DEADLINE", "running", "until"]

DEADLINE = 10.0


async def until(check: Callable[[], bool], progress: asyncio.Event) -> None:
    """Wait (with a deadline) until ``check()`` holds, looking again each time ``progress`` is set."""

    async def wait() -> None:
        while not check():
            progress.clear()
            await progress.wait()

    await asyncio.wait_for(wait(), DEADLINE)

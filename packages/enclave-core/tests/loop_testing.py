"""What the controller loop's unit tests share: waiting for progress with a deadline, and a loop run for a block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from enclave_core.runtime.loops import ControllerLoop

DEADLINE = 10.0


async def until(check: Callable[[], bool], progress: asyncio.Event) -> None:
    """Wait (with a deadline) until ``check()`` holds, looking again each time ``progress`` is set."""

    async def wait() -> None:
        while not check():
            progress.clear()
            await progress.wait()

    await asyncio.wait_for(wait(), DEADLINE)


@contextlib.asynccontextmanager
async def running(loop: ControllerLoop) -> AsyncIterator[ControllerLoop]:
    """``loop`` runs (informers, publish and write loops) for the block, and is cancelled after it."""
    task = asyncio.create_task(loop.run())
    try:
        yield loop
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

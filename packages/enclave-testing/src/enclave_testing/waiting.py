"""Waiting in tests: poll with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from kubernetes.client.rest import ApiException


def poll(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Call ``check`` until it returns something truthy (returned); API and network errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (ApiException, OSError) as err:
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout}s (last: {last!r})")


async def poll_async(
    check: Callable[[], Any], within: float = 10.0, interval: float = 0.02, what: str = "condition"
) -> Any:
    """:func:`poll` for a test on the event loop (the loop under test runs while this waits), within ``within``
    seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not met within {within}s (last: {last!r})")


async def assert_cancel_is_kept(
    attempt: Callable[[], tuple[Coroutine[Any, Any, Any], Callable[[], object]]], within: float = 5.0
) -> None:
    """Assert that a task cancelled as its wait ends stops, whichever comes first on the loop.

    ``attempt()`` gives a fresh coroutine that waits for something and the call that ends the wait. For the
    cancel in the same loop step as that call, and one, two or three steps later, a task that took the cancel
    must end cancelled: Python 3.11's ``asyncio.wait_for`` returns the result instead when the awaited thing
    finished in that step, and the loop or stream that called it goes on as if nobody had asked it to stop.
    """
    for steps in range(4):
        waiting, finish = attempt()
        task = asyncio.create_task(waiting)
        for _ in range(10):
            await asyncio.sleep(0)  # the task reaches its wait
        assert not task.done(), f"the task ended before its wait: {task!r}"
        finish()
        for _ in range(steps):
            await asyncio.sleep(0)
        took = task.cancel()
        try:
            async with asyncio.timeout(within):
                await task
        except asyncio.CancelledError:
            continue
        except TimeoutError:
            task.cancel()
            raise AssertionError(f"a cancel {steps} loop steps after the wait ended was lost: it runs on") from None
        assert not took, f"a cancel {steps} loop steps after the wait ended was lost: the task returned"

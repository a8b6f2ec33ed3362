"""Waiting in tests: poll with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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

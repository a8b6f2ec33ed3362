"""Giving memory a burst of work freed back to the system.

CPython frees small objects into its own arenas and everything larger with ``free()``; glibc keeps freed
pages inside its heaps for reuse and returns them only from the top of a heap, so after a burst (10,000
namespaces' watch events, API responses and plans) a controller's resident set stays near its peak although
the memory is free. ``malloc_trim(0)`` hands those pages back (``madvise``) without moving anything. At
1,000 x 10 it took enclave-tenants from 180 to 170 MB (docs/benchmarks.md). A controller calls :func:`release`
when a burst of work has ended; it costs a few milliseconds, so :class:`Releaser` does it at most every
``interval`` seconds and only after work. On a libc without ``malloc_trim`` (musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def _trim_function() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]  # int malloc_trim(size_t pad): the whole register, not an int's half
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


_TRIM = _trim_function()
_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """This process's resident set, from ``/proc/self/statm`` (0 where there is none)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * _PAGE


def release() -> int:
    """Return free heap pages to the system; the resident bytes that released (0 when it cannot)."""
    if _TRIM is None:
        return 0
    before = resident_bytes()
    _TRIM(0)
    released = max(0, before - resident_bytes())
    log.debug("freed memory returned to the system", extra={"released_bytes": released})
    return released


class Releaser:
    """Calls :func:`release` after work, at most every ``interval`` seconds: :meth:`worked` marks work done,
    :meth:`idle` (the moment a loop is about to wait) releases if there was some and the interval passed."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._worked = False
        self._last = float("-inf")

    def worked(self) -> None:
        self._worked = True

    def idle(self) -> bool:
        """Release now if work was done since the last release and ``interval`` has passed; whether it did."""
        now = self.clock()
        if not self._worked or now - self._last < self.interval:
            return False
        self._worked = False
        self._last = now
        release()
        return True

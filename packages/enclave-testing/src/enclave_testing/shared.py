"""One component stack kept alive across the test modules that ask for the same one.

Two Enclave stacks on one control plane judge each other's requests (every stack's webhooks see every
namespace, every stack's enclave-tenants every Tenant), so only one may run at a time, and starting one costs
several seconds of interpreter start-up, certificates and first snapshots. Modules that want the same stack
(the same key) therefore share it when they run one after another: :class:`StackKeeper` holds it, and the
``pytest_runtest_setup`` hook of :mod:`enclave_testing.pytest_plugin` closes it before any test that does not
ask for it is set up (that test may start a stack of its own). A module that leaves the stack unhealthy (a
process gone, a ``/readyz`` failing) has it closed at the module's end, so the next module starts afresh.

A suite opts in by registering the name of its module-scoped fixture (:func:`share_fixture`) and taking its
stack from :meth:`StackKeeper.acquire` with a key naming the stack's shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

_shared_fixtures: dict[str, set[Path]] = {}
"""Fixture name -> the suite directories whose tests get it from the keeper."""


def share_fixture(name: str, suite: Path) -> None:
    """Mark fixture ``name``, as the tests under ``suite`` see it, as one backed by the keeper: those tests keep
    the shared stack open. Scoped to the suite, since another suite may define a fixture of the same name that
    starts a stack of its own."""
    _shared_fixtures.setdefault(name, set()).add(suite)


def uses_shared_stack(fixturenames: Sequence[str], path: Path) -> bool:
    """Whether a test at ``path`` using ``fixturenames`` takes a stack from the keeper."""
    parents = set(path.parents)
    return any(not parents.isdisjoint(_shared_fixtures.get(name, ())) for name in fixturenames)


def sharers_first(items: list[Any], directory: Path) -> None:
    """Reorder, in place, the items under ``directory`` so those using a shared stack run first (a stable sort:
    each module's own order is kept, and the session's other items keep their places). For a suite's
    ``pytest_collection_modifyitems``: the stack then starts once for all of them."""
    slots = [index for index, item in enumerate(items) if directory in Path(str(item.path)).parents]
    ours = [items[index] for index in slots]
    ours.sort(key=lambda item: not uses_shared_stack(getattr(item, "fixturenames", ()), Path(str(item.path))))
    for index, item in zip(slots, ours, strict=True):
        items[index] = item


@dataclass
class _Held:
    key: str
    value: Any
    close: Callable[[], None]
    healthy: Callable[[], bool]


class StackKeeper:
    """The one shared stack of a session (or none)."""

    def __init__(self) -> None:
        self._held: _Held | None = None
        self.started = 0
        self.reused = 0

    def acquire(self, key: str, start: Callable[[], T], close: Callable[[T], None], healthy: Callable[[T], bool]) -> T:
        """The stack of ``key``: the one held when it matches, else a new one from ``start`` (the held one of
        another key is closed first)."""
        held = self._held
        if held is not None and held.key == key:
            self.reused += 1
            value: T = held.value
            return value
        self.release()
        value = start()
        self._held = _Held(key, value, lambda: close(value), lambda: healthy(value))
        self.started += 1
        return value

    def check(self) -> None:
        """Close the held stack if it is no longer whole (a module stopped or broke part of it)."""
        held = self._held
        if held is None:
            return
        try:
            whole = held.healthy()
        except Exception:  # a probe that cannot be asked is an unhealthy stack, never a failed teardown
            whole = False
        if not whole:
            log.warning("the shared stack %s is not whole after a module; closing it", held.key)
            self.release()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()


keeper = StackKeeper()
"""The session's keeper (one pytest process runs one session)."""

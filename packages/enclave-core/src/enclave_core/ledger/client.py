"""Writing a ledger's status with optimistic concurrency: the protocol's steps 1-3 (docs/architecture.md).

Read the ledger (the newest copy this process holds: its own last write, a watch event, or a GET after a
conflict), apply a pure function from :mod:`enclave_core.ledger.ops`, and write ``/status`` with the
resourceVersion that was read. kube-apiserver refuses the write with ``409 Conflict`` when anyone wrote in
between; the client then re-reads with a GET and applies the function again, a bounded number of times with
jittered backoff. The ledger is therefore the single serialisation point between admission replicas and the
owning controller, with no lock service and no leader among admission replicas.

Within one process, writes to one ledger queue behind an asyncio lock and are committed in groups: whatever
queued while a write was in flight is applied in order to one status and written at once, so a burst costs one
write per group rather than per request, and conflicts happen only between replicas.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any, Final

from enclave_core.api.ledger import QuantityLedger, QuantityLedgerStatus
from enclave_core.api.names import MANAGED_BY
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path

log = logging.getLogger(__name__)

API_VERSION: Final = "enclave.dev/v1beta2"
PLURAL: Final = "quantityledgers"
MAX_ATTEMPTS: Final = 12
"""Writes tried before giving up: at 3 replicas hammering one ledger, the slowest of 100 requests needed 4."""


class LedgerMissingError(Exception):
    """The ledger does not exist (its quota is new, or was deleted)."""


class LedgerBusyError(Exception):
    """Every attempt met a conflict: the ledger is too contended to write within the retry budget."""


Mutation = Callable[[QuantityLedgerStatus | None], QuantityLedgerStatus | Any | None]
"""Current status -> status to write; anything else (None, a refusal) means "do not write" and is returned."""


def _version(obj: JSON) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0"))
    except ValueError:
        return 0


class LedgerClient:
    """Reads and writes QuantityLedgers of one namespace."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        attempts: int = MAX_ATTEMPTS,
        backoff: float = 0.005,
        max_backoff: float = 0.2,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.conflicts = 0
        """Conflicts met so far (for metrics and the benchmark)."""
        self.writes = 0
        """Status writes that succeeded so far."""
        self._latest: dict[str, JSON] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[tuple[Mutation, asyncio.Future[tuple[Any, JSON | None]]]]] = {}

    def path(self, name: str, subresource: str | None = None) -> str:
        return resource_path(API_VERSION, PLURAL, namespace=self.namespace, name=name, subresource=subresource)

    def observe(self, obj: JSON) -> None:
        """Feed a copy seen elsewhere (a watch event): kept when newer than what this client holds.

        resourceVersions are compared as integers, which holds for etcd-backed apiservers; a stale pick only
        costs one conflict and a GET, never a wrong write.
        """
        name = obj.get("metadata", {}).get("name")
        if not name:
            return
        known = self._latest.get(name)
        if known is None or _version(obj) >= _version(known):
            self._latest[name] = obj

    def forget(self, name: str) -> None:
        self._latest.pop(name, None)

    def informer(self, manager: str | None = None, on_change: Callable[[str], None] | None = None) -> Informer:
        """The watch of the ledgers ``manager`` keeps (labelled as its own; None: every ledger of the namespace),
        feeding each copy it sees to :meth:`observe` and each deletion to :meth:`forget` before ``on_change``:
        the next write then starts from the newest copy, and only a conflict costs a read."""
        watched: Informer

        def changed(key: str) -> None:
            obj = watched.get(key)
            if obj is None:
                self.forget(key.rpartition("/")[2])
            else:
                self.observe(obj)
            if on_change is not None:
                on_change(key)

        watched = Informer(
            self.kube,
            self.path(""),
            label_selector=f"{MANAGED_BY}={manager}" if manager is not None else None,
            on_change=changed,
            name="quantityledgers",
        )
        return watched

    def cached(self, name: str) -> QuantityLedger | None:
        obj = self._latest.get(name)
        return QuantityLedger.model_validate(obj) if obj is not None else None

    async def read(self, name: str) -> JSON:
        obj = await self.kube.get_or_none(self.path(name))
        if obj is None:
            self._latest.pop(name, None)
            raise LedgerMissingError(f"QuantityLedger {self.namespace}/{name} does not exist")
        self.observe(obj)
        return obj

    async def update(self, name: str, mutation: Mutation) -> tuple[Any, JSON | None]:
        """Apply ``mutation`` to the ledger's status and write it; returns (what the mutation returned, the
        stored object or None when nothing was written). Raises :class:`LedgerMissingError` or
        :class:`LedgerBusyError`.

        Group commit: mutations that arrive while a write to the same ledger is in flight are applied in
        arrival order to one status and written together, so a burst on one replica costs one write per
        batch, not one per request (each mutation still sees the effect of those before it)."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        done: asyncio.Future[tuple[Any, JSON | None]] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(name, []).append((mutation, done))
        async with lock:
            if not done.done():  # nobody took it into an earlier batch: write everything queued now
                batch = self._queued.pop(name, [])
                try:
                    await self._commit(name, batch)
                except Exception as err:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(err)
        return done.result()

    async def _commit(self, name: str, batch: list[tuple[Mutation, asyncio.Future[tuple[Any, JSON | None]]]]) -> None:
        obj = self._latest.get(name)
        if obj is None:
            obj = await self.read(name)
        delay = self.backoff
        for _ in range(self.attempts):
            ledger = QuantityLedger.model_validate(obj)
            status = ledger.status
            results: list[Any] = []
            for mutation, _ in batch:
                result = mutation(status)
                if isinstance(result, QuantityLedgerStatus):
                    status = result
                results.append(result)
            if status is None or (ledger.status is not None and status.to_k8s() == ledger.status.to_k8s()):
                for (_, future), result in zip(batch, results, strict=True):
                    future.set_result((result, None))
                return
            body = {**obj, "status": status.to_k8s()}
            try:
                stored = await self.kube.replace(self.path(name, "status"), body)
            except KubeError as err:
                if err.not_found:
                    self._latest.pop(name, None)
                    raise LedgerMissingError(f"QuantityLedger {self.namespace}/{name} does not exist") from err
                if not err.conflict:
                    raise
                self.conflicts += 1
                await asyncio.sleep(random.uniform(0, delay))
                delay = min(self.max_backoff, delay * 2)
                obj = await self.read(name)
                continue
            self.writes += 1
            self.observe(stored)
            for (_, future), result in zip(batch, results, strict=True):
                written = isinstance(result, QuantityLedgerStatus)
                future.set_result((result, stored if written else None))
            return
        raise LedgerBusyError(
            f"QuantityLedger {self.namespace}/{name}: {self.attempts} conflicting writes in a row; retry"
        )

    async def ensure(self, ledger: QuantityLedger) -> JSON:
        """Create ``ledger`` unless it exists (the owning controller's job); returns the stored object."""
        name = ledger.metadata.name
        assert name
        obj = await self.kube.get_or_none(self.path(name))
        if obj is None:
            try:
                obj = await self.kube.create(
                    resource_path(API_VERSION, PLURAL, namespace=self.namespace), ledger.to_k8s()
                )
            except KubeError as err:
                if err.status != 409:
                    raise
                obj = await self.kube.get(self.path(name))
        self.observe(obj)
        return obj

    async def delete(self, name: str) -> None:
        await self.kube.delete(self.path(name))
        self._latest.pop(name, None)

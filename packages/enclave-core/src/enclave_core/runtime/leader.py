"""One active replica per controller, chosen through a coordination.k8s.io/v1 Lease.

``kubernetes.aio.leaderelection`` (v37) fails against the pydantic-validated aio API classes (it passes
``pretty=True`` where a string is required), so the lock is written here on our raw-JSON client: the Lease is
taken and renewed with the resourceVersion we read (optimistic concurrency), so two replicas can never both
believe they hold it. On top of the usual protocol: the work is cancelled when the lease is lost, the replica
stands again instead of dying, and a graceful shutdown releases the lease so the successor takes over within
one retry period rather than one lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.leading = False
        self.transitions = 0
        self._path = resource_path("coordination.k8s.io/v1", "leases", namespace=namespace, name=name)

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]], on_change: Callable[[bool], None]) -> None:
        """Run ``work`` whenever this replica leads; until cancelled."""
        await self._ensure_namespace()
        while True:
            while not await self._try_acquire_or_renew():  # noqa: ASYNC110 - polls the Lease in the API
                await asyncio.sleep(self.retry_period)
            self.leading = True
            on_change(True)
            log.info("became leader", extra={"lease": self.name, "identity": self.identity})
            worker = asyncio.create_task(work())
            lost = False
            try:
                await self._renew_until_lost(worker)
                lost = True
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker
                self.leading = False
                on_change(False)
                if not lost:
                    # Shutting down (or the work failed): hand over now instead of after a lease duration.
                    await self.release()
            log.warning("lost leadership", extra={"lease": self.name, "identity": self.identity})

    async def _renew_until_lost(self, worker: asyncio.Task[None]) -> None:
        last_renew = asyncio.get_running_loop().time()
        while not worker.done():
            await asyncio.sleep(self.retry_period)
            if await self._try_acquire_or_renew():
                last_renew = asyncio.get_running_loop().time()
            elif asyncio.get_running_loop().time() - last_renew > self.renew_deadline:
                return
        worker.result()  # work ended on its own: surface its error

    async def _try_acquire_or_renew(self) -> bool:
        now = _now()
        try:
            lease = await self.kube.get_or_none(self._path)
            spec: JSON = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "renewTime": _micro(now),
            }
            if lease is None:
                spec["acquireTime"] = _micro(now)
                spec["leaseTransitions"] = 0
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": spec,
                }
                await self.kube.create(
                    resource_path("coordination.k8s.io/v1", "leases", namespace=self.namespace), body
                )
                return True
            current = lease.get("spec", {})
            holder = current.get("holderIdentity") or ""
            if holder and holder != self.identity:
                renewed = _parse(current.get("renewTime")) or _parse(current.get("acquireTime"))
                duration = timedelta(seconds=int(current.get("leaseDurationSeconds") or self.lease_duration))
                if renewed is not None and renewed + duration > now:
                    return False
            if holder != self.identity:
                spec["acquireTime"] = _micro(now)
                spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
            else:
                spec["acquireTime"] = current.get("acquireTime") or _micro(now)
                spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0)
            lease["spec"] = spec  # metadata.resourceVersion stays: a concurrent writer makes this a 409
            await self.kube.replace(self._path, lease)
            return True
        except KubeError as err:
            if err.conflict or err.status == 409:
                return False
            log.warning("lease request failed", extra={"lease": self.name, "error": str(err)})
            return False
        except Exception as err:  # network trouble: not leading until proven otherwise
            log.warning("lease request failed", extra={"lease": self.name, "error": str(err)})
            return False

    async def release(self) -> None:
        """Hand the lease over at once on a graceful shutdown."""
        with contextlib.suppress(Exception):
            lease = await self.kube.get_or_none(self._path)
            if lease is not None and lease.get("spec", {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.replace(self._path, lease)
                log.info("released leadership", extra={"lease": self.name})
        self.leading = False

    async def _ensure_namespace(self) -> None:
        with contextlib.suppress(KubeError):
            if await self.kube.get_or_none(resource_path("v1", "namespaces", name=self.namespace)) is None:
                await self.kube.create(resource_path("v1", "namespaces"), {"metadata": {"name": self.namespace}})

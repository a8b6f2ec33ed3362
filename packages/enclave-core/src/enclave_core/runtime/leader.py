"""One active replica per controller, chosen through a coordination.k8s.io/v1 Lease.

``kubernetes.aio.leaderelection`` (v37) fails against the pydantic-validated aio API classes (it passes
``pretty=True`` where a string is required), so the lock is written here on our raw-JSON client, following
client-go's protocol where it matters for safety:

- The Lease is taken and renewed with the resourceVersion we read (optimistic concurrency), so two replicas
  can never both win the same write.
- Expiry is judged by **when this replica saw the Lease record change** (client-go's ``observedTime``), on
  this replica's monotonic clock, never by comparing the holder's ``renewTime`` with the local wall clock: two
  nodes whose clocks disagree by minutes still agree on who leads.
- Every acquire/renew attempt is bounded by the time left until the renew deadline (a slow or partitioned
  apiserver cannot keep an attempt in flight past it), and the holder's right to write ends the moment the
  renew deadline passes since the last renewal it *sent* (``may_write``), before any other replica can judge
  the Lease expired (``renew_deadline < lease_duration``; the difference is the margin for clock-rate drift
  and for a write already on the wire). Components gate every write on ``may_write`` (``Component.kube``),
  so a replica paused past its lease (SIGSTOP, a long GC or VM pause) and resumed writes nothing, even
  before its renew loop has run again; the leader work is cancelled at the same moment.

- While leading, a renewal is one PUT on the Lease as our own last write returned it (client-go's fast path):
  no GET, so a steady leader costs the apiserver one write per retry period. A 409 means someone else wrote
  the Lease since; the attempt then reads it and decides from what it finds, as a standby does.

On top of the protocol: the replica stands again after losing instead of dying, and a graceful shutdown
releases the lease so the successor takes over within one retry period rather than one lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge

from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path

log = logging.getLogger(__name__)

LEADING = Gauge("enclave_leader_is_leader", "1 while this replica holds its Lease and may write", ["lease"])
TRANSITIONS = Counter(
    "enclave_leader_transitions_total", "Times this replica started or stopped leading", ["lease", "change"]
)
ATTEMPTS = Counter(
    "enclave_leader_lease_requests_total",
    "Acquire/renew attempts by result (acquired, renewed, held-elsewhere, conflict, timeout, error)",
    ["lease", "result"],
)


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease spec that say who holds it; any change of them is a sign of life."""

    holder: str
    duration: float
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def of(cls, spec: JSON, default_duration: float) -> LeaseRecord:
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration=float(spec.get("leaseDurationSeconds") or default_duration),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
        )


class LeaderElector:
    """Holds (or waits for) one Lease; runs the leader work while holding it.

    ``wall`` gives the timestamps written into the Lease (for humans and other tools; no decision here reads
    them); all timing decisions use the event loop's monotonic clock, which is what tests replace.
    """

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
        wall: Callable[[], datetime] = _now,
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
        self.wall = wall
        self.leading = False
        self.transitions = 0
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        """Monotonic time at which ``_observed`` was first seen (client-go's observedTime)."""
        self._renewed_at: float | None = None
        """Monotonic time at which the last successful acquire/renew write was sent."""
        self._held: JSON | None = None
        """The Lease as our last successful write returned it, while leading: what a fast renewal PUTs."""
        self._path = resource_path("coordination.k8s.io/v1", "leases", namespace=namespace, name=name)

    @staticmethod
    def _time() -> float:
        return asyncio.get_running_loop().time()

    def may_write(self) -> bool:
        """Whether this replica may write now: it leads and its last renewal was sent less than the renew
        deadline ago. Checked before every write, so it holds even while the renew loop has not run yet."""
        return self.leading and self._renewed_at is not None and self._time() < self._renewed_at + self.renew_deadline

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]], on_change: Callable[[bool], None]) -> None:
        """Run ``work`` whenever this replica leads; until cancelled."""
        await self._ensure_namespace()
        while True:
            while not await self._attempt(self.retry_period):  # noqa: ASYNC110 - polls the Lease in the API
                await asyncio.sleep(self.retry_period)
            self._set_leading(True, on_change)
            worker = asyncio.create_task(work(), name=f"{self.name}-leader-work")
            lost = False
            try:
                lost = await self._renew_until_lost(worker)
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker
                self._set_leading(False, on_change)
                if not lost:
                    # Shutting down (or the work failed): hand over now instead of after a lease duration.
                    await self.release()
            log.warning("lost leadership", extra={"lease": self.name, "identity": self.identity})

    def _set_leading(self, leading: bool, on_change: Callable[[bool], None]) -> None:
        self.leading = leading
        if not leading:
            self._renewed_at = None
            self._held = None
        else:
            self.transitions += 1
        LEADING.labels(self.name).set(1 if leading else 0)
        TRANSITIONS.labels(self.name, "started" if leading else "stopped").inc()
        on_change(leading)
        if leading:
            log.info("became leader", extra={"lease": self.name, "identity": self.identity})

    async def _renew_until_lost(self, worker: asyncio.Task[None]) -> bool:
        """Renew every retry period; True when the lease is lost, False when the work ended (its error raised)."""
        while True:
            assert self._renewed_at is not None
            deadline = self._renewed_at + self.renew_deadline
            # Wake at the next retry, or at the deadline if it comes first, or when the work ends.
            await asyncio.wait({worker}, timeout=max(0.0, min(self.retry_period, deadline - self._time())))
            if worker.done():
                worker.result()  # work ended on its own: surface its error
                return False
            while True:
                remaining = deadline - self._time()
                if remaining <= 0:
                    log.warning(
                        "renew deadline passed; stopping writes",
                        extra={"lease": self.name, "renew_deadline": self.renew_deadline},
                    )
                    return True
                if await self._attempt(remaining):
                    break
                if self._observed is not None and self._observed.holder not in ("", self.identity):
                    log.warning(
                        "lease taken by another replica", extra={"lease": self.name, "holder": self._observed.holder}
                    )
                    return True
                # Failed (conflict, error): retry after a retry period, never past the deadline.
                await asyncio.wait({worker}, timeout=max(0.0, min(self.retry_period, deadline - self._time())))
                if worker.done():
                    worker.result()
                    return False

    async def _attempt(self, budget: float) -> bool:
        """One acquire-or-renew, abandoned after ``budget`` seconds; True when this replica now holds the lease."""
        try:
            async with asyncio.timeout(budget):
                return await self._try_acquire_or_renew(budget)
        except TimeoutError:
            ATTEMPTS.labels(self.name, "timeout").inc()
            log.warning("lease request timed out", extra={"lease": self.name, "budget": round(budget, 3)})
            return False
        except KubeError as err:
            if err.conflict:
                ATTEMPTS.labels(self.name, "conflict").inc()
                return False
            ATTEMPTS.labels(self.name, "error").inc()
            log.warning("lease request failed", extra={"lease": self.name, "error": str(err)})
            return False
        except Exception as err:  # network trouble: not leading until proven otherwise
            ATTEMPTS.labels(self.name, "error").inc()
            log.warning("lease request failed", extra={"lease": self.name, "error": str(err)})
            return False

    def _observe(self, record: LeaseRecord, at: float) -> None:
        if record != self._observed:
            self._observed = record
            self._observed_at = at

    async def _try_acquire_or_renew(self, budget: float) -> bool:
        if self.leading and self._held is not None:
            held, self._held = self._held, None  # a failed PUT leaves nothing to retry blindly: read next time
            try:
                return await self._renew_held(held, budget)
            except KubeError as err:
                if not err.conflict:
                    raise
                ATTEMPTS.labels(self.name, "conflict").inc()  # written since: read it and decide below
        try:
            lease: JSON | None = await self.kube.request("GET", self._path, request_timeout=budget)
        except KubeError as err:
            if not err.not_found:
                raise
            lease = None
        now = _micro(self.wall())
        spec = self._spec(now)
        if not lease:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = 0
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            sent = self._time()
            self._held = await self.kube.request(
                "POST",
                resource_path("coordination.k8s.io/v1", "leases", namespace=self.namespace),
                body=body,
                query={"fieldManager": self.kube.field_manager},
                request_timeout=budget,
            )
            return self._won(spec, sent, "acquired")
        current = lease.get("spec") or {}
        record = LeaseRecord.of(current, self.lease_duration)
        self._observe(record, self._time())
        if record.holder and record.holder != self.identity and self._time() < self._observed_at + record.duration:
            ATTEMPTS.labels(self.name, "held-elsewhere").inc()
            return False
        if record.holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = record.transitions + 1
        else:
            spec["acquireTime"] = record.acquire_time or now
            spec["leaseTransitions"] = record.transitions
        lease["spec"] = spec  # metadata.resourceVersion stays: a concurrent writer makes this a 409
        sent = self._time()
        await self._put(lease, budget)
        return self._won(spec, sent, "acquired" if record.holder != self.identity else "renewed")

    async def _renew_held(self, held: JSON, budget: float) -> bool:
        """Renew by writing over our own last write; its resourceVersion makes any write since then a 409."""
        current = held.get("spec") or {}
        now = _micro(self.wall())
        spec = self._spec(now)
        spec["acquireTime"] = current.get("acquireTime") or now
        spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0)
        held["spec"] = spec
        sent = self._time()
        await self._put(held, budget)
        return self._won(spec, sent, "renewed")

    def _spec(self, now: str) -> JSON:
        """The fields every write of ours sets; the caller adds acquireTime and leaseTransitions."""
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, int(self.lease_duration)),
            "renewTime": now,
        }

    async def _put(self, lease: JSON, budget: float) -> None:
        """Write ``lease`` with its resourceVersion and keep what came back for the next fast renewal."""
        self._held = await self.kube.request(
            "PUT", self._path, body=lease, query={"fieldManager": self.kube.field_manager}, request_timeout=budget
        )

    def _won(self, spec: JSON, sent: float, result: str) -> bool:
        self._observe(LeaseRecord.of(spec, self.lease_duration), sent)
        self._renewed_at = sent
        ATTEMPTS.labels(self.name, result).inc()
        return True

    async def release(self) -> None:
        """Hand the lease over at once on a graceful shutdown."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.retry_period):
                lease = await self.kube.get_or_none(self._path)
                if lease is not None and lease.get("spec", {}).get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = ""
                    lease["spec"]["leaseDurationSeconds"] = 1
                    await self.kube.replace(self._path, lease)
                    log.info("released leadership", extra={"lease": self.name})
        self.leading = False
        self._renewed_at = None
        self._held = None

    async def _ensure_namespace(self) -> None:
        with contextlib.suppress(KubeError):
            if await self.kube.get_or_none(resource_path("v1", "namespaces", name=self.namespace)) is None:
                await self.kube.create(resource_path("v1", "namespaces"), {"metadata": {"name": self.namespace}})

"""Deny Events, posted off the request path, aggregated so that no tenant can flood etcd with them.

Every denial of a real (not dry-run) request is recorded as a Warning Event in ``spec.events.namespace`` so that
``kubectl get events`` shows who was refused what. The response must not wait for the API server (that would
add a write to every denial's latency and tie our answer to the API server's health), so events go through a
bounded queue drained by one task.

A tenant that repeats a refused request in a loop must not turn each refusal into an etcd object, so events are
aggregated the way kube's event recorder (client-go's EventCorrelator) does it:

* **the same denial again** (same involved object, reason and message, within :data:`WINDOW`) creates no new
  Event: the existing one's ``count`` and ``lastTimestamp`` move, written at most once per
  :data:`FLUSH_EVERY` per Event however fast the repeats come;
* **new Event objects per requesting user** come from a token bucket (:data:`BURST`, then one per
  :data:`REFILL` seconds): a user varying the object name to defeat the aggregation gets refused as before, and
  the refusals are counted in ``enclave_admission_events_suppressed_total`` and logged, but not written.

Dry runs post nothing: the hooks declare ``sideEffects: None``. When the queue is full (a storm of distinct
denials from many users) further events are dropped and counted; the log line per decision keeps the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter

from enclave_admission.review import JSON, AdmissionRequest, Decision
from enclave_core.kube.events import EventRecorder, clipped

log = logging.getLogger(__name__)

DROPPED = Counter("enclave_admission_events_dropped_total", "Deny events dropped because the queue was full")
SUPPRESSED = Counter(
    "enclave_admission_events_suppressed_total",
    "Deny events not written because the requesting user exceeded its rate of new Event objects",
)
AGGREGATED = Counter(
    "enclave_admission_events_aggregated_total", "Denials counted on an existing Event instead of a new one"
)

WINDOW = 600.0
"""Seconds a denial keeps counting on the same Event (client-go's aggregation window is ten minutes too)."""
FLUSH_EVERY = 10.0
"""At most one ``count`` update per Event in this many seconds."""
BURST = 25
"""New Event objects a user may cause at once (client-go's spam filter burst)."""
REFILL = 10.0
"""Seconds per new Event object a user earns back after the burst."""
REMEMBERED = 4096
"""Distinct denials (and users) kept for aggregation; the least recently seen are forgotten first."""

Key = tuple[str, str, str, str, str]
"""(events namespace, involved kind, involved name, reason, message)."""


@dataclass
class _Record:
    involved: JSON
    reason: str
    message: str
    namespace: str
    first: float
    count: int = 1
    written: int = 0
    """``count`` as last stored in the API."""
    last_write: float = 0.0
    event: JSON | None = None
    """The stored Event once created."""
    failed: bool = False


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class DenyEvents:
    recorder: EventRecorder
    capacity: int = 1000
    clock: Callable[[], float] = time.monotonic
    records: OrderedDict[Key, _Record] = field(default_factory=OrderedDict)
    buckets: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self.queue: asyncio.Queue[_Record] = asyncio.Queue(self.capacity)

    def post(self, request: AdmissionRequest, decision: Decision, namespace: str) -> None:
        """Record a denial of ``request``; never blocks, never raises, never writes for a dry run. The Event
        names the tenant the decision concerns: the refusal a tenant user reads does not when the tenant is not
        theirs, and operators reading Enclave's events namespace still need to know."""
        tenant = f"(tenant {decision.tenant}) " if decision.tenant else ""
        self.record(request, decision.reason or "Denied", f"{tenant}denied: {decision.message}", namespace)

    def audit(self, request: AdmissionRequest, decision: Decision, namespace: str) -> None:
        """Record what ``audit`` rules matched (reason ``RuleAudit``, one Event per finding, aggregated and
        rate-limited like denials); never for a dry run."""
        tenant = f"(tenant {decision.tenant}) " if decision.tenant else ""
        for finding in decision.audits:
            self.record(request, "RuleAudit", f"{tenant}audited: {finding}", namespace)

    def record(self, request: AdmissionRequest, reason: str, text: str, namespace: str) -> None:
        """An Event about ``request``'s object: ``<user> <operation> <resource> in <namespace> <text>``."""
        if request.dry_run:
            return
        source = request.obj or request.old or {}
        meta = source.get("metadata") or {}
        # No namespace in the involved object: deny events belong in the events namespace even for namespaced
        # objects, so that one place lists every refusal.
        kind = str(source.get("kind") or request.kind)
        name = str(request.name or meta.get("name") or "unnamed")
        message = f"{request.username} {request.operation} {request.resource}"
        if request.sub_resource:
            message += f"/{request.sub_resource}"
        if request.namespace:
            message += f" in {request.namespace}"
        message = clipped(f"{message} {text}")
        key = (namespace, kind, name, reason, message)
        now = self.clock()
        record = self.records.get(key)
        if record is not None and now - record.first < WINDOW and not record.failed:
            record.count += 1
            self.records.move_to_end(key)
            AGGREGATED.inc()
            return
        if not self._take_token(request.username, now):
            SUPPRESSED.inc()
            return
        involved: JSON = {
            "apiVersion": source.get("apiVersion") or request.api_version,
            "kind": kind,
            "metadata": {"name": name, "uid": meta.get("uid", "")},
        }
        record = _Record(involved, reason, message, namespace, now)
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            DROPPED.inc()
            return
        self.records[key] = record
        self.records.move_to_end(key)
        while len(self.records) > REMEMBERED:
            self.records.popitem(last=False)

    def _take_token(self, user: str, now: float) -> bool:
        bucket = self.buckets.get(user)
        if bucket is None:
            bucket = self.buckets[user] = _Bucket(float(BURST), now)
            while len(self.buckets) > REMEMBERED:
                self.buckets.popitem(last=False)
        self.buckets.move_to_end(user)
        bucket.tokens = min(float(BURST), bucket.tokens + (now - bucket.at) / REFILL)
        bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    async def run(self) -> None:
        """Create queued Events and move the counts of repeated ones; until cancelled."""
        while True:
            record: _Record | None = None
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can drop a cancellation (shutdown) or an item
            # taken from the queue just as the timeout fires.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_EVERY / 2):
                    record = await self.queue.get()
            if record is not None:
                await self._create(record)
            await self.flush()

    async def _create(self, record: _Record) -> None:
        with contextlib.suppress(Exception):  # the recorder logs its own failures
            record.event = await self.recorder.emit(
                record.involved, "Warning", record.reason, record.message, namespace=record.namespace
            )
        record.failed = record.event is None  # a later repeat tries a new Event
        record.written, record.last_write = 1, self.clock()

    async def flush(self, *, force: bool = False) -> None:
        """Store the counts of Events repeated since their last write (each at most once per FLUSH_EVERY)."""
        now = self.clock()
        due = [
            record
            for record in self.records.values()
            if record.event is not None
            and record.count > record.written
            and (force or now - record.last_write >= FLUSH_EVERY)
        ]
        for record in due:
            assert record.event is not None
            count = record.count
            with contextlib.suppress(Exception):
                if await self.recorder.bump(record.event, count):
                    record.written = count
            record.last_write = now

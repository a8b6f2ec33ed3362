"""Deny Events, posted off the request path.

Every denial posts a Warning Event in ``spec.events.namespace`` so that ``kubectl get events`` shows who was
refused what. The response must not wait for the API server (that would add a write to every denial's latency
and tie our answer to the API server's health), so events go through a bounded queue drained by one task; when
the queue is full (a storm of denials) further events are dropped and counted, the log line per decision keeps
the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import Counter

from enclave_admission.review import JSON, AdmissionRequest, Decision
from enclave_core.kube.events import EventRecorder

log = logging.getLogger(__name__)

DROPPED = Counter("enclave_admission_events_dropped_total", "Deny events dropped because the queue was full")


class DenyEvents:
    def __init__(self, recorder: EventRecorder, capacity: int = 1000) -> None:
        self.recorder = recorder
        self.queue: asyncio.Queue[tuple[JSON, str, str, str]] = asyncio.Queue(capacity)

    def post(self, request: AdmissionRequest, decision: Decision, namespace: str) -> None:
        """Queue an Event about ``request``'s object; never blocks, never raises."""
        source = request.obj or request.old or {}
        meta = source.get("metadata") or {}
        # No namespace in the involved object: deny events belong in the events namespace even for namespaced
        # objects, so that one place lists every refusal.
        involved: JSON = {
            "apiVersion": source.get("apiVersion") or request.api_version,
            "kind": source.get("kind") or request.kind,
            "metadata": {"name": request.name or meta.get("name") or "unnamed", "uid": meta.get("uid", "")},
        }
        message = f"{request.username} {request.operation} {request.resource}"
        if request.sub_resource:
            message += f"/{request.sub_resource}"
        if request.namespace:
            message += f" in {request.namespace}"
        message += f" denied: {decision.message}"
        try:
            self.queue.put_nowait((involved, decision.reason or "Denied", message[:1024], namespace))
        except asyncio.QueueFull:
            DROPPED.inc()

    async def run(self) -> None:
        while True:
            involved, reason, message, namespace = await self.queue.get()
            with contextlib.suppress(Exception):  # the recorder logs its own failures
                await self.recorder.emit(involved, "Warning", reason, message, namespace=namespace)

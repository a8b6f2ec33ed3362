"""Kubernetes Events: how Enclave tells a user, in ``kubectl describe`` and ``kubectl get events``, what it did.

Events about namespaced objects go to the object's namespace. Events about cluster-scoped objects (Tenants,
the ServiceConfiguration) and deny events go to ``spec.events.namespace``; kube-apiserver only accepts a
cluster-scoped ``involvedObject`` in the ``default`` namespace, so elsewhere the event's ``involvedObject``
carries the events namespace: kind, name and uid still find it
(``kubectl get events -n <ns> --field-selector involvedObject.name=<tenant>``).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime
from typing import Any, Literal

from enclave_core.api import names
from enclave_core.kube.rest import JSON, FencedWriteError, Kube, KubeError, resource_path

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

MESSAGE_LIMIT = 1024
"""The longest message this recorder posts. kube-apiserver refuses a longer note on events.k8s.io Events and on
core/v1 Events that carry ``eventTime``; the legacy core/v1 Events posted here have no limit of their own but the
object size, yet a message past a screenful helps nobody in ``kubectl describe``. One limit, owned here: callers
pass the whole message and the recorder cuts it, saying so."""

_CUT = " [... cut]"


def clipped(message: str) -> str:
    """``message`` within :data:`MESSAGE_LIMIT`, its end marked when cut."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    return message[: MESSAGE_LIMIT - len(_CUT)] + _CUT


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Posts core/v1 Events on behalf of one component; never raises (an event is best effort)."""

    def __init__(self, kube: Kube, component: str, default_namespace: str = "default") -> None:
        self.kube = kube
        self.component = component
        self.instance = f"{socket.gethostname()}-{os.getpid()}"
        self.default_namespace = default_namespace
        self._warned: dict[str, tuple[str, str]] = {}

    async def emit(
        self, obj: JSON, event_type: EventType, reason: str, message: str, *, namespace: str | None = None
    ) -> JSON | None:
        """Post the Event; the stored object (to bump its ``count`` later), or None when it could not be posted."""
        meta: dict[str, Any] = obj.get("metadata", {})
        object_namespace = meta.get("namespace")
        target = object_namespace or namespace or self.default_namespace
        involved: JSON = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        }
        if object_namespace or target != "default":
            involved["namespace"] = target
        now = _now()
        event: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'enclave')}.",
                "namespace": target,
                "labels": {
                    names.EVENT_COMPONENT_LABEL: self.component,
                    names.EVENT_INVOLVED_KIND_LABEL: str(involved["kind"]).lower()[:63],
                },
            },
            "involvedObject": involved,
            "reason": reason,
            "message": clipped(message),
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": f"enclave.dev/{self.component}",
            "reportingInstance": self.instance[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            return await self.kube.create(resource_path("v1", "events", namespace=target), event)
        except FencedWriteError:
            log.info("event not posted: this replica no longer leads", extra={"reason": reason})
        except KubeError as err:
            log.warning("could not post event", extra={"reason": reason, "error": str(err)})
        except Exception:
            log.exception("could not post event", extra={"reason": reason})
        return None

    async def bump(self, event: JSON, count: int) -> bool:
        """Record that ``event`` (as :meth:`emit` returned it) happened ``count`` times in all, as kube's event
        recorder does for a repeat: one object whose ``count`` and ``lastTimestamp`` move. False on failure."""
        meta = event.get("metadata") or {}
        path = resource_path("v1", "events", namespace=meta.get("namespace"), name=meta.get("name"))
        try:
            await self.kube.merge_patch(path, {"count": count, "lastTimestamp": _now()})
        except KubeError as err:
            log.warning("could not update event", extra={"reason": event.get("reason"), "error": str(err)})
            return False
        return True

    async def warn_once(self, key: str, obj: JSON, reason: str, message: str, *, namespace: str | None = None) -> None:
        """A Warning about the object ``key`` names, unless the last one about it said the same (as posted: the
        message within :data:`MESSAGE_LIMIT`): a controller re-decides a broken object on every pass, and one
        Event per pass would bury the one that matters. Also logged, once. :meth:`fine` forgets ``key``, so the
        same problem coming back is said again."""
        said = (reason, clipped(message))
        if self._warned.get(key) == said:
            return
        self._warned[key] = said
        log.warning("object not ready", extra={"object": key, "reason": reason, "detail": said[1]})
        await self.emit(obj, "Warning", reason, message, namespace=namespace)

    def fine(self, key: str) -> None:
        """The object ``key`` names has no problem any more (see :meth:`warn_once`)."""
        self._warned.pop(key, None)

"""List-then-watch into memory: what level-based controllers reconcile from.

An informer keeps the current set of objects of one resource and calls ``on_change`` after every change. It
relists when the watch expires (410 Gone) or fails, so the cache converges even across apiserver restarts; a
controller that reconciles from the cache on every change is therefore level-based by construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from enclave_core.kube.rest import JSON, Kube, KubeError

log = logging.getLogger(__name__)


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class Informer:
    """The live set of one resource, kept current by a watch."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[str], None] | None = None,
        name: str = "",
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change or (lambda key: None)
        self.name = name or path
        self.items: dict[str, JSON] = {}
        self.synced = asyncio.Event()

    def get(self, key: str) -> JSON | None:
        return self.items.get(key)

    def values(self) -> list[JSON]:
        return list(self.items.values())

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                listing = await self.kube.list(
                    self.path, label_selector=self.label_selector, field_selector=self.field_selector
                )
                version = str(listing["metadata"]["resourceVersion"])
                fresh = {object_key(obj): obj for obj in listing.get("items", [])}
                changed = set(fresh) ^ set(self.items) | {
                    key for key in fresh.keys() & self.items.keys() if fresh[key] != self.items[key]
                }
                self.items = fresh
                self.synced.set()
                for key in sorted(changed):
                    self.on_change(key)
                backoff = 0.2
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except _WatchExpiredError:
                log.debug("watch expired; relisting", extra={"informer": self.name})
            except Exception as err:
                log.warning("watch failed; relisting", extra={"informer": self.name, "error": str(err)})
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)

    async def _watch(self, version: str) -> str:
        async for event in self.kube.watch(
            self.path, resource_version=version, label_selector=self.label_selector, field_selector=self.field_selector
        ):
            kind, obj = event.get("type"), event.get("object", {})
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _WatchExpiredError
                raise KubeError(int(obj.get("code", 500)), obj.get("reason", ""), obj.get("message", ""), obj)
            version = obj.get("metadata", {}).get("resourceVersion", version)
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            if kind == "DELETED":
                self.items.pop(key, None)
            else:
                self.items[key] = obj
            with contextlib.suppress(Exception):
                self.on_change(key)
        return version


class _WatchExpiredError(Exception):
    """The watch's resourceVersion is too old: relist."""

"""The tenants write loop against :class:`enclave_testing.memorykube.MemoryKube`: caches filled by hand, every
write echoed back as the watch event kube-apiserver would send, rounds run one by one."""

from __future__ import annotations

import copy
from typing import Any

from tenants_helpers import namespace, tenant

from enclave_core.kube.events import EventRecorder
from enclave_core.kube.informer import Informer
from enclave_core.snapshots.hub import SnapshotHub
from enclave_tenants.controller import TENANTS_PATH, Settings, TenantsController
from enclave_testing.memorykube import MemoryKube

JSON = dict[str, Any]


class Loop:
    """One controller, leading, over a MemoryKube; ``echo`` plays its writes back into the caches."""

    def __init__(self, batch_size: int = 300, concurrency: int = 8) -> None:
        self.kube = MemoryKube()
        settings = Settings(batch_size=batch_size, concurrency=concurrency, resync_seconds=3600)
        self.controller = TenantsController(self.kube, settings, SnapshotHub("test"), EventRecorder(self.kube, "t"))
        self.controller.leading = True
        self._seen = 0

    def put(self, informer: Informer, obj: JSON) -> None:
        """An object arriving by watch: cached (trimmed) and its handler called."""
        obj = informer.transform(copy.deepcopy(obj)) if informer.transform else copy.deepcopy(obj)
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        informer.items[key] = obj
        informer.on_change(key)

    def remove(self, informer: Informer, key: str) -> None:
        informer.items.pop(key, None)
        informer.on_change(key)

    def tenancy(self, tenants: int, namespaces: int, owner: str = "alice") -> None:
        """``tenants`` tenants of one owner (a User), each with ``namespaces`` namespaces, as admission leaves
        them (tenant label set); nothing written yet."""
        for t in range(tenants):
            name = f"t{t:04d}"
            self.add_tenant(tenant(name, owners=[{"kind": "User", "name": owner}]))
            for n in range(namespaces):
                self.add_namespace(namespace(f"{name}-n{n:02d}", name))

    def add_tenant(self, obj: JSON) -> None:
        self.kube.objects[f"{TENANTS_PATH}/{obj['metadata']['name']}"] = copy.deepcopy(obj)
        self.put(self.controller.tenants, obj)

    def add_namespace(self, obj: JSON) -> None:
        obj.setdefault("metadata", {}).setdefault("uid", f"uid-{obj['metadata']['name']}")
        self.kube.objects[f"/api/v1/namespaces/{obj['metadata']['name']}"] = copy.deepcopy(obj)
        self.put(self.controller.namespaces, obj)

    def echo(self) -> list[tuple[str, str]]:
        """The writes since the last echo, each played back into the caches as its watch event."""
        calls = self.kube.calls[self._seen :]
        self._seen = len(self.kube.calls)
        for method, path in calls:
            informer, key = self._target(path.removesuffix("/status"))
            if informer is None:
                continue
            stored = self.kube.objects.get(path.removesuffix("/status"))
            if method == "DELETE" or stored is None:
                self.remove(informer, key)
            else:
                self.put(informer, stored)
        return [call for call in calls if call[0] != "GET"]

    def _target(self, path: str) -> tuple[Informer | None, str]:
        c = self.controller
        parts = path.strip("/").split("/")
        if "rolebindings" in parts:
            return c.bindings, f"{parts[-3]}/{parts[-1]}"
        if "rulestatuses" in parts:
            return c.rule_statuses, f"{parts[-3]}/{parts[-1]}"
        if "tenants" in parts:
            return c.tenants, parts[-1]
        if "tenantowners" in parts:
            return c.owners, parts[-1]
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            return c.namespaces, parts[-1]
        return None, ""

    async def round(self) -> tuple[bool, list[tuple[str, str]]]:
        """One round of the write loop, then its writes echoed: (work left, writes)."""
        more = await self.controller.reconcile()
        return more, self.echo()

    async def settle(self, limit: int = 1000) -> int:
        """Rounds until one leaves nothing to do and wrote nothing; the number of rounds."""
        for rounds in range(1, limit + 1):
            more, writes = await self.round()
            if not more and not writes:
                return rounds
        raise AssertionError(f"the write loop did not settle in {limit} rounds")

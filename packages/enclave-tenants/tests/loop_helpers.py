"""The tenants write loop against :class:`enclave_testing.memorykube.MemoryKube`: caches filled by hand, every
write echoed back as the watch event kube-apiserver would send, rounds run one by one."""

from __future__ import annotations

import copy
from typing import Any

from tenants_helpers import namespace, tenant

from enclave_core.kube.events import EventRecorder
from enclave_core.kube.informer import Informer
from enclave_core.snapshots.hub import SnapshotHub
from enclave_tenants.caches import TENANTS_PATH
from enclave_tenants.controller import Settings, TenantsController
from enclave_testing.memorykube import Echo, MemoryKube

JSON = dict[str, Any]


class Loop:
    """One controller, leading, over a MemoryKube; ``echo`` plays its writes back into the caches."""

    def __init__(self, batch_size: int = 300, concurrency: int = 8) -> None:
        self.kube = MemoryKube()
        settings = Settings(batch_size=batch_size, concurrency=concurrency, resync_seconds=3600)
        self.controller = TenantsController(self.kube, settings, SnapshotHub("test"), EventRecorder(self.kube, "t"))
        self.controller.leading = True
        c = self.controller
        self.echo = Echo(
            self.kube,
            {
                "namespaces": c.namespaces,
                "rolebindings": c.bindings,
                "rulestatuses": c.rule_statuses,
                "tenants": c.tenants,
                "tenantowners": c.owners,
            },
        )

    def put(self, informer: Informer, obj: JSON) -> None:
        """An object arriving by watch: cached (trimmed) and its handler called."""
        self.echo.put(informer, obj)

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

    async def round(self) -> tuple[bool, list[tuple[str, str]]]:
        """One round of the write loop, then its writes echoed: (work left, writes)."""
        result = await self.controller.reconcile()
        return result.requeue_after == 0, self.echo()

    async def settle(self, limit: int = 1000) -> int:
        """Rounds until one leaves nothing to do and wrote nothing; the number of rounds."""
        for rounds in range(1, limit + 1):
            more, writes = await self.round()
            if not more and not writes:
                return rounds
        raise AssertionError(f"the write loop did not settle in {limit} rounds")

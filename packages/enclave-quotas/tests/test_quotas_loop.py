"""The custom quotas loop on :class:`enclave_testing.memorykube.MemoryKube`: it converges, a settled pass writes
nothing, and a quota whose writes failed is retried without a change (no control plane)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from enclave_quotas.controller import QuotasController, Settings
from enclave_quotas.discovery import ApiResource, Catalogue

from enclave_core import GROUP_VERSION
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import resource_path
from enclave_core.snapshots.hub import SnapshotHub
from enclave_testing.memorykube import Echo, Failure, MemoryKube, Outage, running
from enclave_testing.waiting import poll_async

CONFIGMAPS = ApiResource("", "v1", "ConfigMap", "configmaps", True)
QUOTA = resource_path(GROUP_VERSION, "customquotas", namespace="team", name="q")
LEDGERS = "enclave-system"


class Quotas:
    """A controller over a MemoryKube holding CustomQuota ``team/q`` (limit 10, counting ConfigMaps' ``.data.n``)
    and two ConfigMaps (2 and 3); discovery is given, every write echoed into the caches."""

    def __init__(self, fail: Failure | None = None) -> None:
        self.kube = MemoryKube(fail)
        self.controller = c = QuotasController(
            self.kube,
            Settings(namespace=LEDGERS, resync_seconds=3600),
            SnapshotHub("test"),
            EventRecorder(self.kube, "t"),
        )
        c.catalogue = Catalogue((CONFIGMAPS,), (("", "v1"),))
        c.discovered.set()
        informers = {"customquotas": c.quotas["CustomQuota"], "globalcustomquotas": c.quotas["GlobalCustomQuota"]}
        self.echo = Echo(self.kube, {**informers, "namespaces": c.namespaces, "quantityledgers": c.ledger_cache})

    async def seed(self) -> None:
        quota = {
            "metadata": {"name": "q", "namespace": "team", "generation": 1},
            "spec": {"limit": "10", "sources": [{"kind": "ConfigMap", "path": ".data.n"}]},
        }
        await self.kube.create(QUOTA.rpartition("/")[0], quota)
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": "team"}})
        for name, n in (("a", "2"), ("b", "3")):
            body = {"metadata": {"name": name, "namespace": "team"}, "data": {"n": n}}
            await self.kube.create("/api/v1/namespaces/team/configmaps", body)
        self.echo()
        self.echo.live()

    def converged(self) -> bool:
        status = self.kube.objects[QUOTA].get("status") or {}
        ledgers = [path for path in self.kube.objects if "/quantityledgers/" in path]
        return (status.get("usage") or {}).get("used") == "5" and len(ledgers) == 1


@asynccontextmanager
async def leading(quotas: Quotas) -> AsyncIterator[None]:
    quotas.controller.set_leading(True)
    try:
        async with running(quotas.controller.loop):
            yield
    finally:
        quotas.controller.close()


async def test_the_quotas_loop_converges_and_a_settled_pass_writes_nothing() -> None:
    quotas = Quotas()
    await quotas.seed()
    async with leading(quotas):
        await poll_async(quotas.converged, what="the quota counted and its ledger made")
        before = len(quotas.kube.writes())
        await quotas.controller.reconcile()
        assert quotas.kube.writes()[before:] == []


async def test_a_quota_whose_ledger_write_failed_is_retried_without_a_change() -> None:
    outage = Outage(lambda method, path: method == "POST" and "/quantityledgers/" in path)  # the ledger create
    quotas = Quotas(outage)
    await quotas.seed()
    async with leading(quotas):
        await poll_async(quotas.converged, what="the quota converged after a failed ledger write")
    assert outage.times[1] - outage.times[0] >= 1.0  # one quota's failure comes back within a second, not at the resync

"""The pools write loop on :class:`enclave_testing.memorykube.MemoryKube`: it converges, a settled pass writes
nothing, and a failed pass is retried by the runtime's loop (no control plane)."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import resource_path
from enclave_core.snapshots.hub import SnapshotHub
from enclave_pools.controller import POOLS_PATH, PoolsController, Settings
from enclave_pools.model import BOUND
from enclave_pools.resourcequotas import quota_name
from enclave_testing.memorykube import Echo, Failure, MemoryKube, Outage, running, settle
from enclave_testing.waiting import poll_async

JSON = dict[str, Any]
QUOTA = resource_path("v1", "resourcequotas", namespace="n1", name=quota_name("p"))
CLAIM = resource_path(GROUP_VERSION, "resourcepoolclaims", namespace="n1", name="c1")


class Pools:
    """A pools controller over a MemoryKube holding one pool (cpu 4), namespace ``n1`` and claim ``n1/c1``
    (cpu 2); every write echoed into the caches."""

    def __init__(self, fail: Failure | None = None) -> None:
        self.kube = MemoryKube(fail)
        self.controller = c = PoolsController(
            self.kube, Settings(resync_seconds=3600), SnapshotHub("test"), EventRecorder(self.kube, "test")
        )
        informers = {"resourcepools": c.pools, "resourcepoolclaims": c.claims, "namespaces": c.namespaces}
        self.echo = Echo(self.kube, {**informers, "resourcequotas": c.quotas})

    async def seed(self) -> None:
        pool = {
            "metadata": {"name": "p", "generation": 1},
            "spec": {"quota": {"hard": {"requests.cpu": "4"}}, "selectors": [{"matchLabels": {"team": "a"}}]},
        }
        claim = {
            "metadata": {"name": "c1", "namespace": "n1", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"pool": "p", "claim": {"requests.cpu": "2"}},
        }
        await self.kube.create(POOLS_PATH, pool)
        await self.kube.create("/api/v1/namespaces", {"metadata": {"name": "n1", "labels": {"team": "a"}}})
        await self.kube.create(CLAIM.rpartition("/")[0], claim)
        self.echo()

    def converged(self) -> bool:
        claim = self.kube.objects.get(CLAIM) or {}
        quota = self.kube.objects.get(QUOTA) or {}
        condition = (claim.get("status") or {}).get("condition") or {}
        return condition.get("reason") == BOUND and quota.get("spec", {}).get("hard") == {"requests.cpu": "2"}


def _errors() -> float:
    return REGISTRY.get_sample_value("enclave_pools_reconciles_total", {"result": "error"}) or 0.0


async def test_the_pools_loop_converges_and_a_settled_pass_writes_nothing() -> None:
    pools = Pools()
    await pools.seed()
    await settle(pools.controller.reconcile, pools.echo)
    assert pools.converged()
    stored = pools.kube.objects[f"{POOLS_PATH}/p"]
    assert names.POOL_FINALIZER in stored["metadata"]["finalizers"]
    assert [record["name"] for record in stored["status"]["claims"]["n1"]] == ["c1"]
    result = await pools.controller.reconcile()
    assert pools.echo() == []
    assert result.requeue_after is None


async def test_a_failed_pools_pass_backs_off_and_is_retried() -> None:
    outage = Outage(lambda method, _: method in ("PATCH", "PUT"))  # the first pass's first write: the finalizer
    pools = Pools(outage)
    await pools.seed()
    pools.echo.live()
    errors = _errors()
    loop = pools.controller.loops
    loop.set_leading(True)
    async with running(loop):
        await poll_async(pools.converged, what="the pool converged after a failed pass")
    assert _errors() == errors + 1
    assert outage.times[1] - outage.times[0] >= 0.5  # the backoff, not the next change, brought the retry

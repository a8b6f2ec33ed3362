"""The global quotas write loop on :class:`enclave_testing.memorykube.MemoryKube`: it converges, a settled pass
writes nothing, and a failed pass is retried by the runtime's loop (no control plane)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from enclave_globalquotas import naming
from enclave_globalquotas.controller import QUOTAS_PATH, GlobalQuotasController, Settings
from enclave_globalquotas.ledger import quota_ledger_name
from prometheus_client import REGISTRY

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.api.meta import ObjectRef
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import resource_path
from enclave_core.ledger import LedgerClient
from enclave_core.ledger.resources import ResourceHold, reserve_resources
from enclave_core.quantity import Quantity
from enclave_core.snapshots.hub import SnapshotHub
from enclave_testing.memorykube import Echo, Failure, MemoryKube, Outage, running, settle
from enclave_testing.waiting import poll_async

LEDGERS = "enclave-system"


LEDGER = resource_path(GROUP_VERSION, "quantityledgers", namespace=LEDGERS, name=quota_ledger_name("shared"))


def _quota(namespace: str) -> str:
    return resource_path("v1", "resourcequotas", namespace=namespace, name=naming.resource_quota_name("shared"))


class GlobalQuotas:
    """A controller over a MemoryKube holding GlobalResourceQuota ``shared`` (pods 10) selecting namespaces of
    team a (``x``, ``y``; not ``z``); every write echoed into the caches."""

    def __init__(self, fail: Failure | None = None) -> None:
        self.kube = MemoryKube(fail)
        settings = Settings(resync_seconds=3600, namespace=LEDGERS)
        self.controller = c = GlobalQuotasController(
            self.kube, settings, SnapshotHub("test"), EventRecorder(self.kube, "test")
        )
        informers = {"globalresourcequotas": c.quotas, "namespaces": c.namespaces, "tenants": c.tenants}
        informers |= {"resourcequotas": c.resource_quotas, "quantityledgers": c.ledgers}
        self.echo = Echo(self.kube, {**informers, "rulestatuses": c.rule_statuses})

    async def seed(self) -> None:
        quota = {
            "metadata": {"name": "shared", "generation": 1},
            "spec": {"quota": {"hard": {"pods": "10"}}, "namespaceSelectors": [{"matchLabels": {"team": "a"}}]},
        }
        await self.kube.create(QUOTAS_PATH, quota)
        for name, team in (("x", "a"), ("y", "a"), ("z", "b")):
            await self.kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"team": team}}})
        self.echo()

    def converged(self) -> bool:
        return (
            _quota("x") in self.kube.objects
            and _quota("y") in self.kube.objects
            and LEDGER in self.kube.objects
            and "conditions" in (self.kube.objects[f"{QUOTAS_PATH}/shared"].get("status") or {})
        )


def _errors() -> float:
    return REGISTRY.get_sample_value("enclave_globalquotas_reconciles_total", {"result": "error"}) or 0.0


async def test_the_globalquotas_loop_converges_and_a_settled_pass_writes_nothing() -> None:
    quotas = GlobalQuotas()
    await quotas.seed()
    await settle(quotas.controller.reconcile, quotas.echo)
    assert quotas.converged()
    assert _quota("z") not in quotas.kube.objects
    labels = quotas.kube.objects[_quota("x")]["metadata"]["labels"]
    assert labels[names.MANAGED_BY] == names.GLOBALQUOTAS_MANAGER
    await quotas.controller.reconcile()
    assert quotas.echo() == []


async def test_a_failed_globalquotas_pass_backs_off_and_is_retried() -> None:
    # The first pass's ResourceQuota writes (x and y, side by side) fail: that pass fails.
    outage = Outage(lambda method, path: method != "GET" and "/resourcequotas/" in path, count=2)
    quotas = GlobalQuotas(outage)
    await quotas.seed()
    quotas.echo.live()
    errors = _errors()
    loop = quotas.controller.loops
    loop.set_leading(True)
    async with running(loop):
        await poll_async(quotas.converged, what="the quota converged after a failed pass")
    assert _errors() == errors + 1
    assert outage.times[2] - outage.times[0] >= 0.5  # the backoff, not the next change, brought the retry


async def _report(quotas: GlobalQuotas, namespace: str, pods: int) -> None:
    """What kube-controller-manager's resourcequota controller (or kube-apiserver's charge) writes."""
    status = {"hard": {"pods": "10"}, "used": {"pods": str(pods)}}
    await quotas.kube.merge_patch(f"{_quota(namespace)}/status", {"status": status})


def _ledger_block(quotas: GlobalQuotas) -> dict[str, Any]:
    return dict((quotas.kube.objects[LEDGER].get("status") or {}).get("resourceQuota") or {})


PODS = {"pods": Quantity.parse("1")}


def _holding(hold: ResourceHold) -> Callable[[QuantityLedgerStatus | None], object]:
    """Admission's step: ``hold`` taken on the ledger, under pods 10."""
    return lambda status: reserve_resources(status, hold, {"pods": Quantity.parse("10")}, now=datetime.now(UTC))


async def _initialised() -> GlobalQuotas:
    """The controller converged, both namespaces reported empty, the ledger initialised."""
    quotas = GlobalQuotas()
    await quotas.seed()
    await settle(quotas.controller.reconcile, quotas.echo)
    for namespace in ("x", "y"):
        await _report(quotas, namespace, 0)
    quotas.echo()
    await settle(quotas.controller.reconcile, quotas.echo)
    assert _ledger_block(quotas).get("initialized")
    return quotas


async def _held_and_stored(quotas: GlobalQuotas, *, echo_first: bool = False) -> None:
    """Admission holds pods ``p1`` and ``p2`` in ``y`` and both are stored; ``echo_first``: only the first
    one's writes reach the controller's caches."""
    ledgers = LedgerClient(quotas.kube, LEDGERS)
    for name in ("p1", "p2"):
        ref = ObjectRef(api_version="v1", kind="Pod", name=name, namespace="y")
        await ledgers.update(quota_ledger_name("shared"), _holding(ResourceHold(f"request-{name}", ref, PODS)))
        pod = {"metadata": {"name": name, "namespace": "y"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        await quotas.kube.create(resource_path("v1", "pods", namespace="y"), pod)
        if echo_first and name == "p1":
            quotas.echo()


async def test_a_reservation_settles_only_into_a_count_that_holds_its_object() -> None:
    """Two pods held in ``y`` are stored, and ``y``'s ResourceQuota reports 1: kube-controller-manager recounted
    ``y`` (after a ``hard`` change) before its informer had seen the first pod, and the second pod's charge
    raised that figure to 1. The controller never saw the report at 2, so nothing went down for it to count.
    Settling both reservations into the report gave the ledger 1 of 2 pods, and the unit out twice (seen
    loaded run: 6 services under ``services: 5``). Settling goes through a count of the namespace."""
    quotas = await _initialised()
    await _held_and_stored(quotas)
    await _report(quotas, "y", 1)
    quotas.echo()
    await settle(quotas.controller.reconcile, quotas.echo)

    block = _ledger_block(quotas)
    assert not block.get("reservations")
    assert block["allocated"] == {"pods": "2"}


async def test_a_create_the_count_lists_is_not_held_on_top_of_it() -> None:
    """``p1`` settles, so ``y`` is counted; ``p2`` was reserved and stored too, but the controller's ledger copy
    (its watch) does not show that reservation yet. The count lists ``p2``, so the fold (on the ledger as
    written, after the conflict) drops it with the count instead of holding it on top: 2 pods, not 3."""
    quotas = await _initialised()
    await _held_and_stored(quotas, echo_first=True)  # p2's reservation never reaches the controller's watch
    quotas.echo.seen = len(quotas.kube.calls)
    await _report(quotas, "y", 2)
    stored = quotas.kube.objects[_quota("y")]
    quotas.echo.put(quotas.controller.resource_quotas, stored)
    quotas.echo.seen = len(quotas.kube.calls)
    await quotas.controller.reconcile()

    block = _ledger_block(quotas)
    assert not block.get("reservations")
    assert block["allocated"] == {"pods": "2"}

"""Custom quota decisions on hand-built targets, with ledgers in an in-memory store that enforces
resourceVersions (the real control plane's concurrency is proven in tests/integration/quotas)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from admission_helpers import ALICE, make_state, request

from enclave_admission.quotas.validation import validate, validate_quota
from enclave_admission.review import Decision
from enclave_admission.state import State
from enclave_core.api.ledger import QuantityLedgerStatus, TargetRef
from enclave_core.kube.rest import JSON, KubeError
from enclave_core.ledger import LedgerClient, new_ledger
from enclave_core.snapshots.quotas import QuotaEntry, QuotaTargets, TargetSource

MEMORY = ".spec.containers[*].resources.requests.memory"


class Store:
    """QuantityLedgers with kube-apiserver's optimistic concurrency on PUT .../status."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.version = 0

    def add(self, name: str, allocated: str = "0") -> None:
        ledger = new_ledger(TargetRef(kind="CustomQuota", name=name, namespace="team"), "enclave-system")
        ledger.metadata.name = name
        ledger.status = QuantityLedgerStatus(allocated=allocated, reserved="0")
        self.version += 1
        body = ledger.to_k8s()
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = body

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.objects[name]["status"])

    async def get_or_none(self, path: str) -> JSON | None:
        found = self.objects.get(path.rsplit("/", 1)[1])
        return copy.deepcopy(found) if found else None

    async def replace(self, path: str, body: JSON) -> JSON:
        await asyncio.sleep(0)
        stored = self.objects.get(path.split("/")[-2])
        if stored is None:
            raise KubeError(404, "NotFound", path)
        if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "modified")
        stored["status"] = copy.deepcopy(body["status"])
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(stored)


def configmaps(op: str = "count", **fields: Any) -> TargetSource:
    return TargetSource(group="", version="v1", kind="ConfigMap", resource="configmaps", op=op, **fields)


def pods(**fields: Any) -> TargetSource:
    return TargetSource(group="", version="v1", kind="Pod", resource="pods", **fields)


def setup(store: Store, *quotas: QuotaEntry) -> State:
    state = make_state([])
    state.set_quotas(QuotaTargets(quotas=list(quotas)))
    state.ledgers = LedgerClient(store, "enclave-system")  # type: ignore[arg-type]
    for entry in quotas:
        store.add(entry.ledger)
    return state


def configmap(name: str, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team", **({"labels": labels} if labels else {})},
    }


def pod(name: str, *memory: str) -> JSON:
    containers = [{"name": f"c{i}", "resources": {"requests": {"memory": m}}} for i, m in enumerate(memory)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"containers": containers},
    }


async def decide(state: State, operation: str, obj: JSON | None, old: JSON | None = None, **kw: Any) -> Decision:
    kind = (obj or old or {})["kind"]
    resource = "pods" if kind == "Pod" else "configmaps"
    outcome = validate(request(ALICE, operation, obj, old, resource=resource, kind=kind, namespace="team", **kw), state)
    return outcome if isinstance(outcome, Decision) else await outcome


def entry(name: str, limit: str, source: TargetSource, **fields: Any) -> QuotaEntry:
    return QuotaEntry(
        kind="CustomQuota",
        name=name,
        namespace="team",
        ledger=name,
        limit=limit,
        namespaces=["team"],
        sources=[source],
        **fields,
    )


async def test_count_admits_up_to_the_limit_and_names_the_numbers() -> None:
    store = Store()
    state = setup(store, entry("cm", "2", configmaps()))
    assert (await decide(state, "CREATE", configmap("a"))).allowed
    assert (await decide(state, "CREATE", configmap("b"))).allowed
    denied = await decide(state, "CREATE", configmap("c"))
    assert not denied.allowed
    assert denied.reason == "QuotaExceeded"
    assert "CustomQuota team/cm exceeded: requested 1, used 0, reserved 2, limit 2" in denied.message
    assert store.status("cm")["allocated"] == "2"


async def test_objects_of_other_namespaces_and_kinds_pass_without_a_write() -> None:
    store = Store()
    state = setup(store, entry("cm", "0", configmaps()))
    other = validate(
        request(ALICE, "CREATE", configmap("x"), resource="configmaps", kind="ConfigMap", namespace="else"), state
    )
    assert isinstance(other, Decision)
    assert other.allowed


async def test_a_failed_later_quota_rolls_back_the_earlier_reservation() -> None:
    store = Store()
    state = setup(store, entry("a-roomy", "10", configmaps()), entry("b-full", "0", configmaps()))
    denied = await decide(state, "CREATE", configmap("x"))
    assert not denied.allowed
    assert "b-full" in denied.message
    assert store.status("a-roomy")["allocated"] == "0"
    assert not store.status("a-roomy").get("reservations")


async def test_dry_run_evaluates_without_writing() -> None:
    store = Store()
    state = setup(store, entry("cm", "1", configmaps()))
    before = store.version
    assert (await decide(state, "CREATE", configmap("a"), dry_run=True)).allowed
    assert store.version == before
    state.ledgers.observe(store.objects["cm"])  # type: ignore[union-attr]
    store.objects["cm"]["status"]["allocated"] = "1"
    state.ledgers.observe(store.objects["cm"])  # type: ignore[union-attr]
    assert not (await decide(state, "CREATE", configmap("b"), dry_run=True)).allowed


class Unreachable(Store):
    """kube-apiserver (or its etcd) away: every read and write fails the way the REST client reports it."""

    async def get_or_none(self, path: str) -> JSON | None:
        raise KubeError(503, "ServiceUnavailable", "etcdserver: request timed out")

    async def replace(self, path: str, body: JSON) -> JSON:
        raise KubeError(503, "ServiceUnavailable", "etcdserver: request timed out")


@pytest.mark.parametrize("dry_run", [False, True], ids=["create", "dry-run"])
async def test_an_unreachable_ledger_is_a_denial_naming_the_quota_not_an_error(dry_run: bool) -> None:
    state = setup(Unreachable(), entry("cm", "5", configmaps()))
    denied = await decide(state, "CREATE", configmap("a"), dry_run=dry_run)
    assert not denied.allowed
    assert denied.reason == "QuotaNotReady"
    assert "cm" in denied.message
    assert "retry" in denied.message or "could not be" in denied.message


async def test_path_sums_memory_over_containers_and_updates_hold_only_growth() -> None:
    store = Store()
    state = setup(store, entry("mem", "3Gi", pods(path=MEMORY)))
    assert (await decide(state, "CREATE", pod("p", "1Gi", "1Gi"))).allowed
    grown = await decide(state, "UPDATE", pod("p", "1Gi", "2Gi"), pod("p", "1Gi", "1Gi"))
    assert grown.allowed
    assert store.status("mem")["allocated"] == "3Gi"
    shrunk = validate(
        request(ALICE, "UPDATE", pod("p", "1Gi"), pod("p", "2Gi"), resource="pods", kind="Pod", namespace="team"), state
    )
    assert isinstance(shrunk, Decision)  # nothing to hold: answered from memory
    assert shrunk.allowed


async def test_cel_usage_and_unreadable_usage() -> None:
    store = Store()
    source = pods(cel="object.spec.containers.map(c, quantity(c.resources.requests.memory))")
    state = setup(store, entry("mem", "1Gi", source), entry("path", "10Gi", pods(path=MEMORY)))
    assert not (await decide(state, "CREATE", pod("big", "1Gi", "1Mi"))).allowed
    unreadable = await decide(state, "CREATE", {**pod("none"), "spec": {"containers": [{"name": "c"}]}})
    assert not unreadable.allowed
    assert unreadable.reason == "QuotaUsageUnreadable"


async def test_selectors_and_scope() -> None:
    from enclave_core.api.quotas import SourceSelector
    from enclave_core.selectors import LabelSelector

    store = Store()
    source = configmaps(selectors=[SourceSelector(match_labels={"count": "me"})])
    state = setup(store, entry("sel", "0", source, scope_selectors=[LabelSelector(match_labels={"team": "a"})]))
    assert (await decide(state, "CREATE", configmap("a", {"count": "me"}))).allowed  # out of scope
    assert (await decide(state, "CREATE", configmap("b", {"team": "a"}))).allowed  # not selected
    assert not (await decide(state, "CREATE", configmap("c", {"team": "a", "count": "me"}))).allowed


async def test_delete_leaves_a_pending_delete_hint() -> None:
    store = Store()
    state = setup(store, entry("cm", "5", configmaps()))
    assert (await decide(state, "DELETE", None, configmap("a"))).allowed
    hints = store.status("cm")["pendingDeletes"]
    assert hints[0]["objectRef"]["name"] == "a"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"limit": 1, "sources": [{"kind": "Pod", "op": "count", "path": ".spec"}]}, "spec.sources[0].path"),
        ({"limit": 1, "sources": [{"kind": "Pod", "op": "count", "cel": "1"}]}, "spec.sources[0].cel"),
        (
            {"limit": 1, "sources": [{"kind": "Pod", "path": ".a", "cel": "quantity('1')"}]},
            "spec.sources[0]: set path or cel",
        ),
        ({"limit": 1, "sources": [{"kind": "Pod", "path": ".spec[["}]}, "spec.sources[0].path"),
        ({"limit": 1, "sources": [{"kind": "Pod", "cel": "object.("}]}, "spec.sources[0].cel"),
        (
            {"limit": 1, "sources": [{"kind": "Pod", "op": "count", "selectors": [{"fieldSelectors": ["$[[["]}]}]},
            "spec.sources[0].selectors[0].fieldSelectors[0]",
        ),
    ],
)
def test_quota_specs_that_cannot_work_are_refused_naming_the_field(spec: JSON, field: str) -> None:
    obj = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "CustomQuota",
        "metadata": {"name": "q", "namespace": "team"},
        "spec": spec,
    }
    decision = validate_quota(
        request(
            ALICE, "CREATE", obj, resource="customquotas", group="enclave.dev", kind="CustomQuota", namespace="team"
        ),
        make_state([]),
    )
    assert not decision.allowed
    assert field in decision.message


def test_a_limit_below_usage_is_refused() -> None:
    old: JSON = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "CustomQuota",
        "metadata": {"name": "q", "namespace": "team"},
        "spec": {"limit": 10, "sources": [{"kind": "Pod", "op": "count"}]},
        "status": {"usage": {"used": "4"}},
    }
    new = copy.deepcopy(old)
    new["spec"]["limit"] = 3
    decision = validate_quota(
        request(
            ALICE,
            "UPDATE",
            new,
            old,
            resource="customquotas",
            group="enclave.dev",
            kind="CustomQuota",
            namespace="team",
        ),
        make_state([]),
    )
    assert not decision.allowed
    assert decision.reason == "LimitBelowUsage"
    assert "spec.limit 3 is below the current usage 4" in decision.message

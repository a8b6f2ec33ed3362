"""The pure plan: selection, hard = usage + shared headroom, drift, stale ResourceQuotas, rule quotas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from enclave_globalquotas import naming
from enclave_globalquotas.ledger import IN_FLIGHT, Deferrals, in_flight, ledger_body, newer, object_path
from enclave_globalquotas.naming import rule_quota_name, rule_status_quota_name
from enclave_globalquotas.plan import build_plan, drift_patch
from enclave_globalquotas.rules import build_rule_plan, drifted
from enclave_globalquotas.status import quota_status, replacing_patch

from enclave_core.api import names
from enclave_core.api.ledger import QuantityLedger, QuantityLedgerStatus, ResourceQuotaLedger
from enclave_core.api.meta import ObjectRef
from enclave_core.ledger.resources import (
    ResourceHold,
    ResourceRefusal,
    fold_resources,
    reserve_resources,
    rollback_resources,
)
from enclave_core.quantity import Quantity
from enclave_core.resourcequota import resource_quota_problems

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def grq(name: str, hard: dict[str, Any], selectors: list[dict[str, Any]] | None = None, **quota: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 2},
        "spec": {"quota": {"hard": hard, **quota}, "namespaceSelectors": selectors or [{"matchLabels": {"team": "a"}}]},
    }


def ns(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def rq(namespace: str, quota: str, hard: dict[str, str], used: dict[str, str] | None, rv: str = "10") -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": naming.resource_quota_name(quota),
            "namespace": namespace,
            "resourceVersion": rv,
            "labels": {names.MANAGED_BY: names.GLOBALQUOTAS_MANAGER, names.GLOBALQUOTA_LABEL: quota},
        },
        "spec": {"hard": hard},
    }
    if used is not None:
        body["status"] = {"hard": hard, "used": used}
    return body


NAMESPACES = {"x": ns("x", team="a"), "y": ns("y", team="a"), "z": ns("z", team="b")}


def key(namespace: str, quota: str) -> str:
    return f"{namespace}/{naming.resource_quota_name(quota)}"


def test_hard_is_each_namespace_usage_plus_the_shared_headroom() -> None:
    rqs = {
        key("x", "q"): rq("x", "q", {"pods": "10", "requests.cpu": "2"}, {"pods": "3", "requests.cpu": "500m"}),
        key("y", "q"): rq("y", "q", {"pods": "10", "requests.cpu": "2"}, {"pods": "1", "requests.cpu": "1"}),
    }
    plan = build_plan([grq("q", {"pods": 10, "requests.cpu": "2"})], NAMESPACES, rqs, ledger_namespace="enclave")
    quota = plan.quotas["q"]
    assert quota.namespaces == ["x", "y"]
    assert quota.initialized
    assert quota.used == {"pods": Quantity.parse(4), "requests.cpu": Quantity.parse("1500m")}
    assert quota.desired["x"]["spec"]["hard"] == {"pods": "9", "requests.cpu": "1"}
    assert quota.desired["y"]["spec"]["hard"] == {"pods": "7", "requests.cpu": "1500m"}
    view = plan.snapshot.by_namespace["x"][0]
    assert view.ledger_name == "globalresourcequota.q"
    assert view.used == {"pods": "4", "requests.cpu": "1500m"}


def test_over_use_leaves_no_headroom_and_unreported_namespaces_wait() -> None:
    rqs = {key("x", "q"): rq("x", "q", {"pods": "2"}, {"pods": "5"})}
    quota = build_plan([grq("q", {"pods": 2})], NAMESPACES, rqs, ledger_namespace="e").quotas["q"]
    assert quota.desired["x"]["spec"]["hard"] == {"pods": "5"}
    assert quota.desired["y"]["spec"]["hard"] == {"pods": "0"}
    assert not quota.initialized
    assert quota.reported == {"x"}
    status = quota_status(quota, [], NOW)
    assert status["total"]["available"] == {"pods": "0"}
    assert [c["reason"] for c in status["conditions"]] == ["WaitingForUsage"]


def test_selectors_are_ored_and_an_absent_list_selects_nothing() -> None:
    both = grq("q", {"pods": 1}, [{"matchLabels": {"team": "a"}}, {"matchLabels": {"team": "b"}}])
    assert build_plan([both], NAMESPACES, {}, ledger_namespace="e").quotas["q"].namespaces == ["x", "y", "z"]
    everything = grq("q", {"pods": 1}, [{}])
    assert build_plan([everything], NAMESPACES, {}, ledger_namespace="e").quotas["q"].namespaces == ["x", "y", "z"]
    none = grq("q", {"pods": 1})
    none["spec"].pop("namespaceSelectors")
    assert build_plan([none], NAMESPACES, {}, ledger_namespace="e").quotas["q"].namespaces == []


def test_stale_resource_quotas_go_but_an_invalid_spec_keeps_its_own() -> None:
    rqs = {key("z", "q"): rq("z", "q", {"pods": "1"}, {"pods": "0"}), key("x", "gone"): rq("x", "gone", {}, {})}
    plan = build_plan([grq("q", {"pods": 1})], NAMESPACES, rqs, ledger_namespace="e")
    assert plan.stale == sorted([key("x", "gone"), key("z", "q")])
    bad = build_plan([grq("q", {"gpus": 1})], NAMESPACES, rqs, ledger_namespace="e")
    assert bad.stale == [key("x", "gone")]
    assert "spec.quota.hard[gpus]" in bad.quotas["q"].problems[0].message
    assert bad.snapshot.quotas[0].valid is False


def test_drift_patch_restores_hard_and_removes_added_resources() -> None:
    quota = build_plan([grq("q", {"pods": 4})], NAMESPACES, {}, ledger_namespace="e").quotas["q"]
    desired = quota.desired["x"]
    assert drift_patch(desired, desired) is None
    live = {**desired, "spec": {"hard": {"pods": "4000m", "secrets": "3"}}}
    assert drift_patch(live, desired) == {"spec": {"hard": {"secrets": None}}}


def test_resource_quota_problems_name_the_field() -> None:
    assert resource_quota_problems({"pods": 1, "requests.cpu": "1", "count/deployments.apps": 2}, None, None) == []
    problems = resource_quota_problems(
        {"pods": "1.5", "gpus": 1, "requests.cpu": "1"}, ["BestEffort", "Sometimes"], [("Terminating", "In", ["x"])]
    )
    text = "\n".join(problems)
    assert "spec.quota.hard[pods]: must be a whole number" in text
    assert "spec.quota.hard[gpus]: unknown resource name" in text
    assert "spec.quota.scopes[0]: scope BestEffort cannot constrain requests.cpu" in text
    assert "spec.quota.scopes[1]: unsupported scope 'Sometimes'" in text
    assert "scopeSelector.matchExpressions[0].operator: must be Exists" in text


def test_rule_quotas_select_the_rules_tenant_namespaces() -> None:
    tenant = {
        "metadata": {"name": "acme", "uid": "t-1"},
        "spec": {
            "rules": [
                {"namespaceSelector": {"matchLabels": {"stage": "dev"}}, "quota": [{"name": "c", "hard": {"pods": 3}}]}
            ]
        },
    }
    plan = build_rule_plan([tenant], {"acme-rule0-old": {"metadata": {"ownerReferences": [{"kind": "Tenant"}]}}})
    body = plan.desired["acme-rule0-c"]
    assert body["spec"]["namespaceSelectors"] == [
        {
            "matchLabels": {"stage": "dev"},
            "matchExpressions": [{"key": "enclave.dev/tenant", "operator": "In", "values": ["acme"]}],
        }
    ]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "t-1"
    assert plan.stale == ["acme-rule0-old"]
    live = {**body, "spec": {**body["spec"], "quota": {"hard": {"pods": "3"}}}}
    assert not drifted(live, body)
    assert drifted({**body, "spec": {**body["spec"], "quota": {"hard": {"pods": 4}}}}, body)


def test_rule_status_quotas_select_their_namespace_and_belong_to_its_tenant() -> None:
    tenant = {"metadata": {"name": "acme", "uid": "t-1"}, "spec": {}}
    status = {
        "metadata": {"name": "default", "namespace": "acme-dev"},
        "spec": [{}, {"quota": [{"name": "c", "hard": {"pods": 3}}]}],
    }
    stray = {"metadata": {"name": "default", "namespace": "loose"}, "spec": [{"quota": [{"name": "c", "hard": {}}]}]}
    old = {"metadata": {"labels": {}, "ownerReferences": [{"kind": "Tenant", "name": "acme"}]}}
    plan = build_rule_plan([tenant], {"old": old}, [status, stray], {"acme-dev": "acme"})
    name = rule_status_quota_name("acme-dev", 1, "c")
    assert list(plan.desired) == [name]  # the stray namespace is no tenant's: nothing for it
    body = plan.desired[name]
    assert body["spec"]["namespaceSelectors"] == [
        {
            "matchExpressions": [
                {"key": "enclave.dev/tenant", "operator": "In", "values": ["acme"]},
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["acme-dev"]},
            ]
        }
    ]
    assert body["metadata"]["ownerReferences"][0]["name"] == "acme"
    assert plan.stale == ["old"]
    # a spec that does not parse keeps what the namespace had
    kept = {**old, "metadata": {**old["metadata"], "labels": {names.RULE_QUOTA_NAMESPACE_LABEL: "acme-dev"}}}
    broken = {**status, "spec": [{"quota": "many"}]}
    assert build_rule_plan([tenant], {name: kept}, [broken], {"acme-dev": "acme"}).stale == []


def test_rule_status_quota_names_never_meet_tenant_rule_quota_names() -> None:
    assert rule_status_quota_name("a", 0, "rule0-x") != rule_quota_name("rulestatus.a.rule0", 0, "x")
    assert rule_status_quota_name("n" * 63, 15, "e" * 63).startswith("rulestatus.")
    assert len(rule_status_quota_name("n" * 63, 15, "e" * 63 + "x" * 190)) <= 253


def test_replacing_patch_nulls_what_left() -> None:
    old = {"namespaceUsage": {"a": {"used": {"pods": "1"}}, "b": {"used": {}}}, "namespaceCount": 2}
    new = {"namespaceUsage": {"a": {"used": {"pods": "2"}}}, "namespaceCount": 1}
    assert replacing_patch(old, new) == {
        "namespaceUsage": {"a": {"used": {"pods": "2"}}, "b": None},
        "namespaceCount": 1,
    }


def _ledger(used: dict[str, str], initialized: bool = True) -> QuantityLedgerStatus:
    return QuantityLedgerStatus(
        resource_quota=ResourceQuotaLedger(used=used, allocated=used, reserved={}, initialized=initialized)
    )


def _hold(uid: str, namespace: str, **usage: int) -> ResourceHold:
    ref = ObjectRef(api_version="v1", kind="Service", name=uid, namespace=namespace)
    return ResourceHold(id=uid, object_ref=ref, usage={k: Quantity.parse(v) for k, v in usage.items()})


def test_reservations_take_the_last_units_once() -> None:
    hard = {"services": Quantity.parse(5)}
    status = _ledger({"services": "4"})
    first = reserve_resources(status, _hold("r1", "a", services=1), hard, now=NOW)
    assert isinstance(first, QuantityLedgerStatus)
    assert first.resource_quota is not None
    assert first.resource_quota.allocated == {"services": "5"}
    refused = reserve_resources(first, _hold("r2", "b", services=1), hard, now=NOW)
    assert isinstance(refused, ResourceRefusal)
    assert "services: requested 1" in refused.describe("q")
    assert reserve_resources(first, _hold("r1", "a", services=1), hard, now=NOW) is None  # a retry
    assert isinstance(
        reserve_resources(_ledger({}, False), _hold("r", "a", services=1), hard, now=NOW), ResourceRefusal
    )
    back = rollback_resources(first, "r1")
    assert back is not None
    assert back.resource_quota is not None
    assert back.resource_quota.allocated == {"services": "4"}
    assert not back.resource_quota.reservations


def test_fold_drops_settled_and_lapsed_reservations() -> None:
    hard = {"services": Quantity.parse(5)}
    status = reserve_resources(_ledger({"services": "1"}), _hold("r1", "a", services=1), hard, now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    settled_ids: set[str] = set()

    def settled(reservation: Any) -> bool:
        return reservation.id in settled_ids

    def fold(used: int, now: datetime) -> QuantityLedgerStatus:
        return fold_resources(
            status,
            used={"services": Quantity.parse(used)},
            namespaces=["a"],
            initialized=True,
            generation=1,
            settled=settled,
            now=now,
        )

    held = fold(1, NOW).resource_quota
    assert held is not None
    assert held.allocated == {"services": "2"}
    assert held.reserved == {"services": "1"}
    settled_ids.add("r1")  # the object exists: the namespace's ResourceQuota read after it includes it
    charged = fold(2, NOW).resource_quota
    assert charged is not None
    assert charged.allocated == {"services": "2"}
    assert not charged.reservations
    settled_ids.clear()
    lapsed = fold(1, NOW + timedelta(minutes=5)).resource_quota
    assert lapsed is not None
    assert lapsed.allocated == {"services": "1"}
    # Past expiresAt with its object stored but not yet in a count: held, or its unit would be free twice.
    kept = fold_resources(
        status,
        used={"services": Quantity.parse(1)},
        namespaces=["a"],
        initialized=True,
        generation=1,
        settled=settled,
        stored=lambda reservation: reservation.id == "r1",
        now=NOW + timedelta(minutes=5),
    ).resource_quota
    assert kept is not None
    assert kept.allocated == {"services": "2"}


def test_a_young_unsettled_reservation_marks_its_namespace_in_flight() -> None:
    """While a create is between admission and storage its namespace's ResourceQuota is left alone: a hard
    change would start kube-controller-manager's recount, which can miss the charged, not yet stored object."""
    hard = {"services": Quantity.parse(5)}
    status = reserve_resources(_ledger({"services": "0"}), _hold("r1", "a", services=1), hard, now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    status = reserve_resources(status, _hold("r2", "b", services=1), hard, now=NOW - IN_FLIGHT)
    assert isinstance(status, QuantityLedgerStatus)
    ledger = QuantityLedger.model_validate(
        {**ledger_body("q", "uid-q", "enclave-system"), "status": status.model_dump(by_alias=True, mode="json")}
    )
    # r2 is as old as the window: its object never came, so it defers nothing any more.
    assert in_flight([ledger], set(), now=NOW) == {("q", "a")}
    assert in_flight([ledger], {"r1"}, now=NOW) == set()  # r1's object exists
    assert in_flight([ledger], set(), now=NOW + IN_FLIGHT) == set()


def test_a_namespace_that_is_never_quiet_is_still_patched_every_ten_seconds() -> None:
    deferrals = Deferrals(limit=10.0)
    busy, other = ("q", "a"), ("q", "b")
    assert deferrals.hold({busy}, 0.0) == {busy}
    assert deferrals.hold({busy, other}, 9.0) == {busy, other}
    assert deferrals.hold({busy, other}, 10.0) == {other}  # a's ten seconds are up: patched this pass
    assert deferrals.hold({busy, other}, 11.0) == {busy, other}  # and held back again from here
    assert deferrals.hold({busy}, 12.0) == {busy}  # b went quiet
    assert deferrals.hold({other}, 13.0) == {other}  # b's deferral starts over


def test_object_paths_and_the_newer_copy() -> None:
    status = reserve_resources(
        _ledger({"services": "0"}), _hold("r1", "a", services=1), {"services": Quantity.parse(1)}, now=NOW
    )
    assert isinstance(status, QuantityLedgerStatus)
    assert status.resource_quota is not None
    reservation = (status.resource_quota.reservations or [])[0]
    assert object_path(reservation) == "/api/v1/namespaces/a/services/r1"
    old, new = {"metadata": {"resourceVersion": "9"}}, {"metadata": {"resourceVersion": "10"}}
    assert newer(old, new) is new
    assert newer(new, None) is new

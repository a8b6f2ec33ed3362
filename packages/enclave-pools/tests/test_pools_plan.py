"""The binding rules of the pools plan, on hand-built caches (no control plane)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from enclave_core.quantity import Quantity
from enclave_pools import model, resourcequotas
from enclave_pools import plan as p
from enclave_pools.status import claim_current, claim_patch, claim_status, pool_status

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pool(name: str, hard: dict[str, Any], *, claims: list[JSON] | None = None, **spec: Any) -> JSON:
    status: JSON = {}
    if claims:
        status["claims"] = {}
        for entry in claims:
            status["claims"].setdefault(entry["namespace"], []).append(entry)
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": {"quota": {"hard": hard}, "selectors": [{"matchLabels": {"team": "a"}}], **spec},
        "status": status,
    }


def claim(namespace: str, name: str, amounts: dict[str, Any], *, pool_name: str = "p", second: int = 0) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "generation": 1,
            "creationTimestamp": f"2026-01-01T00:00:{second:02d}Z",
        },
        "spec": {"pool": pool_name, "claim": amounts},
    }


def ns(name: str, team: str = "a") -> JSON:
    return {"metadata": {"name": name, "labels": {"team": team}}}


def record(c: JSON) -> JSON:
    meta = c["metadata"]
    return {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"], "claims": c["spec"]["claim"]}


NAMESPACES = [ns("n1"), ns("n2"), ns("other", team="b")]


def test_claims_bind_in_creation_order_while_they_fit() -> None:
    claims = [
        claim("n2", "late", {"requests.cpu": "2"}, second=3),
        claim("n1", "first", {"requests.cpu": "2"}, second=1),
        claim("n1", "second", {"requests.cpu": "1"}, second=2),
    ]
    plan = p.build_plan([pool("p", {"requests.cpu": "4"})], claims, NAMESPACES)
    verdicts = plan.verdicts
    assert verdicts["n1/first"].reason == model.BOUND
    assert verdicts["n1/second"].reason == model.BOUND
    assert verdicts["n2/late"].reason == model.POOL_EXHAUSTED
    assert "requests.cpu requested 2, available 1" in verdicts["n2/late"].message
    pool_plan = plan.pools["p"]
    assert pool_plan.quotas["n1"]["hard"] == {"requests.cpu": "3"}
    assert pool_plan.quotas["n2"]["hard"] == {}
    assert pool_plan.exhaustions == {"requests.cpu": (Quantity.parse("1"), Quantity.parse("2"))}
    assert "other" not in pool_plan.quotas


def test_without_ordered_queue_a_smaller_later_claim_passes_a_waiting_one() -> None:
    claims = [
        claim("n1", "big", {"requests.cpu": "3"}, second=1),
        claim("n1", "small", {"requests.cpu": "1"}, second=2),
    ]
    committed = claim("n2", "held", {"requests.cpu": "2"})
    pools = [pool("p", {"requests.cpu": "4"}, claims=[record(committed)])]
    plan = p.build_plan(pools, [*claims, committed], NAMESPACES)
    assert plan.verdicts["n1/big"].reason == model.POOL_EXHAUSTED
    assert plan.verdicts["n1/small"].reason == model.BOUND


def test_ordered_queue_blocks_later_claims_for_the_same_resources_only() -> None:
    claims = [
        claim("n1", "big", {"requests.cpu": "3"}, second=1),
        claim("n1", "small", {"requests.cpu": "1"}, second=2),
        claim("n1", "pods", {"pods": "1"}, second=3),
    ]
    committed = claim("n2", "held", {"requests.cpu": "2"})
    pools = [pool("p", {"requests.cpu": "4", "pods": "5"}, claims=[record(committed)], config={"orderedQueue": True})]
    plan = p.build_plan(pools, [*claims, committed], NAMESPACES)
    assert plan.verdicts["n1/small"].reason == model.QUEUE_EXHAUSTED
    assert "queued behind n1/big for requests.cpu" in plan.verdicts["n1/small"].message
    assert plan.verdicts["n1/pods"].reason == model.BOUND


def test_a_queued_claims_status_names_only_its_own_tenants_claims() -> None:
    """The pool is shared by two tenants: what blocks a claim of tenant solar is named when it is solar's and
    counted when it is oil's (a claim's status is for its namespace's users)."""

    def tenant_ns(name: str, tenant: str) -> JSON:
        return {"metadata": {"name": name, "labels": {"team": "a", "enclave.dev/tenant": tenant}}}

    namespaces = [tenant_ns("oil-a", "oil"), tenant_ns("solar-a", "solar"), tenant_ns("solar-b", "solar")]
    claims = [
        claim("oil-a", "secret-project", {"requests.cpu": "3"}, second=1),
        claim("solar-b", "big", {"requests.memory": "3Gi"}, second=2),
        claim("solar-a", "small", {"requests.cpu": "1", "requests.memory": "1Gi"}, second=3),
    ]
    committed = claim("oil-a", "held", {"requests.cpu": "2", "requests.memory": "2Gi"})
    hard = {"requests.cpu": "4", "requests.memory": "4Gi"}
    pools = [pool("p", hard, claims=[record(committed)], config={"orderedQueue": True})]
    plan = p.build_plan(pools, [*claims, committed], namespaces)
    message = plan.verdicts["solar-a/small"].message
    assert plan.verdicts["solar-a/small"].reason == model.QUEUE_EXHAUSTED
    assert "queued behind solar-b/big, 1 claim outside your tenant for requests.cpu, requests.memory" in message
    assert "oil" not in message
    assert "secret-project" not in message


def test_a_released_claim_makes_room_for_the_next_waiting_one() -> None:
    held = claim("n1", "held", {"requests.cpu": "4"}, second=1)
    waiting = claim("n2", "waiting", {"requests.cpu": "3"}, second=2)
    pools = [pool("p", {"requests.cpu": "4"}, claims=[record(held)])]
    assert p.build_plan(pools, [held, waiting], NAMESPACES).verdicts["n2/waiting"].reason == model.POOL_EXHAUSTED
    plan = p.build_plan(pools, [waiting], NAMESPACES)  # held was deleted
    assert plan.verdicts["n2/waiting"].reason == model.BOUND
    assert plan.pools["p"].quotas["n1"]["hard"] == {}
    assert plan.pools["p"].quotas["n2"]["hard"] == {"requests.cpu": "3"}


def test_twenty_claims_against_room_for_ten_bind_exactly_ten() -> None:
    claims = [claim("n1", f"c{i:02d}", {"requests.cpu": "1"}, second=i) for i in range(20)]
    plan = p.build_plan([pool("p", {"requests.cpu": "10"})], claims, NAMESPACES)
    bound = sorted(key for key, verdict in plan.verdicts.items() if verdict.bound)
    assert bound == [f"n1/c{i:02d}" for i in range(10)]


def test_defaults_and_defaults_zero_shape_the_provisioned_quota() -> None:
    c = claim("n1", "c", {"requests.cpu": "1"})
    spec: JSON = {"defaults": {"pods": "3"}, "config": {"defaultsZero": True}}
    plan = p.build_plan(
        [pool("p", {"requests.cpu": "4", "requests.memory": "1Gi", "pods": "10"}, **spec)], [c], NAMESPACES
    )
    assert plan.pools["p"].quotas["n1"]["hard"] == {"pods": "3", "requests.cpu": "1", "requests.memory": "0"}
    assert plan.pools["p"].quotas["n2"]["hard"] == {"pods": "3", "requests.cpu": "0", "requests.memory": "0"}
    # defaults do not count toward the allocation
    assert model.fmt(plan.pools["p"].claimed()) == {"requests.cpu": "1"}


def test_scopes_are_copied_into_the_quota() -> None:
    spec: JSON = {"quota": {"hard": {"pods": "4"}, "scopes": ["NotBestEffort"]}}
    raw = pool("p", {})
    raw["spec"].update(spec)
    plan = p.build_plan([raw], [], NAMESPACES)
    assert plan.pools["p"].quotas["n1"] == {"hard": {}, "scopes": ["NotBestEffort"]}


def test_claims_that_cannot_bind_say_why() -> None:
    claims = [
        claim("other", "unselected", {"requests.cpu": "1"}),
        claim("n1", "gpu", {"requests.nvidia.com/gpu": "1"}),
        claim("n1", "ghost", {"requests.cpu": "1"}, pool_name="nope"),
        claim("n1", "negative", {"requests.cpu": "-1"}),
        claim("n1", "typo", {"cpus": "1"}),
    ]
    verdicts = p.build_plan([pool("p", {"requests.cpu": "4"})], claims, NAMESPACES).verdicts
    assert verdicts["other/unselected"].reason == model.NAMESPACE_NOT_SELECTED
    assert verdicts["n1/gpu"].reason == model.RESOURCE_NOT_OFFERED
    assert verdicts["n1/ghost"].reason == model.POOL_NOT_FOUND
    assert verdicts["n1/negative"].reason == model.INVALID_SPEC
    assert "spec.claim[requests.cpu]" in verdicts["n1/negative"].message
    assert "unknown resource name 'cpus'" in verdicts["n1/typo"].message


def test_an_invalid_pool_binds_nothing_and_keeps_its_quotas() -> None:
    held = claim("n1", "held", {"requests.cpu": "1"})
    raw = pool("p", {"requests.cpu": "x1"}, claims=[record(held)])
    plan = p.build_plan([raw], [held, claim("n2", "new", {"requests.cpu": "1"})], NAMESPACES)
    assert plan.pools["p"].problems
    assert plan.verdicts["n1/held"].bound
    assert plan.verdicts["n2/new"].reason == model.POOL_INVALID
    assert resourcequotas.stale_quotas(plan, [_quota("p", "n1")]) == []


def test_resize_applies_when_it_fits_and_waits_otherwise() -> None:
    held = claim("n1", "held", {"requests.cpu": "3"})
    other = claim("n2", "other", {"requests.cpu": "1"})
    pools = [
        pool("p", {"requests.cpu": "4"}, claims=[{**record(held), "claims": {"requests.cpu": "2"}}, record(other)])
    ]
    plan = p.build_plan(pools, [held, other], NAMESPACES)
    assert plan.verdicts["n1/held"].reason == model.BOUND
    grown = claim("n1", "held", {"requests.cpu": "4"})
    plan = p.build_plan(pools, [grown, other], NAMESPACES)
    assert plan.verdicts["n1/held"].reason == model.RESIZE_PENDING
    assert plan.verdicts["n1/held"].allocation == {"requests.cpu": Quantity.parse("2")}


def test_a_recreated_claim_of_the_same_name_is_not_the_bound_one() -> None:
    old = claim("n1", "c", {"requests.cpu": "4"})
    new = claim("n1", "c", {"requests.cpu": "4"})
    new["metadata"]["uid"] = "uid-new"
    plan = p.build_plan([pool("p", {"requests.cpu": "4"}, claims=[record(old)])], [new], NAMESPACES)
    assert plan.verdicts["n1/c"].bound
    assert list(plan.pools["p"].records) == ["uid-new"]


def _quota(pool_name: str, namespace: str) -> JSON:
    return {
        "metadata": {
            "name": resourcequotas.quota_name(pool_name),
            "namespace": namespace,
            "ownerReferences": [{"kind": "ResourcePool", "uid": f"uid-{pool_name}"}],
        },
        "spec": {"hard": {}},
        "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "500m"}},
    }


def test_quotas_of_gone_pools_and_unselected_namespaces_are_stale() -> None:
    plan = p.build_plan([pool("p", {"requests.cpu": "4"})], [], NAMESPACES)
    stale = resourcequotas.stale_quotas(plan, [_quota("p", "n1"), _quota("p", "other"), _quota("gone", "n1")])
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in stale] == [
        ("other", "enclave-pool-p"),
        ("n1", "enclave-pool-gone"),
    ]


def test_snapshot_holds_committed_bindings_and_quota_usage() -> None:
    held = claim("n1", "held", {"requests.cpu": "1"})
    plan = p.build_plan(
        [pool("p", {"requests.cpu": "4"}, claims=[record(held)])],
        [held, claim("n2", "new", {"requests.cpu": "1"})],
        NAMESPACES,
    )
    snap = p.snapshot(plan, [_quota("p", "n1")])
    view = snap.by_name["p"]
    assert view.claimed == {"requests.cpu": "1"}
    assert view.available == {"requests.cpu": "3"}
    assert view.quotas["n1"].used == {"requests.cpu": "500m"}
    assert [b.name for b in snap.bound] == ["held"]
    assert [v.name for v in snap.selecting["n1"]] == ["p"]


def test_status_of_pool_and_claims() -> None:
    held = claim("n1", "held", {"requests.cpu": "1"})
    waiting = claim("n2", "waiting", {"requests.cpu": "9"})
    plan = p.build_plan([pool("p", {"requests.cpu": "4"})], [held, waiting], NAMESPACES)
    status = pool_status(plan.pools["p"], problems=[], now=NOW)
    assert status["allocation"] == {
        "hard": {"requests.cpu": "4"},
        "used": {"requests.cpu": "1"},
        "available": {"requests.cpu": "3"},
    }
    assert status["claimCount"] == 1
    assert status["claims"]["n1"][0]["name"] == "held"
    assert status["exhaustions"] == {"requests.cpu": {"available": "3", "requesting": "9"}}
    assert status["namespaces"] == ["n1", "n2"]
    assert status["namespaceCount"] == 2
    bound = claim_status(held, plan.verdicts["n1/held"], now=NOW)
    assert bound["pool"] == {"name": "p", "uid": "uid-p"}
    assert bound["condition"]["reason"] == "Bound"
    assert bound["condition"]["status"] == "True"
    refused = claim_status(waiting, plan.verdicts["n2/waiting"], now=NOW)
    assert refused["pool"] is None
    assert refused["condition"]["reason"] == "PoolExhausted"


def test_terminating_namespaces_get_no_quota() -> None:
    gone = ns("n2")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = p.build_plan([pool("p", {"requests.cpu": "4"})], [], [ns("n1"), gone])
    assert sorted(plan.pools["p"].quotas) == ["n1"]


def provisioned(namespace: str, pool_name: str, used: dict[str, Any]) -> JSON:
    """The pool's ResourceQuota in ``namespace`` as the informer holds it, counted by kube-controller-manager."""
    return {
        "metadata": {
            "name": resourcequotas.quota_name(pool_name),
            "namespace": namespace,
            "ownerReferences": [{"kind": "ResourcePool", "uid": f"uid-{pool_name}"}],
        },
        "status": {"used": used},
    }


def test_claim_usage_charges_defaults_first_then_claims_oldest_first_each_up_to_what_it_holds() -> None:
    q = Quantity.parse
    usage = resourcequotas.claim_usage(
        {"count/configmaps": q("1")},
        {"count/configmaps": "6", "requests.cpu": "500m"},
        [("old", {"count/configmaps": q("3")}), ("new", {"count/configmaps": q("4"), "limits.cpu": q("1")})],
    )
    # 6 used - 1 from the defaults = 5: the older claim is full (3), the newer one holds the rest (2); limits.cpu is
    # not reported by the quota, so it is left out rather than guessed as 0.
    assert usage == {"old": {"count/configmaps": q("3")}, "new": {"count/configmaps": q("2")}}


def test_claim_usage_never_exceeds_the_claim_nor_goes_negative() -> None:
    q = Quantity.parse
    over = resourcequotas.claim_usage({}, {"pods": "9"}, [("a", {"pods": q("2")})])
    assert over == {"a": {"pods": q("2")}}
    under_defaults = resourcequotas.claim_usage({"pods": q("5")}, {"pods": "3"}, [("a", {"pods": q("2")})])
    assert under_defaults == {"a": {"pods": q("0")}}
    assert resourcequotas.claim_usage({}, {"pods": "not a quantity"}, [("a", {"pods": q("2")})]) == {"a": {}}


def test_a_bound_claim_status_says_used_and_available_from_the_provisioned_quota() -> None:
    c = claim("n1", "c", {"count/configmaps": "4"})
    pools = [pool("p", {"count/configmaps": "10"}, claims=[record(c)], defaults={"count/configmaps": "1"})]
    plan = p.build_plan(pools, [c], NAMESPACES, quotas=[provisioned("n1", "p", {"count/configmaps": "3"})])
    verdict = plan.verdicts["n1/c"]
    status = claim_status(c, verdict, now=NOW)
    assert status["allocation"] == {
        "hard": {"count/configmaps": "4"},
        "used": {"count/configmaps": "2"},
        "available": {"count/configmaps": "2"},
    }
    stored = {**c, "status": status}
    assert claim_current(stored, verdict)
    # Usage moves: the stored status is no longer current, and the new one says the new amounts.
    moved = p.build_plan(pools, [stored], NAMESPACES, quotas=[provisioned("n1", "p", {"count/configmaps": "9"})])
    assert not claim_current(stored, moved.verdicts["n1/c"])
    assert claim_status(stored, moved.verdicts["n1/c"], now=NOW)["allocation"]["available"] == {"count/configmaps": "0"}


def test_a_quota_not_counted_yet_or_owned_by_another_pool_gives_no_used() -> None:
    c = claim("n1", "c", {"pods": "2"})
    pools = [pool("p", {"pods": "5"}, claims=[record(c)])]
    for quotas in ([], [provisioned("n1", "p", {})], [provisioned("n1", "elsewhere", {"pods": "1"})]):
        verdict = p.build_plan(pools, [c], NAMESPACES, quotas=quotas).verdicts["n1/c"]
        assert claim_status(c, verdict, now=NOW)["allocation"] == {"hard": {"pods": "2"}}


def test_the_claim_patch_nulls_what_the_stored_allocation_no_longer_says() -> None:
    stored = {"status": {"allocation": {"hard": {"pods": "2", "services": "1"}, "used": {"pods": "1"}}}}
    status = {"allocation": {"hard": {"pods": "2"}}, "pool": None}
    assert claim_patch(stored, status) == {
        "allocation": {"hard": {"pods": "2", "services": None}, "used": None},
        "pool": None,
    }


def test_a_scope_selector_is_copied_into_the_quota() -> None:
    """``quota.scopeSelector`` narrows the provisioned ResourceQuota as scopes do (kube-apiserver applies it)."""
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}]}
    raw = pool("p", {})
    raw["spec"].update({"quota": {"hard": {"pods": "4"}, "scopeSelector": selector}})
    plan = p.build_plan([raw], [], NAMESPACES)
    assert plan.pools["p"].quotas["n1"]["scopeSelector"] == selector

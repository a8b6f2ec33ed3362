"""ResourcePools and ResourcePoolClaims against the real control plane: the pools controller provisions the
ResourceQuotas kube-apiserver enforces, and admission fences the claims."""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, USER, USERS_GROUP, VERSION, Pools


def _pod(name: str, cpu: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1", "resources": resources}]},
    }


def _refused(call: Any, *fragments: str) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    body = str(caught.value.body or "")
    assert caught.value.status in (400, 403, 422), body
    for fragment in fragments:
        assert fragment in body, body
    return body


def test_claims_bind_in_order_and_the_quota_admits_exactly_the_claim(pools: Pools) -> None:
    token, (ns,) = pools.namespaces(1)
    pool = unique("cpu")
    pools.pool(pool, token, {"requests.cpu": "2", "limits.cpu": "2"}, config={"defaultsZero": True})
    poll(lambda: pools.quota_hard(ns, pool) == {"limits.cpu": "0", "requests.cpu": "0"}, what="zero quota")
    pools.claim(ns, "first", {"requests.cpu": "1", "limits.cpu": "1"}, pool=pool)
    assert pools.wait_reason(ns, "first", "Bound")["status"] == "True"
    # The namespace's quota grew by exactly the claim.
    assert pools.quota_hard(ns, pool) == {"limits.cpu": "1", "requests.cpu": "1"}
    claim = pools.get_claim(ns, "first")["status"]
    assert claim["pool"]["name"] == pool
    assert claim["allocation"]["hard"] == {"limits.cpu": "1", "requests.cpu": "1"}
    assert {c["type"]: c["status"] for c in claim["conditions"]} == {"Bound": "True", "Ready": "True"}

    # kube-apiserver admits a Pod that fits the claim and refuses one over it.
    core = client.CoreV1Api(pools.impersonate(USER, [USERS_GROUP]))
    poll(lambda: core.create_namespaced_pod(ns, _pod("fits", "1")), what="pod admitted within the claim")
    _refused(lambda: core.create_namespaced_pod(ns, _pod("over", "500m")), "exceeded quota")

    # The next claim does not fit: PoolExhausted naming what is missing; status shows the exhaustion.
    pools.claim(ns, "second", {"requests.cpu": "2"}, pool=pool)
    condition = pools.wait_reason(ns, "second", "PoolExhausted")
    assert condition["status"] == "False"
    assert "requests.cpu requested 2, available 1" in condition["message"]
    status = pools.get_pool(pool)["status"]
    assert status["exhaustions"] == {"requests.cpu": {"available": "1", "requesting": "2"}}
    assert status["allocation"]["used"] == {"limits.cpu": "1", "requests.cpu": "1"}
    assert status["claimCount"] == 1
    assert status["namespaces"] == [ns]

    # The bound claim is in use: it can be neither deleted nor shrunk below the Pod's usage.
    user = pools.as_user()
    _refused(
        lambda: user.delete_namespaced_custom_object(GROUP, VERSION, ns, "resourcepoolclaims", "first"),
        "still uses",
        "requests.cpu",
    )
    _refused(
        lambda: user.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "resourcepoolclaims", "first", {"spec": {"claim": {"requests.cpu": "500m"}}}
        ),
        "spec.claim",
        "cannot shrink",
    )
    # Free it: the claim can go, and the waiting one binds by itself.
    client.CoreV1Api(pools.kube).delete_namespaced_pod("fits", ns, grace_period_seconds=0)

    def deleted() -> bool:
        try:
            user.delete_namespaced_custom_object(GROUP, VERSION, ns, "resourcepoolclaims", "first")
        except ApiException as err:
            if err.status == 404:
                return True
            if "still uses" in str(err.body):
                return False  # the quota's usage has not dropped yet
            raise
        return True

    poll(deleted, what="claim deletable once unused")
    pools.wait_reason(ns, "second", "Bound")
    poll(lambda: pools.quota_hard(ns, pool) == {"limits.cpu": "0", "requests.cpu": "2"}, what="quota follows")


def test_ordered_queue_blocks_later_claims_for_the_same_resources(pools: Pools) -> None:
    token, (ns,) = pools.namespaces(1)
    pool = unique("queue")
    pools.pool(pool, token, {"requests.cpu": "2", "pods": "4"}, config={"orderedQueue": True})
    pools.claim(ns, "a-held", {"requests.cpu": "1"}, pool=pool)
    pools.wait_reason(ns, "a-held", "Bound")
    pools.claim(ns, "b-big", {"requests.cpu": "2"}, pool=pool)
    pools.wait_reason(ns, "b-big", "PoolExhausted")
    pools.claim(ns, "c-small", {"requests.cpu": "1"}, pool=pool)
    condition = pools.wait_reason(ns, "c-small", "QueueExhausted")
    assert f"queued behind {ns}/b-big for requests.cpu" in condition["message"]
    pools.claim(ns, "d-pods", {"pods": "1"}, pool=pool)
    pools.wait_reason(ns, "d-pods", "Bound")
    # Releasing the held claim serves the queue in order: b-big binds, c-small still waits.
    pools.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "resourcepoolclaims", "a-held")
    pools.wait_reason(ns, "b-big", "Bound")
    pools.wait_reason(ns, "c-small", "PoolExhausted")


def test_defaults_apply_to_every_selected_namespace_and_do_not_count(pools: Pools) -> None:
    token, names = pools.namespaces(2)
    pool = unique("defaults")
    pools.pool(
        pool,
        token,
        {"requests.cpu": "4", "requests.memory": "4Gi", "pods": "10"},
        defaults={"pods": "2"},
        config={"defaultsZero": True},
    )
    wanted = {"pods": "2", "requests.cpu": "0", "requests.memory": "0"}
    poll(lambda: all(pools.quota_hard(ns, pool) == wanted for ns in names), what="defaults in every namespace")
    status = pools.get_pool(pool)["status"]
    assert status["allocation"]["available"] == {"pods": "10", "requests.cpu": "4", "requests.memory": "4Gi"}
    assert status["namespaceCount"] == 2
    # Without defaultsZero only the defaults are set; the pool's scopes are the quota's.
    other = unique("plain")
    pools.pool(
        other,
        token,
        {"requests.cpu": "4"},
        defaults={"requests.cpu": "500m"},
        quota={"hard": {"requests.cpu": "4"}, "scopes": ["NotBestEffort"]},
    )
    poll(lambda: pools.quota_hard(names[0], other) == {"requests.cpu": "500m"}, what="plain defaults")
    quota = client.CoreV1Api(pools.kube).read_namespaced_resource_quota(f"enclave-pool-{other}", names[0])
    assert quota.spec.scopes == ["NotBestEffort"]


def test_twenty_concurrent_claims_against_room_for_ten_bind_exactly_ten(pools: Pools) -> None:
    token, names = pools.namespaces(2)
    pool = unique("race")
    pools.pool(pool, token, {"requests.cpu": "10"})
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            pools.claim(names[i % 2], f"c{i:02d}", {"requests.cpu": "1"}, pool=pool)
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    reasons = {f"{names[i % 2]}/c{i:02d}": pools.bound(names[i % 2], f"c{i:02d}")["reason"] for i in range(20)}
    assert sorted(reasons.values()).count("Bound") == 10, reasons
    assert sorted(reasons.values()).count("PoolExhausted") == 10, reasons
    status = pools.get_pool(pool)["status"]
    assert status["claimCount"] == 10
    assert status["allocation"]["used"] == {"requests.cpu": "10"}
    total = sum(int(pools.quota_hard(ns, pool).get("requests.cpu", "0")) for ns in names)
    assert total == 10


def test_a_claim_without_pool_is_assigned_by_the_tie_break(pools: Pools) -> None:
    token, (ns,) = pools.namespaces(1)
    full, roomy = f"a-{unique('full')}", f"b-{unique('roomy')}"
    pools.pool(full, token, {"requests.cpu": "1"})
    pools.pool(roomy, token, {"requests.cpu": "8"})
    pools.claim(ns, "filler", {"requests.cpu": "1"}, pool=full)
    pools.wait_reason(ns, "filler", "Bound")

    def assigned() -> str | None:
        created = pools.claim(ns, unique("auto"), {"requests.cpu": "2"})
        return str(created["spec"]["pool"])

    # The pool where the claim fits now wins over the alphabetically first one, which is full.
    assert poll(lambda: assigned() == roomy, timeout=10, what="assignment to the pool with room")


REFUSALS = [
    # (what a user tries, the fragments the refusal must contain)
    ("claim in a namespace no pool selects", "unselected", "does not select namespace"),
    ("claim naming a pool that does not exist", "ghost", "spec.pool"),
    ("claim for a resource the pool does not offer", "gpu", "spec.claim[requests.nvidia.com/gpu]"),
    ("negative quantity", "negative", "spec.claim[requests.cpu]"),
    ("malformed quantity (the CRD's quantity pattern)", "malformed", "spec.claim.requests.cpu"),
    ("unknown resource name", "typo", "unknown resource name 'cpus'"),
]


def test_refusals_name_the_field(pools: Pools) -> None:
    token, (ns,) = pools.namespaces(1)
    _, (elsewhere,) = pools.namespaces(1)
    pool = unique("fence")
    pools.pool(pool, token, {"requests.cpu": "2"})
    pools.claim(ns, "warm", {"requests.cpu": "1"}, pool=pool)  # waits until admission knows the pool
    pools.wait_reason(ns, "warm", "Bound")
    user = pools.as_user()
    bodies = {
        "unselected": (elsewhere, {"pool": pool, "claim": {"requests.cpu": "1"}}),
        "ghost": (ns, {"pool": unique("ghost"), "claim": {"requests.cpu": "1"}}),
        "gpu": (ns, {"pool": pool, "claim": {"requests.nvidia.com/gpu": "1"}}),
        "negative": (ns, {"pool": pool, "claim": {"requests.cpu": "-1"}}),
        "malformed": (ns, {"pool": pool, "claim": {"requests.cpu": "1.5.5"}}),
        "typo": (ns, {"pool": pool, "claim": {"cpus": "1"}}),
    }
    for what, key, fragment in REFUSALS:
        namespace, spec = bodies[key]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourcePoolClaim",
            "metadata": {"name": key},
            "spec": spec,
        }
        message = _refused(
            lambda namespace=namespace, body=body: user.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourcepoolclaims", body
            ),
            fragment,
        )
        assert ("denied the request" in message) != (key == "malformed"), what

    # A bound claim keeps its pool.
    _refused(
        lambda: user.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "resourcepoolclaims", "warm", {"spec": {"pool": unique("other")}}
        ),
        "spec.pool",
    )
    # The pool's hard cannot drop below what is claimed, nor lose a claimed resource; bad quantities refused.
    for hard, fragment in (
        ({"requests.cpu": "500m"}, "spec.quota.hard[requests.cpu]"),
        ({"pods": "4"}, "spec.quota.hard[requests.cpu]: removed"),
        ({"requests.cpu": "-2"}, "spec.quota.hard[requests.cpu]"),
    ):
        _refused(
            lambda hard=hard: user.replace_cluster_custom_object(
                GROUP,
                VERSION,
                "resourcepools",
                pool,
                {**pools.get_pool(pool), "spec": {**pools.get_pool(pool)["spec"], "quota": {"hard": hard}}},
            ),
            fragment,
        )


@pytest.mark.parametrize("delete_bound", [False, True])
def test_pool_deletion_releases_or_deletes_bound_claims(pools: Pools, delete_bound: bool) -> None:
    token, (ns,) = pools.namespaces(1)
    pool = unique("gone")
    pools.pool(pool, token, {"requests.cpu": "2"}, config={"deleteBoundResources": delete_bound})
    pools.claim(ns, "held", {"requests.cpu": "1"}, pool=pool)
    pools.wait_reason(ns, "held", "Bound")
    assert pools.get_pool(pool)["metadata"]["finalizers"] == ["enclave.dev/pool-cleanup"]
    pools.delete_pool(pool)

    def pool_gone() -> bool:
        try:
            pools.get_pool(pool)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(pool_gone, what="pool finalised")
    core = client.CoreV1Api(pools.kube)
    assert not [q for q in core.list_namespaced_resource_quota(ns).items if q.metadata.name == f"enclave-pool-{pool}"]
    if delete_bound:

        def claim_gone() -> bool:
            try:
                pools.get_claim(ns, "held")
            except ApiException as err:
                return bool(err.status == 404)
            return False

        poll(claim_gone, what="bound claim deleted with its pool")
    else:
        status = pools.get_claim(ns, "held")["status"]
        assert status["condition"]["reason"] == "PoolDeleted"
        assert status["condition"]["status"] == "False"
        assert status.get("pool") is None


def _metric_sum(pools: Pools, name: str) -> float:
    with urllib.request.urlopen(f"{pools.pools.probe_url}/metrics", timeout=5) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))


def test_a_settled_cluster_costs_no_writes(pools: Pools) -> None:
    """Level-based with nothing to do: a pass triggered by an unrelated change writes nothing."""
    token, (ns,) = pools.namespaces(1)
    pool = unique("quiet")
    pools.pool(pool, token, {"requests.cpu": "1"})
    pools.claim(ns, "settled", {"requests.cpu": "1"}, pool=pool)
    pools.wait_reason(ns, "settled", "Bound")
    pools.claim(ns, "waiting", {"requests.cpu": "1"}, pool=pool)
    pools.wait_reason(ns, "waiting", "PoolExhausted")

    def quiet() -> float | None:
        writes = _metric_sum(pools, "enclave_pools_writes_total")
        passes = _metric_sum(pools, "enclave_pools_reconciles_total")
        core = client.CoreV1Api(pools.kube)
        core.patch_namespace(ns, {"metadata": {"labels": {"touched": unique("t")}}})  # triggers a pass
        poll(lambda: _metric_sum(pools, "enclave_pools_reconciles_total") >= passes + 2, what="two more passes")
        return writes if _metric_sum(pools, "enclave_pools_writes_total") == writes else None

    poll(quiet, timeout=30, what="a pass without writes")


def test_a_pool_admission_never_saw_is_reported_not_crashed_on(pools: Pools) -> None:
    """The cluster admin (system:masters skips the hooks) writes a pool kube-apiserver would refuse as a quota:
    Ready=False InvalidSpec naming the field, a Warning Event, and the controller keeps serving other pools."""
    token, (ns,) = pools.namespaces(1)
    bad = unique("bad")
    pools.pool(bad, token, {"cpus": "4", "requests.cpu": "2"})
    status = pools.get_pool(bad)["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "InvalidSpec"
    assert "spec.quota.hard[cpus]" in ready["message"]

    def warned() -> bool:
        events = client.CoreV1Api(pools.kube).list_namespaced_event(
            pools.namespace, field_selector=f"involvedObject.name={bad}"
        )
        return any(e.reason == "InvalidSpec" and e.type == "Warning" for e in events.items)

    poll(warned, what="a Warning Event about the pool")
    pools.claim(ns, "waits", {"requests.cpu": "1"}, pool=bad)
    assert pools.wait_reason(ns, "waits", "PoolInvalid")["status"] == "False"
    good = unique("good")
    pools.pool(good, token, {"requests.cpu": "2"})
    pools.claim(ns, "binds", {"requests.cpu": "1"}, pool=good)
    pools.wait_reason(ns, "binds", "Bound")


def test_a_claim_shows_its_namespaces_use_of_what_it_holds(pools: Pools) -> None:
    """allocation.used/available follow the provisioned quota's count: the defaults absorb usage first, then the
    older claim, then the newer one; deleting objects gives it back."""
    token, (ns,) = pools.namespaces(1)
    pool = unique("usage")
    pools.pool(pool, token, {"count/secrets": "10"}, defaults={"count/secrets": "1"})
    pools.claim(ns, "a-older", {"count/secrets": "3"}, pool=pool)
    assert pools.bound(ns, "a-older")["reason"] == "Bound"
    pools.claim(ns, "b-newer", {"count/secrets": "4"}, pool=pool)
    assert pools.bound(ns, "b-newer")["reason"] == "Bound"
    core = client.CoreV1Api(pools.kube)

    def allocations(want: dict[str, tuple[str, str]]) -> bool:
        for name, (used, available) in want.items():
            allocation = (pools.get_claim(ns, name).get("status") or {}).get("allocation") or {}
            if allocation.get("used") != {"count/secrets": used}:
                return False
            if allocation.get("available") != {"count/secrets": available}:
                return False
        return True

    poll(lambda: allocations({"a-older": ("0", "3"), "b-newer": ("0", "4")}), timeout=30, what="nothing used")
    for i in range(5):
        core.create_namespaced_secret(ns, {"metadata": {"name": f"s{i}"}, "stringData": {"k": "v"}})
    # 5 secrets: 1 on the defaults, 3 on the older claim (full), 1 on the newer one.
    poll(lambda: allocations({"a-older": ("3", "0"), "b-newer": ("1", "3")}), timeout=30, what="five used")
    assert pools.get_claim(ns, "b-newer")["status"]["allocation"]["hard"] == {"count/secrets": "4"}
    for i in range(3):
        core.delete_namespaced_secret(f"s{i}", ns)
    poll(lambda: allocations({"a-older": ("1", "2"), "b-newer": ("0", "4")}), timeout=60, what="two used")

"""Pool and claim decisions from a hand-built ResourcePools snapshot: each row an attempt a user could make."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ALICE, review

from enclave_admission.pools import mutation, validation
from enclave_admission.review import AdmissionRequest
from enclave_admission.state import State
from enclave_core.resourcenames import quota_resource_problem
from enclave_core.snapshots.pools import BoundClaim, NamespaceQuota, PoolsSnapshot, PoolView

JSON = dict[str, Any]


def state() -> State:
    pools = PoolsSnapshot(
        pools=[
            PoolView(
                name="alpha",
                uid="uid-alpha",
                namespaces=["dev"],
                hard={"requests.cpu": "4"},
                claimed={"requests.cpu": "3"},
                available={"requests.cpu": "1"},
                quotas={"dev": NamespaceQuota(hard={"requests.cpu": "3"}, used={"requests.cpu": "2500m"})},
            ),
            PoolView(
                name="beta",
                uid="uid-beta",
                namespaces=["dev", "prod"],
                hard={"requests.cpu": "8", "pods": "9"},
                available={"requests.cpu": "8", "pods": "9"},
            ),
        ],
        bound=[BoundClaim(namespace="dev", name="held", uid="uid-held", pool="alpha", claims={"requests.cpu": "3"})],
    )
    result = State(expect_pools=True)
    result.set_pools(pools)
    return result


def claim(name: str, amounts: dict[str, Any], pool: str | None = "alpha", uid: str = "") -> JSON:
    spec: JSON = {"claim": amounts}
    if pool is not None:
        spec["pool"] = pool
    meta: JSON = {"name": name, "namespace": "dev"}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "enclave.dev/v1beta2", "kind": "ResourcePoolClaim", "metadata": meta, "spec": spec}


def request(operation: str, obj: JSON | None, old: JSON | None = None, namespace: str = "dev") -> AdmissionRequest:
    body = review(
        ALICE,
        operation,
        obj,
        old,
        resource="resourcepoolclaims",
        group="enclave.dev",
        kind="ResourcePoolClaim",
        namespace=namespace,
    )
    return AdmissionRequest.from_review(body)


HELD = claim("held", {"requests.cpu": "3"}, uid="uid-held")

REFUSED = [
    (
        "a namespace the pool does not select",
        request("CREATE", claim("c", {"requests.cpu": "1"}), namespace="qa"),
        "does not select namespace 'qa'",
    ),
    (
        "a pool that does not exist",
        request("CREATE", claim("c", {"requests.cpu": "1"}, pool="nope")),
        "spec.pool: ResourcePool 'nope' does not exist",
    ),
    (
        "a resource the pool does not offer",
        request("CREATE", claim("c", {"pods": "1"})),
        "spec.claim[pods]: ResourcePool alpha does not offer pods",
    ),
    (
        "a negative quantity",
        request("CREATE", claim("c", {"requests.cpu": "-1"})),
        "spec.claim[requests.cpu]: quantity must not be negative",
    ),
    (
        "an unknown resource name",
        request("CREATE", claim("c", {"cpus": "1"})),
        "spec.claim[cpus]: unknown resource name",
    ),
    ("an empty claim", request("CREATE", claim("c", {})), "spec.claim: must map at least one resource"),
    (
        "moving a bound claim to another pool",
        request("UPDATE", claim("held", {"requests.cpu": "3"}, pool="beta", uid="uid-held"), HELD),
        "spec.pool: claim held is bound to pool alpha",
    ),
    (
        "shrinking a bound claim below usage",
        request("UPDATE", claim("held", {"requests.cpu": "1"}, uid="uid-held"), HELD),
        "spec.claim: cannot shrink",
    ),
    (
        "deleting a bound claim in use (then claiming elsewhere)",
        request("DELETE", None, HELD),
        "still uses what it holds",
    ),
]


@pytest.mark.parametrize(("attempt", "req", "fragment"), REFUSED, ids=[row[0] for row in REFUSED])
def test_claim_refusals_name_the_field(attempt: str, req: AdmissionRequest, fragment: str) -> None:
    decision = validation.validate_claim(req, state())
    assert not decision.allowed, attempt
    assert fragment in decision.message


def test_claims_that_fit_the_fences_pass() -> None:
    s = state()
    assert validation.validate_claim(
        request("CREATE", claim("c", {"requests.cpu": "9"})), s
    ).allowed  # waits, not refused
    shrink = claim("held", {"requests.cpu": "2500m"}, uid="uid-held")
    assert validation.validate_claim(request("UPDATE", shrink, HELD), s).allowed
    other = claim("held", {"requests.cpu": "3"}, uid="uid-recreated")
    assert validation.validate_claim(request("DELETE", None, other), s).allowed  # not the bound object


def test_without_the_pools_component_claims_pass() -> None:
    assert validation.validate_claim(request("CREATE", claim("c", {"cpus": "1"})), State()).allowed


def _pool_request(operation: str, hard: dict[str, Any], defaults: dict[str, Any] | None = None) -> AdmissionRequest:
    spec: JSON = {"quota": {"hard": hard}}
    if defaults:
        spec["defaults"] = defaults
    obj = {"apiVersion": "enclave.dev/v1beta2", "kind": "ResourcePool", "metadata": {"name": "alpha"}, "spec": spec}
    old = {**obj, "spec": {"quota": {"hard": {"requests.cpu": "4"}}}}
    body = review(ALICE, operation, obj, old, resource="resourcepools", group="enclave.dev", kind="ResourcePool")
    return AdmissionRequest.from_review(body)


@pytest.mark.parametrize(
    ("hard", "defaults", "fragment"),
    [
        ({"requests.cpu": "2"}, None, "spec.quota.hard[requests.cpu]: 2 is below the 3 bound claims hold"),
        ({"pods": "2"}, None, "spec.quota.hard[requests.cpu]: removed"),
        ({"requests.cpu": "-4"}, None, "spec.quota.hard[requests.cpu]: must be greater than or equal to 0"),
        ({"pods": "1500m", "requests.cpu": "4"}, None, "spec.quota.hard[pods]: must be a whole number"),
        ({"requests.cpu": "4"}, {"memory.requests": "1"}, "spec.defaults[memory.requests]: unknown resource name"),
    ],
)
def test_pool_refusals_name_the_field(hard: dict[str, Any], defaults: dict[str, Any] | None, fragment: str) -> None:
    decision = validation.validate_pool(_pool_request("UPDATE", hard, defaults), state())
    assert not decision.allowed
    assert fragment in decision.message


def test_pool_growth_passes() -> None:
    assert validation.validate_pool(_pool_request("UPDATE", {"requests.cpu": "3", "pods": "1"}), state()).allowed


def test_assignment_prefers_a_pool_with_room_then_the_name() -> None:
    s = state()
    decision = mutation.mutate(request("CREATE", claim("c", {"requests.cpu": "2"}, pool=None)), s)
    assert decision.patch == ({"op": "add", "path": "/spec/pool", "value": "beta"},)
    decision = mutation.mutate(request("CREATE", claim("c", {"requests.cpu": "1"}, pool=None)), s)
    assert decision.patch == ({"op": "add", "path": "/spec/pool", "value": "alpha"},)
    refused = mutation.mutate(request("CREATE", claim("c", {"gpu.example.com/x": "1"}, pool=None)), s)
    assert not refused.allowed
    assert "spec.pool: no ResourcePool selects namespace 'dev' and offers gpu.example.com/x" in refused.message
    named = mutation.mutate(request("CREATE", claim("c", {"requests.cpu": "1"}, pool="beta")), s)
    assert named.allowed
    assert not named.patch


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("requests.cpu", True),
        ("count/deployments.apps", True),
        ("requests.nvidia.com/gpu", True),
        ("gold.storageclass.storage.k8s.io/requests.storage", True),
        ("hugepages-2Mi", True),
        ("requests.hugepages-1Gi", True),
        ("cpus", False),
        ("Bad_Domain/x", False),
        ("count/", False),
    ],
)
def test_quota_resource_names(name: str, ok: bool) -> None:
    assert (quota_resource_problem(name) == "") is ok


def test_metadata_changes_pass_even_when_the_pool_is_gone() -> None:
    orphan = claim("held", {"requests.cpu": "3"}, pool="deleted-pool", uid="uid-orphan")
    labelled = {**orphan, "metadata": {**orphan["metadata"], "labels": {"team": "a"}}}
    assert validation.validate_claim(request("UPDATE", labelled, orphan), state()).allowed
    changed = {**labelled, "spec": {**labelled["spec"], "claim": {"requests.cpu": "1"}}}
    assert not validation.validate_claim(request("UPDATE", changed, orphan), state()).allowed

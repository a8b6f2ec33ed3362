"""Pool and claim validation (``/resourcepools``, ``/resourcepoolclaims``): the fences around a pool's budget.

Decided from the ResourcePools snapshot (committed bindings and the usage kube-apiserver reports on each
provisioned ResourceQuota), with no I/O. Every refusal names the field it is about.

Claims:

* the amounts are quota resource names with non-negative quantities;
* the named pool exists, selects the claim's namespace and offers every resource claimed;
* a bound claim keeps its pool (also a CRD rule);
* a bound claim cannot shrink below what its namespace uses, nor be deleted while the namespace's usage needs
  it: otherwise a tenant could claim everything in namespace A, start workloads, delete the claim and claim
  again in namespace B, using the pool twice (Capsule's #1662).

Pools: ``spec.quota`` is one kube-apiserver accepts for a ResourceQuota (``enclave_core.resourcequota``: names,
non-negative and whole-unit quantities, scopes), ``spec.defaults`` holds quota resource names with non-negative
quantities, and ``hard`` never drops below what bound claims hold (nor loses a resource they hold).
"""

from __future__ import annotations

from collections.abc import Mapping

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.quantity import Quantity, parse_map
from enclave_core.resourcenames import resource_list_problems
from enclave_core.resourcequota import resource_quota_problems
from enclave_core.snapshots.pools import BoundClaim, PoolView

ZERO = Quantity(0)


def claim_problems(claim: object) -> list[str]:
    """What is wrong with a ``spec.claim`` value, each problem naming its field."""
    if not isinstance(claim, dict) or not claim:
        return ["spec.claim: must map at least one resource name to a quantity"]
    return resource_list_problems(claim, "spec.claim")


def validate_claim(request: AdmissionRequest, state: State) -> Decision:
    if not state.expect_pools or request.sub_resource:
        return Decision.allow("PoolsNotConfigured" if not state.expect_pools else "Allowed")
    if request.operation == "DELETE":
        return _delete_claim(request, state)
    if _spec_unchanged(request):
        return Decision.allow("SpecUnchanged")
    obj = request.obj or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    claim = spec.get("claim")
    problems = claim_problems(claim)
    if problems:
        return Decision.deny("InvalidClaim", "; ".join(problems))
    assert isinstance(claim, dict)
    name = str(spec.get("pool") or "")
    bound = _bound(request, state)
    if bound is not None and name != bound.pool:
        return Decision.deny(
            "PoolImmutable",
            f"spec.pool: claim {request.name} is bound to pool {bound.pool}; a bound claim cannot change pools "
            "(delete it and create a new claim instead)",
        )
    pool = state.pools.by_name.get(name)
    if pool is None:
        return Decision.deny("PoolNotFound", f"spec.pool: ResourcePool {name!r} does not exist")
    if bound is None and request.namespace not in pool.namespace_set:
        return Decision.deny(
            "NamespaceNotSelected",
            f"spec.pool: ResourcePool {name} does not select namespace {request.namespace!r}; a claim can only draw "
            "from a pool whose spec.selectors match its namespace",
        )
    if bound is None and pool.deleting:
        return Decision.deny("PoolDeleting", f"spec.pool: ResourcePool {name} is being deleted")
    offered = [key for key in sorted(claim) if key not in pool.hard]
    if offered:
        return Decision.deny(
            "ResourceNotOffered",
            "; ".join(
                f"spec.claim[{key}]: ResourcePool {name} does not offer {key} (spec.quota.hard)" for key in offered
            ),
        )
    if bound is not None:
        refusal = _shrink(request, pool, bound, parse_map(claim))
        if refusal is not None:
            return refusal
    return Decision.allow()


def _bound(request: AdmissionRequest, state: State) -> BoundClaim | None:
    """The claim's committed binding, when the snapshot has one for this very object (same uid)."""
    if request.old is None:
        return None
    bound = state.pools.bound_by_key.get(f"{request.namespace}/{request.name}")
    uid = (request.old.get("metadata") or {}).get("uid")
    if bound is None or (uid and bound.uid != uid):
        return None
    return bound


def _in_use(pool: PoolView, namespace: str, release: Mapping[str, Quantity]) -> list[str]:
    """Resources whose quota in ``namespace`` would drop below what the namespace uses if ``release`` were
    taken off it, as ``'requests.cpu: uses 2, the quota would drop to 1'``."""
    quota = pool.quotas.get(namespace)
    if quota is None:
        return []
    hard, used = parse_map(quota.hard), parse_map(quota.used)
    problems = []
    for key, amount in sorted(release.items()):
        if amount.sign() <= 0 or key not in hard:
            continue
        after = hard[key] - amount
        if used.get(key, ZERO) > after:
            problems.append(f"{key}: namespace {namespace} uses {used[key]}, the quota would drop to {after}")
    return problems


def _shrink(
    request: AdmissionRequest, pool: PoolView, bound: BoundClaim, wanted: dict[str, Quantity]
) -> Decision | None:
    held = parse_map(bound.claims)
    release = {key: amount - wanted.get(key, ZERO) for key, amount in held.items()}
    problems = _in_use(pool, request.namespace, release)
    if not problems:
        return None
    return Decision.deny(
        "ClaimInUse",
        "spec.claim: cannot shrink a bound claim below what its namespace uses ("
        + "; ".join(problems)
        + "); free the resources first",
    )


def _delete_claim(request: AdmissionRequest, state: State) -> Decision:
    bound = _bound(request, state)
    if bound is None:
        return Decision.allow()
    pool = state.pools.by_name.get(bound.pool)
    if pool is None:
        return Decision.allow()
    problems = _in_use(pool, request.namespace, parse_map(bound.claims))
    if problems:
        return Decision.deny(
            "ClaimInUse",
            f"claim {request.name} is bound to pool {pool.name} and its namespace still uses what it holds ("
            + "; ".join(problems)
            + "); free the resources first, then delete the claim",
        )
    return Decision.allow()


def _spec_unchanged(request: AdmissionRequest) -> bool:
    """An update that leaves ``spec`` alone (labels, annotations, finalizers) is never refused: it cannot
    break a fence, and refusing it would pin an object whose pool went away or was over-allocated."""
    return (
        request.operation == "UPDATE"
        and request.old is not None
        and request.obj is not None
        and request.old.get("spec") == request.obj.get("spec")
    )


def validate_pool(request: AdmissionRequest, state: State) -> Decision:
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return Decision.allow()
    if _spec_unchanged(request):
        return Decision.allow("SpecUnchanged")
    obj = request.obj or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    quota = spec.get("quota") if isinstance(spec.get("quota"), dict) else {}
    assert isinstance(quota, dict)
    hard = quota.get("hard") if isinstance(quota.get("hard"), dict) else {}
    defaults = spec.get("defaults") if isinstance(spec.get("defaults"), dict) else {}
    assert isinstance(hard, dict)
    assert isinstance(defaults, dict)
    scopes = quota.get("scopes") if isinstance(quota.get("scopes"), list) else None
    selector = quota.get("scopeSelector") if isinstance(quota.get("scopeSelector"), dict) else {}
    assert isinstance(selector, dict)
    requirements = [
        (str(r.get("scopeName", "")), str(r.get("operator", "")), list(r.get("values") or []))
        for r in selector.get("matchExpressions") or []
        if isinstance(r, dict)
    ]
    problems = resource_quota_problems(hard, scopes, requirements or None) + resource_list_problems(
        defaults, "spec.defaults"
    )
    if problems:
        return Decision.deny("InvalidPool", "; ".join(problems))
    if request.operation != "UPDATE" or not state.expect_pools:
        return Decision.allow()
    pool = state.pools.by_name.get(request.name)
    if pool is None:
        return Decision.allow()
    new_hard = parse_map(hard)
    below = [
        f"spec.quota.hard[{key}]: {new_hard.get(key, 'removed')} is below the {claimed} bound claims hold"
        for key, claimed in sorted(parse_map(pool.claimed).items())
        if claimed.sign() > 0 and (key not in new_hard or new_hard[key] < claimed)
    ]
    if below:
        return Decision.deny(
            "PoolBelowClaims",
            f"ResourcePool {pool.name}: " + "; ".join(below) + "; release or shrink claims first",
        )
    return Decision.allow()

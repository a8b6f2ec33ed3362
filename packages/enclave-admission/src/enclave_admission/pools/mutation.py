"""Claim mutation (``/resourcepoolclaims/mutate``): a claim created without ``spec.pool`` gets one.

The tie-break, documented in packages/enclave-pools/README.md: among the pools that select the claim's
namespace, are not being deleted and offer every resource the claim asks for, a pool where the claim fits
right now wins over one where it would wait; among equals, the pool whose name sorts first. The choice is made
once, at creation, from the ResourcePools snapshot, and written into the object, so the user sees it and the
controller never guesses.
"""

from __future__ import annotations

from enclave_admission.pools.validation import claim_problems
from enclave_admission.review import AdmissionRequest, Decision, pointer
from enclave_admission.state import State
from enclave_core.quantity import fits
from enclave_core.snapshots.pools import PoolView


def mutate(request: AdmissionRequest, state: State) -> Decision:
    if request.operation != "CREATE" or request.obj is None or not state.expect_pools:
        return Decision.allow()
    spec = request.obj.get("spec")
    if not isinstance(spec, dict) or spec.get("pool"):
        return Decision.allow()
    claim = spec.get("claim")
    problems = claim_problems(claim)
    if problems:
        return Decision.deny("InvalidClaim", "; ".join(problems))
    assert isinstance(claim, dict)
    chosen = choose_pool(state, request.namespace, claim)
    if chosen is None:
        return Decision.deny(
            "NoPool",
            f"spec.pool: no ResourcePool selects namespace {request.namespace!r} and offers "
            f"{', '.join(sorted(claim))}; name a pool in spec.pool or ask for resources a pool offers",
        )
    return Decision.mutate("PoolAssigned", [{"op": "add", "path": pointer("spec", "pool"), "value": chosen.name}])


def choose_pool(state: State, namespace: str, claim: dict[str, object]) -> PoolView | None:
    """The pool a claim without ``spec.pool`` is assigned to (see the module docstring), or None."""
    candidates = [
        pool for pool in state.pools.selecting.get(namespace, []) if not pool.deleting and set(claim) <= set(pool.hard)
    ]
    if not candidates:
        return None
    wanted = {key: value for key, value in claim.items() if isinstance(value, int | str)}
    fitting = [pool for pool in candidates if fits(wanted, pool.available)]
    return (fitting or candidates)[0]

"""ResourcePool (cluster-scoped) and ResourcePoolClaim (namespaced), served by the enclave-pools component.

A pool provisions one ResourceQuota, ``enclave-pool-<pool>``, into every namespace its ``selectors`` match, with
``hard`` = ``defaults`` plus the claims of that namespace it has bound. Claims bind oldest first (creation time,
then namespace, then name) while the pool has room; the pool's ``status.claims`` is the record of bindings.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from enclave_core.api.meta import (
    ApiModel,
    Condition,
    Count,
    Generation,
    KubeObject,
    LabelSelector,
    Name,
    StatusModel,
)
from enclave_core.api.quotas import QuotaSpec, QuotaTotals, ResourceList
from enclave_core.api.schema import REQUIRED, Rule, TypeExtras
from enclave_core.quantity import QuantityValue

__all__ = [
    "Allocation",
    "ClaimRef",
    "Exhaustion",
    "PoolConfig",
    "PoolRef",
    "ResourcePool",
    "ResourcePoolClaim",
    "ResourcePoolClaimSpec",
    "ResourcePoolClaimStatus",
    "ResourcePoolSpec",
    "ResourcePoolStatus",
]


class PoolConfig(ApiModel):
    """How a pool provisions quota and serves claims."""

    defaults_zero: bool = False
    """Every resource of `quota.hard` is 0 in each provisioned quota unless `defaults` says otherwise, so a
    namespace can use only what its claims (and the defaults) give it."""
    delete_bound_resources: bool = False
    """When the pool is deleted, its bound claims are deleted too; otherwise they are released (`Bound=False`,
    reason `PoolDeleted`) and stay. Either way the provisioned ResourceQuotas are removed first."""
    ordered_queue: bool = False
    """A claim that does not fit holds its place: later claims asking for any of the same resources wait behind
    it (`Bound=False`, reason `QueueExhausted`) even if they would fit. Without it a smaller later claim may bind
    while a larger earlier one waits (`PoolExhausted`)."""


class ResourcePoolSpec(ApiModel):
    """A cluster-level set of resources selected namespaces may claim from."""

    quota: QuotaSpec
    """Total resources of the pool (`hard`: the only resources claims may ask for), and the `scopes` and
    `scopeSelector` copied into every provisioned ResourceQuota."""
    config: Annotated[PoolConfig, REQUIRED] = Field(default_factory=PoolConfig)
    """Behaviour."""
    defaults: Annotated[dict[str, QuantityValue] | None, Field(max_length=128)] = None
    """What every selected namespace gets without a claim; not counted toward the pool's allocation."""
    selectors: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """Namespaces managed by the pool (selectors ORed; none selects no namespace)."""


Allocation = QuotaTotals
"""A pool's or a claim's amounts per resource: the same shape as a GlobalResourceQuota's totals."""


class ClaimRef(StatusModel):
    """A claim bound to the pool."""

    name: str
    """Name of the claim."""
    namespace: str
    """Namespace of the claim."""
    uid: str
    """UID of the claim."""
    claims: ResourceList | None = None
    """Resources claimed."""


class Exhaustion(StatusModel):
    """A resource the pool cannot serve in full."""

    available: QuantityValue | None = None
    """What is left."""
    requesting: QuantityValue | None = None
    """What queued claims ask for."""


class ResourcePoolStatus(StatusModel):
    """Observed state of a pool."""

    conditions: Annotated[list[Condition], REQUIRED] = Field(default_factory=list)
    """`Ready`: True (`Active`), or False with `InvalidSpec`, `ApplyFailed` (a quota could not be written) or
    `OverAllocated` (bound claims exceed `quota.hard`)."""
    allocation: Allocation | None = None
    """`hard` (`spec.quota.hard`), `used` (sum of the bound claims) and `available`."""
    claim_count: Count = 0
    """Number of bound claims."""
    claims: dict[str, list[ClaimRef]] | None = None
    """Bound claims per namespace: the record of bindings, written by the controller with the pool's
    resourceVersion (so two writers can never both spend the same room)."""
    exhaustions: dict[str, Exhaustion] | None = None
    """Resources some waiting claim lacks: what is `available` and what waiting claims are `requesting`."""
    namespace_count: Count = 0
    """Number of selected namespaces."""
    namespaces: list[str] | None = None
    """Sorted selected namespaces."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""


class ResourcePool(KubeObject):
    """Resources selected namespaces may claim from (cluster-scoped)."""

    kind: Literal["ResourcePool"] = "ResourcePool"
    spec: ResourcePoolSpec
    """Desired state."""
    status: ResourcePoolStatus | None = None
    """Observed state."""


class ResourcePoolClaimSpec(ApiModel):
    """A request for resources from a pool."""

    claim: Annotated[dict[str, QuantityValue], Field(min_length=1, max_length=128)]
    """Amount to claim per resource (ResourceQuota resource names the pool offers; non-negative). A bound claim
    may grow when the pool has room, and shrink, but never below what its namespace uses."""
    pool: Name
    """Name of the pool; immutable once the claim is bound (status.pool set). Left out at creation, admission
    assigns a pool that selects the namespace and offers every resource claimed: one where the claim fits now
    first, then by name."""


class PoolRef(StatusModel):
    """The pool a claim is bound to."""

    name: str
    """Name of the pool."""
    uid: str
    """UID of the pool."""


class ResourcePoolClaimStatus(StatusModel):
    """Observed state of a claim."""

    conditions: Annotated[list[Condition], REQUIRED] = Field(default_factory=list)
    """`Bound` and `Ready`. Reasons: `Bound`; waiting: `PoolExhausted`, `QueueExhausted` (the message says what
    is missing; the claim binds by itself when room appears); `ResizePending` (bound, the new amounts wait);
    refused: `PoolNotFound`, `NamespaceNotSelected`, `ResourceNotOffered`, `InvalidSpec`, `PoolInvalid`,
    `PoolDeleting`; released: `PoolDeleted`."""
    allocation: Allocation | None = None
    """Absent while not bound. `hard`: the amounts bound to this claim. `used`: the part of them the namespace
    uses, from `status.used` of the pool's ResourceQuota there (`enclave-pool-<pool>`, counted by
    kube-controller-manager): that usage is charged to the pool's `defaults` first, then to the namespace's
    claims on the pool oldest first, each up to its `hard`, so the claims' `used` add up to what the namespace
    uses beyond its defaults. `available`: `hard - used`, never negative. A resource the quota does not count
    yet is absent from `used` and `available`; both follow the quota within moments."""
    condition: Condition | None = None
    """Deprecated: use conditions (mirrors the `Bound` condition)."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""
    pool: PoolRef | None = None
    """The pool the claim is bound to; set means bound."""


class ResourcePoolClaim(KubeObject):
    """A namespaced request to claim resources from a ResourcePool."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="!has(oldSelf.status) || !has(oldSelf.status.pool) || self.spec.pool == oldSelf.spec.pool",
                message="spec.pool is immutable once the claim is bound (status.pool is set)",
                field_path=".spec.pool",
                reason="FieldValueForbidden",
            ),
        )
    )

    kind: Literal["ResourcePoolClaim"] = "ResourcePoolClaim"
    spec: ResourcePoolClaimSpec
    """Desired state."""
    status: ResourcePoolClaimStatus | None = None
    """Observed state."""

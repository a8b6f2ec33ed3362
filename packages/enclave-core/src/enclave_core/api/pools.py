"""ResourcePool (cluster-scoped) and ResourcePoolClaim (namespaced)."""

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
    """Every allocatable resource is 0 in the provisioned quota unless `defaults` says otherwise."""
    delete_bound_resources: bool = False
    """Bound claims are deleted with the pool; otherwise they are only disassociated."""
    ordered_queue: bool = False
    """Claims are served in creation order; a queued claim blocks later claims for the same resources."""


class ResourcePoolSpec(ApiModel):
    """A cluster-level set of resources selected namespaces may claim from."""

    quota: QuotaSpec
    """Total resources of the pool."""
    config: Annotated[PoolConfig, REQUIRED] = Field(default_factory=PoolConfig)
    """Behaviour."""
    defaults: Annotated[dict[str, QuantityValue] | None, Field(max_length=128)] = None
    """Per-namespace defaults, not counted toward the pool's allocation."""
    selectors: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """Namespaces managed by the pool (selectors ORed)."""


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
    """Ready."""
    allocation: Allocation | None = None
    """Totals."""
    claim_count: Count = 0
    """Number of bound claims."""
    claims: dict[str, list[ClaimRef]] | None = None
    """Bound claims per namespace."""
    exhaustions: dict[str, Exhaustion] | None = None
    """Resources the pool cannot serve in full."""
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
    """Amount to claim per resource."""
    pool: Name
    """Name of the pool; immutable once the claim is bound (status.pool set)."""


class PoolRef(StatusModel):
    """The pool a claim is bound to."""

    name: str
    """Name of the pool."""
    uid: str
    """UID of the pool."""


class ResourcePoolClaimStatus(StatusModel):
    """Observed state of a claim."""

    conditions: Annotated[list[Condition], REQUIRED] = Field(default_factory=list)
    """Bound and Ready."""
    allocation: Allocation | None = None
    """Amounts of the bound pool."""
    condition: Condition | None = None
    """Deprecated: use conditions."""
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

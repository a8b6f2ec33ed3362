"""Tenant and TenantOwner, both cluster-scoped.

A Tenant groups namespaces under a set of owners; a TenantOwner declares an owner once and lets
tenants pick it up by label (``spec.permissions.matchOwners``), so a team that owns many tenants
is not repeated in each of them. Field design follows what users of Kubernetes tenancy operators
know (owners with cluster roles, namespace options, node selector, cordoning).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import Field

from enclave_core.api.meta import (
    ApiModel,
    Condition,
    Count,
    Entity,
    EntityKind,
    Generation,
    KubeObject,
    LabelSelector,
    Name,
    StatusModel,
)
from enclave_core.api.proxy import ProxySettings
from enclave_core.api.rules import RuleBody
from enclave_core.api.schema import Extra, Rule, TypeExtras

__all__ = [
    "AdditionalMetadata",
    "AdditionalRoleBinding",
    "ForbiddenList",
    "NamespaceOptions",
    "OwnerSpec",
    "Permissions",
    "Subject",
    "Tenant",
    "TenantOwner",
    "TenantOwnerSpec",
    "TenantOwnerStatus",
    "TenantRule",
    "TenantSpec",
    "TenantStatus",
]

DEFAULT_OWNER_ROLES: Final = ("admin", "enclave-namespace-deleter")

_Roles = Annotated[list[Name], Field(max_length=32)]


def _default_roles() -> list[str]:
    return list(DEFAULT_OWNER_ROLES)


class OwnerSpec(ApiModel):
    """A tenant owner and the cluster roles bound to it in every tenant namespace."""

    kind: EntityKind
    """User, Group or ServiceAccount."""
    name: Annotated[str, Field(min_length=1, max_length=512)]
    """User or group name, or `system:serviceaccount:<namespace>:<name>`."""
    cluster_roles: _Roles = Field(default_factory=_default_roles)
    """Cluster roles bound (by a RoleBinding) in every namespace of the tenant."""


class Permissions(ApiModel):
    """How a tenant finds owners declared elsewhere."""

    match_owners: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """TenantOwner objects selected by label become owners too (selectors ORed)."""


class AdditionalMetadata(ApiModel):
    """Labels and annotations added to every object of a set."""

    labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels added."""
    annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Annotations added."""


class ForbiddenList(ApiModel):
    """Keys that may not be set: an exact list and a regular expression."""

    denied: Annotated[list[Annotated[str, Field(max_length=317)]] | None, Field(max_length=256)] = None
    """Keys refused exactly."""
    denied_regex: Annotated[str | None, Field(max_length=1024)] = None
    """Keys matching this regular expression are refused."""


class NamespaceOptions(ApiModel):
    """What tenant owners may do with the tenant's namespaces."""

    quota: Annotated[int | None, Field(ge=0, le=2**31 - 1), Extra(format="int32")] = None
    """Maximum number of namespaces; unlimited when absent."""
    additional_metadata: AdditionalMetadata | None = None
    """Metadata added to every namespace of the tenant (and reconciled)."""
    forbidden_labels: ForbiddenList | None = None
    """Namespace labels owners may not set."""
    forbidden_annotations: ForbiddenList | None = None
    """Namespace annotations owners may not set."""


class Subject(ApiModel):
    """An RBAC subject (rbac.authorization.k8s.io/v1 shape)."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="self.kind != 'ServiceAccount' || (has(self.namespace) && size(self.namespace) > 0)",
                message="subjects[]: namespace is required when kind is ServiceAccount",
                field_path=".namespace",
                reason="FieldValueRequired",
            ),
        )
    )

    kind: EntityKind
    """User, Group or ServiceAccount."""
    name: Annotated[str, Field(min_length=1, max_length=512)]
    """Name of the subject."""
    api_group: Annotated[str | None, Field(max_length=253)] = None
    """`rbac.authorization.k8s.io` for users and groups, empty for service accounts."""
    namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of a service account."""


class AdditionalRoleBinding(ApiModel):
    """An extra RoleBinding created in every tenant namespace."""

    cluster_role_name: Name
    """Cluster role bound."""
    subjects: Annotated[list[Subject], Field(min_length=1, max_length=64)]
    """Subjects bound."""


class TenantRule(RuleBody):
    """A rule of the tenant, applied to the tenant namespaces it selects."""

    namespace_selector: LabelSelector | None = None
    """Tenant namespaces the rule applies to; every tenant namespace when absent."""


class TenantSpec(ApiModel):
    """Desired state of a tenant."""

    owners: Annotated[
        list[OwnerSpec] | None,
        Field(max_length=64),
        Extra(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["kind", "name"]}),
    ] = None
    """Owners declared in the tenant; unique by kind and name."""
    permissions: Permissions | None = None
    """Owners found through TenantOwner objects."""
    namespace_options: NamespaceOptions | None = None
    """Namespace count limit and metadata."""
    node_selector: Annotated[dict[str, str] | None, Field(max_length=32)] = None
    """Node selector enforced on every Pod of the tenant (PodNodeSelector namespace annotation)."""
    force_tenant_prefix: bool | None = None
    """Overrides ServiceConfiguration.spec.forceTenantPrefix for this tenant when set."""
    cordoned: bool = False
    """No new namespaces and no namespace deletions while true."""
    prevent_deletion: bool = False
    """The tenant cannot be deleted while true."""
    additional_role_bindings: Annotated[list[AdditionalRoleBinding] | None, Field(max_length=64)] = None
    """Extra RoleBindings in every tenant namespace."""
    rules: Annotated[list[TenantRule] | None, Field(max_length=32)] = None
    """Admission rules for the tenant's namespaces."""
    data: dict[str, Any] | None = None
    """Free-form data made available to replication templates."""
    proxy: ProxySettings | None = None
    """What enclave-proxy shows this tenant's users of cluster-scoped kinds; an entry for a kind replaces the ServiceConfiguration's entry for it (docs/proxy.md)."""


class OwnerStatus(StatusModel):
    """An effective owner of the tenant."""

    kind: EntityKind
    """User, Group or ServiceAccount."""
    name: str
    """Name of the owner."""
    cluster_roles: list[str] | None = None
    """Cluster roles bound to it."""


class TenantStatus(StatusModel):
    """Observed state of a tenant."""

    size: Count = 0
    """Number of namespaces."""
    namespaces: list[str] | None = None
    """Sorted namespace names."""
    owners: list[OwnerStatus] | None = None
    """Effective owners: spec owners, matched TenantOwners and promoted service accounts (administrators own every tenant implicitly and are not listed)."""
    unlisted_owners: list[Entity] | None = None
    """Effective owners that ServiceConfiguration users does not name (nor aggregated TenantOwners, nor, for a service account, a group it is always in): Enclave fences them as tenant users because they own this tenant, whatever groups their requests carry, where the specification governs listed users only (see "Owners outside users" in docs/api.md)."""
    conditions: list[Condition] | None = None
    """Ready and Cordoned."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""


class Tenant(KubeObject):
    """A tenant: a set of namespaces owned by the same users (cluster-scoped, short name `tnt`)."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
                message="metadata.name: a tenant name must be a DNS-1123 label "
                "(at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)",
            ),
        )
    )

    kind: Literal["Tenant"] = "Tenant"
    spec: TenantSpec = Field(default_factory=TenantSpec)
    """Desired state."""
    status: TenantStatus | None = None
    """Observed state."""


class TenantOwnerSpec(ApiModel):
    """An owner declared once and picked up by tenants through labels."""

    kind: EntityKind
    """User, Group or ServiceAccount."""
    name: Annotated[str, Field(min_length=1, max_length=512)]
    """User or group name, or `system:serviceaccount:<namespace>:<name>`."""
    cluster_roles: _Roles = Field(default_factory=_default_roles)
    """Cluster roles bound in every namespace of the tenants it owns."""
    aggregate: bool = False
    """Also count the owner as a service user (added to ServiceConfiguration.status.users)."""


class TenantOwnerStatus(StatusModel):
    """Observed state of a tenant owner."""

    tenants: list[str] | None = None
    """Sorted names of the tenants it owns."""
    conditions: list[Condition] | None = None
    """Ready."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""


class TenantOwner(KubeObject):
    """An owner usable by several tenants (cluster-scoped)."""

    kind: Literal["TenantOwner"] = "TenantOwner"
    spec: TenantOwnerSpec
    """Desired state."""
    status: TenantOwnerStatus | None = None
    """Observed state."""

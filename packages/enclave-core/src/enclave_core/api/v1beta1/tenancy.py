"""Tenant in ``enclave.dev/v1beta1``: the flat layout of the namespace settings, before ``namespaceOptions``.

v1beta1 kept the namespace count, the metadata added to namespaces and the forbidden namespace metadata as
four top-level fields of the spec; v1beta2 groups them under ``spec.namespaceOptions``. Tenant rules
(``spec.rules``) are v1beta2 only: a v1beta2 tenant read as v1beta1 carries them in the conversion annotation
(:data:`enclave_core.api.names.CONVERSION_ANNOTATION`), so writing it back keeps them. Everything else is the
v1beta2 shape, reusing its types.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from enclave_core.api.meta import ApiModel
from enclave_core.api.schema import Extra, TypeExtras
from enclave_core.api.tenancy import (
    AdditionalRoleBinding,
    ForbiddenList,
    OwnerSpec,
    Permissions,
    Tenant,
    TenantStatus,
)
from enclave_core.api.v1beta1.meta import KubeObjectV1beta1

__all__ = ["NamespacesMetadata", "TenantSpecV1beta1", "TenantV1beta1"]


class NamespacesMetadata(ApiModel):
    """v1beta1: labels and annotations added to every namespace of the tenant (v1beta2: `namespaceOptions.additionalMetadata`)."""

    additional_labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels added (v1beta2: `namespaceOptions.additionalMetadata.labels`)."""
    additional_annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Annotations added (v1beta2: `namespaceOptions.additionalMetadata.annotations`)."""


class TenantSpecV1beta1(ApiModel):
    """Desired state of a tenant, v1beta1 layout (deprecated: use enclave.dev/v1beta2)."""

    owners: Annotated[
        list[OwnerSpec] | None,
        Field(max_length=64),
        Extra(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["kind", "name"]}),
    ] = None
    """Owners declared in the tenant; unique by kind and name."""
    permissions: Permissions | None = None
    """Owners found through TenantOwner objects."""
    namespace_quota: Annotated[int | None, Field(ge=0, le=2**31 - 1), Extra(format="int32")] = None
    """Deprecated layout: maximum number of namespaces, unlimited when absent (v1beta2: `namespaceOptions.quota`)."""
    namespaces_metadata: NamespacesMetadata | None = None
    """Deprecated layout: metadata added to every namespace (v1beta2: `namespaceOptions.additionalMetadata`)."""
    forbidden_namespace_labels: ForbiddenList | None = None
    """Deprecated layout: namespace labels owners may not set (v1beta2: `namespaceOptions.forbiddenLabels`)."""
    forbidden_namespace_annotations: ForbiddenList | None = None
    """Deprecated layout: namespace annotations owners may not set (v1beta2: `namespaceOptions.forbiddenAnnotations`)."""
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
    data: dict[str, Any] | None = None
    """Free-form data made available to replication templates."""


class TenantV1beta1(KubeObjectV1beta1):
    """A tenant in the deprecated v1beta1 shape (served and converted; v1beta2 is stored)."""

    crd: ClassVar[TypeExtras] = Tenant.crd

    kind: Literal["Tenant"] = "Tenant"
    spec: TenantSpecV1beta1 = Field(default_factory=TenantSpecV1beta1)
    """Desired state."""
    status: TenantStatus | None = None
    """Observed state (the v1beta2 shape)."""

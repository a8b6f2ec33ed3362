"""GlobalTenantResource (cluster-scoped) and TenantResource (namespaced): replication of objects.

A GlobalTenantResource replicates into the tenants its ``tenantSelector`` picks, per tenant or per
tenant namespace (``scope``). A TenantResource is the same engine confined to its own tenant: it
replicates into the namespaces of the tenant that owns the namespace it lives in, so it has no
``tenantSelector`` and no ``scope``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field

from enclave_core.api.meta import (
    ApiModel,
    Condition,
    Count,
    Duration,
    Generation,
    KubeObject,
    LabelSelector,
    Name,
    StatusModel,
)
from enclave_core.api.schema import REQUIRED, Extra

__all__ = [
    "ContextResource",
    "DependsOn",
    "GlobalTenantResource",
    "GlobalTenantResourceSpec",
    "ItemPolicy",
    "ItemStatus",
    "NamespacedItem",
    "ProcessedItem",
    "ReplicationContext",
    "ReplicationSettings",
    "ReplicationStatus",
    "ResourceBlock",
    "ResourceMetadata",
    "ServiceAccountRef",
    "Template",
    "TenantResource",
    "TenantResourceSpec",
    "effective_policy",
]

Creation: TypeAlias = Literal["Owner", "Merge"]
Deletion: TypeAlias = Literal["Remove", "Orphan"]
MissingKey: TypeAlias = Literal["invalid", "zero", "error"]
ReplicationScope: TypeAlias = Literal["Namespace", "Tenant", "None"]

RawItem = Annotated[
    dict[str, Any],
    Extra(**{"x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True}),
]
"""A complete manifest (apiVersion, kind, metadata, ...); the namespace is filled in per target."""


class ResourceMetadata(ApiModel):
    """Labels and annotations added to replicated objects."""

    annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Annotations added."""
    labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels added."""


class ContextResource(ApiModel):
    """An object (or a selection of objects) mounted into the template context.

    Without `namespace`, a namespaced kind is read in the target namespace (scope Namespace), so each
    namespace's templates see their own objects. A TenantResource may read only namespaces of its tenant and
    no cluster-scoped kind. `kind: "*"` reads every kind `apiVersion` serves that can be listed (Events left
    out) with the same `name`/`selector`/`namespace`, mounted as one list under `index` (default `all`); kinds the
    acting identity may not list are left out, and a TenantResource reads only the namespaced ones.
    """

    kind: Annotated[str, Field(min_length=1, max_length=63)]
    """Kind; `*` for every listable kind of `apiVersion` (Events left out), one list under `index` (default `all`)."""
    api_version: Annotated[str | None, Field(max_length=316)] = None
    """API version; empty means core v1."""
    index: Annotated[str | None, Field(max_length=253)] = None
    """Key under which it is mounted in the template context."""
    name: Annotated[str | None, Field(max_length=253)] = None
    """Name of one object."""
    namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of the object(s)."""
    optional: bool = True
    """With a name: a missing object is not an error."""
    selector: LabelSelector | None = None
    """Label selector for several objects."""


class ReplicationContext(ApiModel):
    """Extra template context."""

    resources: Annotated[list[ContextResource] | None, Field(max_length=64)] = None
    """Objects mounted into the context."""


class Template(ApiModel):
    """A template rendering one or several YAML manifests (separated by `---`).

    Templates are Jinja2, rendered in its sandbox (docs/decisions/0002-replication-templates.md). The context:
    `tenant` (the Tenant object; null for a GlobalTenantResource of scope None), `namespace` (the target
    Namespace object; null for scopes Tenant and None) and every `context.resources` entry under its `index`
    (default: the kind in lower case): one object (null when an optional object is missing) when the entry
    names one, else the list of selected objects. Filters beyond Jinja2's: `toyaml`, `b64enc`, `b64dec`,
    `quote`. Output is capped at 1 MiB.
    """

    missing_key: MissingKey = "zero"
    """A missing key or attribute renders as an empty string (zero), as `<no value>` (invalid), or fails the
    item (error)."""
    template: Annotated[str | None, Field(max_length=262144)] = None
    """Text holding one or several manifests."""


class NamespacedItem(ApiModel):
    """Existing objects in another namespace to replicate.

    The copy keeps the source's content and name; server-set metadata (uid, resourceVersion, managedFields,
    ownerReferences, status) is dropped, and labels named by `selector` are stripped so a copy is never itself
    selected as a source. `namespace` is required for a GlobalTenantResource; for a TenantResource it defaults
    to the TenantResource's namespace and must be a namespace of its tenant.
    """

    kind: Annotated[str, Field(min_length=1, max_length=63)]
    """Kind."""
    api_version: Annotated[str | None, Field(max_length=316)] = None
    """API version; empty means core v1."""
    name: Annotated[str | None, Field(max_length=253)] = None
    """Name of one object."""
    namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of the object(s)."""
    optional: bool = True
    """With a name: a missing object is not an error."""
    selector: LabelSelector | None = None
    """Label selector for several objects."""


class ItemPolicy(ApiModel):
    """Creation, protection, ownership and deletion of replicated items."""

    condition: Annotated[str | None, Field(max_length=4096)] = None
    """CEL boolean evaluated before each apply (`object`: existing destination or null; `now`)."""
    creation: Creation = "Owner"
    """Owner: fail unless Enclave created the existing object; Merge: adopt or create."""
    deletion: Deletion = "Remove"
    """Remove: delete created objects and release adopted ones; Orphan: keep them, strip Enclave's metadata."""
    force: bool = False
    """Server-side apply may take over conflicting field ownership."""
    protect: bool = True
    """Users cannot change or delete managed objects through admission."""


class ResourceBlock(ApiModel):
    """What to replicate and where."""

    additional_metadata: ResourceMetadata | None = None
    """Metadata added to replicated objects."""
    context: ReplicationContext | None = None
    """Template context."""
    generators: Annotated[list[Template] | None, Field(max_length=64)] = None
    """Templates."""
    namespace_selector: LabelSelector | None = None
    """Tenant namespaces targeted; all when absent."""
    namespaced_items: Annotated[list[NamespacedItem] | None, Field(max_length=64)] = None
    """Existing objects to copy."""
    raw_items: Annotated[list[RawItem] | None, Field(max_length=256)] = None
    """Complete manifests to replicate."""
    policy: ItemPolicy | None = None
    """Policy for every item of the block; converted from settings/pruningOnDelete when absent."""


class ReplicationSettings(ApiModel):
    """Deprecated: use resources[].policy."""

    adopt: bool = False
    """Deprecated: equals policy.creation Merge."""
    force: bool = False
    """Deprecated: equals policy.force."""


class DependsOn(ApiModel):
    """A replication object that must be ready first."""

    name: Name
    """Name of the TenantResource."""


class ServiceAccountRef(ApiModel):
    """The service account that performs every action."""

    name: Name
    """Name."""
    namespace: Annotated[str, Field(min_length=1, max_length=63)]
    """Namespace."""


class TenantResourceSpec(ApiModel):
    """Replication inside one tenant.

    A TenantResource replicates into the namespaces of the tenant owning its namespace and never outside: no
    cluster-scoped object, no write, namespaced item or context read outside the tenant's namespaces. It acts
    as `serviceAccount`, else as the configuration's `impersonation.tenantDefaultServiceAccount` in its own
    namespace; with neither it does nothing (Ready False, reason NoServiceAccount), because acting as the
    controller would lend a tenant the controller's rights. `dependsOn` names TenantResources of the same
    namespace (for a GlobalTenantResource: other GlobalTenantResources).
    """

    resources: Annotated[list[ResourceBlock], Field(max_length=64)]
    """What to replicate and where."""
    resync_period: Annotated[Duration, REQUIRED] = "60s"
    """Period of a further reconciliation (Go duration, 1s to 24h); manifest changes trigger one too."""
    settings: Annotated[ReplicationSettings, REQUIRED] = Field(default_factory=ReplicationSettings)
    """Deprecated: use resources[].policy."""
    cordoned: bool = False
    """Pause applies and deletions."""
    depends_on: Annotated[list[DependsOn] | None, Field(max_length=64)] = None
    """Objects that must be ready first."""
    pruning_on_delete: bool = True
    """Deprecated: use resources[].policy.deletion. Delete replicated objects with the manifest."""
    service_account: ServiceAccountRef | None = None
    """Account performing every action; it must hold the needed permissions."""


class GlobalTenantResourceSpec(TenantResourceSpec):
    """Replication into selected tenants.

    Acts as `serviceAccount`, else as the configuration's `impersonation.globalDefaultServiceAccount`, else as
    the controller itself. For scopes Tenant and None a namespaced manifest must name its namespace.
    """

    scope: ReplicationScope = "Namespace"
    """Namespace: per namespace of each tenant; Tenant: once per tenant; None: once."""
    tenant_selector: LabelSelector | None = None
    """Tenants targeted: `{}` selects every tenant, absent (null) none (a null selector matches nothing)."""


class ItemStatus(StatusModel):
    """Outcome of one processed item."""

    status: Literal["True", "False", "Unknown"]
    """Outcome: True applied, False failed (see message), Unknown skipped (condition false, cordoned)."""
    type: str
    """Condition type: Ready."""
    reason: str | None = None
    """CamelCase cause (Applied, Skipped, InvalidManifest, RenderFailed, SourceNotFound, Forbidden, ...)."""
    cluster_scoped: bool | None = None
    """The item is cluster-scoped."""
    created: bool | None = None
    """Created (true) or adopted (false)."""
    last_apply: datetime | None = None
    """Time of the last apply."""
    message: str | None = None
    """Details."""
    policy: ItemPolicy | None = None
    """Policy snapshot used for protection and cleanup."""


class ProcessedItem(StatusModel):
    """A replicated object."""

    group: str | None = None
    """API group."""
    kind: str | None = None
    """Kind."""
    name: str | None = None
    """Name."""
    namespace: str | None = None
    """Namespace."""
    origin: str | None = None
    """Block and item it came from."""
    tenant: str | None = None
    """Tenant."""
    version: str | None = None
    """Version."""
    status: ItemStatus | None = None
    """Outcome."""


class ReplicationStatus(StatusModel):
    """Observed state of a replication object."""

    size: Annotated[Count, REQUIRED] = 0
    """Number of managed objects."""
    conditions: list[Condition] | None = None
    """Ready."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""
    selected_tenants: list[str] | None = None
    """Tenants targeted."""
    service_account: ServiceAccountRef | None = None
    """Account used for impersonation."""
    processed_items: list[ProcessedItem] | None = None
    """Managed objects."""


class GlobalTenantResource(KubeObject):
    """Replicates objects into selected tenants (cluster-scoped)."""

    kind: Literal["GlobalTenantResource"] = "GlobalTenantResource"
    spec: GlobalTenantResourceSpec
    """Desired state."""
    status: ReplicationStatus | None = None
    """Observed state."""


class TenantResource(KubeObject):
    """Replicates objects into the namespaces of its own tenant (namespaced)."""

    kind: Literal["TenantResource"] = "TenantResource"
    spec: TenantResourceSpec
    """Desired state."""
    status: ReplicationStatus | None = None
    """Observed state."""


def effective_policy(block: ResourceBlock, spec: TenantResourceSpec) -> ItemPolicy:
    """The block's policy, or the one converted from the deprecated `settings` and `pruningOnDelete`.

    Admission (mutating) writes this conversion into blocks without a policy; the controller applies the same
    function, so an object created while admission was away behaves the same.
    """
    if block.policy is not None:
        return block.policy
    return ItemPolicy(
        creation="Merge" if spec.settings.adopt else "Owner",
        force=spec.settings.force,
        deletion="Remove" if spec.pruning_on_delete else "Orphan",
    )

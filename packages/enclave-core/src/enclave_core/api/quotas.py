"""CustomQuota (namespaced), GlobalCustomQuota and GlobalResourceQuota (cluster-scoped)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal, TypeAlias

from pydantic import Field

from enclave_core.api.meta import (
    ApiModel,
    Condition,
    Count,
    Generation,
    KubeObject,
    LabelSelector,
    LabelSelectorRequirement,
    ScopeSelector,
    StatusModel,
)
from enclave_core.api.schema import REQUIRED, Rule, TypeExtras
from enclave_core.quantity import QuantityValue
from enclave_core.resourcequota import ScopeName

__all__ = [
    "CustomQuota",
    "CustomQuotaOptions",
    "CustomQuotaSpec",
    "CustomQuotaStatus",
    "GlobalCustomQuota",
    "GlobalCustomQuotaSpec",
    "GlobalCustomQuotaStatus",
    "GlobalResourceQuota",
    "GlobalResourceQuotaSpec",
    "GlobalResourceQuotaStatus",
    "NamespaceUsage",
    "QuotaClaim",
    "QuotaSpec",
    "QuotaTarget",
    "QuotaTotals",
    "QuotaUsage",
    "ResourceList",
    "Source",
    "SourceSelector",
]

Op: TypeAlias = Literal["add", "sub", "count"]

SOURCE_API_VERSION: Final = r"^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/(\*|[a-z0-9]+))?)?$"
"""``v1``, ``<group>``, ``<group>/<version>``, ``<group>/*``, ``*``; empty means core ``v1``."""
SOURCE_KIND: Final = r"^(\*|[A-Za-z][A-Za-z0-9]*)$"

ResourceList: TypeAlias = dict[str, QuantityValue]
"""Resource name to quantity, e.g. ``{"requests.cpu": "4", "pods": 10}``."""
_ResourceMap = Annotated[dict[str, QuantityValue], Field(max_length=128)]


def _nonempty(field: str) -> str:
    return f"(has(self.{field}) && size(self.{field}) > 0)"


class SourceSelector(ApiModel):
    """Further narrowing of source objects; every part must hold."""

    cel_expressions: Annotated[list[Annotated[str, Field(max_length=4096)]] | None, Field(max_length=16)] = None
    """CEL booleans over `object`; all must be true."""
    field_selectors: Annotated[list[Annotated[str, Field(max_length=1024)]] | None, Field(max_length=16)] = None
    """Boolean JSONPath expressions; all must be true."""
    match_expressions: Annotated[list[LabelSelectorRequirement] | None, Field(max_length=64)] = None
    """Label requirements, as in a LabelSelector."""
    match_labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels, as in a LabelSelector."""


class Source(ApiModel):
    """Which objects count toward the quota, and how much each one counts."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule=f"self.op != 'count' || !{_nonempty('path')}",
                message="sources[]: path must be empty when op is count",
                field_path=".path",
                reason="FieldValueForbidden",
            ),
            Rule(
                rule=f"self.op != 'count' || !{_nonempty('cel')}",
                message="sources[]: cel must be empty when op is count",
                field_path=".cel",
                reason="FieldValueForbidden",
            ),
            Rule(
                rule=f"self.op == 'count' || ({_nonempty('path')} != {_nonempty('cel')})",
                message="sources[]: exactly one of path or cel must be set when op is add or sub",
            ),
        )
    )

    kind: Annotated[str, Field(min_length=1, max_length=63, pattern=SOURCE_KIND)]
    """Kind of the source objects; `*` for all kinds."""
    api_version: Annotated[str | None, Field(max_length=316, pattern=SOURCE_API_VERSION)] = None
    """`v1`, `<group>` (any version), `<group>/<version>`, `<group>/*`, or `*`; empty means core v1."""
    op: Op = "add"
    """add, sub or count."""
    path: Annotated[str | None, Field(max_length=1024)] = None
    """Path of the usage on the object (op add or sub)."""
    cel: Annotated[str | None, Field(max_length=4096)] = None
    """CEL over `object` yielding a quantity or a list of quantities (op add or sub)."""
    selectors: Annotated[list[SourceSelector] | None, Field(max_length=16)] = None
    """Further narrowing; selectors are ORed."""


class CustomQuotaOptions(ApiModel):
    """Options of a custom quota."""

    emit_metric_per_claim_usage: bool = False
    """Also expose a usage metric per claim (off by default: high cardinality)."""


class CustomQuotaSpec(ApiModel):
    """A limit on a quantity computed over source objects."""

    limit: QuantityValue
    """Quantity limit."""
    options: Annotated[CustomQuotaOptions, REQUIRED] = Field(default_factory=CustomQuotaOptions)
    """Options."""
    sources: Annotated[list[Source], Field(min_length=1, max_length=32)]
    """Source objects."""
    scope_selectors: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """Objects governed by the quota (selectors ORed)."""


class GlobalCustomQuotaSpec(CustomQuotaSpec):
    """A CustomQuota over objects of every selected namespace."""

    namespace_selectors: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """Namespaces where the quota selects objects (selectors ORed)."""


class QuotaTarget(StatusModel):
    """A resolved source: one concrete group/version/kind."""

    group: str
    """API group."""
    kind: str
    """Kind."""
    version: str
    """Version."""
    cel: str | None = None
    """CEL usage expression."""
    op: Op = "add"
    """add, sub or count."""
    path: str | None = None
    """Usage path."""
    scope: Literal["Namespaced", "Cluster"] | None = None
    """Scope of the kind."""
    selectors: list[SourceSelector] | None = None
    """Narrowing selectors."""


class QuotaClaim(StatusModel):
    """An object counted toward the quota."""

    group: str
    """API group."""
    kind: str
    """Kind."""
    name: str
    """Name."""
    uid: str
    """UID."""
    version: str
    """Version."""
    usage: QuantityValue
    """Amount the object counts for."""
    namespace: str | None = None
    """Namespace; absent means the quota's own namespace."""


class QuotaUsage(StatusModel):
    """Used and available amounts."""

    available: QuantityValue | None = None
    """Limit minus used."""
    used: QuantityValue | None = None
    """Sum over claims."""


class CustomQuotaStatus(StatusModel):
    """Observed usage of a custom quota."""

    conditions: Annotated[list[Condition], REQUIRED] = Field(default_factory=list)
    """Ready."""
    targets: Annotated[list[QuotaTarget], REQUIRED] = Field(default_factory=list)
    """Resolved sources."""
    claims: list[QuotaClaim] | None = None
    """Objects counted."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""
    usage: QuotaUsage | None = None
    """Usage."""


class GlobalCustomQuotaStatus(CustomQuotaStatus):
    """Observed usage of a global custom quota."""

    namespaces: list[str] | None = None
    """Observed namespaces."""


class CustomQuota(KubeObject):
    """A quota on a computed quantity over objects of its namespace (namespaced)."""

    kind: Literal["CustomQuota"] = "CustomQuota"
    spec: CustomQuotaSpec
    """Desired state."""
    status: CustomQuotaStatus | None = None
    """Observed state."""


class GlobalCustomQuota(KubeObject):
    """A quota on a computed quantity over objects of selected namespaces (cluster-scoped)."""

    kind: Literal["GlobalCustomQuota"] = "GlobalCustomQuota"
    spec: GlobalCustomQuotaSpec
    """Desired state."""
    status: GlobalCustomQuotaStatus | None = None
    """Observed state."""


class QuotaSpec(ApiModel):
    """A native ResourceQuota specification."""

    hard: _ResourceMap | None = None
    """Hard limit per resource name."""
    scopes: Annotated[list[ScopeName] | None, Field(max_length=16)] = None
    """Quota scopes; absent matches all objects."""
    scope_selector: ScopeSelector | None = None
    """Scope selector; an object matches only if scopes and scopeSelector both match."""


class GlobalResourceQuotaSpec(ApiModel):
    """One native quota shared by every selected namespace.

    enclave-globalquotas keeps a ResourceQuota `globalquota-<name>` in each selected namespace whose `hard` is
    that namespace's usage plus what is left globally, so kube-apiserver refuses at the shared limit; admission
    reserves concurrent creates across namespaces on the quota's QuantityLedger. `hard` may not be lowered below
    what is used and reserved, and the selection may not change while reservations are pending.
    """

    quota: QuotaSpec
    """The shared quota: resource names, scopes and scope selector as in a ResourceQuota."""
    namespace_selectors: Annotated[list[LabelSelector] | None, Field(max_length=16)] = None
    """Namespaces sharing the quota: selectors ORed; an empty selector `{}` matches every namespace; an absent
    or empty list matches none."""


class QuotaTotals(StatusModel):
    """Amounts per resource: a GlobalResourceQuota's totals, a ResourcePool's or a claim's allocation."""

    available: ResourceList | None = None
    """max(hard - used, 0)."""
    hard: ResourceList | None = None
    """Hard limits."""
    used: ResourceList | None = None
    """In use: summed over namespaces for a global quota, claimed for a pool, used by its namespace for a claim."""


class NamespaceUsage(StatusModel):
    """Usage in one namespace."""

    used: ResourceList | None = None
    """Usage per resource."""


class GlobalResourceQuotaStatus(StatusModel):
    """Observed usage of a global resource quota, summed from the namespaces' ResourceQuota status.

    Ready reasons: Active; WaitingForUsage (a namespace's ResourceQuota has not reported usage yet);
    InvalidSpec (nothing is changed until it is fixed); ApplyFailed; ConflictingResourceQuota (a ResourceQuota
    of the provisioned name exists and is not Enclave's).
    """

    conditions: Annotated[list[Condition], REQUIRED] = Field(default_factory=list)
    """Ready."""
    total: Annotated[QuotaTotals, REQUIRED] = Field(default_factory=QuotaTotals)
    """Totals over the selected namespaces."""
    namespace_count: Count = 0
    """Number of selected namespaces."""
    namespace_usage: dict[str, NamespaceUsage] | None = None
    """Usage per namespace."""
    namespaces: list[str] | None = None
    """Sorted names of the selected namespaces."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""


class GlobalResourceQuota(KubeObject):
    """A native resource quota shared by every namespace the selectors match (cluster-scoped, short name `grq`).

    Tenant rule `quota` entries become GlobalResourceQuotas named `<tenant>-rule<index>-<entry>`, owned by the
    Tenant."""

    kind: Literal["GlobalResourceQuota"] = "GlobalResourceQuota"
    spec: GlobalResourceQuotaSpec
    """Desired state."""
    status: GlobalResourceQuotaStatus | None = None
    """Observed state."""

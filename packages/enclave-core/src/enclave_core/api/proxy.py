"""``spec.proxy``: what enclave-proxy shows tenant users of cluster-scoped kinds, and with which verbs.

kube-apiserver cannot narrow a list of a cluster-scoped kind by RBAC, so enclave-proxy answers tenant users'
requests for these kinds itself (docs/proxy.md). This block says, per kind, which objects a tenant's users see
beyond what Enclave derives on its own (nodes its node selector matches, PersistentVolumes labelled for it,
priority and runtime classes its rules allow) and which verbs they may use on them. The ServiceConfiguration's
block is the default for every tenant; a Tenant's entry for a kind replaces the default entry for that kind
whole. Only administrators write either object.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal, TypeAlias, get_args

from pydantic import Field

from enclave_core.api.meta import ApiModel, LabelSelector, ValueMatcher
from enclave_core.api.schema import Extra, Rule, TypeExtras

__all__ = ["PROXY_KINDS", "READ_VERBS", "ProxyKind", "ProxyKindName", "ProxySettings", "ProxyVerb"]

ProxyKindName: TypeAlias = Literal[
    "Nodes",
    "PersistentVolumes",
    "StorageClasses",
    "IngressClasses",
    "PriorityClasses",
    "RuntimeClasses",
    "GatewayClasses",
]
ProxyVerb: TypeAlias = Literal["get", "list", "watch", "update", "patch", "delete"]

PROXY_KINDS: Final[tuple[ProxyKindName, ...]] = get_args(ProxyKindName)
READ_VERBS: Final[tuple[ProxyVerb, ...]] = ("get", "list", "watch")
"""The verbs of a kind no entry names, and of an entry that names none."""


class ProxyKind(ApiModel):
    """What tenant users see of one cluster-scoped kind through enclave-proxy."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="!has(self.claimed) || !self.claimed || self.kind == 'PersistentVolumes'",
                message="claimed applies to PersistentVolumes only",
                field_path=".claimed",
            ),
        )
    )

    kind: ProxyKindName
    """Nodes, PersistentVolumes, StorageClasses, IngressClasses, PriorityClasses, RuntimeClasses or GatewayClasses."""
    verbs: Annotated[list[ProxyVerb] | None, Field(max_length=6), Extra(**{"x-kubernetes-list-type": "set"})] = None
    """Verbs tenant users may use on the objects they see: get, list, watch (the default when omitted), and update, patch, delete, which the proxy forwards as the caller plus the group `enclave.dev:proxy:<resource>:<verb>` (an administrator binds that group to a ClusterRole holding the verb; without the binding kube-apiserver refuses). An empty list hides the kind (requests pass through to kube-apiserver, which refuses tenant users)."""
    names: Annotated[list[ValueMatcher] | None, Field(max_length=16)] = None
    """Objects shown by name (exact values or RE2 expressions), added to what Enclave derives."""
    selector: LabelSelector | None = None
    """Objects shown by label, added to what Enclave derives; an explicit empty selector shows every object."""
    claimed: bool = False
    """PersistentVolumes only: also show volumes bound to a claim in one of the tenant's namespaces (`spec.claimRef.namespace`), labelled or not."""


class ProxySettings(ApiModel):
    """Per-kind settings of enclave-proxy for tenant users."""

    kinds: Annotated[
        list[ProxyKind] | None,
        Field(max_length=7),
        Extra(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["kind"]}),
    ] = None
    """One entry per kind; a kind with no entry keeps the default (the ServiceConfiguration's entry, else verbs get, list, watch on what Enclave derives)."""

"""The Rules snapshot: every tenant namespace's compiled rule set, for admission's ``/resources`` hooks.

Published by enclave-tenants (TenantService, kind ``Rules``) beside the Tenancy snapshot and never inside it:
rules change on their own schedule (a RuleStatus edit, a namespace label selecting another rule) and can be
large, while the Tenancy snapshot is on the path of every namespace decision. The content per namespace is
exactly ``RuleStatus/default.status.rules`` of that namespace, so what ``kubectl get rulestatus -o yaml``
shows is what admission enforces. Persistent volume labels ride along because storage rules decide a
PersistentVolumeClaim's binding from the labels of the volume it names, and admission reads no API. So do the
PodDisruptionBudgets of namespaces where a workload rule requires coverage (``disruptionBudgets.required``):
whether a Deployment is covered is decided from them, in memory.

The snapshot names *every* tenant namespace enclave-tenants knows, those without rules included
(:attr:`RulesSnapshot.without_rules`), terminating ones too until they are gone: admission refuses writes in a
tenant namespace the snapshot does not name (failing closed) instead of reading "unknown" as "no rules".
"""

from __future__ import annotations

from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.api.rules import AppliedRule
from enclave_core.quantity import IntOrString
from enclave_core.selectors import LabelSelector

RULES_KIND: Final = "Rules"
RULE_STATUS_NAME: Final = "default"
"""The RuleStatus the tenants controller keeps in every tenant namespace."""


class NamespaceRules(BaseModel):
    """The rules in effect in one tenant namespace, in evaluation order."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    tenant: str
    rules: list[AppliedRule] = Field(default_factory=list)


NAMESPACE_KIND: Final = "Namespace"
"""The kind a metadata rule names in ``kinds`` to judge the tenant's namespaces themselves (``*`` does not: the
specification's metadata rules constrain namespaced resources, and a rule written for them must not start
fencing namespaces)."""


class TenantNamespaceRule(BaseModel):
    """A tenant rule that judges the tenant's Namespace objects: the rule cut down to its metadata entries
    naming ``Namespace``, and the ``namespaceSelector`` choosing which of the tenant's namespaces it applies to
    (a namespace being created is named by no per-namespace list yet, so admission selects with it)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    rule: AppliedRule
    namespace_selector: LabelSelector | None = Field(None, alias="namespaceSelector")


class TenantNamespaceRules(BaseModel):
    """One tenant's rules that judge its namespaces, in declaration order."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    rules: list[TenantNamespaceRule] = Field(default_factory=list)


class VolumeView(BaseModel):
    """A PersistentVolume as storage rules see it: its name and labels."""

    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = Field(default_factory=dict)


class BudgetView(BaseModel):
    """A PodDisruptionBudget as coverage rules see it: where it is and which Pods it selects."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    namespace: str
    name: str
    selector: LabelSelector | None = None
    """policy/v1: a null selector selects no Pod, an empty one every Pod of the namespace."""
    min_available: IntOrString | None = Field(None, alias="minAvailable")
    max_unavailable: IntOrString | None = Field(None, alias="maxUnavailable")


class RulesSnapshot(BaseModel):
    """Every tenant namespace's rules, the persistent volumes claims may name, and the PodDisruptionBudgets of
    namespaces whose rules require coverage."""

    model_config = ConfigDict(frozen=True)

    namespaces: list[NamespaceRules] = Field(default_factory=list)
    volumes: list[VolumeView] = Field(default_factory=list)
    budgets: list[BudgetView] = Field(default_factory=list)
    namespace_rules: list[TenantNamespaceRules] = Field(default_factory=list)
    """Per tenant with any, the rules that judge its namespaces themselves (create and update by tenant users)."""
    without_rules: list[str] | None = None
    """The tenant namespaces with no rule in effect, sorted: with :attr:`namespaces`, every tenant namespace the
    publisher knows. None from a publisher older than this field, which left them out: admission then cannot
    tell a namespace without rules from one it knows nothing of, and judges both as without rules."""

    @property
    def complete(self) -> bool:
        """Whether the snapshot names every tenant namespace (see :attr:`without_rules`)."""
        return self.without_rules is not None

    @cached_property
    def known(self) -> frozenset[str]:
        """Every tenant namespace named, with rules or without."""
        return frozenset(self.without_rules or ()) | self.by_namespace.keys()

    @cached_property
    def budgets_by_namespace(self) -> dict[str, list[BudgetView]]:
        found: dict[str, list[BudgetView]] = {}
        for budget in self.budgets:
            found.setdefault(budget.namespace, []).append(budget)
        return found

    @cached_property
    def by_namespace(self) -> dict[str, NamespaceRules]:
        return {item.namespace: item for item in self.namespaces}

    @cached_property
    def namespace_rules_by_tenant(self) -> dict[str, TenantNamespaceRules]:
        return {item.tenant: item for item in self.namespace_rules}

    @cached_property
    def volume_labels(self) -> dict[str, dict[str, str]]:
        return {volume.name: volume.labels for volume in self.volumes}

    def payload(self) -> bytes:
        """The wire form (camelCase rule bodies, unset fields left out) admission parses back."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()

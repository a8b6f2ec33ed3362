"""What a caller may see and do through the proxy, decided from the snapshots (no API call).

The classification is admission's (``enclave_admission.state.State._classify``), restated here because
components never import each other: a caller in ``ignoreUserWithGroups`` or among the ``administrators`` is
not a tenant user; one who owns a tenant or matches the configuration's ``users`` is. Only tenant users get an
answer from the proxy; everyone else (administrators, the tenants' service accounts, other users) is passed
through to kube-apiserver, whose RBAC decides as usual.

What a tenant user sees of each kind is the union, over the tenants it owns, of:

- Namespaces: the tenant's namespaces (always; list and watch).
- Nodes: the nodes whose labels hold every pair of the tenant's node selector (none without one).
- PersistentVolumes: the volumes labelled ``enclave.dev/tenant=<tenant>`` (the ownership label admission lets
  only administrators set), and with ``claimed`` those bound to a claim in one of its namespaces.
- PriorityClasses, RuntimeClasses: the classes the tenant's ``allow`` rules name
  (``enforce.workloads.placement.priorityClasses``/``runtimeClasses``; enclave-tenants collects them).
- every kind but namespaces: what the kind's ``spec.proxy`` entry selects (``names``, ``selector``).

The entry for a kind is the Tenant's own if it has one, else the ServiceConfiguration's, else the default
(verbs get, list, watch; nothing selected beyond the above). A verb is answered for the tenants whose entry
grants it; when none does (``verbs: []`` hides a kind) the request is passed through and kube-apiserver
refuses the tenant user as it would without the proxy.

Answers are memoised per (kind, verb, user, groups) for the life of one pair of snapshots: a handful of users
make most requests, and a snapshot change starts the memo over.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from enclave_core.api.meta import Entity, ValueMatcher
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.proxy import READ_VERBS, ProxyKind
from enclave_core.patterns import Pattern, PatternError, compile_pattern
from enclave_core.selectors import LabelSelector
from enclave_core.snapshots.configuration import DEFAULT_USER_GROUP, EffectiveConfiguration
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView, entity_matches

MAX_MEMO = 10_000


@dataclass(frozen=True)
class NameMatcher:
    """A ValueMatcher compiled (linear-time patterns: an administrator's, but still one pass per name)."""

    exact: frozenset[str]
    pattern: Pattern | None
    negate: bool

    def matches(self, name: str) -> bool:
        if name in self.exact:
            return True
        return self.pattern is not None and self.pattern.fullmatch(name) != self.negate


def name_matchers(values: Sequence[ValueMatcher] | None) -> tuple[NameMatcher, ...]:
    """Compiled matchers; one whose pattern does not compile (refused at the API, so only one written while the
    webhook was down) keeps its exact values and matches nothing else."""
    found = []
    for value in values or ():
        pattern: Pattern | None = None
        if value.exp:
            try:
                pattern = compile_pattern(value.exp)
            except PatternError:
                pattern = None
        found.append(NameMatcher(frozenset(value.exact or ()), pattern, value.negate))
    return tuple(found)


@dataclass(frozen=True)
class Scope:
    """What of one cluster-scoped kind a tenant user may see: ``names`` alone when set, else the union of the
    other parts."""

    names: frozenset[str] | None = frozenset()
    """Exactly these names (namespaces); None: the union of the parts below."""
    label_sets: tuple[tuple[tuple[str, str], ...], ...] = ()
    """Objects whose labels hold every pair of at least one set (a tenant's node selector)."""
    matchers: tuple[NameMatcher, ...] = ()
    """Objects by name (``spec.proxy`` names, rules' class matchers)."""
    selectors: tuple[LabelSelector, ...] = ()
    """Objects by label (``spec.proxy`` selectors)."""
    tenants: frozenset[str] = frozenset()
    """PersistentVolumes labelled ``enclave.dev/tenant`` with one of these."""
    claim_namespaces: frozenset[str] = frozenset()
    """PersistentVolumes bound to a claim in one of these namespaces."""

    def candidates(self, every: Mapping[str, Any]) -> Iterable[str]:
        """The names worth looking at among ``every`` (an informer's items)."""
        return self.names if self.names is not None else every.keys()

    def admits(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if self.names is not None:
            return name in self.names
        labels = metadata.get("labels") or {}
        if any(all(labels.get(key) == value for key, value in pairs) for pairs in self.label_sets):
            return True
        if self.tenants and labels.get(TENANT_LABEL) in self.tenants:
            return True
        if self.claim_namespaces:
            claim = (obj.get("spec") or {}).get("claimRef") or {}
            if claim.get("namespace") in self.claim_namespaces:
                return True
        if any(matcher.matches(name) for matcher in self.matchers):
            return True
        return any(selector.matches(labels) for selector in self.selectors)


DEFAULT_USERS = (Entity(kind="Group", name=DEFAULT_USER_GROUP),)
"""Tenant users when no configuration snapshot is followed (the chart's default)."""

NAMESPACE_VERBS = frozenset({"list", "watch"})
"""What the proxy answers of namespaces (a single namespace's get is the owner's RBAC, through kube-apiserver)."""


def _entry(tenant: TenantView | None, kind: str, defaults: Sequence[ProxyKind]) -> ProxyKind | None:
    for entry in tenant.proxy if tenant is not None else ():
        if entry.kind == kind:
            return entry
    for entry in defaults:
        if entry.kind == kind:
            return entry
    return None


def _verbs(entry: ProxyKind | None) -> frozenset[str]:
    return frozenset(READ_VERBS if entry is None or entry.verbs is None else entry.verbs)


@dataclass
class Visibility:
    """The current snapshots and the per-caller answers computed from them."""

    tenancy: TenancySnapshot = field(default_factory=TenancySnapshot)
    config: EffectiveConfiguration | None = None
    revision: int = 0
    """Bumped on every snapshot change: a watch re-evaluates what its caller sees when it moves."""
    _memo: dict[tuple[str, str, str, tuple[str, ...]], Scope | None] = field(default_factory=dict)

    def set_tenancy(self, tenancy: TenancySnapshot) -> None:
        self.tenancy = tenancy
        self._changed()

    def set_config(self, config: EffectiveConfiguration) -> None:
        self.config = config
        self._changed()

    def _changed(self) -> None:
        self.revision += 1
        self._memo = {}

    def scope(self, kind: str, user: str, groups: tuple[str, ...], verb: str = "list") -> Scope | None:
        """What of ``kind`` (``Namespace`` or a ``spec.proxy`` kind name such as ``Nodes``) ``user`` may ``verb``
        through the proxy; None when the proxy does not answer (not a tenant user, or no tenant of its grants
        the verb): pass the request through."""
        key = (kind, verb, user, groups)
        if key in self._memo:
            return self._memo[key]
        found = self._scope(kind, verb, user, groups)
        if len(self._memo) >= MAX_MEMO:
            self._memo = {}
        self._memo[key] = found
        return found

    def _scope(self, kind: str, verb: str, user: str, groups: tuple[str, ...]) -> Scope | None:
        owned = self._owned(user, groups)
        if owned is None:
            return None
        if kind == "Namespace":
            if verb not in NAMESPACE_VERBS:
                return None
            return Scope(names=frozenset(name for tenant in owned for name in tenant.namespaces))
        defaults = list(self.config.spec.proxy.kinds or []) if self.config and self.config.spec.proxy else []
        if not owned:
            # a tenant user of no tenant: an empty answer where the default would answer, else kube-apiserver's
            return Scope(names=frozenset()) if verb in _verbs(_entry(None, kind, defaults)) else None
        granting = [(tenant, _entry(tenant, kind, defaults)) for tenant in owned]
        granting = [(tenant, entry) for tenant, entry in granting if verb in _verbs(entry)]
        if not granting:
            return None
        label_sets: set[tuple[tuple[str, str], ...]] = set()
        matchers: list[NameMatcher] = []
        selectors: list[LabelSelector] = []
        tenants: set[str] = set()
        claim_namespaces: set[str] = set()
        for tenant, entry in granting:
            if entry is not None:
                matchers += name_matchers(entry.names)
                if entry.selector is not None:
                    selectors.append(entry.selector)
            if kind == "Nodes" and tenant.node_selector:
                label_sets.add(tuple(sorted(tenant.node_selector.items())))
            elif kind == "PersistentVolumes":
                tenants.add(tenant.name)
                if entry is not None and entry.claimed:
                    claim_namespaces.update(tenant.namespaces)
            elif kind == "PriorityClasses":
                matchers += name_matchers(tenant.priority_classes)
            elif kind == "RuntimeClasses":
                matchers += name_matchers(tenant.runtime_classes)
        return Scope(
            names=None,
            label_sets=tuple(sorted(label_sets)),
            matchers=tuple(matchers),
            selectors=tuple(selectors),
            tenants=frozenset(tenants),
            claim_namespaces=frozenset(claim_namespaces),
        )

    def namespaces(self, user: str, groups: tuple[str, ...]) -> frozenset[str] | None:
        """The namespaces ``user`` may see when it is a tenant user, else None."""
        found = self.scope("Namespace", user, groups)
        return None if found is None else found.names

    def _owned(self, user: str, groups: tuple[str, ...]) -> list[TenantView] | None:
        """The tenants a tenant user owns (maybe none); None for a caller who is not a tenant user."""
        users: tuple[Entity, ...] | list[Entity] = DEFAULT_USERS
        if self.config is not None:
            spec = self.config.spec
            if spec.ignore_user_with_groups and set(spec.ignore_user_with_groups) & set(groups):
                return None
            if any(entity_matches(admin, user, groups) for admin in spec.administrators or ()):
                return None
            users = self.config.users
        owned = self.tenancy.owned_by(user, groups)
        if not owned and not any(entity_matches(entity, user, groups) for entity in users):
            return None
        return owned

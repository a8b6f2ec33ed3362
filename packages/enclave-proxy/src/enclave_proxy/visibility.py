"""What a caller may list through the proxy, decided from the snapshots (no API call).

The classification is admission's (``enclave_admission.state.State._classify``), restated here because
components never import each other: a caller in ``ignoreUserWithGroups`` or among the ``administrators`` is
not a tenant user; one who owns a tenant or matches the configuration's ``users`` is. Only tenant users get a
filtered answer: the namespaces of the tenants they own, and the nodes those tenants' node selectors match
(possibly none of either; a tenant without a node selector shows no node). Everyone else (administrators, the
tenants' service accounts, other users) is passed through to kube-apiserver, whose RBAC decides as usual.

Answers are memoised per (user, groups) for the life of one pair of snapshots: a handful of users make most
requests, and a snapshot change starts the memo over.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from enclave_core.api.meta import Entity
from enclave_core.snapshots.configuration import DEFAULT_USER_GROUP, EffectiveConfiguration
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView, entity_matches

MAX_MEMO = 10_000


@dataclass(frozen=True)
class Scope:
    """What of one cluster-scoped kind a tenant user may see."""

    names: frozenset[str] | None = frozenset()
    """Exactly these names (namespaces); None: any name whose labels pass :attr:`label_sets`."""
    label_sets: tuple[tuple[tuple[str, str], ...], ...] = ()
    """With ``names`` None: objects whose labels hold every pair of at least one set (a tenant's node selector)."""

    def candidates(self, every: Mapping[str, Any]) -> Iterable[str]:
        """The names worth looking at among ``every`` (an informer's items)."""
        return self.names if self.names is not None else every.keys()

    def admits(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        if self.names is not None:
            return str(metadata.get("name") or "") in self.names
        labels = metadata.get("labels") or {}
        return any(all(labels.get(key) == value for key, value in pairs) for pairs in self.label_sets)


DEFAULT_USERS = (Entity(kind="Group", name=DEFAULT_USER_GROUP),)
"""Tenant users when no configuration snapshot is followed (the chart's default)."""


@dataclass
class Visibility:
    """The current snapshots and the per-caller answers computed from them."""

    tenancy: TenancySnapshot = field(default_factory=TenancySnapshot)
    config: EffectiveConfiguration | None = None
    revision: int = 0
    """Bumped on every snapshot change: a watch re-evaluates what its caller sees when it moves."""
    _memo: dict[tuple[str, str, tuple[str, ...]], Scope | None] = field(default_factory=dict)

    def set_tenancy(self, tenancy: TenancySnapshot) -> None:
        self.tenancy = tenancy
        self._changed()

    def set_config(self, config: EffectiveConfiguration) -> None:
        self.config = config
        self._changed()

    def _changed(self) -> None:
        self.revision += 1
        self._memo = {}

    def scope(self, kind: str, user: str, groups: tuple[str, ...]) -> Scope | None:
        """What of ``kind`` (``Namespace`` or ``Node``) ``user`` may see when it is a tenant user, else None (pass
        the request through)."""
        key = (kind, user, groups)
        if key in self._memo:
            return self._memo[key]
        owned = self._owned(user, groups)
        found: Scope | None = None
        if owned is not None and kind == "Namespace":
            found = Scope(names=frozenset(name for tenant in owned for name in tenant.namespaces))
        elif owned is not None and kind == "Node":
            selectors = {tuple(sorted(t.node_selector.items())) for t in owned if t.node_selector}
            found = Scope(names=None, label_sets=tuple(sorted(selectors)))
        if len(self._memo) >= MAX_MEMO:
            self._memo = {}
        self._memo[key] = found
        return found

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

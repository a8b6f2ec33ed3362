"""Who owns a tenant: spec owners, TenantOwners that join it, promoted service accounts.

Owners are resolved once here and used three ways (RoleBindings, status, the admission snapshot), so the
three can never disagree about who owns what.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enclave_core.api.meta import Entity, EntityKind
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.tenancy import OwnerStatus, Permissions, Tenant, TenantOwner
from enclave_core.rbac import service_account_parts
from enclave_core.selectors import matches_any
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX, entity_matches
from enclave_tenants.policy import Policy

Source = Literal["Tenant", "TenantOwner", "PromotedServiceAccount"]


class Owner(BaseModel):
    """One effective owner with the cluster roles bound to it and where it came from."""

    model_config = ConfigDict(frozen=True)

    kind: EntityKind
    name: str
    cluster_roles: tuple[str, ...]
    sources: tuple[Source, ...]

    @property
    def entity(self) -> Entity:
        return Entity(kind=self.kind, name=self.name)

    @property
    def promoted_only(self) -> bool:
        """Owner only because it is a promoted service account (admission stops it promoting others)."""
        return self.sources == ("PromotedServiceAccount",)

    def status(self) -> OwnerStatus:
        return OwnerStatus(kind=self.kind, name=self.name, cluster_roles=list(self.cluster_roles))


def identity(kind: str, name: str) -> tuple[str, str]:
    """Key under which two spellings of one owner merge (``ns:sa`` and ``system:serviceaccount:ns:sa``)."""
    if kind == "ServiceAccount":
        parts = service_account_parts(name)
        if parts is not None:
            return kind, f"{SERVICE_ACCOUNT_PREFIX}{parts[0]}:{parts[1]}"
    return kind, name


def entity_problem(kind: str, name: str) -> str | None:
    """Why an owner entity cannot be bound, or None. Only service accounts have a format to get wrong."""
    if kind == "ServiceAccount" and service_account_parts(name) is None:
        return f"service account {name!r} must be written system:serviceaccount:<namespace>:<name>"
    return None


def selects(tenant_name: str, permissions: Permissions | None, owner_labels: Mapping[str, str] | None) -> bool:
    """Whether a TenantOwner with ``owner_labels`` owns the tenant: by the tenant label or by matchOwners."""
    labels = owner_labels or {}
    if labels.get(TENANT_LABEL) == tenant_name:
        return True
    return permissions is not None and matches_any(permissions.match_owners, labels)


class _Merger:
    """Collects owners in first-seen order, merging cluster roles and sources of repeated entities."""

    def __init__(self) -> None:
        self._owners: dict[tuple[str, str], Owner] = {}

    def add(self, kind: EntityKind, name: str, roles: Sequence[str], source: Source) -> None:
        key = identity(kind, name)
        current = self._owners.get(key)
        if current is None:
            self._owners[key] = Owner(
                kind=kind, name=name, cluster_roles=tuple(dict.fromkeys(roles)), sources=(source,)
            )
            return
        self._owners[key] = current.model_copy(
            update={
                "cluster_roles": tuple(dict.fromkeys([*current.cluster_roles, *roles])),
                "sources": tuple(dict.fromkeys([*current.sources, source])),
            }
        )

    def owners(self) -> list[Owner]:
        return list(self._owners.values())


def resolve_owners(
    tenant: Tenant,
    tenant_owners: Sequence[TenantOwner],
    promoted: Sequence[tuple[str, str]],
    policy: Policy,
) -> tuple[list[Owner], list[str]]:
    """Effective owners of ``tenant`` and the problems found on the way.

    ``tenant_owners`` are the valid TenantOwner objects (any order: they are taken sorted by object name);
    ``promoted`` the ``(namespace, name)`` of promoted service accounts living in the tenant's namespaces,
    counted only when ``policy.allow_promotion``. An owner that cannot be bound (a service account without a
    namespace) is left out and reported; the others still count.
    """
    name = tenant.metadata.name or ""
    merger = _Merger()
    problems: list[str] = []
    for index, owner in enumerate(tenant.spec.owners or []):
        problem = entity_problem(owner.kind, owner.name)
        if problem:
            problems.append(f"spec.owners[{index}]: {problem}")
            continue
        merger.add(owner.kind, owner.name, owner.cluster_roles, "Tenant")
    for tenant_owner in sorted(tenant_owners, key=lambda o: o.metadata.name or ""):
        spec = tenant_owner.spec
        if entity_problem(spec.kind, spec.name) is not None:
            continue  # reported on the TenantOwner itself
        if selects(name, tenant.spec.permissions, tenant_owner.metadata.labels):
            merger.add(spec.kind, spec.name, spec.cluster_roles, "TenantOwner")
    if policy.allow_promotion:
        for namespace, account in sorted(set(promoted)):
            merger.add(
                "ServiceAccount",
                f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{account}",
                policy.promotion_cluster_roles,
                "PromotedServiceAccount",
            )
    return merger.owners(), problems


def listed(owner: Entity, users: Sequence[Entity]) -> bool:
    """Whether ``users`` names ``owner`` as far as can be known without a request: a Group owner by the same
    Group, a User by the same User, a service account by its entry or by a group it is always in (its
    namespace's, all service accounts', all authenticated users'). A User owner may still belong to a listed
    group at request time: that is known only then, and it does not matter to the fence, which holds either way.
    """
    if owner.kind == "Group":
        return any(user.kind == "Group" and user.name == owner.name for user in users)
    if owner.kind == "ServiceAccount":
        parts = service_account_parts(owner.name)
        if parts is None:
            return False
        username = f"{SERVICE_ACCOUNT_PREFIX}{parts[0]}:{parts[1]}"
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{parts[0]}", "system:authenticated")
        return any(entity_matches(user, username, groups) for user in users)
    return any(user.kind != "Group" and entity_matches(user, owner.name, ()) for user in users)


def unlisted_owners(owners: Sequence[Owner], users: Sequence[Entity]) -> list[Entity]:
    """The owners ``users`` does not name (see :func:`listed`), in owner order: the specification would govern
    them only through a listed group; Enclave fences them anyway because they own the tenant, and says so in
    the Tenant's ``status.unlistedOwners`` (docs/api.md, "Owners outside users")."""
    return [owner.entity for owner in owners if not listed(owner.entity, users)]

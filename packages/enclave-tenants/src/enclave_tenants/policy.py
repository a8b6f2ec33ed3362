"""The slice of the global configuration the tenants component acts on.

The configuration component streams the whole effective ServiceConfiguration; this component needs eight
settings of it. Reducing it to :class:`Policy` once keeps the pure modules independent of the
ServiceConfiguration model and lets the controller run with documented defaults when no configuration
endpoint is given (development, or a cluster without enclave-config).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.api.configuration import Rbac
from enclave_core.api.meta import Entity
from enclave_core.snapshots.configuration import DEFAULT_USER_GROUP, EffectiveConfiguration

_DEFAULT_RBAC = Rbac()


class Policy(BaseModel):
    """Global settings that change what the tenants controller writes."""

    model_config = ConfigDict(frozen=True)

    allow_promotion: bool = False
    """allowServiceAccountPromotion: promoted service accounts of tenant namespaces become owners."""
    promotion_cluster_roles: list[str] = Field(default_factory=lambda: list(_DEFAULT_RBAC.promotion_cluster_roles))
    """rbac.promotionClusterRoles: bound to every promoted service account in its tenant's namespaces."""
    administrators: list[Entity] = Field(default_factory=list)
    """spec.administrators: owners of every tenant (bound, never listed as owners in status)."""
    administration_cluster_roles: list[str] = Field(
        default_factory=lambda: list(_DEFAULT_RBAC.administration_cluster_roles)
    )
    """rbac.administrationClusterRoles: bound to administrators in every tenant namespace."""
    users: list[Entity] = Field(default_factory=lambda: [Entity(kind="Group", name=DEFAULT_USER_GROUP)])
    """The effective users (spec.users, the deprecated userGroups/userNames, or the default group): owners they
    do not name are reported in Tenant status.unlistedOwners, fenced because they own the tenant."""
    events_namespace: str = "default"
    """spec.events.namespace: where events about Tenants and TenantOwners (cluster-scoped) go."""
    rules_engine: str = "webhook"
    """spec.rules.engine: with native or both, tenant rules are also compiled to admission policies."""
    ignored_groups: tuple[str, ...] = ()
    """spec.ignoreUserWithGroups: the compiled policies skip these users as the webhook does."""

    @classmethod
    def from_configuration(cls, config: EffectiveConfiguration | None) -> Policy:
        if config is None:
            return cls()
        spec = config.spec
        return cls(
            allow_promotion=spec.allow_service_account_promotion,
            promotion_cluster_roles=list(spec.rbac.promotion_cluster_roles),
            administrators=list(spec.administrators or []),
            administration_cluster_roles=list(spec.rbac.administration_cluster_roles),
            users=list(config.users),
            events_namespace=spec.events.namespace,
            rules_engine=spec.rules.engine if spec.rules else "webhook",
            ignored_groups=tuple(spec.ignore_user_with_groups or ()),
        )

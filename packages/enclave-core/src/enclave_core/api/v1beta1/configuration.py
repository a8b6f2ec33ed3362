"""ServiceConfiguration in ``enclave.dev/v1beta1``: service users as two name lists, no dynamic admission.

v1beta1 names service users with ``userGroups`` and ``userNames`` and names the webhook configurations with
``overrides.*WebhookConfigurationName``; v1beta2 lists entities in ``users`` and describes the webhook
configurations in ``admission`` (and keeps the old fields, deprecated). Converting up, ``userGroups`` and
``userNames`` become ``users`` entries (Group and User); at most 256 fit there, so a v1beta1 object with more
is refused at write time (the rule below) rather than stored half-converted. Converting down, ``users``
becomes the two lists again and ``admission`` travels in the conversion annotation. Everything else is the
v1beta2 shape, reusing its types.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from enclave_core.api.configuration import (
    Impersonation,
    NodeMetadata,
    Overrides,
    Rbac,
    ServiceConfigurationStatus,
    ServiceEvents,
)
from enclave_core.api.meta import ApiModel, Duration, Entity, Name
from enclave_core.api.schema import REQUIRED, Rule, TypeExtras
from enclave_core.api.v1beta1.meta import KubeObjectV1beta1

__all__ = ["MAX_USERS", "ServiceConfigurationSpecV1beta1", "ServiceConfigurationV1beta1"]

MAX_USERS: Final = 256
"""How many entries v1beta2 ``spec.users`` holds: the bound on ``userGroups`` and ``userNames`` together."""


class ServiceConfigurationSpecV1beta1(ApiModel):
    """Global configuration of Enclave, v1beta1 shape (deprecated: use enclave.dev/v1beta2)."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="(has(self.userGroups) ? size(self.userGroups) : 0)"
                " + (has(self.userNames) ? size(self.userNames) : 0) <= 256",
                message="spec.userGroups and spec.userNames: at most 256 entries together "
                "(they become spec.users of enclave.dev/v1beta2, which holds 256)",
                field_path=".userGroups",
                reason="FieldValueInvalid",
            ),
        )
    )

    cache_invalidation: Annotated[Duration, REQUIRED] = "24h"
    """Period after which all caches are invalidated (Go duration)."""
    enable_tls_reconciler: Annotated[bool, REQUIRED] = Field(False, alias="enableTLSReconciler")
    """Generate a CA and serving certificates for the webhooks when not provided externally."""
    rbac: Annotated[Rbac, REQUIRED] = Field(default_factory=Rbac)
    """Managed cluster roles."""
    administrators: Annotated[list[Entity] | None, Field(max_length=256)] = None
    """Entities that own every tenant; they must use the tenant label when acting on namespaces."""
    allow_service_account_promotion: bool = False
    """Tenant owners may promote service accounts of their namespaces to tenant owners by labelling them."""
    events: ServiceEvents = Field(default_factory=ServiceEvents)
    """Where events are posted."""
    force_tenant_prefix: bool = False
    """Namespaces created by tenant owners must be named `<tenant>-...`."""
    ignore_user_with_groups: Annotated[list[Name] | None, Field(max_length=256)] = None
    """Requests of users in any of these groups are ignored."""
    impersonation: Impersonation | None = None
    """Service account client settings."""
    node_metadata: NodeMetadata | None = None
    """Forbidden node metadata."""
    overrides: Overrides = Field(default_factory=Overrides)
    """Names of Enclave's own objects, including the webhook configurations (v1beta2: `admission.*.name`)."""
    protected_namespace_regex: Annotated[str | None, Field(max_length=1024)] = None
    """Creation of namespaces whose name matches this regular expression is refused."""
    user_groups: Annotated[list[Name] | None, Field(max_length=MAX_USERS)] = None
    """Groups whose members are service users (v1beta2: `users` entries of kind Group). Default: `enclave.dev`."""
    user_names: Annotated[list[Name] | None, Field(max_length=MAX_USERS)] = None
    """User names that are service users (v1beta2: `users` entries of kind User)."""


class ServiceConfigurationV1beta1(KubeObjectV1beta1):
    """Global configuration of Enclave in the deprecated v1beta1 shape (served and converted; v1beta2 is stored)."""

    kind: Literal["ServiceConfiguration"] = "ServiceConfiguration"
    spec: ServiceConfigurationSpecV1beta1
    """Desired configuration."""
    status: ServiceConfigurationStatus | None = None
    """Observed state (the v1beta2 shape)."""

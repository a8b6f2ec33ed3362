"""The Configuration snapshot: the ServiceConfiguration every component acts on.

Published by enclave-config (ConfigService, kind ``ServiceConfiguration``): the spec with defaults applied,
deprecated fields converted (``userGroups``/``userNames`` into ``users``, the deprecated configuration names)
and the effective tenant users. Consumers never re-derive these, so they cannot disagree about who is a
tenant user.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import ApiModel, Entity
from enclave_core.snapshots.payload import SnapshotPayload

CONFIG_KIND: Final = "ServiceConfiguration"
DEFAULT_USER_GROUP: Final = "enclave.dev"


class EffectiveConfiguration(SnapshotPayload, ApiModel):
    """What ConfigService streams: the spec with defaults applied and deprecated fields converted."""

    name: str
    generation: int = 0
    spec: ServiceConfigurationSpec
    users: list[Entity] = Field(default_factory=list)
    """Entities treated as tenant users (spec.users, converted userGroups/userNames, or the default group)."""
    mutating_configuration_name: str
    validating_configuration_name: str


def effective_users(spec: ServiceConfigurationSpec) -> list[Entity]:
    """``users`` plus the deprecated ``userGroups``/``userNames``; the ``enclave.dev`` group when none is set."""
    users: list[Entity] = list(spec.users or [])
    users += [Entity(kind="Group", name=group) for group in spec.user_groups or []]
    users += [Entity(kind="User", name=name) for name in spec.user_names or []]
    if not users:
        users = [Entity(kind="Group", name=DEFAULT_USER_GROUP)]
    unique: dict[tuple[str, str], Entity] = {}
    for entity in users:
        unique.setdefault((entity.kind, entity.name), entity)
    return list(unique.values())


def effective(name: str, generation: int, spec: ServiceConfigurationSpec) -> EffectiveConfiguration:
    admission = spec.admission
    mutating = admission.mutating.name if admission and admission.mutating and admission.mutating.name else None
    validating = admission.validating.name if admission and admission.validating and admission.validating.name else None
    return EffectiveConfiguration(
        name=name,
        generation=generation,
        spec=spec,
        users=effective_users(spec),
        mutating_configuration_name=mutating or spec.overrides.mutating_webhook_configuration_name,
        validating_configuration_name=validating or spec.overrides.validating_webhook_configuration_name,
    )

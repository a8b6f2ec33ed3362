"""The Replication snapshot: which objects replication manages, for admission's protection hook.

Published by enclave-replication (ReplicationService, kind ``Replication``) from the status of every
GlobalTenantResource and TenantResource (``processedItems`` whose policy snapshot has ``protect``). Admission
lets only the listed identities change or delete a listed object and names the managing resource in the
denial.
"""

from __future__ import annotations

from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.snapshots.payload import SnapshotPayload

REPLICATION_KIND: Final = "Replication"

ObjectKey = tuple[str, str, str, str]
"""(API group, kind, namespace, name); namespace empty for cluster-scoped objects."""


class ManagedObject(BaseModel):
    """One protected object and who may change it."""

    model_config = ConfigDict(frozen=True)

    group: str = ""
    kind: str
    namespace: str = ""
    name: str
    owner: str
    """``GlobalTenantResource/<name>`` or ``TenantResource/<namespace>/<name>``."""
    managers: list[str] = Field(default_factory=list)
    """Usernames allowed to change or delete the object (the acting service account; the controller)."""


class ReplicationSnapshot(SnapshotPayload):
    """Every protected object, indexed by (group, kind, namespace, name) once per snapshot."""

    model_config = ConfigDict(frozen=True)

    objects: list[ManagedObject] = Field(default_factory=list)
    controller: str = ""
    """The replication controller's own username (always allowed)."""

    @cached_property
    def index(self) -> dict[ObjectKey, ManagedObject]:
        return {(o.group, o.kind, o.namespace, o.name): o for o in self.objects}

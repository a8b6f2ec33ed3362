"""QuantityLedger: coordination state between the admission webhooks and the quota controllers.

Namespaced, living in Enclave's own namespace (see docs/api.md, "Why QuantityLedger is
namespaced"): admission writes it on the hot path with optimistic concurrency, so its RBAC stays a
Role in one namespace, tenants never see it, and uninstalling Enclave removes every ledger with
its namespace.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from enclave_core.api.meta import ApiModel, Condition, Generation, KubeObject, ObjectRef, StatusModel
from enclave_core.api.schema import Extra, Rule, TypeExtras
from enclave_core.quantity import QuantityValue

__all__ = [
    "CLUSTER_SCOPED_TARGETS",
    "PendingDelete",
    "QuantityLedger",
    "QuantityLedgerSpec",
    "QuantityLedgerStatus",
    "Reservation",
    "ResourceQuotaLedger",
    "ResourceReservation",
    "TargetRef",
]

CLUSTER_SCOPED_TARGETS: Final = ("GlobalCustomQuota", "GlobalResourceQuota")

_BY_ID: Final = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]}


class TargetRef(ApiModel):
    """The quota a ledger belongs to."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="!(self.kind in ['GlobalCustomQuota', 'GlobalResourceQuota'])"
                " || !has(self.namespace) || size(self.namespace) == 0",
                message="targetRef.namespace must be empty for cluster-scoped targets "
                "(GlobalCustomQuota, GlobalResourceQuota)",
                field_path=".namespace",
                reason="FieldValueForbidden",
            ),
            Rule(
                rule="self.kind != 'CustomQuota' || (has(self.namespace) && size(self.namespace) > 0)",
                message="targetRef.namespace is required for a CustomQuota target",
                field_path=".namespace",
                reason="FieldValueRequired",
            ),
        )
    )

    kind: Annotated[str, Field(min_length=1, max_length=63)]
    """Kind of the quota, e.g. CustomQuota, GlobalCustomQuota, GlobalResourceQuota."""
    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Name of the quota."""
    api_group: Annotated[str | None, Field(max_length=253)] = None
    """API group of the quota (`enclave.dev`)."""
    namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of a namespaced quota; empty for cluster-scoped targets."""
    uid: Annotated[str | None, Field(max_length=64)] = None
    """UID of the quota, to detect a ledger left over from a deleted quota of the same name."""


class QuantityLedgerSpec(ApiModel):
    """What the ledger accounts for."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        field_rules={
            "targetRef": (Rule(rule="self == oldSelf", message="targetRef is immutable", reason="FieldValueForbidden"),)
        }
    )

    target_ref: TargetRef
    """The quota this ledger belongs to; immutable."""


class Reservation(StatusModel):
    """Usage admitted for one object that the quota's status does not show yet."""

    id: str
    """Stable across retries of one admission request."""
    object_ref: ObjectRef
    """The object."""
    usage: QuantityValue
    """Its usage."""
    created_at: datetime
    """When the reservation was made."""
    updated_at: datetime
    """When it last changed."""
    delta: QuantityValue | None = None
    """Extra amount held while the object materialises (max(new - old, 0) on update); usage when absent."""
    expires_at: datetime | None = None
    """When the reservation lapses if nothing confirms it."""


class PendingDelete(StatusModel):
    """A hint that an object is being deleted, so its usage can be released early."""

    created_at: datetime
    """When the hint was added."""
    object_ref: ObjectRef
    """The object (uid may be empty on CREATE)."""
    id: str | None = None
    """Admission request that added the hint, so it can roll back its own hint."""


class ResourceReservation(StatusModel):
    """A GlobalResourceQuota reservation: amounts per resource."""

    id: str
    """Stable across retries of one admission request."""
    object_ref: ObjectRef
    """The object."""
    created_at: datetime
    """When the reservation was made."""
    updated_at: datetime
    """When it last changed."""
    delta: dict[str, QuantityValue] | None = None
    """Positive amounts held while the quota status catches up."""
    usage: dict[str, QuantityValue] | None = None
    """Usage per resource."""
    expires_at: datetime | None = None
    """When the reservation lapses."""


class ResourceQuotaLedger(StatusModel):
    """Ledger state of a GlobalResourceQuota (absent for custom quotas)."""

    allocated: dict[str, QuantityValue] | None = None
    """Used plus active reservations."""
    initialized: bool | None = None
    """True once every selected namespace reported quota status."""
    namespaces: list[str] | None = None
    """Namespaces covered."""
    observed_generation: Generation | None = None
    """Generation of the quota last accounted for."""
    reserved: dict[str, QuantityValue] | None = None
    """Sum of active reservations (derived)."""
    used: dict[str, QuantityValue] | None = None
    """Usage reported by the namespaces."""
    reservations: Annotated[list[ResourceReservation] | None, Extra(**_BY_ID)] = None
    """Active reservations, unique by id."""


class QuantityLedgerStatus(StatusModel):
    """The accounting state."""

    allocated: QuantityValue | None = None
    """Total accepted by the webhook; updated only with optimistic concurrency."""
    conditions: list[Condition] | None = None
    """Ready."""
    reserved: QuantityValue | None = None
    """Sum of active reservations (derived)."""
    reservations: Annotated[list[Reservation] | None, Extra(**_BY_ID)] = None
    """Active reservations, unique by id."""
    pending_deletes: list[PendingDelete] | None = None
    """Deletion hints."""
    resource_quota: ResourceQuotaLedger | None = None
    """Set only for GlobalResourceQuota ledgers."""


class QuantityLedger(KubeObject):
    """Coordination state of one quota (namespaced, in Enclave's namespace)."""

    kind: Literal["QuantityLedger"] = "QuantityLedger"
    spec: QuantityLedgerSpec | None = None
    """The quota accounted for."""
    status: QuantityLedgerStatus | None = None
    """The accounting state."""

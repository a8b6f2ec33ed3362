"""The status of a replication object: Ready, observedGeneration, size, selected tenants and per-item outcomes.

Pure: the controller hands in what happened and the time; :func:`changed` decides whether a write is needed,
so a steady state, where nothing was applied and every item reports as before, writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from enclave_core.api.replication import ItemPolicy, ItemStatus, ProcessedItem, ReplicationStatus, ServiceAccountRef
from enclave_core.conditions import new_condition, set_condition
from enclave_core.kube.rest import JSON

CONDITION_MESSAGE_LIMIT: Final = 2048
ITEMS_LIMIT: Final = 5000
"""Processed items reported at most (etcd's object size bounds a status); size still counts them all."""


@dataclass
class ItemResult:
    """What happened to one item (an object, or an item that could not become one)."""

    origin: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    tenant: str = ""
    group: str = ""
    version: str = ""
    kind: str = ""
    name: str = ""
    namespace: str = ""
    cluster_scoped: bool | None = None
    created: bool | None = None
    last_apply: datetime | None = None
    policy: ItemPolicy | None = None
    managed: bool = False
    """The object exists and carries this resource's mark (counts toward ``size``)."""

    def sort_key(self) -> tuple[str, str, str, str, str]:
        return (self.origin, self.namespace, self.kind, self.name, self.tenant)

    def processed(self) -> ProcessedItem:
        return ProcessedItem(
            group=self.group or None,
            kind=self.kind or None,
            name=self.name or None,
            namespace=self.namespace or None,
            origin=self.origin,
            tenant=self.tenant or None,
            version=self.version or None,
            status=ItemStatus(
                status=self.status,
                type="Ready",
                reason=self.reason,
                cluster_scoped=self.cluster_scoped,
                created=self.created,
                last_apply=self.last_apply,
                message=self.message[:CONDITION_MESSAGE_LIMIT] or None,
                policy=self.policy,
            ),
        )


def previous_items(raw: JSON) -> dict[tuple[str, str, str, str], ProcessedItem]:
    """The last reported items by (group, kind, namespace, name): their lastApply and policy snapshot."""
    status = raw.get("status") or {}
    try:
        parsed = ReplicationStatus.model_validate(status)
    except ValueError:
        return {}
    return {
        (item.group or "", item.kind or "", item.namespace or "", item.name or ""): item
        for item in parsed.processed_items or ()
        if item.kind and item.name
    }


def build(
    raw: JSON,
    *,
    items: list[ItemResult],
    selected_tenants: list[str],
    service_account: ServiceAccountRef | None,
    ready: tuple[bool, str, str],
    now: datetime,
) -> JSON:
    meta = raw.get("metadata", {})
    generation = int(meta.get("generation") or 0) or None
    previous = raw.get("status") or {}
    try:
        conditions = ReplicationStatus.model_validate(previous).conditions
    except ValueError:
        conditions = None
    ok, reason, message = ready
    condition = new_condition(
        "Ready",
        "True" if ok else "False",
        reason,
        message[:CONDITION_MESSAGE_LIMIT],
        now=now,
        observed_generation=generation,
    )
    ordered = sorted(items, key=ItemResult.sort_key)
    status = ReplicationStatus(
        size=sum(1 for item in items if item.managed),
        conditions=set_condition(conditions, condition, now),
        observed_generation=generation,
        selected_tenants=selected_tenants,
        service_account=service_account,
        processed_items=[item.processed() for item in ordered[:ITEMS_LIMIT]],
    )
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def normalised(status: JSON) -> JSON:
    try:
        return ReplicationStatus.model_validate(status).model_dump(mode="json", by_alias=True, exclude_none=True)
    except ValueError:
        return {}


def changed(raw: JSON, status: JSON) -> bool:
    return normalised(raw.get("status") or {}) != status

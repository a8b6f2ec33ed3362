"""Pure ledger steps for the ``status.resourceQuota`` block: the GlobalResourceQuota ledger, amounts per resource.

The same protocol as :mod:`enclave_core.ledger.ops` (reserve, roll back, fold; written through
:class:`~enclave_core.ledger.client.LedgerClient` with optimistic concurrency), on resource lists instead of
one quantity. Invariant: ``allocated = used + reserved`` per resource, where ``used`` is the usage the
namespaces' ResourceQuotas report (the owning controller is its only writer) and ``reserved`` what live
reservations hold (``delta`` when set, else ``usage``). Admission takes a hold only while
``allocated + hold <= hard`` for every resource the hold touches, and only once the block is ``initialized``
(every selected namespace reported usage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from enclave_core.api.ledger import QuantityLedgerStatus, ResourceQuotaLedger, ResourceReservation
from enclave_core.api.meta import ObjectRef
from enclave_core.quantity import Quantity, add_maps

__all__ = [
    "RESOURCE_TTL",
    "ResourceHold",
    "ResourceRefusal",
    "fold_resources",
    "held_resources",
    "reserve_resources",
    "rollback_resources",
]

RESOURCE_TTL: Final = timedelta(seconds=30)
"""How long a GlobalResourceQuota reservation holds at most. It is normally folded within a second (once the
namespace's ResourceQuota reports the object); the lapse only matters for an object a later webhook refused."""


def _text(values: Mapping[str, Quantity]) -> dict[str, str]:
    return {key: str(value) for key, value in sorted(values.items())}


def held_resources(reservation: ResourceReservation) -> dict[str, Quantity]:
    """What a reservation holds: its delta when set, else its usage."""
    amounts = reservation.delta if reservation.delta is not None else reservation.usage
    return add_maps(amounts or {})


@dataclass(frozen=True, slots=True)
class ResourceHold:
    """What one admission request asks a GlobalResourceQuota ledger for."""

    id: str
    object_ref: ObjectRef
    usage: dict[str, Quantity]
    """The object's usage after the change, for the quota's resources."""
    delta: dict[str, Quantity] | None = None
    """For an update: max(new - old, 0) per resource; None for a create."""

    @property
    def amount(self) -> dict[str, Quantity]:
        return self.delta if self.delta is not None else self.usage


@dataclass(frozen=True, slots=True)
class ResourceRefusal:
    """Why a ledger cannot take a hold: the resources over the limit, with the numbers."""

    exceeded: dict[str, tuple[Quantity, Quantity, Quantity]] = field(default_factory=dict)
    """resource -> (requested, allocated, hard)."""
    initialised: bool = True

    def describe(self, quota: str) -> str:
        if not self.initialised:
            return (
                f"GlobalResourceQuota {quota} is not initialised yet (not every namespace's ResourceQuota has "
                "reported usage); retry shortly"
            )
        parts = [
            f"{name}: requested {req}, used and reserved {alloc}, limited {hard}"
            for name, (req, alloc, hard) in sorted(self.exceeded.items())
        ]
        return f"exceeded GlobalResourceQuota {quota}: {'; '.join(parts)}"


def _same_object(reservation: ResourceReservation, hold: ResourceHold) -> bool:
    """Both name one object: same kind, group, namespace and a name (a create without one names no object)."""
    mine, theirs = reservation.object_ref, hold.object_ref
    return bool(theirs.name) and (mine.kind, mine.api_group, mine.namespace, mine.name) == (
        theirs.kind,
        theirs.api_group,
        theirs.namespace,
        theirs.name,
    )


def reserve_resources(
    status: QuantityLedgerStatus | None,
    hold: ResourceHold,
    hard: Mapping[str, Quantity],
    *,
    now: datetime,
    ttl: timedelta = RESOURCE_TTL,
) -> QuantityLedgerStatus | ResourceRefusal | None:
    """Append ``hold`` if it fits under ``hard`` for every resource; None when ``hold.id`` is already there
    (a retry of an admitted request: admit again without a write).

    A create replaces an earlier create's reservation for the same object (kind, namespace and name): at most
    one of them can be stored, so one reservation is enough. This is what a client's retry is: kube-apiserver's
    quota plugin answers 409 when concurrent creates race on a ResourceQuota's status, the client sends the
    create again, and the new request (a new id) would otherwise hold the unit a second time until the first
    reservation lapsed, refusing a create the quota has room for."""
    block = status.resource_quota if status is not None else None
    if block is None or not block.initialized:
        return ResourceRefusal(initialised=False)
    assert status is not None
    reservations = list(block.reservations or ())
    if any(r.id == hold.id for r in reservations):
        return None
    amount = {key: value for key, value in hold.amount.items() if key in hard and value.sign() > 0}
    if not amount:
        return None
    allocated = add_maps(block.allocated or {})
    replaced = [r for r in reservations if hold.delta is None and r.delta is None and _same_object(r, hold)]
    if replaced:
        released = add_maps(*(held_resources(r) for r in replaced))
        allocated = {k: max(v - released.get(k, Quantity(0)), Quantity(0)) for k, v in allocated.items()}
        reserved_left = add_maps(block.reserved or {}, {k: -v for k, v in released.items()})
        block = block.model_copy(
            update={
                "allocated": _text(allocated),
                "reserved": _text({k: max(v, Quantity(0)) for k, v in reserved_left.items()}),
            }
        )
        reservations = [r for r in reservations if r not in replaced]
    over = {
        key: (value, allocated.get(key, Quantity(0)), hard[key])
        for key, value in amount.items()
        if allocated.get(key, Quantity(0)) + value > hard[key]
    }
    if over:
        return ResourceRefusal(over)
    reservation = ResourceReservation(
        id=hold.id,
        object_ref=hold.object_ref,
        usage=_text(hold.usage),
        delta=_text(hold.delta) if hold.delta is not None else None,
        created_at=now,
        updated_at=now,
        expires_at=now + ttl,
    )
    new_block = block.model_copy(
        update={
            "allocated": _text(add_maps(allocated, amount)),
            "reserved": _text(add_maps(block.reserved or {}, amount)),
            "reservations": [*reservations, reservation],
        }
    )
    return status.model_copy(update={"resource_quota": new_block})


def rollback_resources(status: QuantityLedgerStatus | None, request_id: str) -> QuantityLedgerStatus | None:
    """Remove request ``request_id``'s reservation; None when there is none."""
    block = status.resource_quota if status is not None else None
    if block is None or not block.reservations:
        return None
    assert status is not None
    gone = [r for r in block.reservations if r.id == request_id]
    if not gone:
        return None
    released = held_resources(gone[0])
    kept = [r for r in block.reservations if r.id != request_id]
    allocated = add_maps(block.allocated or {}, {k: -v for k, v in released.items()})
    reserved = add_maps(block.reserved or {}, {k: -v for k, v in released.items()})
    new_block = block.model_copy(
        update={
            "allocated": _text({k: max(v, Quantity(0)) for k, v in allocated.items()}),
            "reserved": _text({k: max(v, Quantity(0)) for k, v in reserved.items()}),
            "reservations": kept or None,
        }
    )
    return status.model_copy(update={"resource_quota": new_block})


def fold_resources(
    status: QuantityLedgerStatus | None,
    *,
    used: Mapping[str, Quantity],
    namespaces: list[str],
    initialized: bool,
    generation: int,
    settled: Callable[[ResourceReservation], bool],
    now: datetime,
    stored: Callable[[ResourceReservation], bool] | None = None,
) -> QuantityLedgerStatus:
    """The owning controller's write: the namespaces' reported usage, and the reservations it does not yet
    include (``settled`` says which it does). A reservation past ``expiresAt`` lapses (its object never came)
    unless ``stored`` says its object exists: that one is held until ``used`` includes it, or the unit would
    be free while the object holds it. Deterministic: an unchanged world folds to an equal status, so the
    caller skips the write."""
    status = status or QuantityLedgerStatus()
    block = status.resource_quota or ResourceQuotaLedger()
    kept = [
        r
        for r in block.reservations or ()
        if not settled(r) and (r.expires_at is None or r.expires_at > now or (stored is not None and stored(r)))
    ]
    reserved = add_maps(*(held_resources(r) for r in kept))
    reserved = {key: value for key, value in reserved.items() if key in used}
    zero = {key: Quantity(0) for key in used}
    new_block = ResourceQuotaLedger(
        used=_text(used),
        reserved=_text(add_maps(zero, reserved)),
        allocated=_text(add_maps(used, reserved)),
        namespaces=namespaces,
        initialized=initialized,
        observed_generation=generation,
        reservations=kept or None,
    )
    return status.model_copy(update={"resource_quota": new_block})

"""Pure ledger arithmetic: what a reservation, a rollback, a deletion hint and a fold do to ``status``.

Every function takes the status it read and returns the status to write (or a value saying no write is
needed), never touching the API, so :class:`~enclave_core.ledger.client.LedgerClient` can retry one of them
after a ``409 Conflict`` on a fresh read, and unit tests can check the arithmetic alone.

The invariant every writer keeps: ``allocated = used + reserved``, where ``used`` is what the owning quota
controller last counted from the objects it watches (the only writer of ``used``: it is not stored on the
ledger but derived, ``allocated - reserved``), and ``reserved`` the sum of what live reservations hold. A
reservation holds its ``delta`` when set (an update: max(new - old, 0)) and its ``usage`` otherwise (a
create). Admission admits ``h`` only while ``allocated + h <= limit``, and writes the new ``allocated``
with the resourceVersion it read, so two replicas can never both take the last unit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from enclave_core.api.ledger import (
    CLUSTER_SCOPED_TARGETS,
    PendingDelete,
    QuantityLedger,
    QuantityLedgerSpec,
    QuantityLedgerStatus,
    Reservation,
    TargetRef,
)
from enclave_core.api.meta import ObjectMeta, ObjectRef
from enclave_core.conditions import new_condition, set_condition
from enclave_core.quantity import Quantity

DEFAULT_TTL: Final = timedelta(seconds=60)
"""How long a reservation holds before the owning controller drops it as never materialised.

Long enough for the object to be stored and reach the controller's watch (normally well under a second, and
a controller restart or a slow apiserver stays within it); short enough that an object a later webhook
refused frees its quota within a minute.
"""

PENDING_DELETE_TTL: Final = timedelta(minutes=5)
"""A deletion hint the controller could not see through (the DELETE was refused later) lapses after this."""

_MAX_NAME: Final = 253


def ledger_name(target: TargetRef) -> str:
    """The ledger's name for ``target``: ``<kind>.<namespace>.<name>`` lower-cased (``<kind>.<name>`` for a
    cluster-scoped target). Namespaces have no dots, so the first two dots separate the parts unambiguously;
    a name over 253 characters keeps a readable prefix and ends with a hash of the whole."""
    parts = [target.kind.lower()]
    if target.namespace and target.kind not in CLUSTER_SCOPED_TARGETS:
        parts.append(target.namespace)
    parts.append(target.name)
    name = ".".join(parts)
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: _MAX_NAME - 17].rstrip('.-')}-{digest}"


def new_ledger(target: TargetRef, namespace: str, labels: dict[str, str] | None = None) -> QuantityLedger:
    """A ledger for ``target`` in Enclave's ``namespace`` (status empty: not initialised until a fold)."""
    return QuantityLedger(
        api_version="enclave.dev/v1beta2",
        metadata=ObjectMeta(name=ledger_name(target), namespace=namespace, labels=labels or None),
        spec=QuantityLedgerSpec(target_ref=target),
    )


def held(reservation: Reservation) -> Quantity:
    """What a reservation holds against the limit: its delta when set (an update), else its usage."""
    return Quantity.parse(reservation.delta if reservation.delta is not None else reservation.usage)


@dataclass(frozen=True, slots=True)
class Totals:
    """A ledger's amounts, parsed."""

    allocated: Quantity
    reserved: Quantity

    @property
    def used(self) -> Quantity:
        """What the owning controller counted (allocated minus reserved, never below zero)."""
        used = self.allocated - self.reserved
        return used if used.sign() >= 0 else Quantity(0)


def totals(status: QuantityLedgerStatus | None) -> Totals | None:
    """The parsed amounts, or None while the owning controller has not initialised the ledger (no
    ``allocated``): nothing can be decided from it yet."""
    if status is None or status.allocated is None:
        return None
    reserved = Quantity(0)
    for reservation in status.reservations or ():
        reserved = reserved + held(reservation)
    return Totals(Quantity.parse(status.allocated), reserved)


@dataclass(frozen=True, slots=True)
class Hold:
    """What one admission request asks a ledger for."""

    id: str
    """The admission request's uid: stable across kube-apiserver's retries and ours, so a retry finds its own
    reservation instead of taking a second one."""
    object_ref: ObjectRef
    usage: Quantity
    """The object's usage after the change."""
    delta: Quantity | None = None
    """For an update: max(new - old, 0); None for a create (the whole usage is held)."""

    @property
    def amount(self) -> Quantity:
        return self.delta if self.delta is not None else self.usage


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a ledger cannot take a hold: the numbers a denial message names."""

    requested: Quantity
    used: Quantity
    reserved: Quantity
    limit: Quantity
    initialised: bool = True

    def describe(self, quota: str) -> str:
        """The denial message; ``quota`` names it (``CustomQuota team/pods``)."""
        if not self.initialised:
            return f"{quota} is not initialised yet (its controller has not counted its usage); retry shortly"
        return (
            f"{quota} exceeded: requested {self.requested}, used {self.used}, "
            f"reserved {self.reserved}, limit {self.limit}"
        )


def reserve(
    status: QuantityLedgerStatus | None,
    hold: Hold,
    limit: Quantity,
    *,
    now: datetime,
    ttl: timedelta = DEFAULT_TTL,
) -> QuantityLedgerStatus | Refusal | None:
    """Append ``hold`` as a reservation if ``allocated + amount <= limit``.

    Returns the status to write, a :class:`Refusal`, or None when ``hold.id`` is already reserved (a retry of
    a request that was admitted: nothing to write, admit again).
    """
    current = totals(status)
    if current is None:
        return Refusal(hold.amount, Quantity(0), Quantity(0), limit, initialised=False)
    assert status is not None
    if any(reservation.id == hold.id for reservation in status.reservations or ()):
        return None
    amount = hold.amount
    if current.allocated + amount > limit:
        return Refusal(amount, current.used, current.reserved, limit)
    reservation = Reservation(
        id=hold.id,
        object_ref=hold.object_ref,
        usage=str(hold.usage),
        delta=str(hold.delta) if hold.delta is not None else None,
        created_at=now,
        updated_at=now,
        expires_at=now + ttl,
    )
    return status.model_copy(
        update={
            "allocated": str(current.allocated + amount),
            "reserved": str(current.reserved + amount),
            "reservations": [*(status.reservations or ()), reservation],
        }
    )


def rollback(status: QuantityLedgerStatus | None, request_id: str) -> QuantityLedgerStatus | None:
    """Remove what request ``request_id`` added (its reservation, its deletion hint); None when there is none
    (never written, or already folded or rolled back)."""
    if status is None:
        return None
    reservations = status.reservations or []
    kept = [r for r in reservations if r.id != request_id]
    hints = status.pending_deletes or []
    kept_hints = [h for h in hints if h.id != request_id]
    if len(kept) == len(reservations) and len(kept_hints) == len(hints):
        return None
    update: dict[str, object] = {"reservations": kept or None, "pending_deletes": kept_hints or None}
    current = totals(status)
    if current is not None:
        released = sum((held(r) for r in reservations if r.id == request_id), Quantity(0))
        allocated = current.allocated - released
        update["allocated"] = str(allocated if allocated.sign() >= 0 else Quantity(0))
        update["reserved"] = str(current.reserved - released)
    return status.model_copy(update=update)


def add_pending_delete(
    status: QuantityLedgerStatus | None, request_id: str, object_ref: ObjectRef, *, now: datetime
) -> QuantityLedgerStatus | None:
    """Record that ``object_ref`` is being deleted; None when this request already did.

    The hint releases nothing by itself (a later webhook may still refuse the DELETE): it tells the owning
    controller to recount the object as soon as its watch shows it gone.
    """
    status = status or QuantityLedgerStatus()
    hints = status.pending_deletes or []
    if any(hint.id == request_id for hint in hints):
        return None
    hint = PendingDelete(created_at=now, object_ref=object_ref, id=request_id)
    return status.model_copy(update={"pending_deletes": [*hints, hint]})


def fold(
    status: QuantityLedgerStatus | None,
    used: Quantity,
    *,
    settled: Callable[[Reservation], bool],
    gone: Callable[[PendingDelete], bool],
    now: datetime,
    pending_delete_ttl: timedelta = PENDING_DELETE_TTL,
) -> QuantityLedgerStatus:
    """The owning controller's write: ``used`` is its count from the objects it watches.

    Drops reservations that ``settled`` says the count now includes and those past ``expiresAt`` (their
    object never materialised), drops deletion hints ``gone`` says it has seen through or that are too old,
    and recomputes ``reserved`` and ``allocated = max(used, 0) + reserved``. Deterministic: folding an
    unchanged world returns an equal status, so the caller skips the write.
    """
    status = status or QuantityLedgerStatus()
    kept = [r for r in status.reservations or () if not settled(r) and (r.expires_at is None or r.expires_at > now)]
    hints = [h for h in status.pending_deletes or () if not gone(h) and h.created_at + pending_delete_ttl > now]
    reserved = sum((held(r) for r in kept), Quantity(0))
    base = used if used.sign() >= 0 else Quantity(0)
    ready = new_condition("Ready", "True", "Accounted", "used and reservations folded", now=now)
    return status.model_copy(
        update={
            "allocated": str(base + reserved),
            "reserved": str(reserved),
            "reservations": kept or None,
            "pending_deletes": hints or None,
            "conditions": set_condition(status.conditions, ready),
        }
    )

"""The QuantityLedger of each GlobalResourceQuota: its object, and when a reservation counts as settled.

Admission appends reservations to ``status.resourceQuota`` (raising ``allocated``) with optimistic concurrency;
this controller is the only writer of ``used``, ``namespaces``, ``initialized`` and ``observedGeneration``,
and folds reservations (:func:`enclave_core.ledger.resources.fold_resources`), both through
:class:`enclave_core.ledger.LedgerClient`.

*Settled*: admission reserves for an object before kube-apiserver's ResourceQuota plugin charges it to its
namespace's ResourceQuota (webhooks run first; the quota plugin writes the ResourceQuota's status before the
object is stored). Once the object exists its charge was made, but the ResourceQuota need not hold it any
more: a kube-controller-manager recount that ran before its informer had the object overwrote the charge, and
the next charge raised the figure again, so the report never went down where this controller could see it (seen
under load: two services settled into a report of one, and a sixth was admitted under ``services: 5``).
So a reservation is dropped only into a *count*: once its object exists, the controller lists the namespace
(:mod:`enclave_globalquotas.recount`, a consistent read taken after the object was seen) and the quota's usage
for it is the larger of report and count; a pending create whose object that list shows goes with it too. The
ResourceQuota is still read afresh, as it may hold charges of creates still in flight. A reservation whose object
never appears (a later webhook refused it) lapses after 30 s; one whose object exists is held past that until a
count holds it. The reads happen only while reservations are pending, never in a steady state.

*In flight*: a reservation younger than :data:`IN_FLIGHT` that has not settled marks a create between
admission and storage. While a namespace has one, the controller leaves that namespace's ResourceQuota
``hard`` alone (:func:`in_flight`). Any change of ``spec.hard`` makes kube-controller-manager recount the
namespace from its informers, and a recount that runs after kube-apiserver charged an object but before the
object was stored misses it and overwrites the charge (kubernetes/kubernetes#113716 describes the family).
The ResourceQuota then under-reports until the next recount, the reservation settles against that figure and
the ledger would give the unit out twice. Our own ``hard`` patches were what started such recounts, and they
came exactly while creates were in flight (every reservation changes the headroom); deferring them for that
moment takes the alignment away. A recount kube-controller-manager starts on its own (its periodic resync, a
deletion) can still meet an in-flight create: that residual window is Kubernetes' own (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from enclave_core import API_GROUP, GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.ledger import QuantityLedger, ResourceReservation, TargetRef
from enclave_core.kube.rest import JSON, resource_path
from enclave_core.ledger import ledger_name
from enclave_globalquotas import naming


def quota_ledger_name(quota: str) -> str:
    """``globalresourcequota.<quota>``: the shared naming of ledgers (:func:`enclave_core.ledger.ledger_name`)."""
    return ledger_name(TargetRef(kind="GlobalResourceQuota", name=quota))


def ledger_body(quota: str, uid: str, namespace: str) -> JSON:
    """A new ledger for ``quota``, owned by it (the garbage collector removes it with the quota)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "QuantityLedger",
        "metadata": {
            "name": quota_ledger_name(quota),
            "namespace": namespace,
            "labels": {
                names.MANAGED_BY: names.GLOBALQUOTAS_MANAGER,
                names.GLOBALQUOTA_LABEL: naming.label_value(quota),
            },
            "ownerReferences": [
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "GlobalResourceQuota",
                    "name": quota,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"targetRef": {"kind": "GlobalResourceQuota", "name": quota, "apiGroup": API_GROUP, "uid": uid}},
    }


def resource_version(obj: JSON | None) -> int:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def newer(first: JSON | None, second: JSON | None) -> JSON | None:
    """The copy with the higher resourceVersion (comparable for one resource since Kubernetes 1.35)."""
    if first is None or second is None:
        return first or second
    return first if resource_version(first) >= resource_version(second) else second


_PLURALS = {
    "Pod": "pods",
    "Service": "services",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ReplicationController": "replicationcontrollers",
}
"""The kinds whose objects the controller may read (get, list). Not Secrets: an account that may get Secrets in
Enclave's namespace reads the CA key and every component's client certificate, so a Secret's reservation is
never settled early and lapses (30 s) instead, the quota erring on the side of refusing meanwhile."""


def object_path(reservation: ResourceReservation) -> str | None:
    """The API path of a reservation's object (the kinds the controller may read), or None."""
    ref = reservation.object_ref
    plural = _PLURALS.get(ref.kind) if not ref.api_group else None
    if plural is None or not ref.name or not ref.namespace:
        return None
    return resource_path("v1", plural, namespace=ref.namespace, name=ref.name)


IN_FLIGHT: Final = timedelta(seconds=5)
"""How long an unsettled reservation defers its namespace's ``hard`` patches. A create normally goes from
admission to storage in well under a second; a reservation whose object never comes (a later webhook refused
it) stops deferring after this and lapses at its ``expiresAt``."""


def in_flight(
    ledgers: Iterable[QuantityLedger], settled: set[str], *, now: datetime, window: timedelta = IN_FLIGHT
) -> set[tuple[str, str]]:
    """(quota, namespace) pairs with a create in flight: an unsettled reservation younger than ``window``."""
    pairs: set[tuple[str, str]] = set()
    for ledger in ledgers:
        block = ledger.status.resource_quota if ledger.status is not None else None
        quota = ledger.spec.target_ref.name if ledger.spec is not None else ""
        for reservation in (block.reservations or []) if block is not None else []:
            namespace = reservation.object_ref.namespace
            if not namespace or not quota or reservation.id in settled:
                continue
            if now - reservation.created_at < window:
                pairs.add((quota, namespace))
    return pairs


MAX_DEFERRAL: Final = 10.0
"""Seconds a namespace's ResourceQuota may go unpatched because creates keep arriving there; then it is patched
anyway, so a namespace that is never quiet still gets its ``hard`` moved (the deferral starts over after)."""


class Deferrals:
    """Which in-flight (quota, namespace) pairs to hold back now, each for at most :data:`MAX_DEFERRAL` in a
    row (on the caller's monotonic clock)."""

    def __init__(self, limit: float = MAX_DEFERRAL) -> None:
        self.limit = limit
        self._since: dict[tuple[str, str], float] = {}

    def hold(self, pairs: set[tuple[str, str]], now: float) -> set[tuple[str, str]]:
        for pair in set(self._since) - pairs:
            del self._since[pair]
        held: set[tuple[str, str]] = set()
        for pair in pairs:
            since = self._since.setdefault(pair, now)
            if now - since < self.limit:
                held.add(pair)
            else:
                del self._since[pair]  # patched this pass; a new deferral may start with the next
        return held

"""The QuantityLedger of each GlobalResourceQuota: its object, and when a reservation counts as settled.

Admission appends reservations to ``status.resourceQuota`` (raising ``allocated``) with optimistic concurrency;
this controller is the only writer of ``used``, ``namespaces``, ``initialized`` and ``observedGeneration``,
and folds reservations (:func:`enclave_core.ledger.resources.fold_resources`), both through
:class:`enclave_core.ledger.LedgerClient`.

*Settled*: admission reserves for an object before kube-apiserver's ResourceQuota plugin charges it to its
namespace's ResourceQuota (webhooks run first; the quota plugin writes the ResourceQuota's status before the
object is stored). So once the object exists, its charge is committed: the controller then reads that
namespace's ResourceQuota afresh (its watch may lag a moment behind), counts from the fresher copy, and drops
the reservation. A reservation whose object never appears (a later webhook refused it) lapses after 30 s. The
reads happen only while reservations are pending, never in a steady state.
"""

from __future__ import annotations

from enclave_core import API_GROUP, GROUP_VERSION
from enclave_core.api.ledger import ResourceReservation, TargetRef
from enclave_core.kube.rest import JSON, resource_path
from enclave_core.ledger import ledger_name as shared_ledger_name
from enclave_globalquotas import naming


def ledger_name(quota: str) -> str:
    """``globalresourcequota.<quota>``: the shared naming of ledgers (:func:`enclave_core.ledger.ledger_name`)."""
    return shared_ledger_name(TargetRef(kind="GlobalResourceQuota", name=quota))


def ledger_body(quota: str, uid: str, namespace: str) -> JSON:
    """A new ledger for ``quota``, owned by it (the garbage collector removes it with the quota)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "QuantityLedger",
        "metadata": {
            "name": ledger_name(quota),
            "namespace": namespace,
            "labels": {naming.MANAGED_BY: naming.MANAGER, naming.QUOTA_LABEL: naming.label_value(quota)},
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
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ReplicationController": "replicationcontrollers",
}


def object_path(reservation: ResourceReservation) -> str | None:
    """The API path of a reservation's object (the kinds admission reserves for), or None."""
    ref = reservation.object_ref
    plural = _PLURALS.get(ref.kind) if not ref.api_group else None
    if plural is None or not ref.name or not ref.namespace:
        return None
    return resource_path("v1", plural, namespace=ref.namespace, name=ref.name)

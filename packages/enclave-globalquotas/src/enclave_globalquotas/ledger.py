"""The QuantityLedger of each GlobalResourceQuota: its object, and when a reservation counts as settled.

Admission appends reservations to ``status.resourceQuota`` (raising ``allocated``) with optimistic concurrency;
this controller is the only writer of ``used``, ``namespaces``, ``initialized`` and ``observedGeneration``,
and folds reservations (:func:`enclave_core.ledger.resources.fold_resources`), both through
:class:`enclave_core.ledger.LedgerClient`.

*Settled*: admission reserves for an object before kube-apiserver's ResourceQuota admission charges it to
its namespace's ResourceQuota (webhooks run first; the quota plugin runs last and writes the ResourceQuota's
status before the object is stored). So the first change of that namespace's ResourceQuota after the
reservation appeared is, in all but a millisecond window, the charge itself (or the object's refusal): from
then on the reported usage includes it and the reservation is dropped. :class:`Settlement` remembers, per
reservation, the ResourceQuota's resourceVersion when this controller first saw the reservation, and calls
it settled once the ResourceQuota's resourceVersion is newer (resourceVersions of one resource are
comparable since Kubernetes 1.35). If the charge landed before the controller saw the reservation, the
reservation waits for the next change or its lapse (30 s): the count is then high for a while, never low.
"""

from __future__ import annotations

from collections.abc import Callable

from enclave_core import API_GROUP, GROUP_VERSION
from enclave_core.api.ledger import ResourceReservation, TargetRef
from enclave_core.kube.rest import JSON
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


class Settlement:
    """Which reservations the namespaces' reported usage now includes (see the module docstring)."""

    def __init__(self) -> None:
        self._baseline: dict[str, int] = {}

    def predicate(self, version_of: Callable[[str], int]) -> Callable[[ResourceReservation], bool]:
        """``version_of(namespace)`` is the resourceVersion of the quota's ResourceQuota there (0: none)."""

        def settled(reservation: ResourceReservation) -> bool:
            namespace = reservation.object_ref.namespace or ""
            current = version_of(namespace)
            baseline = self._baseline.setdefault(reservation.id, current)
            return current > baseline

        return settled

    def forget_except(self, ids: set[str]) -> None:
        """Drop the memory of reservations no ledger holds any more."""
        self._baseline = {key: value for key, value in self._baseline.items() if key in ids}

"""The tenant namespace quota on the QuantityLedger protocol: one ledger per tenant with a quota.

Admission reserves each namespace it admits into such a tenant on the tenant's ledger (docs/architecture.md,
"QuantityLedger protocol"), so N admission replicas together never admit more namespaces than the quota. This
component folds: ``used`` is the number of the tenant's namespaces (terminating ones included, as admission
counts them), reservations whose namespace now carries the tenant's label are settled, expired ones dropped.

Why here and not in a quota component: this is the one process that already watches Tenants and namespaces
and reports the same count as ``status.size``; a second counter could disagree with it, and the ledger's
``used`` must be exactly the count admission's snapshot shows.
"""

from __future__ import annotations

from collections.abc import Iterable

from enclave_core import API_GROUP
from enclave_core.api.ledger import QuantityLedger, TargetRef
from enclave_core.kube.rest import JSON
from enclave_core.ledger import ledger_name


def target(name: str, uid: str) -> TargetRef:
    return TargetRef(kind="Tenant", name=name, api_group=API_GROUP, uid=uid or None)


def initialised(ledgers: Iterable[JSON], uids: dict[str, str]) -> dict[str, str]:
    """Tenant name -> ledger name, for ledgers of current tenants (same uid) that a fold has initialised."""
    found: dict[str, str] = {}
    for raw in ledgers:
        ledger = QuantityLedger.model_validate(raw)
        ref = ledger.spec.target_ref if ledger.spec else None
        if ref is None or ref.kind != "Tenant" or uids.get(ref.name) != ref.uid:
            continue
        if ledger.status is not None and ledger.status.allocated is not None and ledger.metadata.name:
            found[ref.name] = ledger.metadata.name
    return found


def name_of(tenant: str, uid: str) -> str:
    return ledger_name(target(tenant, uid))

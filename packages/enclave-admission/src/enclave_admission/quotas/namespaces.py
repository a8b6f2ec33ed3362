"""The tenant namespace quota on the tenant's QuantityLedger (kept by enclave-tenants).

The namespace hook decides from the snapshot, as before: a tenant whose snapshot count (plus this replica's
recent admissions) is at its quota is refused from memory. When the snapshot names the tenant's ledger, an
allowed namespace is then reserved on it (hold 1 against ``namespaceOptions.quota``), and only a reservation
that the ledger accepts is admitted: the ledger is where replicas meet, so N replicas never admit more
namespaces together than the quota. A tenant without an initialised ledger keeps the per-replica check.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from datetime import UTC, datetime

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.meta import ObjectRef
from enclave_core.ledger import Hold, Refusal
from enclave_core.ledger import reserve as reserve_on
from enclave_core.quantity import Quantity

log = logging.getLogger(__name__)


def reserve(state: State, request: AdmissionRequest, decision: Decision) -> Awaitable[Decision] | None:
    """The reservation that confirms ``decision`` (a namespace admitted into a tenant), or None when the
    tenant has no ledger (no quota, or enclave-tenants has not initialised it)."""
    if decision.reserve is None or state.ledgers is None:
        return None
    tenant = state.tenancy.by_name.get(decision.reserve[0])
    if tenant is None or tenant.namespace_ledger is None or tenant.namespace_quota is None:
        return None
    return _reserve(state, request, decision, tenant.name, tenant.namespace_ledger, tenant.namespace_quota)


async def _reserve(
    state: State, request: AdmissionRequest, decision: Decision, tenant: str, ledger: str, quota: int
) -> Decision:
    assert decision.reserve is not None
    namespace = decision.reserve[1]
    hold = Hold(request.uid, ObjectRef(api_version="v1", kind="Namespace", name=namespace), Quantity.from_units(1))
    limit = Quantity.from_units(quota)
    now = datetime.now(UTC)
    ledgers = state.ledgers
    assert ledgers is not None
    try:
        outcome, _ = await ledgers.update(
            ledger, lambda status: reserve_on(status, hold, limit, now=now, ttl=state.reservation_ttl)
        )
    except Exception as err:  # fail closed: an unconfirmed namespace could be one too many
        log.warning("namespace quota ledger not written", extra={"ledger": ledger, "error": str(err)})
        return Decision.deny(
            "NamespaceQuotaUnavailable",
            f"cannot add namespace {namespace!r} to tenant {tenant}: its namespace quota ledger could not be "
            f"written ({err}); retry",
            tenant=tenant,
        )
    if isinstance(outcome, Refusal):
        return Decision.deny(
            "NamespaceQuotaExceeded",
            f"cannot add namespace {namespace!r}: the namespace quota of tenant {tenant} is full "
            f"({outcome.used} namespaces and {outcome.reserved} being created, of {quota})"
            if outcome.initialised
            else f"cannot add namespace {namespace!r}: the namespace quota of tenant {tenant} is not counted yet; retry",
            tenant=tenant,
        )
    return decision

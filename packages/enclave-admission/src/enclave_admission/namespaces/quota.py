"""The tenant namespace quota: what confirms a namespace admitted into a tenant before ``/namespaces`` answers.

The namespace hook decides from the snapshot first: a tenant whose snapshot count (plus this replica's recent
admissions, :class:`enclave_admission.state.Reservations`) is at its quota is refused from memory. When the
snapshot names the tenant's ledger (kept by enclave-tenants), an allowed namespace is then held on it (1
against ``namespaceOptions.quota``) through :mod:`enclave_admission.reservation`, and only a hold the ledger
accepts is admitted: the ledger is where replicas meet, so N replicas never admit more namespaces together
than the quota. A tenant without an initialised ledger keeps the per-replica count alone. Either way an
admitted namespace counts on this replica until the snapshot shows it; dry runs hold and count nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta

from enclave_admission import reservation
from enclave_admission.reservation import Claim
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.api.meta import ObjectRef
from enclave_core.ledger import Hold, Refusal, reserve, rollback
from enclave_core.quantity import Quantity


@dataclass(frozen=True, slots=True)
class NamespaceClaim(Claim):
    """One namespace on its tenant's namespace-quota ledger."""

    tenant: str
    namespace: str
    ledger_name: str
    quota: int
    hold: Hold
    ttl: timedelta

    @property
    def ledger(self) -> str:
        return self.ledger_name

    def take(self, status: QuantityLedgerStatus | None, now: datetime) -> object:
        return reserve(status, self.hold, Quantity.from_units(self.quota), now=now, ttl=self.ttl)

    def give_back(self, status: QuantityLedgerStatus | None) -> QuantityLedgerStatus | None:
        return rollback(status, self.hold.id)

    def refused(self, outcome: object) -> Decision | None:
        if not isinstance(outcome, Refusal):
            return None
        what = f"cannot add namespace {self.namespace!r}: the namespace quota of tenant {self.tenant}"
        return Decision.deny(
            "NamespaceQuotaExceeded",
            f"{what} is full ({outcome.used} namespaces and {outcome.reserved} being created, of {self.quota})"
            if outcome.initialised
            else f"{what} is not counted yet; retry",
            tenant=self.tenant,
        )

    def unusable(self, err: Exception | None, action: str) -> Decision:
        # fail closed: an unconfirmed namespace could be one too many
        return Decision.deny(
            "NamespaceQuotaUnavailable",
            f"cannot add namespace {self.namespace!r} to tenant {self.tenant}: its namespace quota ledger could "
            f"not be {action} ({err or 'no ledger client'}); retry",
            tenant=self.tenant,
        )


def confirm(
    request: AdmissionRequest, state: State, decided: Decision | Awaitable[Decision]
) -> Decision | Awaitable[Decision]:
    """``decided``, confirmed on the namespace quota when it admits a namespace into a tenant
    (:attr:`Decision.reserve`): held on the tenant's ledger if it has one, and counted on this replica."""
    if not isinstance(decided, Decision):
        return _confirm_later(request, state, decided)
    if decided.reserve is None or not decided.allowed or request.dry_run:
        return decided
    claim = _claim(request, state, decided.reserve)
    if claim is None:
        state.reservations.add(*decided.reserve)
        return decided
    return _held(state, claim, decided)


async def _confirm_later(request: AdmissionRequest, state: State, pending: Awaitable[Decision]) -> Decision:
    confirmed = confirm(request, state, await pending)
    return confirmed if isinstance(confirmed, Decision) else await confirmed


def _claim(request: AdmissionRequest, state: State, wanted: tuple[str, str]) -> NamespaceClaim | None:
    """The claim on the tenant's ledger; None when there is none to hold (no quota, enclave-tenants has not
    initialised the ledger, or no ledger client on this replica)."""
    tenant_name, namespace = wanted
    tenant = state.tenancy.by_name.get(tenant_name)
    if state.ledgers is None or tenant is None or tenant.namespace_ledger is None or tenant.namespace_quota is None:
        return None
    hold = Hold(request.uid, ObjectRef(api_version="v1", kind="Namespace", name=namespace), Quantity.from_units(1))
    return NamespaceClaim(
        tenant.name, namespace, tenant.namespace_ledger, tenant.namespace_quota, hold, state.reservation_ttl
    )


async def _held(state: State, claim: NamespaceClaim, decided: Decision) -> Decision:
    confirmed = await reservation.reserve(state.ledgers, [claim], decided)
    if confirmed.allowed:
        state.reservations.add(claim.tenant, claim.namespace)
    return confirmed

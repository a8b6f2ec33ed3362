"""Holding quota on QuantityLedgers: the one path every hook that reserves takes.

Three hooks hold something on a ledger before they admit: ``/quotas`` (a CustomQuota's count or sum),
``/globalquotas`` (a GlobalResourceQuota's resources) and ``/namespaces`` (a tenant's namespace quota). Each
turns its request into :class:`Claim` objects, one per ledger, and hands them to :func:`reserve` (or, for a dry
run, :func:`check`). The ledger protocol itself is in docs/architecture.md ("QuantityLedger protocol"); this
is admission's side of it, written once:

* **one order**: claims are written one after another in ledger-name order. Two requests that both need
  ledgers A and B meet on A first, so the one that wins A can win B; written at once, each could win one and
  both be refused although one of them fits;
* **one rollback rule**: at the first claim refused, or not written (no ledger yet, conflicts past the client's
  retry budget, kube-apiserver away), the claims already written are taken back, newest first, and that
  claim's denial is the answer; a take-back that fails is logged, and the reservation lapses at its
  ``expiresAt`` (the owning controller drops it);
* **dry runs** check every claim, in the same order, against the ledger as this replica holds it (read once
  when it holds none) and write nothing.

A retry of an admitted request finds its own reservation (a hold's id is the request's uid) and is admitted
again without a second hold. What a claim holds and how its denials read are the claim's own
(:class:`Claim`'s methods); :class:`QuotaWords` words them alike for the two quota kinds.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from enclave_admission.review import Decision
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.ledger import LedgerBusyError, LedgerClient, LedgerMissingError

log = logging.getLogger(__name__)


class Claim(ABC):
    """What one request asks of one ledger, and how a claim that cannot be held is denied."""

    __slots__ = ()

    @property
    @abstractmethod
    def ledger(self) -> str:
        """The QuantityLedger's name (in Enclave's namespace)."""

    @abstractmethod
    def take(self, status: QuantityLedgerStatus | None, now: datetime) -> object:
        """The ledger with the hold added, written at ``now``: the new status, a refusal (written nowhere), or
        None when the hold is there already (a retry)."""

    @abstractmethod
    def give_back(self, status: QuantityLedgerStatus | None) -> QuantityLedgerStatus | None:
        """The ledger without this request's hold; None when it holds none."""

    @abstractmethod
    def refused(self, outcome: object) -> Decision | None:
        """The denial when ``outcome`` (what :meth:`take` returned) is a refusal; None when the hold fits."""

    @abstractmethod
    def unusable(self, err: Exception | None, action: str) -> Decision:
        """The denial when the ledger could not be ``action`` ("read" or "written"): ``err`` as the client
        raised it, None when this replica has no ledger client at all."""


@dataclass(frozen=True, slots=True)
class QuotaWords:
    """How the denials of a quota's claims read, alike for CustomQuotas and GlobalResourceQuotas."""

    reasons: str
    """Prefix of every reason: ``Quota`` gives ``QuotaExceeded``, ``QuotaNotReady``, ``QuotaConflict``."""
    quota: str
    """The quota as messages name it (``CustomQuota team/pods``)."""
    keeper: str
    """What creates the quota's ledger (a missing one is its job)."""

    def refused(self, description: str, initialised: bool) -> Decision:
        """A refusal by the ledger: over the limit, or not counted yet."""
        return Decision.deny(f"{self.reasons}Exceeded" if initialised else f"{self.reasons}NotReady", description)

    def unusable(self, err: Exception | None, action: str) -> Decision:
        if err is None:
            return Decision.deny(f"{self.reasons}NotReady", "this admission replica has no ledger client; retry")
        if isinstance(err, LedgerMissingError):
            return Decision.deny(
                f"{self.reasons}NotReady", f"{self.quota} has no ledger yet ({self.keeper} creates it); retry shortly"
            )
        if isinstance(err, LedgerBusyError):
            return Decision.deny(f"{self.reasons}Conflict", f"{self.quota}: {err}")
        return Decision.deny(f"{self.reasons}NotReady", f"{self.quota}: the ledger could not be {action}: {err}; retry")


def _by_ledger(claim: Claim) -> str:
    return claim.ledger


def _taking(claim: Claim, now: datetime) -> Callable[[QuantityLedgerStatus | None], object]:
    return lambda status: claim.take(status, now)


def _noted(claim: Claim, err: Exception, action: str) -> Decision:
    """The claim's denial for ``err``, logged unless it is one the client names (missing, contended)."""
    if not isinstance(err, (LedgerMissingError, LedgerBusyError)):
        message = "ledger write failed" if action == "written" else "ledger read failed"
        log.warning(message, extra={"ledger": claim.ledger, "error": str(err)})
    return claim.unusable(err, action)


async def reserve(ledgers: LedgerClient | None, claims: Iterable[Claim], granted: Decision) -> Decision:
    """``granted`` once every claim is held; otherwise the denial of the first claim (in ledger-name order)
    that could not be, after the claims written before it are taken back."""
    ordered = sorted(claims, key=_by_ledger)
    if not ordered:
        return granted
    if ledgers is None:
        return ordered[0].unusable(None, "written")
    held: list[Claim] = []
    for claim in ordered:
        try:
            outcome, _ = await ledgers.update(claim.ledger, _taking(claim, datetime.now(UTC)))
        except Exception as err:  # a reason for the user, never a 500: the ledger is kube-apiserver's object
            denied = _noted(claim, err, "written")
        else:
            refused = claim.refused(outcome)
            if refused is None:
                held.append(claim)
                continue
            denied = refused
        await _give_back(ledgers, held)
        return denied
    return granted


async def _give_back(ledgers: LedgerClient, held: list[Claim]) -> None:
    for claim in reversed(held):
        try:
            await ledgers.update(claim.ledger, claim.give_back)
        except Exception as err:  # it lapses on its own: the owning controller drops it at expiresAt
            log.warning("rollback failed", extra={"ledger": claim.ledger, "error": str(err)})


async def check(ledgers: LedgerClient | None, claims: Iterable[Claim], granted: Decision) -> Decision:
    """A dry run of :func:`reserve`: the same claims in the same order against the ledgers as this replica holds
    them (each read once if it holds none); nothing is written."""
    ordered = sorted(claims, key=_by_ledger)
    if not ordered:
        return granted
    if ledgers is None:
        return ordered[0].unusable(None, "read")
    now = datetime.now(UTC)
    for claim in ordered:
        cached = ledgers.cached(claim.ledger)
        if cached is None:
            try:
                await ledgers.read(claim.ledger)
            except Exception as err:  # kube-apiserver or etcd away: fail closed with a reason, not a 500
                return _noted(claim, err, "read")
            cached = ledgers.cached(claim.ledger)
        refused = claim.refused(claim.take(cached.status if cached is not None else None, now))
        if refused is not None:
            return refused
    return granted

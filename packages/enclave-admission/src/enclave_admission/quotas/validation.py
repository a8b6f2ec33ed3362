"""Custom quota admission: the generic hook on counted objects (``/quotas``) and quota validation
(``/customquotas``).

``/quotas`` sees CREATE, UPDATE and DELETE of exactly the resources some quota counts (enclave-quotas keeps
the hook's rules equal to its targets). For each quota counting the object it computes what the request
needs: a create its usage, an update max(new - old, 0), nothing for a change that does not grow. Nothing
needed means an answer from memory, at once. Otherwise the answer is awaited: one claim per quota on its
QuantityLedger, held through :mod:`enclave_admission.reservation` (ledger-name order; a refusal takes back
what was held before it; a dry run checks and writes nothing). A DELETE of a counted object leaves a
pending-delete hint on each ledger.

An object whose usage cannot be read (the path yields nothing, or a value that is not a quantity) is refused,
naming the path: the same stance as Kubernetes' ResourceQuota, which refuses a pod without the request a
quota limits, rather than admitting something no quota can count.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from enclave_admission import reservation
from enclave_admission.quotas.index import Counted
from enclave_admission.reservation import Claim, QuotaWords
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.api.meta import ObjectRef
from enclave_core.api.quotas import CustomQuotaSpec, GlobalCustomQuotaSpec
from enclave_core.ledger import Hold, Refusal, add_pending_delete, reserve, rollback
from enclave_core.quantity import Quantity
from enclave_core.quotas import UsageError, custom_quota_problems, scope_matches
from enclave_core.snapshots.quotas import QuotaEntry

log = logging.getLogger(__name__)

ZERO = Quantity(0)


@dataclass(frozen=True, slots=True)
class QuotaClaim(Claim):
    """What one request asks of one quota's ledger: a scalar hold under the quota's limit."""

    quota: QuotaEntry
    limit: Quantity
    hold: Hold
    ttl: timedelta

    @property
    def ledger(self) -> str:
        return self.quota.ledger

    def take(self, status: QuantityLedgerStatus | None, now: datetime) -> object:
        return reserve(status, self.hold, self.limit, now=now, ttl=self.ttl)

    def give_back(self, status: QuantityLedgerStatus | None) -> QuantityLedgerStatus | None:
        return rollback(status, self.hold.id)

    def refused(self, outcome: object) -> Decision | None:
        if not isinstance(outcome, Refusal):
            return None
        return self._words().refused(outcome.describe(self.quota.display), outcome.initialised)

    def unusable(self, err: Exception | None, action: str) -> Decision:
        return self._words().unusable(err, action)

    def _words(self) -> QuotaWords:
        return QuotaWords("Quota", self.quota.display, "its controller")


def _counts(counted: Counted, obj: dict[str, object] | None, labels: object) -> bool:
    if obj is None:
        return False
    label_map = labels if isinstance(labels, dict) else {}
    return scope_matches(counted.quota.scope_selectors, label_map) and counted.source.selects(obj, label_map)


def _object_ref(request: AdmissionRequest) -> ObjectRef:
    obj = request.obj or request.old or {}
    uid = (obj.get("metadata") or {}).get("uid") if isinstance(obj, dict) else None
    return ObjectRef(
        api_version=request.api_version or "v1",
        kind=request.kind or "Unknown",
        api_group=request.group or None,
        name=request.name or None,
        namespace=request.namespace or None,
        uid=str(uid) if uid else None,
    )


def validate(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    index = state.quotas
    if index is None or request.sub_resource:
        return Decision.allow("NotCounted")
    counted = index.counting(request.group, request.resource, request.namespace)
    if not counted:
        return Decision.allow("NotCounted")
    if request.operation == "DELETE":
        return _delete(request, state, counted)
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow("NotCounted")
    new: dict[str, Quantity] = {}
    old: dict[str, Quantity] = {}
    quotas: dict[str, Counted] = {}
    for entry in counted:
        ledger = entry.quota.ledger
        if _counts(entry, request.obj, request.labels):
            assert request.obj is not None
            try:
                usage = entry.source.usage(request.obj)
            except UsageError as err:
                return Decision.deny(
                    "QuotaUsageUnreadable", f"{entry.quota.display} cannot count this {request.kind}: {err}"
                )
            new[ledger] = new.get(ledger, ZERO) + usage
            quotas[ledger] = entry
        if request.operation == "UPDATE" and _counts(entry, request.old, request.old_labels):
            assert request.old is not None
            try:
                before = entry.source.usage(request.old)
            except UsageError:
                before = ZERO  # the old object was never counted for more than nothing
            old[ledger] = old.get(ledger, ZERO) + before
    ref = _object_ref(request)
    claims: list[QuotaClaim] = []
    for ledger in sorted(quotas):
        usage = new[ledger]
        if usage.sign() < 0:
            usage = ZERO
        if request.operation == "UPDATE" and ledger in old:
            delta = usage - max(old[ledger], ZERO)
            if delta.sign() <= 0:
                continue
            hold = Hold(request.uid, ref, usage, delta)
        else:
            if usage.sign() <= 0:
                continue
            hold = Hold(request.uid, ref, usage)
        claims.append(QuotaClaim(quotas[ledger].quota, quotas[ledger].limit, hold, state.reservation_ttl))
    if not claims:
        return Decision.allow("WithinQuota")
    if request.dry_run:
        return reservation.check(state.ledgers, claims, Decision.allow("WithinQuota"))
    return reservation.reserve(state.ledgers, claims, Decision.allow("QuotaReserved"))


def _delete(request: AdmissionRequest, state: State, counted: list[Counted]) -> Decision | Awaitable[Decision]:
    ledgers = sorted({c.quota.ledger for c in counted if _counts(c, request.old, request.old_labels)})
    if not ledgers or request.dry_run or state.ledgers is None:
        return Decision.allow("NotCounted")
    return _hint(state, ledgers, request.uid, _object_ref(request))


async def _hint(state: State, names: list[str], request_id: str, ref: ObjectRef) -> Decision:
    """A deletion never waits on its quota: a hint that cannot be written is logged, and the delete admitted."""
    ledgers = state.ledgers
    assert ledgers is not None
    now = datetime.now(UTC)
    for name in names:
        try:
            await ledgers.update(name, lambda status: add_pending_delete(status, request_id, ref, now=now))
        except Exception as err:
            log.warning("pending-delete hint not written", extra={"ledger": name, "error": str(err)})
    return Decision.allow("PendingDelete")


# -- /customquotas: the quota objects themselves ---------------------------------------------------------------


def validate_quota(request: AdmissionRequest, state: State) -> Decision:
    """CustomQuota and GlobalCustomQuota CREATE/UPDATE: usage expressions compile, op and path/cel agree, and
    the limit is not below what the quota already counts."""
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource or request.obj is None:
        return Decision.allow()
    model = GlobalCustomQuotaSpec if request.kind == "GlobalCustomQuota" else CustomQuotaSpec
    try:
        spec = model.model_validate(request.obj.get("spec") or {})
    except ValidationError as err:
        first = err.errors()[0]
        field = "spec." + ".".join(str(part) for part in first["loc"])
        return Decision.deny("InvalidQuota", f"{request.kind} {request.name}: {field}: {first['msg']}")
    problems = custom_quota_problems(spec)
    if problems:
        return Decision.deny("InvalidQuota", f"{request.kind} {request.name}: " + "; ".join(problems))
    old_limit = ((request.old or {}).get("spec") or {}).get("limit")
    if request.operation == "UPDATE" and request.old is not None and str(old_limit) != str(spec.limit):
        used = ((request.old.get("status") or {}).get("usage") or {}).get("used")
        if used is not None:
            try:
                if Quantity.parse(spec.limit) < Quantity.parse(used):
                    return Decision.deny(
                        "LimitBelowUsage",
                        f"{request.kind} {request.name}: spec.limit {spec.limit} is below the current usage {used}; "
                        "free usage first, then lower the limit",
                    )
            except ValueError:
                pass
    return Decision.allow()

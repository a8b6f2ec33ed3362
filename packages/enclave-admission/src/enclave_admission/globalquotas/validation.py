"""GlobalResourceQuota admission: shared reservations (``/globalquotas``) and quota validation
(``/globalresourcequotas``).

``/globalquotas`` sees CREATE and UPDATE of the kinds a native quota counts. For every GlobalResourceQuota
selecting the request's namespace (the snapshot's namespace index: one lookup) it computes what the object
counts for (:mod:`enclave_core.resourceusage`; an update holds only what grows). Nothing counted
means an answer from memory. Otherwise one claim per quota on its QuantityLedger (``allocated + hold <= hard``
for every resource, written with the resourceVersion read), held through :mod:`enclave_admission.reservation`
(ledger-name order, which is quota-name order; a refusal takes back what was held before it; a dry run checks
and writes nothing). Two namespaces can therefore never both take the last unit: the provisioned
ResourceQuotas alone would let them (each sees the same headroom), and kube-apiserver's own quota plugin still
charges the object after this hook.

``/globalresourcequotas`` refuses, naming the field, what the controller could never apply (resource names,
quantities, scopes; :func:`enclave_core.resourcequota.resource_quota_problems`), a ``hard`` below what is allocated
(used plus reserved), and a change of ``namespaceSelectors`` while reservations are pending (they were taken
against the old selection).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from enclave_admission import reservation
from enclave_admission.reservation import Claim, QuotaWords
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.api.meta import ObjectRef
from enclave_core.api.quotas import GlobalResourceQuotaSpec
from enclave_core.ledger.resources import ResourceHold, ResourceRefusal, reserve_resources, rollback_resources
from enclave_core.quantity import Quantity, add_maps
from enclave_core.resourcequota import resource_quota_problems
from enclave_core.resourceusage import scoped, usage
from enclave_core.snapshots.globalquotas import GlobalQuotaView


@dataclass(frozen=True, slots=True)
class ResourceClaim(Claim):
    """What one request asks of one GlobalResourceQuota's ledger: a hold per resource under ``hard``."""

    quota: GlobalQuotaView
    hard: dict[str, Quantity]
    hold: ResourceHold

    @property
    def ledger(self) -> str:
        return self.quota.ledger_name

    def take(self, status: QuantityLedgerStatus | None, now: datetime) -> object:
        return reserve_resources(status, self.hold, self.hard, now=now)

    def give_back(self, status: QuantityLedgerStatus | None) -> QuantityLedgerStatus | None:
        return rollback_resources(status, self.hold.id)

    def refused(self, outcome: object) -> Decision | None:
        if not isinstance(outcome, ResourceRefusal):
            return None
        return self._words().refused(outcome.describe(self.quota.name), outcome.initialised)

    def unusable(self, err: Exception | None, action: str) -> Decision:
        return self._words().unusable(err, action)

    def _words(self) -> QuotaWords:
        return QuotaWords("GlobalQuota", f"GlobalResourceQuota {self.quota.name}", "enclave-globalquotas")


def _object_ref(request: AdmissionRequest) -> ObjectRef:
    """The object a reservation is for. Its name comes from the object when the request has none: a create
    with ``generateName`` (every Pod a ReplicaSet or Job makes) reaches a validating hook with the name already
    generated in the object but an empty ``request.name``, and the controller settles a reservation by finding
    its object by name (one without would be held, on top of the ResourceQuota's charge, until it lapsed)."""
    obj = request.obj or {}
    metadata = obj.get("metadata") or {}
    uid = metadata.get("uid")
    name = request.name or metadata.get("name")
    return ObjectRef(
        api_version=request.api_version or "v1",
        kind=request.kind or "Unknown",
        api_group=request.group or None,
        name=str(name) if name else None,
        namespace=request.namespace or None,
        uid=str(uid) if uid else None,
    )


def _counted(quota: GlobalQuotaView, request: AdmissionRequest, obj: dict[str, object] | None) -> dict[str, Quantity]:
    if obj is None or not scoped(quota, request.group, request.resource, obj):
        return {}
    return usage(request.group, request.resource, obj, quota.hard)


def validate(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    if request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow("NotCounted")
    quotas = state.globalquotas.by_namespace.get(request.namespace)
    if not quotas:
        return Decision.allow("NotCounted")
    claims: list[ResourceClaim] = []
    ref: ObjectRef | None = None
    for quota in quotas:
        if not quota.valid:
            continue
        new = _counted(quota, request, request.obj)
        if not new:
            continue
        delta: dict[str, Quantity] | None = None
        if request.operation == "UPDATE":
            old = _counted(quota, request, request.old)
            delta = {k: v - old.get(k, Quantity(0)) for k, v in new.items()}
            delta = {k: v for k, v in delta.items() if v.sign() > 0}
            if not delta:
                continue
        ref = ref or _object_ref(request)
        hard = {key: Quantity.parse(value) for key, value in quota.hard.items()}
        claims.append(ResourceClaim(quota, hard, ResourceHold(request.uid, ref, new, delta)))
    if not claims:
        return Decision.allow("WithinQuota")
    if request.dry_run:
        return reservation.check(state.ledgers, claims, Decision.allow("WithinQuota"))
    return reservation.reserve(state.ledgers, claims, Decision.allow("GlobalQuotaReserved"))


# -- /globalresourcequotas: the quota objects themselves -------------------------------------------------------


def validate_quota(request: AdmissionRequest, state: State) -> Decision:
    """GlobalResourceQuota CREATE/UPDATE: a spec a ResourceQuota accepts, hard not below what is allocated,
    and no new selection while reservations are pending."""
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource or request.obj is None:
        return Decision.allow()
    what = f"GlobalResourceQuota {request.name}"
    try:
        spec = GlobalResourceQuotaSpec.model_validate(request.obj.get("spec") or {})
    except ValidationError as err:
        first = err.errors()[0]
        field = "spec." + ".".join(str(part) for part in first["loc"])
        return Decision.deny("InvalidGlobalQuota", f"{what}: {field}: {first['msg']}")
    quota = spec.quota
    selector = quota.scope_selector
    requirements = (
        [(r.scope_name, r.operator, list(r.values or [])) for r in (selector.match_expressions or [])]
        if selector
        else []
    )
    problems = resource_quota_problems(quota.hard, quota.scopes, requirements)
    if problems:
        return Decision.deny("InvalidGlobalQuota", f"{what}: " + "; ".join(problems))
    if request.operation != "UPDATE" or request.old is None:
        return Decision.allow()
    view = state.globalquotas.by_name.get(request.name)
    ledger = state.ledgers.cached(view.ledger_name) if state.ledgers is not None and view is not None else None
    block = ledger.status.resource_quota if ledger is not None and ledger.status is not None else None
    if block is not None and block.allocated:
        allocated = add_maps(block.allocated)
        source = "used and reserved"
    else:
        allocated = add_maps(((request.old.get("status") or {}).get("total") or {}).get("used") or {})
        source = "used"
    below = []
    for name, value in (quota.hard or {}).items():
        limit = Quantity.parse(value)
        if name in allocated and limit < allocated[name]:
            below.append(f"spec.quota.hard[{name}]: {limit} is below the {allocated[name]} already {source}")
    if below:
        return Decision.deny(
            "HardBelowAllocated", f"{what}: " + "; ".join(sorted(below)) + "; free usage first, then lower the limit"
        )
    old_selectors = (request.old.get("spec") or {}).get("namespaceSelectors")
    new_selectors = (request.obj.get("spec") or {}).get("namespaceSelectors")
    if old_selectors != new_selectors and block is not None and block.reservations:
        return Decision.deny(
            "ReservationsPending",
            f"{what}: spec.namespaceSelectors cannot change while {len(block.reservations)} reservations are "
            "pending (they were taken for the current namespaces); retry in a few seconds",
        )
    return Decision.allow()

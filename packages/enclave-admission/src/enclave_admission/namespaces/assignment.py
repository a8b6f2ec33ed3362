"""Which tenant a tenant user's new namespace belongs to; shared by mutation (which assigns) and validation
(which re-checks what reached it, since a later mutating webhook or a missing mutating hook could differ)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State, Subject
from enclave_core.api.names import TENANT_LABEL
from enclave_core.snapshots.tenancy import TenantView


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    message: str


def _listing(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def choose_tenant(subject: Subject, name: str, labels: Mapping[str, str]) -> TenantView | Refusal:
    """The tenant label if given (one the subject owns); else their only tenant; else the tenant whose
    ``<name>-`` is the longest prefix of the namespace name; else a refusal listing their tenants."""
    owned = subject.by_name
    wanted = labels.get(TENANT_LABEL)
    if wanted is not None:
        if wanted in owned:
            return owned[wanted]
        return Refusal(
            "TenantNotOwned",
            f"namespace {name!r} names tenant {wanted!r} in label {TENANT_LABEL}, which you do not own "
            f"(your tenants: {_listing(list(owned))})",
        )
    if not owned:
        return Refusal("NoTenant", f"you own no tenant, so you cannot create namespace {name!r}")
    if len(owned) == 1:
        return next(iter(owned.values()))
    prefixed = [tenant for tenant in subject.owned if name.startswith(tenant.name + "-")]
    if prefixed:
        return max(prefixed, key=lambda tenant: len(tenant.name))
    return Refusal(
        "AmbiguousTenant",
        f"namespace {name!r} could belong to any of your tenants ({_listing(list(owned))}): add the label "
        f"{TENANT_LABEL}=<tenant> or start the name with '<tenant>-'",
    )


TENANCY_MISSES: Final = frozenset({"NoTenant", "TenantNotOwned", "UnknownTenant"})
"""Reasons a namespace decision gives when the Tenancy snapshot lacks a tenant (or an owner of it) that
kube-apiserver may already have stored: the requester owns no tenant yet, the label names a tenant the requester
does not own, or one that does not exist."""

Hook = Callable[[AdmissionRequest, State], Decision]


def once_tenancy_shows(hook: Hook, request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    """``hook``'s decision; when it is a :data:`TENANCY_MISSES` one, the decision after the Tenancy snapshot
    changes it or :attr:`State.tenancy_wait` has passed. A Tenant is stored by kube-apiserver before the tenants
    controller publishes it: a pipeline that creates a tenant and then, milliseconds later, its namespaces must
    get the decision the stored Tenant calls for, not a refusal from this replica's older snapshot. A true
    refusal costs the wait, well under the hook's timeout."""
    decided = hook(request, state)
    if decided.reason not in TENANCY_MISSES or not state.expect_tenancy or state.tenancy_wait <= 0:
        return decided
    return _after_wait(hook, request, state)


async def _after_wait(hook: Hook, request: AdmissionRequest, state: State) -> Decision:
    await state.wait_for_tenancy(lambda: hook(request, state).reason not in TENANCY_MISSES)
    return hook(request, state)

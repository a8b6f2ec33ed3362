"""Which tenant a tenant user's new namespace belongs to; shared by mutation (which assigns) and validation
(which re-checks what reached it, since a later mutating webhook or a missing mutating hook could differ)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enclave_admission.state import Subject
from enclave_core.snapshots.tenancy import TENANT_LABEL, TenantView


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

"""Tenant validation (``/tenants``): a Tenant with ``preventDeletion`` cannot be deleted, by anyone.

The flag protects a tenant (and, through the owner references, its namespaces) from an accidental
``kubectl delete``; clearing it first is the deliberate way.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State


def validate(request: AdmissionRequest, state: State) -> Decision:
    if request.operation != "DELETE":
        return Decision.allow()
    tenant = state.tenancy.by_name.get(request.name)
    if tenant is not None and tenant.prevent_deletion:
        return Decision.deny(
            "TenantDeletionPrevented",
            f"tenant {tenant.name} has spec.preventDeletion set; set it to false before deleting the tenant",
            tenant=tenant.name,
        )
    return Decision.allow(tenant=request.name)

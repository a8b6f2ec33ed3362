"""Namespace mutation (``/namespaces/mutate``): put a namespace into its tenant.

* A tenant user's new namespace gets the tenant label and a controlling owner reference to its Tenant
  (:func:`~enclave_admission.namespaces.assignment.choose_tenant` decides which; when it cannot, the request is
  refused here, with the list of the user's tenants).
* An administrator's label is followed: the owner reference is set to the labelled tenant (assign, move) or
  removed with the label (unassign). Without a label an administrator's namespace stays unassigned.
* Nothing else is changed, and nobody else's request is.

The validating webhook re-checks the final object, so this hook being skipped can never admit a hijack.
"""

from __future__ import annotations

from collections.abc import Awaitable

from enclave_admission.metadata import is_tenant_reference, owner_references, tenant_reference
from enclave_admission.namespaces.assignment import Refusal, choose_tenant, once_tenancy_shows
from enclave_admission.review import JSON, AdmissionRequest, Decision, pointer
from enclave_admission.state import Role, State
from enclave_core.api.names import TENANT_LABEL
from enclave_core.snapshots.tenancy import TenantView


def answer(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    """The route: :func:`mutate`, except that a refusal for want of a tenant this replica has not seen yet is
    decided again once a newer Tenancy snapshot arrives (at most :attr:`State.tenancy_wait` later)."""
    return once_tenancy_shows(mutate, request, state)


def mutate(request: AdmissionRequest, state: State) -> Decision:
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource or request.obj is None:
        return Decision.allow("NotAssigned")
    subject = state.subject(request.username, request.groups)
    if subject.role is Role.ADMINISTRATOR:
        return _follow_label(request, state)
    if subject.role is Role.TENANT_USER and request.operation == "CREATE":
        chosen = choose_tenant(subject, request.name, request.labels)
        if isinstance(chosen, Refusal):
            return Decision.deny(chosen.reason, chosen.message)
        return Decision.mutate("Assigned", _assign(request.obj, chosen), tenant=chosen.name)
    return Decision.allow("NotAssigned")


def _follow_label(request: AdmissionRequest, state: State) -> Decision:
    """Administrators: the owner reference follows the tenant label (set, changed or removed)."""
    assert request.obj is not None
    wanted = request.labels.get(TENANT_LABEL)
    if wanted is None:
        if any(is_tenant_reference(ref) for ref in owner_references(request.obj)):
            kept = [ref for ref in owner_references(request.obj) if not is_tenant_reference(ref)]
            return Decision.mutate("Unassigned", [_set_references(request.obj, kept)])
        return Decision.allow("NotAssigned")
    tenant = state.tenancy.by_name.get(wanted)
    if tenant is None:
        return Decision.allow("UnknownTenant", tenant=wanted)  # validation refuses it with the reason
    patch = _assign(request.obj, tenant)
    return Decision.mutate("Assigned", patch, tenant=tenant.name) if patch else Decision.allow(tenant=tenant.name)


def _assign(obj: JSON, tenant: TenantView) -> list[JSON]:
    """Operations giving ``obj`` the tenant label and exactly one Tenant owner reference, to ``tenant``."""
    patch: list[JSON] = []
    labels = (obj.get("metadata") or {}).get("labels")
    if not labels:
        patch.append({"op": "add", "path": "/metadata/labels", "value": {TENANT_LABEL: tenant.name}})
    elif labels.get(TENANT_LABEL) != tenant.name:
        patch.append({"op": "add", "path": pointer("metadata", "labels", TENANT_LABEL), "value": tenant.name})
    current = owner_references(obj)
    wanted = [ref for ref in current if not is_tenant_reference(ref)] + [tenant_reference(tenant)]
    if [ref for ref in current if is_tenant_reference(ref)] != [tenant_reference(tenant)]:
        patch.append(_set_references(obj, wanted))
    return patch


def _set_references(obj: JSON, refs: list[JSON]) -> JSON:
    # "add" on an existing member replaces it (RFC 6902 4.1), so one operation covers both cases.
    if not refs:
        return {"op": "remove", "path": "/metadata/ownerReferences"}
    return {"op": "add", "path": "/metadata/ownerReferences", "value": refs}

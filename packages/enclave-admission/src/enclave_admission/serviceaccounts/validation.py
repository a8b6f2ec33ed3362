"""ServiceAccount validation (``/serviceaccounts``): promotion to tenant owner.

With ``allowServiceAccountPromotion``, a tenant owner labels a service account of one of its tenant's
namespaces ``enclave.dev/promoted=true``; the tenants controller then lists the account among the tenant's
owners and the config component grants it the promotion cluster roles. Because a promoted account can create
namespaces, the label is a privilege: only owners of the namespace's tenant may add, change or remove it, and
a promoted account (``TenantView.promoted``) may not, so promotion cannot spread from account to account.
Administrators and everyone else pass untouched.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.snapshots.tenancy import PROMOTED_LABEL, SERVICE_ACCOUNT_PREFIX, entity_matches


def validate(request: AdmissionRequest, state: State) -> Decision:
    if request.sub_resource:
        return Decision.allow()
    subject = state.subject(request.username, request.groups)
    if request.operation not in ("CREATE", "UPDATE"):
        if subject.tenant_subject:  # the hook registers CREATE and UPDATE only: a forged or new operation
            return Decision.deny(
                "UnknownOperation",
                f"operation {request.operation!r} on service account {request.namespace}/{request.name} is not "
                "one Enclave decides for tenant users",
            )
        return Decision.allow()
    before, after = request.old_labels.get(PROMOTED_LABEL), request.labels.get(PROMOTED_LABEL)
    if before == after:
        return Decision.allow("PromotionUnchanged")
    if not subject.tenant_subject and not _same_namespace_account(request):
        return Decision.allow("NotATenantUser")
    account = f"{request.namespace}/{request.name}"
    tenant = state.tenancy.namespace_owner.get(request.namespace, "")
    assert state.config is not None
    if not state.config.spec.allow_service_account_promotion:
        return Decision.deny(
            "PromotionDisabled",
            f"cannot set label {PROMOTED_LABEL} on service account {account}: service-account promotion is "
            "disabled (spec.allowServiceAccountPromotion)",
            tenant=tenant,
        )
    if subject.is_service_account and any(
        entity_matches(entity, request.username, request.groups) for owned in subject.owned for entity in owned.promoted
    ):
        return Decision.deny(
            "PromotedCannotPromote",
            f"{request.username} is a promoted service account and cannot change label {PROMOTED_LABEL} on "
            f"{account}: only tenant owners can",
            tenant=tenant,
        )
    if not tenant:
        return Decision.deny(
            "NotATenantNamespace",
            f"service account {account} is not in a tenant namespace; only those can be promoted",
        )
    if tenant not in subject.owned_names:
        return Decision.deny(
            "TenantNotOwned",
            f"only owners of tenant {tenant} may change label {PROMOTED_LABEL} on service account {account}",
            tenant=tenant,
        )
    if after is not None and after != "true":
        return Decision.deny(
            "InvalidPromotion", f"label {PROMOTED_LABEL} must be 'true' (got {after!r})", tenant=tenant
        )
    return Decision.allow("Promoted" if after else "Demoted", tenant=tenant)


def _same_namespace_account(request: AdmissionRequest) -> bool:
    """A service account changing an account of its own namespace. The hook's namespaceSelector only sends
    tenant namespaces, so the requester is a tenant service account even while the snapshot does not show its
    namespace yet (just created): it is checked as one (and refused until the snapshot knows the tenant)
    instead of passing as an unknown user."""
    prefix = f"{SERVICE_ACCOUNT_PREFIX}{request.namespace}:"
    return bool(request.namespace) and request.username.startswith(prefix)

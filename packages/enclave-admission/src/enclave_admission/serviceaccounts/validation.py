"""ServiceAccount validation (``/serviceaccounts``): promotion to tenant owner.

With ``allowServiceAccountPromotion``, a tenant owner labels a service account of one of its tenant's
namespaces ``enclave.dev/promoted=true``; the tenants controller then lists the account among the tenant's
owners and the config component grants it the promotion cluster roles, namespace creation among them. The
label is therefore a privilege, and who may write it is an allow-list, not a deny-list: anyone with ``edit``
in a namespace can patch its service accounts, so "not a tenant user, let it through" made every such user
(an owner's colleague given ``edit``, a CI account) able to mint a tenant owner. Only these may add, change
or remove the label:

* owners of the namespace's tenant (``spec.owners``, TenantOwners, and ``administrators``, whom the
  specification makes owners of every tenant), but not a promoted account (``TenantView.promoted``), so
  promotion cannot spread from account to account;
* ``system:masters`` (break-glass cluster administrators, who bypass RBAC anyway), in any namespace;
* users in ``ignoreUserWithGroups``, whom the specification says the service ignores.

Everyone else is refused, Enclave's own service accounts included: no component labels service accounts, and
enclave-replication writes what tenants' TenantResources ask for, so its account must not be a way in.

The hook sees service accounts carrying the label in *every* namespace, not only tenant namespaces: a label
written in a namespace outside any tenant would make the account a tenant owner the moment an administrator
moves the namespace into a tenant, without any owner having agreed. In a namespace of no tenant, only
``system:masters`` and ignored users may write it (the config component binds nothing to such an account
either, :mod:`enclave_config.rbac`).

A refusal to a tenant user never names a tenant the user does not own ("another tenant"): tenants must not
learn each other's names from admission answers.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import Role, State, Subject
from enclave_core.api.names import PROMOTED_LABEL
from enclave_core.snapshots.tenancy import entity_matches

CLUSTER_ADMINISTRATORS = "system:masters"


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
    if CLUSTER_ADMINISTRATORS in request.groups:
        return Decision.allow("ClusterAdministrator")
    if subject.role is Role.IGNORED:
        return Decision.allow("IgnoredUser")
    account = f"{request.namespace}/{request.name}"
    tenant = state.tenancy.namespace_owner.get(request.namespace, "")
    assert state.config is not None
    if not state.config.spec.allow_service_account_promotion:
        return Decision.deny(
            "PromotionDisabled",
            f"cannot change label {PROMOTED_LABEL} on service account {account}: service-account promotion is "
            "disabled (spec.allowServiceAccountPromotion)",
            tenant=tenant,
        )
    if not tenant:
        return Decision.deny(
            "NotATenantNamespace",
            f"service account {account} is not in a tenant namespace: only accounts of tenant namespaces can be "
            f"promoted, and label {PROMOTED_LABEL} outside them only by a cluster administrator (system:masters)",
        )
    if _promoted(subject, request):
        return Decision.deny(
            "PromotedCannotPromote",
            f"{request.username} is a promoted service account and cannot change label {PROMOTED_LABEL} on "
            f"{account}: only tenant owners can",
            tenant=tenant,
        )
    if subject.role is not Role.ADMINISTRATOR and tenant not in subject.owned_names:
        why = f"{request.namespace} belongs to another tenant" if subject.owned else "you own no tenant"
        return Decision.deny(
            "TenantNotOwned",
            f"only owners of the namespace's tenant may change label {PROMOTED_LABEL} on service account "
            f"{account} (rights in the namespace are not enough): {why}",
            tenant=tenant,
        )
    if after is not None and after != "true":
        return Decision.deny(
            "InvalidPromotion", f"label {PROMOTED_LABEL} must be 'true' (got {after!r})", tenant=tenant
        )
    return Decision.allow("Promoted" if after else "Demoted", tenant=tenant)


def _promoted(subject: Subject, request: AdmissionRequest) -> bool:
    """The requester is an owner only as a promoted service account (of any tenant it owns)."""
    return subject.is_service_account and any(
        entity_matches(entity, request.username, request.groups) for owned in subject.owned for entity in owned.promoted
    )

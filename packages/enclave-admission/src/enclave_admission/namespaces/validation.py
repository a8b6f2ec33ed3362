"""Namespace validation (``/namespaces``): the tenant fence, on the object as it will be stored.

Called for namespaces and their ``status`` and ``finalize`` subresources on CREATE, UPDATE and DELETE, since
every one of them can rewrite labels and owner references. Who is asking decides which rules apply:

* tenant users creating: the namespace is in a tenant they own (label and owner reference agree), the tenant
  is not cordoned, the name is not protected and carries the tenant prefix when forced, no forbidden label or
  annotation is set, and the tenant's namespace quota has room;
* tenant users (and service accounts of tenant namespaces) changing or deleting: only namespaces of their own
  tenants, never the tenant label, the native-rules label (which makes the rules hooks skip the namespace:
  :func:`_native_label`), the owner references, the node-selector annotation or ``spec.finalizers``
  (``namespaces/finalize``, see :func:`_finalizers`); owners may not set forbidden metadata; no deletions in a
  cordoned tenant;
* administrators: the tenant label names an existing tenant, the owner reference agrees with it, a tenant
  receiving a namespace has quota left, and a namespace arriving in a tenant does not bring the native-rules
  label along (it would skip the rules hooks before enclave-tenants found the new tenant's policies);
* everyone else passes untouched.

The namespace quota is counted from the snapshot here; :func:`answer` (the route) then confirms an admission on
the tenant's ledger and counts it on this replica (:mod:`enclave_admission.namespaces.quota`).
"""

from __future__ import annotations

from collections.abc import Awaitable

from enclave_admission.metadata import changed_keys, owner_references, references_tenant, tenant_references
from enclave_admission.namespaces import quota
from enclave_admission.namespaces.assignment import Refusal, choose_tenant, once_tenancy_shows
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules import metadata as metadata_rules
from enclave_admission.rules.engine import Review
from enclave_admission.rules.validation import decide
from enclave_admission.state import NO_KEYS, Role, State, Subject
from enclave_core.api.names import NATIVE_RULES_LABEL, NODE_SELECTOR_ANNOTATION, TENANT_LABEL
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX, TenantView


def answer(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    """The route: :func:`validate`, except that a refusal for want of a tenant this replica has not seen yet is
    decided again once a newer Tenancy snapshot arrives (at most :attr:`State.tenancy_wait` later), and that a
    namespace admitted into a tenant is confirmed on its namespace quota (:mod:`.quota`) before the answer."""
    return quota.confirm(request, state, once_tenancy_shows(validate, request, state))


def validate(request: AdmissionRequest, state: State) -> Decision:
    subject = state.subject(request.username, request.groups)
    if subject.role is Role.ADMINISTRATOR:
        return _administrator(request, state)
    if subject.role is Role.OTHER:
        subject = _own_namespace_account(request, subject)
    if not subject.tenant_subject:
        return Decision.allow("NotATenantUser")
    if request.operation == "CREATE" and not request.sub_resource:
        return _create(request, state, subject)
    if request.operation in ("UPDATE", "CREATE"):  # CREATE on a subresource is an update of the namespace
        return _update(request, state, subject)
    if request.operation == "DELETE":
        return _delete(request, state, subject)
    # The hook registers CREATE, UPDATE and DELETE only: anything else is a forged or future review, and a tenant
    # user's request Enclave cannot reason about is refused rather than waved through.
    return Decision.deny(
        "UnknownOperation",
        f"operation {request.operation!r} on namespace {request.name!r} is not one Enclave decides for tenant users",
    )


def _own_namespace_account(request: AdmissionRequest, subject: Subject) -> Subject:
    """A service account acting on its own namespace, which the review shows in a tenant although the snapshot
    does not yet (the namespace was just created): it is that tenant's service account, decided from the review.
    Without this, the moments before the snapshot catches up would let it rewrite its namespace's ownership."""
    if not subject.is_service_account:
        return subject
    home_namespace = subject.username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
    home = request.old_labels.get(TENANT_LABEL, "") if home_namespace == request.name else ""
    if not home:
        return subject
    return Subject(subject.username, subject.groups, Role.TENANT_SERVICE_ACCOUNT, (), home)


# -- tenant users ------------------------------------------------------------------------------------------


def _create(request: AdmissionRequest, state: State, subject: Subject) -> Decision:
    name = request.name
    if subject.role is not Role.TENANT_USER:
        if TENANT_LABEL in request.labels or tenant_references(request.obj):
            return Decision.deny(
                "TenantNotOwned", f"only owners of a tenant may create namespace {name!r} in it: you own no tenant"
            )
        return Decision.allow("NotATenantUser")
    chosen = choose_tenant(subject, name, request.labels)
    if isinstance(chosen, Refusal):
        return Decision.deny(chosen.reason, chosen.message)
    tenant = chosen
    if request.labels.get(TENANT_LABEL) != tenant.name or not references_tenant(request.obj, tenant):
        return Decision.deny(
            "NotAssigned",
            f"namespace {name!r} must carry the label {TENANT_LABEL}={tenant.name} and an owner reference to "
            f"Tenant {tenant.name} (set by Enclave's namespace mutating webhook; is it configured?)",
            tenant=tenant.name,
        )
    refused = (
        _native_label(request, tenant.name)
        or _cordoned(tenant, f"create namespace {name!r}")
        or _protected(state, name)
        or _prefix(state, tenant, name)
        or _forbidden_metadata(request, state, tenant, created=True)
        or _tenant_rules(request, state, tenant.name)
        or _quota(state, tenant, name)
    )
    if refused is not None:
        return refused
    return Decision.allow("Admitted", tenant=tenant.name, reserve=(tenant.name, name))


def _update(request: AdmissionRequest, state: State, subject: Subject) -> Decision:
    name = request.name
    what = f"namespaces/{request.sub_resource}" if request.sub_resource else "namespace"
    tenant_name = request.old_labels.get(TENANT_LABEL) or state.tenancy.namespace_owner.get(name, "")
    if not subject.may_act_in(tenant_name):
        return _not_yours(subject, name, tenant_name, f"change {what}")
    tenant = state.tenancy.by_name.get(tenant_name)
    if request.labels.get(TENANT_LABEL) != request.old_labels.get(TENANT_LABEL):
        return Decision.deny(
            "TenantLabelImmutable",
            f"the label {TENANT_LABEL} of namespace {name!r} cannot be changed or removed by tenant users "
            f"(it is {request.old_labels.get(TENANT_LABEL)!r}); ask an Enclave administrator to move it",
            tenant=tenant_name,
        )
    refused = _native_label(request, tenant_name)
    if refused is not None:
        return refused
    if owner_references(request.obj) != owner_references(request.old):
        return Decision.deny(
            "OwnerReferencesImmutable",
            f"the ownerReferences of namespace {name!r} are managed by Enclave and cannot be changed by tenant users",
            tenant=tenant_name,
        )
    if request.annotations.get(NODE_SELECTOR_ANNOTATION) != request.old_annotations.get(NODE_SELECTOR_ANNOTATION):
        return Decision.deny(
            "NodeSelectorImmutable",
            f"the annotation {NODE_SELECTOR_ANNOTATION} of namespace {name!r} is the tenant's node selector, "
            "managed by Enclave; tenant users cannot change it",
            tenant=tenant_name,
        )
    refused = _finalizers(request, tenant_name)
    if refused is not None:
        return refused
    # The tenant's service accounts too: a robot with patch on its namespace is the tenant acting.
    if subject.role in (Role.TENANT_USER, Role.TENANT_SERVICE_ACCOUNT) and tenant is not None:
        refused = _forbidden_metadata(request, state, tenant, created=False) or _tenant_rules(
            request, state, tenant_name
        )
        if refused is not None:
            return refused
    return Decision.allow("Allowed", tenant=tenant_name)


def _spec_finalizers(obj: object) -> list[object]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    found = spec.get("finalizers") if isinstance(spec, dict) else None
    return list(found) if isinstance(found, list) else []


def _finalizers(request: AdmissionRequest, tenant_name: str) -> Decision | None:
    """Tenant users may not change a namespace's ``spec.finalizers`` (only ``namespaces/finalize`` can).

    ``kubernetes`` there is the namespace controller's promise to delete everything in the namespace before the
    namespace goes. Removed by hand (a force-finalize), the namespace leaves etcd at once while its objects
    stay behind, orphaned: no namespace, so no tenant label, no rules, no quota to count them, and a namespace of
    the same name created later inherits them. Adding one is refused too: a namespace its owner can no longer
    delete, nor finish deleting, stalls its tenant's deletion until an administrator steps in. Administrators
    and the control plane (which removes ``kubernetes`` once the namespace is empty) are not tenant users."""
    before, after = _spec_finalizers(request.old), _spec_finalizers(request.obj)
    if before == after:
        return None
    return Decision.deny(
        "NamespaceFinalizersImmutable",
        f"tenant users cannot change spec.finalizers of namespace {request.name!r} (namespaces/finalize; it is "
        f"{before!r}): a namespace finalized by hand vanishes while its objects stay behind, out of every rule and "
        "quota; delete the namespace instead, and the control plane removes its finalizers once it is empty",
        tenant=tenant_name,
    )


def _delete(request: AdmissionRequest, state: State, subject: Subject) -> Decision:
    name = request.name
    old_labels = request.old_labels
    tenant_name = old_labels.get(TENANT_LABEL) or state.tenancy.namespace_owner.get(name, "")
    if not subject.may_act_in(tenant_name):
        return _not_yours(subject, name, tenant_name, "delete namespace")
    tenant = state.tenancy.by_name.get(tenant_name)
    if tenant is not None:
        refused = _cordoned(tenant, f"delete namespace {name!r}")
        if refused is not None:
            return refused
    return Decision.allow("Allowed", tenant=tenant_name)


def _not_yours(subject: Subject, name: str, tenant_name: str, action: str) -> Decision:
    # a tenant user learns nothing of other tenants, their names included (the deny Event, in Enclave's
    # namespace, keeps the name for operators)
    where = "another tenant" if tenant_name else "no tenant"
    mine = ", ".join(subject.owned_names or ([subject.home_tenant] if subject.home_tenant else [])) or "none"
    return Decision.deny(
        "NamespaceNotOwned",
        f"cannot {action} {name!r}: it belongs to {where}, not to a tenant of yours (yours: {mine})",
        tenant=tenant_name,
    )


# -- administrators ----------------------------------------------------------------------------------------


def _administrator(request: AdmissionRequest, state: State) -> Decision:
    if request.operation == "DELETE" or request.obj is None:
        return Decision.allow("Administrator")
    name = request.name
    wanted = request.labels.get(TENANT_LABEL)
    if wanted is None:
        if tenant_references(request.obj):
            return Decision.deny(
                "OwnerReferenceWithoutLabel",
                f"namespace {name!r} has an owner reference to a Tenant but no {TENANT_LABEL} label: "
                "set or remove both together",
            )
        return Decision.allow("Unassigned")
    tenant = state.tenancy.by_name.get(wanted)
    if tenant is None:
        return Decision.deny(
            "UnknownTenant", f"label {TENANT_LABEL}={wanted} of namespace {name!r} names no existing tenant"
        )
    if not references_tenant(request.obj, tenant):
        return Decision.deny(
            "NotAssigned",
            f"namespace {name!r} must carry exactly one Tenant owner reference, to {tenant.name} (uid {tenant.uid}), "
            "matching its label (set by Enclave's namespace mutating webhook; is it configured?)",
            tenant=tenant.name,
        )
    arriving = request.operation == "CREATE" or request.old_labels.get(TENANT_LABEL) != wanted
    if arriving and NATIVE_RULES_LABEL in request.labels:
        return Decision.deny(
            "NativeRulesLabel",
            f"namespace {name!r} arrives in tenant {tenant.name} carrying the label {NATIVE_RULES_LABEL}, which "
            "makes the rules webhooks skip it: remove it in the same request (enclave-tenants sets it once the "
            "tenant's policies cover the namespace)",
            tenant=tenant.name,
        )
    if arriving and name not in tenant.namespaces:
        refused = _quota(state, tenant, name)
        if refused is not None:
            return refused
        return Decision.allow("Assigned", tenant=tenant.name, reserve=(tenant.name, name))
    return Decision.allow("Administrator", tenant=tenant.name)


# -- rules -------------------------------------------------------------------------------------------------


def _native_label(request: AdmissionRequest, tenant: str) -> Decision | None:
    """Tenant users may not set, change or remove the native-rules label: with it the ``resources`` hooks skip
    the namespace, so a tenant setting it would switch its own rules off (enclave-tenants sets it only where
    ValidatingAdmissionPolicies enforce every rule). Removing it could only make the webhook judge more, but
    enclave-tenants would put it back, so it is refused alike."""
    if request.labels.get(NATIVE_RULES_LABEL) == request.old_labels.get(NATIVE_RULES_LABEL):
        return None
    return Decision.deny(
        "NativeRulesLabel",
        f"the label {NATIVE_RULES_LABEL} of namespace {request.name!r} is set by Enclave only (where its admission "
        "policies enforce every rule); tenant users cannot set, change or remove it",
        tenant=tenant,
    )


def _cordoned(tenant: TenantView, action: str) -> Decision | None:
    if not tenant.cordoned:
        return None
    return Decision.deny("TenantCordoned", f"cannot {action}: tenant {tenant.name} is cordoned", tenant=tenant.name)


def _protected(state: State, name: str) -> Decision | None:
    regex = state.protected_namespaces
    if regex is None or not regex.search(name):
        return None
    return Decision.deny(
        "ProtectedNamespace",
        f"namespace name {name!r} matches the protected namespace regular expression {regex.pattern!r} "
        "(spec.protectedNamespaceRegex)",
    )


def _prefix(state: State, tenant: TenantView, name: str) -> Decision | None:
    if not state.force_prefix(tenant) or name.startswith(f"{tenant.name}-"):
        return None
    return Decision.deny(
        "TenantPrefixRequired",
        f"namespace name {name!r} must start with {tenant.name + '-'!r}: tenant {tenant.name} forces the tenant prefix",
        tenant=tenant.name,
    )


def _forbidden_metadata(
    request: AdmissionRequest, state: State, tenant: TenantView, *, created: bool
) -> Decision | None:
    labels, annotations = state.forbidden_metadata(tenant)
    for what, new, old, forbidden in (
        ("label", request.labels, request.old_labels, labels),
        ("annotation", request.annotations, request.old_annotations, annotations),
    ):
        if forbidden is NO_KEYS:
            continue
        touched = sorted(new) if created else changed_keys(old, new)
        for key in touched:
            why = forbidden.refuses(key)
            if why:
                return Decision.deny(
                    "ForbiddenMetadata",
                    f"namespace {request.name!r}: {what} {why} for namespaces of tenant {tenant.name}",
                    tenant=tenant.name,
                )
    return None


def _tenant_rules(request: AdmissionRequest, state: State, tenant: str) -> Decision | None:
    """The tenant's rules whose metadata entries name kind ``Namespace`` (``namespaceSelector`` read against the
    namespace's final labels), judged as the ``/resources`` hook judges a namespaced object's metadata: a
    required label, a forbidden value. On update only the keys that change are judged, as for any object.
    Audit findings are not reported here (the namespace hooks record no audit Events)."""
    if request.sub_resource:
        return None
    rules = state.namespace_rule_set(tenant, request.name, request.labels)
    if not rules.rules:
        return None
    judged = Review(request, rules)
    judged.check_broken()
    metadata_rules.judge(judged)
    decided = decide(judged)
    return None if decided.allowed else decided


def _quota(state: State, tenant: TenantView, name: str) -> Decision | None:
    if tenant.namespace_quota is None:
        return None
    count = state.namespace_count(tenant)
    if count < tenant.namespace_quota:
        return None
    return Decision.deny(
        "NamespaceQuotaExceeded",
        f"cannot add namespace {name!r}: the namespace quota of tenant {tenant.name} is full "
        f"({count} of {tenant.namespace_quota} namespaces)",
        tenant=tenant.name,
    )

"""Tenant validation (``/tenants``): ``preventDeletion``, and owners the namespace hooks would never see.

* A Tenant with ``preventDeletion`` cannot be deleted, by anyone. The flag protects a tenant (and, through the
  owner references, its namespaces) from an accidental ``kubectl delete``; clearing it first is the deliberate
  way. The decision reads the flag from the review's ``oldObject`` (a DELETE review carries the object being
  deleted), not from the Tenancy snapshot: a Tenant created with the flag and deleted a moment later, before
  the snapshot shows it, is refused all the same.
* An owner (of a Tenant, in ``spec.owners``, or a TenantOwner) that the namespace hooks skip is refused on
  CREATE and UPDATE, naming the field. The namespace hooks never send the control plane's own requests
  (:func:`enclave_admission.defaults.skip_control_plane`): ``system:`` users that are not service accounts,
  service accounts of kube-system and of Enclave's namespace, and members of ``system:masters``. An owner
  among them would act on the tenant's namespaces with no fence at all, silently; refusing it at the API says
  so instead. An UPDATE that leaves the owners as they were passes (the garbage collector's finalizer updates
  on a Tenant admitted before this rule must not be blocked).
* A Tenant's ``spec.rules[]`` and a RuleStatus' ``spec[]`` are refused when a rule cannot work: CEL that does
  not compile, a regular expression, CIDR, kind name or quantity that does not parse, each named by its field
  (:func:`enclave_core.api.validation.rule_problems`, which the tenants controller also reports in status);
  so is a Tenant whose forbidden-metadata ``deniedRegex`` the linear-time engine cannot compile
  (:func:`enclave_core.api.validation.tenant_problems`).
* Tenant users may not write a RuleStatus: its ``spec`` rules come after the tenant's and the last matching
  rule decides, so writing one would be a way around every rule of the tenant.

``/rules`` (:func:`validate_rules`, hook ``rules.enclave.dev``) is the rule-validity check alone, for every
writer the tenants hook skips on purpose, ``system:masters`` above all: a cluster administrator's broken rule
is refused at the API like anyone's instead of being stored and then failing closed at admission. It fails
open (an outage must not stop a cluster administrator from repairing Tenants), which loses nothing: the
tenants controller judges the same rules with the same function and reports a broken one in the RuleStatus
(``Ready=False``, ``InvalidRule``), and admission refuses the requests such a rule governs.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.rules import RuleStatus
from enclave_core.api.tenancy import Tenant
from enclave_core.api.validation import Problem, rules_problems, tenant_problems
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

_SYSTEM_NAMESPACES = ("kube-system",)
_ALLOWED_SYSTEM_GROUPS = ("system:authenticated", "system:serviceaccounts")
_SERVICE_ACCOUNT_GROUP = "system:serviceaccounts:"
MAX_PROBLEMS = 10


def validate(request: AdmissionRequest, state: State) -> Decision:
    if request.sub_resource:
        return Decision.allow()
    if request.operation == "DELETE":
        return _delete(request, state) if request.resource == "tenants" else Decision.allow()
    if request.operation in ("CREATE", "UPDATE"):
        owners = _owners(request, state)
        if not owners.allowed:
            return owners
        return _rules(request, state) or owners
    return Decision.deny(
        "UnknownOperation", f"operation {request.operation!r} on {request.resource} is not one Enclave decides"
    )


def _delete(request: AdmissionRequest, state: State) -> Decision:
    name = request.name
    if request.old is not None:
        prevented = bool((request.old.get("spec") or {}).get("preventDeletion"))
    else:  # kube-apiserver always sends oldObject on DELETE; a review without it falls back to the snapshot
        tenant = state.tenancy.by_name.get(name)
        prevented = tenant is not None and tenant.prevent_deletion
    if prevented:
        return Decision.deny(
            "TenantDeletionPrevented",
            f"tenant {name} has spec.preventDeletion set; set it to false before deleting the tenant",
            tenant=name,
        )
    return Decision.allow(tenant=name)


def _owner_entries(obj: dict[str, Any] | None, resource: str) -> list[tuple[str, str, str]]:
    """(field path, kind, name) of every owner an object declares."""
    spec = (obj or {}).get("spec") or {}
    if not isinstance(spec, dict):
        return []
    if resource == "tenantowners":
        return [("spec", str(spec.get("kind") or ""), str(spec.get("name") or ""))]
    owners = spec.get("owners") or []
    return [
        (f"spec.owners[{index}]", str(owner.get("kind") or ""), str(owner.get("name") or ""))
        for index, owner in enumerate(owners if isinstance(owners, list) else [])
        if isinstance(owner, dict)
    ]


def _owners(request: AdmissionRequest, state: State) -> Decision:
    if request.resource not in ("tenants", "tenantowners"):
        return Decision.allow()
    entries = _owner_entries(request.obj, request.resource)
    if request.operation == "UPDATE" and entries == _owner_entries(request.old, request.resource):
        return Decision.allow("OwnersUnchanged", tenant=request.name)
    for field, kind, name in entries:
        why = unfenced_owner(kind, name, state.namespace)
        if why:
            return Decision.deny(
                "OwnerSkipsAdmission",
                f"{field}.name: {kind} {name!r} cannot own a tenant: {why}, so its requests would never reach "
                "Enclave's namespace webhooks and it would act on the tenant's namespaces unchecked",
                tenant=request.name if request.resource == "tenants" else "",
            )
    return Decision.allow(tenant=request.name if request.resource == "tenants" else "")


def unfenced_owner(kind: str, name: str, enclave_namespace: str) -> str:
    """Why requests of owner (``kind``, ``name``) skip the namespace hooks; empty when they do not.

    Mirrors :func:`enclave_admission.defaults.skip_control_plane`, the matchCondition that sends the control
    plane's own requests past the hooks.
    """
    skipped_namespaces = (*_SYSTEM_NAMESPACES, *((enclave_namespace,) if enclave_namespace else ()))
    if kind == "Group":
        if not name.startswith("system:") or name in _ALLOWED_SYSTEM_GROUPS:
            return ""
        if name.startswith(_SERVICE_ACCOUNT_GROUP):
            namespace = name[len(_SERVICE_ACCOUNT_GROUP) :]
            if namespace in skipped_namespaces:
                return f"it is the service accounts of namespace {namespace}, which the hooks skip"
            return ""
        return "it is a system: group of the control plane (system:masters and the like), which the hooks skip"
    username = name
    if kind == "ServiceAccount" and not name.startswith(SERVICE_ACCOUNT_PREFIX):
        username = SERVICE_ACCOUNT_PREFIX + name
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
        if namespace in skipped_namespaces:
            return f"it is a service account of namespace {namespace}, whose requests the hooks skip"
        return ""
    if username.startswith("system:"):
        return "it is a system: user (the control plane's identities), whose requests the hooks skip"
    return ""


def _rules(request: AdmissionRequest, state: State) -> Decision | None:
    if request.obj is None:
        return None
    if request.resource == "rulestatuses" and state.subject(request.username, request.groups).tenant_subject:
        return Decision.deny(
            "RuleStatusNotForTenants",
            f"RuleStatus {request.namespace}/{request.name}: tenant users cannot write RuleStatus objects "
            "(their rules would override the tenant's); ask an administrator to change the Tenant's spec.rules",
        )
    return _invalid_rules(request)


def _invalid_rules(request: AdmissionRequest) -> Decision | None:
    """A denial naming every rule of the object that cannot work; None when they all can (or it has none)."""
    if request.resource == "rulestatuses":
        try:
            problems = rules_problems(RuleStatus.model_validate(request.obj).spec, "spec")
        except ValidationError:
            return None  # kube-apiserver's schema validation names the field itself
        return _refuse(f"RuleStatus {request.namespace}/{request.name}", problems)
    if request.resource == "tenants":
        try:
            spec = Tenant.model_validate(request.obj).spec
        except ValidationError:
            return None
        return _refuse(f"Tenant {request.name}", rules_problems(spec.rules, "spec.rules")) or _refuse(
            f"Tenant {request.name}", tenant_problems(spec), "InvalidSpec", "a pattern cannot work"
        )
    return None


def _rules_of(obj: dict[str, Any] | None, resource: str) -> Any:
    spec = (obj or {}).get("spec")
    if resource == "rulestatuses":
        return spec
    if not isinstance(spec, dict):
        return None
    options = spec.get("namespaceOptions") or {}
    return spec.get("rules"), options.get("forbiddenLabels"), options.get("forbiddenAnnotations")


def validate_rules(request: AdmissionRequest, state: State) -> Decision:
    """``/rules``: refuse a Tenant or RuleStatus whose rules cannot work, whoever writes it (module doc)."""
    if request.sub_resource or request.obj is None or request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow()
    if request.operation == "UPDATE" and _rules_of(request.obj, request.resource) == _rules_of(
        request.old, request.resource
    ):
        return Decision.allow("RulesUnchanged")  # a stored rule never blocks edits of anything else
    return _invalid_rules(request) or Decision.allow()


def _refuse(
    what: str, problems: list[Problem], reason: str = "InvalidRule", why: str = "a rule cannot work"
) -> Decision | None:
    if not problems:
        return None
    listed = "; ".join(str(p) for p in problems[:MAX_PROBLEMS])
    if len(problems) > MAX_PROBLEMS:
        listed += f"; and {len(problems) - MAX_PROBLEMS} more"
    return Decision.deny(reason, f"{what}: {why}: {listed}")

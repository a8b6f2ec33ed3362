"""Storage: which PersistentVolumes a tenant's claims may bind, and who may label volumes for a tenant.

A PersistentVolumeClaim that names a volume (``spec.volumeName``, on CREATE or when set on UPDATE, by a user
or by the volume binder) is judged from the volume's labels in the Rules snapshot:

* a volume labelled for another tenant is refused, always (a fence between tenants, with or without rules);
* a volume labelled for this tenant is allowed;
* a volume without the tenant label only when an ``allow`` rule's ``volumes[]`` entry selects it and no later
  ``deny`` entry does (the last matching allow or deny decides; ``audit`` reports and never grants). A volume
  the snapshot does not know (not created yet, or created a moment ago) counts as unlabelled.

The tenant label on PersistentVolumes themselves cannot be set, changed or removed by tenant users: they
could otherwise claim any volume for their tenant.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Finding, Item, Review
from enclave_admission.state import State
from enclave_core.api.names import TENANT_LABEL
from enclave_core.selectors import matches


def _volume_name(obj: dict[str, object] | None) -> str:
    spec = (obj or {}).get("spec")
    return str(spec.get("volumeName") or "") if isinstance(spec, dict) else ""


def judge(review: Review, state: State) -> None:
    request = review.request
    if request.group or request.resource != "persistentvolumeclaims" or request.obj is None:
        return
    volume = _volume_name(request.obj)
    if not volume or volume == _volume_name(request.old):
        return
    path = "spec.volumeName"
    tenant = review.rules.tenant or state.tenancy.namespace_owner.get(request.namespace, "")
    labels = state.rules.volume_labels.get(volume, {})
    owner = labels.get(TENANT_LABEL)
    if owner == tenant and tenant:
        return
    if owner:
        review.findings.append(
            Finding(
                True,
                "tenant fence",
                f"{path}={volume!r}: PersistentVolume {volume} belongs to another tenant, not to tenant {tenant}",
            )
        )
        return
    item = Item()
    for rule in review.rules.storage:
        assert rule.storage is not None
        selected = [name for name, selector in rule.storage.selectors if matches(selector, labels)]
        if not selected or not review.applies(rule):
            continue
        entries = ", ".join(selected)
        if rule.action == "allow":
            item.allow(rule, True, "")
        elif rule.action == "deny":
            item.deny(rule, f"{rule.origin} denies binding PersistentVolume {volume} ({path}; volumes {entries})")
        else:
            item.audit(rule, f"{rule.origin} audits binding PersistentVolume {volume} ({path}; volumes {entries})")
    if item.last is None:
        item.last = (
            _FENCE,
            False,
            f"{path}={volume!r}: PersistentVolume {volume} has no {TENANT_LABEL} label and no storage rule of "
            f"namespace {request.namespace} allows it",
        )
    review.settle(item)


def volume_label(request: AdmissionRequest, state: State) -> Decision | None:
    """PersistentVolumes (cluster-scoped): tenant users may not set, change or remove the tenant label."""
    if request.group or request.resource != "persistentvolumes" or request.operation not in ("CREATE", "UPDATE"):
        return None
    subject = state.subject(request.username, request.groups)
    if not subject.tenant_subject:
        return Decision.allow("NotATenantUser")
    new, old = request.labels.get(TENANT_LABEL), request.old_labels.get(TENANT_LABEL)
    if new == old:
        return Decision.allow("Allowed")
    return Decision.deny(
        "VolumeTenantLabel",
        f"metadata.labels[{TENANT_LABEL!r}] of PersistentVolume {request.name!r} is the tenant ownership label: "
        "tenant users cannot set, change or remove it (ask a cluster administrator)",
    )


_FENCE = CompiledRule(
    index=-1,
    origin="tenant fence",
    action="deny",
    everyone=True,
    users=frozenset(),
    groups=frozenset(),
    custom=(),
    conditions=(),
    condition_names=(),
    broken="",
)
"""Stands for the default of storage: an unlabelled volume is refused unless a rule allows it."""

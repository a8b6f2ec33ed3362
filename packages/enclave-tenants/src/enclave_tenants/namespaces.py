"""The metadata a tenant namespace carries, and whether the live namespace has drifted from it.

We write namespaces with server-side apply under our own field manager: we state only the labels,
annotations and owner reference we own, and whatever else users or other controllers set stays theirs. Drift
detection therefore has two halves: something we want is missing or different (someone edited it), or
something we own is no longer wanted (the tenant dropped a label); either calls for an apply, and the apply
both restores and removes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from enclave_core import API_GROUP, GROUP_VERSION
from enclave_core.api.names import NATIVE_RULES_LABEL, NODE_SELECTOR_ANNOTATION, TENANT_LABEL
from enclave_core.api.tenancy import TenantSpec
from enclave_core.kube.holds import holds
from enclave_core.kube.managedfields import owned_keys, owned_list_keys
from enclave_core.selectors import validate_label_key, validate_label_value

JSON = dict[str, Any]
_REFERENCE_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")


def node_selector_annotation(selector: Mapping[str, str]) -> str:
    """``k1=v1,k2=v2`` sorted by key: the format the PodNodeSelector admission plugin parses."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


def is_terminating(namespace: JSON) -> bool:
    """Deleting: nothing may be created in it any more, and what is there stays until it is gone."""
    return bool(namespace.get("metadata", {}).get("deletionTimestamp")) or (
        namespace.get("status", {}).get("phase") == "Terminating"
    )


def tenant_of(namespace: JSON) -> str | None:
    return (namespace.get("metadata", {}).get("labels") or {}).get(TENANT_LABEL)


def _is_tenant_reference(reference: Mapping[str, Any]) -> bool:
    return reference.get("kind") == "Tenant" and str(reference.get("apiVersion", "")).startswith(f"{API_GROUP}/")


def tenant_reference(tenant: str, uid: str, live: JSON | None) -> JSON:
    """The owner reference to the Tenant. Admission adds it at creation (possibly as controller); we keep the
    one that is there as it is, so the apply never flips ``controller`` on a reference someone else set."""
    for reference in (live or {}).get("metadata", {}).get("ownerReferences") or []:
        if reference.get("uid") == uid:
            return {key: reference[key] for key in _REFERENCE_FIELDS if key in reference}
    return {"apiVersion": GROUP_VERSION, "kind": "Tenant", "name": tenant, "uid": uid, "controller": False}


def _valid_metadata(values: Mapping[str, str] | None, *, labels: bool, problems: list[str], where: str) -> JSON:
    valid: JSON = {}
    for key, value in (values or {}).items():
        try:
            validate_label_key(key)  # annotation keys follow the same qualified-name rule
            if labels:
                validate_label_value(value)
        except ValueError as err:
            problems.append(f"{where}[{key!r}]: {err}")
            continue
        valid[key] = value
    return valid


def desired_namespace(name: str, tenant: str, uid: str, spec: TenantSpec, live: JSON | None) -> tuple[JSON, list[str]]:
    """The apply body for namespace ``name`` of ``tenant`` and the problems with the tenant's metadata."""
    labels, annotations, problems = namespace_metadata(tenant, spec)
    return namespace_body(name, tenant, uid, labels, annotations, live), problems


def namespace_metadata(tenant: str, spec: TenantSpec) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Labels and annotations every namespace of ``tenant`` gets, and the problems with them: computed once
    per tenant (validating them per namespace was a visible share of a plan at 10,000 namespaces).

    Invalid keys or values of ``additionalMetadata`` are left out (and reported) so one typo does not block
    the tenant label, the node selector and the owner reference. The tenant label and the node-selector
    annotation win over ``additionalMetadata`` entries of the same key, and the native-rules label is never
    taken from it (only the native-policies loop may say a namespace's rules need no webhook).
    """
    problems: list[str] = []
    extra = spec.namespace_options.additional_metadata if spec.namespace_options else None
    where = "spec.namespaceOptions.additionalMetadata"
    labels = _valid_metadata(extra.labels if extra else None, labels=True, problems=problems, where=f"{where}.labels")
    annotations = _valid_metadata(
        extra.annotations if extra else None, labels=False, problems=problems, where=f"{where}.annotations"
    )
    if labels.pop(NATIVE_RULES_LABEL, None) is not None:
        problems.append(f"{where}.labels[{NATIVE_RULES_LABEL!r}]: set by Enclave only")
    labels[TENANT_LABEL] = tenant
    if spec.node_selector:
        annotations[NODE_SELECTOR_ANNOTATION] = node_selector_annotation(spec.node_selector)
    return labels, annotations, problems


def namespace_body(
    name: str, tenant: str, uid: str, labels: Mapping[str, str], annotations: Mapping[str, str], live: JSON | None
) -> JSON:
    """The apply body for namespace ``name`` from its tenant's :func:`namespace_metadata`."""
    metadata: JSON = {
        "name": name,
        "labels": dict(labels),
        "ownerReferences": [tenant_reference(tenant, uid, live)],
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def release_body(name: str) -> JSON:
    """Applying this drops every field we own on the namespace (it left its tenant)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def needs_apply(live: JSON, desired: JSON, manager: str) -> bool:
    """Whether the live namespace lacks something desired or carries something we own but no longer want."""
    meta, want = live.get("metadata", {}), desired["metadata"]
    for field in ("labels", "annotations"):
        wanted: Mapping[str, str] = want.get(field) or {}
        if not holds(meta.get(field), wanted):
            return True
        if owned_keys(live, manager, "metadata", field) - set(wanted):
            return True
    live_refs = {ref.get("uid"): ref for ref in meta.get("ownerReferences") or []}
    for reference in want.get("ownerReferences") or []:
        current = live_refs.get(reference["uid"])
        if current is None or not holds(current, reference):
            return True
    wanted_uids = {ref["uid"] for ref in want.get("ownerReferences") or []}
    return any(
        key.get("uid") not in wanted_uids for key in owned_list_keys(live, manager, "metadata", "ownerReferences")
    )


def owns_anything(live: JSON, manager: str) -> bool:
    """Whether ``manager`` applied any field of the namespace (it is ours to release)."""
    return bool(
        owned_keys(live, manager, "metadata", "labels")
        or owned_keys(live, manager, "metadata", "annotations")
        or owned_list_keys(live, manager, "metadata", "ownerReferences")
    )


def foreign_tenant_references(live: JSON, uid: str) -> list[JSON]:
    """Owner references to other Tenants: left behind when a namespace moved between tenants."""
    return [
        ref
        for ref in live.get("metadata", {}).get("ownerReferences") or []
        if _is_tenant_reference(ref) and ref.get("uid") != uid
    ]


def without_foreign_references_patch(live: JSON, uid: str) -> list[JSON]:
    """JSON patch removing foreign Tenant references, guarded by a test of the list we computed it from."""
    current = live.get("metadata", {}).get("ownerReferences") or []
    kept = [ref for ref in current if not (_is_tenant_reference(ref) and ref.get("uid") != uid)]
    return [
        {"op": "test", "path": "/metadata/ownerReferences", "value": current},
        {"op": "replace", "path": "/metadata/ownerReferences", "value": kept},
    ]

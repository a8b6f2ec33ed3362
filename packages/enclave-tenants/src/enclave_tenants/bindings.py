"""The RoleBindings of a tenant namespace: names, bodies, and whether a live one has drifted.

Names are deterministic, so every replica and every restart computes the same ones and a binding is found
again by name, and readable, so ``kubectl get rolebindings`` tells who has which role:
``enclave-<kind>-<owner>-<clusterrole>``. Enclave's own components get theirs as ``enclave-component-<clusterrole>``
(:class:`Grant`). Anything that would make the name lossy (characters RBAC names
allow but we keep out for readability, upper case, length beyond 253) adds a short hash of the exact owner
and role, so two owners never share a binding.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from enclave_core.api.meta import Entity
from enclave_core.api.names import MANAGED_BY, TENANT_LABEL, TENANTS_MANAGER
from enclave_core.api.tenancy import AdditionalRoleBinding
from enclave_core.kube.holds import holds
from enclave_core.rbac import RBAC_GROUP, service_account_parts, subject
from enclave_tenants.owners import Owner

JSON = dict[str, Any]

MAX_NAME: Final = 253
_KIND_WORDS: Final = {"User": "user", "Group": "group", "ServiceAccount": "serviceaccount"}
_UNSAFE: Final = re.compile(r"[^a-z0-9.-]")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def _sanitize(value: str) -> str:
    return _UNSAFE.sub("-", value.lower())


def _named(readable: str, lossy: bool, *identity: str) -> str:
    if not lossy and len(readable) <= MAX_NAME:
        return readable
    suffix = "-" + _digest(*identity)
    return readable[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def owner_binding_name(kind: str, name: str, cluster_role: str) -> str:
    """``enclave-user-alice-admin``; a service account reads ``enclave-serviceaccount-<ns>.<name>-<role>``.

    ``<ns>.<name>`` is unambiguous because a namespace name has no dot.
    """
    shown = name
    if kind == "ServiceAccount":
        parts = service_account_parts(name)
        if parts is not None:
            shown = f"{parts[0]}.{parts[1]}"
    owner, role = _sanitize(shown), _sanitize(cluster_role)
    lossy = owner != shown or role != cluster_role
    return _named(f"enclave-{_KIND_WORDS.get(kind, kind.lower())}-{owner}-{role}", lossy, kind, name, cluster_role)


def additional_binding_name(cluster_role: str) -> str:
    """``enclave-additional-<clusterrole>``: one binding per cluster role of ``spec.additionalRoleBindings``."""
    role = _sanitize(cluster_role)
    return _named(f"enclave-additional-{role}", role != cluster_role, "additional", cluster_role)


@dataclass(frozen=True)
class Grant:
    """A cluster role bound, in every tenant namespace, to one of Enclave's own service accounts.

    What a component needs only inside tenant namespaces is granted there and nowhere else: a RoleBinding to a
    ClusterRole holds only in its namespace, so enclave-tenants' ``list``/``patch`` on every resource (managed
    metadata) never reaches the release namespace's Secrets, and enclave-replication may impersonate the service
    accounts of tenant namespaces only, never kube-system's. The chart names the grants (``--namespace-grant``)
    and allows this controller to ``bind`` exactly those roles.
    """

    cluster_role: str
    namespace: str
    service_account: str

    @classmethod
    def parse(cls, text: str, namespace: str) -> Grant:
        """``<clusterrole>=<service account>``, the account in ``namespace`` (the release namespace)."""
        role, sep, account = text.partition("=")
        if not sep or not role or not account or "/" in account or ":" in account:
            raise ValueError(f"{text!r}: expected <clusterrole>=<service account of namespace {namespace}>")
        return cls(role, namespace, account)


def grant_binding_name(cluster_role: str) -> str:
    """``enclave-component-<clusterrole>``: one binding per granted cluster role."""
    role = _sanitize(cluster_role)
    return _named(f"enclave-component-{role}", role != cluster_role, "component", cluster_role)


def role_binding(namespace: str, name: str, tenant: str, cluster_role: str, subjects: Sequence[JSON]) -> JSON:
    """The full body we apply; labels let the controller find (and prune) only bindings it made."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY: TENANTS_MANAGER, TENANT_LABEL: tenant},
        },
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": cluster_role},
        "subjects": list(subjects),
    }


def _owner_entries(
    owners: Iterable[Owner], administrators: Iterable[Entity], admin_roles: Sequence[str]
) -> list[tuple[str, str, str, JSON]]:
    entries: list[tuple[str, str, str, JSON]] = []
    for owner in owners:
        for role in owner.cluster_roles:
            entries.append((owner.kind, owner.name, role, subject(owner.kind, owner.name)))
    for admin in administrators:
        try:
            admin_subject = subject(admin.kind, admin.name)
        except ValueError:
            continue  # the configuration component reports a malformed administrator
        for role in admin_roles:
            entries.append((admin.kind, admin.name, role, admin_subject))
    return entries


BindingTemplates = dict[str, tuple[str, list[JSON]]]
"""RoleBinding name -> (cluster role, subjects): what every namespace of one tenant gets, namespace aside."""


def binding_templates(
    owners: Iterable[Owner],
    additional: Iterable[AdditionalRoleBinding] = (),
    administrators: Iterable[Entity] = (),
    administration_roles: Sequence[str] = (),
    grants: Iterable[Grant] = (),
) -> BindingTemplates:
    """The RoleBindings of one tenant's namespaces, computed once per tenant (not once per namespace: at
    10,000 namespaces naming and normalising them per namespace was most of a plan's time).

    One per (owner, cluster role), one per (administrator, administration role), and one per distinct
    cluster role of ``additionalRoleBindings`` holding the union of its subjects, and one per :class:`Grant`
    to Enclave's own service account. If two different
    (subject, role) pairs ever render the same readable name (``a-b``+``c`` versus ``a``+``b-c``), both take
    hashed names instead of one silently overwriting the other.
    """
    by_name: dict[str, list[tuple[str, str, str, JSON]]] = {}
    for entry in _owner_entries(owners, administrators, administration_roles):
        by_name.setdefault(owner_binding_name(entry[0], entry[1], entry[2]), []).append(entry)
    result: BindingTemplates = {}
    for name, entries in by_name.items():
        distinct = {(normalize_subject(e[3])["kind"], e[1], e[2]): e for e in entries}
        if len(distinct) == 1:
            kind, owner, role, entry_subject = entries[0]
            result[name] = (role, [entry_subject])
            continue
        for kind, owner, role, entry_subject in distinct.values():
            result[_named(name, True, kind, owner, role)] = (role, [entry_subject])
    extra: dict[str, list[JSON]] = {}
    for binding in additional:
        subjects = extra.setdefault(binding.cluster_role_name, [])
        for item in binding.subjects:
            body = item.to_k8s()
            if normalize_subject(body) not in [normalize_subject(s) for s in subjects]:
                subjects.append(body)
    for role, subjects in extra.items():
        result[additional_binding_name(role)] = (role, subjects)
    for grant in grants:
        account = {"kind": "ServiceAccount", "name": grant.service_account, "namespace": grant.namespace}
        result[grant_binding_name(grant.cluster_role)] = (grant.cluster_role, [account])
    return result


def bindings_for(namespace: str, tenant: str, templates: BindingTemplates) -> dict[str, JSON]:
    """Every RoleBinding ``namespace`` should have, by name, from its tenant's :func:`binding_templates`."""
    return {
        name: role_binding(namespace, name, tenant, role, [dict(s) for s in subjects])
        for name, (role, subjects) in templates.items()
    }


def desired_bindings(
    namespace: str,
    tenant: str,
    owners: Iterable[Owner],
    additional: Iterable[AdditionalRoleBinding] = (),
    administrators: Iterable[Entity] = (),
    administration_roles: Sequence[str] = (),
) -> dict[str, JSON]:
    """Every RoleBinding the namespace should have, by name (see :func:`binding_templates`)."""
    templates = binding_templates(owners, additional, administrators, administration_roles)
    return bindings_for(namespace, tenant, templates)


def normalize_subject(item: Mapping[str, Any]) -> JSON:
    """A subject as kube-apiserver stores it (apiGroup defaulted, empty fields dropped), for comparisons."""
    kind = str(item.get("kind", ""))
    default_group = "" if kind == "ServiceAccount" else RBAC_GROUP
    normalized: JSON = {"kind": kind, "name": item.get("name", ""), "apiGroup": item.get("apiGroup") or default_group}
    if item.get("namespace"):
        normalized["namespace"] = item["namespace"]
    return normalized


def roleref_changed(live: JSON, desired: JSON) -> bool:
    """roleRef is immutable: a binding whose role changed must be deleted and created again."""
    return bool(live.get("roleRef") != desired["roleRef"])


def drifted(live: JSON | None, desired: JSON) -> bool:
    """Whether applying ``desired`` would change the live binding (missing, other subjects, role, labels)."""
    if live is None or roleref_changed(live, desired):
        return True
    if [normalize_subject(s) for s in live.get("subjects") or []] != [
        normalize_subject(s) for s in desired["subjects"]
    ]:
        return True
    return not holds(live.get("metadata", {}).get("labels"), desired["metadata"]["labels"])

"""Tenant rule quotas: each ``spec.rules[i].quota[]`` entry of a Tenant becomes a GlobalResourceQuota.

The generated quota is owned by the Tenant (deleting the tenant deletes it, and with it its ResourceQuotas),
named ``<tenant>-rule<i>-<entry>``, labelled with the tenant and the entry, and selects the namespaces the
rule selects: the tenant's namespaces (label ``enclave.dev/tenant=<tenant>``) that match the rule's
``namespaceSelector``. The rule's ``audience`` limits who a rule applies to at admission, but usage counts
whoever creates the object, so it plays no part here. A Tenant that fails to parse changes nothing: its
generated quotas stay as they are until it is fixed.

A namespace's own rules (``RuleStatus/default`` ``spec[i].quota[]``) are quotas the same way, for that one
namespace: the GlobalResourceQuota ``rulestatus.<namespace>.rule<i>.<entry>.<hash>`` selects the namespace by
name, and only while it carries its tenant's label. It is owned by the namespace's Tenant (a cluster-scoped
object cannot be owned by a namespaced RuleStatus) and removed when the entry, the RuleStatus or the namespace
goes. A RuleStatus ``spec`` that does not parse contributes nothing (enclave-tenants reports it on the
RuleStatus); its generated quotas stay until it is fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.rules import RuleBody, RuleQuota
from enclave_core.api.tenancy import Tenant
from enclave_core.kube.holds import holds, same
from enclave_core.quantity import Quantity
from enclave_globalquotas import naming

JSON = dict[str, Any]


@dataclass
class RulePlan:
    desired: dict[str, JSON] = field(default_factory=dict)
    """GlobalResourceQuota name -> body."""
    stale: list[str] = field(default_factory=list)
    """Generated GlobalResourceQuotas no rule wants any more."""
    keep_tenants: set[str] = field(default_factory=set)
    """Tenants that failed to parse or are being deleted: their generated quotas are left alone."""
    keep_namespaces: set[str] = field(default_factory=set)
    """Namespaces whose RuleStatus ``spec`` does not parse: their generated quotas are left alone."""


def _selector(tenant: str, rule_selector: JSON | None) -> JSON:
    expressions = [{"key": TENANT_LABEL, "operator": "In", "values": [tenant]}]
    selector: JSON = {}
    if rule_selector:
        if rule_selector.get("matchLabels"):
            selector["matchLabels"] = dict(rule_selector["matchLabels"])
        expressions += list(rule_selector.get("matchExpressions") or [])
    selector["matchExpressions"] = expressions
    return selector


"""Set by kube-apiserver on every namespace to its name: how a RuleStatus quota selects its one namespace."""


def quota_body(
    tenant: JSON, index: int, entry: RuleQuota, rule_selector: JSON | None, namespace: str | None = None
) -> JSON:
    """The GlobalResourceQuota for one quota entry: of the tenant's ``spec.rules[index]``, or, given
    ``namespace``, of ``spec[index]`` of that namespace's RuleStatus (``rule_selector`` then unused)."""
    meta = tenant["metadata"]
    if namespace is None:
        name = naming.rule_quota_name(meta["name"], index, entry.name)
        selector = _selector(meta["name"], rule_selector)
    else:
        name = naming.rule_status_quota_name(namespace, index, entry.name)
        selector = _selector(
            meta["name"],
            {"matchExpressions": [{"key": names.NAMESPACE_NAME_LABEL, "operator": "In", "values": [namespace]}]},
        )
    quota: JSON = {"hard": {key: Quantity.parse(value).to_json() for key, value in sorted(entry.hard.items())}}
    if entry.scopes:
        quota["scopes"] = list(entry.scopes)
    if entry.scope_selector is not None and entry.scope_selector.match_expressions:
        quota["scopeSelector"] = entry.scope_selector.to_k8s()
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GlobalResourceQuota",
        "metadata": {
            "name": name,
            "labels": {
                names.MANAGED_BY: names.GLOBALQUOTAS_MANAGER,
                TENANT_LABEL: naming.label_value(meta["name"]),
                names.RULE_QUOTA_LABEL: entry.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "Tenant",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"quota": quota, "namespaceSelectors": [selector]},
    }


def build_rule_plan(
    tenants: Iterable[JSON],
    generated: Mapping[str, JSON],
    rule_statuses: Iterable[JSON] = (),
    namespace_tenant: Mapping[str, str] | None = None,
) -> RulePlan:
    """What GlobalResourceQuotas the tenants' rules and the namespaces' RuleStatuses want; ``generated`` are the
    ones this component made; ``namespace_tenant`` maps each tenant namespace to its tenant (from its label)."""
    plan = RulePlan()
    tenants = list(tenants)
    by_name = {raw.get("metadata", {}).get("name"): raw for raw in tenants}
    for raw in tenants:
        meta = raw.get("metadata", {})
        if meta.get("deletionTimestamp"):
            plan.keep_tenants.add(meta["name"])
            continue
        try:
            tenant = Tenant.model_validate(raw)
        except ValidationError:
            plan.keep_tenants.add(meta["name"])  # enclave-tenants reports it; nothing is revoked over a typo
            continue
        raw_rules = (raw.get("spec") or {}).get("rules") or []
        for index, rule in enumerate(tenant.spec.rules or []):
            selector = raw_rules[index].get("namespaceSelector") if index < len(raw_rules) else None
            for entry in rule.quota or []:
                body = quota_body(raw, index, entry, selector)
                plan.desired[body["metadata"]["name"]] = body
    for status in rule_statuses:
        _rule_status_quotas(plan, status, by_name, namespace_tenant or {})
    for name, obj in generated.items():
        owners = [o for o in obj.get("metadata", {}).get("ownerReferences") or [] if o.get("kind") == "Tenant"]
        if name in plan.desired or any(o.get("name") in plan.keep_tenants for o in owners):
            continue
        if (obj.get("metadata", {}).get("labels") or {}).get(names.RULE_QUOTA_NAMESPACE_LABEL) in plan.keep_namespaces:
            continue
        plan.stale.append(name)
    plan.stale.sort()
    return plan


def _rule_status_quotas(plan: RulePlan, status: JSON, tenants: Mapping[str, JSON], owner_of: Mapping[str, str]) -> None:
    """The quotas of one RuleStatus' ``spec[]``: for its namespace, owned by the namespace's tenant."""
    meta = status.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    tenant_name = owner_of.get(namespace)
    tenant = tenants.get(tenant_name) if tenant_name else None
    if tenant is None or tenant_name in plan.keep_tenants:
        return  # not a tenant namespace (any more), or its tenant is being deleted or does not parse
    raw_rules = status.get("spec") or []
    if not isinstance(raw_rules, list):
        return
    try:
        rules = [RuleBody.model_validate(item) for item in raw_rules]
    except ValidationError:
        # enclave-tenants reports it on the RuleStatus; what this namespace had stays until it is fixed
        plan.keep_namespaces.add(namespace)
        return
    for index, rule in enumerate(rules):
        for entry in rule.quota or []:
            body = quota_body(tenant, index, entry, None, namespace=namespace)
            body["metadata"]["labels"][names.RULE_QUOTA_NAMESPACE_LABEL] = namespace
            plan.desired[body["metadata"]["name"]] = body


def drifted(live: JSON | None, desired: JSON) -> bool:
    """Whether the live generated quota differs from what the rule says (spec, labels or owner); its quota is
    owned whole, so a key added by hand is drift too (:func:`enclave_core.kube.holds.same`)."""
    if live is None:
        return True
    meta = live.get("metadata", {})
    if not holds(meta.get("labels"), desired["metadata"]["labels"]):
        return True
    owner = desired["metadata"]["ownerReferences"][0]
    if not any(o.get("uid") == owner["uid"] for o in meta.get("ownerReferences") or []):
        return True
    spec = live.get("spec") or {}
    wanted = desired["spec"]
    return not (
        same(spec.get("quota"), wanted["quota"]) and same(spec.get("namespaceSelectors"), wanted["namespaceSelectors"])
    )

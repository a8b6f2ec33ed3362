"""From the watch caches to what the cluster should look like: one pure function, no I/O.

For every GlobalResourceQuota ``q`` with limits ``H`` and selected namespaces ``S``:

* each namespace ``n`` in ``S`` reports its usage ``u(n)`` in the status of the ResourceQuota Enclave keeps
  there (kube-apiserver's quota admission and kube-controller-manager's resourcequota controller write it);
* the global headroom is ``max(H - sum(u), 0)`` per resource;
* the ResourceQuota in ``n`` gets ``hard = u(n) + headroom``.

Where a namespace's ResourceQuota may report less than what exists, ``u(n)`` is raised to the count of its
objects (``counted``, from :mod:`enclave_globalquotas.recount`), and its ``hard`` is then the *reported* usage
plus the headroom, so that kube-apiserver's quota plugin, which compares with the report, admits no more than
the headroom there either.

So each namespace may grow by exactly what is left globally, and kube-apiserver's own ResourceQuota admission
refuses at the shared limit, for every kind of object and with the scopes honoured by Kubernetes itself. When
usage moves in one namespace, every other namespace's hard moves with it; the namespace that changed keeps its
hard (its usage and the headroom moved by the same amount).

The plan is recomputed from the caches on every change, so it is level-based: a hand-edited ResourceQuota,
a namespace whose labels changed or a deleted object all converge on the next pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.quotas import GlobalResourceQuota
from enclave_core.kube.holds import holds, quantity_equal
from enclave_core.quantity import Quantity, max0, sub_maps
from enclave_core.resourcequota import resource_quota_problems
from enclave_core.selectors import matches_any
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot, GlobalQuotaView, ScopeRequirement
from enclave_globalquotas import naming
from enclave_globalquotas.ledger import quota_ledger_name

JSON = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """What is wrong, as a condition reason and a message that says what to fix."""

    reason: str
    message: str


@dataclass
class QuotaPlan:
    """One GlobalResourceQuota: its selection, usage and the ResourceQuotas it should have."""

    raw: JSON
    name: str
    uid: str
    generation: int
    quota: GlobalResourceQuota | None = None
    problems: list[Problem] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    hard: dict[str, Quantity] = field(default_factory=dict)
    usage: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    """Namespace -> its usage (resources of ``hard`` only): what its ResourceQuota reports, raised to the count
    of its objects where the report may be short."""
    reported_usage: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    """Namespace -> what its ResourceQuota reports (``hard`` is computed from this)."""
    reported: set[str] = field(default_factory=set)
    """Namespaces whose ResourceQuota has reported usage for every resource of ``hard``."""
    used: dict[str, Quantity] = field(default_factory=dict)
    desired: dict[str, JSON] = field(default_factory=dict)
    """Namespace -> the ResourceQuota body it should have (terminating namespaces get none)."""

    @property
    def valid(self) -> bool:
        return self.quota is not None and not any(p.reason == "InvalidSpec" for p in self.problems)

    @property
    def initialized(self) -> bool:
        return self.valid and set(self.namespaces) <= self.reported

    @property
    def available(self) -> dict[str, Quantity]:
        return max0(sub_maps(self.hard, self.used))


@dataclass
class Plan:
    quotas: dict[str, QuotaPlan] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    """Keys (``namespace/name``) of managed ResourceQuotas no quota wants any more."""
    snapshot: GlobalQuotasSnapshot = field(default_factory=GlobalQuotasSnapshot)


def terminating(namespace: JSON) -> bool:
    return bool(namespace.get("metadata", {}).get("deletionTimestamp")) or (
        (namespace.get("status") or {}).get("phase") == "Terminating"
    )


def _owner(raw: JSON) -> JSON:
    meta = raw["metadata"]
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GlobalResourceQuota",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": False,
    }


def quota_spec(quota: GlobalResourceQuota) -> JSON:
    """The ResourceQuota ``spec`` fields that come from the GlobalResourceQuota (all but ``hard``)."""
    spec: JSON = {}
    if quota.spec.quota.scopes:
        spec["scopes"] = list(quota.spec.quota.scopes)
    selector = quota.spec.quota.scope_selector
    if selector is not None and selector.match_expressions:
        spec["scopeSelector"] = selector.to_k8s()
    return spec


def resource_quota_body(raw: JSON, quota: GlobalResourceQuota, namespace: str, hard: Mapping[str, Quantity]) -> JSON:
    name = raw["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": naming.resource_quota_name(name),
            "namespace": namespace,
            "labels": {names.MANAGED_BY: names.GLOBALQUOTAS_MANAGER, names.GLOBALQUOTA_LABEL: naming.label_value(name)},
            "annotations": {names.GLOBALQUOTA_ANNOTATION: name},
            "ownerReferences": [_owner(raw)],
        },
        "spec": {"hard": {key: str(value) for key, value in sorted(hard.items())}, **quota_spec(quota)},
    }


def _parse_used(live: JSON | None, resources: Iterable[str]) -> tuple[dict[str, Quantity], bool]:
    """The usage a ResourceQuota reports for ``resources``, and whether it reported all of them.

    The resourcequota controller fills ``status.used`` for every resource of ``status.hard``; until it has
    caught up with a new or changed spec, the missing resources count as zero and the namespace as unreported.
    """
    used: dict[str, Quantity] = {}
    status = (live or {}).get("status") or {}
    reported_used = status.get("used") or {}
    complete = live is not None
    for key in resources:
        value = reported_used.get(key)
        if value is None:
            complete = False
            used[key] = Quantity(0)
            continue
        try:
            used[key] = Quantity.parse(value)
        except ValueError:
            complete = False
            used[key] = Quantity(0)
    return used, complete


def _scope_requirements(quota: GlobalResourceQuota) -> list[tuple[str, str, list[str]]]:
    selector = quota.spec.quota.scope_selector
    return (
        [(r.scope_name, r.operator, list(r.values or [])) for r in (selector.match_expressions or [])]
        if selector
        else []
    )


def plan_quota(
    raw: JSON,
    namespaces: Mapping[str, JSON],
    resource_quotas: Mapping[str, JSON],
    counted: Mapping[str, Mapping[str, Quantity]] | None = None,
) -> QuotaPlan:
    """The plan of one GlobalResourceQuota; ``resource_quotas`` is keyed ``namespace/name``, ``counted`` maps a
    namespace whose report may be short to the count of its objects."""
    meta = raw.get("metadata", {})
    name = str(meta.get("name", ""))
    plan = QuotaPlan(raw=raw, name=name, uid=str(meta.get("uid", "")), generation=int(meta.get("generation") or 0))
    try:
        quota = GlobalResourceQuota.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        plan.problems.append(Problem("InvalidSpec", f"{where}: {first['msg']}"))
        return plan
    plan.quota = quota
    spec = quota.spec.quota
    refused = resource_quota_problems(spec.hard, spec.scopes, _scope_requirements(quota))
    if refused:
        plan.problems.append(Problem("InvalidSpec", "; ".join(refused)))
        return plan
    plan.hard = {key: Quantity.parse(value) for key, value in (spec.hard or {}).items()}
    raw_selectors = (raw.get("spec") or {}).get("namespaceSelectors") or []
    plan.namespaces = sorted(
        ns for ns, obj in namespaces.items() if matches_any(raw_selectors, obj.get("metadata", {}).get("labels") or {})
    )
    rq_name = naming.resource_quota_name(name)
    for namespace in plan.namespaces:
        live = resource_quotas.get(f"{namespace}/{rq_name}")
        used, complete = _parse_used(live, plan.hard)
        if live is not None and _scope_fields(live) != _scope_fields({"spec": quota_spec(quota)}):
            complete = False  # its usage was counted under other scopes; wait for the recount
        plan.reported_usage[namespace] = dict(used)
        for key, value in ((counted or {}).get(namespace) or {}).items():
            if key in used and value > used[key]:
                used[key] = value
        plan.usage[namespace] = used
        if complete or (live is None and terminating(namespaces[namespace])):
            plan.reported.add(namespace)
    plan.used = {key: sum((plan.usage[ns][key] for ns in plan.namespaces), Quantity(0)) for key in plan.hard}
    headroom = plan.available
    for namespace in plan.namespaces:
        live = resource_quotas.get(f"{namespace}/{rq_name}")
        if terminating(namespaces[namespace]) and live is None:
            continue  # kube-apiserver refuses new objects in a terminating namespace
        hard = {key: plan.reported_usage[namespace][key] + headroom[key] for key in plan.hard}
        plan.desired[namespace] = resource_quota_body(raw, quota, namespace, hard)
    return plan


def _scope_fields(obj: JSON) -> tuple[list[str], Any]:
    spec = obj.get("spec") or {}
    return sorted(spec.get("scopes") or []), (spec.get("scopeSelector") or {}).get("matchExpressions")


def scopes_changed(live: JSON, desired: JSON) -> bool:
    """Scopes or scope selector differ. ResourceQuota scopes are immutable, so a change means delete and
    create; and until the resourcequota controller recounts, the reported usage is of the old scopes."""
    return _scope_fields(live) != _scope_fields(desired)


def drift_patch(live: JSON, desired: JSON) -> JSON | None:
    """A merge patch that puts ``live`` back to ``desired`` (labels, owner, hard), or None when it matches.

    Hard values are compared as quantities (``1000m`` is ``1``), and a resource someone added by hand is
    removed with an explicit ``null``.
    """
    patch: JSON = {}
    meta, want = live.get("metadata", {}), desired["metadata"]
    if not holds(meta.get("labels"), want["labels"]):
        patch.setdefault("metadata", {})["labels"] = want["labels"]
    if not holds(meta.get("annotations"), want["annotations"]):
        patch.setdefault("metadata", {})["annotations"] = want["annotations"]
    owners = meta.get("ownerReferences") or []
    if not any(o.get("uid") == want["ownerReferences"][0]["uid"] and o.get("controller") for o in owners):
        patch.setdefault("metadata", {})["ownerReferences"] = want["ownerReferences"]
    live_hard = (live.get("spec") or {}).get("hard") or {}
    wanted_hard = desired["spec"]["hard"]
    hard_patch: JSON = {}
    for key, value in wanted_hard.items():
        if key not in live_hard or not quantity_equal(live_hard[key], value):
            hard_patch[key] = value
    for key in live_hard:
        if key not in wanted_hard:
            hard_patch[key] = None
    if hard_patch:
        patch["spec"] = {"hard": hard_patch}
    return patch or None


def build_plan(
    quotas: Iterable[JSON],
    namespaces: Mapping[str, JSON],
    resource_quotas: Mapping[str, JSON],
    *,
    ledger_namespace: str,
    counted: Mapping[str, Mapping[str, Mapping[str, Quantity]]] | None = None,
) -> Plan:
    """Every quota's plan, the managed ResourceQuotas nobody wants, and the snapshot admission reads.
    ``counted``: quota -> namespace -> the count of its objects, where its ResourceQuota may report short."""
    plan = Plan()
    for raw in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        if raw.get("metadata", {}).get("deletionTimestamp"):
            continue  # its ResourceQuotas go with it (stale below, and the garbage collector)
        name = str(raw.get("metadata", {}).get("name", ""))
        quota_plan = plan_quota(raw, namespaces, resource_quotas, (counted or {}).get(name))
        plan.quotas[quota_plan.name] = quota_plan
    wanted: set[str] = set()
    kept: set[str] = set()  # quotas whose spec is refused keep the ResourceQuotas they had
    for quota_plan in plan.quotas.values():
        wanted |= {f"{ns}/{naming.resource_quota_name(quota_plan.name)}" for ns in quota_plan.desired}
        if not quota_plan.valid:
            kept.add(naming.label_value(quota_plan.name))
    for key, rq in resource_quotas.items():
        labels = rq.get("metadata", {}).get("labels") or {}
        if labels.get(names.MANAGED_BY) != names.GLOBALQUOTAS_MANAGER or key in wanted:
            continue
        if labels.get(names.GLOBALQUOTA_LABEL) in kept:
            continue
        plan.stale.append(key)
    plan.stale.sort()
    plan.snapshot = GlobalQuotasSnapshot(
        quotas=[_view(p, ledger_namespace) for p in plan.quotas.values() if p.quota is not None]
    )
    return plan


def _view(plan: QuotaPlan, ledger_namespace: str) -> GlobalQuotaView:
    assert plan.quota is not None
    spec = plan.quota.spec.quota
    return GlobalQuotaView(
        name=plan.name,
        uid=plan.uid,
        generation=plan.generation,
        ledger_namespace=ledger_namespace,
        ledger_name=quota_ledger_name(plan.name),
        hard={key: str(value) for key, value in sorted(plan.hard.items())},
        scopes=list(spec.scopes or []),
        scope_selector=[
            ScopeRequirement(scope_name=scope, operator=op, values=values)
            for scope, op, values in _scope_requirements(plan.quota)
        ],
        namespaces=plan.namespaces,
        used={key: str(value) for key, value in sorted(plan.used.items())},
        initialized=plan.initialized,
        valid=plan.valid,
    )

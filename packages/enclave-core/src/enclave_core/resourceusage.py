"""What an object counts for toward a native quota: Kubernetes' quota evaluators for the kinds a shared quota
is usually about, so admission can reserve before kube-apiserver's ResourceQuota plugin charges the object, and
enclave-globalquotas can count a namespace whose ResourceQuota reports less than what exists
(:mod:`enclave_globalquotas.recount`): one evaluation for both, so a count never disagrees with a reservation.

Covered (Kubernetes 1.35, ``pkg/quota/v1/evaluator/core`` and the generic object count):

* every object: ``count/<resource>[.<group>]``, and the legacy names ``pods``, ``services``, ``configmaps``,
  ``secrets``, ``persistentvolumeclaims``, ``replicationcontrollers``, ``resourcequotas``;
* Services: ``services.loadbalancers`` and ``services.nodeports``;
* Pods (not in a terminal phase): requests and limits of cpu, memory, ephemeral-storage, hugepages and
  extended resources (``cpu`` and ``memory`` are the requests), the larger of the containers' sum and any
  init container, plus the pod overhead; and the pod scopes (BestEffort, NotBestEffort, Terminating,
  NotTerminating, PriorityClass, CrossNamespacePodAffinity);
* PersistentVolumeClaims: ``requests.storage`` and the per-storage-class names
  ``<class>.storageclass.storage.k8s.io/requests.storage`` and ``.../persistentvolumeclaims``.

A scoped quota counts only pods (and claims for VolumeAttributesClass), as in Kubernetes. Whatever this module
does not evaluate is still enforced by kube-apiserver's ResourceQuota on the provisioned quotas; only the
race between namespaces for the last unit is then left open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from enclave_core.quantity import Quantity
from enclave_core.snapshots.globalquotas import GlobalQuotaView

JSON = dict[str, Any]
ZERO = Quantity(0)
_LEGACY_COUNTS = {
    "pods": "pods",
    "services": "services",
    "configmaps": "configmaps",
    "secrets": "secrets",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "replicationcontrollers": "replicationcontrollers",
    "resourcequotas": "resourcequotas",
}
_STORAGE_CLASS = ".storageclass.storage.k8s.io/"


def _quantity(value: object) -> Quantity:
    try:
        return Quantity.parse(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ZERO


def _resources(container: Mapping[str, Any], part: str) -> dict[str, Quantity]:
    section = ((container.get("resources") or {}).get(part)) or {}
    return {str(k): _quantity(v) for k, v in section.items()} if isinstance(section, dict) else {}


def _pod_amounts(spec: Mapping[str, Any], part: str) -> dict[str, Quantity]:
    """Effective requests or limits of a pod: pod-level resources when set, else max(sum of containers and
    sidecars, each init container), plus overhead."""
    pod_level = _resources(spec, part)
    if pod_level:
        total = dict(pod_level)
    else:
        total = {}
        sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        for container in [*(spec.get("containers") or []), *sidecars]:
            for key, value in _resources(container, part).items():
                total[key] = total.get(key, ZERO) + value
        for container in spec.get("initContainers") or []:
            if container.get("restartPolicy") == "Always":
                continue
            for key, value in _resources(container, part).items():
                if value > total.get(key, ZERO):
                    total[key] = value
    for key, value in ((spec.get("overhead") or {}) if isinstance(spec.get("overhead"), dict) else {}).items():
        total[str(key)] = total.get(str(key), ZERO) + _quantity(value)
    return total


def _best_effort(spec: Mapping[str, Any]) -> bool:
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for part in ("requests", "limits"):
            if any(key in ("cpu", "memory") for key in _resources(container, part)):
                return False
    return True


def _cross_namespace_affinity(spec: Mapping[str, Any]) -> bool:
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            t.get("podAffinityTerm") or {} for t in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


def _pod_scope(scope: str, operator: str, values: list[str], spec: Mapping[str, Any]) -> bool:
    if scope == "BestEffort":
        return _best_effort(spec)
    if scope == "NotBestEffort":
        return not _best_effort(spec)
    if scope == "Terminating":
        return spec.get("activeDeadlineSeconds") is not None
    if scope == "NotTerminating":
        return spec.get("activeDeadlineSeconds") is None
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(spec)
    if scope == "PriorityClass":
        name = spec.get("priorityClassName")
        if operator == "Exists":
            return bool(name)
        if operator == "DoesNotExist":
            return not name
        if operator == "In":
            return name in values
        if operator == "NotIn":
            return name not in values
    return False


def scoped(quota: GlobalQuotaView, group: str, resource: str, obj: Mapping[str, Any]) -> bool:
    """Whether ``quota``'s scopes let it count ``obj`` (an unscoped quota counts everything)."""
    requirements: list[tuple[str, str, list[str]]] = [(s, "Exists", []) for s in quota.scopes]
    requirements += [(r.scope_name, r.operator, list(r.values)) for r in quota.scope_selector]
    if not requirements:
        return True
    spec = obj.get("spec") or {}
    if group == "" and resource == "pods":
        return all(_pod_scope(scope, op, values, spec) for scope, op, values in requirements)
    if group == "" and resource == "persistentvolumeclaims":
        name = spec.get("volumeAttributesClassName")
        for scope, op, values in requirements:
            if scope != "VolumeAttributesClass":
                return False
            if (op == "Exists" and not name) or (op == "DoesNotExist" and name):
                return False
            if (op == "In" and name not in values) or (op == "NotIn" and name in values):
                return False
        return True
    return False


def usage(group: str, resource: str, obj: Mapping[str, Any] | None, names: Iterable[str]) -> dict[str, Quantity]:
    """What ``obj`` (of ``group``/``resource``) counts for, for the resource ``names`` of a quota."""
    if not obj:
        return {}
    wanted = set(names)
    found: dict[str, Quantity] = {}
    one = Quantity.parse(1)
    count_name = f"count/{resource}" if not group else f"count/{resource}.{group}"
    spec = obj.get("spec") or {}
    if group == "" and resource == "pods" and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return {}
    if count_name in wanted:
        found[count_name] = one
    if not group and _LEGACY_COUNTS.get(resource) in wanted:
        found[resource] = one
    if group == "" and resource == "services":
        kind = spec.get("type") or "ClusterIP"
        if "services.loadbalancers" in wanted and kind == "LoadBalancer":
            found["services.loadbalancers"] = one
        node_ports = kind == "NodePort" or (kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts", True))
        if "services.nodeports" in wanted and node_ports:
            found["services.nodeports"] = Quantity.parse(len(spec.get("ports") or []))
    if group == "" and resource == "pods":
        requests, limits = _pod_amounts(spec, "requests"), _pod_amounts(spec, "limits")
        for name in wanted:
            if name in ("cpu", "memory", "ephemeral-storage"):
                value = requests.get(name)
            elif name.startswith("requests."):
                value = requests.get(name.removeprefix("requests."))
            elif name.startswith("limits."):
                value = limits.get(name.removeprefix("limits."))
            elif name.startswith("hugepages-"):
                value = requests.get(name)
            else:
                value = None
            if value is not None and value.sign() > 0:
                found[name] = value
    if group == "" and resource == "persistentvolumeclaims":
        storage = _quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage"))
        if "requests.storage" in wanted and storage.sign() > 0:
            found["requests.storage"] = storage
        klass = spec.get("storageClassName")
        if klass:
            per_class = f"{klass}{_STORAGE_CLASS}requests.storage"
            if per_class in wanted and storage.sign() > 0:
                found[per_class] = storage
            if f"{klass}{_STORAGE_CLASS}persistentvolumeclaims" in wanted:
                found[f"{klass}{_STORAGE_CLASS}persistentvolumeclaims"] = one
    return found

"""The rules kube-apiserver applies to a native ResourceQuota spec, checked before Enclave writes one.

GlobalResourceQuotas, tenant rule quotas and ResourcePools are turned into ResourceQuotas in many namespaces.
A spec kube-apiserver would refuse must be refused once, at the Enclave object, naming the field, rather than
surfacing later as one failed write per namespace. The rules mirror ``ValidateResourceQuotaSpec`` of
Kubernetes 1.35 (``pkg/apis/core/validation``): resource names, integer resources, scope names, scopes valid
for the resources listed, conflicting scope pairs and the scope-selector operators (resource names through
:mod:`enclave_core.resourcenames`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypeAlias

from enclave_core.quantity import Quantity, QuantityLike
from enclave_core.resourcenames import STANDARD_QUOTA_RESOURCES, quota_resource_problem
from enclave_core.selectors import validate_label_key

__all__ = [
    "SCOPES",
    "ScopeName",
    "is_integer_resource",
    "resource_quota_problems",
]

ScopeName: TypeAlias = Literal[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
    "VolumeAttributesClass",
]
SCOPES: Final[tuple[str, ...]] = typing.get_args(ScopeName)

_INTEGER: Final = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_POD_COMPUTE: Final = frozenset({"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"})
_SCOPE_RESOURCES: Final[dict[str, frozenset[str]]] = {
    "Terminating": frozenset({"pods"}) | _POD_COMPUTE,
    "NotTerminating": frozenset({"pods"}) | _POD_COMPUTE,
    "NotBestEffort": frozenset({"pods"}) | _POD_COMPUTE,
    "PriorityClass": frozenset({"pods"}) | _POD_COMPUTE,
    "CrossNamespacePodAffinity": frozenset({"pods"}) | _POD_COMPUTE,
    "BestEffort": frozenset({"pods"}),
    "VolumeAttributesClass": frozenset({"persistentvolumeclaims", "requests.storage"}),
}
"""Scope -> the standard resources it may constrain (non-standard names pass, as in Kubernetes)."""
_EXISTS_ONLY: Final = frozenset(
    {"Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "CrossNamespacePodAffinity"}
)
_CONFLICTS: Final = (("BestEffort", "NotBestEffort"), ("Terminating", "NotTerminating"))


def _standard(name: str) -> bool:
    return name in STANDARD_QUOTA_RESOURCES or name.startswith(("hugepages-", "requests.hugepages-"))


def is_integer_resource(name: str) -> bool:
    """Counted in whole units: object counts, ``count/*`` and extended resources (Kubernetes' rule)."""
    if name in _INTEGER:
        return True
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests."):
        return False
    try:
        validate_label_key("requests." + name)
    except ValueError:
        return False
    return True


def resource_quota_problems(
    hard: Mapping[str, QuantityLike] | None,
    scopes: Sequence[str] | None,
    scope_selector: Sequence[tuple[str, str, Sequence[str]]] | None,
    *,
    field: str = "spec.quota",
) -> list[str]:
    """Every reason kube-apiserver would refuse this quota spec, each naming its field.

    ``scope_selector`` is the list of (scopeName, operator, values) requirements.
    """
    problems: list[str] = []
    names = sorted(hard or {})
    for name in names:
        reason = quota_resource_problem(name)
        if reason:
            problems.append(f"{field}.hard[{name}]: {reason}")
            continue
        try:
            value = Quantity.parse((hard or {})[name])
        except ValueError as err:
            problems.append(f"{field}.hard[{name}]: {err}")
            continue
        if value.sign() < 0:
            problems.append(f"{field}.hard[{name}]: must be greater than or equal to 0")
        elif is_integer_resource(name) and value.nanos % 10**9:
            problems.append(f"{field}.hard[{name}]: must be a whole number, {name} is counted in units")

    def check_scope(scope: str, where: str) -> None:
        if scope not in SCOPES:
            problems.append(f"{where}: unsupported scope {scope!r}; one of {', '.join(SCOPES)}")
            return
        allowed = _SCOPE_RESOURCES[scope]
        bad = [n for n in names if _standard(n) and n not in allowed]
        if bad:
            problems.append(
                f"{where}: scope {scope} cannot constrain {', '.join(bad)} (it applies to {', '.join(sorted(allowed))})"
            )

    for index, scope in enumerate(scopes or ()):
        check_scope(scope, f"{field}.scopes[{index}]")
    for first, second in _CONFLICTS:
        if first in (scopes or ()) and second in (scopes or ()):
            problems.append(f"{field}.scopes: {first} and {second} conflict")
    selected: set[str] = set()
    for index, (scope, operator, values) in enumerate(scope_selector or ()):
        where = f"{field}.scopeSelector.matchExpressions[{index}]"
        check_scope(scope, f"{where}.scopeName")
        if scope in _EXISTS_ONLY and operator != "Exists":
            problems.append(f"{where}.operator: must be Exists for scope {scope}")
        if operator in ("In", "NotIn") and not values:
            problems.append(f"{where}.values: at least one value is required with {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            problems.append(f"{where}.values: must be empty with {operator}")
        selected.add(scope)
    for first, second in _CONFLICTS:
        if first in selected and second in selected:
            problems.append(f"{field}.scopeSelector: {first} and {second} conflict")
    return problems

"""Which keys a native ResourceQuota's ``hard`` accepts, checked before Enclave copies a map into one.

A pool (or any Enclave kind that provisions ResourceQuotas) would otherwise accept ``cpus: 4`` and only fail
later, when kube-apiserver refuses the provisioned quota, far from the user who made the typo. The rule is
kube-apiserver's own (``ValidateResourceQuotaResourceName``): a name without a ``/`` must be one of the
standard quota resources (or a hugepages size); a name with one (``count/deployments.apps``,
``requests.nvidia.com/gpu``, ``gold.storageclass.storage.k8s.io/requests.storage``) must be a qualified name
whose prefix is a DNS subdomain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from enclave_core.quantity import Quantity

__all__ = ["STANDARD_QUOTA_RESOURCES", "quota_resource_problem", "resource_list_problems"]

STANDARD_QUOTA_RESOURCES: Final = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
"""The unprefixed names kube-apiserver accepts in a ResourceQuota (``standardQuotaResources``)."""

_HUGEPAGES: Final = re.compile(r"^(requests\.|limits\.)?hugepages-[0-9]+(\.[0-9]+)?([KMGTPE]i?|[kmu])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def quota_resource_problem(name: str) -> str:
    """Why ``name`` is not a ResourceQuota resource name, or ``""`` when it is."""
    prefix, slash, rest = name.rpartition("/")
    if not slash:
        if name in STANDARD_QUOTA_RESOURCES or _HUGEPAGES.match(name):
            return ""
        return (
            f"unknown resource name {name!r}: expected a standard quota resource "
            "(e.g. requests.cpu, limits.memory, pods), a hugepages size, or a prefixed name such as "
            "count/deployments.apps or requests.nvidia.com/gpu"
        )
    if len(rest) > 63 or not _NAME_PART.match(rest):
        return f"invalid resource name {name!r}: {rest!r} must be at most 63 alphanumerics, '-', '_' or '.'"
    # ``requests.nvidia.com/gpu``: the prefix is ``requests.`` plus a DNS subdomain.
    domain = prefix.removeprefix("requests.").removeprefix("limits.")
    if not prefix or len(domain) > 253 or not _DNS_SUBDOMAIN.match(domain):
        return f"invalid resource name {name!r}: the prefix {prefix!r} must be a DNS subdomain"
    return ""


def resource_list_problems(values: Mapping[str, object], field: str) -> list[str]:
    """Every problem of a resource list (``{name: quantity}``), each naming its field, e.g.
    ``spec.claim[requests.cpu]: quantity must not be negative, got '-1'``."""
    problems: list[str] = []
    for name, value in values.items():
        where = f"{field}[{name}]"
        why = quota_resource_problem(name)
        if why:
            problems.append(f"{where}: {why}")
            continue
        if isinstance(value, bool) or not isinstance(value, int | str):
            problems.append(f"{where}: expected a quantity (an integer or a string such as '500m'), got {value!r}")
            continue
        try:
            quantity = Quantity.parse(value)
        except ValueError as err:
            problems.append(f"{where}: {err}")
            continue
        if quantity.sign() < 0:
            problems.append(f"{where}: quantity must not be negative, got {value!r}")
    return problems

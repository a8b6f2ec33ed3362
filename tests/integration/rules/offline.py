"""What kube-apiserver sends admission for a request of the native differential (:mod:`.test_rules_native_differential`),
as ``enclave test``'s request: shared by the CLI comparison of the engines and the differential's check of the local
policy evaluation against kube-apiserver's."""

from __future__ import annotations

import copy
from typing import Any

from enclave_cli.engine import Request

KINDS = {"configmaps": "ConfigMap", "services": "Service"}
GROUPS = ("enclave.dev", "system:authenticated")
"""The groups of the differential's users: the tenant users' group, and what kube-apiserver adds to an impersonated
user."""


def merged(old: Any, patch: Any) -> Any:
    """A merge patch on ``old`` (None removes a key), as the differential's update sends it."""
    if not isinstance(old, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    found = copy.deepcopy(old)
    for key, value in patch.items():
        if value is None:
            found.pop(key, None)
        else:
            found[key] = merged(found.get(key), value)
    return found


def cli_request(
    resource: str,
    body: dict[str, Any],
    old: dict[str, Any] | None,
    user: str,
    name: str,
    namespace: str,
    *,
    group: str = "",
    kind: str = "",
    sub_resource: str = "",
) -> Request:
    """The request (CREATE of ``body``, or UPDATE of ``old`` patched with ``body``) as ``enclave test`` takes it;
    ``resource`` of ``group`` (version v1), its ``kind`` (default: :data:`KINDS`)."""
    kind = kind or KINDS[resource]
    api_version = f"{group}/v1" if group else "v1"

    def whole(part: dict[str, Any]) -> dict[str, Any]:
        found = {"apiVersion": api_version, "kind": kind, **copy.deepcopy(part)}
        found["metadata"] = {**found.get("metadata", {}), "name": name, "namespace": namespace}
        return found

    before = whole(old) if old is not None else None
    after = whole(merged(old, body) if old is not None else body)
    return Request(
        user=user,
        groups=GROUPS,
        operation="UPDATE" if before is not None else "CREATE",
        obj=after,
        old=before,
        group=group,
        resource=resource,
        sub_resource=sub_resource,
        kind=kind,
        api_version=api_version,
        name=name,
        namespace=namespace,
    )


def server_assigned(resource: str, body: dict[str, Any]) -> bool:
    """Whether kube-apiserver fills in what the rules judge before admission sees it (a node port it allocates to
    a NodePort or LoadBalancer Service port that names none), so the request as written is not what is judged."""
    spec = body.get("spec") or {}
    if resource != "services" or spec.get("type") not in ("NodePort", "LoadBalancer"):
        return False
    if spec.get("type") == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is False:
        return False
    return any(not port.get("nodePort") for port in spec.get("ports") or [])

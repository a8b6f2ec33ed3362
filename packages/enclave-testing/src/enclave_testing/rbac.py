"""Cluster-wide grants a test holds for a block and removes afterwards, so a right never leaks into another module
sharing the control plane (the security suite's attackers, enclave-proxy's own account in its suites)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique


@contextlib.contextmanager
def granted(kube: Any, rules: list[dict[str, Any]], subjects: list[dict[str, str]]) -> Iterator[str]:
    """A ClusterRole of ``rules`` bound cluster-wide to ``subjects`` for the block (the name is yielded); removed
    afterwards so the grant never leaks into another module sharing the control plane."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = unique("sec-grant")
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        }
    )
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(name)

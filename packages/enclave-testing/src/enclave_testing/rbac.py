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
        wait_effective(kube, rules, subjects)
        yield name
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(name)


def _who(subject: dict[str, str]) -> tuple[str, list[str]]:
    if subject["kind"] == "Group":
        return "enclave-rbac-probe", [subject["name"]]
    if subject["kind"] == "ServiceAccount":
        return f"system:serviceaccount:{subject['namespace']}:{subject['name']}", []
    return subject["name"], []


def wait_effective(kube: Any, rules: list[dict[str, Any]], subjects: list[dict[str, str]], timeout: float = 30) -> None:
    """Until kube-apiserver's authorizer allows each subject the first resource rule: a new binding reaches its
    RBAC cache through a watch, and a request sent at once (under load) is refused by RBAC rather than judged
    by the webhook under test."""
    from enclave_testing.waiting import poll

    rule = next((r for r in rules if r.get("resources")), None)
    if rule is None:
        return
    attributes = {"group": rule["apiGroups"][0], "resource": rule["resources"][0], "verb": rule["verbs"][0]}
    api = client.AuthorizationV1Api(kube)
    for subject in subjects:
        user, groups = _who(subject)
        review = {"spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
        poll(
            lambda review=review: bool(api.create_subject_access_review(review).status.allowed),  # type: ignore[misc]
            timeout=timeout,
            what=f"{user} granted {attributes}",
        )

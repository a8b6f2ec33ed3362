"""Attacks on the native-rules label: ``enclave.dev/native-rules`` on a tenant namespace makes kube-apiserver
skip Enclave's rules webhooks there (enclave-tenants sets it where admission policies enforce every rule), so a
tenant that could set it would switch its own rules off. Each test would be admitted without the guard in
``enclave_admission.namespaces.validation``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from enclave_core.api.names import NATIVE_RULES_LABEL
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace
from .tenant_attacks import denied


def _may_patch_its_namespace(kube: Any, namespace: str, owner: str) -> None:
    """RBAC lets ``owner`` patch the namespace object itself (a platform letting owners label their namespaces;
    kube-apiserver authorizes a namespace's own object against RoleBindings in it): only Enclave stands between."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = unique("labeller")
    rule = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch", "update"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
        },
    )


def test_tenant_owner_labelling_its_namespace_native_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    owner = unique("nat")
    _, namespace = owned_namespace(fence, impersonate, owner)
    _may_patch_its_namespace(fence.kube, namespace, owner)
    api = client.CoreV1Api(as_user(impersonate, owner))
    benign = {"metadata": {"labels": {"team": "blue"}}}
    poll(lambda: api.patch_namespace(namespace, benign), what="the owner's namespace patch authorized")
    patch = {"metadata": {"labels": {NATIVE_RULES_LABEL: "true"}}}
    denied(lambda: api.patch_namespace(namespace, patch), NATIVE_RULES_LABEL, "set by Enclave only")
    labels = client.CoreV1Api(fence.kube).read_namespace(namespace).metadata.labels or {}
    assert NATIVE_RULES_LABEL not in labels


def test_tenant_owner_creating_a_namespace_labelled_native_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    owner = unique("nac")
    tenant, _ = owned_namespace(fence, impersonate, owner)
    api = client.CoreV1Api(as_user(impersonate, owner))
    body = {"metadata": {"name": f"{tenant}-b", "labels": {NATIVE_RULES_LABEL: "true"}}}
    denied(lambda: api.create_namespace(body), NATIVE_RULES_LABEL, "set by Enclave only")

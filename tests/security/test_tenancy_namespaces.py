"""Attacks through a namespace's own lifecycle: its rules while it terminates, a tenant namespace admission has
no rules for, and force-finalizing it (issue 29, "namespace-level escapes").

The terminating attacks are the one reproduced against ``tox -e up``: an owner keeps objects and their own
access alive with finalizers, deletes the namespace, and while it stays Terminating patches in what the tenant's
rules forbid. enclave-tenants used to drop a terminating namespace from the Rules snapshot, and admission
judged a namespace it had no rules for as one without rules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace

GROUP, VERSION = "enclave.dev", "v1beta2"
HOLD = "example.com/hold"
"""A finalizer nothing removes: what keeps the attacker's objects (and the namespace) around."""


def refused(call: Callable[[], Any], *fragments: str) -> str:
    """The admission refusal ``call`` runs into, which must mention every fragment."""
    with pytest.raises(ApiException) as caught:
        call()
    body = str(caught.value.body or "")
    assert caught.value.status == 403, body
    assert "denied the request" in body, body
    for fragment in fragments:
        assert fragment in body, body
    return body


class Terminating:
    """A tenant namespace with the tenant's rules compiled, an object the owner holds there with a finalizer,
    and a RoleBinding of the owner's own to ``admin`` held the same way, then deleted by the owner: Terminating for as long
    as the finalizers stay. Cleanup (as the cluster administrator) removes them so the namespace goes (the namespace
    controller finishes that in its own time, as after any test's namespace)."""

    def __init__(self, fence: TenancyStack, impersonate: Callable[..., Any]) -> None:
        self.fence = fence
        self.impersonate = impersonate
        self.admin = fence.kube
        self.owner = unique("mallory")
        self.namespace = ""
        self.held: list[Callable[[], None]] = []

    def start(self, rules: list[dict[str, Any]], create: Callable[[Any, str], Callable[[], None]]) -> Any:
        """``create(owner_api_client, namespace)`` makes the held object and returns how to release it; the
        owner's ApiClient is returned once the namespace is Terminating and its RuleStatus is gone."""
        _, self.namespace = owned_namespace(self.fence, self.impersonate, self.owner, rules=rules)
        custom = client.CustomObjectsApi(self.admin)

        def compiled() -> bool:
            status = custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "rulestatuses", "default")
            return (status.get("status") or {}).get("size") == len(rules)

        poll(compiled, timeout=30, what=f"the rules of {self.namespace} compiled")
        api = as_user(self.impersonate, self.owner)
        self.held.append(create(api, self.namespace))
        # The owner keeps their own access: a RoleBinding of their own to `admin`, held by a finalizer. (The one
        # enclave-tenants made for them cannot be held: rolebindings.enclave.dev refuses tenant users any change
        # to it, tests/security/test_rolebinding_guard.py.)
        rbac = client.RbacAuthorizationV1Api(api)
        keep = {
            "metadata": {"name": "keep-access", "finalizers": [HOLD]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.owner}],
        }
        rbac.create_namespaced_role_binding(self.namespace, keep)
        admin_rbac = client.RbacAuthorizationV1Api(self.admin)
        self.held.append(
            lambda: admin_rbac.patch_namespaced_role_binding(
                "keep-access", self.namespace, {"metadata": {"finalizers": None}}
            )
        )
        client.CoreV1Api(api).delete_namespace(self.namespace)

        core = client.CoreV1Api(self.admin)
        poll(
            lambda: core.read_namespace(self.namespace).status.phase == "Terminating",
            what=f"{self.namespace} Terminating",
        )
        # The namespace controller deletes what has no finalizer, the RuleStatus (its own rules) among it; the
        # administrator's delete here is the same step without waiting for that controller's queue, which a full
        # run keeps long (no one can create the RuleStatus again in a Terminating namespace).
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "rulestatuses", "default")

        def rule_status_gone() -> bool:
            try:
                custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "rulestatuses", "default")
            except ApiException as err:
                return bool(err.status == 404)
            return False

        poll(rule_status_gone, timeout=30, what=f"{self.namespace}'s RuleStatus gone")
        return api

    def close(self) -> None:
        for release in self.held:
            with contextlib.suppress(ApiException):
                release()


@pytest.fixture
def terminating(fence: TenancyStack, impersonate: Callable[..., Any]) -> Iterator[Terminating]:
    found = Terminating(fence, impersonate)
    try:
        yield found
    finally:
        found.close()


def _held_service(api: Any, namespace: str) -> Callable[[], None]:
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": "held", "finalizers": [HOLD]}, "spec": {"ports": [{"port": 80}]}}
    core.create_namespaced_service(namespace, body)
    return lambda: core.patch_namespaced_service("held", namespace, {"metadata": {"finalizers": None}})


def test_nodeport_patch_in_a_terminating_namespace_is_refused(terminating: Terminating) -> None:
    rules = [{"enforce": {"action": "deny", "services": {"types": ["NodePort", "LoadBalancer"]}}}]
    api = terminating.start(rules, _held_service)
    core = client.CoreV1Api(api)
    refused(
        lambda: core.patch_namespaced_service("held", terminating.namespace, {"spec": {"type": "NodePort"}}),
        "spec.type",
        "NodePort",
    )


def test_external_ip_patch_in_a_terminating_namespace_is_refused(terminating: Terminating) -> None:
    rules = [{"enforce": {"action": "deny", "services": {"externalIPs": {"cidrs": []}}}}]
    api = terminating.start(rules, _held_service)
    core = client.CoreV1Api(api)
    refused(
        lambda: core.patch_namespaced_service("held", terminating.namespace, {"spec": {"externalIPs": ["192.0.2.7"]}}),
        "spec.externalIPs[0]",
    )


def test_forbidden_hostname_patch_in_a_terminating_namespace_is_refused(terminating: Terminating) -> None:
    rules = [{"enforce": {"action": "allow", "ingress": {"hostnames": [{"exp": r"[a-z0-9-]+\.apps\.example"}]}}}]

    def ingress(host: str) -> dict[str, Any]:
        backend = {"service": {"name": "web", "port": {"number": 80}}}
        path = {"path": "/", "pathType": "Prefix", "backend": backend}
        return {"spec": {"rules": [{"host": host, "http": {"paths": [path]}}]}}

    def held_ingress(api: Any, namespace: str) -> Callable[[], None]:
        net = client.NetworkingV1Api(api)
        net.create_namespaced_ingress(
            namespace, {"metadata": {"name": "held", "finalizers": [HOLD]}, **ingress("web.apps.example")}
        )
        return lambda: net.patch_namespaced_ingress("held", namespace, {"metadata": {"finalizers": None}})

    api = terminating.start(rules, held_ingress)
    net = client.NetworkingV1Api(api)
    refused(
        lambda: net.patch_namespaced_ingress("held", terminating.namespace, ingress("login.bank.example")),
        "spec.rules[0].host",
    )


# -- a tenant namespace admission has no rules for -------------------------------------------------------------


@pytest.fixture
def unknown_namespace(fence: TenancyStack) -> Iterator[tuple[str, str]]:
    """A namespace labelled into a tenant that does not exist (a cluster administrator's slip, or a tenant
    deleted while its namespace terminates): no Rules snapshot names it. A user has ``edit`` there."""
    admin = fence.kube
    core = client.CoreV1Api(admin)
    name, user = unique("ghost"), unique("ursula")
    core.create_namespace({"metadata": {"name": name, "labels": {"enclave.dev/tenant": unique("nobody")}}})
    binding = {
        "metadata": {"name": "edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(name, binding)
    try:
        yield name, user
    finally:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)


def test_write_in_a_tenant_namespace_without_published_rules_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any], unknown_namespace: tuple[str, str]
) -> None:
    name, user = unknown_namespace
    core = client.CoreV1Api(impersonate(user, []))
    body = {"metadata": {"name": "probe"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
    refused(lambda: core.create_namespaced_service(name, body), "NoRulesForTenantNamespace", name)


def test_finalizers_can_still_be_removed_in_a_tenant_namespace_without_rules(
    fence: TenancyStack, impersonate: Callable[..., Any], unknown_namespace: tuple[str, str]
) -> None:
    """Failing closed must not wedge a namespace's deletion: removing a finalizer (and nothing else) passes."""
    name, user = unknown_namespace
    client.CoreV1Api(fence.kube).create_namespaced_config_map(
        name, {"metadata": {"name": "held", "finalizers": [HOLD]}}
    )
    core = client.CoreV1Api(impersonate(user, []))
    refused(
        lambda: core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}, "data": {"k": "v"}}),
        "NoRulesForTenantNamespace",
    )
    core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})


# -- force-finalizing --------------------------------------------------------------------------------------------


def test_force_finalizing_a_namespace_is_refused(fence: TenancyStack, impersonate: Callable[..., Any]) -> None:
    """A tenant user with RBAC for ``namespaces/finalize`` (granted here: Enclave's webhook alone must stop it)
    removes ``kubernetes`` from a terminating namespace's ``spec.finalizers``: the namespace would vanish while
    its objects stay behind, outside every rule and quota."""
    owner = unique("mallory")
    _, namespace = owned_namespace(fence, impersonate, owner)
    admin = fence.kube
    rbac = client.RbacAuthorizationV1Api(admin)
    role = unique("finalize")
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["namespaces/finalize"], "verbs": ["update"]}],
        }
    )
    core = client.CoreV1Api(admin)
    try:
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "User", "name": owner, "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "held", "finalizers": [HOLD]}})
        core.delete_namespace(namespace)
        poll(lambda: core.read_namespace(namespace).status.phase == "Terminating", what=f"{namespace} Terminating")
        live = core.read_namespace(namespace)
        assert live.spec.finalizers == ["kubernetes"]
        live.spec.finalizers = []
        owner_core = client.CoreV1Api(as_user(impersonate, owner))
        refused(lambda: owner_core.replace_namespace_finalize(namespace, live), "spec.finalizers")
        assert core.read_namespace(namespace).spec.finalizers == ["kubernetes"]
    finally:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(role)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(role)

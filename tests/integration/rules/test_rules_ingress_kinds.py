"""Ingress rules on every ingress-like kind a cluster may serve, through kube-apiserver as tenant users.

The Gateway API kinds come from the pinned release's standard-channel CRDs (hack/gatewayapi, installed by the
``gateway_api_crds`` fixture), OpenShift's Route from a faithful CRD fixture (``openshift_route_crd``). The
resources hooks match every namespaced resource (``defaults.py``), so these kinds are judged as soon as the
CRDs serve, with no change to the webhook configuration. Tenant users get write access to the kinds the way
a cluster operator grants it: a ClusterRole bound in their namespace (the built-in ``admin`` role does not
cover CRDs that carry no aggregation label).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import Stack, eventually_refused, refusal

GATEWAY = "gateway.networking.k8s.io"
ROUTE = "route.openshift.io"
APPS = {"exp": r"[a-z0-9-]+\.apps\.example"}


@pytest.fixture(scope="module")
def ingress_kinds(stack: Stack, gateway_api_crds: list[str], openshift_route_crd: list[str]) -> Iterator[Stack]:
    """The stack with the Gateway API and Route kinds served and a ClusterRole to write them."""
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    role: dict[str, Any] = {
        "metadata": {"name": f"{stack.config_name}-ingress-kinds"},
        "rules": [
            {
                "apiGroups": [GATEWAY],
                "resources": ["gateways", "listenersets", "httproutes", "grpcroutes", "tlsroutes"],
                "verbs": ["create", "update", "patch", "get", "list", "delete"],
            },
            {"apiGroups": [ROUTE], "resources": ["routes"], "verbs": ["create", "update", "patch", "get", "delete"]},
        ],
    }
    rbac.create_cluster_role(role)
    try:
        yield stack
    finally:
        rbac.delete_cluster_role(role["metadata"]["name"])


def _grant(stack: Stack, namespace: str, owner: str) -> None:
    binding = {
        "metadata": {"name": "ingress-kinds"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{stack.config_name}-ingress-kinds",
        },
        "subjects": [{"kind": "User", "name": owner, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    client.RbacAuthorizationV1Api(stack.kube).create_namespaced_role_binding(namespace, binding)


def _tenant(stack: Stack, rules: list[dict[str, Any]]) -> tuple[str, str, str, Any]:
    """(tenant, namespace, owner, the owner's CustomObjectsApi) once the rules are compiled."""
    owner = unique("gia")
    tenant = stack.tenant(owner, rules)
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, len(rules))
    _grant(stack, namespace, owner)
    return tenant, namespace, owner, stack.api(client.CustomObjectsApi, owner)


def _listener(name: str, hostname: str | None) -> dict[str, Any]:
    listener: dict[str, Any] = {"name": name, "port": 80, "protocol": "HTTP"}
    if hostname is not None:
        listener["hostname"] = hostname
    return listener


def _gateway(name: str, *hostnames: str | None) -> dict[str, Any]:
    listeners = [_listener(f"l{i}", host) for i, host in enumerate(hostnames)]
    return {
        "apiVersion": f"{GATEWAY}/v1",
        "kind": "Gateway",
        "metadata": {"name": name},
        "spec": {"gatewayClassName": "example", "listeners": listeners},
    }


def _listener_set(name: str, *hostnames: str | None) -> dict[str, Any]:
    listeners = [_listener(f"l{i}", host) for i, host in enumerate(hostnames)]
    return {
        "apiVersion": f"{GATEWAY}/v1",
        "kind": "ListenerSet",
        "metadata": {"name": name},
        "spec": {"parentRef": {"name": "shared"}, "listeners": listeners},
    }


def _route(kind: str, name: str, *hostnames: str) -> dict[str, Any]:
    """An HTTPRoute, GRPCRoute or TLSRoute (TLSRoute's schema requires hostnames and one backend rule)."""
    spec: dict[str, Any] = {"parentRefs": [{"name": "shared"}]}
    if hostnames:
        spec["hostnames"] = list(hostnames)
    if kind == "TLSRoute":
        spec["rules"] = [{"backendRefs": [{"name": "web", "port": 443}]}]
    return {"apiVersion": f"{GATEWAY}/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _openshift_route(name: str, host: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"to": {"kind": "Service", "name": "web"}}
    if host is not None:
        spec["host"] = host
    return {"apiVersion": f"{ROUTE}/v1", "kind": "Route", "metadata": {"name": name}, "spec": spec}


def test_gateway_api_and_route_hostnames_allowed_denied_and_missing(ingress_kinds: Stack) -> None:
    stack = ingress_kinds
    tenant, namespace, _, api = _tenant(stack, [{"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}}])

    def create(plural: str, body: dict[str, Any], group: str = GATEWAY) -> Any:
        return api.create_namespaced_custom_object(group, "v1", namespace, plural, body)

    # Gateway listeners: each hostname judged on its own, the field named.
    denied = eventually_refused(
        lambda: create("gateways", _gateway("gw-bad", "web.apps.example", "web.other.example")),
        f"Tenant {tenant} spec.rules[0]",
        "spec.listeners[1].hostname",
    )
    assert "'web.other.example'" in denied
    create("gateways", _gateway("gw", "web.apps.example", "api.apps.example"))
    assert "spec.listeners[0].hostname has none" in refusal(lambda: create("gateways", _gateway("gw-any", None)))

    # ListenerSet (standard and served at v1 in the pinned release).
    create("listenersets", _listener_set("ls", "shop.apps.example"))
    assert "spec.listeners[0].hostname" in refusal(lambda: create("listenersets", _listener_set("ls-bad", "x.org")))
    assert "has none" in refusal(lambda: create("listenersets", _listener_set("ls-any", None)))

    # Routes' hostnames; HTTPRoute and GRPCRoute may omit them (then they answer every host: refused).
    for kind, plural in (("HTTPRoute", "httproutes"), ("GRPCRoute", "grpcroutes"), ("TLSRoute", "tlsroutes")):
        short = kind.lower()
        create(plural, _route(kind, short, "web.apps.example"))
        bad = _route(kind, f"{short}-bad", "web.apps.example", "evil.example")
        message = refusal(partial(create, plural, bad))
        assert "spec.hostnames[1]" in message
        assert "'evil.example'" in message
        if kind != "TLSRoute":  # TLSRoute's own schema requires hostnames before admission is asked
            hostless = _route(kind, f"{short}-any")
            assert "spec.hostnames has none" in refusal(partial(create, plural, hostless))

    # OpenShift Route spec.host.
    create("routes", _openshift_route("rt", "web.apps.example"), ROUTE)
    assert "spec.host only" in refusal(lambda: create("routes", _openshift_route("rt-bad", "x.org"), ROUTE))
    assert "spec.host has none" in refusal(lambda: create("routes", _openshift_route("rt-any", None), ROUTE))

    # UPDATE: a hostname the object already had is not judged again, a new one is.
    api.patch_namespaced_custom_object(
        GATEWAY, "v1", namespace, "httproutes", "httproute", {"metadata": {"labels": {"a": "b"}}}
    )
    patch = {"spec": {"hostnames": ["web.apps.example", "new.other.example"]}}
    assert "spec.hostnames[1]" in refusal(
        lambda: api.patch_namespaced_custom_object(GATEWAY, "v1", namespace, "httproutes", "httproute", patch)
    )


def test_hostname_deny_and_audit_on_gateway_api_and_route(ingress_kinds: Stack) -> None:
    stack = ingress_kinds
    rules = [
        {"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": r".*\.internal\.example"}]}}},
        {"enforce": {"action": "audit", "ingress": {"types": ["HTTPRoute", "Route"]}}},
    ]
    tenant, namespace, _, api = _tenant(stack, rules)

    def create(plural: str, body: dict[str, Any], group: str = GATEWAY) -> Any:
        return api.create_namespaced_custom_object(group, "v1", namespace, plural, body)

    eventually_refused(
        lambda: create("gateways", _gateway("gw-bad", "db.internal.example")),
        f"Tenant {tenant} spec.rules[0] denies spec.listeners[0].hostname='db.internal.example'",
    )
    # Under deny a hostname field must be filled too.
    assert "spec.hostnames has none" in refusal(lambda: create("grpcroutes", _route("GRPCRoute", "any")))
    create("grpcroutes", _route("GRPCRoute", "grpc", "grpc.public.example"))
    # Audit admits and posts one Event per request naming the rule and what matched.
    create("httproutes", _route("HTTPRoute", "audited", "shop.public.example"))
    poll(
        lambda: stack.events(
            "RuleAudit", f"Tenant {tenant} spec.rules[1] audits spec.hostnames[0]='shop.public.example'"
        )
    )
    # A Route without a host: refused by the deny rule (every field must be filled under allow or deny) ...
    assert "spec.host has none" in refusal(lambda: create("routes", _openshift_route("hostless", None), ROUTE))
    # ... and once only the audit governs Routes, admitted with an Event recording the missing hostname.
    stack.set_rules(
        tenant, [{**rules[0], "enforce": {**rules[0]["enforce"], "ingress": {"types": ["Gateway"]}}}, rules[1]]
    )
    poll(
        lambda: create("routes", _openshift_route(unique("hostless"), None), ROUTE),
        timeout=20,
        what="a hostless Route admitted under audit only",
    )
    poll(
        lambda: stack.events(
            "RuleAudit", f"Tenant {tenant} spec.rules[1] audits a Route without a hostname at spec.host"
        )
    )

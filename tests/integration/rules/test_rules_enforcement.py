"""Issue 22's proof table through kube-apiserver: tenant users (impersonated) against the rules of their tenant.

Each test owns a tenant and its namespace; the rules are written into the Tenant as a user would, compiled by
the tenants controller, and enforced by admission's ``/resources`` hooks.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, VERSION, Stack, eventually_refused, refusal


def _configmap(name: str, labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "data": {"k": "v"}}


def _deny_env(**extra: Any) -> dict[str, Any]:
    return {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
            **extra,
        }
    }


def test_rulestatus_is_compiled_per_namespace_and_follows_labels_and_rule_changes(stack: Stack) -> None:
    owner = unique("ann")
    prod_only = {**_deny_env(), "namespaceSelector": {"matchLabels": {"stage": "prod"}}}
    tenant = stack.tenant(owner, [_deny_env(), prod_only])
    namespace = stack.namespace_of(tenant, owner)
    status = stack.wait_rules(namespace, 1)
    assert status["rules"][0]["origin"] == {"kind": "Tenant", "name": tenant, "index": 0}
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    # A namespace label selecting the second rule, then a rule change: the RuleStatus follows both.
    client.CoreV1Api(stack.kube).patch_namespace(namespace, {"metadata": {"labels": {"stage": "prod"}}})
    stack.wait_rules(namespace, 2)
    stack.set_rules(tenant, [_deny_env()])
    stack.wait_rules(namespace, 1)


def test_metadata_deny_allow_audit_update_and_forged_labels(stack: Stack) -> None:
    owner = unique("bea")
    audit = {
        "enforce": {"action": "audit", "metadata": [{"kinds": ["ConfigMap"], "labels": {"cost": {}}}]},
    }
    tenant = stack.tenant(owner, [_deny_env(), audit])
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 2)
    core = stack.core(owner)
    denied = eventually_refused(
        lambda: core.create_namespaced_config_map(namespace, _configmap("c1", {"env": "prod"})),
        f"Tenant {tenant} spec.rules[0]",
        "metadata.labels['env']='prod'",
    )
    assert "denies" in denied
    core.create_namespaced_config_map(namespace, _configmap("c2", {"env": "dev"}))
    core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "gen-"}})  # no request.name
    # Forged Enclave labels skip nothing.
    forged = {"env": "prod", "enclave.dev/tenant": tenant, "enclave.dev/managed-by": "enclave-replication"}
    refusal(lambda: core.create_namespaced_config_map(namespace, _configmap("c3", forged)))
    # Audit admits and posts one Event naming the tenant, namespace and rule.
    core.create_namespaced_config_map(namespace, _configmap("c4", {"cost": "a1"}))
    poll(lambda: stack.events("RuleAudit", f"Tenant {tenant} spec.rules[1] audits metadata.labels['cost']='a1'"))
    (event,) = stack.events("RuleAudit", f"in {namespace} (tenant {tenant})")
    assert event.involved_object.name == "c4"
    # UPDATE: an object that predates the rule (created while a label was allowed) is not locked out.
    core.create_namespaced_config_map(namespace, _configmap("c5", {"team": "x"}))
    stack.set_rules(
        tenant,
        [
            _deny_env(),
            {
                **_deny_env(),
                "enforce": {**_deny_env()["enforce"], "metadata": [{"kinds": ["ConfigMap"], "labels": {"team": {}}}]},
            },
        ],
    )
    stack.wait_rules(namespace, 2)
    eventually_refused(
        lambda: core.create_namespaced_config_map(namespace, _configmap(unique("c"), {"team": "y"})),
        "spec.rules[1]",
    )
    core.patch_namespaced_config_map("c5", namespace, {"data": {"k": "changed"}})
    refusal(lambda: core.patch_namespaced_config_map("c5", namespace, {"metadata": {"labels": {"team": "z"}}}))


def test_conditions_and_audience(stack: Stack) -> None:
    owner, other = unique("cid"), unique("dov")
    condition_skips = _deny_env(conditions=[{"name": "weekend", "expression": "object.data.k == 'weekend'"}])
    tenant = stack.tenant(owner, [condition_skips])
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 1)
    core = stack.core(owner)
    eventually_refused(
        lambda: core.create_namespaced_config_map(
            namespace, {"metadata": {"name": unique("c"), "labels": {"env": "prod"}}, "data": {"k": "weekend"}}
        ),
        "spec.rules[0]",
    )
    core.create_namespaced_config_map(namespace, _configmap("skipped", {"env": "prod"}))  # condition false: skip
    erroring = _deny_env(conditions=[{"name": "broken", "expression": "object.data.missing == 'x'"}])
    stack.set_rules(tenant, [erroring])
    message = eventually_refused(
        lambda: core.create_namespaced_config_map(namespace, _configmap(unique("c"))), "could not be evaluated"
    )
    assert "broken" in message
    # Audience: only the other user; the owner is outside it.
    stack.set_rules(tenant, [{**_deny_env(), "audience": [{"kind": "User", "name": other}]}])
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "other-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": other}],
        },
    )
    other_core = stack.core(other)
    eventually_refused(
        lambda: other_core.create_namespaced_config_map(namespace, _configmap(unique("c"), {"env": "prod"})),
        "spec.rules[0]",
    )
    core.create_namespaced_config_map(namespace, _configmap("outside-audience", {"env": "prod"}))


def test_managed_and_default_metadata_through_the_mutating_hook(stack: Stack) -> None:
    owner = unique("eli")
    labels = {"cost-center": {"managed": "cc-42"}, "owner": {"default": "platform"}}
    rule = {"enforce": {"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": labels}]}}
    tenant = stack.tenant(owner, [rule])
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 1)
    core = stack.core(owner)

    def created_labels() -> dict[str, str] | None:
        name = unique("m")
        created = core.create_namespaced_config_map(namespace, _configmap(name))
        found = dict(created.metadata.labels or {})
        return found if "cost-center" in found else None

    assert poll(created_labels) == {"cost-center": "cc-42", "owner": "platform"}
    # A user's own value of a default wins; a managed value is set back on every write.
    kept = core.create_namespaced_config_map(namespace, _configmap("mine", {"owner": "me", "cost-center": "x"}))
    assert kept.metadata.labels == {"owner": "me", "cost-center": "cc-42"}
    patched = core.patch_namespaced_config_map("mine", namespace, {"metadata": {"labels": {"cost-center": "y"}}})
    assert patched.metadata.labels["cost-center"] == "cc-42"
    # A rule change: the tenants controller reconciles the new managed value onto the objects already there.
    labels = {**labels, "tier": {"managed": "gold"}}
    stack.set_rules(
        tenant, [{"enforce": {"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": labels}]}}]
    )
    admin = client.CoreV1Api(stack.kube)
    poll(lambda: (admin.read_namespaced_config_map("mine", namespace).metadata.labels or {}).get("tier") == "gold")


def test_services_network_and_ingress(stack: Stack) -> None:
    owner = unique("fay")
    rules = [
        {"enforce": {"action": "deny", "services": {"externalIPs": {"cidrs": []}, "types": ["LoadBalancer"]}}},
        {"enforce": {"action": "allow", "services": {"externalIPs": {"cidrs": ["10.20.0.0/16"]}}}},
        {"enforce": {"action": "allow", "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/8", "fd00::/8"]}}}}},
        {"enforce": {"action": "allow", "ingress": {"hostnames": [{"exp": r"[a-z0-9-]+\.apps\.example"}]}}},
    ]
    tenant = stack.tenant(owner, rules)
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 4)
    core = stack.core(owner)

    def service(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}], **spec}}

    eventually_refused(
        lambda: core.create_namespaced_service(namespace, service(unique("s"), externalIPs=["192.0.2.1"])),
        "spec.externalIPs[0]",
    )
    core.create_namespaced_service(namespace, service("inside", externalIPs=["10.20.1.1"]))
    refusal(lambda: core.create_namespaced_service(namespace, service("lb", type="LoadBalancer")))

    net = stack.api(client.NetworkingV1Api, owner)

    def policy(name: str, egress: list[dict[str, Any]]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}}

    net.create_namespaced_network_policy(namespace, policy("inside", [{"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]}]))
    message = refusal(lambda: net.create_namespaced_network_policy(namespace, policy("all", [{}])))
    assert "spec.egress[0]" in message
    assert "every address" in message
    v6 = [{"to": [{"ipBlock": {"cidr": "2001:db8::/32"}}]}]
    refusal(lambda: net.create_namespaced_network_policy(namespace, policy("v6", v6)))
    net.create_namespaced_network_policy(namespace, policy("pods", [{"to": [{"podSelector": {}}]}]))

    def ingress(name: str, host: str | None) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "http": {
                "paths": [
                    {
                        "path": "/",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": "inside", "port": {"number": 80}}},
                    }
                ]
            }
        }
        if host is not None:
            rule["host"] = host
        return {"metadata": {"name": name}, "spec": {"rules": [rule]}}

    net.create_namespaced_ingress(namespace, ingress("good", "web.apps.example"))
    assert "spec.rules[0].host" in refusal(lambda: net.create_namespaced_ingress(namespace, ingress("bad", "x.org")))
    assert "has none" in refusal(lambda: net.create_namespaced_ingress(namespace, ingress("hostless", None)))


def test_storage_fence_and_volume_labels(stack: Stack) -> None:
    owner = unique("gus")
    shared = {
        "enforce": {"action": "allow", "storage": {"volumes": [{"selector": {"matchLabels": {"pool": "shared"}}}]}}
    }
    tenant = stack.tenant(owner, [shared])
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 1)
    admin = client.CoreV1Api(stack.kube)

    def volume(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}},
        }

    theirs, pooled = unique("pv"), unique("pv")
    admin.create_persistent_volume(volume(theirs, {"enclave.dev/tenant": "someone-else"}))
    admin.create_persistent_volume(volume(pooled, {"pool": "shared"}))
    core = stack.core(owner)

    def claim(name: str, volume_name: str) -> dict[str, Any]:
        spec = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": volume_name,
        }
        return {"metadata": {"name": name}, "spec": {**spec, "storageClassName": ""}}

    eventually_refused(
        lambda: core.create_namespaced_persistent_volume_claim(namespace, claim(unique("c"), theirs)),
        "belongs to another tenant",
    )

    def pooled_claim() -> bool:
        try:
            core.create_namespaced_persistent_volume_claim(namespace, claim("pooled", pooled))
        except ApiException as err:
            if err.status == 409:
                return True
            raise
        return True

    poll(pooled_claim, what="claim of a shared volume")  # the snapshot may not show the new volume yet
    # The tenant ownership label of volumes is not for tenant users, whatever their RBAC.
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    role = unique("pv-writer")
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["create", "patch", "get"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
        }
    )
    try:
        message = poll(
            lambda: _refused_text(
                lambda: core.patch_persistent_volume(pooled, {"metadata": {"labels": {"enclave.dev/tenant": tenant}}})
            )
        )
        assert "tenant ownership label" in message
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
        admin.delete_persistent_volume(theirs)


def _refused_text(call: Any) -> str | None:
    try:
        return refusal(call)
    except (AssertionError, ApiException, pytest.fail.Exception):
        return None


def test_pods_of_controllers_are_judged_and_other_namespaces_untouched(stack: Stack, namespace: str) -> None:
    owner = unique("hal")
    required = {
        "enforce": {"action": "allow", "metadata": [{"kinds": ["Pod"], "labels": {"team": {"required": True}}}]}
    }
    tenant = stack.tenant(owner, [required])
    tenant_ns = stack.namespace_of(tenant, owner)
    stack.wait_rules(tenant_ns, 1)
    apps = stack.api(client.AppsV1Api, owner)
    pod_template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    replica_set = {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template},
    }
    # The ReplicaSet itself is fine (the rule is about Pods); its controller's Pod is refused.
    apps.create_namespaced_replica_set(tenant_ns, replica_set)

    def failed_create() -> bool:
        for rs in client.AppsV1Api(stack.kube).list_namespaced_replica_set(tenant_ns).items:
            for condition in (rs.status.conditions or []) if rs.status else []:
                if condition.type == "ReplicaFailure" and "requires metadata.labels['team']" in (
                    condition.message or ""
                ):
                    return True
        return False

    poll(failed_create, timeout=60, what="the ReplicaSet's Pod refused by the rule")
    assert not client.CoreV1Api(stack.kube).list_namespaced_pod(tenant_ns).items
    # A namespace outside every tenant is never judged (the hooks do not even see it).
    client.CoreV1Api(stack.kube).create_namespaced_config_map(namespace, _configmap("free", {"env": "prod"}))


def test_rules_that_cannot_work_are_refused_at_the_api(stack: Stack) -> None:
    owner = unique("ivy")
    tenant = stack.tenant(owner)
    bad = [
        {
            "enforce": {
                "conditions": [{"expression": "object.metadata.name =="}],
                "network": {"policies": {"ingress": {"cidrs": ["10.0.0.0/8"]}}},
                "ingress": {"hostnames": [{"exp": "[a-z]+"}]},
            }
        }
    ]

    # An operator with RBAC on Tenants: refused by the tenants hook, every broken field named.
    operator = unique("ops")
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    rbac.create_cluster_role(
        {"metadata": {"name": operator}, "rules": [{"apiGroups": [GROUP], "resources": ["tenants"], "verbs": ["*"]}]}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": operator},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": operator},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": operator}],
        }
    )
    custom = client.CustomObjectsApi(stack.impersonate(operator, []))

    def patch() -> None:
        custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, {"spec": {"rules": bad}})

    try:
        message = poll(lambda: _refused_text(patch), what="the operator's RBAC and the refusal")
        assert "spec.rules[0].enforce.conditions[0].expression" in message
    finally:
        rbac.delete_cluster_role_binding(operator)
        rbac.delete_cluster_role(operator)


def test_rules_that_cannot_work_are_refused_for_system_masters_too(stack: Stack) -> None:
    """The tenants hook skips system:masters (break-glass) with the control plane; rule validity does not:
    CEL and regular expressions through ``rules.enclave.dev``, CIDRs through the CRD's own validation rule."""
    tenant = stack.tenant(unique("jon"))
    admin = client.CustomObjectsApi(stack.kube)  # the control plane's admin: a member of system:masters

    def write(rules: list[dict[str, Any]]) -> None:
        admin.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, {"spec": {"rules": rules}})

    broken: list[dict[str, Any]] = [
        {"enforce": {"conditions": [{"expression": "object.metadata.name =="}]}},
        {"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": "(unclosed"}]}}},
    ]
    message = poll(lambda: _refused_text(lambda: write(broken)), what="rules.enclave.dev refusing an admin")
    assert "rules.enclave.dev" in message
    assert "spec.rules[0].enforce.conditions[0].expression" in message
    assert "spec.rules[1].enforce.ingress.hostnames[0].exp" in message
    with pytest.raises(ApiException) as caught:
        write([{"enforce": {"network": {"policies": {"egress": {"cidrs": ["10.0.0.0/33"]}}}}}])
    assert caught.value.status == 422, caught.value.body
    assert "spec.rules[0].enforce.network.policies.egress.cidrs" in str(caught.value.body), caught.value.body
    # What works is stored, by the same identity.
    write([{"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": "[a-z]+\\.example"}]}}}])

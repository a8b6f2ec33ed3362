"""enclave-globalquotas against the real control plane (kube-controller-manager's resourcequota controller runs).

Each test selects namespaces by a label of its own; kube-apiserver's ResourceQuota admission does the
enforcing, so a refusal here is kube-apiserver's own, naming the provisioned ResourceQuota.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from enclave_globalquotas.naming import rule_status_quota_name
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.waiting import poll

from .conftest import GROUP, PLURAL, VERSION, Shared


def service(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}


def pod(name: str, cpu: str | None = None, priority: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if priority:
        spec["priorityClassName"] = priority
    return {"metadata": {"name": name}, "spec": spec}


def wait_default_account(core: client.CoreV1Api, namespace: str) -> None:
    poll(lambda: core.read_namespaced_service_account("default", namespace), what=f"{namespace}/default")


def test_hard_is_usage_plus_shared_headroom(shared: Shared) -> None:
    a, b, c = shared.namespace("a"), shared.namespace("b"), shared.namespace("c")
    shared.namespace("other", selected=False)
    name = f"svc-{shared.token}"
    shared.quota(name, {"services": 5})
    shared.wait_hard(name, {ns: {"services": "5"} for ns in (a, b, c)})
    shared.wait_ready(name)

    for index in range(2):
        shared.core.create_namespaced_service(a, service(f"s{index}"))
    shared.wait_hard(name, {a: {"services": "5"}, b: {"services": "3"}, c: {"services": "3"}})
    status = poll(lambda: (s := shared.get(name)["status"])["total"]["used"] == {"services": "2"} and s, what="total")
    assert status["total"] == {"hard": {"services": "5"}, "used": {"services": "2"}, "available": {"services": "3"}}
    assert status["namespaces"] == sorted([a, b, c])
    assert status["namespaceCount"] == 3
    assert status["namespaceUsage"][a] == {"used": {"services": "2"}}

    for index in range(3):
        shared.core.create_namespaced_service(b, service(f"s{index}"))
    shared.wait_hard(name, {a: {"services": "2"}, b: {"services": "3"}, c: {"services": "0"}})
    with pytest.raises(ApiException) as refused:
        shared.core.create_namespaced_service(c, service("one-too-many"))
    assert refused.value.status == 403
    assert f"exceeded quota: globalquota-{name}" in refused.value.body

    ledger = client.CustomObjectsApi(shared.kube).get_namespaced_custom_object(
        GROUP, VERSION, shared.home, "quantityledgers", f"globalresourcequota.{name}"
    )
    block = poll(
        lambda: (
            (
                rq := (
                    client.CustomObjectsApi(shared.kube)
                    .get_namespaced_custom_object(
                        GROUP, VERSION, shared.home, "quantityledgers", f"globalresourcequota.{name}"
                    )
                    .get("status")
                    or {}
                ).get("resourceQuota")
                or {}
            ).get("used")
            == {"services": "5"}
            and rq
        ),
        what="ledger used",
    )
    assert ledger["spec"]["targetRef"]["kind"] == "GlobalResourceQuota"
    assert block["initialized"] is True
    assert block["allocated"] == {"services": "5"}


def test_pod_over_shared_cpu_is_refused_by_kube_apiserver(shared: Shared) -> None:
    a, b = shared.namespace("a"), shared.namespace("b")
    name = f"cpu-{shared.token}"
    shared.quota(name, {"requests.cpu": "1", "limits.cpu": "1"})
    shared.wait_hard(name, {ns: {"requests.cpu": "1", "limits.cpu": "1"} for ns in (a, b)})
    for namespace in (a, b):
        wait_default_account(shared.core, namespace)
    shared.core.create_namespaced_pod(a, pod("first", "600m"))
    shared.wait_hard(
        name, {a: {"requests.cpu": "1", "limits.cpu": "1"}, b: {"requests.cpu": "400m", "limits.cpu": "400m"}}
    )
    with pytest.raises(ApiException) as refused:
        shared.core.create_namespaced_pod(b, pod("second", "600m"))
    assert refused.value.status == 403
    assert f"exceeded quota: globalquota-{name}" in refused.value.body
    assert "requests.cpu" in refused.value.body
    shared.core.create_namespaced_pod(b, pod("fits", "400m"))


def test_scopes_and_scope_selector_are_honoured(shared: Shared) -> None:
    a, b = shared.namespace("a"), shared.namespace("b")
    best, high = f"besteffort-{shared.token}", f"high-{shared.token}"
    scheduling = client.SchedulingV1Api(shared.kube)
    scheduling.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        shared.quota(best, {"pods": 1}, scopes=["BestEffort"])
        shared.quota(
            f"prio-{shared.token}",
            {"pods": 1},
            scopeSelector={"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [high]}]},
        )
        shared.wait_hard(best, {a: {"pods": "1"}, b: {"pods": "1"}})
        shared.wait_hard(f"prio-{shared.token}", {a: {"pods": "1"}, b: {"pods": "1"}})
        assert shared.rq(a, best).spec.scopes == ["BestEffort"]
        for namespace in (a, b):
            wait_default_account(shared.core, namespace)
        shared.core.create_namespaced_pod(a, pod("besteffort"))
        shared.wait_hard(best, {a: {"pods": "1"}, b: {"pods": "0"}})
        with pytest.raises(ApiException) as refused:
            shared.core.create_namespaced_pod(b, pod("besteffort-too"))
        assert f"globalquota-{best}" in refused.value.body
        shared.core.create_namespaced_pod(b, pod("burstable", "100m"))  # NotBestEffort: outside that quota

        shared.core.create_namespaced_pod(a, pod("important", "100m", priority=high))
        shared.wait_hard(f"prio-{shared.token}", {a: {"pods": "1"}, b: {"pods": "0"}})
        with pytest.raises(ApiException) as refused:
            shared.core.create_namespaced_pod(b, pod("important-too", "100m", priority=high))
        assert f"globalquota-prio-{shared.token}" in refused.value.body
    finally:
        scheduling.delete_priority_class(high)


def test_namespace_joining_and_leaving(shared: Shared) -> None:
    a = shared.namespace("a")
    late = shared.namespace("late", selected=False)
    name = f"join-{shared.token}"
    shared.quota(name, {"configmaps": 10})
    # Every namespace holds kube-root-ca.crt: usage 1 each.
    shared.wait_hard(name, {a: {"configmaps": "10"}})
    shared.core.patch_namespace(late, {"metadata": {"labels": {"gq-test": shared.token}}})
    shared.wait_hard(name, {a: {"configmaps": "9"}, late: {"configmaps": "9"}})
    assert shared.wait_ready(name)["status"]["namespaces"] == sorted([a, late])

    shared.core.patch_namespace(late, {"metadata": {"labels": {"gq-test": None}}})
    shared.wait_gone(lambda: shared.rq(late, name), f"{late}'s ResourceQuota")
    shared.wait_hard(name, {a: {"configmaps": "10"}})
    poll(lambda: shared.get(name)["status"]["namespaceCount"] == 1, what="namespaceCount 1")
    assert late not in shared.get(name)["status"]["namespaceUsage"]


def test_hand_edits_are_put_back_and_deletion_cleans_up(shared: Shared) -> None:
    a, b = shared.namespace("a"), shared.namespace("b")
    name = f"edit-{shared.token}"
    shared.quota(name, {"secrets": 4})
    shared.wait_hard(name, {a: {"secrets": "4"}, b: {"secrets": "4"}})
    shared.core.patch_namespaced_resource_quota(
        f"globalquota-{name}", a, {"spec": {"hard": {"secrets": "100", "pods": "3"}}}
    )
    shared.wait_hard(name, {a: {"secrets": "4"}})
    shared.core.delete_namespaced_resource_quota(f"globalquota-{name}", b)
    shared.wait_hard(name, {b: {"secrets": "4"}})

    shared.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    for namespace in (a, b):
        shared.wait_gone(partial(shared.rq, namespace, name), f"{namespace}'s ResourceQuota")
    shared.wait_gone(
        lambda: shared.custom.get_namespaced_custom_object(
            GROUP, VERSION, shared.home, "quantityledgers", f"globalresourcequota.{name}"
        ),
        "the ledger",
    )


def test_tenant_rule_quota_becomes_a_global_quota(shared: Shared) -> None:
    tenant = f"rq-{shared.token}"
    label = {"enclave.dev/tenant": tenant}
    dev = shared.namespace("dev", selected=False, labels={**label, "stage": "dev"})
    prod = shared.namespace("prod", selected=False, labels={**label, "stage": "prod"})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {
            "owners": [{"kind": "User", "name": "alice"}],
            "rules": [
                {
                    "audience": [{"kind": "User", "name": "bob"}],
                    "namespaceSelector": {"matchLabels": {"stage": "dev"}},
                    "quota": [{"name": "objects", "hard": {"configmaps": 5}}],
                }
            ],
        },
    }
    tenants = "tenants"
    shared.custom.create_cluster_custom_object(GROUP, VERSION, tenants, body)
    generated = f"{tenant}-rule0-objects"
    try:
        shared.wait_hard(generated, {dev: {"configmaps": "5"}})
        quota = shared.wait_ready(generated)
        assert quota["status"]["namespaces"] == [dev]
        owner = quota["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Tenant", tenant)
        with pytest.raises(ApiException):
            shared.rq(prod, generated)

        # Hand-editing the generated quota is undone; dropping the entry deletes it.
        shared.custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, generated, {"spec": {"quota": {"hard": {"configmaps": 50}}}}
        )
        shared.wait_hard(generated, {dev: {"configmaps": "5"}})
        rule = {k: v for k, v in body["spec"]["rules"][0].items() if k != "quota"}  # type: ignore[index]
        shared.custom.patch_cluster_custom_object(GROUP, VERSION, tenants, tenant, {"spec": {"rules": [rule]}})
        shared.wait_gone(lambda: shared.get(generated), "the generated quota")
        shared.wait_gone(lambda: shared.rq(dev, generated), "its ResourceQuota")
    finally:
        shared.custom.delete_cluster_custom_object(GROUP, VERSION, tenants, tenant)


def test_invalid_spec_is_reported_not_applied(shared: Shared) -> None:
    a = shared.namespace("a")
    name = f"bad-{shared.token}"
    shared.quota(name, {"services": 1, "gpus": 2})

    def reported() -> dict[str, Any] | None:
        status = shared.get(name).get("status") or {}
        ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
        return ready[0] if ready and ready[0]["reason"] == "InvalidSpec" else None

    condition = poll(reported, what="InvalidSpec")
    assert "spec.quota.hard[gpus]" in condition["message"]
    with pytest.raises(ApiException):
        shared.rq(a, name)


def test_rule_status_quota_becomes_a_global_quota_for_its_namespace(shared: Shared) -> None:
    """Issue 30: ``RuleStatus.spec[].quota`` (a namespace's own rules) provisions a quota as a tenant rule's
    does, for that namespace alone; it used to be copied into status and enforced nowhere."""
    tenant = f"rsq-{shared.token}"
    label = {"enclave.dev/tenant": tenant}
    dev = shared.namespace("rsdev", selected=False, labels=label)
    other = shared.namespace("rsother", selected=False, labels=label)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"owners": [{"kind": "User", "name": "alice"}]},
    }
    shared.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    rule = {"quota": [{"name": "objects", "hard": {"configmaps": 3}}]}
    status = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RuleStatus", "metadata": {"name": "default"}}
    shared.custom.create_namespaced_custom_object(GROUP, VERSION, dev, "rulestatuses", {**status, "spec": [rule]})
    generated = rule_status_quota_name(dev, 0, "objects")
    try:
        shared.wait_hard(generated, {dev: {"configmaps": "3"}})
        quota = shared.wait_ready(generated)
        assert quota["status"]["namespaces"] == [dev]
        owner = quota["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Tenant", tenant)
        with pytest.raises(ApiException):
            shared.rq(other, generated)
        # kube-apiserver enforces it: kube-root-ca.crt is one, two more fit, the fourth is refused
        core = shared.core
        poll(lambda: core.read_namespaced_config_map("kube-root-ca.crt", dev), what="kube-root-ca.crt")
        for index in range(2):
            core.create_namespaced_config_map(dev, {"metadata": {"name": f"cm{index}"}})
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_config_map(dev, {"metadata": {"name": "cm-over"}})
        assert refused.value.status == 403, refused.value.body

        # Dropping the entry from the RuleStatus deletes the quota and its ResourceQuota.
        shared.custom.patch_namespaced_custom_object(GROUP, VERSION, dev, "rulestatuses", "default", {"spec": []})
        shared.wait_gone(lambda: shared.get(generated), "the generated quota")
        shared.wait_gone(lambda: shared.rq(dev, generated), "its ResourceQuota")
    finally:
        shared.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def test_tenant_rule_quota_scopes_and_scope_selector_reach_the_namespace_quota(shared: Shared) -> None:
    """A rule quota's ``scopes`` and ``scopeSelector`` are carried into the GlobalResourceQuota it becomes and
    into the ResourceQuota of the tenant's namespace (where kube-apiserver applies them, as
    test_scopes_and_scope_selector_are_honoured proves): dropping them would count every pod."""
    tenant = f"rqs-{shared.token}"
    dev = shared.namespace("sdev", selected=False, labels={"enclave.dev/tenant": tenant})
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}]}
    quota = {"name": "pods", "hard": {"pods": 2}, "scopes": ["NotTerminating"], "scopeSelector": selector}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"owners": [{"kind": "User", "name": "alice"}], "rules": [{"quota": [quota]}]},
    }
    shared.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    generated = f"{tenant}-rule0-pods"
    try:
        shared.wait_hard(generated, {dev: {"pods": "2"}})
        spec = shared.get(generated)["spec"]["quota"]
        assert spec["scopes"] == ["NotTerminating"]
        assert spec["scopeSelector"] == selector
        native = shared.rq(dev, generated).spec
        assert native.scopes == ["NotTerminating"]
        expression = native.scope_selector.match_expressions[0]
        assert (expression.scope_name, expression.operator, expression.values) == ("PriorityClass", "In", ["low"])
    finally:
        shared.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)

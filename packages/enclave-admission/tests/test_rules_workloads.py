"""Workload rules and workload mutations on hand-built Rules snapshots."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ALICE, apply_patch, request
from test_rules import NS, rule, state_with

from enclave_admission.rules.mutation import mutate
from enclave_admission.rules.validation import validate
from enclave_admission.rules.workloads import normalize_image, qos_class

JSON = dict[str, Any]
POD: JSON = {"resource": "pods", "kind": "Pod"}
DEPLOY: JSON = {"resource": "deployments", "kind": "Deployment", "group": "apps"}


def pod(*containers: JSON, **spec: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": list(containers), **spec},
    }


def deployment(*containers: JSON) -> JSON:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": list(containers)}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template},
    }


def c(image: str = "registry.example/app:1", name: str = "c", **fields: Any) -> JSON:
    return {"name": name, "image": image, **fields}


def allowed(state: Any, obj: JSON, old: JSON | None = None, **kw: Any) -> bool:
    kw.setdefault("namespace", NS)
    return validate(request(ALICE, "UPDATE" if old else "CREATE", obj, old, **kw), state).allowed


@pytest.mark.parametrize(
    ("image", "normal"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("bitnami/redis", "docker.io/bitnami/redis:latest"),
        ("registry.example:5000/team/app", "registry.example:5000/team/app:latest"),
        ("localhost/app@sha256:abc", "localhost/app@sha256:abc"),
        ("ghcr.io/o/r:v1@sha256:abc", "ghcr.io/o/r:v1@sha256:abc"),
    ],
)
def test_image_normalisation(image: str, normal: str) -> None:
    assert normalize_image(image) == normal


def test_qos_classes() -> None:
    assert qos_class({"containers": [c()]}) == "BestEffort"
    limits = {"cpu": "1", "memory": "1Gi"}
    assert qos_class({"containers": [c(resources={"limits": limits})]}) == "Guaranteed"
    assert qos_class({"containers": [c(resources={"requests": {"cpu": "1"}})]}) == "Burstable"


def test_registries_in_every_container_list_and_controllers_opt_in() -> None:
    registries = {"registries": [{"url": r"^registry\.example/", "pullPolicies": ["Always", "IfNotPresent"]}]}
    state = state_with(rule(enforce={"action": "allow", "workloads": registries}))
    assert allowed(state, pod(c()), **POD)
    init_bad = pod(c(), initContainers=[c("docker.io/evil", "init")])
    assert not allowed(state, init_bad, **POD)
    assert not allowed(state, pod(c("nginx")), **POD)
    assert not allowed(state, pod(c(imagePullPolicy="Never")), **POD)
    assert allowed(state, deployment(c("nginx")), **DEPLOY)  # controllers are opt-in
    targeted = {**registries, "targets": ["Pod", "Deployment"]}
    state = state_with(rule(enforce={"action": "allow", "workloads": targeted}))
    message = validate(
        request(ALICE, "CREATE", deployment(c(), c("nginx", "two")), namespace=NS, **DEPLOY), state
    ).message
    assert "spec.template.spec.containers[1].image" in message
    old = deployment(c("nginx"))
    assert allowed(state, {**old, "metadata": {**old["metadata"], "labels": {"x": "y"}}}, old, **DEPLOY)


def test_ephemeral_containers_are_judged() -> None:
    state = state_with(rule(enforce={"action": "deny", "workloads": {"security": {"privileged": True}}}))
    before = pod(c())
    debug = {
        **before,
        "spec": {**before["spec"], "ephemeralContainers": [c(name="dbg", securityContext={"privileged": True})]},
    }
    assert not allowed(state, debug, before, sub_resource="ephemeralcontainers", **POD)


def test_security_features() -> None:
    deny = {"privileged": True, "hostNamespaces": True, "capabilities": ["NET_ADMIN"], "hostPaths": [{"exp": "/etc.*"}]}
    state = state_with(rule(enforce={"action": "deny", "workloads": {"security": deny}}))
    assert not allowed(state, pod(c(securityContext={"privileged": True})), **POD)
    assert not allowed(state, pod(c(), hostNetwork=True), **POD)
    assert not allowed(state, pod(c(securityContext={"capabilities": {"add": ["NET_ADMIN"]}})), **POD)
    assert allowed(state, pod(c(securityContext={"capabilities": {"add": ["CHOWN"]}})), **POD)
    assert not allowed(state, pod(c(), volumes=[{"name": "v", "hostPath": {"path": "/etc/shadow"}}]), **POD)
    no_ports = state_with(rule(enforce={"action": "allow", "workloads": {"security": {"hostPorts": False}}}))
    assert not allowed(no_ports, pod(c(ports=[{"containerPort": 80, "hostPort": 80}])), **POD)


def test_qos_and_resources() -> None:
    guaranteed = state_with(rule(enforce={"action": "allow", "workloads": {"qosClasses": ["Guaranteed"]}}))
    assert not allowed(guaranteed, pod(c()), **POD)
    limits = {"cpu": "500m", "memory": "256Mi"}
    assert allowed(guaranteed, pod(c(resources={"limits": limits, "requests": limits})), **POD)
    bounds = {"limits": {"required": ["memory"], "max": {"memory": "1Gi"}}, "requests": {"min": {"cpu": "100m"}}}
    state = state_with(rule(enforce={"action": "allow", "workloads": {"resources": bounds}}))
    assert allowed(state, pod(c(resources={"limits": {"memory": "512Mi"}, "requests": {"cpu": "200m"}})), **POD)
    assert not allowed(state, pod(c(resources={"limits": {"memory": "2Gi"}})), **POD)
    assert not allowed(state, pod(c(resources={"requests": {"cpu": "200m"}})), **POD)
    assert not allowed(state, pod(c(resources={"limits": {"memory": "1Gi"}, "requests": {"cpu": "10m"}})), **POD)


def test_placement() -> None:
    placement = {
        "priorityClasses": [{"exact": ["low"]}],
        "tolerations": [{"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}],
        "nodeSelectorKeys": ["pool"],
    }
    state = state_with(
        rule(
            enforce={
                "action": "allow",
                "workloads": {"placement": placement, "schedulers": [{"exact": ["default-scheduler"]}]},
            }
        )
    )
    ok = {"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}
    assert allowed(state, pod(c(), tolerations=[ok], nodeSelector={"pool": "a"}, priorityClassName="low"), **POD)
    assert not allowed(state, pod(c(), tolerations=[{"key": "gpu", "operator": "Exists"}]), **POD)
    assert not allowed(state, pod(c(), nodeSelector={"zone": "b"}), **POD)
    assert not allowed(state, pod(c(), priorityClassName="high"), **POD)
    assert not allowed(state, pod(c(), schedulerName="mine"), **POD)


def test_kinds_themselves_and_disruption_budgets() -> None:
    no_cron = state_with(rule(enforce={"action": "deny", "workloads": {"targets": ["CronJob"]}}))
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "j"}, "spec": {}}
    assert not allowed(no_cron, cron, resource="cronjobs", kind="CronJob", group="batch")
    budgets = state_with(rule(enforce={"action": "allow", "workloads": {"disruptionBudgets": {"maxUnavailable": 1}}}))
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}}
    pdbs: JSON = {"resource": "poddisruptionbudgets", "kind": "PodDisruptionBudget", "group": "policy"}
    assert allowed(budgets, {**pdb, "spec": {"maxUnavailable": 1}}, **pdbs)
    assert not allowed(budgets, {**pdb, "spec": {"maxUnavailable": 3}}, **pdbs)


def test_workload_mutations_then_enforcement() -> None:
    mutations = [
        {"workloads": {"nodeSelector": {"pool": "solar"}, "priorityClassName": "low"}},
        {
            "workloads": {
                "imagePullPolicy": "Always",
                "defaultRequests": {"cpu": "100m"},
                "defaultLimits": {"memory": "128Mi"},
            }
        },
    ]
    enforce = {"action": "allow", "workloads": {"placement": {"nodeSelectorKeys": ["pool"]}}}
    state = state_with(rule(mutate=mutations, enforce=enforce))
    created = pod(c())
    patched = apply_patch(created, mutate(request(ALICE, "CREATE", created, namespace=NS, **POD), state))
    spec = patched["spec"]
    assert spec["nodeSelector"] == {"pool": "solar"}
    assert spec["priorityClassName"] == "low"
    assert spec["containers"][0]["imagePullPolicy"] == "Always"
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "100m"}, "limits": {"memory": "128Mi"}}
    assert allowed(state, patched, **POD)
    assert mutate(request(ALICE, "CREATE", patched, namespace=NS, **POD), state).patch == ()  # idempotent


def test_a_pod_spec_of_the_wrong_shape_is_refused_naming_the_field() -> None:
    state = state_with(rule(enforce={"action": "allow", "workloads": {"registries": [{"url": "^r/"}]}}))
    malformed = pod(c())
    malformed["spec"]["containers"] = "not-a-list"
    decision = validate(request(ALICE, "CREATE", malformed, namespace=NS, **POD), state)
    assert not decision.allowed
    assert "spec.containers must be a list" in decision.message


def test_default_tolerations_are_not_the_tenants_choice() -> None:
    added = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    placement = {"placement": {"tolerations": [{"key": "x", "operator": "Exists"}]}}
    state = state_with(rule(enforce={"action": "allow", "workloads": placement}))
    assert allowed(state, pod(c(), tolerations=[added]), **POD)

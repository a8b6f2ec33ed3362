"""Workload rules and workload mutations on hand-built Rules snapshots."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ALICE, apply_patch, request
from test_rules import NS, rule, state_with

from enclave_admission.review import response
from enclave_admission.rules.mutation import mutate
from enclave_admission.rules.validation import validate
from enclave_admission.rules.workloads import default_pull_policy, normalize_image, qos_class
from enclave_core.snapshots.rules import BudgetView

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


@pytest.mark.parametrize(
    ("spec", "qos"),
    [
        ({"containers": [c(resources={"limits": {"cpu": "1", "memory": "1Gi"}})]}, "Guaranteed"),
        ({"containers": [c(resources={"requests": {"cpu": "0", "memory": "0"}})]}, "BestEffort"),
        ({"containers": [c(resources={"limits": {"cpu": "1"}})]}, "Burstable"),
        (
            {"containers": [c(resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}})]},
            "BestEffort",
        ),
        (
            {
                "initContainers": [c(resources={"limits": {"cpu": "1", "memory": "1Gi"}})],
                "containers": [c(resources={"limits": {"cpu": "1"}})],
            },
            "Burstable",
        ),
        ({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "containers": [c()]}, "Guaranteed"),
        ({"resources": {"requests": {"cpu": "1"}}, "containers": [c()]}, "Burstable"),
    ],
    ids=["limits-only", "zero-requests", "cpu-limit-only", "extended-only", "init-guaranteed", "pod-level", "pod-req"],
)
def test_qos_class_as_kubernetes_computes_it(spec: JSON, qos: str) -> None:
    assert qos_class(spec) == qos


def test_legacy_docker_hub_name_and_pull_policy_defaults() -> None:
    assert normalize_image("index.docker.io/library/nginx") == "docker.io/library/nginx:latest"
    assert default_pull_policy("nginx") == "Always"
    assert default_pull_policy("nginx:latest") == "Always"
    assert default_pull_policy("nginx:1.27") == "IfNotPresent"
    assert default_pull_policy("registry.example:5000/app@sha256:abc") == "IfNotPresent"
    # A container that did not say (a raw review) is judged with the policy kube-apiserver would give it.
    only_pinned = {"registries": [{"url": r"^registry\.example/", "pullPolicies": ["IfNotPresent"]}]}
    state = state_with(rule(enforce={"action": "allow", "workloads": only_pinned}))
    assert allowed(state, pod(c("registry.example/app:1")), **POD)
    message = validate(request(ALICE, "CREATE", pod(c("registry.example/app")), namespace=NS, **POD), state).message
    assert "imagePullPolicy Always" in message


def test_resources_as_the_pod_will_be_stored_and_never_on_debug_containers() -> None:
    bounds = {"requests": {"required": ["memory"], "max": {"memory": "1Gi"}}}
    state = state_with(
        rule(enforce={"action": "allow", "workloads": {"targets": ["Pod", "Deployment"], "resources": bounds}})
    )
    # A Deployment's template is not defaulted, its Pods will be: a limit is their request.
    assert allowed(state, deployment(c(resources={"limits": {"memory": "512Mi"}})), **DEPLOY)
    assert not allowed(state, deployment(c(resources={"limits": {"memory": "2Gi"}})), **DEPLOY)
    before = pod(c(resources={"requests": {"memory": "64Mi"}}))
    debug = {**before, "spec": {**before["spec"], "ephemeralContainers": [c(name="dbg")]}}
    assert allowed(state, debug, before, sub_resource="ephemeralcontainers", **POD)


def test_security_reads_effective_values() -> None:
    no_escalation = state_with(
        rule(enforce={"action": "deny", "workloads": {"security": {"allowPrivilegeEscalation": True}}})
    )
    message = validate(request(ALICE, "CREATE", pod(c()), namespace=NS, **POD), no_escalation).message
    assert "containers[0].securityContext.allowPrivilegeEscalation=unset (allowed)" in message
    assert allowed(no_escalation, pod(c(securityContext={"allowPrivilegeEscalation": False})), **POD)
    paths = {"hostPaths": [{"exact": ["/etc"]}], "capabilities": ["CAP_SYS_ADMIN"]}
    deny = state_with(rule(enforce={"action": "deny", "workloads": {"security": paths}}))
    for spelling in ("/etc", "//etc/", "/./etc/kubernetes", "/etc/kubernetes/pki"):
        volume = {"name": "v", "hostPath": {"path": spelling}}
        assert not allowed(deny, pod(c(), volumes=[volume]), **POD), spelling
    assert allowed(deny, pod(c(), volumes=[{"name": "v", "hostPath": {"path": "/etcetera"}}]), **POD)
    assert not allowed(deny, pod(c(securityContext={"capabilities": {"add": ["sys_admin"]}})), **POD)
    only_data = state_with(
        rule(enforce={"action": "allow", "workloads": {"security": {"hostPaths": [{"exact": ["/data"]}]}}})
    )
    assert allowed(only_data, pod(c(), volumes=[{"name": "v", "hostPath": {"path": "/data/app"}}]), **POD)
    assert not allowed(only_data, pod(c(), volumes=[{"name": "v", "hostPath": {"path": "/"}}]), **POD)


def test_mutation_patches_are_minimal_and_ordered() -> None:
    mutations = [
        {"name": "first", "workloads": {"nodeSelector": {"pool": "a"}, "imagePullPolicy": "IfNotPresent"}},
        {
            "name": "second",
            "workloads": {
                "nodeSelector": {"pool": "b"},
                "tolerations": [{"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}],
                "imagePullPolicy": "Always",
                "defaultRequests": {"cpu": "100m", "memory": "1Gi"},
            },
        },
    ]
    state = state_with(rule(mutate=mutations))
    present = pod(
        c(imagePullPolicy="Always", resources={"limits": {"memory": "256Mi"}}),
        nodeSelector={"zone": "x"},
        tolerations=[{"key": "other", "operator": "Exists"}],
    )
    decision = mutate(request(ALICE, "CREATE", present, namespace=NS, **POD), state)
    assert sorted(op["path"] for op in decision.patch) == [
        "/spec/containers/0/resources/requests",
        "/spec/nodeSelector/pool",
        "/spec/tolerations/-",
    ]
    patched = apply_patch(present, decision)
    assert patched["spec"]["nodeSelector"] == {"zone": "x", "pool": "b"}  # in order: the later entry wins
    # memory stays unset: a 1Gi request above the 256Mi limit would make the Pod invalid
    assert patched["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    assert mutate(request(ALICE, "CREATE", patched, namespace=NS, **POD), state).patch == ()


def test_a_denied_value_a_mutation_produced_says_so() -> None:
    mutations = [{"name": "pin", "workloads": {"priorityClassName": "gold"}}]
    enforce = {"action": "allow", "workloads": {"placement": {"priorityClasses": [{"exact": ["low"]}]}}}
    state = state_with(rule(mutate=mutations), rule(1, enforce=enforce))
    created = pod(c())
    patched = apply_patch(created, mutate(request(ALICE, "CREATE", created, namespace=NS, **POD), state))
    message = validate(request(ALICE, "CREATE", patched, namespace=NS, **POD), state).message
    assert "spec.priorityClassName" in message
    assert "set by Tenant solar spec.rules[0] mutate 'pin'" in message


def test_disruption_budget_coverage_required() -> None:
    required = {"targets": ["Deployment", "Job"], "disruptionBudgets": {"required": True}}
    body = rule(enforce={"action": "allow", "workloads": required})
    web = {"matchLabels": {"app": "x"}}
    state = state_with(body)
    replicated = deployment(c())
    replicated["spec"]["replicas"] = 3
    decision = validate(request(ALICE, "CREATE", replicated, namespace=NS, **DEPLOY), state)
    assert not decision.allowed
    assert "requires a PodDisruptionBudget covering Deployment d" in decision.message
    assert "may not have reached admission yet" in decision.message
    assert allowed(state, deployment(c()), **DEPLOY)  # one replica: nothing to protect
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {}}}}
    assert allowed(state, job, resource="jobs", kind="Job", group="batch")
    covered = state_with(body, budgets=[BudgetView(namespace=NS, name="web", selector=web, minAvailable=2)])
    assert allowed(covered, replicated, **DEPLOY)
    elsewhere = state_with(body, budgets=[BudgetView(namespace=NS, name="db", selector={"matchLabels": {"app": "db"}})])
    assert not allowed(elsewhere, replicated, **DEPLOY)
    assert not allowed(state_with(body, budgets=[BudgetView(namespace=NS, name="null")]), replicated, **DEPLOY)
    assert allowed(state_with(body, budgets=[BudgetView(namespace=NS, name="all", selector={})]), replicated, **DEPLOY)
    # An existing Deployment is not refused for an unrelated change (its budget may be gone since).
    relabelled = {**replicated, "metadata": {**replicated["metadata"], "labels": {"x": "y"}}}
    assert allowed(state, relabelled, replicated, **DEPLOY)
    scaled_up = deployment(c())
    scaled_up["spec"]["replicas"] = 2
    assert not allowed(state, scaled_up, deployment(c()), **DEPLOY)


def test_workload_rules_that_cannot_work_are_refused_naming_the_field() -> None:
    """What the CRD schema cannot say (quantities that do not parse are refused by its pattern first)."""
    from enclave_admission.tenants.validation import validate as validate_tenant

    workloads = {
        "registries": [{"url": "registry.example/(team"}],
        "resources": {"limits": {"min": {"memory": "2Gi"}, "max": {"memory": "1Gi"}}},
        "placement": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]},
        "disruptionBudgets": {"maxUnavailable": "150%"},
    }
    mutation = {
        "nodeSelector": {"bad key!": "x"},
        "priorityClassName": "Not_A_Name",
        "tolerations": [{"key": "t", "operator": "Equal", "value": "v", "tolerationSeconds": 5}],
    }
    rules = [
        {
            "enforce": {
                "conditions": [{"expression": "object.spec.containers.all(c, c.image.startsWith('x')"}],
                "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/33"]}}},
                "workloads": workloads,
            },
            "mutate": [{"workloads": mutation}],
        }
    ]
    body = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "metadata": {"name": "solar"},
        "spec": {"rules": rules},
    }
    tenants = {"resource": "tenants", "kind": "Tenant", "group": "enclave.dev"}
    refused = validate_tenant(request(("root-admin", ("enclave-admins",)), "CREATE", body, **tenants), state_with())
    assert not refused.allowed
    for field in (
        "spec.rules[0].enforce.conditions[0].expression",
        "spec.rules[0].enforce.network.policies.egress.cidrs[0]",
        "spec.rules[0].enforce.workloads.registries[0].url",
        "spec.rules[0].enforce.workloads.resources.limits.min['memory']",
        "spec.rules[0].enforce.workloads.placement.tolerations[0].value",
        "spec.rules[0].enforce.workloads.disruptionBudgets.maxUnavailable",
        "spec.rules[0].mutate[0].workloads.nodeSelector['bad key!']",
        "spec.rules[0].mutate[0].workloads.priorityClassName",
        "spec.rules[0].mutate[0].workloads.tolerations[0].tolerationSeconds",
    ):
        assert field in refused.message, field


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"containers": "c"}, "spec.containers must be a list"),
        ({"containers": ["c"]}, "spec.containers[0] must be an object"),
        ({"containers": [c(securityContext="privileged")]}, "spec.containers[0].securityContext must be an object"),
        ({"containers": [c(resources={"limits": ["1Gi"]})]}, "spec.containers[0].resources.limits must be an object"),
        ({"containers": [{"name": "c", "image": 7}]}, "spec.containers[0].image must be a string"),
        ({"containers": [c()], "tolerations": {"key": "x"}}, "spec.tolerations must be a list"),
    ],
)
def test_a_pod_spec_of_the_wrong_shape_is_a_bad_request_naming_the_field(spec: JSON, field: str) -> None:
    state = state_with(rule(enforce={"action": "deny", "workloads": {"security": {"privileged": True}}}))
    body = {**pod(), "spec": spec}
    decision = validate(request(ALICE, "CREATE", body, namespace=NS, **POD), state)
    assert not decision.allowed
    assert decision.code == 400
    assert field in decision.message
    assert response("u", decision)["response"]["status"]["reason"] == "BadRequest"
    template = {**deployment(), "spec": {"selector": {}, "template": "x"}}
    assert validate(request(ALICE, "CREATE", template, namespace=NS, **DEPLOY), state).code == 400


def test_an_unreadable_quantity_is_outside_the_bounds() -> None:
    bounds = {"limits": {"max": {"memory": "1Gi"}}}
    state = state_with(rule(enforce={"action": "allow", "workloads": {"resources": bounds}}))
    message = validate(
        request(ALICE, "CREATE", pod(c(resources={"limits": {"memory": "huge"}})), namespace=NS, **POD), state
    ).message
    assert "is not a quantity" in message


def test_a_class_mutation_lets_kube_apiserver_resolve_the_class() -> None:
    """kube-apiserver's Priority plugin gave the Pod the default priority before the webhook; it runs again after
    the mutation and refuses a priority that is not the named class's, so the mutation removes the resolved
    fields with the class it sets (and leaves a Pod that names a class alone)."""
    state = state_with(rule(mutate=[{"workloads": {"priorityClassName": "gold", "runtimeClassName": "sandbox"}}]))
    resolved = pod(c(), priority=0, preemptionPolicy="PreemptLowerPriority")
    decision = mutate(request(ALICE, "CREATE", resolved, namespace=NS, **POD), state)
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/priorityClassName", "value": "gold"},
        {"op": "remove", "path": "/spec/priority"},
        {"op": "remove", "path": "/spec/preemptionPolicy"},
        {"op": "add", "path": "/spec/runtimeClassName", "value": "sandbox"},
    ]
    patched = apply_patch(resolved, decision)
    assert "priority" not in patched["spec"]
    assert mutate(request(ALICE, "CREATE", patched, namespace=NS, **POD), state).patch == ()
    named = pod(c(), priorityClassName="silver", priority=500, runtimeClassName="sandbox")
    assert mutate(request(ALICE, "CREATE", named, namespace=NS, **POD), state).patch == ()

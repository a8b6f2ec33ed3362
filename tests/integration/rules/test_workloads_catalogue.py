"""Issue 13's catalogue: workload rules and mutations through kube-apiserver, as a tenant user.

One tenant, one namespace, one set of rules (below); each row is a request a tenant user could make and what
Enclave must answer. Rows run as dry runs (``dryRun=All``: kube-apiserver calls the hooks, stores nothing),
except those that need a stored object (an update, a debug container, an audit Event: audits are never
posted for dry runs).
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import Stack, eventually_refused, refusal

GOOD = "registry.example/team/app:1.0"
ALL_KINDS = ["Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ReplicationController"]


def _labelled(label: str) -> list[dict[str, str]]:
    return [
        {
            "name": label,
            "expression": f"has(object.metadata.labels) && object.metadata.labels.exists(k, k == '{label}')",
        }
    ]


RULES: list[dict[str, Any]] = [
    {  # 0: approved registries everywhere, with the pull policies allowed for them
        "enforce": {
            "action": "allow",
            "workloads": {
                "targets": ALL_KINDS,
                "registries": [
                    {"url": r"^registry\.example/", "pullPolicies": ["Always", "IfNotPresent"]},
                    {"url": r"^docker\.io/library/busybox[:@]"},
                ],
            },
        }
    },
    {  # 1: no privileged containers, host namespaces, dangerous capabilities, /etc host paths
        "enforce": {
            "action": "deny",
            "workloads": {
                "targets": ALL_KINDS,
                "security": {
                    "privileged": True,
                    "hostNamespaces": True,
                    "capabilities": ["NET_ADMIN", "SYS_ADMIN"],
                    "hostPaths": [{"exp": "/etc(/.*)?"}],
                },
            },
        }
    },
    {  # 2: Pods labelled qos-test must be Guaranteed
        "enforce": {"action": "allow", "conditions": _labelled("qos-test"), "workloads": {"qosClasses": ["Guaranteed"]}}
    },
    {  # 3: scheduling stays on the tenant's nodes
        "enforce": {
            "action": "allow",
            "workloads": {
                "placement": {
                    "nodeSelectorKeys": ["pool"],
                    "tolerations": [{"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}],
                }
            },
        },
        "mutate": [{"name": "pool", "workloads": {"nodeSelector": {"pool": "tenant-pool"}}}],
    },
    {"enforce": {"action": "audit", "workloads": {"security": {"hostPorts": True}}}},  # 4: host ports are audited
    {  # 5: no ReplicationControllers labelled legacy-test, at all (a kind denied outright)
        "enforce": {
            "action": "deny",
            "conditions": _labelled("legacy-test"),
            "workloads": {"targets": ["ReplicationController"]},
        }
    },
    {  # 6: Pods labelled resources-test stay under 1Gi of memory and declare it
        "enforce": {
            "action": "allow",
            "conditions": _labelled("resources-test"),
            "workloads": {"resources": {"limits": {"required": ["memory"], "max": {"memory": "1Gi"}}}},
        }
    },
    {  # 7: Pods labelled mutation-test get a scheduler the rule does not allow (the denial names the mutation)
        "enforce": {
            "action": "allow",
            "conditions": _labelled("mutation-test"),
            "workloads": {"placement": {"schedulers": [{"exact": ["default-scheduler"]}]}},
        },
        "mutate": [{"name": "scheduler", "workloads": {"schedulerName": "tenant-scheduler"}}],
    },
    {  # 8: replicated controllers need a PodDisruptionBudget; budgets leave at most one Pod unavailable
        "enforce": {
            "action": "allow",
            "workloads": {
                "targets": ["Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"],
                "disruptionBudgets": {"required": True, "maxUnavailable": 1},
            },
        }
    },
]


def container(image: str = GOOD, name: str = "c", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **fields}


def pod_spec(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"containers": list(containers) or [container()], **spec}


def workload(kind: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``kind`` object running ``spec`` (a Pod spec)."""
    name = unique(kind.lower())
    meta = {"name": name, "labels": labels or {}}
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    selector = {"matchLabels": {"app": name}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind in ("Deployment", "ReplicaSet", "DaemonSet"):
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": selector, "template": template},
        }
    if kind == "StatefulSet":
        body = {"selector": selector, "template": template, "serviceName": name}
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}
    if kind == "ReplicationController":
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": {"app": name}, "template": template},
        }
    job_template = {**template, "spec": {**spec, "restartPolicy": "Never"}}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": job_template}}
    cron = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": job_template}}}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": cron}


class Tenant:
    def __init__(self, stack: Stack, owner: str, namespace: str, name: str) -> None:
        self.stack, self.owner, self.namespace, self.name = stack, owner, namespace, name
        self.apis = stack.impersonate(owner, ["enclave.dev"])

    def create(self, body: dict[str, Any], dry_run: bool = True) -> Any:
        kind, ns = body["kind"], self.namespace
        extra = {"dry_run": "All"} if dry_run else {}
        core, apps, batch = client.CoreV1Api(self.apis), client.AppsV1Api(self.apis), client.BatchV1Api(self.apis)
        calls: dict[str, Callable[..., Any]] = {
            "Pod": core.create_namespaced_pod,
            "ReplicationController": core.create_namespaced_replication_controller,
            "Deployment": apps.create_namespaced_deployment,
            "StatefulSet": apps.create_namespaced_stateful_set,
            "DaemonSet": apps.create_namespaced_daemon_set,
            "ReplicaSet": apps.create_namespaced_replica_set,
            "Job": batch.create_namespaced_job,
            "CronJob": batch.create_namespaced_cron_job,
        }
        return calls[kind](ns, body, **extra)


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> Tenant:
    owner = unique("wl")
    name = stack.tenant(owner, RULES)
    namespace = stack.namespace_of(name, owner)
    stack.wait_rules(namespace, len(RULES))
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "debug"},
            "rules": [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch", "update"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "debug"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "debug"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
        },
    )
    result = Tenant(stack, owner, namespace, name)
    # The rules reach admission asynchronously: wait for the first refusal, then every row is deterministic.
    eventually_refused(lambda: result.create(workload("Pod", pod_spec(container("quay.io/x/y:1")))), "registries")
    return result


TOLERATED = {"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}
LIMITS = {"cpu": "100m", "memory": "128Mi"}

CASES: list[tuple[str, str, dict[str, Any], dict[str, str] | None, str | None]] = [
    # (id, kind, Pod spec, labels, refusal fragment or None for admitted)
    *[(f"{kind}-approved-registry", kind, pod_spec(), None, None) for kind in ALL_KINDS],
    *[
        (f"{kind}-unlisted-registry", kind, pod_spec(container("quay.io/evil/miner:1")), None, "containers[0].image")
        for kind in ALL_KINDS
    ],
    *[
        (f"{kind}-privileged", kind, pod_spec(container(securityContext={"privileged": True})), None, "privileged")
        for kind in ALL_KINDS
    ],
    (
        "Pod-init-container-unlisted",
        "Pod",
        pod_spec(initContainers=[container("quay.io/x:1", "init")]),
        None,
        "initContainers[0].image",
    ),
    (
        "Deployment-init-container-unlisted",
        "Deployment",
        pod_spec(initContainers=[container("ghcr.io/x:1", "init")]),
        None,
        "spec.template.spec.initContainers[0].image",
    ),
    ("Pod-short-name-nginx-is-docker-hub", "Pod", pod_spec(container("nginx")), None, "docker.io/library/nginx:latest"),
    ("Pod-short-name-busybox-allowed", "Pod", pod_spec(container("busybox:1.36")), None, None),
    ("Pod-pull-policy-never", "Pod", pod_spec(container(imagePullPolicy="Never")), None, "imagePullPolicy Never"),
    ("Pod-digest-reference", "Pod", pod_spec(container("registry.example/app@sha256:" + "a" * 64)), None, None),
    ("Pod-host-network", "Pod", pod_spec(hostNetwork=True), None, "hostNamespaces"),
    (
        "Pod-host-path-etc",
        "Pod",
        pod_spec(volumes=[{"name": "v", "hostPath": {"path": "/etc/kubernetes"}}]),
        None,
        "volumes[0].hostPath.path",
    ),
    ("Pod-host-path-data", "Pod", pod_spec(volumes=[{"name": "v", "hostPath": {"path": "/data"}}]), None, None),
    (
        "Pod-capability-net-admin",
        "Pod",
        pod_spec(container(securityContext={"capabilities": {"add": ["NET_ADMIN"]}})),
        None,
        "capabilities.add[0]",
    ),
    (
        "Pod-capability-chown",
        "Pod",
        pod_spec(container(securityContext={"capabilities": {"add": ["CHOWN"]}})),
        None,
        None,
    ),
    ("Pod-best-effort-when-guaranteed-only", "Pod", pod_spec(), {"qos-test": "1"}, "QoS class"),
    (
        "Pod-guaranteed",
        "Pod",
        pod_spec(container(resources={"limits": LIMITS, "requests": LIMITS})),
        {"qos-test": "1"},
        None,
    ),
    (
        "Pod-toleration-outside",
        "Pod",
        pod_spec(tolerations=[{"key": "gpu", "operator": "Exists"}]),
        None,
        "tolerations[0]",
    ),
    ("Pod-toleration-allowed", "Pod", pod_spec(tolerations=[TOLERATED]), None, None),
    ("Pod-node-selector-key-outside", "Pod", pod_spec(nodeSelector={"zone": "a"}), None, "nodeSelector['zone']"),
    (
        "ReplicationController-kind-denied",
        "ReplicationController",
        pod_spec(),
        {"legacy-test": "1"},
        "ReplicationController objects",
    ),
    ("Pod-untagged-image-defaults-to-always", "Pod", pod_spec(container("registry.example/team/app")), None, None),
    (
        "Pod-host-path-etc-respelled",
        "Pod",
        pod_spec(volumes=[{"name": "v", "hostPath": {"path": "//etc/./kubernetes/"}}]),
        None,
        "'/etc/kubernetes'",
    ),
    (
        "Pod-mutation-produces-a-denied-scheduler",
        "Pod",
        pod_spec(),
        {"mutation-test": "1"},
        "set by Tenant",
    ),
    (
        "Pod-memory-over-bound",
        "Pod",
        pod_spec(container(resources={"limits": {"memory": "2Gi"}})),
        {"resources-test": "1"},
        "is above 1Gi",
    ),
    ("Pod-memory-missing", "Pod", pod_spec(), {"resources-test": "1"}, "is missing"),
    (
        "Pod-memory-within",
        "Pod",
        pod_spec(container(resources={"limits": {"memory": "512Mi"}})),
        {"resources-test": "1"},
        None,
    ),
]


@pytest.mark.parametrize(
    ("kind", "spec", "labels", "fragment"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_catalogue(
    tenant: Tenant, kind: str, spec: dict[str, Any], labels: dict[str, str] | None, fragment: str | None
) -> None:
    body = workload(kind, copy.deepcopy(spec), labels)
    if fragment is None:
        tenant.create(body)
    else:
        message = refusal(lambda: tenant.create(body))
        assert fragment in message


def test_mutation_adds_node_selector_then_passes_enforcement(tenant: Tenant) -> None:
    created = tenant.create(workload("Pod", pod_spec()))
    assert created.spec.node_selector == {"pool": "tenant-pool"}  # set by mutate[], then admitted by placement


def test_deployment_refused_at_update_when_its_template_turns_bad(tenant: Tenant) -> None:
    body = workload("Deployment", pod_spec())
    tenant.create(body, dry_run=False)
    apps = client.AppsV1Api(tenant.apis)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "quay.io/x:1"}]}}}}
    message = refusal(lambda: apps.patch_namespaced_deployment(body["metadata"]["name"], tenant.namespace, patch))
    assert "spec.template.spec.containers[0].image" in message
    apps.patch_namespaced_deployment(body["metadata"]["name"], tenant.namespace, {"metadata": {"labels": {"a": "b"}}})


def test_debug_container_with_privileges_is_refused(tenant: Tenant) -> None:
    # Labelled for the resources rule: a debug container (which cannot declare resources) is not held to it.
    body = workload("Pod", pod_spec(container(resources={"limits": {"memory": "512Mi"}})), {"resources-test": "1"})
    tenant.create(body, dry_run=False)
    core = client.CoreV1Api(tenant.apis)
    name = body["metadata"]["name"]

    def debug(image: str, privileged: bool) -> Any:
        ephemeral = {"name": unique("dbg"), "image": image, "securityContext": {"privileged": privileged}}
        return core.patch_namespaced_pod_ephemeralcontainers(
            name, tenant.namespace, {"spec": {"ephemeralContainers": [ephemeral]}}
        )

    assert "ephemeralContainers[0].securityContext.privileged" in refusal(lambda: debug(GOOD, True))
    assert "ephemeralContainers[0].image" in refusal(lambda: debug("docker.io/nicolaka/netshoot", False))
    debug(GOOD, False)


def test_replicated_controllers_need_a_disruption_budget_first(tenant: Tenant) -> None:
    """Coverage is decided from the PodDisruptionBudgets in the Rules snapshot: refused without one, admitted
    once the budget the tenant creates has reached admission (moments later: the refusal says so)."""
    policy = client.PolicyV1Api(tenant.apis)
    for kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
        body = workload(kind, pod_spec())
        body["spec"]["replicas"] = 2
        message = refusal(partial(tenant.create, body))
        assert "requires a PodDisruptionBudget covering " + kind in message
        assert "may not have reached admission yet" in message
        selector = {"matchLabels": body["spec"]["template"]["metadata"]["labels"]}
        budget: dict[str, Any] = {"metadata": {"name": unique("pdb")}, "spec": {"selector": selector}}
        too_loose = copy.deepcopy(budget)
        too_loose["spec"]["maxUnavailable"] = 3
        create_budget = policy.create_namespaced_pod_disruption_budget
        assert "maxUnavailable" in refusal(partial(create_budget, tenant.namespace, too_loose))
        budget["spec"]["maxUnavailable"] = 1
        create_budget(tenant.namespace, budget)
        poll(partial(_admitted, tenant, body), timeout=30, what=f"the {kind} admitted once its budget is known")


def _admitted(tenant: Tenant, body: dict[str, Any]) -> bool:
    try:
        tenant.create(body)
    except ApiException as err:
        if "requires a PodDisruptionBudget" in str(err.body):
            return False
        raise
    return True


def test_audit_only_rule_posts_an_event_and_admits(tenant: Tenant) -> None:
    body = workload("Pod", pod_spec(container(ports=[{"containerPort": 80, "hostPort": 8080}])))
    tenant.create(body, dry_run=False)
    poll(lambda: tenant.stack.events("RuleAudit", "spec.rules[4] audits hostPorts"), what="the audit Event")


def test_workload_rules_that_cannot_work_are_refused_at_the_api_naming_the_field(tenant: Tenant) -> None:
    """Through kube-apiserver as the cluster administrator: a bad quantity by the CRD schema, the rest by the
    rules hook; nothing of either patch is stored (the catalogue's rules stay in force)."""
    custom = client.CustomObjectsApi(tenant.stack.kube)

    def patch(rule: dict[str, Any]) -> str:
        body = {"spec": {"rules": [*RULES, rule]}}
        with pytest.raises(ApiException) as caught:
            custom.patch_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant.name, body)
        return str(caught.value.body)

    quantity = patch({"enforce": {"workloads": {"resources": {"limits": {"max": {"memory": "lots"}}}}}})
    assert "spec.rules[9].enforce.workloads.resources.limits.max.memory" in quantity
    workloads = {
        "registries": [{"url": "registry.example/(team"}],
        "placement": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]},
        "disruptionBudgets": {"maxUnavailable": "150%"},
    }
    conditions = [{"expression": "object.spec.containers.all(c, c.image.startsWith('x')"}]
    message = patch(
        {
            "enforce": {"action": "allow", "conditions": conditions, "workloads": workloads},
            "mutate": [{"workloads": {"nodeSelector": {"bad key!": "x"}}}],
        }
    )
    for field in (
        "spec.rules[9].enforce.conditions[0].expression",
        "spec.rules[9].enforce.workloads.registries[0].url",
        "spec.rules[9].enforce.workloads.placement.tolerations[0].value",
        "spec.rules[9].enforce.workloads.disruptionBudgets.maxUnavailable",
        "spec.rules[9].mutate[0].workloads.nodeSelector['bad key!']",
    ):
        assert field in message, field
    assert tenant.stack.rule_status(tenant.namespace)["status"]["size"] == len(RULES)


def test_a_raw_review_of_a_malformed_pod_is_a_bad_request_naming_the_field(
    tenant: Tenant, control_plane: ControlPlane
) -> None:
    """kube-apiserver refuses such a Pod before calling any webhook, so the review is sent as it would be."""
    admission = next(running for running in tenant.stack.processes if running.webhook_port)
    secret = client.CoreV1Api(tenant.stack.kube).read_namespaced_secret("enclave-tls", tenant.stack.namespace)
    context = ssl.create_default_context(cadata=base64.b64decode(secret.data["ca.crt"]).decode())
    context.load_cert_chain(*control_plane.webhook_client_cert)
    pod = workload("Pod", pod_spec(container(securityContext="privileged")))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "malformed-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"],
            "namespace": tenant.namespace,
            "operation": "CREATE",
            "userInfo": {"username": tenant.owner, "groups": ["enclave.dev", "system:authenticated"]},
            "object": pod,
            "dryRun": True,
        },
    }
    request = urllib.request.Request(
        f"{admission.webhook_url}/resources",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        response = json.loads(answer.read())["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert "spec.containers[0].securityContext must be an object" in response["status"]["message"]


def test_class_mutations_are_resolved_by_kube_apiserver_then_enforced(stack: Stack) -> None:
    """priorityClassName and runtimeClassName set by mutations, in order, as kube-apiserver resolves them: its
    Priority and RuntimeClass plugins run before the mutating webhooks and again once a webhook changed the
    object, so the stored Pod carries the priority, preemption policy and overhead of the classes the mutation
    named; then enforcement judges the mutated Pod and a refusal of a value a mutation set names it."""
    scheduling, node = client.SchedulingV1Api(stack.kube), client.NodeV1Api(stack.kube)
    gold, silver, sandbox = unique("gold"), unique("silver"), unique("sandbox")
    scheduling.create_priority_class({"metadata": {"name": gold}, "value": 1000, "preemptionPolicy": "Never"})
    scheduling.create_priority_class({"metadata": {"name": silver}, "value": 500})
    overhead = {"cpu": "10m", "memory": "8Mi"}
    node.create_runtime_class({"metadata": {"name": sandbox}, "handler": "runc", "overhead": {"podFixed": overhead}})
    try:
        rules: list[dict[str, Any]] = [
            {  # 0: the classes, in order: the first entry sets priorityClassName, the later one sees it set
                "mutate": [
                    {"name": "classes", "workloads": {"priorityClassName": gold, "runtimeClassName": sandbox}},
                    {"name": "later", "workloads": {"priorityClassName": silver}},
                ]
            },
            {  # 1: what enforcement sees is the mutated Pod
                "enforce": {
                    "action": "allow",
                    "workloads": {"placement": {"priorityClasses": [{"exact": [gold, silver]}]}},
                }
            },
            {  # 2: Pods labelled strict may not run with the gold class the mutation sets
                "enforce": {
                    "action": "deny",
                    "conditions": _labelled("strict"),
                    "workloads": {"placement": {"priorityClasses": [{"exact": [gold]}]}},
                }
            },
        ]
        owner = unique("classes")
        name = stack.tenant(owner, rules)
        namespace = stack.namespace_of(name, owner)
        stack.wait_rules(namespace, len(rules))
        core = stack.core(owner)

        def create(spec: dict[str, Any], labels: dict[str, str] | None = None) -> Any:
            return core.create_namespaced_pod(namespace, workload("Pod", spec, labels), dry_run="All")

        def mutated() -> Any:
            spec = create(pod_spec()).spec
            return spec if spec.priority_class_name == gold else None

        created = poll(mutated, timeout=30, what="the mutations in force")
        assert created.priority == 1000
        assert created.preemption_policy == "Never"
        assert created.runtime_class_name == sandbox
        assert created.overhead == overhead
        # A class the user names is theirs (the mutation leaves it) and is enforced as such.
        assert create(pod_spec(priorityClassName=silver)).spec.priority == 500
        message = refusal(lambda: create(pod_spec(), {"strict": "1"}))
        assert f"spec.priorityClassName={gold!r}" in message
        assert "(the value was set by Tenant" in message
        assert "mutate 'classes'" in message
    finally:
        scheduling.delete_priority_class(gold)
        scheduling.delete_priority_class(silver)
        node.delete_runtime_class(sandbox)

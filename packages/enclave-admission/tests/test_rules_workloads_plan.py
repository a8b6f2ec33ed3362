"""The compiled workload plan (one walk of a Pod spec per request, every rule's checks over it) against the
rule-by-rule reference it replaced: the same findings, in the same order, with the same messages, and the same
mutation patches, over a catalogue of rules and objects (every target kind, container list, policy and action,
CREATE and UPDATE, conditions that are false or error, mutations with targets) and random combinations of them.

The reference below is the algorithm the plan replaced, kept here verbatim in substance: each rule reads the
items it judges and judges each one on its own; each mutation entry walks the containers it targets."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from admission_helpers import ALICE, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_rules import NS, rule, state_with

from enclave_admission.review import JSON, AdmissionRequest, pointer
from enclave_admission.rules import workloads
from enclave_admission.rules.engine import Item, Review
from enclave_admission.rules.workloads import containers, mutated_fields, mutation_patch, workload_kind
from enclave_admission.rules.workloads.budgets import REPLICATED, coverage, disruption_budgets
from enclave_admission.rules.workloads.items import View, path_shape, policy_items, shape
from enclave_admission.rules.workloads.judges import judge_item
from enclave_admission.rules.workloads.podspec import as_list, as_map, dig, has_policies, targets_of
from enclave_core.api.rules import WorkloadMutation
from enclave_core.quantity import Quantity
from enclave_core.snapshots.rules import BudgetView


def _quantity(value: Any) -> Quantity | None:
    try:
        return Quantity.parse(str(value))
    except (ValueError, TypeError):
        return None


# -- the reference -----------------------------------------------------------------------------------------------


def reference_judge(review: Review) -> None:
    request = review.request
    if request.obj is None or not review.rules.workloads:
        return
    if request.group == "policy" and request.resource == "poddisruptionbudgets":
        disruption_budgets(review)
        return
    located = workload_kind(request.group, request.resource)
    if located is None:
        return
    kind, spec_path = located
    base = ".".join(spec_path)
    spec = dig(request.obj, spec_path)
    malformed = path_shape(request.obj, spec_path) or shape(spec, base)
    if malformed:
        review.malformed = f"cannot judge {kind} {request.name}: {malformed}"
        return
    old_spec = dig(request.old, spec_path) if request.operation == "UPDATE" and request.old else None
    view = View(spec, base)
    old_view = View(old_spec, base) if old_spec is not None else None
    mutated: dict[str, str] | None = None
    for candidate in review.rules.workloads:
        policy = candidate.workloads
        assert policy is not None
        targets = targets_of(policy)
        if kind not in targets or not review.applies(candidate):
            continue
        if not has_policies(policy):
            if request.operation == "CREATE" or request.sub_resource:
                item = Item()
                why = f"{candidate.origin} {'denies' if candidate.action != 'audit' else 'audits'} {kind} objects"
                if candidate.action == "allow":
                    item.allow(candidate, True, "")
                else:
                    item.hit(candidate, why)
                review.settle(item)
            continue
        budgets = policy.disruption_budgets
        if budgets is not None and budgets.required and kind in REPLICATED:
            coverage(review, candidate, kind)
        lists = targets[kind]
        old_items = set(policy_items(policy, old_view, lists)) if old_view is not None else None
        for found in policy_items(policy, view, lists):
            if old_items is not None and found in old_items:
                continue
            item = Item()
            judge_item(item, candidate, policy, found)
            if item.last is not None and not item.last[1] and review.rules.mutations:
                if mutated is None:
                    mutated = mutated_fields(review)
                setter = mutated.get(found.path)
                if setter:
                    item.last = (item.last[0], False, f"{item.last[2]} (the value was set by {setter})")
            review.settle(item)


_UNSET: dict[str, tuple[str | None, ...]] = {"schedulerName": (None, "", "default-scheduler")}


def reference_patch(review: Review) -> list[JSON]:
    request = review.request
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.sub_resource:
        return []
    if request.obj is None or not review.rules.mutations:
        return []
    spec = as_map(request.obj.get("spec"))
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    scalars: dict[str, str] = {}
    changes: dict[tuple[str, int], dict[str, Any]] = {}
    selector = as_map(spec.get("nodeSelector"))
    present = as_list(spec.get("tolerations"))
    for candidate in review.rules.mutations:
        entries = [part for part in candidate.mutations if isinstance(part.workloads, WorkloadMutation)]
        if not entries or not review.applies(candidate):
            continue
        for part in entries:
            mutation = part.workloads
            assert isinstance(mutation, WorkloadMutation)
            node_selector.update(mutation.node_selector or {})
            for toleration in mutation.tolerations or ():
                wanted = toleration.to_k8s()
                if wanted not in present and wanted not in tolerations:
                    tolerations.append(wanted)
            for field, scalar in (
                ("schedulerName", mutation.scheduler_name),
                ("priorityClassName", mutation.priority_class_name),
                ("runtimeClassName", mutation.runtime_class_name),
            ):
                if scalar and spec.get(field) in _UNSET.get(field, (None, "")) and field not in scalars:
                    scalars[field] = scalar
            for container in containers(spec, "spec", targets_of(mutation).get("Pod", ())):
                mine = changes.setdefault((container.list_name, container.position), {"pull": None, "amounts": {}})
                if mutation.image_pull_policy:
                    mine["pull"] = mutation.image_pull_policy
                if container.list_name == "ephemeralContainers":
                    continue
                resources = as_map(container.body.get("resources"))
                requests, limits = as_map(resources.get("requests")), as_map(resources.get("limits"))
                for section, defaults, declared in (
                    ("requests", mutation.default_requests, requests),
                    ("limits", mutation.default_limits, limits),
                ):
                    for name, amount in (defaults or {}).items():
                        if name in declared or (section, name) in mine["amounts"]:
                            continue
                        other = limits.get(name) if section == "requests" else requests.get(name)
                        want, theirs = _quantity(amount), _quantity(other) if other is not None else None
                        above, below = section == "requests", section == "limits"
                        if (
                            want is not None
                            and theirs is not None
                            and ((above and want > theirs) or (below and want < theirs))
                        ):
                            continue
                        mine["amounts"][(section, name)] = str(amount)
    node_selector = {k: v for k, v in node_selector.items() if selector.get(k) != v}
    operations: list[JSON] = []
    if node_selector:
        if isinstance(spec.get("nodeSelector"), dict):
            for key, value in node_selector.items():
                operations.append({"op": "add", "path": pointer("spec", "nodeSelector", key), "value": value})
        else:
            operations.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(node_selector)})
    if tolerations:
        if isinstance(spec.get("tolerations"), list):
            operations += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in tolerations]
        else:
            operations.append({"op": "add", "path": "/spec/tolerations", "value": list(tolerations)})
    for field, value in scalars.items():
        operations.append({"op": "add", "path": pointer("spec", field), "value": value})
        if field == "priorityClassName":
            operations += [
                {"op": "remove", "path": f"/spec/{f}"} for f in ("priority", "preemptionPolicy") if f in spec
            ]
    for (list_name, index), mine in changes.items():
        body = as_map(as_list(spec.get(list_name))[index])
        where = ("spec", list_name, str(index))
        if mine["pull"] is not None and mine["pull"] != body.get("imagePullPolicy"):
            operations.append({"op": "add", "path": pointer(*where, "imagePullPolicy"), "value": mine["pull"]})
        amounts: dict[tuple[str, str], str] = mine["amounts"]
        if not amounts:
            continue
        current = body.get("resources")
        if not isinstance(current, dict):
            grouped: dict[str, dict[str, str]] = {}
            for (section, name), amount in amounts.items():
                grouped.setdefault(section, {})[name] = amount
            operations.append({"op": "add", "path": pointer(*where, "resources"), "value": grouped})
            continue
        for section in ("requests", "limits"):
            chosen = {name: amount for (kind, name), amount in amounts.items() if kind == section}
            if not chosen:
                continue
            if isinstance(current.get(section), dict):
                for name, amount in chosen.items():
                    path = pointer(*where, "resources", section, name)
                    operations.append({"op": "add", "path": path, "value": amount})
            else:
                operations.append({"op": "add", "path": pointer(*where, "resources", section), "value": chosen})
    return operations


# -- the catalogue -----------------------------------------------------------------------------------------------

KINDS = ["Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job", "CronJob"]
TOLERATION = {"key": "tenant", "operator": "Equal", "value": "solar", "effect": "NoSchedule"}
LABELLED = [{"name": "flagged", "expression": "has(object.metadata.labels) && 'flag' in object.metadata.labels"}]
ERRORING = [{"name": "broken", "expression": "object.metadata.labels['absent'] == 'x'"}]

RULES: list[dict[str, Any]] = [
    {"enforce": {"action": "allow", "workloads": {"targets": KINDS, "registries": [
        {"url": r"^registry\.example/", "pullPolicies": ["Always", "IfNotPresent"]},
        {"url": r"^docker\.io/library/busybox[:@]"}]}}},
    {"enforce": {"action": "deny", "workloads": {"registries": [{"url": r"^docker\.io/"}]}}},
    {"enforce": {"action": "audit", "workloads": {"targets": ["Pod/initContainers"], "registries": [{"url": "^quay"}]}}},
    {"enforce": {"action": "deny", "workloads": {"targets": KINDS, "security": {
        "privileged": True, "hostNamespaces": True, "capabilities": ["NET_ADMIN", "cap_sys_admin"],
        "hostPaths": [{"exp": "/etc(/.*)?"}]}}}},
    {"enforce": {"action": "allow", "workloads": {"security": {"hostPorts": False, "privileged": False}}}},
    {"enforce": {"action": "deny", "workloads": {"security": {"allowPrivilegeEscalation": True}}}},
    {"enforce": {"action": "audit", "workloads": {"security": {"hostPorts": True, "capabilities": ["ALL"]}}}},
    {"enforce": {"action": "allow", "workloads": {"targets": ["Pod", "Deployment"], "security": {
        "hostPaths": [{"exact": ["/data"]}], "capabilities": ["CHOWN"], "allowPrivilegeEscalation": False}}}},
    {"enforce": {"action": "allow", "conditions": LABELLED, "workloads": {"qosClasses": ["Guaranteed"]}}},
    {"enforce": {"action": "deny", "workloads": {"targets": KINDS, "qosClasses": ["BestEffort"]}}},
    {"enforce": {"action": "allow", "workloads": {"resources": {
        "limits": {"required": ["memory"], "max": {"memory": "1Gi"}}, "requests": {"min": {"cpu": "100m"}}}}}},
    {"enforce": {"action": "deny", "workloads": {"targets": ["Pod/containers", "Job"], "resources": {
        "requests": {"max": {"cpu": "2"}, "min": {"memory": "1Mi"}}}}}},
    {"enforce": {"action": "allow", "workloads": {"placement": {
        "nodeSelectorKeys": ["pool"], "tolerations": [TOLERATION], "priorityClasses": [{"exact": ["low"]}]}}}},
    {"enforce": {"action": "allow", "workloads": {"schedulers": [{"exact": ["default-scheduler"]}],
        "placement": {"schedulers": [{"exp": "tenant-.*"}], "runtimeClasses": [{"exact": ["gvisor"]}]}}}},
    {"enforce": {"action": "deny", "workloads": {"targets": KINDS, "placement": {
        "priorityClasses": [{"exp": "system-.*"}], "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}},
    {"enforce": {"action": "deny", "conditions": LABELLED, "workloads": {"targets": ["CronJob", "Pod"]}}},
    {"enforce": {"action": "audit", "workloads": {"targets": ["Job"]}}},
    {"enforce": {"action": "allow", "workloads": {"targets": ["ReplicationController"]}}},
    {"enforce": {"action": "allow", "workloads": {
        "targets": ["Deployment", "StatefulSet", "ReplicaSet"], "disruptionBudgets": {"required": True}}}},
    {"enforce": {"action": "deny", "conditions": ERRORING, "workloads": {"registries": [{"url": "^x"}]}}},
    {"enforce": {"action": "deny", "conditions": LABELLED, "workloads": {"security": {"privileged": True}}}},
    {"mutate": [{"name": "pool", "workloads": {"nodeSelector": {"pool": "tenant", "zone": "a"}}}]},
    {"mutate": [
        {"name": "scheduling", "workloads": {"tolerations": [TOLERATION], "schedulerName": "tenant-scheduler",
                                             "priorityClassName": "gold", "runtimeClassName": "gvisor"}},
        {"name": "pull", "workloads": {"targets": ["Pod/containers"], "imagePullPolicy": "Always",
                                       "defaultRequests": {"cpu": "100m", "memory": "2Gi"}}},
    ]},
    {"mutate": [
        {"name": "later", "workloads": {"nodeSelector": {"pool": "other"}, "imagePullPolicy": "IfNotPresent",
                                        "priorityClassName": "silver", "defaultLimits": {"memory": "256Mi"},
                                        "defaultRequests": {"cpu": "50m", "nvidia.com/gpu": "1"}}},
    ]},
    {"enforce": {"action": "allow", "conditions": LABELLED},
     "mutate": [{"name": "flagged", "workloads": {"targets": ["Pod/initContainers", "Pod/ephemeralContainers"],
                                                   "imagePullPolicy": "Never", "tolerations": [TOLERATION]}}]},
]  # fmt: skip


def box(image: str = "registry.example/app:1", name: str = "c", **fields: Any) -> JSON:
    return {"name": name, "image": image, **fields}


HARDENED = {"allowPrivilegeEscalation": False}
SPECS: list[JSON] = [
    {"containers": [box()]},
    {"containers": [box(securityContext=HARDENED, imagePullPolicy="IfNotPresent")]},
    {"containers": [box("nginx"), box("busybox:1.36", "b"), box("quay.io/x/y:1", "q")]},
    {"containers": [box(imagePullPolicy="Never")], "initContainers": [box("quay.io/i:1", "i")]},
    {"containers": [box("registry.example/app@sha256:" + "a" * 64), box("index.docker.io/library/busybox", "d")]},
    {"containers": [box(securityContext={"privileged": True, "capabilities": {"add": ["NET_ADMIN", "chown"]}})]},
    {"containers": [box(ports=[{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}])], "hostPID": True},
    {"containers": [box()], "hostNetwork": True, "hostIPC": True, "volumes": [
        {"name": "a", "hostPath": {"path": "//etc/./kubernetes/"}}, {"name": "b", "hostPath": {"path": "/data/x"}},
        {"name": "c", "emptyDir": {}}, {"name": "d", "hostPath": {"path": "/"}}]},
    {"containers": [box(resources={"limits": {"cpu": "1", "memory": "1Gi"}})]},
    {"containers": [box(resources={"limits": {"memory": "2Gi"}, "requests": {"cpu": "50m"}})]},
    {"containers": [box(resources={"requests": {"cpu": "0", "memory": "0"}})]},
    {"containers": [box(resources={"limits": {"memory": "huge"}, "requests": {"cpu": "3"}})]},
    {"containers": [box(resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}})]},
    {"containers": [box(resources={"limits": {"cpu": "1", "memory": "1Gi"}}), box(name="two")],
     "initContainers": [box(name="init", resources={"limits": {"cpu": "1", "memory": "1Gi"}})]},
    {"containers": [box()], "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
    {"containers": [box(resources={"requests": {"memory": "512Mi"}, "limits": {"memory": "100Mi"}})]},
    {"containers": [box()], "nodeSelector": {"pool": "tenant", "zone": "b"}, "tolerations": [
        TOLERATION, {"key": "gpu", "operator": "Exists"}, {"key": "node.kubernetes.io/not-ready",
                                                           "operator": "Exists", "effect": "NoExecute"}]},
    {"containers": [box()], "schedulerName": "tenant-scheduler", "priorityClassName": "system-critical",
     "runtimeClassName": "runc"},
    {"containers": [box()], "priority": 0, "preemptionPolicy": "PreemptLowerPriority"},
    {"containers": [box()], "schedulerName": "default-scheduler", "priorityClassName": "low",
     "runtimeClassName": "gvisor", "nodeSelector": {"pool": "other"}},
    {"containers": [box(imagePullPolicy="Always", resources={"requests": {"cpu": "10m"}})],
     "ephemeralContainers": [box("nginx", "dbg", securityContext={"privileged": True},
                                 resources={"limits": {"memory": "9Gi"}})]},
    {"containers": [box(image=""), {"name": "noimage"}]},
    {"containers": [box(resources={"limits": {"cpu": "100m"}, "requests": {"cpu": "10m", "memory": "64Mi"}})],
     "tolerations": [TOLERATION]},
    {},
    # shapes that are not Kubernetes Pods: a bad request naming the field
    {"containers": "c"},
    {"containers": [box(securityContext="privileged")]},
    {"containers": [box(resources={"limits": ["1Gi"]})]},
    {"containers": [{"name": "c", "image": 7}]},
    {"containers": [box(securityContext={"capabilities": {"add": "NET_ADMIN"}})]},
    {"containers": [box(ports={"hostPort": 1})]},
    {"containers": [box()], "nodeSelector": ["pool"]},
    {"containers": [box()], "volumes": {"name": "v"}},
]  # fmt: skip

RESOURCES = {
    "Pod": ("", "pods"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "ReplicationController": ("", "replicationcontrollers"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
}


def workload(kind: str, spec: JSON, labels: dict[str, str] | None = None, replicas: int = 1) -> JSON:
    meta = {"name": kind.lower(), "namespace": NS, "labels": labels or {}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    if kind == "CronJob":
        return {"kind": kind, "metadata": meta, "spec": {"jobTemplate": {"spec": {"template": template}}}}
    return {"kind": kind, "metadata": meta, "spec": {"replicas": replicas, "template": template}}


def pod_request(kind: str, obj: JSON, old: JSON | None = None, sub_resource: str = "") -> AdmissionRequest:
    group, resource = RESOURCES[kind]
    extra: dict[str, Any] = {"sub_resource": sub_resource} if sub_resource else {}
    operation = "UPDATE" if old is not None else "CREATE"
    return request(ALICE, operation, obj, old, namespace=NS, resource=resource, kind=kind, group=group, **extra)


def outcome(review: Review) -> tuple[Any, ...]:
    return (list(review.findings), review.malformed, review.asked())


def assert_same(rules: list[dict[str, Any]], requests: list[AdmissionRequest], budgets: bool = False) -> int:
    """The plan and the reference agree on every request (findings, bad requests, rules asked, patches)."""
    views = [BudgetView(namespace=NS, name="b", selector={"matchLabels": {"app": "x"}})] if budgets else None
    state = state_with(*(rule(index, **body) for index, body in enumerate(rules)), budgets=views)
    compiled = state.rule_set(NS)
    for one in requests:
        planned, reference = Review(one, compiled), Review(one, compiled)
        workloads.judge(planned)
        reference_judge(reference)
        assert outcome(planned) == outcome(reference), (one.kind, one.operation, one.obj)
        patched, expected = Review(one, compiled, mutating=True), Review(one, compiled, mutating=True)
        assert mutation_patch(patched) == reference_patch(expected), one.obj
        assert patched.asked() == expected.asked()
    return len(requests)


def catalogue_requests() -> list[AdmissionRequest]:
    found = []
    for kind, (position, spec) in itertools.product(KINDS, enumerate(SPECS)):
        if kind != "Pod" and position % 3:
            continue  # every spec as a Pod, a third of them as each controller kind
        labels = {"flag": "1"} if position % 2 else None
        obj = workload(kind, copy.deepcopy(spec), labels, replicas=1 + position % 3)
        found.append(pod_request(kind, obj))
        before = workload(kind, copy.deepcopy(SPECS[(position + 5) % len(SPECS)]), labels)
        found.append(pod_request(kind, obj, before))
        found.append(pod_request(kind, obj, copy.deepcopy(obj)))
    debug = workload("Pod", copy.deepcopy(next(spec for spec in SPECS if "ephemeralContainers" in spec)))
    found.append(pod_request("Pod", debug, workload("Pod", copy.deepcopy(SPECS[0])), "ephemeralcontainers"))
    return found


def test_every_rule_alone_and_all_together_judge_as_the_reference() -> None:
    requests = catalogue_requests()
    checked = assert_same(RULES, requests, budgets=True)
    for body in RULES:
        checked += assert_same([body], requests)
    assert checked > 3000


def test_rules_in_reverse_order_and_in_pairs_judge_as_the_reference() -> None:
    requests = catalogue_requests()[::7]
    assert_same(list(reversed(RULES)), requests)
    for first, second in itertools.combinations(range(len(RULES)), 2):
        if (first + second) % 4 == 0:
            assert_same([RULES[first], RULES[second]], requests)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chosen=st.lists(st.integers(0, len(RULES) - 1), min_size=1, max_size=8),
    specs=st.lists(st.integers(0, len(SPECS) - 1), min_size=1, max_size=3),
    kind=st.sampled_from(KINDS),
    labelled=st.booleans(),
)
def test_random_rules_and_pod_specs_judge_as_the_reference(
    chosen: list[int], specs: list[int], kind: str, labelled: bool
) -> None:
    # one spec made of the containers of several, so lists and positions mix
    spec: JSON = {}
    for position in specs:
        for key, value in copy.deepcopy(SPECS[position]).items():
            if isinstance(value, list) and isinstance(spec.get(key), list):
                spec[key] += value
            else:
                spec[key] = value
    labels = {"flag": "1"} if labelled else None
    obj = workload(kind, spec, labels, replicas=3)
    old = workload(kind, copy.deepcopy(SPECS[specs[0]]), labels)
    assert_same([RULES[i] for i in chosen], [pod_request(kind, obj), pod_request(kind, obj, old)], budgets=labelled)

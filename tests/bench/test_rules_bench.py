"""Tenant-rules benchmark, printed as one table (on demand: ``tox -e bench`` or ``pytest tests/bench -s``).

1. ``/resources`` direct over HTTPS: a Pod CREATE by a tenant user in a namespace with 1, 10 and 50 applicable
   rules, each with a CEL condition, at concurrency 1 and 32; next to them, loaded in the same interleaved
   rounds, the ``/namespaces`` handler and aiohttp's bare allow (the floor), so the targets are read as ratios
   measured in the same minute (this host's speed swings twofold from one minute to the next).
2. Pod creation through kube-apiserver by a tenant user with the resources hooks and without them, in
   alternating blocks (without the hooks the user sends the managed label the mutating hook would add: the
   same object is stored either way), and kube-apiserver's own timing of each hook.

3. Issue 13's row (``-k workload``): a Pod of 5 containers against 10 workload rules and 3 workload mutations,
   both hooks direct at c=1 and c=32 (one replica and the chart's two), then Pod creation through
   kube-apiserver with and without the hooks (the user's Pod with them, the mutated Pod without: the same
   object is stored). Target: handler p99 at c=32 at most 5 ms, end-to-end overhead at the median at most 5 ms.

Targets, shown: handler p99 at c=32 with 10 rules at most 1.5x the ``/namespaces`` handler's and below the floor's;
under 5 ms on a quiet host; end-to-end overhead at the median under 5 ms. Asserted under ``tox -e bench``
(:mod:`sizes`; elsewhere a smoke size runs and nothing is judged), as ratios within one run: 10 rules' p99 below the
floor's, and their server CPU per review under 1.5x ``/namespaces``' (the steady form of the p99 ratio, which
moves with the host); the workload row's CPU per review under ``WORKLOAD_CPU_RATIO`` times ``/namespaces``'.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from enclave_core.api.meta import Entity
from enclave_core.api.rules import AppliedRule
from enclave_core.snapshots.rules import NamespaceRules, RulesSnapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from admission.harness import Enclave, metric_value
from loadgen import address_of, closed_loop, percentile
from sizes import Budget, enforce, sized
from test_admission_bench import Sample, Variant, floor_servers, review, run, webhook_calls

from enclave_testing.names import unique
from enclave_testing.waiting import poll

RULE_COUNTS = sized((1, 10, 50), (10,))
REQUESTS = sized({1: 1500, 32: 8000}, {1: 50, 32: 200})
ROUNDS = sized(3, 1)
E2E_ROUNDS = sized(2, 1)
E2E_BLOCK = sized(40, 3)
DECISIONS = sized(2000, 50)
"""In-process decisions per timed round of the workload row."""
WORKLOAD_CPU_RATIO = 2.5
"""Server CPU per review of the workload row over ``/namespaces``' in the same rounds (1.5x to 1.9x measured)."""
GROUP = "enclave.dev"
PROBE_LABEL = "bench.enclave.dev/managed"
RESOURCES_HOOKS = ("resources.enclave.dev", "resources.mutate.enclave.dev")


def bench_rules(count: int, tenant: str) -> list[AppliedRule]:
    """``count`` rules that all apply to the bench Pod (a true CEL condition each) and all admit it: the worst
    case for a request, every rule evaluated, none short-circuiting the rest. The first is the managed label."""
    rules = []
    for index in range(count):
        if index == 0:
            enforce: dict[str, Any] = {
                "action": "allow",
                "metadata": [{"kinds": ["Pod"], "labels": {PROBE_LABEL: {"managed": "yes"}}}],
            }
        elif index % 2:
            enforce = {
                "action": "deny",
                "metadata": [{"kinds": ["Pod"], "labels": {f"forbidden-{index}": {"values": [{"exp": "x.*"}]}}}],
            }
        else:
            enforce = {
                "action": "allow",
                "metadata": [{"kinds": ["Pod"], "labels": {"app": {"values": [{"exp": "[a-z]+"}]}}}],
            }
        enforce["conditions"] = [
            {"name": "named", "expression": f"object.metadata.name.startsWith('p') && {index} >= 0"}
        ]
        rules.append(
            AppliedRule.model_validate(
                {"enforce": enforce, "origin": {"kind": "Tenant", "name": tenant, "index": index}}
            )
        )
    return rules


def workload_rules(tenant: str) -> list[AppliedRule]:
    """Issue 13's row: 10 workload rules (registries, security, QoS, resources, placement, each with a true CEL
    condition) and 3 workload mutations, for a Pod of 5 containers."""
    policies: list[dict[str, Any]] = [
        {"registries": [{"url": r"^registry\.example/", "pullPolicies": ["IfNotPresent", "Always"]}]},
        {"security": {"privileged": True, "hostNamespaces": True}},
        {"security": {"capabilities": ["NET_ADMIN", "SYS_ADMIN"], "hostPaths": [{"exp": "/etc.*"}]}},
        {"qosClasses": ["BestEffort"]},
        {"resources": {"limits": {"max": {"memory": "4Gi"}}}},
        {"placement": {"nodeSelectorKeys": ["pool"]}},
        {"placement": {"priorityClasses": [{"exact": ["low", "high"]}]}},
        {"security": {"allowPrivilegeEscalation": True}},
        {"registries": [{"url": r"^docker\.io/"}]},
        {"security": {"hostPorts": True}},
    ]
    actions = ["allow", "deny", "deny", "deny", "allow", "allow", "allow", "deny", "deny", "audit"]
    rules = []
    for index, (policy, action) in enumerate(zip(policies, actions, strict=True)):
        enforce = {
            "action": action,
            "workloads": policy,
            "conditions": [{"expression": "object.metadata.name.startsWith('p')"}],
        }
        body: dict[str, Any] = {"enforce": enforce, "origin": {"kind": "Tenant", "name": tenant, "index": index}}
        if index < 3:
            body["mutate"] = [
                [{"workloads": {"nodeSelector": {"pool": "a"}}}],
                [{"workloads": {"imagePullPolicy": "IfNotPresent"}}],
                [{"workloads": {"defaultLimits": {"memory": "256Mi"}}}],
            ][index]
        rules.append(AppliedRule.model_validate(body))
    return rules


def pod_review(namespace: str, owner: str, index: int, containers: int = 1, mutated: bool = True) -> dict[str, Any]:
    resources = {"limits": {"memory": "256Mi"}}
    # The workload row's Pods are hardened as its rules want (no privilege escalation: only an explicit false).
    hardened = {"securityContext": {"allowPrivilegeEscalation": False}} if containers > 1 else {}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{index}", "namespace": namespace, "labels": {"app": "web", PROBE_LABEL: "yes"}},
        "spec": {
            "nodeSelector": {"pool": "a"},
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "registry.example/app:1",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": resources,
                    **hardened,
                }
                for i in range(containers)
            ],
        },
    }
    if not mutated:  # as the user sends it: the workload row's mutations set these
        del pod["spec"]["nodeSelector"]
        for container in pod["spec"]["containers"]:
            del container["imagePullPolicy"], container["resources"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"rules-{index}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": f"p{index}",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": owner, "groups": ["enclave.dev", "system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": True,
        },
    }


def _row(label: str, samples: list[Sample]) -> tuple[str, ...]:
    median = statistics.median
    return (
        label,
        f"{median([s.rate for s in samples]):,.0f}/s",
        f"{median([s.p50 for s in samples]):.2f} ms",
        f"{median([s.p99 for s in samples]):.2f} ms ({', '.join(f'{s.p99:.1f}' for s in samples)})",
        f"{median([s.server_us for s in samples]):.0f} us (waited {median([s.server_wait_us for s in samples]):.0f})",
    )


def handler_rows(
    bench: Enclave, owner: str, tenant: Any, namespaces: dict[int, str]
) -> tuple[list[tuple[str, ...]], list[Budget]]:
    context = bench.ssl_context()
    target = [address_of(bench.admission.webhook_url)]
    pids = [bench.admission.process.popen.pid] if bench.admission.process.popen is not None else []
    variants: list[Variant] = []
    with floor_servers(1) as (floor_targets, floor_pids, floor_context):
        for count in RULE_COUNTS:
            for c in (1, 32):
                reviews = [pod_review(namespaces[count], owner, i) for i in range(REQUESTS[c])]
                variants.append(
                    Variant(
                        f"/resources Pod CREATE, {count} rules, c={c}", target, pids, context, "/resources", reviews, c
                    )
                )
        namespace_reviews = [review("/namespaces", owner, tenant.name, tenant.uid, i) for i in range(REQUESTS[32])]
        variants.append(
            Variant("/namespaces CREATE, c=32", target, pids, context, "/namespaces", namespace_reviews, 32)
        )
        variants.append(
            Variant(
                "floor: aiohttp bare allow, c=32",
                floor_targets,
                floor_pids,
                floor_context,
                "/namespaces",
                namespace_reviews,
                32,
            )
        )
        for variant in variants:
            closed_loop(variant.targets, variant.path, variant.context, variant.reviews[:400], 8)
        samples: list[list[Sample]] = [[] for _ in variants]
        for _ in range(ROUNDS):
            for index, variant in enumerate(variants):
                samples[index].append(run(variant))
    rows = [_row(variant.label, taken) for variant, taken in zip(variants, samples, strict=True)]
    p99 = {
        variant.label: statistics.median([s.p99 for s in taken])
        for variant, taken in zip(variants, samples, strict=True)
    }
    ten = p99["/resources Pod CREATE, 10 rules, c=32"]
    namespaces_p99 = p99["/namespaces CREATE, c=32"]
    floor = p99["floor: aiohttp bare allow, c=32"]
    ratio = ten / namespaces_p99
    rows.append(
        (
            "10 rules c=32 p99 / /namespaces c=32 p99",
            "",
            f"{ratio:.2f}x",
            "",
            f"target <= 1.5x: {'met' if ratio <= 1.5 else 'MISSED'}",
        )
    )
    rows.append(
        (
            "10 rules c=32 p99 / floor c=32 p99",
            "",
            f"{ten / floor:.2f}x",
            "",
            f"target < 1x: {'met' if ten < floor else 'MISSED'}",
        )
    )
    rows.append(("10 rules c=32 p99", "", f"{ten:.2f} ms", "", f"target <= 5 ms: {'met' if ten <= 5 else 'MISSED'}"))
    cpu = {
        variant.label: statistics.median([s.server_us for s in taken])
        for variant, taken in zip(variants, samples, strict=True)
    }
    budgets = [
        Budget("10 rules c=32 p99 / floor c=32 p99", ten / floor, 1.0),
        Budget(
            "10 rules c=32 server CPU per review / /namespaces'",
            cpu["/resources Pod CREATE, 10 rules, c=32"] / cpu["/namespaces CREATE, c=32"],
            1.5,
        ),
    ]
    return rows, budgets


class ResourcesHooks:
    """Takes the resources hooks out of the bench configuration and puts them back, each time waiting until
    kube-apiserver follows (a dry-run Pod gets the managed label only while the mutating hook is called)."""

    def __init__(self, bench: Enclave, api: client.CoreV1Api, namespace: str) -> None:
        self.bench, self.api, self.namespace = bench, api, namespace
        self.custom = client.CustomObjectsApi(bench.kube)
        spec = self.custom.get_cluster_custom_object(GROUP, "v1beta2", "serviceconfigurations", bench.config_name)
        self.admission = spec["spec"]["admission"]

    def _without(self) -> dict[str, Any]:
        result = {**self.admission}
        for side in ("mutating", "validating"):
            result[side] = {
                **self.admission[side],
                "webhooks": [h for h in self.admission[side]["webhooks"] if h["name"] not in RESOURCES_HOOKS],
            }
        return result

    def _called(self) -> bool:
        pod = {"metadata": {"name": unique("probe")}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        created = self.api.create_namespaced_pod(self.namespace, pod, dry_run="All")
        return PROBE_LABEL in (created.metadata.labels or {})

    def set(self, on: bool) -> None:
        admission = self.admission if on else self._without()
        self.custom.patch_cluster_custom_object(
            GROUP, "v1beta2", "serviceconfigurations", self.bench.config_name, {"spec": {"admission": admission}}
        )
        poll(lambda: self._called() == on, what=f"kube-apiserver {'calls' if on else 'skips'} the resources hooks")


def pod_latencies(api: client.CoreV1Api, namespace: str, names: list[str], labels: dict[str, str]) -> list[float]:
    latencies = []
    for name in names:
        body = {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        started = time.perf_counter()
        api.create_namespaced_pod(namespace, body)
        latencies.append(time.perf_counter() - started)
    return latencies


def end_to_end_rows(bench: Enclave, owner: str, namespace: str) -> list[tuple[str, ...]]:
    api = bench.owner(owner)
    hooks = ResourcesHooks(bench, api, namespace)
    poll(hooks._called, what="the resources hooks called")
    pod_latencies(api, namespace, [f"warm-{i}" for i in range(5)], {"app": "web"})
    with_hooks: list[float] = []
    without_hooks: list[float] = []
    calls: dict[str, tuple[float, int]] = {}
    state = True
    for block in range(2 * E2E_ROUNDS):
        on = block % 4 in (0, 3)
        if on != state:
            hooks.set(on)
            state = on
        names = [f"{'with' if on else 'without'}-{block}-{i}" for i in range(E2E_BLOCK)]
        if on:
            before = webhook_calls(bench.kube)
            with_hooks += pod_latencies(api, namespace, names, {"app": "web"})
            after = webhook_calls(bench.kube)
            for name in RESOURCES_HOOKS:
                seconds, count = after.get(name, (0.0, 0))
                base_seconds, base_count = before.get(name, (0.0, 0))
                total_seconds, total_count = calls.get(name, (0.0, 0))
                calls[name] = (total_seconds + seconds - base_seconds, total_count + count - base_count)
        else:
            without_hooks += pod_latencies(api, namespace, names, {"app": "web", PROBE_LABEL: "yes"})
    if not state:
        hooks.set(True)
    with_median, without_median = statistics.median(with_hooks) * 1000, statistics.median(without_hooks) * 1000
    overhead = with_median - without_median
    rows: list[tuple[str, ...]] = []
    for label, values in (("with the resources hooks", with_hooks), ("without them", without_hooks)):
        rows.append(
            (
                f"create Pod via kube-apiserver (10 rules), {label}",
                f"{len(values) / sum(values):,.0f}/s",
                f"{statistics.median(values) * 1000:.2f} ms",
                f"{percentile(values, 0.99) * 1000:.2f} ms",
                "",
            )
        )
    verdict = f"target < 5 ms: {'met' if overhead < 5 else 'MISSED'}"
    rows.append(("end-to-end overhead at the median", "", f"{overhead:.2f} ms", "", verdict))
    for name, (seconds, count) in sorted(calls.items()):
        if count:
            rows.append((f"  {name} as kube-apiserver times it (mean)", "", f"{seconds / count * 1000:.2f} ms", "", ""))
    return rows


def test_rules_benchmark(bench_enclave: Enclave) -> None:
    owner = unique("rules-owner")
    tenant = bench_enclave.tenant(unique("rbench"), owners=[Entity(kind="User", name=owner)])
    core = client.CoreV1Api(bench_enclave.kube)
    namespaces = {count: f"{tenant.name}-r{count}" for count in RULE_COUNTS}
    for name in namespaces.values():
        core.create_namespace({"metadata": {"name": name, "labels": {"enclave.dev/tenant": tenant.name}}})
        client.RbacAuthorizationV1Api(bench_enclave.kube).create_namespaced_role_binding(
            name,
            {
                "metadata": {"name": "bench-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
            },
        )
    bench_enclave.sync()
    bench_enclave.rules(
        RulesSnapshot(
            namespaces=[
                NamespaceRules(
                    namespace=name,
                    tenant=tenant.name,
                    rules=bench_rules(count, tenant.name),
                )
                for count, name in namespaces.items()
            ]
        )
    )
    try:
        rows, budgets = handler_rows(bench_enclave, owner, tenant, namespaces)
        rows += end_to_end_rows(bench_enclave, owner, namespaces[10])
    finally:
        for name in namespaces.values():
            core.delete_namespace(name)
    header = ("measurement", "throughput", "p50", "p99 (each round)", "server CPU/review (run-queue wait) / verdict")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    enforce(*budgets)


# -- issue 13: workload rules ------------------------------------------------------------------------------------

WORKLOAD_ROW = "Pod of 5 containers, 10 workload rules + 3 mutations"
WORKLOAD_REQUESTS = {1: sized(800, 50), 32: REQUESTS[32]}
"""At c=32 as many reviews as issue 22's rows: the tail of this host is stalls of a few milliseconds in which the
server, runnable, waits for a CPU, and every request in flight waits with it (32 at once, 1.07% of 3,000). With
3,000 reviews a round one such stall set the round's p99 where issue 22's 8,000 took three: the rows were not
read by the same rule."""


def workload_pod(name: str, mutated: bool) -> dict[str, Any]:
    """The workload row's Pod as a user sends it (``mutated=False``) or as the mutating hook leaves it."""
    body: dict[str, Any] = pod_review("", "", 0, containers=5, mutated=mutated)["request"]["object"]
    body["metadata"] = {"name": name, "labels": {"app": "web"}}
    return body


class WorkloadHooks(ResourcesHooks):
    """The resources hooks are called when a dry-run Pod comes back with the nodeSelector the mutation sets."""

    def _called(self) -> bool:
        created = self.api.create_namespaced_pod(self.namespace, workload_pod(unique("probe"), False), dry_run="All")
        return (created.spec.node_selector or {}).get("pool") == "a"


def workload_handler_rows(
    bench: Enclave, control_plane: Any, owner: str, tenant: Any, namespace: str
) -> tuple[list[tuple[str, ...]], list[Budget]]:
    """Both hooks on the workload row at c=1 and c=32, against one replica and the chart's default of two, beside
    ``/namespaces`` and the floor in the same interleaved rounds."""
    second = bench.admission_replica(control_plane)
    try:
        poll(
            lambda: (metric_value(second.probe_url, "enclave_admission_snapshot_revision", 'kind="Rules"') or 0) > 0,
            what="the rules at the second replica",
        )
        context = bench.ssl_context()
        replicas = [bench.admission, second]
        pids = [r.process.popen.pid for r in replicas if r.process.popen is not None]
        variants: list[Variant] = []
        with floor_servers(1) as (floor_targets, floor_pids, floor_context):
            for path, mutated in (("/resources", True), ("/resources/mutate", False)):
                for count, c in ((1, 1), (1, 32), (2, 32)):
                    reviews = [
                        pod_review(namespace, owner, i, containers=5, mutated=mutated)
                        for i in range(WORKLOAD_REQUESTS[c])
                    ]
                    targets = [address_of(r.webhook_url) for r in replicas[:count]]
                    label = f"{path} {WORKLOAD_ROW}, c={c}, {count} replica{'s' if count > 1 else ''}"
                    variants.append(Variant(label, targets, pids[:count], context, path, reviews, c))
            namespace_reviews = [
                review("/namespaces", owner, tenant.name, tenant.uid, i) for i in range(WORKLOAD_REQUESTS[32])
            ]
            target = [address_of(bench.admission.webhook_url)]
            variants.append(
                Variant(
                    "/namespaces CREATE, c=32, 1 replica",
                    target,
                    pids[:1],
                    context,
                    "/namespaces",
                    namespace_reviews,
                    32,
                )
            )
            variants.append(
                Variant(
                    "floor: aiohttp bare allow, c=32",
                    floor_targets,
                    floor_pids,
                    floor_context,
                    "/namespaces",
                    namespace_reviews,
                    32,
                )
            )
            for variant in variants:
                closed_loop(variant.targets, variant.path, variant.context, variant.reviews[:400], 8)
            samples: list[list[Sample]] = [[] for _ in variants]
            for _ in range(ROUNDS):
                for index, variant in enumerate(variants):
                    samples[index].append(run(variant))
    finally:
        second.process.stop()
    rows = [_row(variant.label, taken) for variant, taken in zip(variants, samples, strict=True)]
    for variant, taken in zip(variants, samples, strict=True):
        if variant.path.startswith("/resources") and variant.concurrency == 32:
            p99 = statistics.median([s.p99 for s in taken])
            rows.append(
                (
                    f"  {variant.label} p99",
                    "",
                    f"{p99:.2f} ms",
                    "",
                    f"target <= 5 ms: {'met' if p99 <= 5 else 'MISSED'}",
                )
            )
    cpu = {
        variant.label: statistics.median([s.server_us for s in taken])
        for variant, taken in zip(variants, samples, strict=True)
    }
    namespaces_cpu = cpu["/namespaces CREATE, c=32, 1 replica"]
    budgets = [
        Budget(f"{label} server CPU per review / /namespaces'", cpu[label] / namespaces_cpu, WORKLOAD_CPU_RATIO)
        for label in cpu
        if label.startswith("/resources") and label.endswith("c=32, 1 replica")
    ]
    return rows, budgets


def workload_decision_rows(owner: str, tenant: str, namespace: str) -> list[tuple[str, ...]]:
    """The decision alone in this process (the bench env's compiled wheel) on pre-parsed reviews: CPU per review
    by ``time.process_time``, best of three rounds, the steady figure on a shared host (the server's own CPU per
    review above adds the HTTP server, parsing the review and answering it)."""
    from enclave_admission.review import AdmissionRequest
    from enclave_admission.rules.mutation import mutate
    from enclave_admission.rules.validation import validate
    from enclave_admission.state import State
    from enclave_core.api.configuration import ServiceConfigurationSpec
    from enclave_core.snapshots.configuration import effective
    from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView

    state = State()
    state.set_config(effective("default", 1, ServiceConfigurationSpec.model_validate({})))
    owners = [Entity(kind="User", name=owner)]
    state.set_tenancy(
        TenancySnapshot(tenants=[TenantView(name=tenant, uid="u", owners=owners, namespaces=[namespace])])
    )
    rules = workload_rules(tenant)
    state.set_rules(RulesSnapshot(namespaces=[NamespaceRules(namespace=namespace, tenant=tenant, rules=rules)]))
    rows: list[tuple[str, ...]] = []
    for label, decide, mutated in (("/resources", validate, True), ("/resources/mutate", mutate, False)):
        requests = [
            AdmissionRequest.from_review(pod_review(namespace, owner, i, containers=5, mutated=mutated))
            for i in range(100)
        ]
        decision = decide(requests[0], state)
        assert decision.allowed, decision
        assert mutated or decision.patch, decision
        rounds = []
        for _ in range(3):
            started = time.process_time()
            for index in range(DECISIONS):
                decide(requests[index % 100], state)
            rounds.append((time.process_time() - started) / DECISIONS * 1e6)
        rows.append((f"{label} {WORKLOAD_ROW}: the decision in-process", "", "", "", f"{min(rounds):.1f} us"))
    return rows


def workload_end_to_end_rows(bench: Enclave, owner: str, namespace: str) -> list[tuple[str, ...]]:
    """Pod creation through kube-apiserver with the resources hooks and without them, alternating blocks;
    without them the user sends the Pod as the mutations would leave it (the same object is stored)."""
    api = bench.owner(owner)
    hooks = WorkloadHooks(bench, api, namespace)
    poll(hooks._called, what="the resources hooks called")

    def create(names: list[str], mutated: bool) -> list[float]:
        latencies = []
        for name in names:
            body = workload_pod(name, mutated)
            started = time.perf_counter()
            api.create_namespaced_pod(namespace, body)
            latencies.append(time.perf_counter() - started)
        return latencies

    create([f"warm-{i}" for i in range(5)], False)
    with_hooks: list[float] = []
    without_hooks: list[float] = []
    calls: dict[str, tuple[float, int]] = {}
    state = True
    for block in range(2 * E2E_ROUNDS):
        on = block % 4 in (0, 3)
        if on != state:
            hooks.set(on)
            state = on
        names = [f"{'with' if on else 'without'}-{block}-{i}" for i in range(E2E_BLOCK)]
        if on:
            before = webhook_calls(bench.kube)
            with_hooks += create(names, False)
            after = webhook_calls(bench.kube)
            for name in RESOURCES_HOOKS:
                seconds, count = after.get(name, (0.0, 0))
                base_seconds, base_count = before.get(name, (0.0, 0))
                total_seconds, total_count = calls.get(name, (0.0, 0))
                calls[name] = (total_seconds + seconds - base_seconds, total_count + count - base_count)
        else:
            without_hooks += create(names, True)
    if not state:
        hooks.set(True)
    overhead = (statistics.median(with_hooks) - statistics.median(without_hooks)) * 1000
    rows: list[tuple[str, ...]] = []
    for label, values in (("with the resources hooks", with_hooks), ("without them", without_hooks)):
        rows.append(
            (
                f"create the {WORKLOAD_ROW} Pod via kube-apiserver, {label}",
                f"{len(values) / sum(values):,.0f}/s",
                f"{statistics.median(values) * 1000:.2f} ms",
                f"{percentile(values, 0.99) * 1000:.2f} ms",
                "",
            )
        )
    verdict = f"target <= 5 ms: {'met' if overhead <= 5 else 'MISSED'}"
    rows.append(("end-to-end overhead at the median", "", f"{overhead:.2f} ms", "", verdict))
    for name, (seconds, count) in sorted(calls.items()):
        if count:
            rows.append((f"  {name} as kube-apiserver times it (mean)", "", f"{seconds / count * 1000:.2f} ms", "", ""))
    return rows


def test_workload_rules_benchmark(bench_enclave: Enclave, control_plane: Any) -> None:
    """Issue 13's row: a Pod of 5 containers against 10 workload rules and 3 mutations (``-k workload``)."""
    owner = unique("workload-owner")
    tenant = bench_enclave.tenant(unique("wbench"), owners=[Entity(kind="User", name=owner)])
    core = client.CoreV1Api(bench_enclave.kube)
    namespace = f"{tenant.name}-w"
    core.create_namespace({"metadata": {"name": namespace, "labels": {"enclave.dev/tenant": tenant.name}}})
    client.RbacAuthorizationV1Api(bench_enclave.kube).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "bench-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
        },
    )
    bench_enclave.sync()
    bench_enclave.rules(
        RulesSnapshot(
            namespaces=[NamespaceRules(namespace=namespace, tenant=tenant.name, rules=workload_rules(tenant.name))]
        )
    )
    try:
        rows, budgets = workload_handler_rows(bench_enclave, control_plane, owner, tenant, namespace)
        rows += workload_decision_rows(owner, tenant.name, namespace)
        rows += workload_end_to_end_rows(bench_enclave, owner, namespace)
    finally:
        core.delete_namespace(namespace)
    header = ("measurement", "throughput", "p50", "p99 (each round)", "server CPU/review (run-queue wait) / verdict")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    enforce(*budgets)

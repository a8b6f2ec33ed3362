"""Native rules against the webhook (issue 34), printed as one table (on demand: ``tox -e bench -- tests/bench/
test_native_bench.py``, or ``pytest tests/bench/test_native_bench.py -s`` at the smoke size).

Pod creation through kube-apiserver by a tenant owner, the same Pod every time, in one run:

* **native**: ``spec.rules.engine: native``, the namespace's 10 rules compiled to ValidatingAdmissionPolicies
  and the namespace labelled ``enclave.dev/native-rules``, so kube-apiserver evaluates them in-process and calls
  neither of Enclave's ``resources`` hooks (admission's request counter is read around these rows: it must not
  move);
* **webhook**: ``engine: webhook``, the same namespace and rules judged by ``/resources/mutate`` and
  ``/resources`` over HTTPS;
* **no rules**: a namespace in no tenant (no hook, no policy), the owner given ``edit`` there: the floor.

Engines alternate by round (webhook, native, native, webhook, ...), each round measuring concurrency 1 and 8
and the floor beside them, so a row is compared with the floor of its own minute. The 10 rules all apply to the
Pod (a CEL condition each, true) and all admit it: every rule is evaluated on every request.

Within a round the tenant namespace and the floor alternate in blocks (A B B A ...), and each block also reads
kube-apiserver's own timing of its admission phase (``apiserver_admission_step_admission_duration_seconds``,
CREATE, every plugin's mutating and validating steps), so every path has a client latency and an admission time
per create, and an overhead of each over the floor.

Target (the issue's): the native path's overhead at most a quarter of the webhook's, at c=1 and at c=8. Shown
for the client's median; asserted under ``tox -e bench`` (:mod:`sizes`) for kube-apiserver's admission time per
create, the overhead itself without the client's and the storage's share (on two shared cores, the client's
median at c=8 is mostly the run queue).
"""

from __future__ import annotations

import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import NATIVE_RULES_LABEL, NATIVE_RULES_TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import percentile
from sizes import Budget, enforce, sized

RULES = 10
CONCURRENCY = (1, 8)
PODS = sized({1: 120, 8: 320}, {1: 8, 8: 32})
"""Pods created per row and round, in :data:`BLOCKS` blocks alternating with the floor's."""
BLOCKS = sized(4, 2)
ROUNDS = sized(4, 2)
"""Rounds, the engines alternating (webhook, native, native, webhook, ...)."""
WARM = sized(10, 2)
GROUP, VERSION = "enclave.dev", "v1beta2"
USERS = "enclave.dev"
TARGET = 0.25


def bench_rules() -> list[dict[str, Any]]:
    """10 rules on Pods, each with a true CEL condition, all admitting the bench Pod; none left on the webhook."""
    rules = []
    for index in range(RULES):
        if index % 2:
            labels: dict[str, Any] = {f"forbidden-{index}": {"values": [{"exp": "x.*"}]}}
            action = "deny"
        else:
            labels = {"app": {"values": [{"exp": "[a-z]+"}]}}
            action = "allow"
        rules.append(
            {
                "enforce": {
                    "action": action,
                    "metadata": [{"kinds": ["Pod"], "labels": labels}],
                    "conditions": [
                        {"name": "named", "expression": f"object.metadata.name.startsWith('p') && {index} >= 0"}
                    ],
                }
            }
        )
    return rules


@pytest.fixture(scope="module")
def tenancy(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    stack = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}])
    try:
        yield stack
    finally:
        stack.close()


class Bench:
    """The tenant, its namespace, the floor's namespace, and the engine switch."""

    def __init__(self, stack: TenancyStack, impersonate: Callable[..., Any]) -> None:
        self.stack, self.impersonate = stack, impersonate
        self.kube = stack.kube
        self.owner = unique("nbench")
        self.tenant = unique("nbench")
        stack.tenant(self.tenant, [{"kind": "User", "name": self.owner}], rules=bench_rules())
        self.namespace = f"{self.tenant}-a"
        create_namespace(impersonate(self.owner, [USERS]), self.namespace)
        self.plain = unique("nbench-plain")
        core, rbac = client.CoreV1Api(self.kube), client.RbacAuthorizationV1Api(self.kube)
        core.create_namespace({"metadata": {"name": self.plain}})
        subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.owner}
        rbac.create_namespaced_role_binding(
            self.plain,
            {
                "metadata": {"name": "bench-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [subject],
            },
        )
        custom = client.CustomObjectsApi(self.kube)

        def compiled() -> bool:
            try:
                status = custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "rulestatuses", "default"
                ).get("status")
            except ApiException:
                return False
            return bool(status) and status.get("size") == RULES

        poll(compiled, timeout=60, what="the namespace's 10 rules compiled")
        poll(
            lambda: any(b.role_ref.name == "admin" for b in rbac.list_namespaced_role_binding(self.namespace).items),
            what="the owner's admin RoleBinding",
        )
        self.admission = next(running for running in stack.processes if running.spec.name == "admission")

    def engine(self, engine: str) -> None:
        """Switch the engine and wait until kube-apiserver's path follows: the label and the policies there
        (native), or both gone and a forbidden Pod refused by the webhook (webhook)."""
        client.CustomObjectsApi(self.kube).patch_cluster_custom_object(
            GROUP, VERSION, "serviceconfigurations", self.stack.config_name, {"spec": {"rules": {"engine": engine}}}
        )
        core = client.CoreV1Api(self.kube)
        registrations = client.AdmissionregistrationV1Api(self.kube)
        selector = f"{NATIVE_RULES_TENANT_LABEL}={self.tenant}"

        def labelled() -> bool:
            return NATIVE_RULES_LABEL in (core.read_namespace(self.namespace).metadata.labels or {})

        if engine == "native":
            poll(labelled, timeout=60, what="the native-rules label")
        else:
            poll(lambda: not labelled(), timeout=60, what="the native-rules label removed")
            poll(
                lambda: not registrations.list_validating_admission_policy(label_selector=selector).items,
                timeout=60,
                what="the tenant's policies removed",
            )
        owner = client.CoreV1Api(self.impersonate(self.owner, [USERS]))
        forbidden = {
            "metadata": {"name": unique("p-probe"), "labels": {"app": "web", "forbidden-1": "xx"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }

        def refused() -> bool:
            try:
                owner.create_namespaced_pod(self.namespace, forbidden, dry_run="All")
            except ApiException as err:
                body = str(err.body)
                return ("ValidatingAdmissionPolicy" in body) == (engine == "native") and "forbidden-1" in body
            return False

        poll(refused, timeout=60, what=f"the {engine} path refusing a forbidden Pod")

    def webhook_calls(self) -> float:
        with urllib.request.urlopen(f"{self.admission.probe_url}/metrics", timeout=5) as answer:
            lines = answer.read().decode().splitlines()
        wanted = {f'enclave_admission_requests_total{{path="{p}"}}' for p in ("/resources", "/resources/mutate")}
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[0] in wanted)

    def create(self, namespace: str, concurrency: int, count: int, tag: str) -> tuple[float, list[float]]:
        """(wall seconds, each create's seconds) for ``count`` Pods at ``concurrency``, one client per worker."""
        apis = [client.CoreV1Api(self.impersonate(self.owner, [USERS])) for _ in range(concurrency)]
        names = [f"p-{tag}-{index}" for index in range(count)]

        def worker(position: int) -> list[float]:
            latencies = []
            for name in names[position::concurrency]:
                body = {
                    "metadata": {"name": name, "labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]},
                }
                started = time.perf_counter()
                apis[position].create_namespaced_pod(namespace, body)
                latencies.append(time.perf_counter() - started)
            return latencies

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(worker, range(concurrency)))
        wall = time.perf_counter() - started
        client.CoreV1Api(self.kube).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        return wall, [latency for result in results for latency in result]


STEP = "apiserver_admission_step_admission_duration_seconds"


POLICY_CHECK = "apiserver_validating_admission_policy_check_duration_seconds"


def metric_total(kube: Any, name: str) -> tuple[float, int]:
    """(sum, count) of histogram ``name`` over all its label sets, from kube-apiserver's /metrics."""
    text = kube.call_api("GET", f"{kube.configuration.host}/metrics").read().decode()
    seconds, count = 0.0, 0
    for line in text.splitlines():
        metric, _, value = line.rpartition(" ")
        if metric.startswith(name + "_sum"):
            seconds += float(value)
        elif metric.startswith(name + "_count"):
            count += int(float(value))
    return seconds, count


def admission_steps(kube: Any) -> tuple[float, int]:
    """kube-apiserver's own account of its admission phase for CREATEs: (seconds in all steps, mutating and
    validating, of every plugin; validating steps counted, one per request)."""
    text = kube.call_api("GET", f"{kube.configuration.host}/metrics").read().decode()
    seconds, count = 0.0, 0
    for line in text.splitlines():
        metric, _, value = line.rpartition(" ")
        if not metric.startswith(STEP) or 'operation="CREATE"' not in metric:
            continue
        if metric.startswith(STEP + "_sum{"):
            seconds += float(value)
        elif metric.startswith(STEP + "_count{") and 'type="validate"' in metric:
            count += int(float(value))
    return seconds, count


def test_native_rules_benchmark(tenancy: TenancyStack, impersonate: Callable[..., Any]) -> None:
    bench = Bench(tenancy, impersonate)
    kube = bench.kube
    samples: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], float] = {}
    steps: dict[tuple[str, int], tuple[float, int]] = {}
    native_calls = 0.0
    checks = (0.0, 0)
    try:
        for round_index in range(ROUNDS):
            engine = "native" if round_index % 4 in (1, 2) else "webhook"
            bench.engine(engine)
            bench.create(bench.namespace, 1, WARM, f"warm{round_index}")
            bench.create(bench.plain, 1, WARM, f"warm{round_index}")
            for concurrency in CONCURRENCY:
                block = PODS[concurrency] // BLOCKS
                # Blocks alternate A B B A ...: a host whose load drifts within the row weighs on both alike.
                for position in range(2 * BLOCKS):
                    tenant_first = position % 4 in (0, 3)
                    path, namespace = (engine, bench.namespace) if tenant_first else ("no rules", bench.plain)
                    calls = bench.webhook_calls()
                    spent, counted = admission_steps(kube)
                    checked_before = metric_total(kube, POLICY_CHECK)
                    tag = f"{round_index}-{concurrency}-{position}"
                    wall, latencies = bench.create(namespace, concurrency, block, tag)
                    key = (path, concurrency)
                    after, total = admission_steps(kube)
                    seconds, count = steps.get(key, (0.0, 0))
                    steps[key] = (seconds + after - spent, count + total - counted)
                    if path == "native":
                        native_calls += bench.webhook_calls() - calls
                        checked = metric_total(kube, POLICY_CHECK)
                        checks = (
                            checks[0] + checked[0] - checked_before[0],
                            checks[1] + checked[1] - checked_before[1],
                        )
                    samples.setdefault(key, []).extend(latencies)
                    walls[key] = walls.get(key, 0.0) + wall
    finally:
        bench.engine("webhook")
    rows: list[tuple[str, ...]] = []
    budgets = []
    verdicts = []
    for concurrency in CONCURRENCY:
        floor = statistics.median(samples[("no rules", concurrency)]) * 1000
        floor_seconds, floor_count = steps[("no rules", concurrency)]
        floor_step = floor_seconds / max(floor_count, 1) * 1000
        latency: dict[str, float] = {}
        work: dict[str, float] = {}
        for path in ("no rules", "webhook", "native"):
            values = samples[(path, concurrency)]
            median = statistics.median(values) * 1000
            seconds, count = steps[(path, concurrency)]
            per_create = seconds / max(count, 1) * 1000
            latency[path], work[path] = median - floor, per_create - floor_step
            label = "create Pod, no rules (floor)" if path == "no rules" else f"create Pod, 10 rules, {path}"
            rows.append(
                (
                    label,
                    str(concurrency),
                    f"{len(values) / walls[(path, concurrency)]:,.0f}/s",
                    f"{median:.2f} ms",
                    f"{percentile(values, 0.99) * 1000:.2f} ms",
                    f"{per_create:.2f} ms",
                    "" if path == "no rules" else f"{latency[path]:+.2f} / {work[path]:+.2f} ms",
                )
            )
        ratio = max(work["native"], 0.0) / max(work["webhook"], 1e-9)
        budgets.append(Budget(f"native admission overhead / webhook's at c={concurrency}", ratio, TARGET))
        shown = max(latency["native"], 0.0) / max(latency["webhook"], 1e-9)
        verdicts.append(
            f"target native p50 overhead <= {TARGET:g} x webhook's at c={concurrency}: {shown:.2f} "
            f"({'met' if shown <= TARGET else 'MISSED'})"
        )
    header = ("measurement", "c", "throughput", "p50", "p99", "admission/create", "overhead p50 / admission")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"admission's /resources and /resources/mutate requests during the native rows: {native_calls:.0f}")
    if checks[1]:
        print(
            f"native: kube-apiserver's own timing of the policy's evaluation ({POLICY_CHECK}): "
            f"{checks[0] / checks[1] * 1000:.3f} ms mean over {checks[1]} checks"
        )
    for verdict in verdicts:
        print(verdict)
    assert native_calls == 0
    enforce(*budgets)

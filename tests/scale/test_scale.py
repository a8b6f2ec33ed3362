"""Scale suite (issue 20): many tenants' namespaces created through the API by impersonated owners.

Run on demand: ``tox -e scale`` (a few minutes). Sizes: ``ENCLAVE_SCALE_TENANTS`` x ``ENCLAVE_SCALE_NAMESPACES``
(default 50 x 4 = 200 namespaces, what a shared 2-core machine affords in minutes; the issue's target is
1,000 x 10 on simulated nodes, not measured here). The tenancy core runs as processes (enclave-config,
enclave-tenants, enclave-admission); ``WORKERS`` owners create at once, each namespace by its tenant's owner.

Printed (never asserted, the machine is shared): time from the last create until every namespace is labelled
(admission's mutation), bound (the owner's RoleBinding from enclave-tenants), reported in its tenant's
status and given its RuleStatus (enclave-tenants); the owners' create latency through kube-apiserver (p50/p99) and admission's own review time from its
histogram; each component's RSS at the end; and API requests per second each component makes over an idle
window once everything converged (target ~0; Lease renewals shown apart).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from enclave_core.snapshots.tenancy import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.procstat import cpu_seconds, requests, rss_bytes
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

TENANTS = int(os.environ.get("ENCLAVE_SCALE_TENANTS", "50"))
NAMESPACES = int(os.environ.get("ENCLAVE_SCALE_NAMESPACES", "4"))
WORKERS = 8
IDLE = 15.0
USERS = "scale-users"
GROUP, VERSION = "enclave.dev", "v1beta2"


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    running = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}])
    try:
        yield running
    finally:
        running.close()


def _pid(running: Any) -> int:
    popen = running.process.popen
    assert popen is not None
    return int(popen.pid)


def _review_buckets(probe_url: str) -> dict[float, float]:
    """Admission's cumulative review-time histogram over its namespace paths: upper bound -> count."""
    with urllib.request.urlopen(f"{probe_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "enclave_admission_request_duration_seconds_bucket" and sample.labels.get(
                "path", ""
            ).startswith("/namespaces"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def _quantile(before: dict[float, float], after: dict[float, float], q: float) -> str:
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] == 0:
        return "n/a"
    for bound, count in zip(bounds, counts, strict=True):
        if count >= q * counts[-1]:
            return f"<= {bound * 1000:g} ms" if bound != float("inf") else "> largest bucket"
    return "n/a"


def test_tenants_and_namespaces_at_scale(stack: TenancyStack) -> None:
    run = unique("sc")
    custom, core = client.CustomObjectsApi(stack.kube), client.CoreV1Api(stack.kube)
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    tenants = [f"{run}-{index:04d}" for index in range(TENANTS)]
    owners = {tenant: f"owner-{tenant}" for tenant in tenants}
    wanted = {f"{tenant}-{index:02d}": tenant for tenant in tenants for index in range(NAMESPACES)}
    components = {running.spec.name: running for running in stack.processes}
    admission = components["admission"]
    try:
        started = time.monotonic()
        for tenant in tenants:
            stack.tenant(tenant, [{"kind": "User", "name": owners[tenant]}])
        tenants_created = time.monotonic() - started

        clients = {tenant: stack.plane.impersonate(owners[tenant], [USERS]) for tenant in tenants}
        latencies: list[float] = []

        def create(name: str) -> None:
            began = time.monotonic()
            create_namespace(clients[wanted[name]], name)
            latencies.append(time.monotonic() - began)

        reviews_before = _review_buckets(admission.probe_url)
        cpu_before = {name: cpu_seconds(_pid(running)) for name, running in components.items()}
        first = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(create, wanted))
        last = time.monotonic()
        reviews_after = _review_buckets(admission.probe_url)

        def labelled() -> bool:
            found = {
                ns.metadata.name: (ns.metadata.labels or {}).get(TENANT_LABEL)
                for ns in core.list_namespace(label_selector=TENANT_LABEL).items
            }
            return all(found.get(name) == tenant for name, tenant in wanted.items())

        def bound() -> bool:
            items = rbac.list_role_binding_for_all_namespaces(
                label_selector="app.kubernetes.io/managed-by=enclave-tenants"
            ).items
            owned = {
                item.metadata.namespace
                for item in items
                if item.metadata.namespace in wanted
                and any(s.name == owners[wanted[item.metadata.namespace]] for s in item.subjects or [])
            }
            return len(owned) == len(wanted)

        def reported() -> bool:
            listed = custom.list_cluster_custom_object(GROUP, VERSION, "tenants")["items"]
            sizes = {t["metadata"]["name"]: (t.get("status") or {}).get("size") for t in listed}
            return all(sizes.get(tenant) == NAMESPACES for tenant in tenants)

        def ruled() -> bool:
            listed = custom.list_cluster_custom_object(GROUP, VERSION, "rulestatuses")["items"]
            return {item["metadata"]["namespace"] for item in listed} >= set(wanted)

        times: dict[str, float] = {}
        checks = (
            ("labelled", labelled),
            ("bound", bound),
            ("in tenant status", reported),
            ("with a RuleStatus", ruled),
        )
        for what, check in checks:
            poll(check, timeout=600, interval=0.5, what=f"every namespace {what}")
            times[what] = time.monotonic() - last
        cpu_after = {name: cpu_seconds(_pid(running)) for name, running in components.items()}

        idle_before = {name: requests(running.probe_url) for name, running in components.items()}
        time.sleep(IDLE)  # the idle window is the measurement
        idle_after = {name: requests(running.probe_url) for name, running in components.items()}

        total = len(wanted)
        ordered = sorted(latencies)
        print(f"\nScale: {TENANTS} tenants x {NAMESPACES} namespaces = {total}, {WORKERS} owners creating at once")
        print(
            f"tenants created in {tenants_created:.1f}s; namespaces created in {last - first:.1f}s "
            f"({total / (last - first):.1f}/s)"
        )
        print(f"{'after the last create, every namespace':<44}{'seconds':>10}")
        for what, seconds in times.items():
            print(f"{what:<44}{seconds:>10.1f}")
        print(
            f"owner's create through kube-apiserver: p50 {statistics.median(ordered) * 1000:.0f} ms, "
            f"p99 {ordered[int(0.99 * (len(ordered) - 1))] * 1000:.0f} ms"
        )
        print(
            f"admission review time (its histogram, /namespaces*): p50 {_quantile(reviews_before, reviews_after, 0.5)}, "
            f"p99 {_quantile(reviews_before, reviews_after, 0.99)}"
        )
        print(f"{'component':<12}{'RSS MB':>9}{'CPU s (run)':>13}{'idle req/s':>12}{'idle lease req/s':>18}")
        for name, running in components.items():
            quiet = idle_after[name] - idle_before[name]
            print(
                f"{name:<12}{rss_bytes(_pid(running)) / 2**20:>9.0f}{cpu_after[name] - cpu_before[name]:>13.1f}"
                f"{(quiet.reads + quiet.writes) / IDLE:>12.2f}{quiet.renewals / IDLE:>18.2f}"
            )
        for name in components:
            quiet = idle_after[name] - idle_before[name]
            busy = {key: count for key, count in quiet.by_kind.items() if not key.endswith(" leases")}
            if busy:
                print(f"idle requests of {name} in {IDLE:g}s: {dict(sorted(busy.items(), key=lambda kv: -kv[1]))}")
    finally:
        for name in wanted:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
        for tenant in tenants:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)

"""Replication benchmark: convergence after a GlobalTenantResource change across 200 namespaces, and API writes
per reconcile in steady state (target: 0, asserted under ``tox -e bench``; elsewhere it runs at a smoke size:
:mod:`sizes`). Printed as a table; never fails on timing.

Run on demand: ``tox -e bench -- tests/bench/test_replication_bench.py`` (about a minute). One tenant with
``NAMESPACES`` namespaces gets a ConfigMap from one GlobalTenantResource; each round changes the ConfigMap's
data in the GlobalTenantResource and times, per namespace, the moment a watch sees the new data there (from
the patch's return). Steady state: with everything converged, the resource is reconciled again and again
(metadata touches and a 2 s resync) and the component's own counters give writes per reconcile.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import statistics
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from sizes import Budget, enforce, sized

from enclave_testing.components import ComponentSpec, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.waiting import poll

NAMESPACES = sized(200, 3)
ROUNDS = sized(3, 1)
TOUCHES = sized(10, 2)
WINDOW = sized(6.0, 2.5)
"""Seconds of steady state measured after the touches: three resync periods (one and a bit when smoke-sized)."""
GROUP, VERSION = "enclave.dev", "v1beta2"
REPLICATION = ComponentSpec("replication", "enclave_replication", grpc=True)


def metric(component: RunningComponent, name: str) -> float:
    """Sum of every sample of ``name`` on the component's /metrics."""
    with urllib.request.urlopen(f"{component.probe_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(text))


@pytest.fixture(scope="module")
def setup(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str]
) -> Iterator[tuple[RunningComponent, str, list[str]]]:
    suffix = secrets.token_hex(3)
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    home = f"bench-home-{suffix}"
    tenant = f"bench-{suffix}"
    core.create_namespace({"metadata": {"name": home}})
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "tenants",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": tenant, "labels": {"bench": tenant}},
        },
    )
    namespaces = [f"{tenant}-{index:03d}" for index in range(NAMESPACES)]
    for name in namespaces:
        core.create_namespace({"metadata": {"name": name, "labels": {"enclave.dev/tenant": tenant}}})
    running = start_component(
        REPLICATION,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={},
        identity=f"bench-{suffix}",
    )
    try:
        yield running, tenant, namespaces
    finally:
        running.process.stop()
        for name in [*namespaces, home]:
            with contextlib.suppress(client.ApiException):
                core.delete_namespace(name)
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def spec(tenant: str, version: str, resync: str = "60s") -> dict[str, Any]:
    item = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench"}, "data": {"version": version}}
    return {
        "tenantSelector": {"matchLabels": {"bench": tenant}},
        "resyncPeriod": resync,
        "resources": [{"rawItems": [item]}],
    }


def converge(core: client.CoreV1Api, namespaces: list[str], version: str, change: Any) -> list[float]:
    """Seconds from ``change()`` returning until each namespace's ConfigMap shows ``version``."""
    listing = core.list_config_map_for_all_namespaces(label_selector="enclave.dev/managed-by=enclave-replication")
    wanted = set(namespaces)
    seen: dict[str, float] = {}
    stream = watch.Watch()
    start = 0.0
    change()
    start = time.monotonic()
    for event in stream.stream(
        core.list_config_map_for_all_namespaces,
        label_selector="enclave.dev/managed-by=enclave-replication",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=120,
    ):
        obj = event["object"]
        namespace = obj.metadata.namespace
        if namespace in wanted and namespace not in seen and (obj.data or {}).get("version") == version:
            seen[namespace] = time.monotonic() - start
            if len(seen) == len(wanted):
                stream.stop()
    assert len(seen) == len(wanted), f"{len(seen)} of {len(wanted)} converged"
    return sorted(seen.values())


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, round(fraction * (len(values) - 1)))]


def test_convergence_and_steady_state_writes(kube: Any, setup: tuple[RunningComponent, str, list[str]]) -> None:
    running, tenant, namespaces = setup
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    name = f"bench-{secrets.token_hex(3)}"
    rows: list[tuple[str, list[float]]] = []
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GlobalTenantResource", "metadata": {"name": name}}
    try:
        rows.append(
            (
                "create (first apply)",
                converge(
                    core,
                    namespaces,
                    "v0",
                    lambda: custom.create_cluster_custom_object(
                        GROUP, VERSION, "globaltenantresources", {**body, "spec": spec(tenant, "v0")}
                    ),
                ),
            )
        )
        for round_ in range(1, ROUNDS + 1):
            version = f"v{round_}"
            patch = {"spec": spec(tenant, version)}
            rows.append(
                (
                    f"change {round_}",
                    converge(
                        core,
                        namespaces,
                        version,
                        lambda p=patch: custom.patch_cluster_custom_object(
                            GROUP, VERSION, "globaltenantresources", name, p
                        ),
                    ),
                )
            )

        def ready() -> bool:
            obj = custom.get_cluster_custom_object(GROUP, VERSION, "globaltenantresources", name)
            status = obj.get("status") or {}
            return (
                status.get("size") == NAMESPACES and status.get("observedGeneration") == obj["metadata"]["generation"]
            )

        poll(ready, timeout=60, what="status caught up")
        # Steady state: reconcile again and again with nothing to change.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, "globaltenantresources", name, {"spec": {"resyncPeriod": "2s"}}
        )
        poll(ready, timeout=60, what="status caught up after the resync change")
        writes_before = metric(running, "enclave_replication_writes_total")
        reconciles_before = metric(running, "enclave_replication_reconciles_total")
        seconds_before = metric(running, "enclave_replication_reconcile_seconds_sum")
        for index in range(TOUCHES):
            touch = {"metadata": {"annotations": {"bench/touch": str(index)}}}
            custom.patch_cluster_custom_object(GROUP, VERSION, "globaltenantresources", name, touch)
            time.sleep(0.5)  # the steady state is the measurement: these sleeps are its window, not waits
        time.sleep(WINDOW)
        reconciles = metric(running, "enclave_replication_reconciles_total") - reconciles_before
        writes = metric(running, "enclave_replication_writes_total") - writes_before
        seconds = metric(running, "enclave_replication_reconcile_seconds_sum") - seconds_before
    finally:
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "globaltenantresources", name)

    print(f"\n\nReplication: one GlobalTenantResource, one ConfigMap into {NAMESPACES} namespaces; seconds from the")
    print("API call returning until a watch sees the new content in each namespace")
    header = f"{'round':<22}{'median':>9}{'p99':>9}{'max':>9}"
    print(header)
    print("-" * len(header))
    for label, values in rows:
        print(f"{label:<22}{statistics.median(values):>9.2f}{percentile(values, 0.99):>9.2f}{max(values):>9.2f}")
    per = writes / reconciles if reconciles else float("nan")
    print(
        f"\nsteady state: {reconciles:.0f} reconciles, {writes:.0f} API writes -> {per:.2f} writes per reconcile "
        f"(target 0); {1000 * seconds / max(reconciles, 1):.0f} ms per reconcile of {NAMESPACES} objects"
    )
    assert reconciles > 0
    enforce(Budget("API writes per reconcile at rest", per, 0.05))

"""Pools benchmark: claim create to Bound, and the controller's API writes per claim, on the real control plane.

100 namespaces selected by one pool with room for every claim; 500 claims created by 16 client threads as fast
as kube-apiserver takes them. A watch (started before the first create) stamps the moment each claim's status
first says Bound; the latency is that stamp minus the moment the create call returned. Writes are the pools
component's own counter (``enclave_pools_writes_total``), read before and after, per kind and operation.

Run on demand: ``tox -e bench -- tests/bench/test_pools_bench.py`` (about a minute); elsewhere at a smoke size
(:mod:`sizes`). Never fails on timing; asserted are the writes per claim (under ``WRITES_PER_CLAIM``: one claim
status, the ledger commits and quota applies shared by a pass).
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client, watch
from sizes import Budget, enforce, sized

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
NAMESPACES, CLAIMS, THREADS = sized(100, 3), sized(500, 6), sized(16, 3)
WRITES_PER_CLAIM = 3.0
"""Budget of the controller's writes per claim (1.49 measured at full size: docs/benchmarks.md)."""
CLAIM_STATUS = '{kind="ResourcePoolClaim",operation="status"}'
POOLS = next(spec for spec in COMPONENTS if spec.name == "pools")


def _writes(component: RunningComponent) -> dict[str, float]:
    """The write counters by kind and operation, plus the process's CPU seconds under ``cpu``."""
    with urllib.request.urlopen(f"{component.probe_url}/metrics", timeout=5) as answer:
        lines = answer.read().decode().splitlines()
    found = {}
    for line in lines:
        if line.startswith("enclave_pools_writes_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.removeprefix("enclave_pools_writes_total")] = float(value)
        elif line.startswith("process_cpu_seconds_total "):
            found["cpu"] = float(line.rsplit(" ", 1)[1])
    return found


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[RunningComponent]:
    namespace = f"enclave-bench-{secrets.token_hex(3)}"
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": namespace}})
    component = start_component(
        POOLS,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=namespace,
        endpoints={},
        identity="pools-bench",
    )
    try:
        yield component
    finally:
        component.process.stop()


def test_claim_create_to_bound(kube: Any, pools: RunningComponent) -> None:
    token = secrets.token_hex(3)
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    names = [f"bench-{token}-{i:03d}" for i in range(NAMESPACES)]
    for name in names:
        core.create_namespace({"metadata": {"name": name, "labels": {"pool-bench": token}}})
    pool = f"bench-{token}"
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourcepools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourcePool",
            "metadata": {"name": pool},
            "spec": {
                "quota": {"hard": {"requests.cpu": str(CLAIMS), "pods": str(CLAIMS * 2)}},
                "selectors": [{"matchLabels": {"pool-bench": token}}],
                "config": {"defaultsZero": True},
            },
        },
    )

    def provisioned() -> bool:
        status = custom.get_cluster_custom_object(GROUP, VERSION, "resourcepools", pool).get("status") or {}
        return status.get("namespaceCount") == NAMESPACES and bool(
            core.list_resource_quota_for_all_namespaces(label_selector=f"enclave.dev/pool={pool}").items
        )

    poll(provisioned, timeout=60, what="pool provisioned")
    poll(
        lambda: (
            len(core.list_resource_quota_for_all_namespaces(label_selector=f"enclave.dev/pool={pool}").items)
            == NAMESPACES
        ),
        timeout=60,
        what="quota in every namespace",
    )
    before = _writes(pools)

    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = threading.Event()
    stream = watch.Watch()

    listed = custom.list_cluster_custom_object(GROUP, VERSION, "resourcepoolclaims", limit=1)
    since = listed["metadata"]["resourceVersion"]  # the watch sees every create after this, however late it opens

    def observe() -> None:
        version = since
        while not done.is_set():
            try:
                for event in stream.stream(
                    custom.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    "resourcepoolclaims",
                    resource_version=version,
                    timeout_seconds=60,
                ):
                    obj = event["object"]
                    meta = obj["metadata"]
                    version = meta.get("resourceVersion", version)
                    if not meta["name"].startswith(f"c-{token}-"):
                        continue
                    condition = (obj.get("status") or {}).get("condition") or {}
                    if condition.get("reason") == "Bound":
                        bound.setdefault(f"{meta['namespace']}/{meta['name']}", time.monotonic())
                        if len(bound) == CLAIMS:
                            done.set()
                            return
            except Exception:  # an expired or broken watch: open it again from the last version seen
                version = ""

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()

    def create(i: int) -> None:
        namespace, name = names[i % NAMESPACES], f"c-{token}-{i:03d}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourcePoolClaim",
            "metadata": {"name": name},
            "spec": {"pool": pool, "claim": {"requests.cpu": "1", "pods": "2"}},
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", body)
        created[f"{namespace}/{name}"] = time.monotonic()

    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as executor:
        list(executor.map(create, range(CLAIMS)))
    create_seconds = time.monotonic() - started
    assert done.wait(120), f"only {len(bound)} of {CLAIMS} claims bound"
    total_seconds = time.monotonic() - started
    with contextlib.suppress(Exception):
        stream.stop()
    poll(  # the last pass's writes land in the counter after the claims say Bound
        lambda: _writes(pools).get(CLAIM_STATUS, 0.0) - before.get(CLAIM_STATUS, 0.0) >= CLAIMS,
        timeout=30,
        what="a status write counted for every claim",
    )
    after = _writes(pools)

    latencies = sorted(max(0.0, bound[key] - created[key]) * 1000 for key in created)
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    deltas = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    cpu = deltas.pop("cpu", 0.0)
    total_writes = sum(deltas.values())
    print()
    print(f"pools: {NAMESPACES} namespaces, {CLAIMS} claims created by {THREADS} threads in {create_seconds:.1f} s")
    print(f"all bound {total_seconds:.1f} s after the first create")
    print("| claim create to Bound | ms |")
    print("| --- | --- |")
    print(f"| median | {p50:.0f} |")
    print(f"| p99 | {p99:.0f} |")
    print(f"| max | {latencies[-1]:.0f} |")
    print()
    print("| controller writes | total | per claim |")
    print("| --- | --- | --- |")
    for key, value in sorted(deltas.items()):
        if value:
            print(f"| {key} | {value:.0f} | {value / CLAIMS:.2f} |")
    print(f"| all | {total_writes:.0f} | {total_writes / CLAIMS:.2f} |")
    print(f"controller CPU: {cpu:.1f} s in all, {cpu / CLAIMS * 1000:.1f} ms per claim; load average {_load()}")
    status = custom.get_cluster_custom_object(GROUP, VERSION, "resourcepools", pool)["status"]
    assert status["claimCount"] == CLAIMS
    enforce(Budget("controller writes per claim", total_writes / CLAIMS, WRITES_PER_CLAIM))
    for name in names:
        with contextlib.suppress(Exception):
            core.delete_namespace(name)
    with contextlib.suppress(Exception):
        custom.delete_cluster_custom_object(GROUP, VERSION, "resourcepools", pool)

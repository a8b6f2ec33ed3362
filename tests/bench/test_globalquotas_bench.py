"""Global quotas benchmark: from a usage change to every namespace's recomputed hard, and API writes per change.

One GlobalResourceQuota (``configmaps: 1000``) over 50 namespaces; each round creates one ConfigMap in the next
namespace (kube-apiserver's quota plugin charges it to that namespace's ResourceQuota status at once) and
then lists the provisioned ResourceQuotas every 10 ms until every namespace's ``hard`` is its usage plus the
new headroom: in ``spec`` (enclave-globalquotas' patch) and in ``status`` (kube-controller-manager's copy,
which kube-apiserver enforces). Writes are the component's own counter (``enclave_globalquotas_writes_total``),
read before and after each round. One change at a time, so each round measures one recomputation.

Run on demand: ``tox -e bench -- tests/bench/test_globalquotas_bench.py`` (about a minute); elsewhere at a smoke
size (:mod:`sizes`). Never fails on timing; asserted is the write budget of a change: one ``hard`` patch per other
namespace, the GlobalResourceQuota status and the ledger, nothing more (the median over the rounds, at full size).
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from sizes import Budget, enforce, sized

from enclave_core.quantity import Quantity
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.quotas import wait_for_quota_monitors
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
NAMESPACES, ROUNDS, HARD = sized(50, 5), sized(30, 2), 1000
WRITES_PER_CHANGE = NAMESPACES + 1
"""The other namespaces' hard patches, the GlobalResourceQuota status and the ledger."""
GLOBALQUOTAS = next(spec for spec in COMPONENTS if spec.name == "globalquotas")


def _writes(component: RunningComponent) -> float:
    with urllib.request.urlopen(f"{component.probe_url}/metrics", timeout=5) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("enclave_globalquotas_writes_total{"))


def _written(component: RunningComponent, before: float) -> bool:
    """Every write of one change counted since ``before``."""
    return _writes(component) - before >= WRITES_PER_CHANGE


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[tuple[RunningComponent, str]]:
    token = secrets.token_hex(3)
    home = f"enclave-gqbench-{token}"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": home}})
    wait_for_quota_monitors(core, home)
    names = [f"gqb-{token}-{index:02d}" for index in range(NAMESPACES)]
    for name in names:
        core.create_namespace({"metadata": {"name": name, "labels": {"gq-bench": token}}})
    component = start_component(
        GLOBALQUOTAS,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={},
        identity="globalquotas-bench",
    )
    quota = f"bench-{token}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GlobalResourceQuota",
        "metadata": {"name": quota},
        "spec": {"quota": {"hard": {"configmaps": HARD}}, "namespaceSelectors": [{"matchLabels": {"gq-bench": token}}]},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "globalresourcequotas", body)
    try:
        yield component, quota
    finally:
        with contextlib.suppress(Exception):
            custom.delete_cluster_custom_object(GROUP, VERSION, "globalresourcequotas", quota)
        component.process.stop()
        for name in [*names, home]:
            with contextlib.suppress(Exception):
                core.delete_namespace(name)


def _state(core: client.CoreV1Api, quota: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """namespace -> (spec hard, status hard, status used) of the provisioned ResourceQuotas."""
    items = core.list_resource_quota_for_all_namespaces(label_selector=f"enclave.dev/globalresourcequota={quota}").items

    def count(values: dict[str, str] | None) -> int:
        value = (values or {}).get("configmaps")
        return Quantity.parse(value).as_integer() if value is not None else -1

    spec = {q.metadata.namespace: count(q.spec.hard) for q in items}
    status = {q.metadata.namespace: count(q.status and q.status.hard) for q in items}
    used = {q.metadata.namespace: count(q.status and q.status.used) for q in items}
    return spec, status, used


def test_usage_change_to_every_namespace_recomputed(kube: Any, world: tuple[RunningComponent, str]) -> None:
    component, quota = world
    core = client.CoreV1Api(kube)

    def settled() -> dict[str, int] | None:
        spec, status, used = _state(core, quota)
        if len(spec) != NAMESPACES or min(used.values()) < 0:
            return None
        headroom = max(HARD - sum(used.values()), 0)
        wanted = {ns: used[ns] + headroom for ns in used}
        return used if spec == wanted and status == wanted else None

    used = poll(settled, timeout=180, interval=0.05, what="all ResourceQuotas provisioned and counted")
    namespaces = sorted(used)
    spec_ms: list[float] = []
    status_ms: list[float] = []
    writes: list[float] = []
    load_before = _load()
    for round_index in range(ROUNDS):
        target = namespaces[round_index % NAMESPACES]
        expected_total = sum(used.values()) + 1
        before = _writes(component)
        core.create_namespaced_config_map(target, {"metadata": {"name": f"bench-{round_index}"}})
        started = time.monotonic()
        spec_done = None
        while True:
            spec, status, now_used = _state(core, quota)
            if sum(now_used.values()) == expected_total:
                headroom = max(HARD - expected_total, 0)
                wanted = {ns: now_used[ns] + headroom for ns in now_used}
                if spec_done is None and spec == wanted:
                    spec_done = time.monotonic() - started
                if spec_done is not None and status == wanted:
                    status_ms.append((time.monotonic() - started) * 1000)
                    spec_ms.append(spec_done * 1000)
                    used = now_used
                    break
            if time.monotonic() - started > 60:
                raise AssertionError(f"round {round_index}: not recomputed within 60 s")
            time.sleep(0.01)
        # The writes of this change: the ledger and status writes follow the patches.
        poll(partial(_written, component, before), timeout=30, interval=0.05, what="the change's writes counted")
        writes.append(_writes(component) - before)

    median = statistics.median(writes)

    def p99(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]

    print()
    print(f"global quotas: {NAMESPACES} namespaces, {ROUNDS} usage changes one at a time; load {load_before}")
    print("| usage change to every namespace's hard | median ms | p99 ms | max ms |")
    print("| --- | --- | --- | --- |")
    print(
        f"| spec.hard (enclave-globalquotas) | {statistics.median(spec_ms):.0f} | {p99(spec_ms):.0f} | {max(spec_ms):.0f} |"
    )
    print(
        f"| status.hard (enforced) | {statistics.median(status_ms):.0f} | {p99(status_ms):.0f} | {max(status_ms):.0f} |"
    )
    print(
        f"API writes per change by enclave-globalquotas: median {median:.0f}, "
        f"min {min(writes):.0f}, max {max(writes):.0f} ({NAMESPACES - 1} other namespaces' hard, GlobalResourceQuota "
        "status, ledger)"
    )
    enforce(Budget("median writes per change / (other namespaces + status + ledger)", median / WRITES_PER_CHANGE, 1.05))

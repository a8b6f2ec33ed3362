"""Work per namespace event: each component's CPU and API requests while one tenant's namespaces churn.

Run on demand: ``tox -e bench -- tests/bench/test_work_per_event_bench.py`` (about a minute). The tenancy core
runs as processes (enclave-config, enclave-tenants, enclave-admission, the way ``tox -e up`` runs them); an
owner creates ``NAMESPACES`` namespaces through admission (impersonated), then they are deleted, ``ROUNDS``
times. A namespace event is one create or one delete. Per component: CPU time from /proc/<pid>/stat and API
requests from its own ``enclave_kube_requests_total``, divided by the events; then the same over an idle
``IDLE`` seconds (the target there is no work at all). Printed; under ``tox -e bench`` (:mod:`sizes`) the
writes per event of enclave-config and enclave-admission are asserted, since they count requests, not time.

The target is no work where a component's output does not change: enclave-config reports tenant names and
publishes a configuration that does not mention namespaces, so its rows should be ~0 per event.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from sizes import Budget, enforce, sized

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.procstat import Requests, cpu_seconds, requests, rss_bytes
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

NAMESPACES = sized(30, 3)
ROUNDS = sized(2, 1)
IDLE = sized(10.0, 1.0)
IDLE_WRITERS = ("config", "admission")
"""Components whose output does not change with a namespace event: their writes per event should be 0."""
GROUP = "bench-owners"


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    running = start_tenancy(control_plane, [{"kind": "Group", "name": GROUP}])
    try:
        yield running
    finally:
        running.close()


def _sample(stack: TenancyStack) -> dict[str, tuple[float, Requests]]:
    return {running.spec.name: (cpu_seconds(_pid(running)), requests(running.probe_url)) for running in stack.processes}


def _pid(running: Any) -> int:
    popen = running.process.popen
    assert popen is not None
    return int(popen.pid)


def test_work_per_namespace_event(stack: TenancyStack) -> None:
    tenant = unique("churn")
    stack.tenant(tenant, [{"kind": "Group", "name": GROUP}])
    owner = stack.plane.impersonate("churner", [GROUP])
    core = client.CoreV1Api(stack.kube)

    def size() -> int:
        return int(stack.tenant_status(tenant).get("size") or 0)

    create_namespace(owner, f"{tenant}-warm")  # waits out admission's first snapshots
    poll(lambda: size() == 1, timeout=60, what="warm-up namespace in tenant status")
    core.delete_namespace(f"{tenant}-warm")
    poll(lambda: size() == 0, timeout=120, what="warm-up namespace gone from tenant status")

    before, started = _sample(stack), time.monotonic()
    events = 0
    for _ in range(ROUNDS):
        names = [f"{tenant}-{index:03d}" for index in range(NAMESPACES)]
        for name in names:
            create_namespace(owner, name)
        poll(lambda: size() == NAMESPACES, timeout=120, what="every namespace in tenant status")
        for name in names:
            core.delete_namespace(name)
        poll(lambda: size() == 0, timeout=180, what="every namespace gone from tenant status")
        events += 2 * NAMESPACES
    churn, elapsed = _sample(stack), time.monotonic() - started
    time.sleep(IDLE)  # the idle window is the measurement, not a wait for something
    idle = _sample(stack)

    print(
        f"\nWork per namespace event: {events} events ({ROUNDS} x {NAMESPACES} creates and deletes) in {elapsed:.1f}s"
    )
    print(
        f"{'component':<12}{'CPU ms/event':>14}{'reads/event':>13}{'writes/event':>14}"
        f"{'idle CPU ms/s':>15}{'idle req/s':>12}{'RSS MB':>9}"
    )
    budgets = []
    for running in stack.processes:
        name = running.spec.name
        cpu0, req0 = before[name]
        cpu1, req1 = churn[name]
        cpu2, req2 = idle[name]
        during, quiet = req1 - req0, req2 - req1
        if name in IDLE_WRITERS:
            budgets.append(Budget(f"{name} writes per namespace event", during.writes / events, 0.05))
        print(
            f"{name:<12}{(cpu1 - cpu0) * 1000 / events:>14.2f}{during.reads / events:>13.2f}"
            f"{during.writes / events:>14.2f}{(cpu2 - cpu1) * 1000 / IDLE:>15.2f}"
            f"{(quiet.reads + quiet.writes) / IDLE:>12.2f}{rss_bytes(_pid(running)) / 2**20:>9.0f}"
        )
    enforce(*budgets)

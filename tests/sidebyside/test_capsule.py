"""Enclave side by side with Capsule on the same machine (issue 20): ``tox -e capsule``.

Three local control planes of the same pinned Kubernetes release run at once: one with no admission webhook
at all (the baseline), one with Capsule (built from its Go module, installed as its chart would install it,
chart defaults untouched: ``enclave_testing.capsule``), one with Enclave's tenancy core (config, tenants,
admission as processes). On each, one owner owns one tenant and creates namespaces.

Measured, printed in one table, never asserted (the machine is shared; docs/benchmarks.md keeps the numbers):

- namespace create as the tenant owner, end to end through kube-apiserver: ``ENCLAVE_SIDE_ROUNDS`` (4)
  interleaved rounds of (baseline, Capsule, Enclave), each a block of ``ENCLAVE_SIDE_BLOCK`` (200) creates at
  concurrency 1 and then at 8; p50 and p99 of each system and their overhead over the baseline;
- a tenant quota of 3 namespaces under 8 creates released together: how many each admitted;
- ``ENCLAVE_SIDE_TENANTS`` (1,000) tenants created by the admin (8 at once): seconds until every one reports
  ``Ready`` for its generation (from the first create, and after the last);
- resident memory at the end: Capsule's one process against the sum of Enclave's.

Every wait has a deadline that grows with the work in front of it (the same formula for both systems) and is
waited for per system: a system that misses one is a row saying so (``> bound``), not a failed run, so the rest
of the table is still measured. Self-cleaning (the planes and their data are removed). The planes run the
Kubernetes minor the peer supports (``tox -e capsule`` sets ``ENCLAVE_KUBERNETES_VERSION=1.35``). Without the Go
toolchain (to build Capsule and the control plane) the test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing import binaries
from enclave_testing import capsule as capsule_peer
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.procstat import rss_bytes
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

ROUNDS = int(os.environ.get("ENCLAVE_SIDE_ROUNDS", "4"))
BLOCK = int(os.environ.get("ENCLAVE_SIDE_BLOCK", "200"))
TENANTS = int(os.environ.get("ENCLAVE_SIDE_TENANTS", "1000"))
CONCURRENCY = (1, 8)
QUOTA, RACERS = 3, 8
OWNER = "side-owner"
ENCLAVE_USERS = "enclave-side-users"


@dataclass
class System:
    """One control plane and how to act on it as a tenant owner."""

    name: str
    plane: ControlPlane
    group: str
    """The API group of its Tenant kind (empty for the baseline, which has none)."""
    users_group: str
    tenant: Callable[..., None] | None = None
    pids: dict[str, int] = field(default_factory=dict)

    def owner(self, user: str = OWNER) -> Any:
        return self.plane.impersonate(user, [self.users_group])


def _start_plane(root: Path, name: str) -> ControlPlane:
    return ControlPlane(root / name).start()


@pytest.fixture(scope="module")
def systems() -> Iterator[dict[str, System]]:
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain is needed to build Capsule and the control plane (install Go 1.26 or newer)")
    root = Path(tempfile.mkdtemp(prefix="enclave-side-", dir=os.environ.get("ENCLAVE_TEST_WORKDIR")))
    planes: list[ControlPlane] = []
    running_capsule: capsule_peer.Capsule | None = None
    stack: TenancyStack | None = None
    try:
        baseline = _start_plane(root, "baseline")
        planes.append(baseline)
        rbac = client.RbacAuthorizationV1Api(baseline.admin_client())
        rbac.create_cluster_role(
            {"metadata": {"name": "side-provisioner"}, "rules": [_namespace_rule()]},
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "side-provisioner"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "side-provisioner"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ENCLAVE_USERS}],
            }
        )

        capsule_plane = _start_plane(root, "capsule")
        planes.append(capsule_plane)
        running_capsule = capsule_peer.Capsule(capsule_plane).start()

        enclave_plane = _start_plane(root, "enclave")
        planes.append(enclave_plane)
        install_crds(enclave_plane.admin_client())
        stack = start_tenancy(enclave_plane, [{"kind": "Group", "name": ENCLAVE_USERS}])

        found = {
            "baseline": System("baseline", baseline, "", ENCLAVE_USERS),
            "Capsule": System(
                "Capsule",
                capsule_plane,
                capsule_peer.GROUP,
                capsule_peer.USERS_GROUP,
                running_capsule.tenant,
                {"capsule": running_capsule.pid},
            ),
            "Enclave": System(
                "Enclave",
                enclave_plane,
                "enclave.dev",
                ENCLAVE_USERS,
                stack.tenant,
                {r.spec.name: _pid(r) for r in stack.processes},
            ),
        }
        yield found
    except capsule_peer.CapsuleUnavailableError as err:
        pytest.skip(str(err))
    finally:
        if stack is not None:
            stack.close()
        if running_capsule is not None:
            running_capsule.stop()
        for plane in reversed(planes):
            plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def _namespace_rule() -> dict[str, Any]:
    return {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "get", "list"]}


def _pid(running: Any) -> int:
    popen = running.process.popen
    assert popen is not None
    return int(popen.pid)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _create_block(system: System, names: list[str], concurrency: int) -> list[float]:
    api = client.CoreV1Api(system.owner())
    latencies: list[float] = []

    def create(name: str) -> None:
        began = time.perf_counter()
        api.create_namespace({"metadata": {"name": name}})
        latencies.append(time.perf_counter() - began)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, names))
    return latencies


def _race_quota(system: System, tenant: str, owner: str) -> int:
    """``RACERS`` creates released together against a tenant holding ``QUOTA`` namespaces at most: how many got in
    (each distinct refusal is printed, so a system that refuses for another reason than the quota says so)."""
    api = client.CoreV1Api(system.owner(owner))
    gate = threading.Barrier(RACERS)
    admitted: list[str] = []
    refusals: set[str] = set()

    def create(index: int) -> None:
        name = f"{tenant}-{index}"
        gate.wait(30)
        try:
            api.create_namespace({"metadata": {"name": name}})
            admitted.append(name)
        except ApiException as err:
            if err.status not in (400, 403, 422):
                raise
            refusals.add(f"{err.status} {str(err.body).replace(name, '<name>')[:240]}")

    with ThreadPoolExecutor(RACERS) as pool:
        list(pool.map(create, range(RACERS)))
    for refusal in sorted(refusals):
        print(f"  {system.name} refused: {refusal}")
    return len(admitted)


def _ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    generation = obj["metadata"].get("generation")
    return bool(
        ready.get("status") == "True" and (generation is None or status.get("observedGeneration") == generation)
    )


def _bound(base: float, per_item: float, items: int) -> float:
    """A wait's deadline grown with the work in front of it (the same for both systems: never tuned per peer)."""
    return base + per_item * items


def _wait(check: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``check`` holds, or None when ``timeout`` ran out first (a row saying so, not a failed run)."""
    began = time.monotonic()
    try:
        poll(check, timeout=timeout, interval=1.0)
    except AssertionError:
        return None
    return time.monotonic() - began


def _seconds(value: float | None, bound: float) -> str:
    return f"{value:.1f}" if value is not None else f"> {bound:.0f}"


def _converge_tenants(system: System, prefix: str) -> tuple[float | None, float | None, int, float]:
    """Create ``TENANTS`` tenants (8 at once); seconds until all are Ready, from the first and the last create
    (None past the bound), how many were Ready at the end, and the bound."""
    create = system.tenant
    assert create is not None
    custom = client.CustomObjectsApi(system.plane.admin_client())
    names = [f"{prefix}-{index:04d}" for index in range(TENANTS)]
    first = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: create(name, [{"kind": "User", "name": f"owner-{name}"}]), names))
    last = time.monotonic()
    wanted = set(names)
    ready = [0]

    def all_ready() -> bool:
        items = custom.list_cluster_custom_object(system.group, "v1beta2", "tenants")["items"]
        ready[0] = len(wanted & {item["metadata"]["name"] for item in items if _ready(item)})
        return ready[0] == len(wanted)

    bound = _bound(300.0, 0.5, TENANTS)
    if _wait(all_ready, bound) is None:
        return None, None, ready[0], bound
    done = time.monotonic()
    return done - first, done - last, ready[0], bound


def test_side_by_side_with_capsule(systems: dict[str, System]) -> None:
    baseline, peer, ours = systems["baseline"], systems["Capsule"], systems["Enclave"]
    for system in (peer, ours):
        assert system.tenant is not None
        system.tenant("side", [{"kind": "User", "name": OWNER}])
    side_bound = _bound(120.0, 0.0, 0)
    side_ready = {system.name: _wait(partial(_tenant_ready, system, "side"), side_bound) for system in (peer, ours)}
    label = f"the owner's tenant Ready, s (bound {side_bound:.0f})"
    print(
        f"\n{label:<44}" + "".join(f"{_seconds(side_ready[name], side_bound):>14}" for name in ("Capsule", "Enclave")),
        flush=True,
    )

    latencies: dict[tuple[str, int], list[float]] = {}
    for round_ in range(ROUNDS):
        for system in (baseline, peer, ours):
            for concurrency in CONCURRENCY:
                names = [f"side-r{round_}-c{concurrency}-{index:04d}" for index in range(BLOCK)]
                latencies.setdefault((system.name, concurrency), []).extend(_create_block(system, names, concurrency))

    base = {c: statistics.median(latencies[("baseline", c)]) for c in CONCURRENCY}
    base99 = {c: _percentile(latencies[("baseline", c)], 0.99) for c in CONCURRENCY}
    print(
        f"\nSide by side: Capsule {capsule_peer.version()} (chart defaults) and Enclave, each on its own control plane"
        f" (Kubernetes {binaries.selected_kubernetes_minor()})"
    )
    print(f"namespace create as the tenant owner: {ROUNDS} interleaved rounds x {BLOCK} per block")
    print(f"{'':<44}{'Capsule':>14}{'Enclave':>14}{'baseline':>14}")
    for concurrency in CONCURRENCY:
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            values = {
                name: (
                    statistics.median(latencies[(name, concurrency)])
                    if q == 0.5
                    else _percentile(latencies[(name, concurrency)], q)
                )
                for name in ("Capsule", "Enclave", "baseline")
            }
            reference = base[concurrency] if q == 0.5 else base99[concurrency]
            print(
                f"{f'create at concurrency {concurrency}, {label} ms':<44}"
                f"{values['Capsule'] * 1000:>14.1f}{values['Enclave'] * 1000:>14.1f}{values['baseline'] * 1000:>14.1f}"
            )
            print(
                f"{f'  overhead over the baseline, {label} ms':<44}"
                f"{(values['Capsule'] - reference) * 1000:>14.1f}{(values['Enclave'] - reference) * 1000:>14.1f}"
            )

    # The quota tenant is created next to the owner's tenant and its ROUNDS x 2 x BLOCK namespaces: the bound
    # grows with them (a full run missed a fixed 120 s). Each system is waited for on its own; one that misses
    # the bound is a row saying so, and its race still runs (its webhook decides from the Tenant's spec).
    existing = ROUNDS * len(CONCURRENCY) * BLOCK
    quota_bound = _bound(120.0, 0.25, existing)
    admitted: dict[str, int] = {}
    quota_ready: dict[str, float | None] = {}
    for system in (peer, ours):
        assert system.tenant is not None
        system.tenant("quota", [{"kind": "User", "name": "quota-owner"}], namespaceOptions={"quota": QUOTA})
        quota_ready[system.name] = _wait(partial(_tenant_ready, system, "quota"), quota_bound)
        admitted[system.name] = _race_quota(system, "quota", "quota-owner")
    print(
        f"{f'quota tenant Ready, s (bound {quota_bound:.0f}; {existing} ns exist)':<44}"
        + "".join(f"{_seconds(quota_ready[name], quota_bound):>14}" for name in ("Capsule", "Enclave"))
    )
    print(
        f"{f'quota {QUOTA}, {RACERS} concurrent creates: admitted':<44}{admitted['Capsule']:>14}{admitted['Enclave']:>14}",
        flush=True,
    )

    convergence: dict[str, tuple[float | None, float | None, int, float]] = {}
    for system in (peer, ours):
        convergence[system.name] = found = _converge_tenants(system, "conv")
        print(
            f"  {system.name}: {found[2]} of {TENANTS} tenants Ready"
            + (f" after {found[1]:.1f}s" if found[1] is not None else f" at the bound ({found[3]:.0f}s)"),
            flush=True,
        )
    for index, label in enumerate(("from the first create", "after the last create")):
        print(
            f"{f'{TENANTS} tenants Ready, s {label}':<44}"
            + "".join(
                f"{_seconds(convergence[name][index], convergence[name][3]):>14}" for name in ("Capsule", "Enclave")
            )
        )
    print(
        f"{f'  tenants Ready at the end (of {TENANTS})':<44}"
        f"{convergence['Capsule'][2]:>14}{convergence['Enclave'][2]:>14}",
        flush=True,
    )

    rss = {system.name: {name: rss_bytes(pid) / 2**20 for name, pid in system.pids.items()} for system in (peer, ours)}
    print(
        f"{'RSS at the end, MB (sum of processes)':<44}"
        f"{sum(rss['Capsule'].values()):>14.0f}{sum(rss['Enclave'].values()):>14.0f}"
    )
    print("  Enclave's processes: " + ", ".join(f"{name} {mb:.0f}" for name, mb in rss["Enclave"].items()))


def _tenant_ready(system: System, name: str) -> bool:
    custom = client.CustomObjectsApi(system.plane.admin_client())
    return _ready(custom.get_cluster_custom_object(system.group, "v1beta2", "tenants", name))

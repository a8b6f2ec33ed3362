"""The whole install's memory beside Capsule's at scale (issue 33): ``tox -e capsule -- tests/sidebyside/test_memory_side.py``.

Two local control planes of the same pinned Kubernetes release run at once: one with Capsule (its one process,
chart defaults: :mod:`enclave_testing.capsule`), one with **all** of Enclave's controllers (config, tenants,
pools, globalquotas, quotas, replication) and one admission replica, in the shape named by
``ENCLAVE_SIDE_SHAPE``: ``colocated`` (the default: the controllers in one ``enclave-host`` process, the chart's
``controllers.colocated``), ``separate`` (a process each, the chart's default) or ``both`` (one after the other on
the same plane, each starting from no tenants, so each row is its own shape at the same size).

For each system the administrator creates ``ENCLAVE_SIDE_TENANTS`` (1,000) tenants (8 at once) and each tenant's
owner then creates ``ENCLAVE_SIDE_NAMESPACES`` (10) namespaces through the system's admission (8 owners at once);
once every tenant reports that many (``status.size``, which both systems keep), each process's resident set is
sampled until it settles (two samples 2 s apart within 1 MB). Printed: each process's settled and peak RSS
(VmHWM), the totals, Enclave's total over Capsule's against the issue's 2x, and how long each system took to
report every namespace. Not asserted (the planes share the machine with whatever else runs):
docs/benchmarks.md keeps the numbers and says whether the target is met.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client

from enclave_testing import binaries
from enclave_testing import capsule as capsule_peer
from enclave_testing.clients import create_namespace_retrying
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.procstat import peak_rss_bytes, settled_rss
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

TENANTS = int(os.environ.get("ENCLAVE_SIDE_TENANTS", "1000"))
NAMESPACES = int(os.environ.get("ENCLAVE_SIDE_NAMESPACES", "10"))
SHAPES = {"colocated": ("colocated",), "separate": ("separate",), "both": ("separate", "colocated")}[
    os.environ.get("ENCLAVE_SIDE_SHAPE", "colocated")
]
ENCLAVE_USERS = "enclave-side-users"
TARGET = 2.0
"""Issue 33: all controllers plus one admission replica within twice Capsule's RSS at the same size."""
MB = 2**20


@dataclass
class Row:
    """One process's memory once the system has reported every namespace."""

    system: str
    process: str
    settled: float
    peak: float


@dataclass
class Measured:
    """One system at the size: its processes and how long it took to report what its owners created."""

    name: str
    rows: list[Row] = field(default_factory=list)
    tenants_stored: float | None = None
    namespaces_reported: float | None = None

    @property
    def total(self) -> float:
        return sum(row.settled for row in self.rows)


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain is needed to build Capsule and the control plane (install Go 1.26 or newer)")
    path = Path(tempfile.mkdtemp(prefix="enclave-memside-", dir=os.environ.get("ENCLAVE_TEST_WORKDIR")))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _populate(
    plane: ControlPlane,
    create_tenant: Callable[..., None],
    group: str,
    users_group: str,
    prefix: str,
) -> tuple[float | None, float | None]:
    """The tenants, then their owners' namespaces: seconds until every tenant is stored (from the first tenant
    create), and until every tenant reports its namespaces (from the first namespace create; None past a bound
    that grows with the work, the same for both systems)."""
    custom = client.CustomObjectsApi(plane.admin_client())
    names = [f"{prefix}-{index:04d}" for index in range(TENANTS)]
    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: create_tenant(name, [{"kind": "User", "name": f"owner-{name}"}]), names))

    def tenants_listed() -> bool:
        items = custom.list_cluster_custom_object(group, "v1beta2", "tenants")["items"]
        return len({item["metadata"]["name"] for item in items} & set(names)) == len(names)

    poll(tenants_listed, timeout=120 + 0.1 * TENANTS, interval=1.0, what="every tenant stored")
    tenants_stored = time.monotonic() - began

    def populate(name: str) -> None:
        api = client.CoreV1Api(plane.impersonate(f"owner-{name}", [users_group]))
        for index in range(NAMESPACES):
            # the same bound for both systems
            create_namespace_retrying(api, f"{name}-{index}", 120)

    print(f"  {prefix}: {TENANTS} tenants stored in {tenants_stored:.0f} s; owners creating namespaces", flush=True)
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(populate, names))
    print(f"  {prefix}: {TENANTS * NAMESPACES} namespaces created in {time.monotonic() - started:.0f} s", flush=True)

    def reported() -> bool:
        items = custom.list_cluster_custom_object(group, "v1beta2", "tenants")["items"]
        sizes = {item["metadata"]["name"]: (item.get("status") or {}).get("size") for item in items}
        return all(sizes.get(name) == NAMESPACES for name in names)

    try:
        poll(reported, timeout=300 + 0.05 * TENANTS * NAMESPACES, interval=2.0, what="every namespace reported")
    except AssertionError:
        return tenants_stored, None
    return tenants_stored, time.monotonic() - started


def _rows(system: str, processes: dict[str, int]) -> list[Row]:
    settled = settled_rss(list(processes.values()))
    return [Row(system, label, settled[pid] / MB, peak_rss_bytes(pid) / MB) for label, pid in processes.items()]


def _print(measured: Measured) -> None:
    """Each system's rows as soon as they are measured (an hour's run is not lost to a later failure)."""
    for row in measured.rows:
        print(f"  {measured.name}: {row.process} settled {row.settled:.0f} MB, peak {row.peak:.0f} MB", flush=True)
    reported = measured.namespaces_reported
    print(
        f"  {measured.name}: namespaces reported in {f'{reported:.0f} s' if reported is not None else 'past the bound'}",
        flush=True,
    )


def _capsule(root: Path) -> Measured:
    plane = ControlPlane(root / "capsule").start()
    peer: capsule_peer.Capsule | None = None
    try:
        try:
            peer = capsule_peer.Capsule(plane).start()
        except capsule_peer.CapsuleUnavailableError as err:
            pytest.skip(str(err))
        measured = Measured(f"Capsule {capsule_peer.version()}")
        measured.tenants_stored, measured.namespaces_reported = _populate(
            plane, peer.tenant, capsule_peer.GROUP, capsule_peer.USERS_GROUP, "cap"
        )
        measured.rows = _rows(measured.name, {"capsule": peer.pid})
        _print(measured)
        return measured
    finally:
        if peer is not None:
            peer.stop()
        plane.stop()


def _enclave_processes(stack: TenancyStack) -> dict[str, int]:
    """Each process once (the host runs several components), labelled by what it runs."""
    found: dict[int, list[str]] = {}
    for running in stack.processes:
        popen = running.process.popen
        assert popen is not None
        found.setdefault(popen.pid, []).append(running.spec.name)
    return {("enclave-host" if len(names) > 1 else names[0]): pid for pid, names in found.items()}


def _enclave(plane: ControlPlane, shape: str) -> Measured:
    stack = start_tenancy(
        plane,
        [{"kind": "Group", "name": ENCLAVE_USERS}],
        colocated=shape == "colocated",
        pools=True,
        quotas=True,
        globalquotas=True,
        replication=True,
    )
    try:
        measured = Measured(f"Enclave ({shape})")
        measured.tenants_stored, measured.namespaces_reported = _populate(
            plane, stack.tenant, "enclave.dev", ENCLAVE_USERS, f"enc{shape[:3]}"
        )
        measured.rows = _rows(measured.name, _enclave_processes(stack))
        _print(measured)
        return measured
    finally:
        # the plane is discarded next: deleting 1,000 tenants and their namespaces first would only take minutes
        stack.stop()


def test_whole_install_memory_beside_capsule(root: Path) -> None:
    capsule = _capsule(root)
    ours: list[Measured] = []
    for shape in SHAPES:
        # Each shape on a plane of its own: the second does not start beside the first one's 10,000 namespaces.
        plane = ControlPlane(root / f"enclave-{shape}").start()
        try:
            install_crds(plane.admin_client())
            ours.append(_enclave(plane, shape))
        finally:
            plane.stop()
    systems = [capsule, *ours]
    print(
        f"\nWhole install beside Capsule: {TENANTS} tenants x {NAMESPACES} namespaces, created by their owners"
        f" (Kubernetes {binaries.selected_kubernetes_minor()})"
    )
    print("| system | process | settled RSS MB | peak RSS MB |")
    print("|---|---|--:|--:|")
    for system in systems:
        for row in system.rows:
            print(f"| {system.name} | {row.process} | {row.settled:.0f} | {row.peak:.0f} |")
        print(f"| {system.name} | **total** | **{system.total:.0f}** | {sum(r.peak for r in system.rows):.0f} |")
    print("\n| system | tenants stored (s) | namespaces reported (s) | total RSS / Capsule's (target <= 2) |")
    print("|---|--:|--:|--:|")
    for system in systems:
        reported = f"{system.namespaces_reported:.0f}" if system.namespaces_reported is not None else "past the bound"
        stored = f"{system.tenants_stored:.0f}" if system.tenants_stored is not None else "-"
        ratio = system.total / capsule.total
        verdict = "" if system is capsule else (" met" if ratio <= TARGET else " missed")
        print(f"| {system.name} | {stored} | {reported} | {ratio:.2f}{verdict} |")

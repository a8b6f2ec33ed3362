"""Memory per shape (issue 33): every controller in a process of its own, against the controllers together in one
``enclave-host`` process; admission apart in both.

Each shape runs config, tenants, quotas, globalquotas, pools, replication and one admission replica, with the
hooks of all of them, on the session's control plane. Owners create their tenants' namespaces through
admission; once every tenant reports them, each process's resident set is sampled until it settles (steady)
Then a burst of namespaces, created by owners, measures how long the
tenants take to report them (convergence) and each component's event-loop lag meanwhile
(``enclave_event_loop_lag_seconds``): in the co-located shape the burst is the neighbours' load.

Printed: one row per process (the host's lists what it hosts) with its steady RSS (and its anonymous part: the
rest is shared-library pages), its steady PSS (shared pages divided among the processes mapping them) and its
peak RSS after the burst (the high-water mark), then each shape's total, the convergence time and each
component's worst lag during the burst. Under ``tox -e bench`` the co-located total RSS must be under 0.6 of the
separate one (same run).

``test_each_component_alone`` is the issue's other target (a single component alone, idle at 4 tenants, 60 MB):
every component in a process of its own, each with what a fresh interpreter holds after importing its entry
point (what it loads before doing anything) beside what it holds idle. With ``ENCLAVE_MEMORY_BASELINE`` naming
another checkout (e.g. ``git archive main | tar -x -C /tmp/base``), that checkout's components are measured too,
in the same run and on the same control plane, so a change to what a component loads shows as before and after.
The 60 MB is printed, not asserted (it is not met); asserted at full size is that no component of this tree holds
idle more than ``IDLE_OVER_IMPORT`` times its RSS after import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from sizes import FULL, Budget, enforce, sized

from enclave_testing.components import ComponentSpec
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.procstat import rss_bytes
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

TENANTS = 4
NAMESPACES = 2
"""Per tenant before the measurement: the issue's "idle at 4 tenants"."""
BURST = sized(10, 2)
"""Namespaces each tenant's owner creates in the burst."""
MB = 1024 * 1024
ALONE_TARGET_MB = 60.0
"""Issue 33: a single component alone, idle at 4 tenants. Printed against, not asserted: it is not met (see
docs/benchmarks.md for by how much and why)."""
IDLE_OVER_IMPORT = 1.75
"""Budget of ``test_each_component_alone``: no component holds idle more than this times what its imports load
(a same-run ratio that the host's speed does not move; enclave-config is the most, 1.47-1.50 measured, with the
CEL engine it loads to check match conditions; the others 1.1-1.2)."""
BASELINE = os.environ.get("ENCLAVE_MEMORY_BASELINE", "")
"""A checkout of another revision whose components ``test_each_component_alone`` measures too (same run)."""
LAG_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Process:
    label: str
    pid: int
    probe_url: str
    components: list[str]
    steady: float = 0.0
    peak: float = 0.0
    anonymous: float = 0.0
    """The steady RSS's anonymous part (heap, Python objects): the rest is shared-library pages."""
    proportional: float = 0.0
    """The steady PSS: shared pages divided among the processes mapping them (what the shapes really cost)."""


@dataclass
class Shape:
    name: str
    processes: list[Process] = field(default_factory=list)
    convergence: float = 0.0
    lag: dict[str, float] = field(default_factory=dict)
    """Component -> upper bound of the highest lag bucket any of its samples fell in during the burst."""

    @property
    def total(self) -> float:
        return sum(process.steady for process in self.processes)


def _kb(path: str, field: str) -> float:
    """A ``<field>: <n> kB`` line of a /proc file, in MB."""
    with open(path) as lines:
        for line in lines:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _settled(pids: list[int]) -> dict[int, float]:
    """Each process's RSS once two samples 2 s apart differ by under 1 MB for all of them (what idle means); at the
    smoke size, whose numbers mean nothing, the first sample."""
    if not FULL:
        return {pid: rss_bytes(pid) / MB for pid in pids}
    last: dict[int, float] = {}
    mark = time.monotonic()

    def steady() -> dict[int, float] | None:
        nonlocal last, mark
        if time.monotonic() - mark < 2.0:
            return None
        mark = time.monotonic()
        now = {pid: rss_bytes(pid) / MB for pid in pids}
        done = bool(last) and all(abs(now[pid] - last[pid]) < 1.0 for pid in pids)
        last = now
        return now if done else None

    settled: dict[int, float] = poll(steady, timeout=120, interval=0.5, what="RSS settled")
    return settled


def _lag_buckets(probe_url: str) -> dict[str, dict[float, float]]:
    """Component -> cumulative lag bucket counts from a process's /metrics."""
    with urllib.request.urlopen(f"{probe_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "enclave_event_loop_lag_seconds_bucket":
                bound = float(sample.labels["le"])
                found.setdefault(sample.labels["component"], {})[bound] = sample.value
    return found


def _worst(before: dict[float, float], after: dict[float, float]) -> float:
    """The upper bound of the highest bucket that gained a sample between two readings."""
    worst = 0.0
    lower = 0.0
    for bound in (*LAG_BOUNDS, float("inf")):
        gained = (after.get(bound, 0.0) - before.get(bound, 0.0)) - (
            after.get(lower, 0.0) - before.get(lower, 0.0) if lower else 0.0
        )
        if gained > 0:
            worst = bound
        lower = bound
    return worst


def _processes(stack: TenancyStack) -> list[Process]:
    found: dict[int, Process] = {}
    for running in stack.processes:
        popen = running.process.popen
        assert popen is not None
        pid = popen.pid
        if pid in found:
            found[pid].components.append(running.spec.name)
        else:
            found[pid] = Process(running.spec.name, pid, running.probe_url, [running.spec.name])
    for process in found.values():
        if len(process.components) > 1:
            process.label = "enclave-host"
    return list(found.values())


def _source_path(tree: str) -> str:
    """A PYTHONPATH putting ``tree``'s package sources ahead of this environment's editable installs."""
    return os.pathsep.join(str(src) for src in sorted(Path(tree, "packages").glob("*/src")))


def _launcher(tree: str) -> Callable[[ComponentSpec], list[str]]:
    """Run each component from ``tree``'s sources (same interpreter and dependencies)."""
    path = _source_path(tree)
    return lambda spec: ["env", f"PYTHONPATH={path}", sys.executable, "-m", spec.module]


def _import_cost(module: str, tree: str = "") -> tuple[float, int]:
    """RSS (MB) and module count of a fresh interpreter once ``module`` is imported (from ``tree``'s sources if
    given): what a component holds before it does anything. Imported twice, the first run writing bytecode, so
    the second reads it as the image's byte-compiled tree does."""
    code = (
        f"import sys, {module}\n"
        "rss = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS:'))\n"
        "print(rss / 1024, len(sys.modules))"
    )
    env = {**os.environ, **({"PYTHONPATH": _source_path(tree)} if tree else {})}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    rss, modules = out.split()
    return float(rss), int(modules)


def _measure(
    name: str,
    plane: ControlPlane,
    impersonate: Callable[..., Any],
    colocated: bool,
    launcher: Callable[[ComponentSpec], list[str]] | None = None,
) -> Shape:
    stack = start_tenancy(
        plane,
        users=[{"kind": "Group", "name": "enclave.dev"}],
        launcher=launcher,
        colocated=colocated,
        pools=True,
        quotas=True,
        globalquotas=True,
        replication=True,
    )
    shape = Shape(name)
    try:
        owners = {}
        for _ in range(TENANTS):
            tenant, owner = unique("mem"), unique("owner")
            stack.tenant(tenant, [{"kind": "User", "name": owner}])
            owners[tenant] = client.CoreV1Api(impersonate(owner, ["enclave.dev"]))

        def create(count: int, prefix: str) -> None:
            jobs = [(t, api, f"{t}-{prefix}{i}") for t, api in owners.items() for i in range(count)]
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda job: create_namespace(job[1].api_client, job[2]), jobs))

        def converged(count: int) -> bool:
            return all(stack.tenant_status(t).get("size") == count for t in owners)

        create(NAMESPACES, "n")
        poll(lambda: converged(NAMESPACES), timeout=120, what="every tenant reporting its namespaces")
        shape.processes = _processes(stack)
        settled = _settled([process.pid for process in shape.processes])
        for process in shape.processes:
            process.steady = settled[process.pid]
            process.anonymous = _kb(f"/proc/{process.pid}/status", "RssAnon")
            process.proportional = _kb(f"/proc/{process.pid}/smaps_rollup", "Pss")
        before = {p.label: _lag_buckets(p.probe_url) for p in shape.processes}
        started = time.monotonic()
        create(BURST, "b")
        poll(lambda: converged(NAMESPACES + BURST), timeout=300, interval=0.2, what="the burst reported")
        shape.convergence = time.monotonic() - started
        for process in shape.processes:
            process.peak = _kb(f"/proc/{process.pid}/status", "VmHWM")
            after = _lag_buckets(process.probe_url)
            for component in process.components:
                shape.lag[component] = _worst(before[process.label].get(component, {}), after.get(component, {}))
    finally:
        stack.close()
    return shape


def test_memory_per_shape(
    control_plane: ControlPlane, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> None:
    shapes = [
        _measure("separate", control_plane, impersonate, colocated=False),
        _measure("colocated", control_plane, impersonate, colocated=True),
    ]
    print(f"\nmemory per shape: {TENANTS} tenants x {NAMESPACES} namespaces idle, then a burst of {TENANTS * BURST}")
    print("| shape | process | components | steady RSS MB | of it anonymous | steady PSS MB | peak RSS MB (burst) |")
    print("|---|---|---|---|---|---|---|")
    for shape in shapes:
        for process in shape.processes:
            print(
                f"| {shape.name} | {process.label} | {', '.join(process.components)} | {process.steady:.0f} "
                f"| {process.anonymous:.0f} | {process.proportional:.0f} | {process.peak:.0f} |"
            )
        pss = sum(process.proportional for process in shape.processes)
        peak = sum(process.peak for process in shape.processes)
        print(f"| {shape.name} | **total** | | **{shape.total:.0f}** | | **{pss:.0f}** | {peak:.0f} |")
    print("\n| shape | burst reported (s) | " + " | ".join(f"{c} lag" for c in shapes[0].lag) + " |")
    print("|---|---|" + "---|" * len(shapes[0].lag))
    for shape in shapes:
        lags = " | ".join(f"<= {shape.lag.get(c, 0.0):g} s" for c in shapes[0].lag)
        print(f"| {shape.name} | {shape.convergence:.1f} | {lags} |")
    separate, colocated = shapes
    enforce(Budget("co-located total RSS / separate total RSS", colocated.total / separate.total, 0.6))


def test_each_component_alone(
    control_plane: ControlPlane, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> None:
    trees = {"this tree": ""}
    if BASELINE:
        trees = {f"baseline ({BASELINE})": BASELINE, **trees}
    rows = []
    for label, tree in trees.items():
        shape = _measure(label, control_plane, impersonate, colocated=False, launcher=_launcher(tree) if tree else None)
        for process in shape.processes:
            imported, modules = _import_cost(f"enclave_{process.label}.__main__", tree)
            rows.append((label, process, imported, modules))
    print(f"\neach component alone: {TENANTS} tenants x {NAMESPACES} namespaces idle (target {ALONE_TARGET_MB:g} MB)")
    print(
        "| tree | component | RSS after import MB | modules | steady RSS MB | of it anonymous | steady PSS MB "
        "| peak RSS MB (burst) | over the target MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, process, imported, modules in rows:
        print(
            f"| {label} | {process.label} | {imported:.0f} | {modules} | {process.steady:.0f} | {process.anonymous:.0f} "
            f"| {process.proportional:.0f} | {process.peak:.0f} | {process.steady - ALONE_TARGET_MB:+.0f} |"
        )
    mine = [(process, imported) for label, process, imported, _ in rows if label == "this tree"]
    worst, imported = max(mine, key=lambda row: row[0].steady / row[1])
    enforce(
        Budget(f"steady RSS / RSS after import, {worst.label} (the most)", worst.steady / imported, IDLE_OVER_IMPORT)
    )

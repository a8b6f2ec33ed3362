"""kopf against our runtime on enclave-tenants' write loop (docs/decisions/0003-controller-runtime.md).

``tox -e kopf`` (kopf is installed only there and in the lint env; elsewhere this module is skipped). Each
runtime gets a fresh control plane of its own, one after the other, and the same workload:

1. two replicas of the controller, the second a standby (ours: the Lease; kopf: peering, the standby at a
   lower priority, the way kopf documents HA), both signing in as ``bench-controller`` with a client
   certificate so that the apiserver's audit log counts exactly their requests;
2. ``ENCLAVE_KOPF_TENANTS`` (1,000) tenants with one owner, then ``ENCLAVE_KOPF_NAMESPACES`` (2) namespaces
   each, labelled with their tenant (as admission would), created by the admin 8 at a time;
3. convergence: seconds from the last create until every namespace has its owner's RoleBindings and every
   Tenant reports its namespaces and ``Ready`` for its generation (bounded by ``CONVERGE_BOUND``, the same for
   both: past it the row says ``> bound`` and the rest is still measured);
4. API requests of the controllers during the run and over an idle window after it (from the audit log),
   resident memory of the active replica;
5. handover: the active replica SIGKILLed (no graceful release), one namespace created at once; seconds until
   the standby has written its RoleBindings.

Printed as one table, never asserted. Our controller does more than the subset (RuleStatus per namespace,
Events, ledgers): its numbers include that work; kopf's do not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from enclave_testing.components import COMPONENTS, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.processes import ManagedProcess, free_port, wait_until
from enclave_testing.procstat import rss_bytes
from enclave_testing.waiting import poll

pytest.importorskip("kopf")

TENANTS = int(os.environ.get("ENCLAVE_KOPF_TENANTS", "1000"))
NAMESPACES = int(os.environ.get("ENCLAVE_KOPF_NAMESPACES", "2"))
IDLE = 20.0
HANDOVER_BOUND = 300.0
CONVERGE_BOUND = 300.0 + 1.2 * TENANTS * NAMESPACES
"""Seconds after the last create a runtime may take to converge (the same for both: 2,700 at 1,000 x 2)."""
CONTROLLER = "bench-controller"
GROUP, VERSION = "enclave.dev", "v1beta2"
TENANT_LABEL = "enclave.dev/tenant"
MANAGED = "app.kubernetes.io/managed-by=enclave-tenants"
OPERATOR = Path(__file__).with_name("operator.py")
PEERING = "enclave-tenants-kopf"
"""kopf's peering object: created up front, as kopf's documentation asks (without it kopf never starts)."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [CONTROLLER]}, {"level": "None"}],
}

PEERING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterkopfpeerings.kopf.dev"},
    "spec": {
        "group": "kopf.dev",
        "scope": "Cluster",
        "names": {"plural": "clusterkopfpeerings", "singular": "clusterkopfpeering", "kind": "ClusterKopfPeering"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


@dataclass
class Replica:
    process: ManagedProcess
    ready: Callable[[], bool]

    @property
    def pid(self) -> int:
        assert self.process.popen is not None
        return int(self.process.popen.pid)


def _ours(plane: ControlPlane, kubeconfig: Path, identity: str) -> Replica:
    spec = next(spec for spec in COMPONENTS if spec.name == "tenants")
    running = start_component(
        spec,
        kubeconfig=kubeconfig,
        log_dir=plane.log_dir,
        namespace="enclave-system",
        endpoints={},
        identity=identity,
        wait_ready=False,
    )
    return Replica(running.process, lambda: _http_ok(f"{running.probe_url}/healthz"))


def _kopf(plane: ControlPlane, kubeconfig: Path, identity: str, priority: int) -> Replica:
    port = free_port()
    process = ManagedProcess(
        f"kopf-{identity}",
        [
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--all-namespaces",
            f"--peering={PEERING}",
            f"--priority={priority}",
            f"--liveness=http://127.0.0.1:{port}/healthz",
            str(OPERATOR),
        ],
        plane.log_dir / f"kopf-{identity}.log",
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    ).start()
    return Replica(process, lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"))


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as response:
        return int(response.status) == 200


def _audit(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kinds(events: list[dict[str, Any]]) -> Counter[str]:
    """Requests by verb and resource; Lease and kopf peering renewals under their own keys."""
    found: Counter[str] = Counter()
    for event in events:
        ref = event.get("objectRef") or {}
        found[f"{event.get('verb')} {ref.get('resource', event.get('requestURI', '?'))}"] += 1
    return found


def _coordination(kind: str) -> bool:
    return kind.endswith((" leases", " clusterkopfpeerings"))


def _converged(kube: Any, tenants: list[str], roles: int) -> Callable[[], bool]:
    custom, rbac = client.CustomObjectsApi(kube), client.RbacAuthorizationV1Api(kube)
    wanted = set(tenants)

    def check() -> bool:
        bound = rbac.list_role_binding_for_all_namespaces(label_selector=MANAGED).items
        if len(bound) < len(tenants) * NAMESPACES * roles:
            return False
        ready = 0
        for item in custom.list_cluster_custom_object(GROUP, VERSION, "tenants")["items"]:
            status = item.get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            if (
                item["metadata"]["name"] in wanted
                and status.get("size") == NAMESPACES
                and conditions.get("Ready", {}).get("status") == "True"
                and status.get("observedGeneration") == item["metadata"]["generation"]
            ):
                ready += 1
        return ready == len(tenants)

    return check


@dataclass
class Result:
    converged_after_last: float
    converged_total: float
    requests_run: Counter[str]
    requests_idle: Counter[str]
    rss_mb: float
    handover: float


def _measure(name: str, root: Path) -> Result:
    policy = root / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit = root / f"{name}-audit.log"
    plane = ControlPlane(
        root / name,
        apiserver_args=[f"--audit-policy-file={policy}", f"--audit-log-path={audit}", "--audit-log-maxsize=0"],
    ).start()
    replicas: list[Replica] = []
    try:
        kube = plane.admin_client()
        install_crds(kube)
        client.ApiextensionsV1Api(kube).create_custom_resource_definition(PEERING_CRD)
        peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}}
        poll(
            lambda: client.CustomObjectsApi(kube).create_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", peering
            )
        )
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": "enclave-system"}})
        kubeconfig = plane.identity_kubeconfig(CONTROLLER, ["system:masters"])

        def start(identity: str, priority: int) -> Replica:
            if name == "ours":
                return _ours(plane, kubeconfig, identity)
            return _kopf(plane, kubeconfig, identity, priority)

        active = start("a", 100)
        replicas.append(active)
        wait_until(active.ready, timeout=120, what=f"{name} replica a", alive=active.process)
        standby = start("b", 0)
        replicas.append(standby)
        wait_until(standby.ready, timeout=120, what=f"{name} replica b", alive=standby.process)

        custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
        tenants = [f"t{index:04d}" for index in range(TENANTS)]
        first = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda tenant: custom.create_cluster_custom_object(
                        GROUP,
                        VERSION,
                        "tenants",
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "Tenant",
                            "metadata": {"name": tenant},
                            "spec": {"owners": [{"kind": "User", "name": f"owner-{tenant}"}]},
                        },
                    ),
                    tenants,
                )
            )
            names = [(f"{tenant}-{index}", tenant) for tenant in tenants for index in range(NAMESPACES)]
            list(
                pool.map(
                    lambda pair: core.create_namespace(
                        {"metadata": {"name": pair[0], "labels": {TENANT_LABEL: pair[1]}}}
                    ),
                    names,
                )
            )
        last = time.monotonic()
        roles = len(
            custom.get_cluster_custom_object(GROUP, VERSION, "tenants", tenants[0])["spec"]["owners"][0]["clusterRoles"]
        )
        try:
            poll(
                _converged(kube, tenants, roles),
                timeout=CONVERGE_BOUND,
                interval=2.0,
                what=f"{name}: every tenant converged",
            )
            done = time.monotonic()
        except AssertionError:
            done = float("inf")  # "> bound" in the table; idle, RSS and handover are still measured
        print(
            f"  {name}: converged {done - last:.1f}s after the last create; load {os.getloadavg()[0]:.1f}", flush=True
        )
        run_events = _audit(audit)
        time.sleep(IDLE)  # the idle window is the measurement
        idle_events = _audit(audit)[len(run_events) :]
        rss = rss_bytes(active.pid) / 2**20

        assert active.process.popen is not None
        active.process.popen.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        core.create_namespace({"metadata": {"name": "handover", "labels": {TENANT_LABEL: tenants[0]}}})
        rbac = client.RbacAuthorizationV1Api(kube)
        try:
            poll(
                lambda: len(rbac.list_namespaced_role_binding("handover", label_selector=MANAGED).items) >= roles,
                timeout=HANDOVER_BOUND,
                interval=0.2,
                what=f"{name}: the standby binds a namespace after the leader died",
            )
            handover = time.monotonic() - killed
        except AssertionError:
            handover = float("inf")  # printed as "> bound": a result, not a crash of the benchmark
        return Result(done - last, done - first, _kinds(run_events), _kinds(idle_events), rss, handover)
    finally:
        for replica in replicas:
            replica.process.stop()
        plane.stop()


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="enclave-kopf-", dir=os.environ.get("ENCLAVE_TEST_WORKDIR")))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_kopf_against_our_runtime(workdir: Path) -> None:
    results: dict[str, Result] = {}
    for name in ("ours", "kopf"):
        results[name] = _measure(name, workdir)
        print(f"\n{name}: {results[name]}", flush=True)  # kept if the other runtime's half fails
    total = TENANTS * NAMESPACES
    print(f"\nenclave-tenants' write loop: {TENANTS} tenants x {NAMESPACES} namespaces = {total}, two replicas each")
    print(f"{'':<46}{'ours':>12}{'kopf':>12}")

    def row(label: str, pick: Callable[[Result], float], fmt: str = ".1f") -> None:
        def cell(value: float) -> str:
            return f"{'> bound':>12}" if value == float("inf") else f"{value:>12{fmt}}"

        print(f"{label:<46}" + "".join(cell(pick(results[n])) for n in ("ours", "kopf")))

    row("converged, s after the last create", lambda r: r.converged_after_last)
    row("converged, s from the first create", lambda r: r.converged_total)
    row("API requests during the run", lambda r: sum(r.requests_run.values()), ".0f")
    row(
        "  of which writes",
        lambda r: sum(n for k, n in r.requests_run.items() if k.split()[0] not in ("get", "list", "watch")),
        ".0f",
    )
    row(
        f"idle API requests in {IDLE:g}s (coordination apart)",
        lambda r: sum(n for k, n in r.requests_idle.items() if not _coordination(k)),
        ".0f",
    )
    row(
        f"  Lease / peering requests in {IDLE:g}s",
        lambda r: sum(n for k, n in r.requests_idle.items() if _coordination(k)),
        ".0f",
    )
    row("RSS of the active replica, MB", lambda r: r.rss_mb, ".0f")
    print(
        f"{'handover after SIGKILL, s':<46}"
        + "".join(
            f"{(f'> {HANDOVER_BOUND:g}' if r.handover == float('inf') else f'{r.handover:.1f}'):>12}"
            for r in (results["ours"], results["kopf"])
        )
    )
    for name, result in results.items():
        print(f"{name} requests during the run: {dict(result.requests_run.most_common(8))}")

"""Scale suite (issue 20): many tenants' namespaces created by impersonated owners, Pods on simulated nodes.

Run on demand: ``tox -e scale``. It runs on a control plane of its own with KWOK Nodes, kube-scheduler and the
deployment controller (``simulated_control_plane``), so tenant Pods are scheduled, reported Running, and
counted by each namespace's ResourceQuota. The tenancy core runs as processes (enclave-config,
enclave-tenants, one enclave-admission replica). Sizes (defaults afford a few minutes on a shared 2-core
machine; the issue's full run is ``ENCLAVE_SCALE_TENANTS=1000 ENCLAVE_SCALE_NAMESPACES=10
ENCLAVE_SCALE_OWNER_NAMESPACES=1000``):

- ``ENCLAVE_SCALE_TENANTS`` x ``ENCLAVE_SCALE_NAMESPACES`` namespaces (default 50 x 4), each created by its
  tenant's owner at a steady ``ENCLAVE_SCALE_RATE`` per second (default 40, ``WORKERS`` in flight at most);
  then one Pod per tenant, created by the owner in a namespace with a ResourceQuota.
- A tenant with ``ENCLAVE_SCALE_OWNER_NAMESPACES`` namespaces (default 200) whose owner is replaced.

Printed (never asserted: the machine is shared): seconds from the last create until every namespace is
labelled (admission's mutation), bound (the owner's RoleBinding from enclave-tenants), reported in its
tenant's status and given its RuleStatus, with how many were done at each quarter of that time; the Pods
Running and counted by their quota; the owners' create latency through kube-apiserver (p50/p99) and
admission's own review time from its histogram; each component's RSS at the end and at its peak (sampled
every 5 s with the host's load average, which says what the wall-clock rows are worth on a shared machine) and
CPU; and API requests per second each component makes over an idle window once everything converged (target
~0; Lease renewals apart). Each part prints as soon as it is measured. Every wait is bounded: a check past
its bound is a row (``> bound``, how many got there), the rest is still measured, and the test fails at the
end naming what did not converge. Teardown deletes the stack's tenants with one deletecollection; the
control plane is the suite's own and is removed with everything on it when the session ends.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.names import unique
from enclave_testing.procstat import cpu_seconds, requests, rss_bytes
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

TENANTS = int(os.environ.get("ENCLAVE_SCALE_TENANTS", "50"))
NAMESPACES = int(os.environ.get("ENCLAVE_SCALE_NAMESPACES", "4"))
OWNER_NAMESPACES = int(os.environ.get("ENCLAVE_SCALE_OWNER_NAMESPACES", "200"))
RATE = float(os.environ.get("ENCLAVE_SCALE_RATE", "40"))
WORKERS = 16
IDLE = 15.0
USERS = "scale-users"
GROUP, VERSION = "enclave.dev", "v1beta2"
MANAGED = "app.kubernetes.io/managed-by=enclave-tenants"


@pytest.fixture(scope="module")
def stack(simulated_control_plane: ControlPlane) -> Iterator[TenancyStack]:
    install_crds(simulated_control_plane.admin_client())
    running = start_tenancy(simulated_control_plane, [{"kind": "Group", "name": USERS}])
    HOST.pids = {component.spec.name: _pid(component) for component in running.processes}
    sampler = threading.Thread(target=HOST.run, name="host-sampler", daemon=True)
    sampler.start()
    try:
        yield running
    finally:
        HOST.stop.set()
        sampler.join(10)
        began = time.monotonic()
        running.close()
        print(f"\nteardown: the stack's {len(running.tenants)} tenants deleted in {time.monotonic() - began:.1f}s")


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


def _items(call: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """A list call's items as plain JSON: the client's model objects cost seconds at 10,000 items."""
    response = call(*args, _preload_content=False, **kwargs)
    return list(json.loads(response.data)["items"])


def _paced(names: list[str], create: Callable[[str], None], rate: float) -> tuple[float, float, list[float]]:
    """Create ``names`` at ``rate`` per second (at most ``WORKERS`` at once): start, end, each create's latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    first = time.monotonic()

    def one(index_name: tuple[int, str]) -> None:
        index, name = index_name
        due = first + index / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing: the steady rate the issue asks for
        began = time.monotonic()
        create(name)
        with lock:
            latencies.append(time.monotonic() - began)

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(one, enumerate(names)))
    return first, time.monotonic(), latencies


@dataclass
class Progress:
    """When each check was first complete, and how far it was at each poll (for the quarter marks)."""

    started: float
    total: int
    done: dict[str, float] = field(default_factory=dict)
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    bound: float = 0.0
    """The deadline ``follow`` was given (seconds from ``started``'s call), for the rows past it."""

    def follow(self, counters: dict[str, Callable[[], int]], timeout: float, interval: float = 2.0) -> bool:
        """Poll until every counter reached ``total`` or ``timeout`` ran out; whether all did. A miss is printed
        as a row (``> bound``, how many were reached), not raised here: the rest of the run is still measured."""
        told = [time.monotonic()]
        self.bound = time.monotonic() - self.started + timeout
        for what in counters:
            self.samples.setdefault(what, [])

        def step() -> bool:
            for what, count in counters.items():
                if what in self.done:
                    continue
                found = count()
                now = time.monotonic() - self.started
                self.samples.setdefault(what, []).append((now, found))
                if found >= self.total:
                    self.done[what] = now
            if time.monotonic() - told[0] > 30:  # a long run shows where it is, and a cut-off one what it reached
                told[0] = time.monotonic()
                reached = ", ".join(f"{what} {samples[-1][1]}" for what, samples in self.samples.items() if samples)
                print(f"  {time.monotonic() - self.started:.0f}s: {reached} of {self.total}; {HOST.line()}", flush=True)
            return len(self.done) == len(counters)

        try:
            poll(step, timeout=timeout, interval=interval, what=f"every one of {self.total} {', '.join(counters)}")
        except AssertionError:
            return False
        return True

    def missed(self) -> list[str]:
        return [what for what in self.samples if what not in self.done]

    def print(self, title: str) -> None:
        print(f"{title:<44}{'seconds':>10}{'at 25%':>9}{'at 50%':>9}{'at 75%':>9}")
        for what, samples in self.samples.items():
            seconds = self.done.get(what)
            marks = []
            for share in (0.25, 0.5, 0.75):
                reached = next((t for t, n in samples if n >= share * self.total), None)
                marks.append(f"{reached:>9.1f}" if reached is not None else f"{'-':>9}")
            if seconds is None:
                found = samples[-1][1] if samples else 0
                print(f"{what:<44}{f'> {self.bound:.0f}':>10}{''.join(marks)}  ({found} of {self.total} at the bound)")
            else:
                print(f"{what:<44}{seconds:>10.1f}{''.join(marks)}")
        sys.stdout.flush()


@dataclass
class Host:
    """The host's load and each component's resident memory, sampled every few seconds by a thread during the
    run: on a shared machine the load says what the wall-clock rows are worth, and a peak RSS the end misses
    (a long write pass) is the number the memory target is about."""

    pids: dict[str, int] = field(default_factory=dict)
    peak_rss: dict[str, float] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.loads.append(os.getloadavg()[0])
        for name, pid in self.pids.items():
            try:
                mb = rss_bytes(pid) / 2**20
            except OSError:
                continue
            self.peak_rss[name] = max(self.peak_rss.get(name, 0.0), mb)

    def run(self, every: float = 5.0) -> None:
        while not self.stop.wait(every):
            self.sample()

    def line(self) -> str:
        rss = ", ".join(f"{name} {rss_bytes(pid) / 2**20:.0f}" for name, pid in self.pids.items())
        return f"load {os.getloadavg()[0]:.1f}, RSS MB {rss}"


HOST = Host()


def _counters(kube: Any, wanted: dict[str, str], owners: dict[str, str]) -> dict[str, Callable[[], int]]:
    core, rbac, custom = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), client.CustomObjectsApi(kube)
    tenants = set(wanted.values())
    sizes: dict[str, int] = {}
    for tenant in wanted.values():
        sizes[tenant] = sizes.get(tenant, 0) + 1

    def labelled() -> int:
        found = {
            ns["metadata"]["name"]: ns["metadata"]["labels"].get(TENANT_LABEL)
            for ns in _items(core.list_namespace, label_selector=TENANT_LABEL)
        }
        return sum(found.get(name) == tenant for name, tenant in wanted.items())

    def bound() -> int:
        owned = {
            item["metadata"]["namespace"]
            for item in _items(rbac.list_role_binding_for_all_namespaces, label_selector=MANAGED)
            if item["metadata"]["namespace"] in wanted
            and any(s["name"] == owners[wanted[item["metadata"]["namespace"]]] for s in item.get("subjects") or [])
        }
        return len(owned)

    def reported() -> int:
        listed = custom.list_cluster_custom_object(GROUP, VERSION, "tenants")["items"]
        status = {t["metadata"]["name"]: (t.get("status") or {}) for t in listed}
        # A namespace counts once its tenant reports it in status.namespaces.
        return sum(
            len(set(status.get(tenant, {}).get("namespaces") or []) & {n for n, t in wanted.items() if t == tenant})
            for tenant in tenants
        )

    def ruled() -> int:
        listed = _items(custom.list_cluster_custom_object, GROUP, VERSION, "rulestatuses")
        return len({item["metadata"]["namespace"] for item in listed} & set(wanted))

    return {
        "labelled": labelled,
        "bound (owner's RoleBinding)": bound,
        "in tenant status": reported,
        "with a RuleStatus": ruled,
    }


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
                }
            ],
        },
    }


def _quota() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "scale"},
        "spec": {"hard": {"pods": "5", "requests.cpu": "1", "requests.memory": "1Gi"}},
    }


def _create_pod(api: Any, namespace: str) -> None:
    """The owner's Pod; retried while the namespace's ServiceAccount or quota usage is not there yet."""

    def attempt() -> bool:
        try:
            client.CoreV1Api(api).create_namespaced_pod(namespace, _pod("app"))
        except ApiException as err:
            if err.status == 409:
                return True
            if err.status == 403 and ("serviceaccount" in str(err.body) or "quota" in str(err.body)):
                return False
            raise
        return True

    poll(attempt, timeout=120, interval=0.5, what=f"create the owner's Pod in {namespace}")


def test_tenants_and_namespaces_at_scale(stack: TenancyStack) -> None:
    run = unique("sc")
    kube = stack.kube
    core = client.CoreV1Api(kube)
    tenants = [f"{run}-{index:04d}" for index in range(TENANTS)]
    owners = {tenant: f"owner-{tenant}" for tenant in tenants}
    wanted = {f"{tenant}-{index:02d}": tenant for tenant in tenants for index in range(NAMESPACES)}
    components = {running.spec.name: running for running in stack.processes}
    admission = components["admission"]
    timeout = max(600.0, len(wanted) * 0.3)
    total = len(wanted)
    print(f"\nScale: {TENANTS} tenants x {NAMESPACES} namespaces = {total}, paced at {RATE:g}/s ({WORKERS} in flight)")
    print(f"  start: {HOST.line()}", flush=True)

    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda tenant: stack.tenant(tenant, [{"kind": "User", "name": owners[tenant]}]), tenants))
    tenants_created = time.monotonic() - started

    clients = {tenant: stack.plane.impersonate(owners[tenant], [USERS]) for tenant in tenants}
    reviews_before = _review_buckets(admission.probe_url)
    cpu_before = {name: cpu_seconds(_pid(running)) for name, running in components.items()}
    first, last, latencies = _paced(list(wanted), lambda name: create_namespace(clients[wanted[name]], name), RATE)
    reviews_after = _review_buckets(admission.probe_url)
    ordered = sorted(latencies)
    print(
        f"tenants created in {tenants_created:.1f}s; namespaces created in {last - first:.1f}s "
        f"({total / (last - first):.1f}/s achieved); {HOST.line()}"
    )
    print(
        f"owner's create through kube-apiserver: p50 {statistics.median(ordered) * 1000:.0f} ms, "
        f"p99 {ordered[int(0.99 * (len(ordered) - 1))] * 1000:.0f} ms"
    )
    print(
        f"admission review time (its histogram, /namespaces*): p50 {_quantile(reviews_before, reviews_after, 0.5)}, "
        f"p99 {_quantile(reviews_before, reviews_after, 0.99)}",
        flush=True,
    )

    progress = Progress(last, len(wanted))
    progress.follow(_counters(kube, wanted, owners), timeout=timeout)
    cpu_after = {name: cpu_seconds(_pid(running)) for name, running in components.items()}
    progress.print("after the last create, every namespace")
    print(
        "CPU s during the run: "
        + ", ".join(f"{name} {cpu_after[name] - cpu_before[name]:.1f}" for name in components)
        + f"; {HOST.line()}",
        flush=True,
    )

    # One Pod per tenant, by its owner, in a namespace with a ResourceQuota: scheduled onto a KWOK Node,
    # reported Running, and counted in the quota's status.used.
    pod_namespaces = {f"{tenant}-00": tenant for tenant in tenants}
    for namespace in pod_namespaces:
        core.create_namespaced_resource_quota(namespace, _quota())
    pods_first, pods_last, _ = _paced(
        list(pod_namespaces), lambda ns: _create_pod(clients[pod_namespaces[ns]], ns), RATE
    )

    def running() -> int:
        pods = _items(core.list_pod_for_all_namespaces, field_selector="status.phase=Running")
        return len({pod["metadata"]["namespace"] for pod in pods} & set(pod_namespaces))

    def counted() -> int:
        quotas = _items(core.list_resource_quota_for_all_namespaces, field_selector="metadata.name=scale")
        return sum(
            (q.get("status") or {}).get("used", {}).get("pods") == "1"
            and (q.get("status") or {}).get("used", {}).get("requests.cpu") == "100m"
            for q in quotas
        )

    pods = Progress(pods_last, len(pod_namespaces))
    pods.follow({"Pod Running on a KWOK Node": running, "counted by its ResourceQuota": counted}, timeout=timeout)
    pods.print(f"after the last of {len(pod_namespaces)} Pods ({pods_last - pods_first:.1f}s to create), every Pod")

    idle_before = {name: requests(running.probe_url) for name, running in components.items()}
    time.sleep(IDLE)  # the idle window is the measurement
    idle_after = {name: requests(running.probe_url) for name, running in components.items()}
    HOST.sample()
    loads = HOST.loads or [os.getloadavg()[0]]
    print(f"host load average (1 min) during the run: median {statistics.median(loads):.1f}, max {max(loads):.1f}")
    print(
        f"{'component':<12}{'RSS MB':>9}{'peak RSS MB':>13}{'CPU s (run)':>13}{'idle req/s':>12}{'idle lease req/s':>18}"
    )
    for name, running_component in components.items():
        quiet = idle_after[name] - idle_before[name]
        print(
            f"{name:<12}{rss_bytes(_pid(running_component)) / 2**20:>9.0f}{HOST.peak_rss.get(name, 0.0):>13.0f}"
            f"{cpu_after[name] - cpu_before[name]:>13.1f}"
            f"{(quiet.reads + quiet.writes) / IDLE:>12.2f}{quiet.renewals / IDLE:>18.2f}"
        )
    for name in components:
        quiet = idle_after[name] - idle_before[name]
        busy = {key: count for key, count in quiet.by_kind.items() if not key.endswith(" leases")}
        if busy:
            print(f"idle requests of {name} in {IDLE:g}s: {dict(sorted(busy.items(), key=lambda kv: -kv[1]))}")
    sys.stdout.flush()
    missed = progress.missed() + pods.missed()
    assert not missed, f"not every namespace or Pod got there within the bound: {', '.join(missed)}"


def test_a_large_tenant_changes_owners(stack: TenancyStack) -> None:
    """A tenant with many namespaces gets a new owner: every namespace's RoleBindings move to the new owner."""
    kube = stack.kube
    tenant = unique("big")
    before, after = f"owner-{tenant}-a", f"owner-{tenant}-b"
    stack.tenant(tenant, [{"kind": "User", "name": before}])
    api = stack.plane.impersonate(before, [USERS])
    names = [f"{tenant}-{index:04d}" for index in range(OWNER_NAMESPACES)]
    timeout = max(600.0, OWNER_NAMESPACES * 0.5)
    _, last, _ = _paced(names, lambda name: create_namespace(api, name), RATE)
    rbac = client.RbacAuthorizationV1Api(kube)

    def subjects() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {name: set() for name in names}
        for item in _items(rbac.list_role_binding_for_all_namespaces, label_selector=MANAGED):
            namespace = item["metadata"]["namespace"]
            if namespace in found:
                found[namespace].update(s["name"] for s in item.get("subjects") or [])
        return found

    print(f"\nOwner change on a tenant with {len(names)} namespaces; {HOST.line()}", flush=True)
    first_owner = Progress(last, len(names))
    first_owner.follow({"bound to the first owner": lambda: sum(before in s for s in subjects().values())}, timeout)
    first_owner.print("after the last create, every namespace")

    changed = time.monotonic()
    client.CustomObjectsApi(kube).patch_cluster_custom_object(
        GROUP, VERSION, "tenants", tenant, {"spec": {"owners": [{"kind": "User", "name": after}]}}
    )

    def moved() -> int:
        return sum(after in s and before not in s for s in subjects().values())

    def reported() -> int:
        status = client.CustomObjectsApi(kube).get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)["status"]
        owners = {owner.get("name") for owner in status.get("owners") or []}
        return len(names) if owners == {after} else 0

    change = Progress(changed, len(names))
    change.follow(
        {"RoleBindings moved to the new owner": moved, "tenant status shows the new owner": reported}, timeout
    )
    change.print("after the owner change, every namespace")
    print(f"  {HOST.line()}", flush=True)
    missed = first_owner.missed() + change.missed()
    assert not missed, f"not converged within the bound: {', '.join(missed)}"

"""A GlobalResourceQuota is exact as a native ResourceQuota is: for every requester (cluster administrators and
the cluster's controllers included), in every namespace it selects (a tenant's or not, Enclave's own too), with
two admission replicas behind one webhook URL, and when a ResourceQuota reports less than what exists.

The stack: enclave-config, enclave-tenants, enclave-globalquotas and two admission replicas, on the real control
plane (kube-apiserver calling the webhooks over HTTPS, kube-controller-manager recounting the ResourceQuotas).
Each test selects its namespaces by name (``kubernetes.io/metadata.name In [...]``), so the quotas of one test
never see another's.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.quotas import burst
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, owned_namespace

GROUP, VERSION, PLURAL = "enclave.dev", "v1beta2", "globalresourcequotas"
LIMIT = 5


@pytest.fixture(scope="module")
def quotas_fence(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """The tenancy core with enclave-globalquotas and two admission replicas behind one URL."""
    stack = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}], globalquotas=True, admission_replicas=2)
    try:
        yield stack
    finally:
        for item in client.CustomObjectsApi(stack.kube).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
            if item["metadata"]["name"].startswith("exact-"):
                with contextlib.suppress(ApiException):
                    client.CustomObjectsApi(stack.kube).delete_cluster_custom_object(
                        GROUP, VERSION, PLURAL, item["metadata"]["name"]
                    )
        stack.close()


def plain_namespace(kube: Any) -> str:
    name = unique("exact-plain")
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    return name


def shared_quota(kube: Any, namespaces: list[str], hard: dict[str, Any]) -> str:
    """A GlobalResourceQuota over ``namespaces`` (by name), once its ledger is initialised and every
    namespace's ResourceQuota enforces."""
    name = unique("exact")
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GlobalResourceQuota",
        "metadata": {"name": name},
        "spec": {"quota": {"hard": hard}, "namespaceSelectors": [selector]},
    }
    client.CustomObjectsApi(kube).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    core = client.CoreV1Api(kube)

    def ready() -> bool:
        quotas = [core.read_namespaced_resource_quota(f"globalquota-{name}", ns) for ns in namespaces]
        return all(q.status and q.status.hard and q.status.used is not None for q in quotas) and bool(
            (ledger(kube, name) or {}).get("initialized")
        )

    poll(ready, timeout=90, what=f"{name} initialised")
    return name


def ledger(kube: Any, quota: str) -> dict[str, Any] | None:
    for item in client.CustomObjectsApi(kube).list_cluster_custom_object(GROUP, VERSION, "quantityledgers")["items"]:
        if item["metadata"]["name"] == f"globalresourcequota.{quota}":
            return dict((item.get("status") or {}).get("resourceQuota") or {})
    return None


def settled(kube: Any, quota: str, allocated: dict[str, str], timeout: float) -> None:
    """Until the ledger holds exactly ``allocated`` and no reservation: each settled once its object existed,
    or lapsed (30 s) when its object never came."""
    seen: list[Any] = [None]

    def check() -> bool:
        block = seen[0] = ledger(kube, quota) or {}
        return block.get("allocated") == allocated and not block.get("reservations")

    try:
        poll(check, timeout=timeout, what="reservations settled")
    except AssertionError as err:
        raise AssertionError(f"{err}: {seen[0]}") from None


def services(kube: Any, namespaces: list[str]) -> int:
    core = client.CoreV1Api(kube)
    return sum(len(core.list_namespaced_service(ns).items) for ns in namespaces)


def service(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}


def test_cluster_admin_burst_past_a_shared_quota_is_refused(
    quotas_fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """12 concurrent creates by a cluster administrator (system:masters), across a tenant's namespace and one in
    no tenant, against ``services: 5`` on two admission replicas: exactly 5 are admitted and stored."""
    kube = quotas_fence.kube
    _, tenant_namespace = owned_namespace(quotas_fence, impersonate, unique("owner"))
    namespaces = [tenant_namespace, plain_namespace(kube)]
    quota = shared_quota(kube, namespaces, {"services": LIMIT})
    admin = client.CoreV1Api(kube)

    admitted, refusals = burst(12, lambda i: admin.create_namespaced_service(namespaces[i % 2], service(f"s{i}")))

    assert admitted == LIMIT, refusals
    assert all(f"exceeded GlobalResourceQuota {quota}" in r or "exceeded quota" in r for r in refusals), refusals
    assert services(kube, namespaces) == LIMIT
    # Nothing stays held: every reservation settles into what the ResourceQuotas report (or lapses, for one a
    # webhook call kube-apiserver gave up on under load).
    settled(kube, quota, {"services": str(LIMIT)}, timeout=45)


def test_controller_pods_past_a_shared_quota_are_refused(quotas_fence: TenancyStack) -> None:
    """A ReplicaSet of 7 under ``pods: 5``: kube-controller-manager's replicaset controller (a kube-system
    service account, with generateName) gets exactly 5 pods, promptly. Its reservations name the generated pod,
    so they settle at once instead of being held on top of the ResourceQuota's charge until they lapse (30 s),
    which refused pods the quota had room for."""
    kube = quotas_fence.kube
    namespaces = [plain_namespace(kube), plain_namespace(kube)]
    core = client.CoreV1Api(kube)
    poll(lambda: all(core.read_namespaced_service_account("default", ns) for ns in namespaces), what="default SAs")
    quota = shared_quota(kube, namespaces, {"pods": LIMIT})
    replicaset = {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 7,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "pause"}]},
            },
        },
    }
    client.AppsV1Api(kube).create_namespaced_replica_set(namespaces[0], replicaset)

    def pods() -> int:
        return sum(len(core.list_namespaced_pod(ns).items) for ns in namespaces)

    # Well inside the 30 s a nameless reservation was held: the controller's backoff is what remains.
    poll(lambda: pods() == LIMIT, timeout=20, what=f"{LIMIT} pods")
    settled(kube, quota, {"pods": str(LIMIT)}, timeout=10)
    admitted, _ = burst(3, lambda i: core.create_namespaced_pod(namespaces[1], pod(f"extra-{i}")))
    assert admitted == 0
    assert pods() == LIMIT


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "pause"}]},
    }


def test_burst_into_enclaves_own_namespace_past_a_shared_quota_is_refused(quotas_fence: TenancyStack) -> None:
    """A quota that selects Enclave's own namespace counts it like any other (the reservation hook sees every
    namespace): a burst across it and another namespace admits exactly the limit."""
    kube = quotas_fence.kube
    namespaces = [quotas_fence.namespace, plain_namespace(kube)]
    before = services(kube, namespaces)
    quota = shared_quota(kube, namespaces, {"services": before + LIMIT})
    admin = client.CoreV1Api(kube)
    prefix = unique("own")

    admitted, refusals = burst(
        12, lambda i: admin.create_namespaced_service(namespaces[i % 2], service(f"{prefix}-{i}"))
    )

    assert admitted == LIMIT, refusals
    assert services(kube, namespaces) == before + LIMIT
    settled(kube, quota, {"services": str(before + LIMIT)}, timeout=45)


def test_creates_past_an_under_reporting_resourcequota_are_refused(quotas_fence: TenancyStack) -> None:
    """A ResourceQuota that reports less than what exists (a kube-controller-manager recount that missed
    objects in flight writes exactly such a status; here it is written directly): the controller counts the
    namespace's objects instead of believing the report, and the shared quota still admits only what is left."""
    kube = quotas_fence.kube
    namespaces = [plain_namespace(kube), plain_namespace(kube)]
    quota = shared_quota(kube, namespaces, {"services": LIMIT})
    admin = client.CoreV1Api(kube)
    for index in range(3):
        admin.create_namespaced_service(namespaces[0], service(f"old-{index}"))
    poll(lambda: (ledger(kube, quota) or {}).get("used") == {"services": "3"}, timeout=30, what="3 used")
    rq_name = f"globalquota-{quota}"

    def under_report() -> bool:
        current = admin.read_namespaced_resource_quota(rq_name, namespaces[0])
        if (current.status.used or {}).get("services") == "1":
            return True
        current.status.used = {**(current.status.used or {}), "services": "1"}
        try:
            admin.replace_namespaced_resource_quota_status(rq_name, namespaces[0], current)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    # kube-controller-manager leaves a status write alone (it recounts on a spec change, a deletion or its
    # periodic resync), so without a count the report of 1 would stand and four more would be admitted.
    poll(under_report, what="the ResourceQuota under-reporting")

    # The controller counted the namespace: the ledger holds the three that exist, and each namespace's
    # ResourceQuota lets it grow by the two left, not four (measured from whatever it reports, which
    # kube-controller-manager repairs when the changed hard makes it recount).
    def headroom() -> list[int]:
        quotas = [admin.read_namespaced_resource_quota(rq_name, ns) for ns in namespaces]
        return [
            int(q.spec.hard["services"]) - int(q.status.used["services"]) if q.status.hard == q.spec.hard else -1
            for q in quotas
        ]

    seen: list[Any] = [None]

    def counted() -> bool:
        seen[0] = ((ledger(kube, quota) or {}).get("used"), headroom())
        return bool(seen[0] == ({"services": "3"}, [2, 2]))

    try:
        poll(counted, timeout=30, what="the count in the ledger and the headroom")
    except AssertionError as err:
        raise AssertionError(f"{err}: {seen[0]}") from None

    admitted, refusals = burst(12, lambda i: admin.create_namespaced_service(namespaces[i % 2], service(f"new-{i}")))

    assert admitted == LIMIT - 3, refusals
    assert services(kube, namespaces) == LIMIT


def test_create_after_a_settle_into_a_short_report_is_refused(quotas_fence: TenancyStack) -> None:
    """Two services are reserved and stored while the namespace's ResourceQuota went 1 -> 0 -> 1 (a
    kube-controller-manager recount that missed the first, then the second's charge; here the recount's status
    is written directly), and enclave-globalquotas saw none of it as it happened (paused: under load its
    informer showed it only the last figure, as in a loaded run that admitted 6 under 5). Settling both
    reservations into that report left the ledger at 1 of 2 and a third create was admitted; the controller now
    settles a reservation only into a count of the namespace taken after its object exists."""
    kube = quotas_fence.kube
    namespace = plain_namespace(kube)
    quota = shared_quota(kube, [namespace], {"services": 2})
    admin = client.CoreV1Api(kube)
    rq_name = f"globalquota-{quota}"
    controller = next(p for p in quotas_fence.processes if p.spec.name == "globalquotas").process.popen
    assert controller is not None

    def recounted_to(used: str) -> bool:
        current = admin.read_namespaced_resource_quota(rq_name, namespace)
        current.status.used = {**(current.status.used or {}), "services": used}
        try:
            admin.replace_namespaced_resource_quota_status(rq_name, namespace, current)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    controller.send_signal(signal.SIGSTOP)
    try:
        admin.create_namespaced_service(namespace, service("s1"))
        poll(lambda: recounted_to("0"), what="the recount that missed s1")
        admin.create_namespaced_service(namespace, service("s2"))
        report = admin.read_namespaced_resource_quota(rq_name, namespace).status.used
        assert report == {"services": "1"}, report
    finally:
        controller.send_signal(signal.SIGCONT)
    # Both settle (their objects exist): on main into the report of 1, now into the count of 2.
    poll(lambda: not (ledger(kube, quota) or {}).get("reservations"), timeout=30, what="both settled")

    with pytest.raises(ApiException) as refused:
        admin.create_namespaced_service(namespace, service("s3"))

    assert refused.value.status == 403, refused.value.body
    assert f"exceeded GlobalResourceQuota {quota}" in str(refused.value.body) or "exceeded quota" in str(
        refused.value.body
    )
    assert services(kube, [namespace]) == 2
    assert (ledger(kube, quota) or {}).get("allocated") == {"services": "2"}

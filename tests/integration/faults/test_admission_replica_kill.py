"""Faults: one of three admission replicas behind one webhook URL SIGKILLed in the middle of a burst of
namespace creates against a tenant's namespace quota.

Three replicas behind a local round-robin balancer (``enclave_testing.balancer``: what a Service spreading
kube-apiserver's calls over endpoints does; a dead endpoint is skipped), the quota on the tenant's
QuantityLedger (the enclave of ``quotas/test_tenant_namespace_quota.py``, started again for this module). A
review on the killed replica fails (the hook fails closed) or its reservation is left behind without an
object. Asserted from what kube-apiserver stored: never more namespaces than the quota, during the burst or
after; and nothing lost: once the dead replica's reservations expire (``--reservation-ttl=5s``), the tenant
admits exactly up to its quota again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from quotas import test_tenant_namespace_quota as enclave
from quotas.harness import GROUP, VERSION, metric

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

tenant_enclave = enclave.tenant_enclave
QUOTA = 5


def test_killing_a_replica_mid_burst_admits_exactly_the_quota(
    tenant_enclave: dict[str, Any], control_plane: ControlPlane, kube: Any
) -> None:
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    name = unique("tk")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"owners": [{"kind": "User", "name": enclave.OWNER}], "namespaceOptions": {"quota": QUOTA}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    home, ledger = tenant_enclave["namespace"], f"tenant.{name}"

    def status() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, home, "quantityledgers", ledger)
        return dict(obj.get("status") or {})

    def stored() -> int:
        return len(core.list_namespace(label_selector=f"enclave.dev/tenant={name}").items)

    try:
        poll(lambda: status().get("allocated") == "0", what="the tenant's ledger initialised")
        for admission in tenant_enclave["admissions"]:
            url = admission.probe_url
            poll(lambda: (metric(url, "enclave_admission_tenant_ledgers") or 0) >= 1, what="admission knows the ledger")  # noqa: B023
        owner = client.CoreV1Api(control_plane.impersonate(enclave.OWNER, ["enclave.dev"]))
        owner.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16

        def create(prefix: str, index: int) -> bool:
            try:
                owner.create_namespace({"metadata": {"name": f"{name}-{prefix}{index}"}})
                return True
            except ApiException:  # denied, or the review died with its replica (the hook fails closed)
                return False

        results: list[bool] = []

        def run() -> None:
            with ThreadPoolExecutor(10) as pool:
                results.extend(pool.map(lambda i: create("b", i), range(30)))

        burst = threading.Thread(target=run)
        burst.start()
        poll(lambda: stored() >= 1, interval=0.05, what="the burst under way")
        victim = tenant_enclave["admissions"][-1]
        popen = victim.process.popen
        assert popen is not None
        popen.send_signal(signal.SIGKILL)
        burst.join(120)
        assert not burst.is_alive()
        during = stored()
        assert during <= QUOTA, f"{during} namespaces stored against a quota of {QUOTA}"
        assert sum(results) == during

        # Nothing lost: the dead replica's reservations expire, the ledger settles, the quota fills exactly.
        poll(lambda: status().get("reserved") == "0", timeout=60, what="ledger settled")
        after = [create("a", i) for i in range(QUOTA + 2)]
        assert sum(after) == QUOTA - during
        assert stored() == QUOTA
        poll(lambda: status().get("allocated") == str(QUOTA), timeout=60, what="ledger allocated at the quota")
    finally:
        for item in core.list_namespace(label_selector=f"enclave.dev/tenant={name}").items:
            with contextlib.suppress(ApiException):
                core.delete_namespace(item.metadata.name)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", name)

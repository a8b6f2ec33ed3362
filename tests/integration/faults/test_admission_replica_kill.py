"""Faults: one of three admission replicas behind one webhook URL SIGKILLed in the middle of a burst of
namespace creates (against a tenant's namespace quota) mixed with quota-counted creates (ConfigMaps against a
CustomQuota).

Three replicas behind a local round-robin balancer (``enclave_testing.balancer``: what a Service spreading
kube-apiserver's calls over endpoints does; a dead endpoint is skipped), with enclave-config, enclave-tenants
and enclave-quotas (``quotas.harness.quota_enclave(tenants=True)``); both quotas live on QuantityLedgers. A
review on the killed replica fails (the hooks fail closed) or its reservation is left behind without an
object. Asserted from what kube-apiserver stored: never more namespaces or ConfigMaps than their quotas;
every create answered 201 is stored and nothing else is (no request allowed by error); and nothing lost: once
the dead replica's reservations expire (``--reservation-ttl=5s``), each quota admits exactly up to its limit.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from quotas.harness import GROUP, VERSION, QuotaEnclave, hook_resources, metric, quota_enclave

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

OWNER = "fault-quota-owner"
NAMESPACE_QUOTA, CONFIGMAP_QUOTA = 5, 10


@pytest.fixture(scope="module")
def mixed(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[QuotaEnclave]:
    with quota_enclave(control_plane, kube, replicas=3, anchor=False, tenants=True) as running:
        yield running


def _attempt(call: Callable[[], Any]) -> bool:
    """True when kube-apiserver answered 201; False when refused, or when the review died with its replica
    (the hooks fail closed)."""
    try:
        call()
    except ApiException:
        return False
    return True


def test_killing_a_replica_mid_burst_of_namespace_and_counted_creates_admits_exactly_the_quotas(
    mixed: QuotaEnclave, control_plane: ControlPlane, kube: Any, namespace: str
) -> None:
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    tenant = unique("tk")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"owners": [{"kind": "User", "name": OWNER}], "namespaceOptions": {"quota": NAMESPACE_QUOTA}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    labels = {"burst": tenant}
    counted = {"kind": "ConfigMap", "op": "count", "selectors": [{"matchLabels": labels}]}
    mixed.create_quota(namespace, "counted", {"limit": CONFIGMAP_QUOTA, "sources": [counted]})
    ledgers = {"namespaces": f"tenant.{tenant}", "configmaps": mixed.ledger_name(namespace, "counted")}

    def ledger(kind: str) -> dict[str, Any]:
        return dict(mixed.ledger(ledgers[kind]).get("status") or {})

    def settled(kind: str, allocated: int | None) -> bool:
        """Nothing reserved on the ledger (and ``allocated`` as given)."""
        status = ledger(kind)
        return status.get("reserved") == "0" and (allocated is None or status.get("allocated") == str(allocated))

    def stored_namespaces() -> int:
        return len(core.list_namespace(label_selector=f"enclave.dev/tenant={tenant}").items)

    def stored_configmaps() -> int:
        return len(core.list_namespaced_config_map(namespace, label_selector=f"burst={tenant}").items)

    try:
        poll(lambda: ledger("namespaces").get("allocated") == "0", what="the tenant's ledger initialised")
        for admission in mixed.admissions:
            url = admission.probe_url
            poll(lambda: (metric(url, "enclave_admission_tenant_ledgers") or 0) >= 1, what="admission knows the ledger")  # noqa: B023
        poll(lambda: "configmaps" in hook_resources(mixed), what="the quota hook scoped to ConfigMaps")
        owner = client.CoreV1Api(control_plane.impersonate(OWNER, ["enclave.dev"]))
        owner.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        admin = client.CoreV1Api(mixed.wide)

        def create_namespace(index: int) -> bool:
            return _attempt(lambda: owner.create_namespace({"metadata": {"name": f"{tenant}-b{index}"}}))

        def create_configmap(index: int) -> bool:
            cm = {"metadata": {"name": f"b{index}", "labels": labels}}
            return _attempt(lambda: admin.create_namespaced_config_map(namespace, cm))

        # Interleaved: 30 namespace creates and 40 counted creates, 16 at a time.
        work = [("namespaces", create_namespace, i) for i in range(30)] + [
            ("configmaps", create_configmap, i) for i in range(40)
        ]
        work.sort(key=lambda item: item[2])
        results: list[tuple[str, bool]] = []

        def run() -> None:
            with ThreadPoolExecutor(16) as pool:
                results.extend(pool.map(lambda item: (item[0], item[1](item[2])), work))

        burst = threading.Thread(target=run)
        burst.start()
        poll(lambda: stored_namespaces() >= 1 and stored_configmaps() >= 1, interval=0.05, what="the burst under way")
        victim = mixed.admissions[-1]
        popen = victim.process.popen
        assert popen is not None
        popen.send_signal(signal.SIGKILL)
        burst.join(180)
        assert not burst.is_alive()

        namespaces_during, configmaps_during = stored_namespaces(), stored_configmaps()
        assert namespaces_during <= NAMESPACE_QUOTA, f"{namespaces_during} namespaces against {NAMESPACE_QUOTA}"
        assert configmaps_during <= CONFIGMAP_QUOTA, f"{configmaps_during} ConfigMaps against {CONFIGMAP_QUOTA}"
        admitted = {kind: sum(ok for k, ok in results if k == kind) for kind in ledgers}
        assert admitted == {"namespaces": namespaces_during, "configmaps": configmaps_during}, (
            "every 201 is stored and nothing refused is"
        )
        print(
            f"\nreplica killed mid-burst: {namespaces_during}/{NAMESPACE_QUOTA} namespaces and "
            f"{configmaps_during}/{CONFIGMAP_QUOTA} ConfigMaps stored"
        )

        # Nothing lost: the dead replica's reservations expire, the ledgers settle, the quotas fill exactly.
        mixed.admissions.remove(victim)
        for kind in ledgers:
            poll(partial(settled, kind, None), timeout=60, what=f"{kind} ledger settled")
        extra_namespaces = [
            _attempt(partial(owner.create_namespace, {"metadata": {"name": f"{tenant}-a{i}"}}))
            for i in range(NAMESPACE_QUOTA + 2)
        ]
        extra_configmaps = [
            _attempt(
                partial(
                    admin.create_namespaced_config_map, namespace, {"metadata": {"name": f"a{i}", "labels": labels}}
                )
            )
            for i in range(CONFIGMAP_QUOTA + 2)
        ]
        assert sum(extra_namespaces) == NAMESPACE_QUOTA - namespaces_during
        assert sum(extra_configmaps) == CONFIGMAP_QUOTA - configmaps_during
        assert (stored_namespaces(), stored_configmaps()) == (NAMESPACE_QUOTA, CONFIGMAP_QUOTA)
        for kind, limit in (("namespaces", NAMESPACE_QUOTA), ("configmaps", CONFIGMAP_QUOTA)):
            poll(partial(settled, kind, limit), timeout=60, what=f"{kind} ledger allocated at its quota")
    finally:
        for item in core.list_namespace(label_selector=f"enclave.dev/tenant={tenant}").items:
            with contextlib.suppress(ApiException):
                core.delete_namespace(item.metadata.name)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)
        with contextlib.suppress(ApiException, AssertionError):
            mixed.delete_quota(namespace, "counted")

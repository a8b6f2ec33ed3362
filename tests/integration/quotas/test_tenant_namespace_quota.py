"""The tenant namespace quota on its QuantityLedger: three admission replicas, the real enclave-tenants folding.

Before the ledger, each replica counted the snapshot plus its own recent admissions, so replicas admitting the
last slots at the same instant could exceed a tenant's quota. Now every admitted namespace is reserved on the
tenant's ledger first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_testing.balancer import Balancer
from enclave_testing.components import start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

from .harness import GROUP, SPECS, VERSION, metric, start_admission, start_tenants, wide_client

OWNER = "quota-owner"


@pytest.fixture(scope="module")
def tenant_enclave(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[dict[str, Any]]:
    namespace = unique("enclave-tq")
    config_name = unique("tq")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    running = []
    try:
        config = start_component(
            SPECS["config"],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={},
            args=[f"--service-configuration-name={config_name}", "--resync=5s"],
            identity=unique("config"),
        )
        running.append(config)
        tenants = start_tenants(control_plane, namespace, config)
        running.append(tenants)
        endpoints = {"config": config.grpc_target, "tenants": tenants.grpc_target}
        admissions = [start_admission(control_plane, namespace, endpoints, wait=False) for _ in range(3)]
        running += admissions
        with Balancer([a.webhook_port for a in admissions if a.webhook_port]) as balancer:
            spec = webhooks(url_client(balancer.url), namespace=namespace)
            assert spec.mutating is not None
            assert spec.validating is not None
            spec.mutating.name = f"{config_name}-mutating"
            spec.validating.name = f"{config_name}-validating"
            custom = client.CustomObjectsApi(kube)
            poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
            full = {"enableTLSReconciler": True, "events": {"namespace": namespace}, "admission": spec.to_k8s()}
            custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": full})
            tenants.wait_ready(60)
            for admission in admissions:
                admission.wait_ready(60)
            yield {"namespace": namespace, "admissions": admissions, "balancer": balancer}
    finally:
        for component in reversed(running):
            component.process.stop()
        remove_configuration(kube, config_name)  # the components are stopped: nothing writes it back
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)


def test_thirty_concurrent_namespace_creates_against_a_quota_of_five_admit_five(
    tenant_enclave: dict[str, Any], control_plane: ControlPlane, kube: Any
) -> None:
    custom = client.CustomObjectsApi(kube)
    name = unique("tq")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"owners": [{"kind": "User", "name": OWNER}], "namespaceOptions": {"quota": 5}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    ledger = f"tenant.{name}"
    enclave_namespace = tenant_enclave["namespace"]
    try:
        poll(
            lambda: (
                custom.get_namespaced_custom_object(GROUP, VERSION, enclave_namespace, "quantityledgers", ledger)
                .get("status", {})
                .get("allocated")
                == "0"
            ),
            what="the tenant's ledger initialised",
        )
        for admission in tenant_enclave["admissions"]:
            url = admission.probe_url
            poll(lambda: (metric(url, "enclave_admission_tenant_ledgers") or 0) >= 1, what="admission knows the ledger")  # noqa: B023
        owner = client.CoreV1Api(control_plane.impersonate(OWNER, ["enclave.dev"]))
        owner.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32

        def create(index: int) -> bool:
            try:
                owner.create_namespace({"metadata": {"name": f"{name}-{index}"}})
                return True
            except ApiException as err:
                if "denied the request" in (err.body or ""):
                    return False
                raise

        with ThreadPoolExecutor(max_workers=30) as pool:
            admitted = list(pool.map(create, range(30)))
        assert sum(admitted) == 5
        core = client.CoreV1Api(wide_client(control_plane))
        labelled = core.list_namespace(label_selector=f"enclave.dev/tenant={name}").items
        assert len(labelled) == 5
        settled = poll(
            lambda: (
                (
                    status := custom.get_namespaced_custom_object(
                        GROUP, VERSION, enclave_namespace, "quantityledgers", ledger
                    ).get("status", {})
                ).get("reserved")
                == "0"
                and status
            ),
            what="ledger settled",
        )
        assert settled["allocated"] == "5"
    finally:
        core = client.CoreV1Api(kube)
        for item in core.list_namespace(label_selector=f"enclave.dev/tenant={name}").items:
            with contextlib.suppress(ApiException):
                core.delete_namespace(item.metadata.name)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", name)

"""Capsule's replication advisories tried on enclave-replication: a TenantResource asking the controller to write
what its author could not (a cluster-scoped object), by each path a manifest can take.

In Capsule the controller applied TenantResource items with its own cluster-admin account and only set the
namespace, which a cluster-scoped kind ignores (CVE-2026-22872); the fix guarded one path only (GHSA-jr6p-8pjj-mfx6,
CVE-2026-65835). Enclave acts as the TenantResource's service account, and its fence refuses a cluster-scoped item
before any API call. To show the fence alone stops it, the acting service account here is bound to
``cluster-admin``: each row must end ``OutsideTenant`` with nothing created.

The tenancy is plain objects (a Tenant, namespaces carrying its label), which is all enclave-replication reads;
the TenantResource is written by the cluster administrator because the controller never learns its author, so
who wrote it changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import ComponentSpec, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .tenant_attacks import GROUP, TENANT_LABEL, VERSION

REPLICATION = ComponentSpec("replication", "enclave_replication", grpc=True)


@pytest.fixture(scope="module")
def replication(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[str]:
    """enclave-replication alone (no configuration: TenantResources name their own service account)."""
    home = unique("sec-replication")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": home}})
    running = start_component(
        REPLICATION,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={},
        identity=unique("replication"),
    )
    try:
        yield home
    finally:
        running.process.stop()
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


@pytest.fixture
def tenant_namespace(kube: Any, replication: str) -> Iterator[str]:
    """A tenant with one namespace holding a service account bound to cluster-admin (the worst a careless owner
    or administrator could grant), removed afterwards."""
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    tenant = unique("sec-rtenant")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": tenant}, "spec": {}}
    custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    namespace = f"{tenant}-a"
    core.create_namespace({"metadata": {"name": namespace, "labels": {TENANT_LABEL: tenant}}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "deployer"}})
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "deployer-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": namespace}],
        },
    )
    try:
        yield namespace
    finally:
        with contextlib.suppress(ApiException):
            for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources")["items"]:
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "tenantresources", item["metadata"]["name"]
                )
        poll(
            lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources")["items"],
            timeout=30,
            what="the TenantResources finalized",
        )
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def tenant_resource(kube: Any, namespace: str, block: dict[str, Any], account: str | None = "deployer") -> str:
    name = unique("tr")
    spec: dict[str, Any] = {"resources": [block]}
    if account is not None:
        spec["serviceAccount"] = {"name": account, "namespace": namespace}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TenantResource",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", body)
    return name


def not_ready(kube: Any, namespace: str, name: str, reason: str) -> dict[str, Any]:
    """The TenantResource once Ready=False with ``reason`` for its current generation."""
    custom = client.CustomObjectsApi(kube)

    def check() -> dict[str, Any] | None:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", name)
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if (
                condition["type"] == "Ready"
                and condition["status"] == "False"
                and condition["reason"] == reason
                and condition.get("observedGeneration") == obj["metadata"]["generation"]
            ):
                return obj
        return None

    found: dict[str, Any] = poll(check, timeout=30, what=f"TenantResource {name} Ready=False {reason}")
    return found


def absent(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as err:
        return bool(err.status == 404)
    return False


def cluster_role(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }


def test_cve_2026_22872_tenant_resource_raw_item_cannot_create_a_cluster_role(kube: Any, tenant_namespace: str) -> None:
    """The advisory's proof: a ClusterRole granting everything, as a raw item."""
    role = unique("escape")
    name = tenant_resource(kube, tenant_namespace, {"rawItems": [cluster_role(role)]})
    not_ready(kube, tenant_namespace, name, "OutsideTenant")
    assert absent(lambda: client.RbacAuthorizationV1Api(kube).read_cluster_role(role))


def test_cve_2026_22872_tenant_resource_raw_item_cannot_create_a_validating_webhook_configuration(
    kube: Any, tenant_namespace: str
) -> None:
    """The advisory's second example: a ValidatingWebhookConfiguration, which would put an attacker's server in
    the path of every tenant's requests."""
    hook = unique("evil")
    item = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": hook},
        "webhooks": [],
    }
    name = tenant_resource(kube, tenant_namespace, {"rawItems": [item]})
    not_ready(kube, tenant_namespace, name, "OutsideTenant")
    assert absent(lambda: client.AdmissionregistrationV1Api(kube).read_validating_webhook_configuration(hook))


def test_ghsa_jr6p_8pjj_mfx6_generated_cluster_scoped_object_is_refused(kube: Any, tenant_namespace: str) -> None:
    """CVE-2022872's incomplete fix guarded one path (copied items) and left another open. Here a template that
    renders a ClusterRole is refused the same way as a raw item."""
    role = unique("escape")
    template = (
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n"
        f"  name: {role}\nrules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: ['*']\n"
    )
    name = tenant_resource(kube, tenant_namespace, {"generators": [{"template": template}]})
    not_ready(kube, tenant_namespace, name, "OutsideTenant")
    assert absent(lambda: client.RbacAuthorizationV1Api(kube).read_cluster_role(role))


def test_ghsa_jr6p_8pjj_mfx6_copied_cluster_scoped_object_is_refused(kube: Any, tenant_namespace: str) -> None:
    """The copy path: a namespaced item naming a cluster-scoped kind (a ClusterRole that exists) to read and copy
    is refused before it is read."""
    name = tenant_resource(
        kube,
        tenant_namespace,
        {
            "namespacedItems": [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "name": "admin",
                    "namespace": "default",
                }
            ]
        },
    )
    not_ready(kube, tenant_namespace, name, "OutsideTenant")


def test_tenant_resource_without_a_service_account_never_acts_as_the_controller(
    kube: Any, tenant_namespace: str
) -> None:
    """Capsule 0.14 made TenantResources act as the namespace's ``default`` service account by default, so that
    none acts with the controller's rights. Here a TenantResource naming no account (and no configured default)
    does nothing at all: even a harmless ConfigMap is not written."""
    item = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "harmless"}, "data": {"a": "b"}}
    name = tenant_resource(kube, tenant_namespace, {"rawItems": [item]}, account=None)
    not_ready(kube, tenant_namespace, name, "NoServiceAccount")
    assert absent(lambda: client.CoreV1Api(kube).read_namespaced_config_map("harmless", tenant_namespace))

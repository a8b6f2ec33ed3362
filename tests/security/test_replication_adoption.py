"""Replication adopting Enclave's own objects (issue 29): a tenant owner's TenantResource with ``creation: Merge``
over the RoleBinding enclave-tenants keeps for the owner. Before the fix replication adopted it, admission's
protection hook then refused enclave-tenants' own DELETE, and an owner removed from the Tenant kept admin.

The stack is the tenancy core plus replication, as the chart runs it: enclave-tenants signs in as a service
account of Enclave's namespace (not ``system:masters``, whom the hooks skip), bound to cluster-admin here; the
replication protection hook is registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import USERS, owned_namespace

GROUP, VERSION = "enclave.dev", "v1beta2"
SPECS = {spec.name: spec for spec in COMPONENTS}


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    made = TenancyStack(control_plane, unique("enclave-repl"), unique("replcfg"))
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    core.create_namespace({"metadata": {"name": made.namespace}})
    account = f"system:serviceaccount:{made.namespace}:enclave-tenants"
    binding = f"{made.config_name}-tenants"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": account, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    tenants_kubeconfig = control_plane.identity_kubeconfig(
        account, ["system:serviceaccounts", f"system:serviceaccounts:{made.namespace}"]
    )

    def start(name: str, endpoints: dict[str, str], **kwargs: Any) -> RunningComponent:
        running = start_component(
            SPECS[name],
            log_dir=control_plane.log_dir,
            namespace=made.namespace,
            endpoints=endpoints,
            identity=unique(name),
            **{"kubeconfig": control_plane.kubeconfig, **kwargs},
        )
        made.processes.append(running)
        return running

    try:
        config = start("config", {}, args=[f"--service-configuration-name={made.config_name}", "--resync=5s"])
        endpoints = {"config": config.grpc_target}
        endpoints["tenants"] = start("tenants", endpoints, kubeconfig=tenants_kubeconfig).grpc_target
        endpoints["replication"] = start("replication", {"config": config.grpc_target}).grpc_target
        admission = start("admission", endpoints, wait_ready=False, args=control_plane.webhook_client_args())
        rendered = webhooks(url_client(admission.webhook_url), namespace=made.namespace, replication=True)
        assert rendered.mutating is not None
        assert rendered.validating is not None
        rendered.mutating.name = f"{made.config_name}-mutating"
        validating = rendered.validating.name = f"{made.config_name}-validating"
        spec = {
            "enableTLSReconciler": True,
            "users": [{"kind": "Group", "name": USERS}],
            "events": {"namespace": made.namespace},
            "rbac": {"provisioner": f"{made.config_name}-prov", "deleter": "enclave-namespace-deleter"},
            "admission": rendered.to_k8s(),
        }
        custom = client.CustomObjectsApi(kube)
        poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", made.config_name))
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", made.config_name, {"spec": spec})
        admission.wait_ready(60)
        registrations = client.AdmissionregistrationV1Api(kube)
        poll(lambda: registrations.read_validating_webhook_configuration(validating))
        yield made
    finally:
        made.close()
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(binding)
        with contextlib.suppress(ApiException):
            core.delete_namespace(made.namespace)


def test_merge_adoption_of_the_owners_rolebinding_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    mallory, trent = unique("mallory"), unique("trent")
    tenant, namespace = owned_namespace(stack, impersonate, mallory)
    rbac = client.RbacAuthorizationV1Api(kube)
    (binding,) = [
        b
        for b in rbac.list_namespaced_role_binding(namespace).items
        if b.role_ref.name == "admin" and any(s.name == mallory for s in b.subjects or ())
    ]

    # The owner's robot: a service account with admin in the owner's namespace, made with the owner's own rights.
    as_mallory = impersonate(mallory, [USERS])
    client.CoreV1Api(as_mallory).create_namespaced_service_account(namespace, {"metadata": {"name": "robot"}})
    client.RbacAuthorizationV1Api(as_mallory).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "robot-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}],
        },
    )
    copy = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": binding.metadata.name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [
            {
                "apiGroup": s.api_group,
                "kind": s.kind,
                "name": s.name,
                **({"namespace": s.namespace} if s.namespace else {}),
            }
            for s in binding.subjects
        ],
    }
    custom = client.CustomObjectsApi(kube)
    spec = {
        "serviceAccount": {"name": "robot", "namespace": namespace},
        # Adopt only (never create): what freezes the binding, and nothing for a later pass to write back.
        "resources": [
            {"rawItems": [copy], "policy": {"creation": "Merge", "protect": True, "condition": "object != null"}}
        ],
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantResource", "metadata": {"name": "keep-admin"}}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", {**body, "spec": spec})

    def reported() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", "keep-admin")
        conditions = (obj.get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c["type"] == "Ready"), None)
        return found if found and found["status"] == "False" else None

    condition = poll(reported, timeout=30, what="the TenantResource reports the conflict")
    assert condition["reason"] == "AdoptionConflict", condition
    assert "enclave-tenants" in condition["message"], condition
    live = rbac.read_namespaced_role_binding(binding.metadata.name, namespace)
    assert "enclave.dev/managed-by" not in (live.metadata.labels or {}), "the RoleBinding was adopted"

    # The administrator hands the tenant to someone else: mallory's admin goes with her ownership.
    custom.patch_cluster_custom_object(
        GROUP, VERSION, "tenants", tenant, {"spec": {"owners": [{"kind": "User", "name": trent}]}}
    )

    def gone() -> bool:
        try:
            rbac.read_namespaced_role_binding(binding.metadata.name, namespace)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(gone, timeout=30, what="the removed owner's RoleBinding deleted")
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(as_mallory).list_namespaced_secret(namespace)
    assert refused.value.status == 403
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", "keep-admin")

    def released() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", "keep-admin")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(released, timeout=30, what="the TenantResource deleted (its finalizer released)")


def test_protection_freezing_an_enclave_component_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The second fence: whatever replication protects, every Enclave component (a service account of Enclave's
    namespace) may still change it; the tenant owner may not."""
    owner = unique("olive")
    _, namespace = owned_namespace(stack, impersonate, owner)
    as_owner = impersonate(owner, [USERS])
    client.CoreV1Api(as_owner).create_namespaced_service_account(namespace, {"metadata": {"name": "robot"}})
    client.RbacAuthorizationV1Api(as_owner).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "robot-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}],
        },
    )
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}}
    spec = {"serviceAccount": {"name": "robot", "namespace": namespace}, "resources": [{"rawItems": [config_map]}]}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantResource", "metadata": {"name": "settings"}}
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", {**body, "spec": spec})
    owner_core = client.CoreV1Api(as_owner)

    def protected() -> bool:
        try:
            owner_core.patch_namespaced_config_map("settings", namespace, {"data": {"a": "2"}})
        except ApiException as err:
            return bool(err.status == 403 and "is replicated by" in str(err.body))
        return False

    poll(protected, timeout=30, what="the ConfigMap protected from its tenant owner")
    component = f"system:serviceaccount:{stack.namespace}:enclave-tenants"
    as_component = client.CoreV1Api(impersonate(component, ["system:serviceaccounts"]))
    as_component.patch_namespaced_config_map("settings", namespace, {"metadata": {"labels": {"checked": "yes"}}})
    as_component.delete_namespaced_config_map("settings", namespace)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", "settings")

"""End to end with every built component as its own process: enclave-config, enclave-tenants, enclave-admission.

No test double anywhere: the tenants controller publishes the Tenancy snapshot admission decides from, and
writes the RoleBindings that let an owner use the namespace it just created. Users act through impersonation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_core.snapshots.tenancy import TENANT_LABEL
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .harness import GROUP, VERSION, refused

SPECS = {spec.name: spec for spec in COMPONENTS}
ROBOT_NS = "e2e-robots"


class Stack:
    def __init__(self, kube: Any, impersonate: Callable[..., Any], namespace: str, config_name: str) -> None:
        self.kube = kube
        self.impersonate = impersonate
        self.namespace = namespace
        self.config_name = config_name
        self.processes: list[RunningComponent] = []
        self.tenants: list[str] = []

    def tenant(self, name: str, owners: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"owners": owners, **spec},
        }
        self.tenants.append(name)
        created: dict[str, Any] = client.CustomObjectsApi(self.kube).create_cluster_custom_object(
            GROUP, VERSION, "tenants", body
        )
        return created

    def status(self, tenant: str) -> dict[str, Any]:
        obj = client.CustomObjectsApi(self.kube).get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)
        return dict(obj.get("status") or {})

    def as_user(self, user: str, groups: list[str]) -> client.CoreV1Api:
        return client.CoreV1Api(self.impersonate(user, groups))

    def create_namespace(self, api: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
        """Create, retrying while the tenants snapshot that admission needs is still on its way."""

        def attempt() -> bool:
            try:
                api.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
            except ApiException as err:
                if "not ready" in str(err.body) or "no tenant" in str(err.body):
                    return False
                raise
            return True

        poll(attempt, timeout=20, what=f"create namespace {name}")

    def namespace_tenant(self, name: str) -> str | None:
        labels = client.CoreV1Api(self.kube).read_namespace(name).metadata.labels or {}
        return labels.get(TENANT_LABEL)


@pytest.fixture(scope="module")
def stack(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Stack]:
    namespace, config_name = unique("enclave-e2e"), unique("e2e")
    core = client.CoreV1Api(kube)
    for name in (namespace, ROBOT_NS):
        with contextlib.suppress(ApiException):
            core.create_namespace({"metadata": {"name": name}})
    result = Stack(kube, impersonate, namespace, config_name)

    def start(name: str, endpoints: dict[str, str], **kwargs: Any) -> RunningComponent:
        running = start_component(
            SPECS[name],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            identity=unique(name),
            **kwargs,
        )
        result.processes.append(running)
        return running

    config = start("config", {}, args=[f"--service-configuration-name={config_name}", "--resync=5s"])
    endpoints = {"config": config.grpc_target}
    tenants = start("tenants", endpoints)
    endpoints["tenants"] = tenants.grpc_target
    admission = start("admission", endpoints, wait_ready=False, args=control_plane.webhook_client_args())
    rendered = webhooks(url_client(admission.webhook_url), namespace=namespace, nodes=True)
    assert rendered.mutating is not None
    assert rendered.validating is not None
    rendered.mutating.name = f"{config_name}-mutating"
    rendered.validating.name = f"{config_name}-validating"
    spec = {
        "enableTLSReconciler": True,
        "users": [
            {"kind": "Group", "name": "enclave.dev"},
            {"kind": "ServiceAccount", "name": f"system:serviceaccount:{ROBOT_NS}:robot"},
        ],
        "events": {"namespace": namespace},
        "nodeMetadata": {"forbiddenLabels": {"denied": ["pool"], "deniedRegex": "^secret\\."}},
        "rbac": {"provisioner": f"{config_name}-prov", "deleter": "enclave-namespace-deleter"},
        "admission": rendered.to_k8s(),
    }
    custom = client.CustomObjectsApi(kube)
    poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": spec})
    admission.wait_ready(60)
    registrations = client.AdmissionregistrationV1Api(kube)
    poll(lambda: registrations.read_validating_webhook_configuration(f"{config_name}-validating"))
    try:
        yield result
    finally:
        for running in reversed(result.processes):
            running.process.stop()
        for kind in ("validating", "mutating"):
            with contextlib.suppress(ApiException):
                getattr(registrations, f"delete_{kind}_webhook_configuration")(f"{config_name}-{kind}")
        for tenant in result.tenants:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name)


def _rolebindings(kube: Any, namespace: str) -> dict[str, Any]:
    items = client.RbacAuthorizationV1Api(kube).list_namespaced_role_binding(namespace).items
    return {rb.metadata.name: rb for rb in items}


def test_owner_creates_namespace_lands_in_tenant_with_rights(stack: Stack) -> None:
    tenant, alice = unique("solar"), unique("alice")
    stack.tenant(tenant, [{"kind": "User", "name": alice}])
    api = stack.as_user(alice, ["enclave.dev"])
    name = f"{tenant}-dev"
    stack.create_namespace(api, name)
    assert stack.namespace_tenant(name) == tenant
    refs = client.CoreV1Api(stack.kube).read_namespace(name).metadata.owner_references
    assert [(ref.kind, ref.name) for ref in refs] == [("Tenant", tenant)]
    # The tenants controller binds the owner's roles; with them alice works inside her namespace.
    poll(lambda: any(rb.role_ref.name == "admin" for rb in _rolebindings(stack.kube, name).values()))

    def can_write() -> bool:
        try:
            api.create_namespaced_config_map(name, {"metadata": {"generateName": "cm-"}})
        except ApiException:
            return False
        return True

    poll(can_write)
    poll(lambda: stack.status(tenant).get("namespaces") == [name] and stack.status(tenant).get("size") == 1)


def test_status_follows_create_and_delete_and_quota_is_enforced(stack: Stack) -> None:
    tenant, carol = unique("oil"), unique("carol")
    stack.tenant(tenant, [{"kind": "User", "name": carol}], namespaceOptions={"quota": 2})
    api = stack.as_user(carol, ["enclave.dev"])
    first, second = f"{tenant}-a", f"{tenant}-b"
    stack.create_namespace(api, first)
    stack.create_namespace(api, second)
    poll(lambda: stack.status(tenant).get("size") == 2)
    message = refused(lambda: api.create_namespace({"metadata": {"name": f"{tenant}-c"}}))
    assert "quota" in message
    # The owner may delete a namespace of her tenant (deleter role bound there); status follows.
    poll(
        lambda: any(rb.role_ref.name == "enclave-namespace-deleter" for rb in _rolebindings(stack.kube, first).values())
    )

    def deleted() -> bool:
        try:
            api.delete_namespace(first)
        except ApiException as err:
            return bool(err.status == 404)
        return True

    poll(deleted)
    poll(lambda: stack.status(tenant).get("namespaces") == [second], timeout=60)


def test_group_owner_and_ambiguous_names(stack: Stack) -> None:
    one, two, dave = unique("one"), unique("two"), unique("dave")
    team = unique("team")
    stack.tenant(one, [{"kind": "Group", "name": team}])
    stack.tenant(two, [{"kind": "Group", "name": team}])
    api = stack.as_user(dave, ["enclave.dev", team])

    def sees_both() -> bool:
        """Admission's snapshot has both tenants: each prefixed dry-run lands in its own (with only one known,
        both would land in that one). Until then an ambiguous name would be assigned, not refused."""
        for tenant in (one, two):
            try:
                probe = api.create_namespace({"metadata": {"name": f"{tenant}-probe"}}, dry_run="All")
            except ApiException as err:
                if "no tenant" in str(err.body) or "not ready" in str(err.body):
                    return False
                raise
            if (probe.metadata.labels or {}).get(TENANT_LABEL) != tenant:
                return False
        return True

    poll(sees_both, timeout=20, what="both tenants of the group in admission's snapshot")
    # Two tenants and a name matching neither prefix: refused with both tenants named.
    message = refused(lambda: api.create_namespace({"metadata": {"name": unique("neutral")}}))
    assert one in message
    assert two in message
    stack.create_namespace(api, f"{two}-web")
    assert stack.namespace_tenant(f"{two}-web") == two
    poll(
        lambda: any(
            s.kind == "Group" and s.name == team
            for rb in _rolebindings(stack.kube, f"{two}-web").values()
            for s in rb.subjects or []
        )
    )


def test_service_account_owner(stack: Stack) -> None:
    tenant = unique("robots")
    account = f"system:serviceaccount:{ROBOT_NS}:robot"
    stack.tenant(tenant, [{"kind": "ServiceAccount", "name": account}])
    api = stack.as_user(
        account, ["system:serviceaccounts", f"system:serviceaccounts:{ROBOT_NS}", "system:authenticated"]
    )
    name = f"{tenant}-ci"
    stack.create_namespace(api, name)
    assert stack.namespace_tenant(name) == tenant
    poll(
        lambda: any(
            s.kind == "ServiceAccount" and s.name == "robot" and s.namespace == ROBOT_NS
            for rb in _rolebindings(stack.kube, name).values()
            for s in rb.subjects or []
        )
    )


def test_tenant_users_cannot_set_forbidden_node_metadata(stack: Stack) -> None:
    node, erin = unique("e2e-node"), unique("erin")
    core = client.CoreV1Api(stack.kube)
    core.create_node({"metadata": {"name": node, "labels": {"pool": "shared"}}})
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    role = f"{node}-labeler"
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": erin, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    try:
        api = stack.as_user(erin, ["enclave.dev"])

        def patched() -> bool:
            try:
                api.patch_node(node, {"metadata": {"labels": {"team": "erin"}}})
            except ApiException as err:
                if err.status == 403 and "denied the request" not in str(err.body):
                    return False  # the RBAC binding is not visible to the authorizer yet
                raise
            return True

        poll(patched)
        assert "pool" in refused(lambda: api.patch_node(node, {"metadata": {"labels": {"pool": "mine"}}}))
        assert "secret.key" in refused(lambda: api.patch_node(node, {"metadata": {"labels": {"secret.key": "x"}}}))
        # the status subresource can rewrite labels too: the hook covers it
        patch = {"metadata": {"labels": {"pool": "mine"}}}
        assert "pool" in refused(lambda: api.patch_node_status(node, patch))
        assert client.CoreV1Api(stack.kube).read_node(node).metadata.labels["pool"] == "shared"
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
        core.delete_node(node)

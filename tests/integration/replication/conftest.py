"""Fixtures for the replication tests: one enclave-replication process for the module, and a helper that
creates tenants, namespaces and replication objects (and removes them afterwards).

Tenants here are plain Tenant objects and namespaces carry the tenant label directly: the replication
controller reads exactly those, so the tenants controller and admission are not needed (the protection tests
start admission themselves).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import ComponentSpec, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
TENANT_LABEL = "enclave.dev/tenant"
REPLICATION = ComponentSpec("replication", "enclave_replication", grpc=True)
CONFIG = ComponentSpec("config", "enclave_config", grpc=True)


@dataclass
class Stack:
    """The module's processes: enclave-replication, and enclave-config when the module has a CONFIGURATION."""

    replication: RunningComponent
    config: RunningComponent | None
    config_name: str
    home: str


@pytest.fixture(scope="module")
def replication(
    request: pytest.FixtureRequest, control_plane: ControlPlane, kube: Any, enclave_crds: list[str]
) -> Iterator[Stack]:
    """enclave-replication for the module; with a module-level ``CONFIGURATION`` (a ServiceConfiguration spec)
    enclave-config runs beside it with that configuration and replication follows its ConfigService."""
    suffix = secrets.token_hex(3)
    home = f"replication-home-{suffix}"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": home}})
    configuration: dict[str, Any] | None = getattr(request.module, "CONFIGURATION", None)
    started: list[RunningComponent] = []
    config_name = f"rcfg-{suffix}"
    config: RunningComponent | None = None
    try:
        endpoints: dict[str, str] = {}
        args: list[str] = []
        if configuration is not None:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ServiceConfiguration",
                "metadata": {"name": config_name},
            }
            rbac = {"provisioner": f"rprov-{suffix}", "deleter": f"rdel-{suffix}"}
            spec = {"rbac": rbac, **configuration}
            custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", {**body, "spec": spec})
            config = start_component(
                CONFIG,
                kubeconfig=control_plane.kubeconfig,
                log_dir=control_plane.log_dir,
                namespace=home,
                endpoints={},
                args=[f"--service-configuration-name={config_name}", "--resync=5s"],
                identity=f"rconfig-{suffix}",
            )
            started.append(config)
            args.append(f"--config-endpoint={config.grpc_target}")
        running = start_component(
            REPLICATION,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=home,
            endpoints=endpoints,
            args=args,
            identity=f"replication-{suffix}",
        )
        started.append(running)
        yield Stack(running, config, config_name, home)
    finally:
        for process in reversed(started):
            process.process.stop()
        if configuration is not None:
            # With everything enclave-config generated for it: a module that registered hooks (test_protection)
            # and removed them while enclave-config still ran had them written back, pointing at an admission
            # server that is gone, and every later write they match failed closed.
            remove_configuration(kube, config_name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


class Cluster:
    """Admin access to what a test creates, deleted afterwards (replication objects first)."""

    def __init__(self, kube: Any) -> None:
        self.api = kube
        self.custom = client.CustomObjectsApi(kube)
        self.core = client.CoreV1Api(kube)
        self.networking = client.NetworkingV1Api(kube)
        self.rbac = client.RbacAuthorizationV1Api(kube)
        self.objects: list[tuple[str, str, str]] = []
        self.namespaces: list[str] = []
        self.tenants: list[str] = []

    def tenant(self, name: str, labels: dict[str, str] | None = None, namespaces: int = 0) -> list[str]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {},
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        self.tenants.append(name)
        return [self.namespace(f"{name}-{index}", name) for index in range(namespaces)]

    def namespace(self, name: str, tenant: str | None = None, labels: dict[str, str] | None = None) -> str:
        all_labels = {**(labels or {}), **({TENANT_LABEL: tenant} if tenant else {})}
        self.core.create_namespace({"metadata": {"name": name, "labels": all_labels}})
        self.namespaces.append(name)
        return name

    def create_global(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GlobalTenantResource",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, "globaltenantresources", body)
        self.objects.append(("globaltenantresources", "", name))

    def create_local(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TenantResource",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", body)
        self.objects.append(("tenantresources", namespace, name))

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        if namespace:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        else:
            found = self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        return found

    def patch(self, plural: str, name: str, patch: dict[str, Any], namespace: str = "") -> None:
        if namespace:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, patch)
        else:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, patch)

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        with contextlib.suppress(ApiException):
            if namespace:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)

    def ready(self, plural: str, name: str, namespace: str = "", status: str = "True") -> dict[str, Any]:
        """Wait until Ready has ``status`` for the current generation; return the object."""

        def check() -> dict[str, Any] | None:
            obj = self.get(plural, name, namespace)
            generation = obj["metadata"].get("generation")
            for condition in (obj.get("status") or {}).get("conditions") or []:
                if (
                    condition["type"] == "Ready"
                    and condition["status"] == status
                    and condition.get("observedGeneration") == generation
                ):
                    return obj
            return None

        result: dict[str, Any] = poll(check, timeout=30, what=f"{plural} {name} Ready={status}")
        return result

    def service_account(self, namespace: str, name: str, rules: list[dict[str, Any]], where: list[str]) -> str:
        """A service account with a Role of ``rules`` bound in each namespace of ``where``; its username."""
        self.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        for target in where:
            self.rbac.create_namespaced_role(target, {"metadata": {"name": name}, "rules": rules})
            self.rbac.create_namespaced_role_binding(
                target,
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                },
            )
        return f"system:serviceaccount:{namespace}:{name}"

    def events(self, namespace: str, name: str) -> list[Any]:
        return list(self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items)

    def config_map(self, namespace: str, name: str) -> Any:
        try:
            return self.core.read_namespaced_config_map(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def cleanup(self) -> None:
        for plural, namespace, name in reversed(self.objects):
            self.delete(plural, name, namespace)
        for plural, namespace, name in reversed(self.objects):
            with contextlib.suppress(AssertionError):
                poll(_gone(self, plural, name, namespace), timeout=15, what=f"{name} gone")
        for namespace in self.namespaces:
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(namespace)
        for tenant in self.tenants:
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def _gone(cluster: Cluster, plural: str, name: str, namespace: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            cluster.get(plural, name, namespace)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    return check


@pytest.fixture
def cluster(kube: Any, replication: Stack) -> Iterator[Cluster]:
    made = Cluster(kube)
    try:
        yield made
    finally:
        made.cleanup()

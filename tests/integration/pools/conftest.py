"""Fixtures for the pools component: enclave-config, enclave-pools and enclave-admission, one set per module.

Admission runs with the pools endpoint and only the pool hooks registered (``webhooks(pools=True)`` filtered to
them), so this module's configuration never decides other modules' namespaces. Pools are cluster-scoped, so
each test isolates itself with namespaces carrying a label value of its own that only its pool selects.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
SPECS = {spec.name: spec for spec in COMPONENTS}
USER, USERS_GROUP = "pool-user", "pool-users"
"""A non-admin user with every right on pools, claims and pods: only the webhook may stop it."""


@dataclass
class Pools:
    kube: Any
    impersonate: Callable[..., Any]
    namespace: str
    pools: RunningComponent
    created_pools: list[str] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def as_user(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.impersonate(USER, [USERS_GROUP]))

    def namespaces(self, count: int) -> tuple[str, list[str]]:
        """``count`` fresh namespaces labelled ``pool-test=<token>``; returns (token, names)."""
        token = secrets.token_hex(3)
        core = client.CoreV1Api(self.kube)
        names = [f"pool-{token}-{i}" for i in range(count)]
        for name in names:
            core.create_namespace({"metadata": {"name": name, "labels": {"pool-test": token}}})
        return token, names

    def pool(self, name: str, token: str, hard: dict[str, Any], **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourcePool",
            "metadata": {"name": name},
            "spec": {"quota": {"hard": hard}, "selectors": [{"matchLabels": {"pool-test": token}}], **spec},
        }
        self.created_pools.append(name)
        created: dict[str, Any] = self.custom.create_cluster_custom_object(GROUP, VERSION, "resourcepools", body)
        poll(lambda: self.get_pool(name).get("status", {}).get("observedGeneration"), what=f"pool {name} status")
        return created

    def get_pool(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "resourcepools", name)
        return found

    def claim(self, namespace: str, name: str, amounts: dict[str, Any], pool: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"claim": amounts}
        if pool is not None:
            spec["pool"] = pool
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourcePoolClaim", "metadata": {"name": name}}

        def attempt() -> dict[str, Any] | None:
            try:
                created: dict[str, Any] = self.as_user().create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "resourcepoolclaims", {**body, "spec": spec}
                )
            except ApiException as err:
                # The snapshot naming a pool created a moment ago may still be on its way to admission.
                if "does not select" in str(err.body) or "does not exist" in str(err.body):
                    return None
                raise
            return created

        result: dict[str, Any] = poll(attempt, timeout=10, what=f"create claim {namespace}/{name}")
        return result

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourcepoolclaims", name
        )
        return found

    def bound(self, namespace: str, name: str) -> dict[str, Any]:
        """Wait until the claim's Bound condition is settled; return it."""

        def settled() -> dict[str, Any] | None:
            status = self.get_claim(namespace, name).get("status") or {}
            condition = status.get("condition")
            return condition if condition and status.get("observedGeneration") else None

        result: dict[str, Any] = poll(settled, timeout=20, what=f"claim {namespace}/{name} status")
        return result

    def wait_reason(self, namespace: str, name: str, reason: str, timeout: float = 20) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            condition = (self.get_claim(namespace, name).get("status") or {}).get("condition") or {}
            return condition if condition.get("reason") == reason else None

        result: dict[str, Any] = poll(reached, timeout=timeout, what=f"claim {namespace}/{name} {reason}")
        return result

    def quota_hard(self, namespace: str, pool: str) -> dict[str, str]:
        quota = client.CoreV1Api(self.kube).read_namespaced_resource_quota(f"enclave-pool-{pool}", namespace)
        return dict(quota.spec.hard or {})

    def delete_pool(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "resourcepools", name)


def _grant(kube: Any, name: str) -> None:
    rbac = client.RbacAuthorizationV1Api(kube)
    role = {
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [GROUP], "resources": ["resourcepools", "resourcepoolclaims"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["pods", "resourcequotas"], "verbs": ["*"]},
        ],
    }
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "Group", "name": USERS_GROUP, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role(role)
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role_binding(binding)


@pytest.fixture(scope="module")
def pools(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Pools]:
    suffix = secrets.token_hex(3)
    namespace, config_name = f"enclave-pools-{suffix}", f"pools-{suffix}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    grant = f"pools-test-{suffix}"
    _grant(kube, grant)
    running: list[RunningComponent] = []

    def start(name: str, endpoints: dict[str, str], **kwargs: Any) -> RunningComponent:
        component = start_component(
            SPECS[name],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            identity=f"{name}-{suffix}",
            **kwargs,
        )
        running.append(component)
        return component

    custom = client.CustomObjectsApi(kube)
    registrations = client.AdmissionregistrationV1Api(kube)
    result: Pools | None = None
    try:
        config = start("config", {}, args=[f"--service-configuration-name={config_name}", "--resync=5s"])
        endpoints = {"config": config.grpc_target}
        pools_component = start("pools", endpoints, args=["--resync=5s"])
        endpoints["pools"] = pools_component.grpc_target
        admission = start("admission", endpoints, wait_ready=False)
        rendered = webhooks(url_client(admission.webhook_url), namespace=namespace, pools=True)
        assert rendered.mutating is not None
        assert rendered.validating is not None
        rendered.mutating.name = f"{config_name}-mutating"
        rendered.validating.name = f"{config_name}-validating"
        rendered.mutating.webhooks = [h for h in rendered.mutating.webhooks or [] if "resourcepool" in h.name]
        rendered.validating.webhooks = [h for h in rendered.validating.webhooks or [] if "resourcepool" in h.name]
        spec = {"enableTLSReconciler": True, "events": {"namespace": namespace}, "admission": rendered.to_k8s()}
        poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": spec})
        admission.wait_ready(60)
        poll(lambda: registrations.read_validating_webhook_configuration(f"{config_name}-validating"))
        poll(lambda: registrations.read_mutating_webhook_configuration(f"{config_name}-mutating"))
        result = Pools(kube, impersonate, namespace, pools_component)
        yield result
    finally:
        for kind in ("validating", "mutating"):
            with contextlib.suppress(ApiException):
                getattr(registrations, f"delete_{kind}_webhook_configuration")(f"{config_name}-{kind}")
        if result is not None:
            for name in result.created_pools:
                result.delete_pool(name)

            def gone() -> bool:
                listed = custom.list_cluster_custom_object(GROUP, VERSION, "resourcepools")["items"]
                return not {item["metadata"]["name"] for item in listed} & set(result.created_pools)

            with contextlib.suppress(AssertionError):
                poll(gone, timeout=20, what="pools finalised")
        for component in reversed(running):
            component.process.stop()
        for kind in ("validating", "mutating"):  # again: the config component may have recreated them meanwhile
            with contextlib.suppress(ApiException):
                getattr(registrations, f"delete_{kind}_webhook_configuration")(f"{config_name}-{kind}")
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name)
        rbac = client.RbacAuthorizationV1Api(kube)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(grant)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(grant)
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)

"""The real pipeline for tenant rules: enclave-config, enclave-tenants and enclave-admission as processes.

Rules are written where users write them (Tenant ``spec.rules``); the tenants controller compiles each
namespace's RuleStatus and publishes the Rules snapshot; kube-apiserver calls ``/resources`` and
``/resources/mutate`` over HTTPS. Tenant users act through impersonation with the RBAC the tenants
controller binds for them (``admin`` in their namespaces).
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
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
SPECS = {spec.name: spec for spec in COMPONENTS}
USERS = "enclave.dev"


class Stack:
    """The running components and helpers to drive tenants, namespaces and users."""

    def __init__(self, kube: Any, impersonate: Callable[..., Any], namespace: str, config_name: str) -> None:
        self.kube = kube
        self.impersonate = impersonate
        self.namespace = namespace
        """Enclave's namespace; also the events namespace (deny and audit Events land here)."""
        self.config_name = config_name
        self.processes: list[RunningComponent] = []
        self.tenants: list[str] = []
        self.custom = client.CustomObjectsApi(kube)

    # -- tenants and namespaces ----------------------------------------------------------------------------

    def tenant(self, owner: str, rules: list[dict[str, Any]] | None = None) -> str:
        name = unique("rt")
        spec: dict[str, Any] = {"owners": [{"kind": "User", "name": owner}]}
        if rules is not None:
            spec["rules"] = rules
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}
        self.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        self.tenants.append(name)
        return name

    def set_rules(self, tenant: str, rules: list[dict[str, Any]]) -> None:
        patch = {"spec": {"rules": rules}}
        self.custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, patch)

    def namespace_of(self, tenant: str, owner: str, suffix: str = "dev", **labels: str) -> str:
        """A namespace the owner creates in ``tenant``, once the owner can write in it (RoleBindings bound)."""
        name = f"{tenant}-{suffix}"
        api = self.core(owner)

        def create() -> bool:
            try:
                api.create_namespace({"metadata": {"name": name, "labels": labels}})
            except ApiException as err:
                if err.status == 409:
                    return True
                if "not ready" in str(err.body) or "no tenant" in str(err.body) or "own no tenant" in str(err.body):
                    return False
                raise
            return True

        poll(create, timeout=30, what=f"create namespace {name}")
        rbac = client.RbacAuthorizationV1Api(self.kube)
        poll(lambda: any(b.role_ref.name == "admin" for b in rbac.list_namespaced_role_binding(name).items))
        return name

    def rule_status(self, namespace: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "rulestatuses", "default"
        )
        return found

    def wait_rules(self, namespace: str, size: int) -> dict[str, Any]:
        """Until the namespace's RuleStatus shows ``size`` rules (the snapshot is published before)."""

        def compiled() -> dict[str, Any] | None:
            status = self.rule_status(namespace).get("status") or {}
            return status if status.get("size") == size else None

        found: dict[str, Any] = poll(compiled, timeout=30, what=f"RuleStatus of {namespace} with {size} rules")
        return found

    # -- acting as users -----------------------------------------------------------------------------------

    def core(self, user: str, groups: list[str] | None = None) -> client.CoreV1Api:
        return client.CoreV1Api(self.impersonate(user, groups if groups is not None else [USERS]))

    def api(self, kind: type, user: str, groups: list[str] | None = None) -> Any:
        return kind(self.impersonate(user, groups if groups is not None else [USERS]))

    def events(self, reason: str, fragment: str) -> list[Any]:
        items = client.CoreV1Api(self.kube).list_namespaced_event(self.namespace).items
        return [e for e in items if e.reason == reason and fragment in (e.message or "")]


def refusal(call: Callable[[], Any]) -> str:
    """The admission denial ``call`` runs into (an AssertionError when it is admitted)."""
    with pytest.raises(ApiException) as caught:
        call()
    body = str(caught.value.body or "")
    assert caught.value.status in (400, 403, 422), body
    assert "denied the request" in body, body
    return body


def eventually_refused(call: Callable[[], Any], *fragments: str, timeout: float = 20) -> str:
    """Retry ``call`` until admission refuses it with every fragment (rules reach admission asynchronously)."""

    def attempt() -> str | None:
        try:
            body = refusal(call)
        except (AssertionError, pytest.fail.Exception):
            return None
        return body if all(f in body for f in fragments) else None

    found: str = poll(attempt, timeout=timeout, what=f"a refusal mentioning {fragments}")
    return found


@pytest.fixture(scope="module")
def stack(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Stack]:
    namespace, config_name = unique("enclave-rules"), unique("rules")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
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
    tenants = start("tenants", endpoints, args=["--resync=5s"])
    endpoints["tenants"] = tenants.grpc_target
    admission = start("admission", endpoints, wait_ready=False)
    rendered = webhooks(url_client(admission.webhook_url), namespace=namespace)
    assert rendered.mutating is not None
    assert rendered.validating is not None
    rendered.mutating.name = f"{config_name}-mutating"
    rendered.validating.name = f"{config_name}-validating"
    spec = {
        "enableTLSReconciler": True,
        "users": [{"kind": "Group", "name": USERS}],
        "events": {"namespace": namespace},
        "rbac": {"provisioner": f"{config_name}-prov", "deleter": f"{config_name}-del"},
        "admission": rendered.to_k8s(),
    }
    custom = client.CustomObjectsApi(kube)
    poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": spec})
    admission.wait_ready(60)
    registrations = client.AdmissionregistrationV1Api(kube)
    poll(lambda: registrations.read_validating_webhook_configuration(f"{config_name}-validating"))
    poll(lambda: registrations.read_mutating_webhook_configuration(f"{config_name}-mutating"))
    try:
        yield result
    finally:
        # Processes first: a running config component would recreate the webhook configurations, and hooks
        # left pointing at a stopped admission server fail every later write closed.
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
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)

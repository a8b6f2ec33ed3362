"""Replication stall (issue 29): a tenant's template that loops for hours or allocates gigabytes must cost only its
own object. Before the fix enclave-replication rendered templates in its event loop: the Lease holder froze
(renewals, probes) and another tenant's GlobalTenantResource was not applied.

enclave-replication runs here alone (tenants are plain Tenant objects, namespaces carry the tenant label, which
is all the controller reads), with leader election on and its default render budgets.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
REPLICATION = next(spec for spec in COMPONENTS if spec.name == "replication")
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
ALLOCATES = "{{ 'x' * 10**10 }}"
APPLIED_WITHIN = 20.0
"""Seconds within which another tenant's GlobalTenantResource must be applied while the attack runs."""


class Replication:
    """The module's enclave-replication process, its namespace, and what the tests created (removed after)."""

    def __init__(self, kube: Any, running: RunningComponent, home: str, identity: str) -> None:
        self.kube = kube
        self.running = running
        self.home = home
        self.identity = identity
        self.custom = client.CustomObjectsApi(kube)
        self.core = client.CoreV1Api(kube)
        self.rbac = client.RbacAuthorizationV1Api(kube)
        self.created: list[tuple[str, str, str]] = []
        self.namespaces: list[str] = []
        self.tenants: list[str] = []

    def tenant(self, name: str) -> str:
        """A Tenant labelled ``stall=<name>`` with one namespace; the namespace's name."""
        metadata = {"name": name, "labels": {"stall": name}}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": metadata, "spec": {}}
        self.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        self.tenants.append(name)
        namespace = f"{name}-a"
        self.core.create_namespace({"metadata": {"name": namespace, "labels": {"enclave.dev/tenant": name}}})
        self.namespaces.append(namespace)
        return namespace

    def writer(self, namespace: str) -> str:
        """A service account of ``namespace`` that may manage its ConfigMaps: what a TenantResource acts as."""
        self.core.create_namespaced_service_account(namespace, {"metadata": {"name": "writer"}})
        rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]
        self.rbac.create_namespaced_role(namespace, {"metadata": {"name": "writer"}, "rules": rules})
        self.rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "writer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
                "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": namespace}],
            },
        )
        return "writer"

    def tenant_resource(self, namespace: str, name: str, template: str) -> None:
        spec = {"serviceAccount": {"name": "writer", "namespace": namespace}, "resources": [generator(template)]}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantResource", "metadata": {"name": name}}
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "tenantresources", {**body, "spec": spec}
        )
        self.created.append(("tenantresources", namespace, name))

    def global_resource(self, name: str, tenant: str, template: str) -> None:
        spec = {"tenantSelector": {"matchLabels": {"stall": tenant}}, "resources": [generator(template)]}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GlobalTenantResource", "metadata": {"name": name}}
        self.custom.create_cluster_custom_object(GROUP, VERSION, "globaltenantresources", {**body, "spec": spec})
        self.created.append(("globaltenantresources", "", name))

    def finalized(self, namespace: str, name: str) -> bool:
        """Whether the controller has started on the TenantResource (its finalizer comes before any render)."""
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", name)
        return "enclave.dev/replication" in (obj["metadata"].get("finalizers") or [])

    def ready_condition(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tenantresources", name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)

    def lease(self) -> Any:
        return client.CoordinationV1Api(self.kube).read_namespaced_lease("enclave-replication", self.home)

    def cleanup(self) -> None:
        for plural, namespace, name in reversed(self.created):
            with contextlib.suppress(ApiException):
                if namespace:
                    self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
                else:
                    self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        for namespace in self.namespaces:
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(namespace)
        for tenant in self.tenants:
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def generator(template: str) -> dict[str, Any]:
    return {"generators": [{"template": template}]}


@pytest.fixture(scope="module")
def replication(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[Replication]:
    home = unique("stall-home")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": home}})
    identity = unique("replication")
    running = start_component(
        REPLICATION,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={},
        args=["--lease-duration=6", "--renew-deadline=4", "--retry-period=1"],
        identity=identity,
    )
    made = Replication(kube, running, home, identity)
    try:
        poll(lambda: made.lease().spec.holder_identity == identity, timeout=30, what="replication holds its Lease")
        yield made
    finally:
        made.cleanup()
        running.process.stop()
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


def test_a_template_that_loops_or_allocates_stalls_nobody_is_refused(replication: Replication) -> None:
    attacker, victim = unique("stall-a"), unique("stall-b")
    home = replication.tenant(attacker)
    target = replication.tenant(victim)
    replication.writer(home)
    replication.tenant_resource(home, "loops", LOOPS)
    replication.tenant_resource(home, "allocates", ALLOCATES)
    poll(lambda: replication.finalized(home, "loops"), timeout=APPLIED_WITHIN, what="the looping template picked up")

    started = time.monotonic()
    manifest = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: welcome\ndata:\n  tenant: {{ tenant.metadata.name }}\n"
    )
    replication.global_resource(unique("welcome"), victim, manifest)

    def applied() -> bool:
        try:
            found = replication.core.read_namespaced_config_map("welcome", target)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return bool(found.data == {"tenant": victim})

    poll(applied, timeout=APPLIED_WITHIN, what="the other tenant's GlobalTenantResource applied")
    assert time.monotonic() - started < APPLIED_WITHIN

    for name, reason in (("loops", "RenderCPUBudgetExceeded"), ("allocates", "RenderMemoryBudgetExceeded")):
        condition = poll(
            lambda name=name, reason=reason: (  # type: ignore[misc]
                c if (c := replication.ready_condition(home, name)) and c["reason"] == reason else None
            ),
            timeout=30,
            what=f"{name}: Ready False, {reason}",
        )
        assert condition["status"] == "False"
        assert "budget" in condition["message"], condition
        selector = f"involvedObject.name={name},involvedObject.namespace={home}"
        events = replication.core.list_event_for_all_namespaces(field_selector=selector).items
        assert any(event.reason == reason for event in events), [event.reason for event in events]

    renewed = replication.lease().spec.renew_time
    poll(
        lambda: replication.lease().spec.renew_time != renewed,
        timeout=10,
        what="the Lease renewed after the attack",
    )
    assert replication.lease().spec.holder_identity == replication.identity
    assert ready(replication.running.probe_url)

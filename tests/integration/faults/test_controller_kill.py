"""Faults: the tenants controller's Lease holder SIGKILLed in the middle of a reconcile that touches every
namespace of a tenant (an owner change rewrites each namespace's RoleBindings).

No graceful release: the standby must take the Lease within one lease duration (plus one retry period, its
expiry is judged from when it last saw the Lease change), then converge from observed state: every namespace
ends with exactly the new owner's bindings (none lost, none duplicated, the old owner's gone) and the tenant's
status describes its current generation with every namespace. Both replicas write in rounds of
``--batch-size=4`` namespaces, so the successor takes over with a backlog of several rounds; a namespace created
right after the takeover must be bound too (it is ranked before the backlog's mere drift: docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import secrets
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

SPECS = {spec.name: spec for spec in COMPONENTS}
GROUP, VERSION = "enclave.dev", "v1beta2"
FAST_LEASE = ["--lease-duration=6", "--renew-deadline=4", "--retry-period=1"]
LEASE_DURATION, RETRY_PERIOD = 6.0, 1.0
NAMESPACES = 12
MANAGED = "app.kubernetes.io/managed-by=enclave-tenants"


@pytest.fixture
def replicas(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str]
) -> Iterator[tuple[str, dict[str, RunningComponent]]]:
    """(home namespace, replicas): enclave-config and two enclave-tenants replicas (fast Lease) in a home
    namespace of their own."""
    suffix = secrets.token_hex(3)
    name, home = f"fcfg-{suffix}", f"faults-home-{suffix}"
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": home}})
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServiceConfiguration", "metadata": {"name": name}}
    spec = {"rbac": {"provisioner": f"fprov-{suffix}", "deleter": f"fdel-{suffix}"}}
    custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", {**body, "spec": spec})
    started: list[RunningComponent] = []

    def start(component: str, identity: str, args: list[str], endpoints: dict[str, str]) -> RunningComponent:
        running = start_component(
            SPECS[component],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=home,
            endpoints=endpoints,
            args=args,
            identity=identity,
        )
        started.append(running)
        return running

    try:
        config = start("config", f"config-{suffix}", [f"--service-configuration-name={name}", "--resync=5s"], {})
        endpoints = {"config": config.grpc_target}
        tenant_args = [f"--config-endpoint={config.grpc_target}", "--resync=5s", "--batch-size=4", *FAST_LEASE]
        yield (
            home,
            {
                identity: start("tenants", identity, tenant_args, endpoints)
                for identity in (f"tenants-a-{suffix}", f"tenants-b-{suffix}")
            },
        )
    finally:
        for running in reversed(started):
            running.process.stop()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


def test_a_killed_tenants_leader_is_replaced_within_its_lease_and_nothing_is_lost(
    replicas: tuple[str, dict[str, RunningComponent]], kube: Any
) -> None:
    lease_namespace, running = replicas
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    rbac, coordination = client.RbacAuthorizationV1Api(kube), client.CoordinationV1Api(kube)
    tenant, old, new = unique("kill"), unique("olduser"), unique("newuser")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": tenant}}
    custom.create_cluster_custom_object(
        GROUP, VERSION, "tenants", {**body, "spec": {"owners": [{"kind": "User", "name": old}]}}
    )
    namespaces = [f"{tenant}-{index:02d}" for index in range(NAMESPACES)]
    try:
        for name in namespaces:
            core.create_namespace({"metadata": {"name": name, "labels": {TENANT_LABEL: tenant}}})

        def subjects(namespace: str) -> list[tuple[str, str, str]]:
            """(binding, role, subject) of every owner binding the controller manages in ``namespace``."""
            items = rbac.list_namespaced_role_binding(namespace, label_selector=MANAGED).items
            return sorted(
                (item.metadata.name, item.role_ref.name, subject.name)
                for item in items
                for subject in item.subjects or []
                if subject.kind == "User"
            )

        def owned_by(user: str) -> bool:
            return all((found := subjects(ns)) and all(subject == user for _, _, subject in found) for ns in namespaces)

        poll(lambda: owned_by(old), timeout=60, what=f"{old}'s bindings in every namespace")
        lease = "enclave-tenants"
        leader = poll(
            lambda: coordination.read_namespaced_lease(lease, lease_namespace).spec.holder_identity,
            what="a lease holder",
        )
        assert leader in running

        # The owner changes; the leader starts rewriting each namespace's bindings and dies in the middle.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, "tenants", tenant, {"spec": {"owners": [{"kind": "User", "name": new}]}}
        )
        poll(
            lambda: any(any(s == new for _, _, s in subjects(ns)) for ns in namespaces),
            interval=0.05,
            what="the reconcile under way",
        )
        popen = running[leader].process.popen
        assert popen is not None
        popen.send_signal(signal.SIGKILL)

        successor = poll(
            lambda: (
                (h := coordination.read_namespaced_lease(lease, lease_namespace).spec.holder_identity) != leader and h
            ),
            timeout=LEASE_DURATION + RETRY_PERIOD + 3,
            interval=0.2,
            what="the standby holding the lease within its lease duration",
        )
        assert successor in running
        late = f"{tenant}-late"
        core.create_namespace({"metadata": {"name": late, "labels": {TENANT_LABEL: tenant}}})
        namespaces.append(late)
        poll(
            lambda: [s for _, _, s in subjects(late)] and all(s == new for _, _, s in subjects(late)),
            timeout=60,
            what="a namespace created after the takeover bound to the new owner",
        )

        poll(lambda: owned_by(new), timeout=60, what=f"{new}'s bindings in every namespace")
        for namespace in namespaces:
            grants = [(role, subject) for _, role, subject in subjects(namespace)]
            assert len(grants) == len(set(grants)), f"a role granted twice in {namespace}: {grants}"
            assert all(subject == new for _, _, subject in subjects(namespace)), f"{old} still bound in {namespace}"

        def converged() -> dict[str, Any] | None:
            obj: dict[str, Any] = custom.get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)
            status = obj.get("status") or {}
            owners = [(o["kind"], o["name"]) for o in status.get("owners") or []]
            if (
                status.get("observedGeneration") == obj["metadata"]["generation"]
                and sorted(status.get("namespaces") or []) == sorted(namespaces)
                and owners == [("User", new)]
            ):
                return obj
            return None

        settled = poll(converged, timeout=60, what="tenant status converged")
        assert settled["status"]["size"] == NAMESPACES + 1
    finally:
        for name in namespaces:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)

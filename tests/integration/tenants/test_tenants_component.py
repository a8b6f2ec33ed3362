"""enclave-tenants against the real control plane: namespace metadata, RoleBindings that really grant rights,
drift, owners from every source, status, events and the TenantService stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.subscriber import SnapshotSubscriber
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, VERSION, Stack

TENANT_LABEL = "enclave.dev/tenant"
SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"


class Cluster:
    """Admin access plus cleanup of everything a test created."""

    def __init__(self, kube: Any) -> None:
        self.custom = client.CustomObjectsApi(kube)
        self.core = client.CoreV1Api(kube)
        self.rbac = client.RbacAuthorizationV1Api(kube)
        self.created: list[tuple[str, str]] = []

    def create_tenant(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}
        self.created.append(("tenants", name))
        result: dict[str, Any] = self.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        return result

    def create_owner(self, name: str, spec: dict[str, Any], labels: dict[str, str]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TenantOwner",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }
        self.created.append(("tenantowners", name))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "tenantowners", body)

    def create_namespace(self, name: str, tenant: str | None) -> None:
        labels = {TENANT_LABEL: tenant} if tenant else {}
        self.created.append(("namespaces", name))
        self.core.create_namespace({"metadata": {"name": name, "labels": labels}})

    def tenant(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "tenants", name)
        return result

    def owner(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "tenantowners", name)
        return result

    def patch(self, plural: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, patch)

    def bindings(self, namespace: str, *, administrators: bool = True) -> dict[str, Any]:
        """Our RoleBindings in ``namespace`` by name; without the configuration's administrators' if asked."""
        items = self.rbac.list_namespaced_role_binding(
            namespace, label_selector="app.kubernetes.io/managed-by=enclave-tenants"
        ).items
        return {
            item.metadata.name: item
            for item in items
            if administrators or not any(s.kind == "Group" and s.name.startswith("tadmins-") for s in item.subjects)
        }

    def settled(self, name: str) -> dict[str, Any] | None:
        """The tenant once its status describes its current generation."""
        obj = self.tenant(name)
        status = obj.get("status") or {}
        if status.get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        return None

    def cleanup(self) -> None:
        for plural, name in reversed(self.created):
            with contextlib.suppress(ApiException):
                if plural == "namespaces":
                    self.core.delete_namespace(name)
                else:
                    self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


@pytest.fixture
def cluster(kube: Any, stack: Stack) -> Iterator[Cluster]:
    cluster = Cluster(kube)
    yield cluster
    cluster.cleanup()


def owner_names(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(o["kind"], o["name"]) for o in (obj.get("status") or {}).get("owners") or []]


def test_tenant_namespace_gets_metadata_bindings_and_status(cluster: Cluster, stack: Stack) -> None:
    name, alice, auditors = unique("tnt"), unique("alice"), unique("auditors")
    tenant = cluster.create_tenant(
        name,
        {
            "owners": [{"kind": "User", "name": alice}],
            "namespaceOptions": {
                "additionalMetadata": {"labels": {"cost-center": name}, "annotations": {"example.com/contact": alice}}
            },
            "nodeSelector": {"pool": "blue", "disk": "ssd"},
            "additionalRoleBindings": [{"clusterRoleName": "view", "subjects": [{"kind": "Group", "name": auditors}]}],
        },
    )
    namespace = f"{name}-dev"
    cluster.create_namespace(namespace, name)

    def configured() -> Any:
        meta = cluster.core.read_namespace(namespace).metadata
        refs = [r for r in meta.owner_references or [] if r.uid == tenant["metadata"]["uid"]]
        return (
            meta.labels.get("cost-center") == name
            and (meta.annotations or {}).get(SELECTOR_ANNOTATION)
            and refs
            and meta
        )

    meta = poll(configured)
    assert meta.labels[TENANT_LABEL] == name
    assert meta.annotations[SELECTOR_ANNOTATION] == "disk=ssd,pool=blue"
    assert meta.annotations["example.com/contact"] == alice
    expected = {
        f"enclave-user-{alice}-admin": ("admin", "User", alice),
        f"enclave-user-{alice}-enclave-namespace-deleter": ("enclave-namespace-deleter", "User", alice),
        "enclave-additional-view": ("view", "Group", auditors),
        f"enclave-group-{stack.admins_group}-{stack.deleter}": (stack.deleter, "Group", stack.admins_group),
    }
    found = poll(lambda: (b := cluster.bindings(namespace)) and set(expected) <= set(b) and b)
    for binding_name, (role, kind, subject) in expected.items():
        binding = found[binding_name]
        assert binding.role_ref.name == role
        assert [(s.kind, s.name) for s in binding.subjects] == [(kind, subject)]
        assert binding.metadata.labels[TENANT_LABEL] == name

    obj = poll(lambda: (t := cluster.settled(name)) and (t["status"].get("size") == 1) and t)
    assert obj["status"]["namespaces"] == [namespace]
    assert owner_names(obj) == [("User", alice)]  # administrators are bound but not listed
    assert obj["status"]["owners"][0]["clusterRoles"] == ["admin", "enclave-namespace-deleter"]
    ready, cordoned = condition(obj, "Ready"), condition(obj, "Cordoned")
    assert (ready["status"], ready["reason"]) == ("True", "Active")
    assert (cordoned["status"], cordoned["reason"]) == ("False", "NotCordoned")
    # What the controller did is told as a Normal event in the configuration's events namespace.
    synced = poll(
        lambda: [
            e
            for e in cluster.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
            if e.reason == "NamespaceSynced"
        ]
    )
    assert synced[0].type == "Normal"
    assert namespace in synced[0].message


def test_drift_is_reverted(cluster: Cluster, stack: Stack) -> None:
    name, alice = unique("tnt"), unique("alice")
    cluster.create_tenant(
        name,
        {
            "owners": [{"kind": "User", "name": alice, "clusterRoles": ["edit"]}],
            "namespaceOptions": {"additionalMetadata": {"labels": {"cost-center": name}}},
            "nodeSelector": {"pool": "blue"},
        },
    )
    namespace = f"{name}-drift"
    cluster.create_namespace(namespace, name)
    binding = f"enclave-user-{alice}-edit"
    first = poll(lambda: cluster.bindings(namespace).get(binding))

    cluster.rbac.delete_namespaced_role_binding(binding, namespace)
    restored = poll(
        lambda: (b := cluster.bindings(namespace).get(binding)) and b.metadata.uid != first.metadata.uid and b
    )
    assert [s.name for s in restored.subjects] == [alice]

    cluster.rbac.patch_namespaced_role_binding(binding, namespace, {"subjects": [{"kind": "User", "name": "mallory"}]})
    poll(lambda: [s.name for s in cluster.bindings(namespace)[binding].subjects] == [alice])

    poll(lambda: cluster.core.read_namespace(namespace).metadata.labels.get("cost-center") == name)
    cluster.core.patch_namespace(
        namespace, {"metadata": {"labels": {"cost-center": "stolen"}, "annotations": {SELECTOR_ANNOTATION: "pool=any"}}}
    )

    def reverted() -> bool:
        meta = cluster.core.read_namespace(namespace).metadata
        return bool(meta.labels.get("cost-center") == name and meta.annotations.get(SELECTOR_ANNOTATION) == "pool=blue")

    poll(reverted)

    # A binding nobody wants any more (the owner's role changed) is removed, the new one created.
    cluster.patch("tenants", name, {"spec": {"owners": [{"kind": "User", "name": alice, "clusterRoles": ["view"]}]}})
    poll(lambda: set(cluster.bindings(namespace, administrators=False)) == {f"enclave-user-{alice}-view"})
    # Metadata the tenant no longer asks for is removed (we own it through server-side apply).
    cluster.patch("tenants", name, {"spec": {"namespaceOptions": None, "nodeSelector": None}})

    def cleared() -> bool:
        meta = cluster.core.read_namespace(namespace).metadata
        return "cost-center" not in meta.labels and SELECTOR_ANNOTATION not in (meta.annotations or {})

    poll(cleared)


def test_owner_binding_grants_rights(cluster: Cluster, stack: Stack, impersonate: Callable[..., Any]) -> None:
    name, alice = unique("tnt"), unique("alice")
    cluster.create_tenant(name, {"owners": [{"kind": "User", "name": alice}]})
    namespace = f"{name}-work"
    cluster.create_namespace(namespace, name)
    as_alice = client.CoreV1Api(impersonate(alice, ["enclave.dev"]))
    as_alice_in_other = unique("other")
    cluster.create_namespace(as_alice_in_other, None)

    poll(lambda: as_alice.create_namespaced_config_map(namespace, {"metadata": {"name": "made-by-owner"}}))
    with pytest.raises(ApiException) as refused:
        as_alice.create_namespaced_config_map(as_alice_in_other, {"metadata": {"name": "x"}})
    assert refused.value.status == 403


def test_group_and_service_account_owners(cluster: Cluster, stack: Stack, impersonate: Callable[..., Any]) -> None:
    name, group = unique("tnt"), unique("team")
    robot_home = unique("robots")
    cluster.create_namespace(robot_home, None)
    account = f"system:serviceaccount:{robot_home}:deployer"
    cluster.create_tenant(
        name,
        {
            "owners": [
                {"kind": "Group", "name": group, "clusterRoles": ["edit"]},
                {"kind": "ServiceAccount", "name": account, "clusterRoles": ["edit"]},
            ]
        },
    )
    namespace = f"{name}-apps"
    cluster.create_namespace(namespace, name)
    bindings = poll(lambda: (b := cluster.bindings(namespace, administrators=False)) and len(b) == 2 and b)
    sa_binding = bindings[f"enclave-serviceaccount-{robot_home}.deployer-edit"]
    assert [(s.kind, s.name, s.namespace) for s in sa_binding.subjects] == [("ServiceAccount", "deployer", robot_home)]

    member = client.CoreV1Api(impersonate(unique("dev"), [group]))
    poll(lambda: member.create_namespaced_config_map(namespace, {"metadata": {"name": "by-group"}}))
    robot = client.CoreV1Api(
        impersonate(account, ["system:serviceaccounts", f"system:serviceaccounts:{robot_home}", "system:authenticated"])
    )
    poll(lambda: robot.create_namespaced_config_map(namespace, {"metadata": {"name": "by-robot"}}))
    obj = poll(lambda: (t := cluster.settled(name)) and len(owner_names(t)) == 2 and t)
    assert owner_names(obj) == [("Group", group), ("ServiceAccount", account)]


def test_tenant_owners_join_by_label_and_match_owners(cluster: Cluster, stack: Stack) -> None:
    name, bob, carol, team = unique("tnt"), unique("bob"), unique("carol"), unique("team")
    cluster.create_tenant(name, {"permissions": {"matchOwners": [{"matchLabels": {"team": team}}]}})
    cluster.create_owner(bob, {"kind": "User", "name": bob, "clusterRoles": ["view"]}, {TENANT_LABEL: name})
    cluster.create_owner(carol, {"kind": "User", "name": carol, "clusterRoles": ["edit"]}, {"team": team})
    namespace = f"{name}-shared"
    cluster.create_namespace(namespace, name)

    obj = poll(lambda: (t := cluster.settled(name)) and len(owner_names(t)) == 2 and t)
    assert owner_names(obj) == [("User", bob), ("User", carol)]
    for owner in (bob, carol):
        status = poll(lambda: cluster.owner(owner).get("status", {}).get("tenants") and cluster.owner(owner)["status"])  # noqa: B023 - polled at once
        assert status["tenants"] == [name]
        assert condition({"status": status}, "Ready")["status"] == "True"
    expected = {f"enclave-user-{bob}-view", f"enclave-user-{carol}-edit"}
    poll(lambda: set(cluster.bindings(namespace, administrators=False)) == expected)

    # bob leaves: his binding goes, his status no longer lists the tenant.
    cluster.patch("tenantowners", bob, {"metadata": {"labels": {TENANT_LABEL: None}}})
    poll(lambda: set(cluster.bindings(namespace, administrators=False)) == {f"enclave-user-{carol}-edit"})
    poll(lambda: cluster.owner(bob)["status"].get("tenants") == [])


def test_status_follows_namespace_create_and_delete(cluster: Cluster, stack: Stack) -> None:
    name = unique("tnt")
    cluster.create_tenant(name, {"owners": [{"kind": "User", "name": unique("u")}]})
    first, second = f"{name}-a", f"{name}-b"
    cluster.create_namespace(first, name)
    cluster.create_namespace(second, name)
    poll(lambda: cluster.tenant(name).get("status", {}).get("namespaces") == [first, second])
    assert cluster.tenant(name)["status"]["size"] == 2
    cluster.core.delete_namespace(second)
    obj = poll(lambda: (t := cluster.tenant(name))["status"].get("size") == 1 and t, timeout=60)
    assert obj["status"]["namespaces"] == [first]


def test_unassigned_namespace_loses_bindings_and_metadata(cluster: Cluster, stack: Stack) -> None:
    name, alice = unique("tnt"), unique("alice")
    cluster.create_tenant(
        name,
        {
            "owners": [{"kind": "User", "name": alice}],
            "namespaceOptions": {"additionalMetadata": {"labels": {"cost-center": name}}},
        },
    )
    namespace = f"{name}-leaving"
    cluster.create_namespace(namespace, name)
    poll(
        lambda: (
            cluster.bindings(namespace) and cluster.core.read_namespace(namespace).metadata.labels.get("cost-center")
        )
    )
    refs = [r.to_dict() for r in cluster.core.read_namespace(namespace).metadata.owner_references or []]
    assert refs
    # What an administrator's unassignment does: label and owner reference together.
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": {TENANT_LABEL: None}, "ownerReferences": None}})
    poll(lambda: not cluster.bindings(namespace))
    poll(lambda: "cost-center" not in cluster.core.read_namespace(namespace).metadata.labels)
    poll(lambda: cluster.tenant(name)["status"].get("size") == 0)


def test_cordoned_condition(cluster: Cluster, stack: Stack) -> None:
    name = unique("tnt")
    cluster.create_tenant(name, {"owners": [{"kind": "User", "name": unique("u")}]})
    poll(lambda: condition(cluster.tenant(name), "Cordoned").get("status") == "False")
    cluster.patch("tenants", name, {"spec": {"cordoned": True}})
    obj = poll(lambda: (t := cluster.settled(name)) and condition(t, "Cordoned").get("status") == "True" and t)
    assert condition(obj, "Cordoned")["reason"] == "Cordoned"
    assert condition(obj, "Cordoned")["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Ready")["status"] == "True"


def test_bad_owner_is_reported_not_fatal(cluster: Cluster, stack: Stack) -> None:
    name, alice = unique("tnt"), unique("alice")
    cluster.create_tenant(
        name, {"owners": [{"kind": "ServiceAccount", "name": "no-namespace"}, {"kind": "User", "name": alice}]}
    )
    namespace = f"{name}-x"
    cluster.create_namespace(namespace, name)
    obj = poll(lambda: (t := cluster.settled(name)) and condition(t, "Ready").get("status") == "False" and t)
    ready = condition(obj, "Ready")
    assert ready["reason"] == "InvalidOwner"
    assert "spec.owners[0]" in ready["message"]
    # The valid owner still gets its bindings, and the problem is an Event in the events namespace.
    poll(lambda: f"enclave-user-{alice}-admin" in cluster.bindings(namespace))
    events = poll(
        lambda: [
            e
            for e in cluster.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
            if e.reason == "InvalidOwner" and e.type == "Warning"
        ]
    )
    assert events[0].involved_object.kind == "Tenant"


def test_promoted_service_account_becomes_owner(cluster: Cluster, stack: Stack) -> None:
    name = unique("tnt")
    cluster.create_tenant(name, {"owners": [{"kind": "User", "name": unique("u")}]})
    namespace = f"{name}-ci"
    cluster.create_namespace(namespace, name)
    cluster.core.create_namespaced_service_account(
        namespace, {"metadata": {"name": "builder", "labels": {"enclave.dev/promoted": "true"}}}
    )
    account = f"system:serviceaccount:{namespace}:builder"
    binding = f"enclave-serviceaccount-{namespace}.builder-{stack.provisioner}"
    cluster.patch("serviceconfigurations", stack.config_name, {"spec": {"allowServiceAccountPromotion": True}})
    try:
        poll(lambda: binding in cluster.bindings(namespace))
        poll(lambda: ("ServiceAccount", account) in owner_names(cluster.tenant(name)))
    finally:
        cluster.patch("serviceconfigurations", stack.config_name, {"spec": {"allowServiceAccountPromotion": False}})
    poll(lambda: binding not in cluster.bindings(namespace))
    poll(lambda: ("ServiceAccount", account) not in owner_names(cluster.tenant(name)))


async def test_tenant_service_streams_changes(cluster: Cluster, stack: Stack) -> None:
    name = unique("tnt")
    cluster.create_tenant(name, {"owners": [{"kind": "User", "name": unique("u")}], "preventDeletion": True})
    seen: list[TenancySnapshot] = []

    def accept(snapshot: Snapshot) -> None:
        assert snapshot.kind == TENANCY_KIND
        seen.append(TenancySnapshot.model_validate(json.loads(snapshot.payload)))

    subscriber = SnapshotSubscriber(
        stack.tenants.grpc_target,
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[TENANCY_KIND],
        on_snapshot=accept,
        subscriber="test",
        max_backoff=0.5,
    )
    task = asyncio.create_task(subscriber.run())

    async def until(check: Callable[[TenancySnapshot], bool], within: float) -> None:
        """A bounded poll: how fast a change arrives is for the benchmarks, not a wall-clock assertion."""
        deadline = time.monotonic() + within
        while not (seen and check(seen[-1])):
            if time.monotonic() > deadline:
                raise AssertionError(f"not seen within {within}s")
            await asyncio.sleep(0.01)

    try:
        await until(lambda s: name in s.by_name, 10)
        view = seen[-1].by_name[name]
        assert view.prevent_deletion is True
        assert view.cordoned is False
        await asyncio.to_thread(cluster.patch, "tenants", name, {"spec": {"cordoned": True}})
        await until(lambda s: s.by_name[name].cordoned, 15)
        namespace = f"{name}-live"
        await asyncio.to_thread(cluster.create_namespace, namespace, name)
        await until(lambda s: s.namespace_owner.get(namespace) == name, 15)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_owners_outside_users_are_named_in_status(cluster: Cluster, stack: Stack) -> None:
    """The spec governs listed users only; Enclave also fences owners, and the Tenant says which of its owners
    are fenced only because they own it (docs/api.md, "Owners outside users")."""
    name, alice, ops = unique("tnt"), unique("alice"), unique("ops")
    owners = [{"kind": "User", "name": alice}, {"kind": "Group", "name": "enclave.dev"}, {"kind": "Group", "name": ops}]
    cluster.create_tenant(name, {"owners": owners})

    def unlisted() -> list[tuple[str, str]] | None:
        status = cluster.tenant(name).get("status") or {}
        found = status.get("unlistedOwners")
        return None if found is None else [(o["kind"], o["name"]) for o in found]

    # the module's configuration names no users: the default group enclave.dev is the only listed one
    poll(lambda: unlisted() == [("User", alice), ("Group", ops)])
    configurations = "serviceconfigurations"
    users = [{"kind": "Group", "name": "enclave.dev"}, {"kind": "User", "name": alice}]
    cluster.patch(configurations, stack.config_name, {"spec": {"users": users}})
    try:
        poll(lambda: unlisted() == [("Group", ops)], timeout=60)
    finally:
        cluster.patch(configurations, stack.config_name, {"spec": {"users": None}})
    poll(lambda: unlisted() == [("User", alice), ("Group", ops)], timeout=60)

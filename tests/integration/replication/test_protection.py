"""Protection against the real admission server: a tenant owner may neither change nor delete a replicated
object, the denial names the GlobalTenantResource or TenantResource, and the deprecated settings become
per-block policies on the way in."""

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

from .conftest import GROUP, VERSION, Cluster, Stack

CONFIGURATION = {"enableTLSReconciler": True}
ADMISSION = next(spec for spec in COMPONENTS if spec.name == "admission")
ALICE = ("alice-replication", ["enclave.dev"])


@pytest.fixture(scope="module")
def admission(control_plane: ControlPlane, kube: Any, replication: Stack) -> Iterator[RunningComponent]:
    """enclave-admission subscribed to config and replication, with only the replication hooks registered."""
    assert replication.config is not None
    running = start_component(
        ADMISSION,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=replication.home,
        endpoints={"config": replication.config.grpc_target, "replication": replication.replication.grpc_target},
        identity=unique("admission"),
        wait_ready=False,
    )
    spec = webhooks(url_client(running.webhook_url), namespace=replication.home, replication=True)
    assert spec.mutating is not None
    assert spec.validating is not None
    spec.mutating.name = f"{replication.config_name}-mutating"
    spec.validating.name = f"{replication.config_name}-validating"
    spec.mutating.webhooks = [w for w in spec.mutating.webhooks or () if w.name.startswith("replication.")]
    spec.validating.webhooks = [w for w in spec.validating.webhooks or () if w.name.startswith("replication.")]
    validating_name = spec.validating.name
    custom = client.CustomObjectsApi(kube)
    patch = {"spec": {"admission": spec.to_k8s(), "events": {"namespace": replication.home}}}
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", replication.config_name, patch)
    registrations = client.AdmissionregistrationV1Api(kube)
    try:
        running.wait_ready(60)
        poll(lambda: registrations.read_validating_webhook_configuration(validating_name), what="webhooks")
        yield running
    finally:
        with contextlib.suppress(ApiException):
            registrations.delete_validating_webhook_configuration(f"{replication.config_name}-validating")
        with contextlib.suppress(ApiException):
            registrations.delete_mutating_webhook_configuration(f"{replication.config_name}-mutating")
        running.process.stop()


def config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


def grant_edit(cluster: Cluster, namespace: str, user: str) -> None:
    cluster.rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"edit-{user}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


def denied(call: Callable[[], Any], *fragments: str) -> None:
    with pytest.raises(ApiException) as caught:
        call()
    body = str(caught.value.body)
    assert caught.value.status == 403, body
    assert "denied the request" in body, body
    for fragment in fragments:
        assert fragment in body, body


def test_a_tenant_owner_can_neither_edit_nor_delete_a_replicated_object(
    cluster: Cluster, replication: Stack, admission: RunningComponent, impersonate: Callable[..., Any]
) -> None:
    tenant = unique("tprot")
    (target,) = cluster.tenant(tenant, {"prot": tenant}, namespaces=1)
    user, groups = ALICE
    grant_edit(cluster, target, user)
    alice = client.CoreV1Api(impersonate(user, groups))
    name = unique("baseline")
    cluster.create_global(
        name,
        {
            "tenantSelector": {"matchLabels": {"prot": tenant}},
            "resources": [
                {"rawItems": [config_map("protected")]},
                {"rawItems": [config_map("open")], "policy": {"protect": False}},
            ],
        },
    )
    cluster.ready("globaltenantresources", name)
    owner = f"GlobalTenantResource/{name}"
    poll(
        lambda: _refuses(lambda: alice.patch_namespaced_config_map("protected", target, {"data": {"a": "x"}})),
        what="protection in force",
    )
    denied(lambda: alice.patch_namespaced_config_map("protected", target, {"data": {"a": "x"}}), owner, user)
    denied(lambda: alice.delete_namespaced_config_map("protected", target), owner, "may not delete")
    denied(
        lambda: alice.patch_namespaced_config_map(
            "protected", target, {"metadata": {"labels": {"enclave.dev/managed-by": None}}}
        ),
        owner,
    )
    assert cluster.config_map(target, "protected").data == {"a": "b"}
    # protect: false, and objects nobody manages, stay the tenant's to change.
    alice.patch_namespaced_config_map("open", target, {"data": {"a": "mine"}})
    alice.create_namespaced_config_map(target, {"metadata": {"name": "own"}})
    alice.delete_namespaced_config_map("own", target)
    poll(
        lambda: any(
            e.reason == "ReplicatedObjectProtected" for e in cluster.core.list_namespaced_event(replication.home).items
        ),
        what="deny event",
    )


def test_a_tenant_resources_own_account_may_change_what_it_manages(
    cluster: Cluster, admission: RunningComponent, impersonate: Callable[..., Any]
) -> None:
    tenant = unique("tacct")
    (home,) = cluster.tenant(tenant, namespaces=1)
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]
    account = cluster.service_account(home, "writer", rules, [home])
    name = unique("tr")
    spec = {"serviceAccount": {"name": "writer", "namespace": home}, "resources": [{"rawItems": [config_map("c")]}]}
    cluster.create_local(home, name, spec)
    cluster.ready("tenantresources", name, home)
    writer = client.CoreV1Api(impersonate(account, ["system:serviceaccounts", f"system:serviceaccounts:{home}"]))
    poll(lambda: _refuses(lambda: _as_owner(cluster, impersonate, home)), what="protection in force")
    writer.patch_namespaced_config_map("c", home, {"metadata": {"annotations": {"touched": "yes"}}})


def test_deprecated_settings_become_per_block_policies(cluster: Cluster, admission: RunningComponent) -> None:
    name = unique("legacy")
    cluster.create_global(
        name,
        {
            "tenantSelector": {"matchLabels": {"legacy": name}},
            "settings": {"adopt": True, "force": True},
            "pruningOnDelete": False,
            "resources": [{"rawItems": [config_map("a")]}, {"policy": {"creation": "Owner"}}],
        },
    )
    stored = cluster.get("globaltenantresources", name)
    policies = [block.get("policy") for block in stored["spec"]["resources"]]
    assert policies[0] == {"creation": "Merge", "deletion": "Orphan", "force": True, "protect": True}
    assert policies[1]["creation"] == "Owner"
    assert policies[1].get("deletion", "Remove") == "Remove"


def _refuses(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiException as err:
        return err.status == 403 and "denied the request" in str(err.body)
    return False


def _as_owner(cluster: Cluster, impersonate: Callable[..., Any], namespace: str) -> Any:
    user, groups = ("tenant-owner-probe", ["enclave.dev"])
    with contextlib.suppress(ApiException):
        grant_edit(cluster, namespace, user)
    return client.CoreV1Api(impersonate(user, groups)).patch_namespaced_config_map("c", namespace, {"data": {"a": "x"}})


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"resyncPeriod": "0s"}, "spec.resyncPeriod"),
    ({"resyncPeriod": "9999h"}, "spec.resyncPeriod"),
    (
        {"resources": [{"rawItems": [config_map("c")], "policy": {"condition": "object.metadata.name =="}}]},
        "spec.resources[0].policy.condition",
    ),
    (
        {"resources": [{}, {"generators": [{"template": "{% if tenant %}unclosed"}]}]},
        "spec.resources[1].generators[0].template",
    ),
]


@pytest.mark.parametrize(("plural", "scope"), [("globaltenantresources", "cluster"), ("tenantresources", "tenant")])
def test_a_replication_object_that_cannot_work_is_refused_naming_the_field(
    cluster: Cluster, admission: RunningComponent, plural: str, scope: str
) -> None:
    """A bad resyncPeriod, a condition that does not compile, a template that does not parse: refused at
    admission with the field named, and nothing stored (before, each showed only later in status)."""
    namespace = cluster.tenant(unique("tbad"), namespaces=1)[0] if scope == "tenant" else ""
    kind = "GlobalTenantResource" if scope == "cluster" else "TenantResource"

    def create(name: str, spec: dict[str, Any], dry_run: str | None = None) -> Any:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
        if scope == "cluster":
            return cluster.custom.create_cluster_custom_object(GROUP, VERSION, plural, body, dry_run=dry_run)
        return cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body, dry_run=dry_run)

    base: dict[str, Any] = {"resources": [{"rawItems": [config_map("c")]}]}
    # the hook fails open: wait until admission decides before asserting refusals
    poll(lambda: _refuses(lambda: create(unique("probe"), {**base, "resyncPeriod": "0s"}, "All")), what="hook live")
    for fields, field in BAD_FIELDS:
        name = unique("bad")
        denied(lambda: create(name, {**base, **fields}), kind, field)  # noqa: B023  # called at once
        with pytest.raises(ApiException) as missing:
            cluster.get(plural, name, namespace)
        assert missing.value.status == 404
    good = unique("good")
    create(good, {**base, "resyncPeriod": "5m", "resources": [{"generators": [{"template": "{{ tenant }}"}]}]})
    cluster.objects.append((plural, namespace, good))

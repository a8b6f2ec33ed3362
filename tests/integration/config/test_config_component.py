"""enclave-config against the real control plane: lifecycle, status, webhooks, RBAC, TLS and ConfigService."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.proto.enclave.config.v1 import config_pb2_grpc
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest
from enclave_core.snapshots.subscriber import SnapshotSubscriber
from enclave_testing.components import RunningComponent
from enclave_testing.names import unique
from enclave_testing.waiting import poll
from enclave_testing.webhooks import DenyingWebhook

GROUP, VERSION = "enclave.dev", "v1beta2"
Start = Callable[..., RunningComponent]


class Cluster:
    def __init__(self, kube: Any) -> None:
        self.custom = client.CustomObjectsApi(kube)
        self.admission = client.AdmissionregistrationV1Api(kube)
        self.rbac = client.RbacAuthorizationV1Api(kube)
        self.core = client.CoreV1Api(kube)

    def config(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)
        return result

    def ready(self, name: str) -> dict[str, Any] | None:
        obj = self.config(name)
        status = obj.get("status") or {}
        for condition in status.get("conditions") or []:
            if (
                condition["type"] == "Ready"
                and condition["status"] == "True"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
            ):
                return obj
        return None

    def condition(self, name: str) -> dict[str, Any]:
        obj = self.config(name)
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Ready":
                return dict(condition)
        return {}

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name, {"spec": spec})

    def create_config(self, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServiceConfiguration", "metadata": {"name": name}}
        self.custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", {**body, "spec": spec})


@pytest.fixture
def cluster(kube: Any) -> Cluster:
    return Cluster(kube)


def _rbac(suffix: str) -> dict[str, Any]:
    """Per-test role names: ClusterRoles are cluster-wide and tests run side by side in one cluster."""
    return {
        "provisioner": f"prov-{suffix}",
        "deleter": f"del-{suffix}",
        "administrationClusterRoles": [f"del-{suffix}"],
        "promotionClusterRoles": [f"prov-{suffix}", f"del-{suffix}"],
    }


def test_default_object_is_created_and_ready(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    start_config(name, unique("ns"))
    obj = poll(lambda: cluster.ready(name))
    assert obj["spec"]["cacheInvalidation"] == "24h"
    assert obj["spec"]["enableTLSReconciler"] is False
    assert obj["status"]["users"] == [{"kind": "Group", "name": "enclave.dev"}]
    ready = cluster.condition(name)
    assert ready["reason"] == "Applied"
    assert ready["observedGeneration"] == obj["metadata"]["generation"]


def test_status_tenants_follow_tenants(start_config: Start, cluster: Cluster) -> None:
    name, tenant = unique("cfg"), unique("tnt")
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"owners": [{"kind": "User", "name": "alice"}]},
    }
    cluster.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
    poll(lambda: tenant in (cluster.config(name)["status"].get("tenants") or []))
    tenants = cluster.config(name)["status"]["tenants"]
    assert tenants == sorted(tenants)
    cluster.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)
    poll(lambda: tenant not in (cluster.config(name)["status"].get("tenants") or []))


def test_prevent_deletion_holds_for_cluster_admins_with_no_webhook(start_config: Start, cluster: Cluster) -> None:
    """``preventDeletion`` is enforced for everyone, ``system:masters`` included, by a ValidatingAdmissionPolicy
    that kube-apiserver evaluates itself: this configuration registers no webhook at all. Break-glass is the
    refusal's own advice: clear the flag, then delete."""
    name, tenant = unique("cfg"), unique("tnt")
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    policy = f"enclave-{name}-tenant-deletion"
    poll(lambda: cluster.admission.read_validating_admission_policy_binding(policy), what="the policy's binding")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"owners": [{"kind": "User", "name": "alice"}], "preventDeletion": True},
    }
    cluster.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)

    def refused(dry_run: str | None) -> str | None:
        try:
            cluster.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant, dry_run=dry_run)
        except ApiException as err:
            return str(err.body) if err.status in (403, 422) else None
        return None

    # kube-apiserver honours a new binding within a moment: dry runs (admission runs for them, nothing is
    # deleted) until it does, then the real delete.
    poll(lambda: refused("All"), what="a dry-run deletion refused by the policy")
    message = refused(None)
    assert message is not None, "the admin deleted a tenant with spec.preventDeletion"
    assert "spec.preventDeletion" in message
    assert tenant in message
    assert cluster.custom.get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)["metadata"]["name"] == tenant
    cluster.custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, {"spec": {"preventDeletion": False}})
    cluster.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def test_deprecated_user_fields_are_converted(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    cluster.create_config(
        name,
        {
            "users": [{"kind": "Group", "name": "platform"}],
            "userGroups": ["legacy-team"],
            "userNames": ["bob"],
            "rbac": _rbac(name),
        },
    )
    start_config(name, unique("ns"))
    obj = poll(lambda: cluster.ready(name))
    assert obj["status"]["users"] == [
        {"kind": "Group", "name": "platform"},
        {"kind": "Group", "name": "legacy-team"},
        {"kind": "User", "name": "bob"},
    ]


def test_bad_regex_is_reported_with_field_and_nothing_applied(
    start_config: Start, cluster: Cluster, namespace: str
) -> None:
    name = unique("cfg")
    cluster.create_config(name, {"rbac": _rbac(name), "events": {"namespace": namespace}})
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    cluster.patch_spec(name, {"protectedNamespaceRegex": "([unclosed", "rbac": {"provisioner": f"other-{name}"}})
    condition = poll(lambda: (c := cluster.condition(name)) and c["status"] == "False" and c)
    assert condition["reason"] == "InvalidConfiguration"
    assert "spec.protectedNamespaceRegex" in condition["message"]
    # Not half-applied: the renamed provisioner role was not created, the old one stays.
    with pytest.raises(ApiException) as missing:
        cluster.rbac.read_cluster_role(f"other-{name}")
    assert missing.value.status == 404
    cluster.rbac.read_cluster_role(f"prov-{name}")

    # Events about the cluster-scoped configuration go to spec.events.namespace.
    def warned() -> bool:
        events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        return any(e.reason == "InvalidConfiguration" and e.type == "Warning" for e in events)

    poll(warned)


def _admission_spec(name: str, url: str | None, service: dict[str, Any] | None) -> dict[str, Any]:
    client_spec: dict[str, Any] = {"url": url} if url else {"service": service}
    return {
        "administrators": [{"kind": "User", "name": "root-admin"}, {"kind": "Group", "name": "admins"}],
        "users": [{"kind": "Group", "name": "tenants"}],
        "ignoreUserWithGroups": ["robots"],
        "rbac": _rbac(name),
        "admission": {
            "validating": {
                "name": f"{name}-validating",
                "labels": {"team": "platform"},
                "annotations": {"note": "generated"},
                "client": client_spec,
                "webhooks": [
                    {
                        "name": "namespaces.enclave.dev",
                        "path": "/namespaces",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Ignore",
                        "matchPolicy": "Exact",
                        "timeoutSeconds": 3,
                        "namespaceSelector": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                            ]
                        },
                        "objectSelector": {"matchLabels": {"enclave.dev/tenant-test": name}},
                        "matchConditions": [
                            {"name": "not-dry-run", "expression": "!has(request.dryRun) || !request.dryRun"}
                        ],
                        "opts": {"administrators": True, "serviceUsers": True},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["namespaces"],
                                "scope": "Cluster",
                            }
                        ],
                    }
                ],
            },
            "mutating": {
                "name": f"{name}-mutating",
                "client": client_spec,
                "webhooks": [
                    {
                        "name": "pods.enclave.dev",
                        "path": "/pods",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "NoneOnDryRun",
                        "reinvocationPolicy": "IfNeeded",
                        "failurePolicy": "Ignore",
                        "rules": [
                            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                        ],
                    }
                ],
            },
        },
    }


def test_webhook_configurations_follow_spec_url_client(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    cluster.create_config(name, _admission_spec(name, "https://127.0.0.1:9443/base", None))
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    validating = cluster.admission.read_validating_webhook_configuration(f"{name}-validating")
    assert validating.metadata.labels["team"] == "platform"
    assert validating.metadata.labels["app.kubernetes.io/managed-by"] == "enclave-config"
    assert validating.metadata.annotations["note"] == "generated"
    hook = validating.webhooks[0]
    assert hook.name == "namespaces.enclave.dev"
    assert hook.client_config.url == "https://127.0.0.1:9443/base/namespaces"
    assert hook.client_config.service is None
    assert hook.failure_policy == "Ignore"
    assert hook.match_policy == "Exact"
    assert hook.timeout_seconds == 3
    assert hook.side_effects == "None"
    assert hook.admission_review_versions == ["v1"]
    assert hook.object_selector.match_labels == {"enclave.dev/tenant-test": name}
    assert hook.namespace_selector.match_expressions[0].values == ["kube-system"]
    assert hook.rules[0].operations == ["CREATE", "UPDATE"]
    assert hook.rules[0].scope == "Cluster"
    conditions = {c.name: c.expression for c in hook.match_conditions}
    assert conditions["not-dry-run"] == "!has(request.dryRun) || !request.dryRun"
    audience = conditions["enclave.dev/audience"]
    for entity in ("root-admin", "admins", "tenants"):
        assert f'"{entity}"' in audience
    assert '"robots"' in audience
    mutating = cluster.admission.read_mutating_webhook_configuration(f"{name}-mutating")
    assert mutating.webhooks[0].reinvocation_policy == "IfNeeded"
    assert mutating.webhooks[0].side_effects == "NoneOnDryRun"
    assert mutating.webhooks[0].client_config.url == "https://127.0.0.1:9443/base/pods"

    # Removing the mutating side prunes its configuration; a hand-made configuration is never touched.
    cluster.admission.create_mutating_webhook_configuration({"metadata": {"name": f"{name}-handmade"}})
    cluster.patch_spec(name, {"admission": {"mutating": None}})  # merge patch: null removes the side

    def pruned() -> bool:
        try:
            cluster.admission.read_mutating_webhook_configuration(f"{name}-mutating")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(pruned)
    cluster.admission.read_mutating_webhook_configuration(f"{name}-handmade")
    cluster.admission.delete_mutating_webhook_configuration(f"{name}-handmade")


def test_deleting_the_configuration_keeps_the_fence(start_config: Start, cluster: Cluster) -> None:
    """Generated webhook configurations are not owned by the ServiceConfiguration: deleting it (by mistake, or
    a GitOps prune) garbage-collects nothing, and the object comes back with the spec last applied."""
    name = unique("cfg")
    cluster.create_config(name, _admission_spec(name, "https://127.0.0.1:9443", None))
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    before = cluster.admission.read_validating_webhook_configuration(f"{name}-validating")
    assert not before.metadata.owner_references
    old_uid = cluster.config(name)["metadata"]["uid"]
    cluster.custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)

    def recreated() -> dict[str, Any] | None:
        try:
            obj = cluster.ready(name)
        except ApiException:
            return None
        return obj if obj is not None and obj["metadata"]["uid"] != old_uid else None

    obj = poll(recreated, what="the configuration recreated and ready")
    assert obj["spec"]["admission"]["validating"]["name"] == f"{name}-validating"
    after = cluster.admission.read_validating_webhook_configuration(f"{name}-validating")
    assert after.metadata.uid == before.metadata.uid
    assert [hook.name for hook in after.webhooks] == ["namespaces.enclave.dev"]


def test_the_owner_cluster_role_takes_generated_objects_with_it(start_config: Start, cluster: Cluster) -> None:
    """What `helm uninstall` relies on: config's ClusterRole owns what config generated, the webhook
    configurations and the TLS Secret it wrote (a Secret written before the owner was configured is adopted)."""
    name, namespace = unique("cfg"), unique("ns")
    anchor = f"{name}-anchor"
    spec = {**_admission_spec(name, "https://127.0.0.1:9443", None), "enableTLSReconciler": True}
    cluster.create_config(name, spec)
    first = start_config(name, namespace)
    poll(lambda: cluster.ready(name))
    core = client.CoreV1Api(cluster.custom.api_client)
    assert not core.read_namespaced_secret("enclave-tls", namespace).metadata.owner_references
    first.process.stop()
    cluster.rbac.create_cluster_role({"metadata": {"name": anchor}, "rules": []})
    start_config(name, namespace, args=[f"--owner-cluster-role={anchor}"])

    def owners(read: Callable[[], Any]) -> list[tuple[str, str]]:
        return [(ref.kind, ref.name) for ref in read().metadata.owner_references or []]

    def webhook() -> Any:
        return cluster.admission.read_validating_webhook_configuration(f"{name}-validating")

    def secret() -> Any:
        return core.read_namespaced_secret("enclave-tls", namespace)

    poll(lambda: owners(webhook) == [("ClusterRole", anchor)], what="the webhook configuration owned")
    poll(lambda: owners(secret) == [("ClusterRole", anchor)], what="the TLS Secret adopted")
    cluster.rbac.delete_cluster_role(anchor)

    def collected(read: Callable[[], Any]) -> bool:
        try:
            read()
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(lambda: collected(webhook), timeout=60, what="the garbage collector removing the webhook configuration")
    poll(lambda: collected(secret), timeout=60, what="the garbage collector removing the TLS Secret")


def test_webhook_configurations_follow_spec_service_client(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    service = {"name": "enclave-webhook-service", "namespace": "enclave-system", "path": "/hooks"}
    spec = _admission_spec(name, None, service)
    spec["admission"]["validating"]["client"]["caBundle"] = base64.b64encode(b"not really a CA").decode()
    cluster.create_config(name, spec)
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    hook = cluster.admission.read_validating_webhook_configuration(f"{name}-validating").webhooks[0]
    assert hook.client_config.url is None
    assert hook.client_config.service.name == "enclave-webhook-service"
    assert hook.client_config.service.namespace == "enclave-system"
    assert hook.client_config.service.port == 443
    assert hook.client_config.service.path == "/hooks/namespaces"
    assert base64.b64decode(hook.client_config.ca_bundle) == b"not really a CA"


def test_deprecated_configuration_names_are_honoured(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    spec = _admission_spec(name, "https://127.0.0.1:9443", None)
    del spec["admission"]["validating"]["name"]
    spec["overrides"] = {"validatingWebhookConfigurationName": f"{name}-legacy"}
    cluster.create_config(name, spec)
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    cluster.admission.read_validating_webhook_configuration(f"{name}-legacy")


def test_provisioner_binding_follows_users(start_config: Start, cluster: Cluster) -> None:
    name = unique("cfg")
    cluster.create_config(
        name,
        {
            "users": [{"kind": "Group", "name": "team-a"}],
            "administrators": [{"kind": "User", "name": "carol"}],
            "rbac": _rbac(name),
        },
    )
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))
    role = cluster.rbac.read_cluster_role(f"prov-{name}")
    assert role.rules[0].verbs == ["create"]
    assert role.rules[0].resources == ["namespaces"]
    assert cluster.rbac.read_cluster_role(f"del-{name}").rules[0].verbs == ["delete"]

    def subjects() -> set[tuple[str, str]]:
        binding = cluster.rbac.read_cluster_role_binding(f"prov-{name}")
        return {(s.kind, s.name) for s in binding.subjects or []}

    assert subjects() == {("Group", "team-a"), ("User", "carol")}
    cluster.patch_spec(name, {"users": [{"kind": "Group", "name": "team-b"}, {"kind": "User", "name": "dave"}]})
    poll(lambda: subjects() == {("Group", "team-b"), ("User", "dave"), ("User", "carol")})
    # A tenant user in team-b may now create namespaces (admission decides which tenant later).
    review = client.AuthorizationV1Api(cluster.core.api_client).create_subject_access_review(
        {
            "spec": {
                "user": "erin",
                "groups": ["team-b"],
                "resourceAttributes": {"verb": "create", "resource": "namespaces"},
            }
        }
    )
    assert review.status.allowed


@pytest.fixture
def tls_server() -> Iterator[Callable[[bytes, bytes], int]]:
    servers: list[DenyingWebhook] = []

    def serve(cert: bytes, key: bytes) -> int:
        server = DenyingWebhook(cert, key, "served with the generated certificate").__enter__()
        servers.append(server)
        return server.port

    yield serve
    for server in servers:
        server.__exit__()


def test_generated_ca_bundle_lets_apiserver_call_webhook(
    start_config: Start, cluster: Cluster, tls_server: Callable[[bytes, bytes], int], namespace: str
) -> None:
    name, home = unique("cfg"), unique("ns")
    cluster.create_config(name, {"enableTLSReconciler": True, "rbac": _rbac(name)})
    start_config(name, home)
    poll(lambda: cluster.ready(name))
    secret = cluster.core.read_namespaced_secret("enclave-tls", home)
    assert secret.type == "kubernetes.io/tls"
    port = tls_server(base64.b64decode(secret.data["tls.crt"]), base64.b64decode(secret.data["tls.key"]))
    spec = {
        "admission": {
            "validating": {
                "name": f"{name}-tls",
                "client": {"url": f"https://127.0.0.1:{port}"},
                "webhooks": [
                    {
                        "name": "configmaps.enclave.dev",
                        "path": "/deny",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "timeoutSeconds": 5,
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ],
                    }
                ],
            }
        }
    }
    cluster.patch_spec(name, spec)
    hook = poll(lambda: cluster.admission.read_validating_webhook_configuration(f"{name}-tls").webhooks[0])
    assert base64.b64decode(hook.client_config.ca_bundle) == base64.b64decode(secret.data["ca.crt"])

    def denied() -> bool:
        try:
            cluster.core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "cm-"}})
        except ApiException as err:
            return "served with the generated certificate" in str(err.body)
        return False

    poll(denied)
    # Restarting the controller keeps the CA (the bundle in webhook configurations stays valid).
    cluster.core.read_namespaced_secret("enclave-tls", home)


def test_short_lived_certificate_is_renewed_and_ca_kept(start_config: Start, cluster: Cluster) -> None:
    name, home = unique("cfg"), unique("ns")
    cluster.create_config(name, {"enableTLSReconciler": True, "rbac": _rbac(name)})
    start_config(name, home, args=["--tls-validity=6s"])
    poll(lambda: cluster.ready(name))
    first = cluster.core.read_namespaced_secret("enclave-tls", home).data
    renewed = poll(
        lambda: (
            (d := cluster.core.read_namespaced_secret("enclave-tls", home).data)["tls.crt"] != first["tls.crt"] and d
        ),
        timeout=20,
    )
    assert renewed["ca.crt"] == first["ca.crt"]
    assert renewed["ca.key"] == first["ca.key"]


async def _watch_config(target: str, seen: list[dict[str, Any]], stop: asyncio.Event) -> SnapshotSubscriber:
    def accept(snapshot: Snapshot) -> None:
        seen.append(json.loads(snapshot.payload))

    subscriber = SnapshotSubscriber(
        target,
        config_pb2_grpc.ConfigServiceStub,
        kinds=["ServiceConfiguration"],
        on_snapshot=accept,
        subscriber="test",
        max_backoff=0.5,
    )
    task = asyncio.create_task(subscriber.run())
    await stop.wait()
    task.cancel()
    return subscriber


async def test_subscriber_sees_changes_and_survives_restart(start_config: Start, cluster: Cluster) -> None:
    name, home = unique("cfg"), unique("ns")
    cluster.create_config(name, {"rbac": _rbac(name)})
    config = start_config(name, home)
    assert config.grpc_port is not None
    seen: list[dict[str, Any]] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch_config(config.grpc_target, seen, stop))

    async def until(check: Callable[[], bool], within: float) -> None:
        """A bounded poll: how fast a change arrives is a benchmark's business, not a test's."""
        deadline = time.monotonic() + within
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not seen within {within}s: {seen[-1:]}")
            await asyncio.sleep(0.01)

    await until(lambda: bool(seen), 10)
    assert seen[-1]["users"] == [{"kind": "Group", "name": "enclave.dev"}]
    cluster.patch_spec(name, {"forceTenantPrefix": True})
    await until(lambda: seen[-1]["spec"].get("forceTenantPrefix") is True, 15)

    # The publisher restarts on the same port; the subscriber keeps the last good state and reconnects.
    config.process.stop()
    assert seen[-1]["spec"]["forceTenantPrefix"] is True
    start_config(name, home, grpc_port=config.grpc_port, identity="config-restarted")
    cluster.patch_spec(name, {"forceTenantPrefix": False})
    await until(lambda: seen[-1]["spec"].get("forceTenantPrefix") is False, 15)
    stop.set()
    subscriber = await watcher
    assert subscriber.state.reconnects >= 1


async def test_config_service_over_tls_with_the_generated_certificate(
    start_config: Start, cluster: Cluster, tmp_path: Path
) -> None:
    """Mutual TLS end to end: the real enclave-config serves from the Secret it maintains; a client without a
    certificate is refused, and one presenting a component's client certificate (its own Secret, which
    enclave-config wrote beside the serving one) streams."""
    import grpc

    name, home = unique("cfg"), unique("ns")
    cluster.create_config(name, {"enableTLSReconciler": True, "rbac": _rbac(name)})
    config = start_config(name, home, args=["--grpc-tls-secret=enclave-tls"])
    secret = poll(lambda: cluster.core.read_namespaced_secret("enclave-tls-client-tenants", home))
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret.data[key]))
    anonymous = grpc.ssl_channel_credentials(root_certificates=(tmp_path / "ca.crt").read_bytes())
    async with grpc.aio.secure_channel(config.grpc_target, anonymous) as channel:
        stub: Any = config_pb2_grpc.ConfigServiceStub(channel)  # type: ignore[no-untyped-call]
        stream = stub.Watch(WatchRequest(subscriber="anonymous"), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    seen: list[Snapshot] = []
    arrived = asyncio.Event()

    def accept(snapshot: Snapshot) -> None:
        seen.append(snapshot)
        arrived.set()

    subscriber = SnapshotSubscriber(
        config.grpc_target,
        config_pb2_grpc.ConfigServiceStub,
        kinds=["ServiceConfiguration"],
        on_snapshot=accept,
        subscriber="tls-test",
        ca_file=str(tmp_path / "ca.crt"),
        client_cert_file=str(tmp_path / "tls.crt"),
        client_key_file=str(tmp_path / "tls.key"),
    )
    task = asyncio.create_task(subscriber.run())
    try:
        await asyncio.wait_for(arrived.wait(), timeout=10)
        assert json.loads(seen[0].payload)["name"] == name
    finally:
        task.cancel()


async def test_grpc_health_checking_reports_serving(start_config: Start, cluster: Cluster) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    name = unique("cfg")
    cluster.create_config(name, {"rbac": _rbac(name)})
    config = start_config(name, unique("ns"))
    async with grpc.aio.insecure_channel(config.grpc_target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_mutating_configuration_follows_every_field_and_its_deprecated_name(
    start_config: Start, cluster: Cluster
) -> None:
    """Every field of a mutating block reaches the MutatingWebhookConfiguration kube-apiserver calls, and the
    deprecated ``overrides.mutatingWebhookConfigurationName`` names it when the block has no name (the
    validating twin of each is proven above; docs/coverage.md listed these as not yet proven)."""
    name = unique("cfg")
    spec = _admission_spec(name, "https://127.0.0.1:9443/base", None)
    validating_hook = spec["admission"]["validating"]["webhooks"][0]
    mutating = spec["admission"]["mutating"]
    del mutating["name"]
    mutating["labels"] = {"team": "mutators"}
    mutating["annotations"] = {"note": "mutating"}
    mutating["client"] = {"url": "https://127.0.0.1:9443/base", "caBundle": base64.b64encode(b"a CA").decode()}
    mutating["webhooks"][0].update(
        {
            key: validating_hook[key]
            for key in ("matchPolicy", "timeoutSeconds", "namespaceSelector", "objectSelector", "matchConditions")
        }
    )
    mutating["webhooks"][0]["opts"] = {"administrators": True, "serviceUsers": True}
    spec["overrides"] = {"mutatingWebhookConfigurationName": f"{name}-legacy-mutating"}
    cluster.create_config(name, spec)
    start_config(name, unique("ns"))
    poll(lambda: cluster.ready(name))

    configuration = cluster.admission.read_mutating_webhook_configuration(f"{name}-legacy-mutating")
    assert configuration.metadata.labels["team"] == "mutators"
    assert configuration.metadata.annotations["note"] == "mutating"
    hook = configuration.webhooks[0]
    assert hook.name == "pods.enclave.dev"
    assert base64.b64decode(hook.client_config.ca_bundle) == b"a CA"
    assert hook.match_policy == "Exact"
    assert hook.timeout_seconds == 3
    assert hook.object_selector.match_labels == {"enclave.dev/tenant-test": name}
    assert hook.namespace_selector.match_expressions[0].values == ["kube-system"]
    conditions = {c.name: c.expression for c in hook.match_conditions}
    assert conditions["not-dry-run"] == "!has(request.dryRun) || !request.dryRun"
    audience = conditions["enclave.dev/audience"]  # opts: administrators and service users only
    for entity in ("root-admin", "admins", "tenants"):
        assert f'"{entity}"' in audience

"""Proof that the local control plane behaves like a real cluster in the ways Enclave depends on."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.pki import CertificateAuthority
from enclave_testing.controlplane import ControlPlane
from enclave_testing.waiting import poll as _poll
from enclave_testing.webhooks import DenyingWebhook


def test_version_reports_pinned_release(kube: Any) -> None:
    info = client.VersionApi(kube).get_code()
    from enclave_testing import binaries

    pinned = binaries.pinned_version(binaries.BINARIES["kube-apiserver"])  # of ENCLAVE_KUBERNETES_VERSION's minor
    assert info.git_version == pinned, info.git_version
    assert info.git_tree_state == "clean"


def test_deleted_namespace_disappears(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    name = "t-delete-me"
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "content"}, "data": {"k": "v"}})
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    _poll(gone, timeout=60)


def _pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/pause:1",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
                }
            ]
        },
    }


def test_resource_quota_usage_and_enforcement(kube: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "1", "pods": "5"}}}
    )
    # The quota admission plugin refuses pods until the controller has computed the quota's first status.
    _poll(lambda: core.read_namespaced_resource_quota("q", namespace).status.used or None)
    _poll(lambda: core.list_namespaced_service_account(namespace).items)
    core.create_namespaced_pod(namespace, _pod("small", "600m"))

    def used_cpu() -> bool:
        used = core.read_namespaced_resource_quota("q", namespace).status.used or {}
        return used.get("requests.cpu") == "600m"

    _poll(used_cpu)
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, _pod("big", "500m"))
    assert refused.value.status == 403
    assert "exceeded quota" in refused.value.body


@pytest.fixture
def deny_webhook() -> Iterator[tuple[DenyingWebhook, bytes]]:
    ca = CertificateAuthority.generate("test-webhook-ca")
    leaf = ca.issue("webhook", ip_addresses=["127.0.0.1"])
    with DenyingWebhook(leaf.cert_pem, leaf.key_pem, "denied by the test webhook") as server:
        yield server, ca.pair.cert_pem


def test_apiserver_calls_https_webhook_and_deny_reaches_client(
    kube: Any, namespace: str, deny_webhook: tuple[DenyingWebhook, bytes]
) -> None:
    server, ca_pem = deny_webhook
    url = server.url("/deny")
    admission = client.AdmissionregistrationV1Api(kube)
    name = f"deny-{namespace}"
    admission.create_validating_webhook_configuration(
        {
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "deny.test.enclave.dev",
                    "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        }
    )
    core = client.CoreV1Api(kube)
    try:
        # The apiserver picks up new webhook configurations asynchronously: retry until the deny arrives.
        def denied() -> str | None:
            try:
                core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "cm-"}})
            except ApiException as err:
                return str(err.body) if "denied by the test webhook" in str(err.body) else None
            return None

        body = _poll(denied, timeout=30)
        assert "deny.test.enclave.dev" in body
        assert any(path.split("?")[0] == "/deny" for path in server.calls)
    finally:
        admission.delete_validating_webhook_configuration(name)


def test_impersonated_user_sees_own_rbac_view(control_plane: ControlPlane, kube: Any, namespace: str) -> None:
    rbac = client.RbacAuthorizationV1Api(kube)
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "readers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    alice = client.CoreV1Api(control_plane.impersonate("alice", ["team-a", "readers"]))
    bob = client.CoreV1Api(control_plane.impersonate("bob", ["team-b"]))

    # The second group grants the view: proof that several Impersonate-Group headers are sent.
    def alice_can_list() -> bool:
        try:
            alice.list_namespaced_config_map(namespace)
        except ApiException:
            return False  # the RBAC authorizer's cache may lag the binding by a moment
        return True

    _poll(alice_can_list)
    with pytest.raises(ApiException) as forbidden:
        alice.create_namespaced_config_map(namespace, {"metadata": {"name": "nope"}})
    assert forbidden.value.status == 403
    with pytest.raises(ApiException) as hidden:
        bob.list_namespaced_config_map(namespace)
    assert hidden.value.status == 403
    assert 'User "bob" cannot list resource "configmaps"' in json.loads(hidden.value.body)["message"]

"""Our API connection (enclave_core.kube.connection) against the real control plane: from its kubeconfig
(client certificate), in-cluster style from a real ServiceAccount token and the cluster CA, and from an exec
credential plugin that prints that token."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client

from enclave_core.kube.connection import Connection, from_kubeconfig, in_cluster
from enclave_core.kube.events import MESSAGE_LIMIT, EventRecorder
from enclave_core.kube.rest import Kube, KubeError
from enclave_testing.controlplane import ControlPlane


async def test_a_kube_from_the_kubeconfig_lists_and_watches(control_plane: ControlPlane, namespace: str) -> None:
    kube = Kube(from_kubeconfig(control_plane.kubeconfig), field_manager="test")
    try:
        listing = await kube.list("/api/v1/namespaces")
        assert namespace in {item["metadata"]["name"] for item in listing["items"]}
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        version = (await kube.list(path))["metadata"]["resourceVersion"]
        seen: list[str] = []

        async def watch() -> None:
            async for event in kube.watch(path, resource_version=version, timeout_seconds=30):
                if event["type"] == "ADDED":
                    seen.append(event["object"]["metadata"]["name"])
                    return

        task = asyncio.create_task(watch())
        await kube.create(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}})
        async with asyncio.timeout(30):
            await task
        assert seen == ["watched"]
    finally:
        await kube.api.close()


def _token(kube: Any, namespace: str, name: str) -> str:
    core = client.CoreV1Api(kube)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    return str(core.create_namespaced_service_account_token(name, namespace, request).status.token)


async def _identity(connection: Connection) -> str:
    kube = Kube(connection, field_manager="test")
    try:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        review = await kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
        with pytest.raises(KubeError) as refused:  # a fresh ServiceAccount may not list namespaces
            await kube.list("/api/v1/namespaces")
        assert refused.value.status == 403
        assert review["status"]["userInfo"]["username"] in refused.value.message
        return str(review["status"]["userInfo"]["username"])
    finally:
        await connection.close()


async def test_in_cluster_with_a_service_account_token(
    control_plane: ControlPlane, kube: Any, namespace: str, tmp_path: Path
) -> None:
    token = _token(kube, namespace, "robot")
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    url = urlsplit(control_plane.api_url)
    env = {"KUBERNETES_SERVICE_HOST": str(url.hostname), "KUBERNETES_SERVICE_PORT": str(url.port)}
    assert await _identity(in_cluster(env, tmp_path)) == f"system:serviceaccount:{namespace}:robot"


async def test_an_exec_plugin_printing_that_token(
    control_plane: ControlPlane, kube: Any, namespace: str, tmp_path: Path
) -> None:
    token = _token(kube, namespace, "plugged")
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    (tmp_path / "plugin.py").write_text(f"print({json.dumps(json.dumps(credential))})")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": control_plane.api_url, "certificate-authority": str(control_plane.ca_file)},
            }
        ],
        "users": [
            {
                "name": "robot",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": sys.executable,
                        "args": [str(tmp_path / "plugin.py")],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "robot"}}],
        "current-context": "local",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    identity = await _identity(from_kubeconfig(tmp_path / "kubeconfig"))
    assert identity == f"system:serviceaccount:{namespace}:plugged"


async def test_patches_record_the_components_field_manager(control_plane: ControlPlane, namespace: str) -> None:
    """Merge and JSON patches are owned by the component's field manager, not by the HTTP client's name."""
    kube = Kube(from_kubeconfig(control_plane.kubeconfig), field_manager="enclave-probe")
    try:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"created": "0"}}
        await kube.create(path, body)
        await kube.merge_patch(f"{path}/owned", {"data": {"merged": "1"}})
        patched = await kube.json_patch(f"{path}/owned", [{"op": "add", "path": "/data/listed", "value": "2"}])
        owners = {
            key: entry["manager"]
            for entry in patched["metadata"]["managedFields"]
            for key in (entry.get("fieldsV1") or {}).get("f:data", {})
        }
        assert owners == {".": "enclave-probe", **dict.fromkeys(("f:created", "f:merged", "f:listed"), "enclave-probe")}
    finally:
        await kube.api.close()


async def test_an_event_message_is_cut_to_the_recorders_limit(control_plane: ControlPlane, namespace: str) -> None:
    """Callers hand the recorder whole messages (a list of problems can be long); what kube-apiserver stores is at
    most 1,024 characters with the cut marked, and a short message is stored as it was."""
    kube = Kube(from_kubeconfig(control_plane.kubeconfig), field_manager="test")
    recorder = EventRecorder(kube, "enclave-test")
    involved = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace}}
    try:
        long = await recorder.emit(involved, "Warning", "Problems", "x" * 5000)
        short = await recorder.emit(involved, "Normal", "Fine", "all good")
    finally:
        await kube.api.close()
    assert long is not None
    assert short is not None
    assert len(long["message"]) == MESSAGE_LIMIT
    assert long["message"].endswith("[... cut]")
    assert short["message"] == "all good"

"""enclave-replication authenticated as the chart's service account, with exactly the chart's RBAC: it reads,
watches and impersonates its way through a TenantResource and a GlobalTenantResource."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from enclave_testing import binaries
from enclave_testing.components import start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.paths import repo_root
from enclave_testing.waiting import poll

from .conftest import REPLICATION, Cluster

KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_rbac(namespace: str) -> list[dict[str, Any]]:
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(repo_root() / "charts" / "enclave"), "--namespace", namespace]
    args += ["--kube-version", "1.35.4", "--set", "replication.enabled=true"]
    args += ["--set", "networkPolicy.apiServerCIDRs={192.0.2.10/32}"]  # no cluster to read kube-apiserver's from
    rendered = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] in KINDS and "replication" in doc["metadata"]["name"]
    ]


def token_kubeconfig(control_plane: ControlPlane, kube: Any, namespace: str, account: str, path: Path) -> Path:
    token = client.CoreV1Api(kube).create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    server = {"server": control_plane.api_url, "certificate-authority": str(control_plane.ca_file)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": account, "user": {"token": token.status.token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_replication_runs_with_exactly_the_charts_rbac(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str], tmp_path: Path
) -> None:
    namespace = f"replication-rbac-{secrets.token_hex(3)}"
    cluster = Cluster(kube)
    cluster.namespace(namespace)
    dynamic = DynamicClient(kube)
    created: list[tuple[Any, dict[str, Any]]] = []
    running = None
    try:
        for doc in chart_rbac(namespace):
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            resource.create(body=doc, namespace=namespace if resource.namespaced else None)
            created.append((resource, doc))
        kubeconfig = token_kubeconfig(control_plane, kube, namespace, "enclave-replication", tmp_path / "kc")
        running = start_component(
            REPLICATION,
            kubeconfig=kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={},
            identity="replication-rbac",
        )
        tenant = f"trbac-{secrets.token_hex(3)}"
        home, other = cluster.tenant(tenant, {"rbac": tenant}, namespaces=2)
        # The impersonation grant enclave-tenants keeps in every tenant namespace (`--namespace-grant`); the
        # account acted as lives in `home`, and only there may the controller impersonate.
        grant = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "enclave-component-enclave-replication-impersonate", "namespace": home},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "enclave-replication-impersonate",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "enclave-replication", "namespace": namespace}],
        }
        client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(home, grant)
        rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]
        cluster.service_account(home, "writer", rules, [home, other])
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
        account = {"name": "writer", "namespace": home}
        cluster.create_local(home, "tr", {"serviceAccount": account, "resources": [{"rawItems": [config_map]}]})
        cluster.ready("tenantresources", "tr", home)
        global_name = f"rbac-{secrets.token_hex(3)}"
        global_map = {**config_map, "metadata": {"name": "g"}}
        cluster.create_global(
            global_name,
            {
                "serviceAccount": account,
                "tenantSelector": {"matchLabels": {"rbac": tenant}},
                "resources": [{"rawItems": [global_map]}],
            },
        )
        cluster.ready("globaltenantresources", global_name)
        for target in (home, other):
            assert cluster.config_map(target, "c") is not None
            assert cluster.config_map(target, "g") is not None
        # Deleting cleans up through the same identity (the finalizer is the chart's `update` on finalizers).
        cluster.delete("tenantresources", "tr", home)
        cluster.delete("globaltenantresources", global_name)
        poll(lambda: cluster.config_map(other, "c") is None and cluster.config_map(other, "g") is None, what="pruned")
    finally:
        cluster.cleanup()
        if running is not None:
            running.process.stop()
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])

"""enclave-replication authenticated as the chart's service account, with exactly the chart's RBAC: it reads,
watches and impersonates its way through a TenantResource and a GlobalTenantResource, ConfigMaps (read
cluster-wide, ``replication.rbac.readResources``) and Secrets (read only in tenant namespaces, where enclave-tenants
binds ``enclave-replication-read``, and in ``replication.rbac.sourceNamespaces``) alike."""

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


def chart_rbac(namespace: str, sources: str) -> list[dict[str, Any]]:
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(repo_root() / "charts" / "enclave"), "--namespace", namespace]
    args += ["--kube-version", "1.35.4", "--set", "replication.enabled=true"]
    args += ["--set", "networkPolicy.apiServerCIDRs={192.0.2.10/32}"]  # no cluster to read kube-apiserver's from
    args += ["--set", f"replication.rbac.sourceNamespaces={{{sources}}}"]
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
    sources = f"replication-sources-{secrets.token_hex(3)}"
    cluster = Cluster(kube)
    cluster.namespace(namespace)
    cluster.namespace(sources)
    dynamic = DynamicClient(kube)
    created: list[tuple[Any, dict[str, Any]]] = []
    running = None
    try:
        for doc in chart_rbac(namespace, sources):
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])
            target = doc["metadata"].get("namespace", namespace) if resource.namespaced else None
            resource.create(body=doc, namespace=target)
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
        # The grants enclave-tenants keeps in every tenant namespace (`--namespace-grant`): impersonation (the
        # account acted as lives in `home`, and only there may the controller impersonate) and reads.
        rbac = client.RbacAuthorizationV1Api(kube)
        for role, where in (
            ("enclave-replication-impersonate", home),
            ("enclave-replication-read", home),
            ("enclave-replication-read", other),
        ):
            grant = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"enclave-component-{role}", "namespace": where},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "enclave-replication", "namespace": namespace}],
            }
            rbac.create_namespaced_role_binding(where, grant)
        rules = [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]}]
        cluster.service_account(home, "writer", rules, [home, other, sources])
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
        account = {"name": "writer", "namespace": home}
        core = client.CoreV1Api(kube)
        core.create_namespaced_secret(home, {"metadata": {"name": "tenant-secret"}, "stringData": {"k": "t"}})
        core.create_namespaced_secret(sources, {"metadata": {"name": "shared-secret"}, "stringData": {"k": "s"}})
        tenant_secret = {"kind": "Secret", "namespace": home, "name": "tenant-secret"}
        cluster.create_local(
            home,
            "tr",
            {
                "serviceAccount": account,
                "resources": [
                    {"rawItems": [config_map]},
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": other}},
                        "namespacedItems": [tenant_secret],
                    },
                ],
            },
        )
        cluster.ready("tenantresources", "tr", home)
        global_name = f"rbac-{secrets.token_hex(3)}"
        global_map = {**config_map, "metadata": {"name": "g"}}
        cluster.create_global(
            global_name,
            {
                "serviceAccount": account,
                "tenantSelector": {"matchLabels": {"rbac": tenant}},
                "resources": [
                    {
                        "rawItems": [global_map],
                        "namespacedItems": [{"kind": "Secret", "namespace": sources, "name": "shared-secret"}],
                    }
                ],
            },
        )
        cluster.ready("globaltenantresources", global_name)
        for target in (home, other):
            assert cluster.config_map(target, "c") is not None
            assert cluster.config_map(target, "g") is not None
            assert _secret(core, target, "shared-secret") is not None
        assert _secret(core, other, "tenant-secret") is not None
        # Drift is undone through the per-namespace watch of Secrets (the controller reads none cluster-wide), and a
        # change of the source in `sources` reaches the copies through the watch the chart's binding allows.
        core.delete_namespaced_secret("tenant-secret", other)
        poll(lambda: _secret(core, other, "tenant-secret"), what="the deleted copy restored")
        core.patch_namespaced_secret("shared-secret", sources, {"stringData": {"k": "changed"}})
        poll(
            lambda: (_secret(core, other, "shared-secret").data or {}).get("k") == "Y2hhbmdlZA==",
            what="the changed source copied",
        )
        # Deleting cleans up through the same identity (the finalizer is the chart's `update` on finalizers).
        cluster.delete("tenantresources", "tr", home)
        cluster.delete("globaltenantresources", global_name)
        poll(lambda: cluster.config_map(other, "c") is None and cluster.config_map(other, "g") is None, what="pruned")
        poll(lambda: _secret(core, other, "shared-secret") is None, what="the Secret copies pruned")
    finally:
        cluster.cleanup()
        if running is not None:
            running.process.stop()
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])


def _secret(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise

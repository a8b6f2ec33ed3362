"""The chart's enclave-proxy block: its flags are the component's, its RBAC is the suite's, kube-apiserver takes it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from enclave_proxy.__main__ import parse_args
from enclave_testing import binaries
from enclave_testing import proxy as local_proxy
from enclave_testing.paths import repo_root

CHART = repo_root() / "charts" / "enclave"
BASE = [
    "--kube-version", "1.35.4",
    "--set", "networkPolicy.apiServerCIDRs[0]=192.0.2.10/32",
]  # fmt: skip
ENABLED = ["--set", "proxy.enabled=true", "--set", "proxy.tls.secretName=proxy-serving"]


@pytest.fixture(scope="module")
def helm() -> Path:
    return binaries.ensure("helm")["helm"]


def template(helm: Path, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(helm), "template", "enclave", str(CHART), "--namespace", namespace, *BASE, *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def proxy_objects(helm: Path, namespace: str, *args: str) -> list[dict[str, Any]]:
    done = template(helm, namespace, *ENABLED, *args)
    assert done.returncode == 0, done.stderr
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return [doc for doc in docs if (doc["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "proxy"]


def test_proxy_is_off_by_default_and_needs_a_serving_certificate(helm: Path) -> None:
    default = template(helm, "enclave-system")
    assert default.returncode == 0, default.stderr
    assert "enclave-proxy" not in default.stdout
    refused = template(helm, "enclave-system", "--set", "proxy.enabled=true")
    assert refused.returncode != 0
    assert "proxy.tls.secretName" in refused.stderr


def test_chart_flags_are_the_components_and_rbac_is_the_suites(helm: Path) -> None:
    objects = proxy_objects(helm, "enclave-system", "--set", "proxy.clientCA.configMap=kube-ca")
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in objects}
    for kind in ("ServiceAccount", "Deployment", "Service", "ClusterRole", "ClusterRoleBinding", "NetworkPolicy"):
        assert (kind, "enclave-proxy") in kinds
    deployment = next(doc for doc in objects if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = parse_args(container["args"])  # the chart's flags are the component's
    assert args.tenants_endpoint == "enclave-tenants.enclave-system.svc:9090"
    assert args.client_ca_file.endswith("/ca.crt")
    role = next(doc for doc in objects if doc["kind"] == "ClusterRole")
    assert role["rules"] == local_proxy.PROXY_RULES, "the suites run the proxy with exactly the chart's rights"


def test_proxy_objects_are_accepted_by_kube_apiserver(helm: Path, kube: Any, namespace: str) -> None:
    dynamic = DynamicClient(kube)
    refused = []
    for doc in proxy_objects(helm, namespace):
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        try:
            resource.create(
                body=doc,
                namespace=namespace if resource.namespaced else None,
                dry_run="All",
                query_params=[("fieldValidation", "Strict")],
            )
        except ApiException as err:
            refused.append(f"{doc['kind']}/{doc['metadata']['name']}: {err.status} {err.body}")
    assert not refused


LOCAL_ONLY = {"kubeconfig", "identity"}
"""Flags the local proxy sets that the chart does not: its kubeconfig (in a pod: the ServiceAccount) and its
identity (in a pod: ``ENCLAVE_IDENTITY`` from the pod's name)."""


def flags(argv: list[str]) -> set[str]:
    return {arg.split("=", 1)[0].removeprefix("--").replace("-", "_") for arg in argv if arg.startswith("--")}


def test_tox_up_runs_the_proxy_as_the_chart_installs_it(helm: Path, tmp_path: Path) -> None:
    """``tox -e up`` (and every suite using enclave_testing.proxy) sets the chart's flags, with the chart's
    defaults for what is not an address or a path, and holds exactly the chart's ClusterRole."""
    objects = proxy_objects(helm, "enclave-system", "--set", "proxy.clientCA.configMap=kube-ca")
    deployment = next(doc for doc in objects if doc["kind"] == "Deployment")
    chart_argv = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    grpc_client = ["--grpc-ca-file=/ca.crt", "--grpc-client-cert=/tls.crt", "--grpc-client-key=/tls.key"]
    local_argv = [
        "--kubeconfig=/kubeconfig",
        "--namespace=enclave-system",
        "--probe-address=127.0.0.1:1",
        "--identity=enclave-proxy",
        *local_proxy.proxy_args(grpc_client, {"tenants": "t:1", "config": "c:1"}, tmp_path, 2, tmp_path / "ca.crt"),
    ]
    assert flags(local_argv) - LOCAL_ONLY == flags(chart_argv)
    chart, local = parse_args(chart_argv), parse_args(local_argv)
    for setting in ("token_cache_ttl", "upstream_connections", "tls_reload_interval"):
        assert getattr(local, setting) == getattr(chart, setting), setting
    role = next(doc for doc in objects if doc["kind"] == "ClusterRole")
    assert role["rules"] == local_proxy.PROXY_RULES

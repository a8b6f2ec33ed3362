"""The chart's default NetworkPolicies: a pod cannot reach the webhook port (forged AdmissionReviews that would
hold a victim's ledger reservations), the gRPC ports, or the metrics ports, unless the values admit it.

The test control plane runs no network plugin, so what is proved here is the policies themselves: what the
default install renders (kube-apiserver's addresses read from the live cluster by Helm's ``lookup``), that no
rule admits a pod to the webhook port or anyone to metrics by default, and that a render that cannot know
kube-apiserver's addresses fails instead of shipping a policy that would either block kube-apiserver or admit
everyone. The other fence, client authentication, is proved by tests/integration/admission/test_client_auth.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from enclave_testing import binaries
from enclave_testing.controlplane import ControlPlane

from .test_rbac_rules import CHART, KUBE_VERSION, every_component_values, render

PROMETHEUS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def _policies(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc["spec"] for doc in manifests if doc["kind"] == "NetworkPolicy"}


def _admitted(spec: dict[str, Any], port: str) -> list[list[dict[str, Any]] | None]:
    """The ``from`` of every rule that admits ``port`` (None: a rule without ``from``, admitting everyone)."""
    return [
        rule.get("from") for rule in spec.get("ingress") or [] if {"port": port, "protocol": "TCP"} in rule["ports"]
    ]


def test_forged_review_from_a_pod_is_fenced_by_the_default_network_policy(tmp_path: Path) -> None:
    """Defaults (with kube-apiserver's address given, as an offline render needs): every component is fenced;
    the webhook port admits kube-apiserver's addresses and nothing that selects pods; gRPC admits Enclave's pods
    of the release only; no rule admits anyone to metrics, and no rule admits everyone to anything."""
    policies = _policies(render(tmp_path, {"networkPolicy": {"apiServerCIDRs": ["192.0.2.10/32"]}}))
    assert sorted(policies) == ["enclave-admission", "enclave-config", "enclave-tenants"]
    for name, spec in policies.items():
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == name.removeprefix("enclave-")
        assert all(rule.get("from") for rule in spec["ingress"]), f"{name}: a rule without `from` admits everyone"
        assert _admitted(spec, "metrics") == [], name
    assert _admitted(policies["enclave-admission"], "https") == [[{"ipBlock": {"cidr": "192.0.2.10/32"}}]]
    enclave = {"app.kubernetes.io/name": "enclave", "app.kubernetes.io/instance": "enclave"}
    for name in ("enclave-config", "enclave-tenants"):
        assert _admitted(policies[name], "grpc") == [[{"podSelector": {"matchLabels": enclave}}]]


def test_scraping_metrics_from_a_tenant_pod_is_fenced(tmp_path: Path) -> None:
    """Every component's metrics port admits exactly ``networkPolicy.metricsFrom``; a ServiceMonitor without it
    is refused at render (it could never scrape) rather than silently opening the port."""
    values = every_component_values()
    values["networkPolicy"]["metricsFrom"] = PROMETHEUS
    values["metrics"] = {"serviceMonitor": {"enabled": True}}
    policies = _policies(render(tmp_path, values))
    assert len(policies) == 7
    for name, spec in policies.items():
        assert _admitted(spec, "metrics") == [PROMETHEUS], name
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(CHART), "--kube-version", KUBE_VERSION]
    args += ["--set", "networkPolicy.apiServerCIDRs={192.0.2.10/32}", "--set", "metrics.serviceMonitor.enabled=true"]
    refused = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode != 0
    assert "networkPolicy.metricsFrom" in refused.stderr


def test_offline_render_without_kube_apiservers_address_is_refused() -> None:
    """`helm template` cannot read the cluster: rather than a policy that blocks kube-apiserver (every fail-closed
    hook refusing) or admits every pod, the render fails naming the values that fix it."""
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(CHART), "--kube-version", KUBE_VERSION]
    refused = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode != 0
    for value in ("networkPolicy.apiServerCIDRs", "networkPolicy.apiServerPeers", "networkPolicy.enabled=false"):
        assert value in refused.stderr
    opted_out = subprocess.run(
        [*args, "--set", "networkPolicy.enabled=false"], capture_output=True, text=True, check=False
    )
    assert opted_out.returncode == 0, opted_out.stderr
    assert not [doc for doc in yaml.safe_load_all(opted_out.stdout) if doc and doc["kind"] == "NetworkPolicy"]


@pytest.fixture
def advertised(kube: Any) -> Iterator[list[str]]:
    """The `kubernetes` EndpointSlice a real cluster's kube-apiserver keeps (the test one runs with
    ``--endpoint-reconciler-type=none``: it advertises loopback, which an EndpointSlice cannot hold), with two
    documentation addresses."""
    api = client.DiscoveryV1Api(kube)
    addresses = ["192.0.2.7", "192.0.2.8"]
    body = {
        "metadata": {
            "name": "kubernetes",
            "labels": {"kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "test"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address]} for address in addresses],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }
    api.create_namespaced_endpoint_slice("default", body)
    try:
        yield addresses
    finally:
        api.delete_namespaced_endpoint_slice("kubernetes", "default")


def test_install_admits_the_addresses_kube_apiserver_advertises(
    control_plane: ControlPlane, advertised: list[str], namespace: str
) -> None:
    """Against a cluster (a render with ``--dry-run=server`` reads the cluster through ``lookup`` as `helm install`
    does), the webhook port admits exactly the addresses of the `kubernetes` EndpointSlice, each as a
    single-address block. `helm template` rather than `helm install --dry-run`: the install would also refuse
    cluster-scoped objects other tests of this session left without Helm's ownership annotations."""
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(CHART), "--namespace", namespace, "--dry-run=server"]
    args += ["--kube-version", KUBE_VERSION]
    args += ["--kubeconfig", str(control_plane.kubeconfig), "--set", "serviceConfiguration.create=false"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    manifest = result.stdout
    (admitted,) = _admitted(_policies([d for d in yaml.safe_load_all(manifest) if d])["enclave-admission"], "https")
    assert admitted is not None
    assert sorted(peer["ipBlock"]["cidr"] for peer in admitted) == [f"{address}/32" for address in advertised]

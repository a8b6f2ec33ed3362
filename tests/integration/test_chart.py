"""The Helm chart in charts/enclave: it lints, renders, and what it renders is accepted by a real kube-apiserver.

Rendering uses the real ``helm`` binary built from the pinned module (``enclave_testing.binaries``). Every rendered
object is created on the test control plane with ``dryRun=All`` and ``fieldValidation=Strict``: the apiserver runs
defaulting, schema, CEL and admission validation, and refuses unknown or duplicated fields, without storing
anything. The RBAC test goes further and applies the chart's roles for real, then acts as the components'
service accounts to prove the narrow ``escalate`` and ``bind`` grants are enough, and no more than enough.
The rendered manifests also go through ``kubeconform -strict`` against schemas made from this apiserver's
OpenAPI and our CRDs (``enclave_testing.schemas``), the check a user's CI can run with no cluster.
Finally helm itself installs, upgrades and uninstalls the release on the test control plane (without ``--wait``:
no pod can run there; ``tox -e kwok`` runs ``helm install --wait`` on simulated nodes, tests/kwok).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from enclave_testing import binaries, schemas
from enclave_testing.components import COMPONENTS, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.paths import repo_root
from enclave_testing.waiting import poll as _poll

CHART = repo_root() / "charts" / "enclave"
KUBE_VERSION = "1.35.4"
"""The version `helm template` assumes; the chart requires >=1.30 and helm's offline default is older."""
SERVICE_CONFIGURATION_CRD = "serviceconfigurations.enclave.dev"

ALL_COMPONENTS = ["config", "tenants", "admission", "quotas", "globalquotas", "pools", "replication"]
CONTROLLERS = [name for name in ALL_COMPONENTS if name != "admission"]

Manifest = dict[str, Any]

OFFLINE_VALUES: dict[str, Any] = {"networkPolicy": {"apiServerCIDRs": ["192.0.2.10/32"]}}
"""What `helm template` needs besides the defaults: with no cluster to read kube-apiserver's addresses from, the
default NetworkPolicy asks for them (a test address, TEST-NET-1). Given first, so a test's own values win."""


def offline_values() -> Path:
    """:data:`OFFLINE_VALUES` as a values file (one per process, written once)."""
    path = Path(tempfile.gettempdir()) / f"enclave-chart-offline-{os.getpid()}.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump(OFFLINE_VALUES))
    return path


@pytest.fixture(scope="session")
def helm() -> Path:
    """The pinned helm binary (built on first use, cached afterwards)."""
    return binaries.ensure("helm")["helm"]


def _helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False, timeout=120)


def _values_file(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


def render(helm: Path, namespace: str, *values_files: Path, sets: tuple[str, ...] = ()) -> list[Manifest]:
    """`helm template` the chart into ``namespace``; the rendered objects (CRDs excluded: helm skips crds/)."""
    args = ["template", "enclave", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for path in (offline_values(), *values_files):
        args += ["--values", str(path)]
    for assignment in sets:
        args += ["--set", assignment]
    result = _helm(helm, *args)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(helm: Path, *sets: str, values: Path | None = None) -> str:
    """Render with values that must be refused; the error text helm prints."""
    args = ["template", "enclave", str(CHART), "--namespace", "enclave-system", "--kube-version", KUBE_VERSION]
    args += ["--values", str(offline_values())]
    if values is not None:
        args += ["--values", str(values)]
    for assignment in sets:
        args += ["--set", assignment]
    result = _helm(helm, *args)
    assert result.returncode != 0, f"helm accepted invalid values {sets}:\n{result.stdout[:2000]}"
    return result.stderr


def by_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {doc["metadata"]["name"]: doc for doc in manifests if doc["kind"] == kind}


def container(deployment: Manifest) -> Manifest:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _message(err: ApiException) -> str:
    """The apiserver's own message from an error Status, else the raw body."""
    try:
        return str(json.loads(err.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(err.body)


def dry_run(kube: Any, manifests: list[Manifest], namespace: str) -> None:
    """Create every object with dryRun=All and strict field validation; fail listing every refusal."""
    dynamic = DynamicClient(kube)
    refused: list[str] = []
    for doc in manifests:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        target = namespace if resource.namespaced else None
        if resource.namespaced:
            assert doc["metadata"].get("namespace") == namespace, f"{doc['kind']} {doc['metadata']['name']}"
        try:
            resource.create(body=doc, namespace=target, dry_run="All", query_params=[("fieldValidation", "Strict")])
        except ApiException as err:
            refused.append(f"{doc['kind']}/{doc['metadata']['name']}: {err.status} {_message(err)}")
    assert not refused, "kube-apiserver refused rendered objects:\n" + "\n".join(refused)


def all_components_values() -> dict[str, Any]:
    """Every component enabled, with the optional parts switched on, as a user would write it."""
    values: dict[str, Any] = {name: {"enabled": True} for name in ALL_COMPONENTS}
    values["config"]["replicas"] = 2
    values["config"]["podDisruptionBudget"] = {"enabled": True, "maxUnavailable": 1}
    values["tenants"]["rbac"] = {"bindableClusterRoles": ["edit", "view"]}
    values["admission"]["autoscaling"] = {"enabled": True, "minReplicas": 3, "maxReplicas": 9}
    values["admission"]["podDisruptionBudget"] = {"enabled": True, "minAvailable": "50%"}
    values["admission"]["clientAuthentication"] = {
        "caConfigMap": "apiserver-webhook-client-ca",
        "allowedNames": ["kube-apiserver-webhook-client", "apiserver.example.com"],
    }
    values["networkPolicy"] = {
        "enabled": True,
        "apiServerCIDRs": ["10.0.0.0/28", "fd00::/64"],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    }
    values["admission"]["limits"] = {"maxConnections": 300, "maxBufferedBytes": 32 * 1024 * 1024}
    values["metrics"] = {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}
    values["global"] = {"image": {"tag": "v9.9.9"}, "priorityClassName": "system-cluster-critical"}
    values["serviceConfiguration"] = {
        "spec": {"administrators": [{"kind": "Group", "name": "platform"}], "allowServiceAccountPromotion": True},
        "admission": {"webhooks": {"nodes": {"enabled": True}}},
    }
    return values


# -- lint and render ---------------------------------------------------------------------------------------


def test_helm_lint_passes(helm: Path, tmp_path: Path) -> None:
    default = _helm(helm, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION)
    assert default.returncode == 0, default.stdout + default.stderr
    every = _values_file(tmp_path, all_components_values())
    full = _helm(helm, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, "--values", str(every))
    assert full.returncode == 0, full.stdout + full.stderr


def test_defaults_render_the_built_components(helm: Path) -> None:
    manifests = render(helm, "enclave-system")
    deployments = by_kind(manifests, "Deployment")
    assert sorted(deployments) == ["enclave-admission", "enclave-config", "enclave-tenants"]

    for name, deployment in deployments.items():
        component = name.removeprefix("enclave-")
        spec = deployment["spec"]["template"]["spec"]
        main = container(deployment)
        assert main["command"] == ["python", "-m", f"enclave_{component}"]
        assert main["image"] == "ghcr.io/enclave-dev/enclave:0.1.0"
        assert "--namespace=enclave-system" in main["args"]
        assert "--probe-address=0.0.0.0:8081" in main["args"]
        assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in main["ports"]
        assert any(env["name"] == "ENCLAVE_LOG_LEVEL" for env in main["env"])
        security = main["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["serviceAccountName"] == name
        assert main["resources"]["requests"]

    # Controllers: one active replica behind a Lease, gRPC with TLS, identity = pod name.
    for name in ("enclave-config", "enclave-tenants"):
        deployment = deployments[name]
        args = container(deployment)["args"]
        assert deployment["spec"]["replicas"] == 1
        assert "topologySpreadConstraints" not in deployment["spec"]["template"]["spec"]
        assert "--grpc-address=0.0.0.0:9090" in args
        assert "--leader-elect" in args
        identity = next(env for env in container(deployment)["env"] if env["name"] == "ENCLAVE_IDENTITY")
        assert identity["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    assert "--grpc-tls-cert=/etc/enclave/tls/tls.crt" in container(deployments["enclave-tenants"])["args"]
    config_args = container(deployments["enclave-config"])["args"]
    assert "--service-configuration-name=default" in config_args
    assert "--grpc-tls-secret=enclave-tls" in config_args
    assert (
        "--config-endpoint=enclave-config.enclave-system.svc:9090" in container(deployments["enclave-tenants"])["args"]
    )

    # Admission: stateless, 2 replicas spread, serving TLS from the shared Secret, subscribed to the controllers.
    admission = deployments["enclave-admission"]
    args = container(admission)["args"]
    assert admission["spec"]["replicas"] == 2
    assert admission["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert "--leader-elect" not in args
    assert "--tls-cert-file=/etc/enclave/tls/tls.crt" in args
    assert "--tls-key-file=/etc/enclave/tls/tls.key" in args
    assert "--grpc-ca-file=/etc/enclave/tls/ca.crt" in args
    # ... presenting its own client certificate to publishers, from its own Secret, mounted in its pods alone.
    assert "--grpc-client-cert=/etc/enclave/grpc-client/tls.crt" in args
    assert "--grpc-client-key=/etc/enclave/grpc-client/tls.key" in args
    assert "--config-endpoint=enclave-config.enclave-system.svc:9090" in args
    assert "--tenants-endpoint=enclave-tenants.enclave-system.svc:9090" in args
    volumes = {volume["name"]: volume for volume in admission["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {
        "secretName": "enclave-tls",
        "optional": True,
        "defaultMode": 0o440,
        "items": [{"key": key, "path": key} for key in ("tls.crt", "tls.key", "ca.crt")],
    }
    for deployment in deployments.values():
        name = deployment["metadata"]["name"]
        mounted = {
            volume["secret"]["secretName"]
            for volume in deployment["spec"]["template"]["spec"]["volumes"]
            if "secret" in volume and volume["secret"]["secretName"] != "enclave-tls"
        }
        own = set() if name == "enclave-config" else {f"enclave-tls-client-{name.removeprefix('enclave-')}"}
        assert mounted == own, f"{name} mounts only its own client Secret"
    # No pod mounts the CA's private key: only the config component reads it, through the API.
    for deployment in deployments.values():
        for volume in deployment["spec"]["template"]["spec"]["volumes"]:
            if "secret" in volume:
                assert [item["key"] for item in volume["secret"].get("items", [])] != [], deployment["metadata"]
                assert "ca.key" not in json.dumps(volume), deployment["metadata"]["name"]
    assert "--client-ca-file" not in " ".join(args), "no client CA configured: no client authentication"
    # A NetworkPolicy per component, on by default: webhooks from kube-apiserver only, gRPC from Enclave's pods,
    # metrics from nobody (probes come from the node).
    policies = by_kind(manifests, "NetworkPolicy")
    assert sorted(policies) == sorted(deployments)
    assert policies["enclave-admission"]["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"port": "https", "protocol": "TCP"}]}
    ]
    enclave_pods = {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "enclave", "app.kubernetes.io/instance": "enclave"}}
    }
    for name in ("enclave-config", "enclave-tenants"):
        assert policies[name]["spec"]["ingress"] == [
            {"from": [enclave_pods], "ports": [{"port": "grpc", "protocol": "TCP"}]}
        ]
        assert policies[name]["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == name[8:]

    services = by_kind(manifests, "Service")
    webhook = services["enclave-webhook-service"]
    assert webhook["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP", "appProtocol": "https"}
    ]
    assert {port["name"]: port["port"] for port in services["enclave-config"]["spec"]["ports"]} == {
        "metrics": 8081,
        "grpc": 9090,
    }
    assert {port["name"] for port in services["enclave-admission"]["spec"]["ports"]} == {"metrics"}

    assert sorted(by_kind(manifests, "PodDisruptionBudget")) == ["enclave-admission"]
    assert not by_kind(manifests, "HorizontalPodAutoscaler")
    assert not by_kind(manifests, "ServiceMonitor")


def test_default_webhooks_are_tightly_scoped(helm: Path) -> None:
    (configuration,) = by_kind(render(helm, "enclave-system"), "ServiceConfiguration").values()
    assert configuration["metadata"]["name"] == "default"
    spec = configuration["spec"]
    assert spec["overrides"]["TLSSecretName"] == "enclave-tls"
    admission = spec["admission"]
    assert admission["serviceName"] == "enclave-webhook-service"
    hooks: dict[str, Manifest] = {}
    for side in ("mutating", "validating"):
        assert admission[side]["client"] == {
            "service": {"name": "enclave-webhook-service", "namespace": "enclave-system", "port": 443}
        }
        hooks |= {hook["name"]: {**hook, "side": side} for hook in admission[side]["webhooks"]}

    # Only what the built components serve; quotas, replication and node metadata are off.
    assert sorted(hooks) == [
        "namespaces.enclave.dev",
        "namespaces.mutate.enclave.dev",
        "resources.enclave.dev",
        "resources.mutate.enclave.dev",
        "rolebindings.enclave.dev",
        "rules.enclave.dev",
        "serviceaccounts.enclave.dev",
        "serviceconfigurations.enclave.dev",
        "tenants.enclave.dev",
        "volumeclaims.enclave.dev",
    ]
    exclusion = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "kube-public", "kube-node-lease", "enclave-system"],
    }
    for hook in hooks.values():
        assert hook["timeoutSeconds"] <= 5, hook["name"]
        # The tenant-rules hooks post audit Events (never for dry runs).
        wanted_effects = (
            "NoneOnDryRun" if hook["name"] in ("resources.enclave.dev", "volumeclaims.enclave.dev") else "None"
        )
        assert hook["sideEffects"] == wanted_effects, hook["name"]
        assert hook["admissionReviewVersions"] == ["v1"], hook["name"]
        if hook["name"].startswith("namespaces.") or hook["name"] in (
            "tenants.enclave.dev",
            "rolebindings.enclave.dev",
        ):
            # Guards kube-system's namespace object too (Tenants are cluster-scoped; managed RoleBindings are
            # selected by label); the control plane and Enclave's accounts are skipped by a matchCondition instead.
            assert "namespaceSelector" not in hook, hook["name"]
            condition = {c["name"]: c["expression"] for c in hook["matchConditions"]}["enclave.dev/skip-control-plane"]
            assert "system:serviceaccount:enclave-system:" in condition
        else:
            assert exclusion in hook["namespaceSelector"]["matchExpressions"], hook["name"]
        for chart_only in ("enabled", "type", "requires", "skipControlPlane", "skipUnjudged", "everyNamespace"):
            assert chart_only not in hook

    namespaces = hooks["namespaces.enclave.dev"]
    assert namespaces["side"] == "validating"
    assert namespaces["path"] == "/namespaces"
    assert namespaces["failurePolicy"] == "Fail"
    assert namespaces["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
            "scope": "Cluster",
        }
    ]
    assert hooks["namespaces.mutate.enclave.dev"]["failurePolicy"] == "Fail"
    assert hooks["serviceaccounts.enclave.dev"]["failurePolicy"] == "Fail"
    assert hooks["tenants.enclave.dev"]["failurePolicy"] == "Fail"
    assert hooks["serviceconfigurations.enclave.dev"]["failurePolicy"] == "Ignore"
    # Rule validity for every writer: system:masters is judged (only the cluster's controllers are skipped).
    assert hooks["rules.enclave.dev"]["failurePolicy"] == "Ignore"
    (skip,) = hooks["rules.enclave.dev"]["matchConditions"]
    assert "system:masters" not in skip["expression"]


def test_chart_webhooks_equal_the_admission_servers_defaults(helm: Path) -> None:
    """One design, two spellings: the chart's default hooks are exactly enclave_admission.defaults.webhooks()
    (which tox -e up uses), so an install and a local run scope admission the same way."""
    from enclave_admission.defaults import webhooks
    from enclave_core.api.configuration import WebhookClient, WebhookService

    namespace = "team-platform"
    (configuration,) = by_kind(render(helm, namespace), "ServiceConfiguration").values()
    chart = configuration["spec"]["admission"]
    client = WebhookClient(service=WebhookService(name="enclave-webhook-service", namespace=namespace))
    expected = webhooks(client, namespace=namespace).to_k8s()
    for side in ("mutating", "validating"):
        rendered = {hook["name"]: hook for hook in chart[side]["webhooks"]}
        wanted = {hook["name"]: hook for hook in expected[side]["webhooks"]}
        assert rendered == wanted, side


def test_chart_quota_hooks_equal_the_admission_servers_defaults(helm: Path) -> None:
    """With enclave-quotas on, the chart's quota hooks are defaults.webhooks(quotas=True)'s, rules-less generic
    hook included (enclave-quotas scopes it)."""
    from enclave_admission.defaults import webhooks
    from enclave_core.api.configuration import WebhookClient, WebhookService

    namespace = "team-platform"
    manifests = render(helm, namespace, sets=("quotas.enabled=true",))
    (configuration,) = by_kind(manifests, "ServiceConfiguration").values()
    client = WebhookClient(service=WebhookService(name="enclave-webhook-service", namespace=namespace))
    expected = webhooks(client, namespace=namespace, quotas=True).to_k8s()
    rendered = {hook["name"]: hook for hook in configuration["spec"]["admission"]["validating"]["webhooks"]}
    wanted = {hook["name"]: hook for hook in expected["validating"]["webhooks"]}
    assert rendered == wanted
    assert "rules" not in rendered["quotas.enclave.dev"]


def test_chart_pool_hooks_equal_the_admission_servers_defaults(helm: Path) -> None:
    """With enclave-pools on, the chart's pool hooks (claim assignment, claim and pool validation) are
    defaults.webhooks(pools=True)'s."""
    from enclave_admission.defaults import webhooks
    from enclave_core.api.configuration import WebhookClient, WebhookService

    namespace = "team-platform"
    manifests = render(helm, namespace, sets=("pools.enabled=true",))
    (configuration,) = by_kind(manifests, "ServiceConfiguration").values()
    client = WebhookClient(service=WebhookService(name="enclave-webhook-service", namespace=namespace))
    expected = webhooks(client, namespace=namespace, pools=True).to_k8s()
    for side in ("mutating", "validating"):
        rendered = {hook["name"]: hook for hook in configuration["spec"]["admission"][side]["webhooks"]}
        wanted = {hook["name"]: hook for hook in expected[side]["webhooks"]}
        assert rendered == wanted, side
    deployments = by_kind(manifests, "Deployment")
    assert (
        "--pools-endpoint=enclave-pools.team-platform.svc:9090" in container(deployments["enclave-admission"])["args"]
    )
    from enclave_pools.__main__ import parse_args

    parse_args(container(deployments["enclave-pools"])["args"])  # the chart's flags are the component's


def test_chart_globalquota_hooks_equal_the_admission_servers_defaults(helm: Path) -> None:
    """With enclave-globalquotas on, the chart's hooks are defaults.webhooks(globalquotas=True)'s, admission
    subscribes to it, and the chart's flags are the component's."""
    from enclave_admission.defaults import webhooks
    from enclave_core.api.configuration import WebhookClient, WebhookService

    namespace = "team-platform"
    manifests = render(helm, namespace, sets=("globalquotas.enabled=true",))
    (configuration,) = by_kind(manifests, "ServiceConfiguration").values()
    client = WebhookClient(service=WebhookService(name="enclave-webhook-service", namespace=namespace))
    expected = webhooks(client, namespace=namespace, globalquotas=True).to_k8s()
    rendered = {hook["name"]: hook for hook in configuration["spec"]["admission"]["validating"]["webhooks"]}
    wanted = {hook["name"]: hook for hook in expected["validating"]["webhooks"]}
    assert rendered == wanted
    deployments = by_kind(manifests, "Deployment")
    admission_args = container(deployments["enclave-admission"])["args"]
    assert "--globalquotas-endpoint=enclave-globalquotas.team-platform.svc:9090" in admission_args
    from enclave_globalquotas.__main__ import parse_args

    parse_args(container(deployments["enclave-globalquotas"])["args"])


def test_chart_replication_hooks_equal_the_admission_servers_defaults(helm: Path) -> None:
    """With enclave-replication on, the chart's hooks are defaults.webhooks(replication=True)'s: protection
    (validating, fail-closed, managed objects only) and the deprecated-settings conversion (mutating)."""
    from enclave_admission.defaults import webhooks
    from enclave_core.api.configuration import WebhookClient, WebhookService

    namespace = "team-platform"
    manifests = render(helm, namespace, sets=("replication.enabled=true",))
    (configuration,) = by_kind(manifests, "ServiceConfiguration").values()
    client = WebhookClient(service=WebhookService(name="enclave-webhook-service", namespace=namespace))
    expected = webhooks(client, namespace=namespace, replication=True).to_k8s()
    for side in ("mutating", "validating"):
        rendered = {hook["name"]: hook for hook in configuration["spec"]["admission"][side]["webhooks"]}
        wanted = {hook["name"]: hook for hook in expected[side]["webhooks"]}
        assert rendered == wanted, side
    validating = {hook["name"]: hook for hook in expected["validating"]["webhooks"]}
    assert validating["replication.enclave.dev"]["objectSelector"]["matchExpressions"][0]["key"] == (
        "enclave.dev/managed-by"
    )


def test_webhooks_follow_the_components(helm: Path, tmp_path: Path) -> None:
    """Quota and replication hooks appear with their components, fail closed; none exist without admission."""
    every = _values_file(tmp_path, all_components_values())
    (configuration,) = by_kind(render(helm, "enclave-system", every), "ServiceConfiguration").values()
    validating = {hook["name"]: hook for hook in configuration["spec"]["admission"]["validating"]["webhooks"]}
    assert validating["quotas.enclave.dev"]["failurePolicy"] == "Fail"
    assert validating["quotas.enclave.dev"]["sideEffects"] == "NoneOnDryRun"
    assert validating["replication.enclave.dev"]["failurePolicy"] == "Fail"
    assert validating["nodes.enclave.dev"]["opts"] == {"administrators": False, "serviceUsers": True}

    (configuration,) = by_kind(
        render(helm, "enclave-system", sets=("admission.enabled=false",)), "ServiceConfiguration"
    ).values()
    assert configuration["spec"]["admission"] == {"serviceName": "enclave-webhook-service"}


def test_every_component_renders(helm: Path, tmp_path: Path) -> None:
    manifests = render(helm, "enclave-system", _values_file(tmp_path, all_components_values()))
    deployments = by_kind(manifests, "Deployment")
    assert sorted(deployments) == sorted(f"enclave-{name}" for name in ALL_COMPONENTS)
    for name in CONTROLLERS:
        assert f"enclave-{name}" in by_kind(manifests, "ClusterRole")
        assert f"enclave-{name}" in by_kind(manifests, "Role"), "every controller needs its Lease"
        assert f"enclave-{name}" in by_kind(manifests, "ServiceMonitor")
    for deployment in deployments.values():
        assert container(deployment)["image"] == "ghcr.io/enclave-dev/enclave:v9.9.9"
        assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"

    admission = deployments["enclave-admission"]
    assert "replicas" not in admission["spec"], "the HPA owns the replica count"
    args = container(admission)["args"]
    from enclave_admission.__main__ import parse_args

    subscribed = vars(parse_args(args))
    for name in CONTROLLERS:  # exactly the publishers admission knows, every one of them
        expected = f"--{name}-endpoint=enclave-{name}.enclave-system.svc:9090"
        assert (expected in args) == (f"{name}_endpoint" in subscribed), name
    assert "--client-ca-file=/etc/enclave/client-ca/ca.crt" in args
    assert "--client-allowed-names=kube-apiserver-webhook-client,apiserver.example.com" in args
    assert "--max-connections=300" in args
    assert f"--max-buffered-bytes={32 * 1024 * 1024}" in args
    mounts = {mount["name"]: mount["mountPath"] for mount in container(admission)["volumeMounts"]}
    assert mounts["client-ca"] == "/etc/enclave/client-ca"
    policies = by_kind(manifests, "NetworkPolicy")
    assert sorted(policies) == sorted(deployments)
    webhook_rule, metrics_rule = policies["enclave-admission"]["spec"]["ingress"]
    assert webhook_rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00::/64"}}]
    assert webhook_rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert metrics_rule == {"from": prometheus, "ports": [{"port": "metrics", "protocol": "TCP"}]}
    for name in CONTROLLERS:
        grpc_rule, metrics_rule = policies[f"enclave-{name}"]["spec"]["ingress"]
        assert grpc_rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
        assert metrics_rule["from"] == prometheus
    (hpa,) = by_kind(manifests, "HorizontalPodAutoscaler").values()
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    assert by_kind(manifests, "PodDisruptionBudget")["enclave-admission"]["spec"]["minAvailable"] == "50%"
    config = deployments["enclave-config"]
    assert config["spec"]["replicas"] == 2
    assert config["spec"]["template"]["spec"]["topologySpreadConstraints"], "a standby goes to another node"

    bind = [rule for rule in by_kind(manifests, "ClusterRole")["enclave-tenants"]["rules"] if rule["verbs"] == ["bind"]]
    assert bind == [
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "resourceNames": [
                "admin",
                "enclave-namespace-deleter",
                "enclave-namespace-provisioner",
                "edit",
                "view",
                "enclave-tenants-managed-metadata",
                "enclave-replication-impersonate",
                "enclave-replication-read",
            ],
            "verbs": ["bind"],
        }
    ]


# -- what the apiserver says -------------------------------------------------------------------------------


def _without(manifests: list[Manifest], *kinds: str) -> list[Manifest]:
    return [doc for doc in manifests if doc["kind"] not in kinds]


def test_default_render_is_accepted_by_the_apiserver(helm: Path, kube: Any, namespace: str) -> None:
    manifests = render(helm, namespace)
    # The ServiceConfiguration needs its CRD: test_service_configuration_is_accepted_by_its_crd covers it.
    dry_run(kube, _without(manifests, "ServiceConfiguration"), namespace)


def test_pods_pass_the_restricted_pod_security_standard(helm: Path, kube: Any, namespace: str, tmp_path: Path) -> None:
    """Each component's pod template, as a Pod, is admitted where Pod Security enforces `restricted`."""
    core = client.CoreV1Api(kube)
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    manifests = render(helm, namespace, _values_file(tmp_path, all_components_values()))
    for account in by_kind(manifests, "ServiceAccount").values():  # the ServiceAccount plugin wants them to exist
        core.create_namespaced_service_account(namespace, account)
    pods = []
    for name, deployment in by_kind(manifests, "Deployment").items():
        template = deployment["spec"]["template"]
        spec = {key: value for key, value in template["spec"].items() if key != "priorityClassName"}
        metadata = {"name": name, "namespace": namespace, "labels": template["metadata"]["labels"]}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    assert len(pods) == len(ALL_COMPONENTS)
    dry_run(kube, pods, namespace)


def test_every_component_is_accepted_by_the_apiserver(helm: Path, kube: Any, namespace: str, tmp_path: Path) -> None:
    manifests = render(helm, namespace, _values_file(tmp_path, all_components_values()))
    # ServiceMonitor is served only where the Prometheus Operator's CRDs are installed (not on the test plane).
    dry_run(kube, _without(manifests, "ServiceConfiguration", "ServiceMonitor"), namespace)


@pytest.fixture
def service_configuration_crd(kube: Any, request: pytest.FixtureRequest) -> None:
    if not (CHART / "crds").is_dir():
        pytest.skip(f"{CHART / 'crds'} does not exist yet: no ServiceConfiguration CRD to validate against")
    installed: list[str] = request.getfixturevalue("enclave_crds")
    if SERVICE_CONFIGURATION_CRD not in installed:
        pytest.skip(f"CRD {SERVICE_CONFIGURATION_CRD} is not in {CHART / 'crds'} yet; cannot dry-run the object")


@pytest.mark.usefixtures("service_configuration_crd")
@pytest.mark.parametrize("profile", ["defaults", "every-component"])
def test_service_configuration_is_accepted_by_its_crd(
    helm: Path, kube: Any, namespace: str, tmp_path: Path, profile: str
) -> None:
    files = [_values_file(tmp_path, all_components_values())] if profile == "every-component" else []
    objects = [doc for doc in render(helm, namespace, *files) if doc["kind"] == "ServiceConfiguration"]
    assert len(objects) == 1
    try:
        dry_run(kube, objects, namespace)
    except ResourceNotFoundError:  # discovery has not caught up with a CRD another session changed
        pytest.fail(f"{SERVICE_CONFIGURATION_CRD} installed but not served")


# -- RBAC that works, and no more --------------------------------------------------------------------------


@pytest.fixture
def applied_rbac(helm: Path, kube: Any, namespace: str) -> Iterator[list[Manifest]]:
    """The chart's RBAC objects created for real (cluster-scoped ones are removed afterwards)."""
    kinds = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    manifests = [doc for doc in render(helm, namespace) if doc["kind"] in kinds]
    dynamic = DynamicClient(kube)
    created: list[tuple[Any, Manifest]] = []
    try:
        for doc in manifests:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            target = namespace if resource.namespaced else None
            try:
                resource.create(body=doc, namespace=target)
            except ApiException as err:
                if err.status != 409:
                    raise
                resource.replace(body=doc, namespace=target)
            created.append((resource, doc))
        yield manifests
    finally:
        for resource, doc in reversed(created):
            if not resource.namespaced:
                try:
                    resource.delete(name=doc["metadata"]["name"])
                except ApiException as err:
                    if err.status != 404:
                        raise


def _as_service_account(impersonate: Any, namespace: str, name: str) -> Any:
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    return impersonate(f"system:serviceaccount:{namespace}:{name}", groups)


def _status(call: Any, *args: Any, **kwargs: Any) -> int:
    """HTTP status of ``call(*args, **kwargs)``: 200 when it succeeds, else the ApiException's status."""
    try:
        call(*args, **kwargs)
    except ApiException as err:
        return int(err.status)
    return 200


def _binding(kind: str, name: str, role: str) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "enclave.dev"}],
    }


def test_rbac_escalate_and_bind_are_exactly_as_wide_as_needed(
    applied_rbac: list[Manifest], kube: Any, impersonate: Any, namespace: str
) -> None:
    provisioner = by_kind(applied_rbac, "ClusterRole")["enclave-namespace-provisioner"]
    name = "enclave-namespace-provisioner"

    config = client.RbacAuthorizationV1Api(_as_service_account(impersonate, namespace, "enclave-config"))
    # It keeps the provisioner role in sync although it cannot create namespaces itself (escalate on that name)...
    live = client.RbacAuthorizationV1Api(kube).read_cluster_role(name)
    body = {**provisioner, "metadata": {"name": name, "resourceVersion": live.metadata.resource_version}}
    assert _status(config.replace_cluster_role, name, body, dry_run="All") == 200
    # ...but cannot create roles, let alone one granting what it does not hold.
    probe = {**provisioner, "metadata": {"name": "t-escalation-probe"}}
    assert _status(config.create_cluster_role, probe, dry_run="All") == 403
    # It binds the provisioner role to the service users, and no role whose rights it does not hold.
    binding = _binding("ClusterRoleBinding", name, name)
    assert _status(config.create_cluster_role_binding, binding, dry_run="All") == 200
    binding = _binding("ClusterRoleBinding", "t-bind-probe", "cluster-admin")
    assert _status(config.create_cluster_role_binding, binding, dry_run="All") == 403

    tenants = client.RbacAuthorizationV1Api(_as_service_account(impersonate, namespace, "enclave-tenants"))
    for role in ("admin", "enclave-namespace-deleter"):
        binding = _binding("RoleBinding", f"t-{role}", role)
        assert _status(tenants.create_namespaced_role_binding, namespace, binding, dry_run="All") == 200, role
    binding = _binding("RoleBinding", "t-cluster-admin", "cluster-admin")
    assert _status(tenants.create_namespaced_role_binding, namespace, binding, dry_run="All") == 403

    # The admission server reads nothing on the hot path: no secrets, no namespaces.
    admission = client.CoreV1Api(_as_service_account(impersonate, namespace, "enclave-admission"))
    assert _status(admission.list_namespaced_secret, namespace) == 403
    assert _status(admission.list_namespace) == 403
    # Controllers hold their Lease in the release namespace only.
    leases = client.CoordinationV1Api(_as_service_account(impersonate, namespace, "enclave-tenants"))
    lease = {"metadata": {"name": "enclave-tenants"}, "spec": {"holderIdentity": "probe"}}
    assert _status(leases.create_namespaced_lease, namespace, lease, dry_run="All") == 200
    assert _status(leases.create_namespaced_lease, "default", lease, dry_run="All") == 403


# -- the schema refuses what would break -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("admission.replicas=-1", "at '/admission/replicas': minimum: got -1, want 1"),
        ("config.replicas=3", "at '/config/replicas': maximum: got 3, want 2"),
        (
            "serviceConfiguration.admission.webhooks.namespaces.failurePolicy=Sometimes",
            "at '/serviceConfiguration/admission/webhooks/namespaces/failurePolicy': value must be one of 'Fail', 'Ignore'",
        ),
        (
            "serviceConfiguration.admission.webhooks.resources.timeoutSeconds=60",
            "at '/serviceConfiguration/admission/webhooks/resources/timeoutSeconds': maximum: got 60, want 30",
        ),
        ("global.image.pullPolicy=Sometimes", "at '/global/image/pullPolicy'"),
        ("admission.enable=true", "additional properties 'enable' not allowed"),
        ("serviceConfiguration.spec.cacheInvalidation=daily", "at '/serviceConfiguration/spec/cacheInvalidation'"),
    ],
)
def test_schema_rejects_invalid_values(helm: Path, assignment: str, expected: str) -> None:
    error = render_error(helm, assignment)
    assert "values don't meet the specifications of the schema" in error
    assert expected in error


def test_cross_field_rules_fail_with_a_message(helm: Path) -> None:
    error = render_error(helm, "config.enabled=false")
    assert "admission.enabled requires config.enabled" in error
    error = render_error(
        helm,
        "admission.autoscaling.enabled=true",
        "admission.autoscaling.minReplicas=5",
        "admission.autoscaling.maxReplicas=3",
    )
    assert "minReplicas (5) must not exceed maxReplicas (3)" in error
    error = render_error(helm, "serviceConfiguration.admission.webhooks.namespaces.reinvocationPolicy=IfNeeded")
    assert "webhooks.namespaces: reinvocationPolicy is only valid on mutating webhooks" in error


def test_dry_run_catches_what_a_template_typo_would_produce(helm: Path, kube: Any, namespace: str) -> None:
    """The acceptance tests above mean something: strict dry-run refuses an unknown or invalid field."""
    deployment = by_kind(render(helm, namespace), "Deployment")["enclave-admission"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(
        AssertionError, match=re.escape('unknown field "spec.template.spec.containers[0].readinesProbe"')
    ):
        dry_run(kube, [deployment], namespace)
    deployment = by_kind(render(helm, namespace), "Deployment")["enclave-admission"]
    deployment["spec"]["replicas"] = -1
    with pytest.raises(AssertionError, match=re.escape("spec.replicas")):
        dry_run(kube, [deployment], namespace)


def test_rendered_arguments_are_accepted_by_each_component(helm: Path, tmp_path: Path) -> None:
    """Every built component parses the command line the chart gives it (a misspelt flag would crash-loop)."""
    import importlib
    import importlib.util

    for profile in ("defaults", "every-component"):
        files = [_values_file(tmp_path, all_components_values())] if profile == "every-component" else []
        deployments = by_kind(render(helm, "enclave-system", *files), "Deployment")
        checked = []
        for deployment in deployments.values():
            spec = container(deployment)
            module = spec["command"][-1]
            if importlib.util.find_spec(module) is None:
                continue
            if profile == "every-component" and module not in (
                "enclave_admission",
                "enclave_config",
                "enclave_tenants",
            ):
                continue  # the quota, pool and replication components' own arguments are their blocks' business
            main = importlib.import_module(f"{module}.__main__")
            try:  # argparse exits with status 2 on an unknown or bad flag
                main.parse_args(spec["args"])
            except SystemExit:
                pytest.fail(f"{module} refuses the arguments the chart gives it ({profile}): {spec['args']}")
            checked.append(module)
        assert {"enclave_admission", "enclave_config", "enclave_tenants"} <= set(checked), profile


def test_tenants_managed_metadata_switch_drops_the_broad_grant(helm: Path) -> None:
    """``tenants.managedMetadata.enabled`` is the only reason for list/patch on every namespaced resource, and that
    grant is never cluster-wide: on, the role ``enclave-tenants-managed-metadata`` exists, bound by nobody, and the
    controller is told to bind it in tenant namespaces (``--namespace-grant``); off, neither, and the controller
    is told not to reconcile (and parses the flags)."""
    from enclave_tenants.__main__ import parse_args

    everything = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["list", "patch"]}
    for enabled in (True, False):
        manifests = render(helm, "enclave-system", sets=(f"tenants.managedMetadata.enabled={str(enabled).lower()}",))
        roles = by_kind(manifests, "ClusterRole")
        assert not any("*" in rule.get("resources", []) for rule in roles["enclave-tenants"]["rules"])
        assert ("enclave-tenants-managed-metadata" in roles) is enabled
        if enabled:
            assert roles["enclave-tenants-managed-metadata"]["rules"] == [everything]
        bound = [doc["roleRef"]["name"] for doc in manifests if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")]
        assert "enclave-tenants-managed-metadata" not in bound
        args = container(by_kind(manifests, "Deployment")["enclave-tenants"])["args"]
        assert ("--no-managed-metadata" in args) is not enabled
        grant = "--namespace-grant=enclave-tenants-managed-metadata=enclave-tenants"
        assert (grant in args) is enabled
        parsed = parse_args(args)
        assert parsed.managed_metadata is enabled
        assert [g.cluster_role for g in parsed.grants] == (["enclave-tenants-managed-metadata"] if enabled else [])


# -- the real components under the chart's RBAC ------------------------------------------------------------


def _token_kubeconfig(control_plane: ControlPlane, kube: Any, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ``account`` with a token from the TokenRequest API, as in a pod."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = client.CoreV1Api(kube).create_namespaced_service_account_token(account, namespace, request).status.token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": control_plane.api_url, "certificate-authority": str(control_plane.ca_file)},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _create_fresh(kube: Any, manifests: list[Manifest], namespace: str) -> list[tuple[Any, Manifest]]:
    """Create the rendered objects (replacing any left by an earlier test); returns them for clean-up."""
    dynamic = DynamicClient(kube)
    created = []
    for doc in manifests:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        target = namespace if resource.namespaced else None
        with contextlib.suppress(ApiException):
            resource.delete(name=doc["metadata"]["name"], namespace=target)
        resource.create(body=doc, namespace=target)
        created.append((resource, doc))
    return created


def test_controllers_run_with_exactly_the_charts_rbac(
    helm: Path, kube: Any, control_plane: ControlPlane, enclave_crds: list[str], tmp_path: Path
) -> None:
    """enclave-config and enclave-tenants, authenticated as the chart's service accounts, do their whole job:
    the default ServiceConfiguration created and Ready, roles and binding applied, tenant RoleBindings bound
    (the owner's and the namespace grant of its own managed-metadata role)."""
    namespace = f"enclave-rbac-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    rendered = render(helm, namespace)
    manifests = [doc for doc in rendered if doc["kind"] in kinds]
    tenants_args = container(by_kind(rendered, "Deployment")["enclave-tenants"])["args"]
    grants = [arg for arg in tenants_args if arg.startswith("--namespace-grant=")]
    assert grants == ["--namespace-grant=enclave-tenants-managed-metadata=enclave-tenants"]
    created: list[tuple[Any, Manifest]] = []
    running: list[Any] = []
    custom = client.CustomObjectsApi(kube)
    tenant = f"rbac-{secrets.token_hex(3)}"
    try:
        created += _create_fresh(kube, manifests, namespace)
        specs = {spec.name: spec for spec in COMPONENTS}

        def start(name: str, endpoints: dict[str, str], args: list[str]) -> Any:
            kubeconfig = _token_kubeconfig(
                control_plane, kube, namespace, f"enclave-{name}", tmp_path / f"{name}.kubeconfig"
            )
            component = start_component(
                specs[name],
                kubeconfig=kubeconfig,
                log_dir=control_plane.log_dir,
                namespace=namespace,
                endpoints=endpoints,
                args=args,
                identity=f"rbac-{name}",
            )
            running.append(component)
            return component

        config = start("config", {}, ["--service-configuration-name=default", "--resync=5s"])

        def configuration_ready() -> bool:
            status = (
                custom.get_cluster_custom_object("enclave.dev", "v1beta2", "serviceconfigurations", "default").get(
                    "status"
                )
                or {}
            )
            return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])

        _poll(configuration_ready)
        # The certificates, with the Role that names each Secret config keeps (watched by name, never listed).
        custom.patch_cluster_custom_object(
            "enclave.dev", "v1beta2", "serviceconfigurations", "default", {"spec": {"enableTLSReconciler": True}}
        )
        clients = ("admission", "globalquotas", "pools", "proxy", "quotas", "replication", "tenants")
        kept = {"enclave-tls", *(f"enclave-tls-client-{component}" for component in clients)}
        _poll(lambda: kept <= {secret.metadata.name for secret in core.list_namespaced_secret(namespace).items})
        _poll(configuration_ready)
        binding = client.RbacAuthorizationV1Api(kube).read_cluster_role_binding("enclave-namespace-provisioner")
        assert [(s.kind, s.name) for s in binding.subjects] == [("Group", "enclave.dev")]

        start("tenants", {"config": config.grpc_target}, grants)
        custom.create_cluster_custom_object(
            "enclave.dev",
            "v1beta2",
            "tenants",
            {
                "apiVersion": "enclave.dev/v1beta2",
                "kind": "Tenant",
                "metadata": {"name": tenant},
                "spec": {"owners": [{"kind": "User", "name": "rbac-alice"}]},
            },
        )
        core.create_namespace({"metadata": {"name": f"{tenant}-dev", "labels": {"enclave.dev/tenant": tenant}}})

        def bound() -> set[str]:
            items = client.RbacAuthorizationV1Api(kube).list_namespaced_role_binding(f"{tenant}-dev").items
            return {rb.role_ref.name for rb in items}

        # The owner's bindings, and the namespace grant it binds to itself (which it may: `bind` on that name).
        _poll(lambda: {"admin", "enclave-namespace-deleter", "enclave-tenants-managed-metadata"} <= bound())
        _poll(
            lambda: (
                (custom.get_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant).get("status") or {}).get(
                    "size"
                )
                == 1
            )
        )
    finally:
        for component in reversed(running):
            component.process.stop()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "serviceconfigurations", "default")
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])


def test_pools_runs_with_exactly_the_charts_rbac(
    helm: Path, kube: Any, control_plane: ControlPlane, enclave_crds: list[str], tmp_path: Path
) -> None:
    """enclave-pools, authenticated as the chart's service account, does its whole job: finalizer, ledger,
    provisioned ResourceQuotas (created, grown, deleted), claim status, and deleting bound claims with a pool
    that has deleteBoundResources."""
    namespace, token = f"enclave-rbac-pools-{secrets.token_hex(3)}", secrets.token_hex(3)
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    tenant_ns = f"rbac-pools-{token}"
    core.create_namespace({"metadata": {"name": tenant_ns, "labels": {"rbac-pools": token}}})
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    manifests = [
        doc
        for doc in render(helm, namespace, sets=("pools.enabled=true",))
        if doc["kind"] in kinds and doc["metadata"]["name"] == "enclave-pools"
    ]
    assert sorted(doc["kind"] for doc in manifests) == sorted(kinds)
    created: list[tuple[Any, Manifest]] = []
    running: list[Any] = []
    pool = f"rbac-{token}"
    try:
        created += _create_fresh(kube, manifests, namespace)
        kubeconfig = _token_kubeconfig(control_plane, kube, namespace, "enclave-pools", tmp_path / "pools.kubeconfig")
        spec = next(spec for spec in COMPONENTS if spec.name == "pools")
        running.append(
            start_component(
                spec,
                kubeconfig=kubeconfig,
                log_dir=control_plane.log_dir,
                namespace=namespace,
                endpoints={},
                identity="rbac-pools",
            )
        )
        body = {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "ResourcePool",
            "metadata": {"name": pool},
            "spec": {
                "quota": {"hard": {"requests.cpu": "2"}},
                "selectors": [{"matchLabels": {"rbac-pools": token}}],
                "config": {"defaultsZero": True, "deleteBoundResources": True},
            },
        }
        custom.create_cluster_custom_object("enclave.dev", "v1beta2", "resourcepools", body)
        claim = {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "ResourcePoolClaim",
            "metadata": {"name": "c"},
            "spec": {"pool": pool, "claim": {"requests.cpu": "1"}},
        }
        custom.create_namespaced_custom_object("enclave.dev", "v1beta2", tenant_ns, "resourcepoolclaims", claim)

        def quota_hard() -> dict[str, str]:
            quota = core.read_namespaced_resource_quota(f"enclave-pool-{pool}", tenant_ns)
            return dict(quota.spec.hard or {})

        _poll(lambda: quota_hard() == {"requests.cpu": "1"}, what="quota grown by the claim")
        _poll(
            lambda: (
                (
                    custom.get_namespaced_custom_object(
                        "enclave.dev", "v1beta2", tenant_ns, "resourcepoolclaims", "c"
                    ).get("status", {})
                )
                .get("condition", {})
                .get("reason")
                == "Bound"
            ),
            what="claim Bound",
        )
        custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "resourcepools", pool)

        def gone() -> bool:
            claims = custom.list_namespaced_custom_object("enclave.dev", "v1beta2", tenant_ns, "resourcepoolclaims")
            quotas = core.list_namespaced_resource_quota(tenant_ns).items
            pools = custom.list_cluster_custom_object("enclave.dev", "v1beta2", "resourcepools")["items"]
            return not claims["items"] and not quotas and pool not in {p["metadata"]["name"] for p in pools}

        _poll(gone, what="claim, quota and pool removed")
    finally:
        for component in reversed(running):
            component.process.stop()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "resourcepools", pool)
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])
        for name in (namespace, tenant_ns):
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


def test_globalquotas_runs_with_exactly_the_charts_rbac(
    helm: Path, kube: Any, control_plane: ControlPlane, enclave_crds: list[str], tmp_path: Path
) -> None:
    """enclave-globalquotas, authenticated as the chart's service account, does its whole job: a tenant rule
    quota becomes a GlobalResourceQuota, which gets its ResourceQuota, ledger and status; removing the rule
    deletes them all."""
    namespace, token = f"enclave-rbac-gq-{secrets.token_hex(3)}", secrets.token_hex(3)
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    tenant = f"rbac-gq-{token}"
    tenant_ns = f"{tenant}-dev"
    core.create_namespace({"metadata": {"name": tenant_ns, "labels": {"enclave.dev/tenant": tenant}}})
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    manifests = [
        doc
        for doc in render(helm, namespace, sets=("globalquotas.enabled=true",))
        if doc["kind"] in kinds and doc["metadata"]["name"] == "enclave-globalquotas"
    ]
    assert sorted(doc["kind"] for doc in manifests) == sorted(kinds)
    created: list[tuple[Any, Manifest]] = []
    running: list[Any] = []
    quota = f"{tenant}-rule0-objects"
    try:
        created += _create_fresh(kube, manifests, namespace)
        kubeconfig = _token_kubeconfig(
            control_plane, kube, namespace, "enclave-globalquotas", tmp_path / "globalquotas.kubeconfig"
        )
        spec = next(spec for spec in COMPONENTS if spec.name == "globalquotas")
        running.append(
            start_component(
                spec,
                kubeconfig=kubeconfig,
                log_dir=control_plane.log_dir,
                namespace=namespace,
                endpoints={},
                identity="rbac-globalquotas",
            )
        )
        rule = {"quota": [{"name": "objects", "hard": {"configmaps": 10}}]}
        body = {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "Tenant",
            "metadata": {"name": tenant},
            "spec": {"owners": [{"kind": "User", "name": "rbac-alice"}], "rules": [rule]},
        }
        custom.create_cluster_custom_object("enclave.dev", "v1beta2", "tenants", body)

        def provisioned() -> bool:
            rq = core.read_namespaced_resource_quota(f"globalquota-{quota}", tenant_ns)
            ledger = custom.get_namespaced_custom_object(
                "enclave.dev", "v1beta2", namespace, "quantityledgers", f"globalresourcequota.{quota}"
            )
            grq = custom.get_cluster_custom_object("enclave.dev", "v1beta2", "globalresourcequotas", quota)
            return bool(
                dict(rq.spec.hard or {}) == {"configmaps": "10"}
                and (ledger.get("status") or {}).get("resourceQuota")
                and (grq.get("status") or {}).get("namespaces") == [tenant_ns]
            )

        _poll(provisioned, what="quota, ResourceQuota, ledger and status")
        custom.patch_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant, {"spec": {"rules": [{}]}})

        def removed() -> bool:
            quotas = core.list_namespaced_resource_quota(tenant_ns).items
            grqs = custom.list_cluster_custom_object("enclave.dev", "v1beta2", "globalresourcequotas")["items"]
            return not quotas and quota not in {g["metadata"]["name"] for g in grqs}

        _poll(removed, what="rule quota and its ResourceQuota removed")
    finally:
        for component in reversed(running):
            component.process.stop()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant)
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])
        for name in (namespace, tenant_ns):
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


def test_config_renders_the_defaults_into_the_narrowed_hooks() -> None:
    """The third spelling of the same hooks: what enclave-config writes from enclave_admission.defaults keeps
    the control-plane skip, the audience (with tenant metadata on the validating namespace hook) and, on the
    mutating hook, only what assignment can change."""
    from enclave_admission.defaults import url_client, webhooks
    from enclave_config import webhooks as rendering
    from enclave_core.api.configuration import TENANT_METADATA_CONDITION, ServiceConfigurationSpec
    from enclave_core.api.meta import Entity
    from enclave_core.snapshots.configuration import effective

    spec = ServiceConfigurationSpec.model_validate(
        {
            "administrators": [{"kind": "Group", "name": "platform"}],
            "ignoreUserWithGroups": ["robots"],
            "admission": webhooks(url_client("https://127.0.0.1:9443"), nodes=True).to_k8s(),
        }
    )
    promoted = Entity(kind="ServiceAccount", name="system:serviceaccount:solar-ci:deployer")
    config = effective("default", 1, spec)
    rendered = rendering.render(config, None, [*config.users, promoted])
    hooks = {
        hook["name"]: {c["name"]: c["expression"] for c in hook.get("matchConditions", [])}
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in rendered[kind]["webhooks"]
    }
    for name in ("namespaces.enclave.dev", "namespaces.mutate.enclave.dev", "tenants.enclave.dev"):
        assert "enclave.dev/skip-control-plane" in hooks[name], name
    validating = hooks["namespaces.enclave.dev"]["enclave.dev/audience"]
    mutating = hooks["namespaces.mutate.enclave.dev"]["enclave.dev/audience"]
    nodes = hooks["nodes.enclave.dev"]["enclave.dev/audience"]
    for audience in (validating, mutating, nodes):
        assert audience.startswith('!request.userInfo.groups.exists(g, g in ["robots"])'), audience
        assert '"enclave.dev"' in audience
        assert '"system:serviceaccount:solar-ci:deployer"' in audience
    assert '"platform"' in validating
    assert '"platform"' in mutating
    assert '"platform"' not in nodes, "administrators are not sent to the node hook"
    assert TENANT_METADATA_CONDITION in validating
    assert TENANT_METADATA_CONDITION not in mutating
    assert hooks["namespaces.mutate.enclave.dev"]["enclave.dev/assignable"].startswith("request.operation == 'CREATE'")


# -- helm install, upgrade and uninstall on the real apiserver ----------------------------------------------
#
# The session's control plane has no kubelet, scheduler or deployment controller, so no pod ever runs here and
# `helm install --wait` could only time out: tests/kwok (`tox -e kwok`) runs --wait on a control plane with
# KWOK Nodes, kube-scheduler and the deployment controller. Here helm itself installs, upgrades and uninstalls
# the release: every object goes through kube-apiserver's defaulting, schema, CEL and admission validation,
# helm's three-way merge and ownership checks, and its deletion order.


def _release_values(tmp_path: Path, token: str, values: dict[str, Any], name: str) -> Path:
    """``values`` with the cluster-scoped names the release would share with other tests made unique.

    The ServiceConfiguration and the provisioner/deleter ClusterRoles are cluster-scoped; a component stack
    started by another test of the session may hold the default names, and helm rightly refuses to adopt an
    object it does not own. The components' own ClusterRoles (enclave-<component>) are fixed names that only
    this file's RBAC tests create, and they delete them."""
    merged = json.loads(json.dumps(values))
    # The test kube-apiserver advertises no address (loopback, --endpoint-reconciler-type=none), so the default
    # NetworkPolicy cannot read it from the `kubernetes` EndpointSlice: name it, as such a cluster's admin would.
    merged.setdefault("networkPolicy", {}).setdefault("apiServerCIDRs", ["127.0.0.1/32"])
    configuration = merged.setdefault("serviceConfiguration", {})
    configuration["name"] = f"helm-{token}"
    provisioner, deleter = f"helm-{token}-provisioner", f"helm-{token}-deleter"
    configuration.setdefault("spec", {})["rbac"] = {
        "provisioner": provisioner,
        "deleter": deleter,
        "administrationClusterRoles": [deleter],
        "promotionClusterRoles": [provisioner, deleter],
    }
    # ServiceMonitor is served only where the Prometheus Operator's CRDs are installed.
    merged.setdefault("metrics", {})["serviceMonitor"] = {"enabled": False}
    return _values_file(tmp_path, merged, name)


def _release(helm: Path, control_plane: ControlPlane, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``helm <args>`` against release ``enclave`` in ``namespace`` of the test control plane."""
    return _helm(helm, *args, "--namespace", namespace, "--kubeconfig", str(control_plane.kubeconfig))


def _installed(helm: Path, control_plane: ControlPlane, namespace: str) -> list[Manifest]:
    """The objects of the deployed release, as helm recorded them (`helm get manifest`)."""
    result = _release(helm, control_plane, namespace, "get", "manifest", "enclave")
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _live(kube: Any, doc: Manifest, namespace: str) -> Any | None:
    """The object on the server, or None when it is gone."""
    resource = DynamicClient(kube).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    try:
        return resource.get(name=doc["metadata"]["name"], namespace=namespace if resource.namespaced else None)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _assert_on_server(kube: Any, manifests: list[Manifest], namespace: str) -> None:
    """Every object of the release exists, labelled as helm's, with the spec it was rendered with."""
    for doc in manifests:
        live = _live(kube, doc, namespace)
        assert live is not None, f"{doc['kind']}/{doc['metadata']['name']} missing after helm install"
        annotations = live.metadata.annotations or {}
        assert annotations.get("meta.helm.sh/release-name") == "enclave", doc["metadata"]["name"]
        assert annotations.get("meta.helm.sh/release-namespace") == namespace, doc["metadata"]["name"]
        if doc["kind"] == "Deployment":
            # Without `replicas` (the HorizontalPodAutoscaler owns it) the apiserver defaults it to 1.
            assert live.spec.replicas == doc["spec"].get("replicas", 1), doc["metadata"]["name"]
            assert live.spec.template.spec.containers[0].args == container(doc)["args"]


def _assert_gone(kube: Any, manifests: list[Manifest], namespace: str) -> None:
    left = [f"{doc['kind']}/{doc['metadata']['name']}" for doc in manifests if _live(kube, doc, namespace)]
    assert not left, f"left behind: {left}"


def _alone(component: str) -> dict[str, Any]:
    """Only ``component`` enabled (admission also needs config, whose stream it reads: the chart refuses less)."""
    values: dict[str, Any] = {name: {"enabled": name == component} for name in ALL_COMPONENTS}
    if component == "admission":
        values["config"]["enabled"] = True
    return values


@pytest.mark.parametrize("profile", [*ALL_COMPONENTS, "all"])
def test_helm_install_and_uninstall(
    helm: Path,
    kube: Any,
    control_plane: ControlPlane,
    enclave_crds: list[str],
    namespace: str,
    tmp_path: Path,
    profile: str,
) -> None:
    """`helm install` of each component alone, and of all of them, is accepted object by object by the real
    apiserver; `helm uninstall` removes every object and keeps the CRDs."""
    token = secrets.token_hex(3)
    values = all_components_values() if profile == "all" else _alone(profile)
    path = _release_values(tmp_path, token, values, "release.yaml")
    installed = _release(helm, control_plane, namespace, "install", "enclave", str(CHART), "--values", str(path))
    try:
        assert installed.returncode == 0, installed.stderr
        manifests = _installed(helm, control_plane, namespace)
        deployments = {doc["metadata"]["name"] for doc in manifests if doc["kind"] == "Deployment"}
        wanted = {f"enclave-{name}" for name, value in values.items() if name in ALL_COMPONENTS and value["enabled"]}
        assert deployments == wanted
        _assert_on_server(kube, manifests, namespace)
        uninstalled = _release(helm, control_plane, namespace, "uninstall", "enclave", "--wait", "--timeout", "60s")
        assert uninstalled.returncode == 0, uninstalled.stderr
        _assert_gone(kube, manifests, namespace)
        crds = client.ApiextensionsV1Api(kube).list_custom_resource_definition().items
        assert set(enclave_crds) <= {crd.metadata.name for crd in crds}, "helm uninstall must keep the CRDs"
    finally:
        _release(helm, control_plane, namespace, "uninstall", "enclave", "--ignore-not-found")


def test_helm_upgrade_and_uninstall_leave_only_crds_and_tenant_data(
    helm: Path, kube: Any, control_plane: ControlPlane, enclave_crds: list[str], namespace: str, tmp_path: Path
) -> None:
    """Defaults, then every component, then defaults again: each `helm upgrade` adds and removes exactly the
    objects of the components switched on and off; a value the schema refuses is refused by `helm upgrade` and
    `helm install`, naming it, and changes nothing; `helm uninstall` leaves the CRDs and the tenants' objects."""
    token = secrets.token_hex(3)
    defaults = _release_values(tmp_path, token, {}, "defaults.yaml")
    every = _release_values(tmp_path, token, all_components_values(), "every.yaml")
    custom = client.CustomObjectsApi(kube)
    tenant = f"helm-{token}"

    def key(doc: Manifest) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    try:
        refused = _release(
            helm,
            control_plane,
            namespace,
            "install",
            "enclave",
            str(CHART),
            "--values",
            str(defaults),
            "--set",
            "admission.replicas=-1",
        )
        assert refused.returncode != 0
        assert "at '/admission/replicas': minimum: got -1, want 1" in refused.stderr
        assert _release(helm, control_plane, namespace, "status", "enclave").returncode != 0, "nothing installed"

        result = _release(helm, control_plane, namespace, "install", "enclave", str(CHART), "--values", str(defaults))
        assert result.returncode == 0, result.stderr
        first = _installed(helm, control_plane, namespace)
        result = _release(helm, control_plane, namespace, "upgrade", "enclave", str(CHART), "--values", str(every))
        assert result.returncode == 0, result.stderr
        full = _installed(helm, control_plane, namespace)
        _assert_on_server(kube, full, namespace)
        added = [doc for doc in full if key(doc) not in {key(old) for old in first}]
        assert {"enclave-pools", "enclave-replication"} <= {d["metadata"]["name"] for d in added}

        refused = _release(
            helm,
            control_plane,
            namespace,
            "upgrade",
            "enclave",
            str(CHART),
            "--values",
            str(every),
            "--set",
            "config.replicas=3",
        )
        assert refused.returncode != 0
        assert "at '/config/replicas': maximum: got 3, want 2" in refused.stderr
        assert {key(doc) for doc in _installed(helm, control_plane, namespace)} == {key(doc) for doc in full}

        result = _release(helm, control_plane, namespace, "upgrade", "enclave", str(CHART), "--values", str(defaults))
        assert result.returncode == 0, result.stderr
        _assert_on_server(kube, _installed(helm, control_plane, namespace), namespace)
        _assert_gone(kube, added, namespace)

        # Tenant data: objects users create under the CRDs are not the release's and outlive it.
        body = {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "Tenant",
            "metadata": {"name": tenant},
            "spec": {"owners": [{"kind": "User", "name": "helm-alice"}]},
        }
        custom.create_cluster_custom_object("enclave.dev", "v1beta2", "tenants", body)
        result = _release(helm, control_plane, namespace, "uninstall", "enclave", "--wait", "--timeout", "60s")
        assert result.returncode == 0, result.stderr
        _assert_gone(kube, [*first, *full], namespace)
        crds = {crd.metadata.name for crd in client.ApiextensionsV1Api(kube).list_custom_resource_definition().items}
        assert set(enclave_crds) <= crds
        assert custom.get_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant)
        releases = client.CoreV1Api(kube).list_namespaced_secret(namespace, label_selector="owner=helm").items
        assert not releases, "helm keeps no release history after uninstall"
    finally:
        _release(helm, control_plane, namespace, "uninstall", "enclave", "--ignore-not-found")
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant)


# -- kubeconform: the rendered manifests against the pinned release's schemas ----------------------------------


NOT_OURS = ["monitoring.coreos.com/v1/ServiceMonitor"]
"""The prometheus-operator's kind (``metrics.serviceMonitor``): its CRD is not ours and not on the test server."""


@pytest.fixture(scope="module")
def kubeconform_schemas(kube: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """kubeconform's schema directory and Kubernetes version: the test apiserver's /openapi/v2 and our CRDs.

    Made by ``enclave_testing.schemas`` (kubeconform's published schemas come from GitHub and track releases,
    not the apiserver pinned here).
    """
    version = json.loads(kube.call_api("GET", f"{kube.configuration.host}/version").read())["gitVersion"]
    openapi = json.loads(kube.call_api("GET", f"{kube.configuration.host}/openapi/v2").read())
    made = {**schemas.from_openapi_v2(openapi), **schemas.from_crds(schemas.load_crds(CHART / "crds"))}
    root = tmp_path_factory.mktemp("kubeconform")
    schemas.write(made, schemas.layout_dir(root, version))
    return root, version.lstrip("v")


def kubeconform(schema_dir: tuple[Path, str], manifests: Path) -> tuple[int, list[dict[str, Any]]]:
    """Run kubeconform -strict on ``manifests``; exit code and every resource's result."""
    root, version = schema_dir
    command = [str(binaries.ensure("kubeconform")["kubeconform"]), "-strict", "-output", "json", "-verbose"]
    command += ["-schema-location", str(root), "-kubernetes-version", version, "-skip", ",".join(NOT_OURS)]
    result = subprocess.run([*command, str(manifests)], capture_output=True, text=True, timeout=300, check=False)
    assert result.stdout, result.stderr
    return result.returncode, list(json.loads(result.stdout)["resources"])


@pytest.mark.parametrize("every_component", [False, True], ids=["defaults", "every-component"])
def test_rendered_manifests_pass_kubeconform_strict(
    helm: Path, kubeconform_schemas: tuple[Path, str], tmp_path: Path, every_component: bool
) -> None:
    values = [_values_file(tmp_path, all_components_values())] if every_component else []
    rendered = render(helm, "enclave-system", *values)
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered))
    code, results = kubeconform(kubeconform_schemas, manifests)
    failed = [
        f"{r['kind']}/{r['name']}: {r['status']} {r.get('msg', '')}" for r in results if r["status"] != "statusValid"
    ]
    skipped = [r for r in results if r["status"] == "statusSkipped"]
    assert {f"{r['version']}/{r['kind']}" for r in skipped} == (set(NOT_OURS) if every_component else set())
    assert failed == [f"ServiceMonitor/{r['name']}: statusSkipped " for r in skipped], "\n".join(failed)
    assert code == 0
    assert len(results) == len(rendered)
    assert {"Deployment", "Service", "ClusterRole", "ServiceConfiguration"} <= {r["kind"] for r in results}


def test_kubeconform_refuses_what_the_schemas_do_not_allow(
    helm: Path, kubeconform_schemas: tuple[Path, str], tmp_path: Path
) -> None:
    """Not vacuous: a misplaced field, a wrong type and an unknown custom-resource field are each reported."""
    rendered = render(helm, "enclave-system")
    deployment = next(doc for doc in rendered if doc["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    deployment["spec"]["template"]["spec"]["containers"][0]["replicas"] = 2  # belongs to the Deployment's spec
    service = next(doc for doc in rendered if doc["kind"] == "Service")
    service["spec"]["ports"][0]["port"] = "https"  # an integer
    configuration = next(doc for doc in rendered if doc["kind"] == "ServiceConfiguration")
    configuration["spec"]["administratorz"] = []
    manifests = tmp_path / "broken.yaml"
    manifests.write_text(yaml.safe_dump_all([deployment, service, configuration]))
    code, results = kubeconform(kubeconform_schemas, manifests)
    assert code != 0
    messages = {r["kind"]: r.get("msg", "") for r in results}
    assert "replicas" in messages["Deployment"], messages
    assert "port" in messages["Service"], messages
    assert "administratorz" in messages["ServiceConfiguration"], messages


# -- the co-located shape (controllers.colocated: the controllers in one enclave-host Deployment) ------------------


def _colocated(helm: Path, tmp_path: Path, namespace: str = "enclave-system") -> list[Manifest]:
    values = all_components_values()
    values["controllers"] = {"colocated": True, "replicas": 2}
    return render(helm, namespace, _values_file(tmp_path, values, "colocated.yaml"))


def test_colocated_shape_runs_the_controllers_in_one_host_and_admission_apart(helm: Path, tmp_path: Path) -> None:
    manifests = _colocated(helm, tmp_path)
    deployments = by_kind(manifests, "Deployment")
    assert sorted(deployments) == ["enclave-admission", "enclave-controllers"]
    host = container(deployments["enclave-controllers"])
    assert host["command"] == ["python", "-m", "enclave_core.runtime.host"]
    accounts = set(by_kind(manifests, "ServiceAccount"))
    assert accounts == {"enclave-admission", "enclave-controllers"}
    services = by_kind(manifests, "Service")
    ports = {int(port["containerPort"]) for port in host["ports"] if port["name"].startswith("grpc-")}
    for name in CONTROLLERS:  # each keeps its Service, now in front of the host's port for it
        service = services[f"enclave-{name}"]
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == "controllers", name
        grpc = next(port for port in service["spec"]["ports"] if port["name"] == "grpc")
        assert grpc["port"] == 9090, name
        assert grpc["targetPort"] in ports, name
    assert len(ports) == len(CONTROLLERS)
    for kind in ("ClusterRoleBinding", "RoleBinding"):  # the host's account holds every controller's roles
        for binding in by_kind(manifests, kind).values():
            for subject in binding.get("subjects") or []:
                if subject["kind"] == "ServiceAccount":
                    assert subject["name"] in accounts, (kind, binding["metadata"]["name"], subject)
    policies = by_kind(manifests, "NetworkPolicy")
    for name in CONTROLLERS:
        selector = policies[f"enclave-{name}"]["spec"]["podSelector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == "controllers", name
    assert "--tenants:namespace-grant=enclave-replication-read=enclave-controllers" in host["args"]


def test_colocated_arguments_are_accepted_by_the_host_and_each_controller(helm: Path, tmp_path: Path) -> None:
    """The host parses the command line the chart gives it, routes each controller its own flags, and each
    controller's own parser accepts them: its own client certificate, ports apart from its neighbours'."""
    from enclave_core.runtime.host import component_args, parse_args

    host = container(by_kind(_colocated(helm, tmp_path), "Deployment")["enclave-controllers"])
    try:
        parsed = component_args(parse_args(host["args"]))
    except SystemExit as exited:
        pytest.fail(f"enclave-host refuses the chart's arguments ({exited}): {host['args']}")
    assert sorted(parsed) == sorted(CONTROLLERS)
    for name, args in parsed.items():
        assert args.leader_elect, name
        if name != "config":
            assert args.grpc_client_cert == f"/etc/enclave/grpc-client-{name}/tls.crt", name
            assert args.grpc_ca_file == "/etc/enclave/tls/ca.crt", name
    mounts = {mount["mountPath"] for mount in host["volumeMounts"]}
    assert {f"/etc/enclave/grpc-client-{name}" for name in CONTROLLERS if name != "config"} <= mounts


def test_colocated_render_is_accepted_by_the_apiserver(helm: Path, kube: Any, namespace: str, tmp_path: Path) -> None:
    manifests = _colocated(helm, tmp_path, namespace)
    dry_run(kube, _without(manifests, "ServiceConfiguration", "ServiceMonitor"), namespace)

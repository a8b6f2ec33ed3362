"""The chart's lifecycle on a real control plane: a live upgrade from the previous release, then uninstall.

``fixtures/enclave-0.1.0.tgz`` is chart 0.1.0 as packaged (``helm package``) from the commit before v1beta1
was served: v1beta2-only CRDs, no conversion webhook, config without ``--manage-crds``. The test installs it
with the pinned helm (3 and 4, one run each), runs the components as processes (the harness has no kubelet:
the chart's Deployments stay unscheduled and the processes stand in for them), creates tenants and
namespaces, and upgrades to the
chart in this tree while a tenant owner keeps creating namespaces through the admission webhooks. Then the
config process is rolled (stopped, started again as the new chart runs it, with the new chart's RBAC through
its ServiceAccount's token) and must bring the CRDs to this release by itself (Helm skips ``crds/`` on
upgrade): v1beta1 served and converted, the conversion client and CA in place, storage on v1beta2. Nothing
may be lost and no namespace creation may fail. ``helm uninstall`` then keeps the CRDs and the tenants.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing import binaries
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.names import unique
from enclave_testing.paths import repo_root
from enclave_testing.processes import free_port
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

CHART = repo_root() / "charts" / "enclave"
PREVIOUS = repo_root() / "tests" / "integration" / "fixtures" / "enclave-0.1.0.tgz"
SPECS = {spec.name: spec for spec in COMPONENTS}
UPGRADE_ARGS = {"helm": [], "helm4": ["--server-side=false"]}
"""Helm 4 upgrades a release it installed with server-side apply, which refuses this upgrade: the 0.1.0 CRDs
(Helm skips ``crds/`` on upgrade) do not declare fields the 0.2.0 ServiceConfiguration sets, and enclave-config
co-owns labels of the provisioner and deleter ClusterRoles. Client-side apply, Helm 3's way, is the documented
upgrade path (charts/enclave/README.md, release notes)."""
GROUP = "enclave.dev"


def _helm(helm: Path, *args: str, kubeconfig: Path | None = None) -> str:
    command = [str(helm), *args] + ([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=180)
    assert done.returncode == 0, f"helm {' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _token_kubeconfig(control_plane: ControlPlane, kube: Any, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig authenticating as the chart's ServiceAccount ``account`` (a TokenRequest token, as in a pod)."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = client.CoreV1Api(kube).create_namespaced_service_account_token(account, namespace, request).status.token
    cluster = {"server": control_plane.api_url, "certificate-authority": str(control_plane.ca_file)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class NamespaceCreator(threading.Thread):
    """A tenant owner creating namespaces back to back; every failure is kept."""

    def __init__(self, api: client.CoreV1Api, tenant: str) -> None:
        super().__init__(daemon=True)
        self.api, self.tenant = api, tenant
        self.created: list[str] = []
        self.failures: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            name = f"{self.tenant}-{len(self.created) + len(self.failures)}"
            try:
                self.api.create_namespace({"metadata": {"name": name}})
                self.created.append(name)
            except ApiException as err:
                self.failures.append(f"{name}: {err.status} {err.body}")
            self.halt.wait(0.1)


@pytest.mark.parametrize("helm_name", ["helm", "helm4"], ids=["helm3", "helm4"])
def test_live_upgrade_from_the_previous_chart_then_uninstall(
    kube: Any, control_plane: ControlPlane, enclave_crds: list[str], tmp_path: Path, helm_name: str
) -> None:
    """Helm 3 and Helm 4 (both pinned under hack/controlplane and built by enclave_testing.binaries): the same
    release lifecycle, since users upgrade with whichever their tooling ships."""
    helm_binary = binaries.ensure(helm_name)[helm_name]

    def helm(*args: str) -> str:
        return _helm(helm_binary, *args, kubeconfig=control_plane.kubeconfig)

    namespace, config_name = unique("enclave-upgrade"), unique("upgrade")
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    extensions = client.ApiextensionsV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    with tarfile.open(PREVIOUS) as archive:
        archive.extractall(tmp_path / "previous", filter="data")
    # The cluster as release 0.1.0 left it: its CRDs (v1beta2 only).
    install_crds(kube, tmp_path / "previous" / "enclave" / "crds")
    assert [v.name for v in extensions.read_custom_resource_definition("tenants.enclave.dev").spec.versions] == [
        "v1beta2"
    ]

    running: dict[str, RunningComponent] = {}

    def start(name: str, endpoints: dict[str, str], **kwargs: Any) -> RunningComponent:
        kwargs.setdefault("kubeconfig", control_plane.kubeconfig)
        component = start_component(
            SPECS[name],
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            identity=unique(name),
            **kwargs,
        )
        running[name] = component
        return component

    tenant, owner = unique("upg"), unique("owner")
    creator: NamespaceCreator | None = None
    release = "enclave"
    try:
        # config starts after the install (else it would create the ServiceConfiguration and its roles before
        # Helm does); the others subscribe to the port it will listen on and retry until it does.
        port = free_port()
        target = f"127.0.0.1:{port}"
        tenants = start("tenants", {"config": target}, wait_ready=False)
        admission = start("admission", {"config": target, "tenants": tenants.grpc_target}, wait_ready=False)
        values = tmp_path / "values.yaml"
        values.write_text(
            yaml.safe_dump(
                {
                    "serviceConfiguration": {
                        "name": config_name,
                        "admission": {"client": {"url": admission.webhook_url}},
                    }
                }
            )
        )
        helm("install", release, str(PREVIOUS), "--namespace", namespace, "--values", str(values))
        config = start(
            "config", {}, grpc_port=port, args=[f"--service-configuration-name={config_name}", "--resync=5s"]
        )
        admission.wait_ready(90)
        registrations = client.AdmissionregistrationV1Api(kube)
        poll(lambda: registrations.read_validating_webhook_configuration("enclave-validating-webhook-configuration"))

        spec = {
            "owners": [{"kind": "User", "name": owner}],
            "namespaceOptions": {"additionalMetadata": {"labels": {"tier": "gold"}}},
        }
        body = {"apiVersion": f"{GROUP}/v1beta2", "kind": "Tenant", "metadata": {"name": tenant}, "spec": spec}
        before = custom.create_cluster_custom_object(GROUP, "v1beta2", "tenants", body)
        as_owner = client.CoreV1Api(control_plane.impersonate(owner, ["enclave.dev"]))

        def first_namespace() -> bool:
            try:
                as_owner.create_namespace({"metadata": {"name": f"{tenant}-first"}})
            except ApiException as err:
                return bool(err.status == 409)
            return True

        poll(first_namespace, what="the owner's first namespace (admission knows the tenant)")
        creator = NamespaceCreator(as_owner, tenant)
        creator.start()
        poll(lambda: len(creator.created) >= 3, what="namespaces created before the upgrade")

        # -- the upgrade -------------------------------------------------------------------------------------
        # 0.2.0 fences its pods with NetworkPolicies; the test kube-apiserver advertises no address to read.
        current = (
            "--namespace",
            namespace,
            "--values",
            str(values),
            "--set",
            "networkPolicy.apiServerCIDRs={127.0.0.1/32}",
        )
        helm("upgrade", release, str(CHART), *current, *UPGRADE_ARGS[helm_name])
        listed = helm("list", "--namespace", namespace, "--output", "yaml")
        assert yaml.safe_load(listed)[0]["chart"] == "enclave-0.2.0"
        # The rollout of the config Deployment: the new pod runs as the chart says, with the chart's RBAC.
        kube_version = binaries.pinned_version(binaries.BINARIES["kube-apiserver"]).lstrip("v")
        rendered = helm("template", release, str(CHART), *current, "--kube-version", kube_version)
        deployment = next(
            doc
            for doc in yaml.safe_load_all(rendered)
            if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == "enclave-config"
        )
        chart_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--manage-crds" in chart_args
        config.process.stop()
        token = _token_kubeconfig(control_plane, kube, namespace, "enclave-config", tmp_path / "config.kubeconfig")
        start(
            "config",
            {},
            kubeconfig=token,
            grpc_port=port,
            args=[f"--service-configuration-name={config_name}", "--resync=5s", "--manage-crds"],
        )

        def upgraded() -> bool:
            crd = extensions.read_custom_resource_definition("tenants.enclave.dev")
            webhook = crd.spec.conversion.webhook
            return bool(
                [v.name for v in crd.spec.versions] == ["v1beta1", "v1beta2"]
                and webhook is not None
                and webhook.client_config.url == f"{admission.webhook_url}/convert"
                and webhook.client_config.ca_bundle
            )

        poll(upgraded, timeout=90, what="enclave-config applies this release's CRDs with the conversion client")
        for name in enclave_crd_names():
            crd = extensions.read_custom_resource_definition(name)
            assert [v.name for v in crd.spec.versions] == ["v1beta1", "v1beta2"], name
            assert crd.status.stored_versions == ["v1beta2"], name
        # Nothing lost: the tenant as it was, now also readable as v1beta1 through the conversion webhook.
        after = custom.get_cluster_custom_object(GROUP, "v1beta2", "tenants", tenant)
        assert after["spec"] == before["spec"]
        old = custom.get_cluster_custom_object(GROUP, "v1beta1", "tenants", tenant)
        assert old["spec"]["namespacesMetadata"] == {"additionalLabels": {"tier": "gold"}}
        secret = core.read_namespaced_secret("enclave-tls", namespace)
        ca = extensions.read_custom_resource_definition("tenants.enclave.dev").spec.conversion.webhook
        assert ca.client_config.ca_bundle == secret.data["ca.crt"]
        assert base64.b64decode(ca.client_config.ca_bundle).startswith(b"-----BEGIN CERTIFICATE-----")
        count = len(creator.created)
        poll(lambda: len(creator.created) >= count + 3, what="namespaces created after the upgrade")
        creator.halt.set()
        creator.join(10)
        assert creator.failures == [], "admission must stay up through the upgrade"
        labels = core.read_namespace(f"{tenant}-first").metadata.labels or {}
        assert labels.get("enclave.dev/tenant") == tenant

        # -- uninstall keeps CRDs and tenant data --------------------------------------------------------------
        helm("uninstall", release, "--namespace", namespace)
        for name in enclave_crd_names():
            extensions.read_custom_resource_definition(name)
        assert custom.get_cluster_custom_object(GROUP, "v1beta2", "tenants", tenant)["spec"] == before["spec"]
        assert core.read_namespace(f"{tenant}-first").metadata.name == f"{tenant}-first"
    finally:
        if creator is not None:
            creator.halt.set()
        for component in reversed(list(running.values())):
            component.process.stop()
        with contextlib.suppress(Exception):
            helm("uninstall", release, "--namespace", namespace)
        names = [f"{tenant}-first", *(creator.created if creator else [])]
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, "v1beta2", "tenants", tenant)
        # The webhook configurations enclave-config generated (Fail hooks at the stopped admission server that
        # would refuse every later module's tenant users) and its RBAC, now that it cannot write them back.
        remove_configuration(kube, config_name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)
        install_crds(kube)  # this release's CRDs for the tests that follow


def enclave_crd_names() -> list[str]:
    """Every Enclave CRD name (from the chart this tree ships)."""
    return sorted(path.name.removesuffix(".yaml") for path in (CHART / "crds").glob("*.yaml"))

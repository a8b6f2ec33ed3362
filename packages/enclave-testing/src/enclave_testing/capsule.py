"""Capsule, the reference implementation, running on a local control plane as its Helm chart would install it.

The side-by-side benchmark (``tests/sidebyside``, ``tox -e capsule``) measures Enclave against Capsule on the
same machine, so Capsule must run the way its users run it, not a version of it tuned down or up:

- the manager is built from the Go module pinned in ``hack/capsule/go.mod`` (``enclave_testing.binaries``,
  cached and locked like the control plane);
- its CRDs are the chart's ``crds/`` of that same module, with the chart's conversion patches applied;
- everything else the chart installs that a local process can use (the ``CapsuleConfiguration`` named
  ``default``, its RBAC) comes from ``helm template`` of that chart with its default values, except the two
  values a chart user sets for an out-of-cluster manager: ``webhooks.service.url`` and ``caBundle``. In v0.14
  the chart's webhooks live in ``CapsuleConfiguration.spec.admission`` and the manager writes the webhook
  configurations itself, so they carry the chart's paths, rules, failure policies and selectors unchanged;
- the manager gets the chart's container arguments (``--workers=1``, ``--client-connection-qps=20``,
  ``--client-connection-burst=30``, leader election on ...), read from the rendered Deployment, plus only what a
  second process on a shared host needs: its own webhook and metrics ports and a serving certificate from a
  self-signed CA (the chart would take it from cert-manager).

What is left out: the Deployment, Services, cert-manager objects and the CRD lifecycle Jobs (a local process
replaces them). The manager signs in as the chart's ServiceAccount (``system:serviceaccount:capsule-system:
capsule``, with the groups a token of it carries; a client certificate of that name, :data:`SERVICE_ACCOUNT_USER`),
which the chart binds to ``cluster-admin``: Capsule's own webhooks let only that account (or its configured
administrators) write what its controllers manage. With the plane's admin kubeconfig instead, its
``managed.validating`` hook refused every namespace its tenant controller reconciled, and the failing
reconciles, retried through the same 20 QPS client the webhooks read with, were part of what earlier runs
measured.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from enclave_core.pki import CertificateAuthority
from enclave_testing import binaries
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.paths import repo_root
from enclave_testing.processes import ManagedProcess, free_port, wait_until
from enclave_testing.waiting import poll

MODULE = "github.com/projectcapsule/capsule"
NAMESPACE = "capsule-system"
RELEASE = "capsule"
GROUP, VERSION = "capsule.clastix.io", "v1beta2"
USERS_GROUP = "projectcapsule.dev"
"""The chart's default ``manager.options.users``: who Capsule treats as a tenant user."""
SERVICE_ACCOUNT_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
SERVICE_ACCOUNT_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"]
"""Who the manager is in a cluster (the Deployment's ServiceAccount): RBAC binds it, Capsule's webhooks trust it."""
HEALTH_PORT = 10080
"""Capsule's health probe address is fixed (``:10080`` in cmd/controller): one manager per host at a time."""

# What a local process cannot use, or what it replaces (the Deployment is read for its arguments only).
_SKIPPED_KINDS = {"Deployment", "Service", "Certificate", "Issuer", "Job", "ConfigMap"}


class CapsuleUnavailableError(RuntimeError):
    """A prerequisite of running Capsule is missing (the Go toolchain, the module): the message says which."""


def module_dir() -> Path:
    """The pinned Capsule module's source, downloaded through the Go module proxy if needed."""
    if shutil.which("go") is None:
        raise CapsuleUnavailableError(
            "the Go toolchain is needed to build Capsule from its module; install Go 1.26 or newer"
        )
    spec = binaries.BINARIES["capsule"]
    version = binaries.pinned_version(spec)
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        cwd=repo_root() / "hack" / "capsule",
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise CapsuleUnavailableError(f"cannot download {MODULE}@{version} through the Go module proxy:\n{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def version() -> str:
    """The pinned Capsule release (``hack/capsule/go.mod``)."""
    return binaries.pinned_version(binaries.BINARIES["capsule"])


def render_chart(url: str, ca_bundle: bytes, source: Path | None = None) -> list[dict[str, Any]]:
    """``helm template`` of the module's chart with default values and a URL webhook client.

    The chart names an optional subchart (capsule-proxy, off by default) that helm insists on finding even
    when disabled; a copy of the chart without that dependency entry renders everything else unchanged.
    """
    chart_source = (source or module_dir()) / "charts" / "capsule"
    helm = binaries.ensure("helm")["helm"]
    with tempfile.TemporaryDirectory(prefix="capsule-chart-") as tmp:
        chart = Path(tmp) / "capsule"
        shutil.copytree(chart_source, chart)
        for path in chart.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        meta.pop("dependencies", None)
        (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
        (chart / "Chart.lock").unlink(missing_ok=True)
        out = subprocess.run(
            [
                str(helm),
                "template",
                RELEASE,
                str(chart),
                f"--namespace={NAMESPACE}",
                f"--set=webhooks.service.url={url}",
                f"--set=webhooks.service.caBundle={base64.b64encode(ca_bundle).decode()}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise RuntimeError(f"helm template of Capsule's chart failed:\n{out.stderr}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def chart_args(rendered: list[dict[str, Any]]) -> list[str]:
    """The manager container's arguments in the rendered Deployment: the chart's defaults, verbatim."""
    for doc in rendered:
        if doc.get("kind") == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container["name"] == "manager":
                    return [str(arg) for arg in container.get("args", [])]
    raise RuntimeError("Capsule's chart rendered no manager Deployment")


def patched_crds(source: Path, url: str, ca_bundle: bytes, into: Path) -> Path:
    """The chart's CRDs with its ``*.patch`` files merged in (the conversion webhook, here at ``url``/convert)."""
    crds = source / "charts" / "capsule" / "crds"
    into.mkdir(parents=True, exist_ok=True)
    for path in sorted(crds.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        patch = path.with_suffix(".patch")
        if patch.exists():
            doc["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"{url}/convert", "caBundle": base64.b64encode(ca_bundle).decode()},
                    "conversionReviewVersions": ["v1beta1", "v1beta2"],
                },
            }
        (into / path.name).write_text(yaml.safe_dump(doc))
    return into


@dataclass
class Capsule:
    """A running Capsule manager on ``plane`` and what was installed for it."""

    plane: ControlPlane
    process: ManagedProcess | None = None
    webhook_port: int = 0
    metrics_port: int = 0
    args: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.process is not None
        assert self.process.popen is not None
        return int(self.process.popen.pid)

    def start(self, timeout: float = 180.0) -> Capsule:
        binary = binaries.ensure("capsule")["capsule"]
        source = module_dir()
        kube = self.plane.admin_client()
        self.webhook_port, self.metrics_port = free_port(), free_port()
        url = f"https://127.0.0.1:{self.webhook_port}"
        certs = self.plane.workdir / "capsule"
        ca = CertificateAuthority.generate("capsule-webhook-selfsigned")
        serving = ca.issue("capsule-webhook-service", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        (certs / "tls").mkdir(parents=True, exist_ok=True)
        (certs / "tls" / "tls.crt").write_bytes(serving.cert_pem)
        (certs / "tls" / "tls.key").write_bytes(serving.key_pem)

        install_crds(kube, patched_crds(source, url, ca.pair.cert_pem, certs / "crds"))
        rendered = render_chart(url, ca.pair.cert_pem, source)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(kube).create_namespace({"metadata": {"name": NAMESPACE}})
        for doc in rendered:
            if doc["kind"] in _SKIPPED_KINDS or "helm.sh/hook" in (doc["metadata"].get("annotations") or {}):
                continue
            _apply(kube, doc)

        args = [a for a in chart_args(rendered) if not a.startswith("--webhook-port=")]
        self.args = [
            *args,
            f"--webhook-port={self.webhook_port}",
            f"--webhook-cert-path={certs / 'tls'}",
            f"--metrics-addr=127.0.0.1:{self.metrics_port}",
        ]
        env = {
            **os.environ,
            "NAMESPACE": NAMESPACE,
            "SERVICE_ACCOUNT": RELEASE,
            "KUBECONFIG": str(self.plane.identity_kubeconfig(SERVICE_ACCOUNT_USER, SERVICE_ACCOUNT_GROUPS)),
        }
        self.process = ManagedProcess("capsule", [str(binary), *self.args], self.plane.log_dir / "capsule.log", env=env)
        self.process.start()
        try:
            wait_until(
                lambda: _get(f"http://127.0.0.1:{HEALTH_PORT}/readyz") == 200,
                timeout=timeout,
                what="Capsule's /readyz",
                alive=self.process,
            )
            registrations = client.AdmissionregistrationV1Api(kube)
            poll(
                lambda: registrations.read_validating_webhook_configuration("capsule-dynamic-webhook"),
                timeout=timeout,
                what="Capsule's validating webhook configuration",
            )
            wait_until(
                lambda: _serves(url, ca.pair.cert_pem),
                timeout=timeout,
                what="Capsule's webhook server",
                alive=self.process,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def tenant(self, name: str, owners: list[dict[str, str]], **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"owners": owners, **spec},
        }
        client.CustomObjectsApi(self.plane.admin_client()).create_cluster_custom_object(GROUP, VERSION, "tenants", body)

    def stop(self) -> None:
        """Stop the manager, then remove the webhook configurations it wrote (they would point at nothing)."""
        if self.process is not None:
            self.process.stop()
        kube = self.plane.admin_client()
        registrations = client.AdmissionregistrationV1Api(kube)
        for item in registrations.list_validating_webhook_configuration().items:
            if "capsule" in item.metadata.name:
                with contextlib.suppress(ApiException):
                    registrations.delete_validating_webhook_configuration(item.metadata.name)
        for item in registrations.list_mutating_webhook_configuration().items:
            if "capsule" in item.metadata.name:
                with contextlib.suppress(ApiException):
                    registrations.delete_mutating_webhook_configuration(item.metadata.name)


def _apply(kube: Any, doc: dict[str, Any]) -> None:
    """Create one rendered object (the CapsuleConfiguration as a custom object, built-ins by ``create_from_dict``)."""
    group, _, ver = doc["apiVersion"].rpartition("/")
    try:
        if group == GROUP:  # the CapsuleConfiguration: cluster-scoped, though the chart renders a namespace on it
            doc["metadata"].pop("namespace", None)
            plural = doc["kind"].lower() + "s"
            client.CustomObjectsApi(kube).create_cluster_custom_object(group, ver, plural, doc)
        else:
            utils.create_from_dict(kube, doc, namespace=doc["metadata"].get("namespace") or NAMESPACE)
    except ApiException as err:
        if err.status != 409:
            raise
    except utils.FailToCreateError as err:
        if any(cause.status != 409 for cause in err.api_exceptions):
            raise


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:
        return int(response.status)


def _serves(url: str, ca_pem: bytes) -> bool:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    request = urllib.request.Request(f"{url}/readyz")
    try:
        with urllib.request.urlopen(request, context=context, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer over verified TLS: the server is up

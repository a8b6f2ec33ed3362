"""Harness: the admission server on the real control plane, with config as its own process and a TenantService.

The TenantService is served from the test process (a SnapshotHub behind a real gRPC SnapshotServer) with a
TenancySnapshot built from real Tenant objects: that is the production boundary between admission and the
tenants controller, with the test playing the controller so that each test decides exactly what admission
knows (owners, quotas, cordons, namespaces). The uids are the real Tenants' uids, so the owner references
admission writes keep the garbage collector happy.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_core.api.meta import Entity
from enclave_core.snapshots.tenancy import TENANCY_KIND, TENANT_LABEL, TenancySnapshot, TenantView
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
CONFIG = next(spec for spec in COMPONENTS if spec.name == "config")
ADMISSION = next(spec for spec in COMPONENTS if spec.name == "admission")
ADMINS = "enclave-admins"


class TenancyPublisher:
    """The test's TenantService (``tenancy_publisher.py``) as a child process, fed snapshots over stdin."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.revision = 0
        self.target = ""

    def start(self) -> str:
        script = Path(__file__).with_name("tenancy_publisher.py")
        self.process = subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        port = self.process.stdout.readline().split()[1]
        self.target = f"127.0.0.1:{port}"
        return self.target

    def publish(self, snapshot: TenancySnapshot) -> int:
        assert self.process is not None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(snapshot.model_dump_json() + "\n")
        self.process.stdin.flush()
        self.revision = int(self.process.stdout.readline().split()[1])
        return self.revision

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(Exception):
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(5)
            if self.process.poll() is None:
                self.process.kill()


def metric_value(probe_url: str, name: str, labels: str = "") -> float | None:
    with urllib.request.urlopen(f"{probe_url}/metrics", timeout=2) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + (labels and "{") + labels + ("}" if labels else "")):
                return float(line.rsplit(" ", 1)[1])
    return None


@dataclass
class Enclave:
    """One running Enclave (config + admission + the test TenantService) and helpers to drive it."""

    kube: Any
    impersonate: Callable[..., Any]
    namespace: str
    config_name: str
    config: RunningComponent
    admission: RunningComponent
    publisher: TenancyPublisher
    views: dict[str, TenantView] = field(default_factory=dict)
    created_tenants: list[str] = field(default_factory=list)
    client_cert: tuple[Path, Path] | None = None
    """kube-apiserver's webhook client certificate, which admission requires (None: it requires none)."""
    admission_args: list[str] = field(default_factory=list)

    # -- tenants (the test plays the tenants controller) -----------------------------------------------------

    def tenant(
        self, name: str, *, owners: list[Entity], promoted: list[Entity] | None = None, **fields: Any
    ) -> TenantView:
        """Create Tenant ``name`` and publish it with ``owners`` (and the TenantView ``fields``)."""
        custom = client.CustomObjectsApi(self.kube)
        spec: dict[str, Any] = {"owners": [o.to_k8s() for o in owners]}
        if fields.get("prevent_deletion"):
            spec["preventDeletion"] = True
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}
        created = custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        self.created_tenants.append(name)
        view = TenantView(
            name=name,
            uid=created["metadata"]["uid"],
            owners=[*owners, *(promoted or [])],
            promoted=promoted or [],
            **fields,
        )
        self.views[name] = view
        self.sync()
        return view

    def update(self, name: str, **fields: Any) -> None:
        self.views[name] = self.views[name].model_copy(update=fields)
        self.sync()

    def sync(self) -> None:
        """Publish every tenant with the namespaces that carry its label now, and wait until admission has it."""
        core = client.CoreV1Api(self.kube)
        views = []
        for view in self.views.values():
            listed = core.list_namespace(label_selector=f"{TENANT_LABEL}={view.name}").items
            views.append(view.model_copy(update={"namespaces": sorted(ns.metadata.name for ns in listed)}))
        revision = self.publisher.publish(TenancySnapshot(tenants=views))

        def arrived() -> bool:
            value = metric_value(
                self.admission.probe_url, "enclave_admission_snapshot_revision", f'kind="{TENANCY_KIND}"'
            )
            return value is not None and value >= revision

        poll(arrived, timeout=10, what="tenancy snapshot at admission")

    # -- acting as users ---------------------------------------------------------------------------------------

    def core(self, user: str, groups: list[str] | None = None) -> client.CoreV1Api:
        return client.CoreV1Api(self.impersonate(user, groups or []))

    def owner(self, user: str) -> client.CoreV1Api:
        """A tenant user (member of the default group ``enclave.dev``)."""
        return self.core(user, ["enclave.dev"])

    def admin(self, user: str = "root-admin") -> client.CoreV1Api:
        return self.core(user, [ADMINS])

    def labels(self, name: str) -> dict[str, str]:
        return dict(client.CoreV1Api(self.kube).read_namespace(name).metadata.labels or {})

    def owner_references(self, name: str) -> list[tuple[str, str, str]]:
        refs = client.CoreV1Api(self.kube).read_namespace(name).metadata.owner_references or []
        return [(ref.kind, ref.name, ref.uid) for ref in refs]

    def ca_pem(self) -> bytes:
        secret = client.CoreV1Api(self.kube).read_namespaced_secret("enclave-tls", self.namespace)
        return base64.b64decode(secret.data["ca.crt"])

    def ssl_context(self, *, client_certificate: bool = True) -> ssl.SSLContext:
        """Verifies admission's serving certificate and, unless told otherwise, presents kube-apiserver's webhook
        client certificate: a direct call is then what the apiserver's own call would be."""
        context = ssl.create_default_context(cadata=self.ca_pem().decode())
        if client_certificate and self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context

    def admission_replica(self, control_plane: ControlPlane, env: dict[str, str] | None = None) -> RunningComponent:
        """Another admission replica subscribed to the same snapshot services, ready when it returns; the
        caller stops it. Replicas share nothing but their subscriptions, as in a Deployment."""
        return start_component(
            ADMISSION,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=self.namespace,
            endpoints={"config": self.config.grpc_target, "tenants": self.publisher.target},
            identity=unique("admission"),
            env=env,
            args=self.admission_args,
        )


def refused(call: Callable[[], Any], *fragments: str) -> str:
    """Run ``call``, expect an admission denial, return its message (checked for ``fragments``)."""
    with pytest.raises(ApiException) as caught:
        call()
    body = caught.value.body or ""
    assert caught.value.status in (400, 403, 422), body
    assert "denied the request" in body, body
    for fragment in fragments:
        assert fragment in body, body
    return str(body)


@contextlib.contextmanager
def namespace_rights(kube: Any, name: str, subjects: list[dict[str, str]]) -> Iterator[None]:
    """Give ``subjects`` every right on namespaces and their subresources (the webhook alone must stop them)
    for the duration of the block: the grant is cluster-wide and must not leak into later test modules."""
    rbac = client.RbacAuthorizationV1Api(kube)
    role = {
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["namespaces", "namespaces/status", "namespaces/finalize", "serviceaccounts"],
                "verbs": ["*"],
            },
            {"apiGroups": [GROUP], "resources": ["tenants"], "verbs": ["get", "list", "delete"]},
        ],
    }
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    }
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role(role)
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role_binding(binding)
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(name)


def start_enclave(
    control_plane: ControlPlane,
    kube: Any,
    impersonate: Callable[..., Any],
    *,
    config_args: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    admission_filter: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    client_auth: bool = True,
) -> Enclave:
    """Config and admission processes in a namespace of their own, owning ServiceConfiguration ``adm-<hex>``
    with Enclave's default webhooks (renamed after it) pointing at the admission server. With ``client_auth``
    admission accepts only kube-apiserver's webhook client certificate, as in production."""
    namespace = unique("enclave-adm")
    config_name = unique("adm")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    publisher = TenancyPublisher()
    target = publisher.start()
    publisher.publish(TenancySnapshot())
    config = start_component(
        CONFIG,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=namespace,
        endpoints={},
        args=[f"--service-configuration-name={config_name}", "--resync=5s", *(config_args or [])],
        identity=unique("config"),
    )
    admission_args = control_plane.webhook_client_args() if client_auth else []
    admission = start_component(
        ADMISSION,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=namespace,
        endpoints={"config": config.grpc_target, "tenants": target},
        identity=unique("admission"),
        wait_ready=False,
        args=admission_args,
    )
    admission_spec = webhooks(url_client(admission.webhook_url), namespace=namespace)
    assert admission_spec.mutating is not None
    assert admission_spec.validating is not None
    admission_spec.mutating.name = f"{config_name}-mutating"
    admission_spec.validating.name = f"{config_name}-validating"
    rendered = admission_spec.to_k8s()
    if admission_filter is not None:
        rendered = admission_filter(rendered)
    full_spec = {
        "enableTLSReconciler": True,
        "administrators": [{"kind": "Group", "name": ADMINS}],
        "events": {"namespace": namespace},
        "admission": rendered,
        **(spec or {}),
    }
    custom = client.CustomObjectsApi(kube)
    poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name), what="SC")
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": full_spec})
    admission.wait_ready(60)
    registrations = client.AdmissionregistrationV1Api(kube)
    poll(lambda: registrations.read_validating_webhook_configuration(f"{config_name}-validating"), what="webhooks")
    return Enclave(
        kube,
        impersonate,
        namespace,
        config_name,
        config,
        admission,
        publisher,
        client_cert=control_plane.webhook_client_cert if client_auth else None,
        admission_args=admission_args,
    )


def stop_enclave(enclave: Enclave) -> None:
    registrations = client.AdmissionregistrationV1Api(enclave.kube)
    custom = client.CustomObjectsApi(enclave.kube)
    enclave.admission.process.stop()
    enclave.config.process.stop()
    with contextlib.suppress(ApiException):
        registrations.delete_validating_webhook_configuration(f"{enclave.config_name}-validating")
    with contextlib.suppress(ApiException):
        registrations.delete_mutating_webhook_configuration(f"{enclave.config_name}-mutating")
    with contextlib.suppress(ApiException):
        custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", enclave.config_name)
    for name in enclave.created_tenants:
        with contextlib.suppress(ApiException):
            custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", name, {"spec": {"preventDeletion": False}})
            custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", name)
    with contextlib.suppress(ApiException):
        client.CoreV1Api(enclave.kube).delete_namespace(enclave.namespace)
    enclave.publisher.stop()

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
from enclave_core.api.names import TENANT_LABEL
from enclave_core.snapshots.rules import RULES_KIND, RulesSnapshot
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenancySnapshot, TenantView
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
CONFIG = next(spec for spec in COMPONENTS if spec.name == "config")
TENANTS = next(spec for spec in COMPONENTS if spec.name == "tenants")
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

    def publish_rules(self, snapshot: RulesSnapshot) -> int:
        """Publish a Rules snapshot (the tests play the tenants controller's compilation too)."""
        assert self.process is not None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("Rules " + snapshot.payload().decode() + "\n")
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
    publisher: TenancyPublisher | None
    views: dict[str, TenantView] = field(default_factory=dict)
    created_tenants: list[str] = field(default_factory=list)
    statuses: dict[str, list[str]] = field(default_factory=dict)
    """The namespaces last written to each tenant's status by :meth:`sync`."""
    client_cert: tuple[Path, Path] | None = None
    """kube-apiserver's webhook client certificate, which admission requires (None: it requires none)."""
    admission_args: list[str] = field(default_factory=list)
    tenants: RunningComponent | None = None
    """The real enclave-tenants process when the harness runs one instead of the test's TenantService: then
    :meth:`tenant` creates Tenants and waits for admission to know them, and :meth:`sync` waits for the
    controller to see the namespaces, instead of publishing snapshots."""

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
        if self.tenants is not None:
            if fields.keys() - {"prevent_deletion"} or promoted:
                raise ValueError("with the real tenants controller, a tenant's view comes from its spec: owners only")
            view = TenantView(name=name, uid=created["metadata"]["uid"], owners=owners)
            self.views[name] = view
            self._known_to_admission(view)
            return view
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

    def rules(self, snapshot: RulesSnapshot) -> None:
        """Publish ``snapshot`` as the Rules and wait until admission has it."""
        assert self.publisher is not None
        revision = self.publisher.publish_rules(snapshot)

        def arrived() -> bool:
            value = metric_value(
                self.admission.probe_url, "enclave_admission_snapshot_revision", f'kind="{RULES_KIND}"'
            )
            return value is not None and value >= revision

        poll(arrived, timeout=10, what="rules snapshot at admission")

    def update(self, name: str, **fields: Any) -> None:
        if self.tenants is not None:
            raise ValueError("with the real tenants controller, change the Tenant's spec instead")
        self.views[name] = self.views[name].model_copy(update=fields)
        self.sync()

    def _known_to_admission(self, view: TenantView) -> None:
        """Admission's snapshot has the tenant and its owner: a dry-run creation by the owner lands in it."""
        owner = next(entity.name for entity in view.owners if entity.kind == "User")
        api = self.owner(owner)

        def assigned() -> bool:
            try:
                probe = api.create_namespace({"metadata": {"name": f"{view.name}-probe"}}, dry_run="All")
            except ApiException as err:
                if err.status == 403 and "denied the request" in str(err.body):
                    return False  # no tenant yet
                raise
            return (probe.metadata.labels or {}).get(TENANT_LABEL) == view.name

        poll(assigned, timeout=20, what=f"tenant {view.name} in admission's snapshot")

    def sync(self) -> None:
        """Publish every tenant with the namespaces that carry its label now, and wait until admission has it."""
        if self.tenants is not None:
            self._controller_sees_namespaces()
            return
        assert self.publisher is not None
        core = client.CoreV1Api(self.kube)
        custom = client.CustomObjectsApi(self.kube)
        # One list for every tenant (a module creates dozens; a list and a write per tenant per sync made each
        # test's setup slower than the last), and a status write only where the namespaces changed.
        labelled: dict[str, list[str]] = {}
        for ns in core.list_namespace(label_selector=TENANT_LABEL).items:
            labelled.setdefault(ns.metadata.labels[TENANT_LABEL], []).append(ns.metadata.name)
        views = []
        for view in self.views.values():
            listed = sorted(labelled.get(view.name, []))
            views.append(view.model_copy(update={"namespaces": listed}))
            if self.statuses.get(view.name) != listed:
                # what the controller also writes: enclave-config binds promoted accounts of the namespaces it lists
                status = {"status": {"namespaces": listed, "size": len(listed)}}
                custom.patch_cluster_custom_object_status(GROUP, VERSION, "tenants", view.name, status)
                self.statuses[view.name] = listed
        revision = self.publisher.publish(TenancySnapshot(tenants=views))

        def arrived() -> bool:
            value = metric_value(
                self.admission.probe_url, "enclave_admission_snapshot_revision", f'kind="{TENANCY_KIND}"'
            )
            return value is not None and value >= revision

        poll(arrived, timeout=10, what="tenancy snapshot at admission")

    def _controller_sees_namespaces(self) -> None:
        """The real controller lists every labelled namespace in its tenants' status (it publishes the snapshot
        at the same moment it plans that write)."""
        core = client.CoreV1Api(self.kube)
        custom = client.CustomObjectsApi(self.kube)
        for view in self.views.values():
            listed = sorted(
                ns.metadata.name for ns in core.list_namespace(label_selector=f"{TENANT_LABEL}={view.name}").items
            )

            def shown(name: str = view.name, expected: list[str] = listed) -> bool:
                status = custom.get_cluster_custom_object(GROUP, VERSION, "tenants", name).get("status") or {}
                return sorted(status.get("namespaces") or []) == expected

            poll(shown, timeout=30, what=f"tenant {view.name}'s namespaces in the controller's status")

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
            endpoints={"config": self.config.grpc_target, "tenants": self._tenants_target()},
            identity=unique("admission"),
            env=env,
            args=self.admission_args,
        )

    def _tenants_target(self) -> str:
        if self.tenants is not None:
            return self.tenants.grpc_target
        assert self.publisher is not None
        return self.publisher.target


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
    real_tenants: bool = False,
) -> Enclave:
    """Config and admission processes in a namespace of their own, owning ServiceConfiguration ``adm-<hex>``
    with Enclave's default webhooks (renamed after it) pointing at the admission server. With ``client_auth``
    admission accepts only kube-apiserver's webhook client certificate, as in production."""
    namespace = unique("enclave-adm")
    config_name = unique("adm")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    publisher: TenancyPublisher | None = None
    config = start_component(
        CONFIG,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=namespace,
        endpoints={},
        args=[f"--service-configuration-name={config_name}", "--resync=5s", *(config_args or [])],
        identity=unique("config"),
    )
    tenants: RunningComponent | None = None
    if real_tenants:
        tenants = start_component(
            TENANTS,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={"config": config.grpc_target},
            identity=unique("tenants"),
            wait_ready=False,
        )
        target = tenants.grpc_target
    else:
        publisher = TenancyPublisher()
        target = publisher.start()
        publisher.publish(TenancySnapshot())
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
        tenants=tenants,
    )


def stop_enclave(enclave: Enclave) -> None:
    registrations = client.AdmissionregistrationV1Api(enclave.kube)
    custom = client.CustomObjectsApi(enclave.kube)
    enclave.admission.process.stop()
    if enclave.tenants is not None:
        enclave.tenants.process.stop()
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
    if enclave.publisher is not None:
        enclave.publisher.stop()

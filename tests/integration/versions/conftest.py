"""A full stack for the version tests: enclave-config managing the CRDs (conversion client, CA, storage
migration), enclave-tenants, and enclave-admission serving the webhooks and ``/convert`` over HTTPS."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_core.api import KINDS, kind_info
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.examples_v1beta1 import example_v1beta1
from enclave_testing.names import unique
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

SPECS = {spec.name: spec for spec in COMPONENTS}
GROUP = "enclave.dev"


@dataclass
class Stack:
    kube: Any
    impersonate: Callable[..., Any]
    namespace: str
    config_name: str
    admission_url: str = ""
    processes: list[RunningComponent] = field(default_factory=list)
    created: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create ``obj`` in the version its apiVersion names; removed when the module ends."""
        info = kind_info(obj["kind"])
        version = obj["apiVersion"].split("/")[1]
        if info.namespaced:
            target = namespace or self.namespace
            out = self.custom.create_namespaced_custom_object(GROUP, version, target, info.plural, obj)
        else:
            target = None
            out = self.custom.create_cluster_custom_object(GROUP, version, info.plural, obj)
        self.created.append((info.plural, obj["metadata"]["name"], target))
        return dict(out)

    def get(self, kind: str, name: str, version: str, namespace: str | None = None) -> dict[str, Any]:
        info = kind_info(kind)
        if info.namespaced:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, version, namespace or self.namespace, info.plural, name)
            )
        return dict(self.custom.get_cluster_custom_object(GROUP, version, info.plural, name))


@pytest.fixture(scope="module")
def stack(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Stack]:
    namespace, config_name = unique("enclave-versions"), unique("versions")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    result = Stack(kube, impersonate, namespace, config_name)

    def start(name: str, endpoints: dict[str, str], **kwargs: Any) -> RunningComponent:
        running = start_component(
            SPECS[name],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            identity=unique(name),
            **kwargs,
        )
        result.processes.append(running)
        return running

    config = start("config", {}, args=[f"--service-configuration-name={config_name}", "--resync=5s", "--manage-crds"])
    endpoints = {"config": config.grpc_target}
    tenants = start("tenants", endpoints)
    endpoints["tenants"] = tenants.grpc_target
    # Client authentication on, as the chart's admission.clientAuthentication and `tox -e up` run it:
    # kube-apiserver's conversion calls carry no client certificate and must still be answered.
    admission = start("admission", endpoints, wait_ready=False, args=control_plane.webhook_client_args())
    result.admission_url = admission.webhook_url
    rendered = webhooks(url_client(admission.webhook_url), namespace=namespace)
    assert rendered.mutating is not None
    assert rendered.validating is not None
    rendered.mutating.name = f"{config_name}-mutating"
    rendered.validating.name = f"{config_name}-validating"
    spec = {
        "enableTLSReconciler": True,
        "events": {"namespace": namespace},
        "rbac": {"provisioner": f"{config_name}-prov", "deleter": f"{config_name}-del"},
        "admission": rendered.to_k8s(),
    }
    custom = client.CustomObjectsApi(kube)
    poll(lambda: custom.get_cluster_custom_object(GROUP, "v1beta2", "serviceconfigurations", config_name))
    custom.patch_cluster_custom_object(GROUP, "v1beta2", "serviceconfigurations", config_name, {"spec": spec})
    admission.wait_ready(60)
    registrations = client.AdmissionregistrationV1Api(kube)
    poll(lambda: registrations.read_validating_webhook_configuration(f"{config_name}-validating"))
    extensions = client.ApiextensionsV1Api(kube)

    def converted_by_us() -> bool:
        crd = extensions.read_custom_resource_definition("tenants.enclave.dev")
        webhook = crd.spec.conversion.webhook
        return bool(webhook.client_config.url == f"{admission.webhook_url}/convert" and webhook.client_config.ca_bundle)

    # config first re-applies every CRD whose digest differs, then points each at admission: a dozen writes
    # each way, which a loaded machine stretches past half a minute (a 1.37 full-suite run timed out at 30 s).
    poll(converted_by_us, timeout=180, what="enclave-config points the CRDs' conversion webhook at admission")

    def converting() -> bool:
        """kube-apiserver picks a CRD's new conversion client up from its informer, a moment after the write:
        a dry-run v1beta1 create of every kind goes through /convert once it has."""
        for info in KINDS:
            probe = example_v1beta1(info.kind)
            probe["metadata"]["name"] = unique("probe")
            if info.namespaced:
                custom.create_namespaced_custom_object(GROUP, "v1beta1", namespace, info.plural, probe, dry_run="All")
            else:
                custom.create_cluster_custom_object(GROUP, "v1beta1", info.plural, probe, dry_run="All")
        return True

    poll(converting, timeout=60, what="kube-apiserver converts every kind through admission's /convert")
    try:
        yield result
    finally:
        # Objects first, while /convert still answers (one stored as v1beta1 could not be read without it).
        for plural, name, target in reversed(result.created):
            with contextlib.suppress(ApiException):
                if target:
                    custom.delete_namespaced_custom_object(GROUP, "v1beta2", target, plural, name)
                else:
                    custom.delete_cluster_custom_object(GROUP, "v1beta2", plural, name)
        for running in reversed(result.processes):
            running.process.stop()
        remove_configuration(kube, config_name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)

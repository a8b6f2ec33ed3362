"""Harness: enclave-config, enclave-quotas and several admission replicas as processes, behind one webhook URL.

kube-apiserver reaches the replicas through a round-robin TCP balancer (enclave_testing.balancer), as it
would reach a Deployment through its Service, so concurrent creates really are decided by different replicas
that share nothing but the QuantityLedgers.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_testing.balancer import Balancer
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
SPECS = {spec.name: spec for spec in COMPONENTS}


def QUOTAS_ARGS(config_name: str) -> list[str]:  # noqa: N802 - reads as the constant it stands for
    return [f"--webhook-configuration={config_name}-validating", "--resync=5s"]


def metric(probe_url: str, name: str) -> float | None:
    with urllib.request.urlopen(f"{probe_url}/metrics", timeout=2) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{") or ("{" in name and line.startswith(name)):
                return float(line.rsplit(" ", 1)[1])
    return None


def wide_client(control_plane: ControlPlane, size: int = 128) -> Any:
    """An admin ApiClient whose connection pool lets ``size`` threads call at once."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = size
    return client.ApiClient(configuration)


@dataclass
class QuotaEnclave:
    control_plane: ControlPlane
    kube: Any
    namespace: str
    config_name: str
    config: RunningComponent
    quotas: RunningComponent
    admissions: list[RunningComponent]
    balancer: Balancer
    wide: Any = None
    known: int = 0
    extra: list[RunningComponent] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def create_quota(self, namespace: str | None, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
        """Create a CustomQuota (``namespace``) or GlobalCustomQuota (None) and wait until every admission
        replica enforces it and the hook sees its resources."""
        kind = "CustomQuota" if namespace else "GlobalCustomQuota"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, **metadata}, "spec": spec}
        if namespace:
            created = self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "customquotas", body)
        else:
            created = self.custom.create_cluster_custom_object(GROUP, VERSION, "globalcustomquotas", body)
        self.known += 1
        self.wait_known()
        self.wait_status(namespace, name, lambda status: _ready(status) is not None)
        ledger = self.ledger_name(namespace, name)
        poll(lambda: (self.ledger(ledger).get("status") or {}).get("allocated") is not None, what="ledger initialised")
        return dict(created)

    def restart_quotas(self) -> None:
        """Start enclave-quotas again on the same gRPC port (the admission replicas reconnect to it)."""
        old = self.quotas
        self.quotas = start_component(
            SPECS["quotas"],
            kubeconfig=self.control_plane.kubeconfig,
            log_dir=self.control_plane.log_dir,
            namespace=self.namespace,
            endpoints={"config": self.config.grpc_target},
            args=QUOTAS_ARGS(self.config_name),
            identity=unique("quotas"),
            grpc_port=old.grpc_port,
        )
        self.extra.append(self.quotas)

    def events(self, namespace: str | None, name: str, reason: str) -> list[str]:
        """Messages of the Warning Events ``reason`` about quota ``name``."""
        where = namespace or self.namespace
        listed = client.CoreV1Api(self.kube).list_namespaced_event(where, field_selector=f"involvedObject.name={name}")
        return [str(e.message) for e in listed.items if e.reason == reason]

    def delete_quota(self, namespace: str | None, name: str) -> None:
        if namespace:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "customquotas", name)
        else:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "globalcustomquotas", name)
        self.known -= 1
        self.wait_known()

    def wait_known(self) -> None:
        """Every replica decides from a snapshot with exactly the quotas this test expects."""
        for admission in self.admissions:
            if admission.process.running:
                url = admission.probe_url
                poll(
                    lambda: metric(url, "enclave_admission_quotas") == self.known,  # noqa: B023 - polled at once
                    timeout=30,
                    what=f"{self.known} quotas at {admission.process.name}",
                )

    def quota(self, namespace: str | None, name: str) -> dict[str, Any]:
        if namespace:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "customquotas", name))
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, "globalcustomquotas", name))

    def wait_status(
        self, namespace: str | None, name: str, check: Callable[[dict[str, Any]], Any], timeout: float = 30
    ) -> dict[str, Any]:
        return dict(
            poll(
                lambda: (status := self.quota(namespace, name).get("status") or {}) and check(status) and status,
                timeout=timeout,
                what=f"status of quota {name}",
            )
        )

    def used(self, namespace: str | None, name: str) -> str:
        return str(((self.quota(namespace, name).get("status") or {}).get("usage") or {}).get("used"))

    def ledger_name(self, namespace: str | None, name: str) -> str:
        return f"customquota.{namespace}.{name}" if namespace else f"globalcustomquota.{name}"

    def ledger(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "quantityledgers", name))

    def settled(self, namespace: str | None, name: str) -> dict[str, Any]:
        """The quota's ledger once every reservation is folded (reserved 0)."""
        ledger = self.ledger_name(namespace, name)
        return dict(
            poll(
                lambda: (status := self.ledger(ledger).get("status") or {}).get("reserved") == "0" and status,
                what=f"ledger {ledger} settled",
            )
        )

    def burst(self, count: int, create: Callable[[int], Any], workers: int = 100) -> list[bool]:
        """Run ``create(i)`` for i < count concurrently; True for each admitted, False for each denied."""

        def one(index: int) -> bool:
            try:
                create(index)
                return True
            except ApiException as err:
                if err.status in (400, 403, 422, 500) and "denied the request" in (err.body or ""):
                    return False
                if err.status == 500 and "failed calling webhook" in (err.body or ""):
                    return False
                raise

        with ThreadPoolExecutor(max_workers=min(workers, count)) as pool:
            return list(pool.map(one, range(count)))


def hook_resources(enclave: QuotaEnclave) -> set[str]:
    configuration = client.AdmissionregistrationV1Api(enclave.kube).read_validating_webhook_configuration(
        f"{enclave.config_name}-validating"
    )
    hook = next(w for w in configuration.webhooks if w.name == "quotas.enclave.dev")
    return {resource for rule in hook.rules or [] for resource in rule.resources or []}


def _ready(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)


def ready_reason(status: dict[str, Any]) -> str:
    condition = _ready(status)
    return str(condition.get("reason")) if condition else ""


def start_admission(plane: ControlPlane, namespace: str, endpoints: dict[str, str], wait: bool) -> RunningComponent:
    return start_component(
        SPECS["admission"],
        kubeconfig=plane.kubeconfig,
        log_dir=plane.log_dir,
        namespace=namespace,
        endpoints=endpoints,
        identity=unique("admission"),
        wait_ready=wait,
        args=["--reservation-ttl=5s"],  # a reservation whose object never came frees its quota within a test
    )


def start_tenants(plane: ControlPlane, namespace: str, config: RunningComponent) -> RunningComponent:
    """enclave-tenants following ``config``; not waited for (it is ready once enclave-config is configured)."""
    return start_component(
        SPECS["tenants"],
        kubeconfig=plane.kubeconfig,
        log_dir=plane.log_dir,
        namespace=namespace,
        endpoints={"config": config.grpc_target},
        args=["--resync=5s"],
        identity=unique("tenants"),
        wait_ready=False,
    )


@contextlib.contextmanager
def quota_enclave(
    control_plane: ControlPlane, kube: Any, replicas: int = 3, *, anchor: bool = True, tenants: bool = False
) -> Iterator[QuotaEnclave]:
    """With ``tenants``, enclave-tenants runs too (in ``extra``) and admission subscribes to it: tenant
    namespace quotas are then enforced beside the custom quotas."""
    namespace = unique("enclave-q")
    config_name = unique("q")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    running: list[RunningComponent] = []
    try:
        config_process = start_component(
            SPECS["config"],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={},
            args=[f"--service-configuration-name={config_name}", "--resync=5s"],
            identity=unique("config"),
        )
        running.append(config_process)
        quotas = start_component(
            SPECS["quotas"],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={"config": config_process.grpc_target},
            args=QUOTAS_ARGS(config_name),
            identity=unique("quotas"),
        )
        running.append(quotas)
        endpoints = {"config": config_process.grpc_target, "quotas": quotas.grpc_target}
        extra: list[RunningComponent] = []
        if tenants:
            tenancy = start_tenants(control_plane, namespace, config_process)
            running.append(tenancy)
            extra.append(tenancy)
            endpoints["tenants"] = tenancy.grpc_target
        admissions = [start_admission(control_plane, namespace, endpoints, wait=False) for _ in range(replicas)]
        running += admissions
        ports = [a.webhook_port for a in admissions if a.webhook_port is not None]
        with Balancer(ports) as balancer:
            spec = webhooks(url_client(balancer.url), namespace=namespace, quotas=True)
            assert spec.mutating is not None
            assert spec.validating is not None
            spec.mutating.name = f"{config_name}-mutating"
            spec.validating.name = f"{config_name}-validating"
            custom = client.CustomObjectsApi(kube)
            poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
            full = {"enableTLSReconciler": True, "events": {"namespace": namespace}, "admission": spec.to_k8s()}
            custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": full})
            for admission in admissions:
                admission.wait_ready(60)
            for component in extra:
                component.wait_ready(60)
            enclave = QuotaEnclave(
                control_plane, kube, namespace, config_name, config_process, quotas, admissions, balancer
            )
            enclave.wide = wide_client(control_plane)
            enclave.extra.extend(extra)
            # An anchor quota on ConfigMaps and Pods keeps both in the quota hook's rules for the whole module:
            # rules follow the quotas, and kube-apiserver sees a rule change a moment after it is written, so
            # tests that create and delete quotas would otherwise race that propagation.
            if anchor:
                counts = [{"kind": "ConfigMap", "op": "count"}, {"kind": "Pod", "op": "count"}]
                enclave.create_quota(namespace, "anchor", {"limit": 1_000_000, "sources": counts})
                poll(lambda: hook_resources(enclave) >= {"configmaps", "pods"}, what="quota hook scoped")
            try:
                yield enclave
            finally:
                running += [component for component in enclave.extra if component not in running]
    finally:
        for component in reversed(running):
            component.process.stop()
        remove_configuration(kube, config_name)  # the components are stopped: nothing writes it back
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)

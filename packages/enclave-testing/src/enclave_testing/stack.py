"""Enclave's tenancy core (enclave-config, enclave-tenants, enclave-admission) as processes on a control plane.

For tests that need the whole fence on a control plane of their own (one started with extra kube-apiserver
flags, such as sign-in through an identity provider): the components run as children, the ServiceConfiguration
names the users and the webhook configurations pointing kube-apiserver at this admission server, and
``close()`` takes all of it down again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import CONFIGURATION_LABEL
from enclave_testing.balancer import Balancer
from enclave_testing.certificates import ComponentCertificates, enable_tls_reconciler
from enclave_testing.components import (
    COMPONENTS,
    ComponentSpec,
    RunningComponent,
    RunningHost,
    start_component,
    start_host,
)
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
STACK_LABEL = "enclave-testing/stack"
"""Label on every Tenant a stack creates (value: its ServiceConfiguration's name), so ``close`` deletes them all
with one deletecollection instead of one request each (minutes at the scale suite's 1,000 tenants)."""
_SPECS = {spec.name: spec for spec in COMPONENTS}


@dataclass
class TenancyStack:
    """The running processes and the cluster objects that wire them together."""

    plane: ControlPlane
    namespace: str
    config_name: str
    processes: list[RunningComponent] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    certificates: ComponentCertificates | None = None
    """The serving and per-component client certificates, mounted for the processes as the kubelet would."""
    balancer: Balancer | None = None
    """In front of the admission replicas when there are several (``admission_replicas``)."""
    host: RunningHost | None = None
    """The one process of the controllers when they run together (``colocated``)."""

    @property
    def kube(self) -> Any:
        return self.plane.admin_client()

    def tenant(self, name: str, owners: list[dict[str, str]], **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": name, "labels": {STACK_LABEL: self.config_name}},
            "spec": {"owners": owners, **spec},
        }
        client.CustomObjectsApi(self.kube).create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        self.tenants.append(name)

    def tenant_status(self, name: str) -> dict[str, Any]:
        obj = client.CustomObjectsApi(self.kube).get_cluster_custom_object(GROUP, VERSION, "tenants", name)
        return dict(obj.get("status") or {})

    def set_users(self, users: list[dict[str, str]]) -> None:
        """Replace ``spec.users`` (who is a tenant user) of this stack's ServiceConfiguration."""
        client.CustomObjectsApi(self.kube).patch_cluster_custom_object(
            GROUP, VERSION, "serviceconfigurations", self.config_name, {"spec": {"users": users}}
        )

    def whole(self) -> bool:
        """Every process running and ready: what a module sharing this stack must leave behind
        (:mod:`enclave_testing.shared`)."""
        return all(running.ready() for running in self.processes)

    def stop(self) -> None:
        """Stop the processes and what serves them, leaving every object in place: enough when the control plane
        is about to be discarded (deleting a thousand tenants with their namespaces takes minutes)."""
        for running in reversed(self.processes):
            running.process.stop()
        if self.certificates is not None:
            self.certificates.close()
        if self.balancer is not None:
            self.balancer.__exit__(None, None, None)
            self.balancer = None

    def close(self) -> None:
        """Stop the processes, delete this stack's tenants in one deletecollection (by :data:`STACK_LABEL`) and
        wait, bounded, until they are gone, then remove the configuration (also when that wait runs out)."""
        self.stop()
        kube = self.kube
        custom = client.CustomObjectsApi(kube)
        selector = f"{STACK_LABEL}={self.config_name}"
        try:
            if self.tenants:
                with contextlib.suppress(ApiException):
                    custom.delete_collection_cluster_custom_object(GROUP, VERSION, "tenants", label_selector=selector)
                poll(
                    lambda: (
                        not custom.list_cluster_custom_object(
                            GROUP, VERSION, "tenants", label_selector=selector, limit=1
                        )["items"]
                    ),
                    timeout=max(60.0, len(self.tenants) / 10),
                    interval=0.5,
                    what=f"the stack's {len(self.tenants)} tenants deleted",
                )
        finally:
            remove_configuration(kube, self.config_name)


def remove_configuration(kube: Any, config_name: str) -> None:
    """Delete the ServiceConfiguration and everything enclave-config generated for it (the webhook
    configurations, which would send later modules' requests to stopped servers, its native admission policies
    (Tenant deletion protection), and the cluster-wide RBAC,
    whose provisioner binding has a fixed name), then wait until they are gone. enclave-config owns them by its
    anchor ClusterRole, not by the ServiceConfiguration, so nothing else removes them. Call it once
    enclave-config is stopped, or it writes them back."""
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(kube).delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name)
    rbac = client.RbacAuthorizationV1Api(kube)
    registrations = client.AdmissionregistrationV1Api(kube)
    selector = f"{CONFIGURATION_LABEL}={config_name}"
    kinds = {
        "cluster role binding": (rbac.list_cluster_role_binding, rbac.delete_cluster_role_binding),
        "cluster role": (rbac.list_cluster_role, rbac.delete_cluster_role),
        "validating webhook configuration": (
            registrations.list_validating_webhook_configuration,
            registrations.delete_validating_webhook_configuration,
        ),
        "mutating webhook configuration": (
            registrations.list_mutating_webhook_configuration,
            registrations.delete_mutating_webhook_configuration,
        ),
        "validating admission policy binding": (
            registrations.list_validating_admission_policy_binding,
            registrations.delete_validating_admission_policy_binding,
        ),
        "validating admission policy": (
            registrations.list_validating_admission_policy,
            registrations.delete_validating_admission_policy,
        ),
    }
    for list_them, delete in kinds.values():
        for item in list_them(label_selector=selector).items:
            with contextlib.suppress(ApiException):
                delete(item.metadata.name)
    poll(
        lambda: not any(list_them(label_selector=selector).items for list_them, _ in kinds.values()),
        what=f"what enclave-config generated for {config_name} gone",
    )


def create_namespace(api: Any, name: str) -> None:
    """Create namespace ``name`` as ``api``'s caller, retrying only while admission's snapshots are on their way."""

    def attempt() -> bool:
        try:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
        except ApiException as err:
            if "not ready" in str(err.body) or "no tenant" in str(err.body):
                return False
            raise
        return True

    poll(attempt, timeout=30, what=f"create namespace {name}")


def start_tenancy(
    plane: ControlPlane,
    users: list[dict[str, str]],
    launcher: Callable[[ComponentSpec], list[str]] | None = None,
    admission_args: list[str] | None = None,
    nodes: bool = False,
    extra_spec: dict[str, Any] | None = None,
    pools: bool = False,
    globalquotas: bool = False,
    quotas: bool = False,
    replication: bool = False,
    tenants_args: list[str] | None = None,
    admission_replicas: int = 1,
    colocated: bool = False,
) -> TenancyStack:
    """Run config, tenants and admission on ``plane`` with ``users`` as the tenant users; ready when it returns.

    The CRDs must be installed. Admission's hooks are the defaults of ``enclave_admission.defaults`` behind
    a ``url`` client (the only route from a local kube-apiserver to a local process); ``nodes`` adds the node
    metadata hook. ``extra_spec`` is merged into the ServiceConfiguration's spec (e.g. ``nodeMetadata``).
    ``pools`` also runs enclave-pools, admission subscribed to it, with the pool hooks registered;
    ``globalquotas`` likewise enclave-globalquotas and the GlobalResourceQuota hooks; ``quotas`` enclave-quotas
    and the custom quota hooks; ``replication`` enclave-replication and the replication hooks. ``tenants_args``
    are extra flags of enclave-tenants (``--namespace-grant=<clusterrole>=<account>``, as the chart passes).
    ``admission_replicas`` above 1 runs that many admission servers behind one round-robin
    :class:`~enclave_testing.balancer.Balancer` (as a Service spreads reviews over the chart's replicas).
    ``colocated`` runs the controllers together in one ``enclave-host`` process (the chart's
    ``controllers.colocated`` shape), admission apart; ``stack.host`` is that process.
    """
    from enclave_admission.defaults import url_client, webhooks

    kube = plane.admin_client()
    stack = TenancyStack(plane, unique("enclave-stack"), unique("stack"))
    with contextlib.suppress(ApiException):
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": stack.namespace}})

    # The snapshot streams run as in a cluster: mutual TLS, each component presenting its own certificate.
    certificates = stack.certificates = ComponentCertificates(kube, stack.namespace).start()

    def start(name: str, endpoints: dict[str, str], args: list[str] | None = None, **kwargs: Any) -> RunningComponent:
        running = start_component(
            _SPECS[name],
            args=[*certificates.args(_SPECS[name]), *(args or [])],
            kubeconfig=plane.kubeconfig,
            log_dir=plane.log_dir,
            namespace=stack.namespace,
            endpoints=endpoints,
            identity=unique(name),
            launcher=launcher,
            **kwargs,
        )
        stack.processes.append(running)
        return running

    config_args = [f"--service-configuration-name={stack.config_name}", "--resync=5s"]
    optional = {"pools": pools, "globalquotas": globalquotas, "quotas": quotas, "replication": replication}
    controllers: list[RunningComponent] = []  # started, not yet waited for
    try:
        if colocated:
            names = ["config", "tenants", *(name for name, wanted in optional.items() if wanted)]
            own = {"config": config_args, "tenants": list(tenants_args or [])}
            stack.host = start_host(
                names,
                kubeconfig=plane.kubeconfig,
                log_dir=plane.log_dir,
                namespace=stack.namespace,
                args=lambda spec: [*certificates.args(spec), *own.get(spec.name, [])],
                identity=unique("host"),
                log_name=unique("host"),
            )
            stack.processes.extend(stack.host.components.values())
            enable_tls_reconciler(kube, stack.config_name)
            for hosted in stack.host.components.values():
                hosted.wait_ready()
            endpoints = {name: hosted.grpc_target for name, hosted in stack.host.components.items()}
        else:
            config = start("config", {}, args=config_args, wait_ready=False)
            # enclave-config serves once it has written the serving Secret, and the others wait for their
            # certificates.
            enable_tls_reconciler(kube, stack.config_name)
            config.wait_ready()
            # The rest start together (their gRPC ports are chosen before they run, and a subscriber retries
            # until its publisher listens): on two cores, one interpreter's imports overlap another's.
            endpoints = {"config": config.grpc_target}
            controllers.append(start("tenants", endpoints, args=list(tenants_args or []), wait_ready=False))
            controllers += [start(name, endpoints, wait_ready=False) for name, on in optional.items() if on]
            endpoints.update({c.spec.name: c.grpc_target for c in controllers})
        admissions = [
            start(
                "admission", endpoints, wait_ready=False, args=[*plane.webhook_client_args(), *(admission_args or [])]
            )
            for _ in range(admission_replicas)
        ]
        url = admissions[0].webhook_url
        if admission_replicas > 1:
            stack.balancer = Balancer([a.webhook_port for a in admissions if a.webhook_port is not None]).__enter__()
            url = stack.balancer.url
        rendered = webhooks(
            url_client(url),
            namespace=stack.namespace,
            nodes=nodes,
            pools=pools,
            globalquotas=globalquotas,
            replication=replication,
            quotas=quotas,
        )
        assert rendered.mutating is not None
        assert rendered.validating is not None
        rendered.mutating.name = f"{stack.config_name}-mutating"
        rendered.validating.name = f"{stack.config_name}-validating"
        spec = {
            "enableTLSReconciler": True,
            "users": users,
            "events": {"namespace": stack.namespace},
            "rbac": {"provisioner": f"{stack.config_name}-prov", "deleter": "enclave-namespace-deleter"},
            "admission": rendered.to_k8s(),
            **(extra_spec or {}),
        }
        custom = client.CustomObjectsApi(kube)
        poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name))
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name, {"spec": spec})
        for running in [*controllers, *admissions]:
            running.wait_ready(60)
        registrations = client.AdmissionregistrationV1Api(kube)
        poll(lambda: registrations.read_validating_webhook_configuration(f"{stack.config_name}-validating"))
    except BaseException:
        stack.close()
        raise
    return stack

"""Shared quota through admission: enclave-config, enclave-globalquotas and three admission replicas behind one
webhook URL (a round-robin balancer, as a Service would spread reviews), on the real control plane.

The provisioned ResourceQuotas alone let two namespaces each take the last unit (each sees the same headroom);
the ledger reservations close that race, so a burst across namespaces admits exactly the shared limit.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from enclave_admission.defaults import url_client, webhooks
from enclave_testing.balancer import Balancer
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.quotas import burst, wait_for_quota_monitors
from enclave_testing.stack import remove_configuration
from enclave_testing.waiting import poll

from .conftest import GROUP, PLURAL, VERSION

SPECS = {spec.name: spec for spec in COMPONENTS}


@dataclass
class Enclave:
    kube: Any
    wide: Any
    namespace: str
    token: str
    created: list[str]

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def namespaces(self, count: int) -> list[str]:
        core = client.CoreV1Api(self.kube)
        names = [f"gqa-{self.token}-{len(self.created) + index}" for index in range(count)]
        for name in names:
            core.create_namespace({"metadata": {"name": name, "labels": {"gqa-test": self.token}}})
            self.created.append(name)
        return names

    def quota(self, name: str, hard: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GlobalResourceQuota",
            "metadata": {"name": name},
            "spec": {"quota": {"hard": hard}, "namespaceSelectors": [{"matchLabels": {"gqa-test": self.token}}]},
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

    def initialized(self, name: str, namespaces: list[str]) -> None:
        """Until the ledger is initialised and every namespace's ResourceQuota enforces (status.hard set)."""

        seen: list[Any] = []

        def ready() -> bool:
            ledger = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "quantityledgers", f"globalresourcequota.{name}"
            )
            block = (ledger.get("status") or {}).get("resourceQuota") or {}
            core = client.CoreV1Api(self.kube)
            quotas = [core.read_namespaced_resource_quota(f"globalquota-{name}", ns) for ns in namespaces]
            seen[:] = [
                block,
                [q.status for q in quotas],
                self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status"),
            ]
            return bool(block.get("initialized")) and all(q.status and q.status.hard for q in quotas)

        try:
            poll(ready, timeout=120, what=f"{name} initialised")
        except AssertionError as err:
            raise AssertionError(f"{err}: {seen}") from None


def _wide(control_plane: ControlPlane) -> Any:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 64
    return client.ApiClient(configuration)


@pytest.fixture(scope="module")
def enclave(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[Enclave]:
    token = secrets.token_hex(3)
    namespace, config_name = f"enclave-gqa-{token}", f"gqa-{token}"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for_quota_monitors(core, namespace)
    running: list[RunningComponent] = []

    def start(name: str, endpoints: dict[str, str], args: list[str], wait: bool = True) -> RunningComponent:
        component = start_component(
            SPECS[name],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            args=args,
            identity=f"{name}-{secrets.token_hex(3)}",
            wait_ready=wait,
        )
        running.append(component)
        return component

    world = Enclave(kube, _wide(control_plane), namespace, token, [])
    # Role names of this configuration's own, so its generated ClusterRoles never collide with other modules'.
    provisioner, deleter = f"gqa-prov-{token}", f"gqa-del-{token}"
    rbac = {
        "provisioner": provisioner,
        "deleter": deleter,
        "administrationClusterRoles": [deleter],
        "promotionClusterRoles": [provisioner, deleter],
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServiceConfiguration", "metadata": {"name": config_name}}
    custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", {**body, "spec": {"rbac": rbac}})
    try:
        configuration = start("config", {}, [f"--service-configuration-name={config_name}", "--resync=5s"])
        globalquotas = start("globalquotas", {}, ["--resync=5s"])
        endpoints = {"config": configuration.grpc_target, "globalquotas": globalquotas.grpc_target}
        # A short reservation life: a create refused after its reservation (kube-apiserver's ResourceQuota
        # conflict, a timed-out answer) holds a unit only that long, so the burst test can fill up afterwards.
        admissions = [start("admission", endpoints, ["--reservation-ttl=10s"], wait=False) for _ in range(3)]
        with Balancer([a.webhook_port for a in admissions if a.webhook_port is not None]) as balancer:
            spec = webhooks(url_client(balancer.url), namespace=namespace, globalquotas=True)
            assert spec.mutating is not None
            assert spec.validating is not None
            spec.mutating.name = f"{config_name}-mutating"
            spec.validating.name = f"{config_name}-validating"
            poll(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name))
            full = {"enableTLSReconciler": True, "events": {"namespace": namespace}, "admission": spec.to_k8s()}
            custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config_name, {"spec": full})
            for admission in admissions:
                admission.wait_ready(60)
            try:
                yield world
            finally:
                registrations = client.AdmissionregistrationV1Api(kube)
                for kind in ("validating", "mutating"):
                    with contextlib.suppress(ApiException):
                        getattr(registrations, f"delete_{kind}_webhook_configuration")(f"{config_name}-{kind}")
    finally:
        for item in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL).get("items", []):
            if token in item["metadata"]["name"]:
                with contextlib.suppress(ApiException):
                    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, item["metadata"]["name"])
        for component in reversed(running):
            component.process.stop()
        # Once enclave-config is stopped nothing writes its webhook configurations back: a Fail hook left
        # pointing at a stopped server would refuse every later module's Tenants.
        remove_configuration(kube, config_name)
        for name in [*world.created, namespace]:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


def test_concurrent_creates_across_namespaces_admit_exactly_the_shared_limit(enclave: Enclave) -> None:
    namespaces = enclave.namespaces(3)
    name = f"svc-{enclave.token}"
    enclave.quota(name, {"services": 5})
    enclave.initialized(name, namespaces)
    core = client.CoreV1Api(enclave.wide)

    def create(index: int) -> None:
        body = {"metadata": {"name": f"s{index}"}, "spec": {"ports": [{"port": 80}]}}
        core.create_namespaced_service(namespaces[index % 3], body)

    def stored() -> int:
        return sum(len(core.list_namespaced_service(ns).items) for ns in namespaces)

    admitted, refusals = burst(12, create)
    # Never more than the limit, and every 201 is stored. Fewer is possible under load: a create refused after
    # admission reserved for it (kube-apiserver's ResourceQuota 409, which the client retries as a new request,
    # or an answer that timed out) holds its unit until the reservation expires.
    assert admitted <= 5, [json.loads(r).get("message") for r in refusals]
    assert all("GlobalResourceQuota" in r or "exceeded quota" in r for r in refusals), refusals
    assert stored() == admitted
    # Nothing lost: once such reservations expire, the quota fills to exactly its limit, one create at a time.
    index = 12

    def filled() -> bool:
        nonlocal index
        if stored() >= 5:
            return True
        try:
            create(index)
        except ApiException as err:
            if err.status not in (403, 409):
                raise
        index += 1
        return stored() >= 5

    poll(filled, timeout=60, what="the shared limit filled once stale reservations expired")
    admitted_after, _ = burst(3, lambda i: create(100 + i))
    assert admitted_after == 0
    assert stored() == 5
    # The reservations fold into what the ResourceQuotas report: nothing stays held.
    seen: list[Any] = [None]

    def folded() -> bool:
        ledger = enclave.custom.get_namespaced_custom_object(
            GROUP, VERSION, enclave.namespace, "quantityledgers", f"globalresourcequota.{name}"
        )
        seen[0] = block = (ledger.get("status") or {}).get("resourceQuota") or {}
        return bool(block.get("allocated") == {"services": "5"} and not block.get("reservations"))

    try:
        poll(folded, timeout=45, what="reservations folded")
    except AssertionError as err:
        raise AssertionError(f"{err}: {seen[0]}") from None


def test_quota_validation_names_the_field(enclave: Enclave) -> None:
    namespaces = enclave.namespaces(2)
    name = f"val-{enclave.token}"
    metadata = {"name": f"bad-{enclave.token}"}
    cases = [
        ({"gpus": 1}, None, "spec.quota.hard[gpus]: unknown resource name"),
        ({"pods": "1.5"}, None, "spec.quota.hard[pods]: must be a whole number"),
        ({"requests.cpu": "1"}, ["BestEffort"], "spec.quota.scopes[0]: scope BestEffort cannot constrain requests.cpu"),
        ({"pods": 1}, ["Sometimes"], "spec.quota.scopes[0]: Unsupported value"),
        ({"pods": "lots"}, None, "spec.quota.hard.pods"),
    ]
    for hard, scopes, message in cases:
        quota: dict[str, Any] = {"hard": hard, **({"scopes": scopes} if scopes else {})}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GlobalResourceQuota", "metadata": metadata}
        spec = {"quota": quota, "namespaceSelectors": [{}]}
        with pytest.raises(ApiException) as refused:
            enclave.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {**body, "spec": spec})
        assert message in str(refused.value.body), refused.value.body

    # Each selected namespace holds kube-root-ca.crt. kube-controller-manager publishes it a moment after the
    # namespace is created; published after the quota, it would be reserved for, and those reservations are not
    # the one this test counts below.
    core = client.CoreV1Api(enclave.kube)

    def published() -> bool:
        try:
            return all(core.read_namespaced_config_map("kube-root-ca.crt", ns) for ns in namespaces)
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    poll(published, what="kube-root-ca.crt in each namespace")
    enclave.quota(name, {"configmaps": 10})
    enclave.initialized(name, namespaces)
    with pytest.raises(ApiException) as refused:
        enclave.custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"spec": {"quota": {"hard": {"configmaps": 1}}}}
        )
    assert "spec.quota.hard[configmaps]: 1 is below the" in str(refused.value.body)
    assert "already used" in str(refused.value.body)
    enclave.custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"spec": {"quota": {"hard": {"configmaps": 20}}}}
    )

    # A reservation pending (here one that never settles): the selection may not change under it.
    ledger_name = f"globalresourcequota.{name}"
    held = {
        "id": "pending-1",
        "objectRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "namespace": "nowhere"},
        "createdAt": "2026-01-01T00:00:00Z",
        "updatedAt": "2026-01-01T00:00:00Z",
        "expiresAt": "2099-01-01T00:00:00Z",
        "usage": {"configmaps": "0"},
    }

    def hold() -> bool:
        ledger = enclave.custom.get_namespaced_custom_object(
            GROUP, VERSION, enclave.namespace, "quantityledgers", ledger_name
        )
        ledger["status"]["resourceQuota"]["reservations"] = [held]
        try:
            enclave.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, enclave.namespace, "quantityledgers", ledger_name, ledger
            )
        except ApiException as err:
            if err.status == 409:  # the controller wrote meanwhile: read again
                return False
            raise
        return True

    poll(hold, what="a reservation written")

    def refused_selection() -> str | None:
        try:
            enclave.custom.patch_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, {"spec": {"namespaceSelectors": [{"matchLabels": {"other": "x"}}]}}
            )
        except ApiException as err:
            return str(err.body) if "reservations are pending" in str(err.body) else None
        # This replica had not seen the reservation yet: put the selection back and ask again.
        selectors = [{"matchLabels": {"gqa-test": enclave.token}}]
        try:
            enclave.custom.patch_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, {"spec": {"namespaceSelectors": selectors}}
            )
        except ApiException as err:
            # It saw the reservation between the two patches: putting the selection back is itself a change
            # of selection, and its refusal is the one asked for (a loaded CI run met exactly this).
            if "reservations are pending" in str(err.body):
                return str(err.body)
            raise
        return None

    message = poll(refused_selection, what="selection change refused")
    assert "spec.namespaceSelectors cannot change while 1 reservations are pending" in message

"""Fixtures for the global quotas component: one enclave-globalquotas process for the module.

GlobalResourceQuotas and namespaces are cluster-wide, so the component is shared by the tests of a module and
each test isolates itself by a label of its own (``gq-test=<token>``) that its quota selects. The component's
Lease and ledgers live in a namespace of the module's own.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.quotas import wait_for_quota_monitors
from enclave_testing.waiting import poll

GLOBALQUOTAS = next(spec for spec in COMPONENTS if spec.name == "globalquotas")
GROUP, VERSION, PLURAL = "enclave.dev", "v1beta2", "globalresourcequotas"


@dataclass
class Stack:
    component: RunningComponent
    home: str


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[Stack]:
    home = f"globalquotas-home-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": home}})
    wait_for_quota_monitors(core, home)
    running = start_component(
        GLOBALQUOTAS,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={},
        args=["--resync=5s"],
        identity=f"globalquotas-{home[-6:]}",
    )
    try:
        yield Stack(running, home)
    finally:
        running.process.stop()
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


@dataclass
class Shared:
    """A test's quota world: its label, namespaces and helpers."""

    kube: Any
    token: str
    home: str
    created: list[str]

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.kube)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def namespace(self, suffix: str, *, selected: bool = True, labels: dict[str, str] | None = None) -> str:
        name = f"gq-{self.token}-{suffix}"
        all_labels = {"gq-test": self.token} if selected else {}
        all_labels.update(labels or {})
        self.core.create_namespace({"metadata": {"name": name, "labels": all_labels}})
        self.created.append(name)
        return name

    def quota(self, name: str, hard: dict[str, Any], **quota: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GlobalResourceQuota",
            "metadata": {"name": name},
            "spec": {
                "quota": {"hard": hard, **quota},
                "namespaceSelectors": [{"matchLabels": {"gq-test": self.token}}],
            },
        }
        return dict(self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))

    def rq(self, namespace: str, quota: str) -> Any:
        return self.core.read_namespaced_resource_quota(f"globalquota-{quota}", namespace)

    def wait_hard(self, quota: str, expected: dict[str, dict[str, str]], timeout: float = 90.0) -> None:
        """Until each namespace's ResourceQuota has ``hard`` (spec and status) equal to ``expected[ns]``."""

        def check() -> bool:
            for namespace, hard in expected.items():
                rq = self.rq(namespace, quota)
                if dict(rq.spec.hard or {}) != hard or dict((rq.status and rq.status.hard) or {}) != hard:
                    return False
            return True

        poll(check, timeout=timeout, what=f"hard of {quota} to become {expected}")

    def wait_ready(self, quota: str, timeout: float = 60.0) -> dict[str, Any]:
        seen: list[Any] = [None]

        def check() -> dict[str, Any] | None:
            obj = seen[0] = self.get(quota)
            status = obj.get("status") or {}
            ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
            generation = obj["metadata"].get("generation")
            if ready and ready[0]["status"] == "True" and status.get("observedGeneration") == generation:
                return obj
            return None

        try:
            return dict(poll(check, timeout=timeout, what=f"{quota} Ready"))
        except AssertionError as err:
            raise AssertionError(f"{err}; last seen: {seen[0]}") from None

    def wait_gone(self, check: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
        def gone() -> bool:
            try:
                check()
            except ApiException as err:
                return bool(err.status == 404)
            return False

        poll(gone, timeout=timeout, what=what)


@pytest.fixture
def shared(stack: Stack, kube: Any) -> Iterator[Shared]:
    world = Shared(kube, secrets.token_hex(3), stack.home, [])
    yield world
    custom = client.CustomObjectsApi(kube)
    for item in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL).get("items", []):
        if world.token in item["metadata"]["name"]:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, item["metadata"]["name"])
    for name in world.created:
        with contextlib.suppress(ApiException):
            world.core.delete_namespace(name)

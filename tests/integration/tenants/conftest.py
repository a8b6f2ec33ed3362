"""Fixtures for the tenants component: one enclave-config and one enclave-tenants process for the module.

Tenants and namespaces are cluster-wide, so the component is shared by the tests of a module and each test
isolates itself by its own tenant, owner and namespace names. The configuration component runs beside it with
a ServiceConfiguration of its own name and role names, so it never fights other modules' configurations.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane

CONFIG = next(spec for spec in COMPONENTS if spec.name == "config")
TENANTS = next(spec for spec in COMPONENTS if spec.name == "tenants")
GROUP, VERSION = "enclave.dev", "v1beta2"


@dataclass
class Stack:
    """The running processes and the global names this module's configuration uses."""

    config: RunningComponent
    tenants: RunningComponent
    config_name: str
    home: str
    provisioner: str
    deleter: str
    admins_group: str


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[Stack]:
    suffix = secrets.token_hex(3)
    name, home = f"tcfg-{suffix}", f"tenants-home-{suffix}"
    provisioner, deleter, admins = f"tprov-{suffix}", f"tdel-{suffix}", f"tadmins-{suffix}"
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": home}})
    spec = {
        "administrators": [{"kind": "Group", "name": admins}],
        "rbac": {
            "provisioner": provisioner,
            "deleter": deleter,
            "administrationClusterRoles": [deleter],
            "promotionClusterRoles": [provisioner, deleter],
        },
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServiceConfiguration", "metadata": {"name": name}}
    custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", {**body, "spec": spec})
    started: list[RunningComponent] = []
    try:
        config = start_component(
            CONFIG,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=home,
            endpoints={},
            args=[f"--service-configuration-name={name}", "--resync=5s"],
            identity=f"config-{suffix}",
        )
        started.append(config)
        tenants = start_component(
            TENANTS,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=home,
            endpoints={"config": config.grpc_target},
            # Small rounds, so every test here also goes through the write loop's batching (several rounds).
            args=[f"--config-endpoint={config.grpc_target}", "--resync=5s", "--batch-size=2"],
            identity=f"tenants-{suffix}",
        )
        started.append(tenants)
        yield Stack(config, tenants, name, home, provisioner, deleter, admins)
    finally:
        for running in reversed(started):
            running.process.stop()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)

"""Fixtures for the configuration component: its own process against the session control plane."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.stack import remove_configuration

CONFIG = next(spec for spec in COMPONENTS if spec.name == "config")


@pytest.fixture
def start_config(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str], tmp_path: Path
) -> Iterator[Callable[..., RunningComponent]]:
    """Start enclave-config processes owning a ServiceConfiguration of the test's own (name, namespace)."""
    started: list[RunningComponent] = []
    names: list[str] = []
    core = client.CoreV1Api(kube)

    def start(name: str, namespace: str, *, args: list[str] | None = None, **kwargs: Any) -> RunningComponent:
        with contextlib.suppress(ApiException):
            core.create_namespace({"metadata": {"name": namespace}})
        running = start_component(
            CONFIG,
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints={},
            args=[f"--service-configuration-name={name}", "--resync=5s", *(args or [])],
            identity=kwargs.pop("identity", f"config-{secrets.token_hex(3)}"),
            **kwargs,
        )
        started.append(running)
        names.append(name)
        return running

    yield start
    for running in started:
        running.process.stop()
    for name in set(names):
        remove_configuration(kube, name)  # with the webhook configurations it generated: none outlives the module

"""``helm install --wait`` of the umbrella chart on simulated nodes (``tox -e kwok``; issue 18).

The default suite's control plane has no kubelet, so helm there installs without ``--wait``. Here the control
plane runs kube-scheduler, KWOK Nodes and the deployment controller (``simulated_control_plane``,
:mod:`enclave_testing.kwok`): the chart's Deployments roll out ReplicaSets, their Pods are scheduled onto the
KWOK Nodes and reported Running and Ready, so ``--wait`` has something real to wait for: every Deployment
available with its rendered replicas, the Services, the PodDisruptionBudgets. What it proves is the chart's
side of a rollout (selectors match the pod labels, the pods pass admission and scheduling, replicas and
rollout strategy add up, uninstall removes the pods); whether Enclave's processes start is what tests/image
proves by running them from the built image.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing import binaries, kwok
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.paths import repo_root
from enclave_testing.waiting import poll

CHART = repo_root() / "charts" / "enclave"
COMPONENTS = ["config", "tenants", "admission", "quotas", "globalquotas", "pools", "replication"]


@pytest.fixture(scope="module")
def plane(simulated_control_plane: ControlPlane) -> ControlPlane:
    install_crds(simulated_control_plane.admin_client())
    return simulated_control_plane


@pytest.fixture
def release_namespace(plane: ControlPlane) -> Iterator[str]:
    name = f"enclave-wait-{secrets.token_hex(3)}"
    core = client.CoreV1Api(plane.admin_client())
    core.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


def _helm(plane: ControlPlane, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(binaries.ensure("helm")["helm"]), *args, "--namespace", namespace]
    return subprocess.run(
        [*command, "--kubeconfig", str(plane.kubeconfig)], capture_output=True, text=True, check=False, timeout=300
    )


def _values(path: Path, admission_replicas: int) -> Path:
    """Every component on, config with a warm standby, admission scaled; ServiceMonitor off (its CRD is not
    served here)."""
    values: dict[str, Any] = {name: {"enabled": True} for name in COMPONENTS}
    values["config"]["replicas"] = 2
    values["config"]["podDisruptionBudget"] = {"enabled": True, "maxUnavailable": 1}
    values["admission"]["replicas"] = admission_replicas
    values["admission"]["podDisruptionBudget"] = {"enabled": True, "minAvailable": 1}
    values["metrics"] = {"serviceMonitor": {"enabled": False}}
    # The control plane advertises no kube-apiserver address (loopback) for the default NetworkPolicy to read.
    values["networkPolicy"] = {"apiServerCIDRs": ["127.0.0.1/32"]}
    path.write_text(yaml.safe_dump(values))
    return path


def _rolled_out(plane: ControlPlane, namespace: str) -> dict[str, int]:
    """Each Deployment's Ready Pods, after checking each one runs on a KWOK Node with its rendered replicas."""
    kube = plane.admin_client()
    nodes = {node.metadata.name for node in client.CoreV1Api(kube).list_node(label_selector=kwok.NODE_LABEL).items}
    deployments = client.AppsV1Api(kube).list_namespaced_deployment(namespace).items
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace).items
    ready: dict[str, int] = {}
    for deployment in deployments:
        name = deployment.metadata.name
        assert (deployment.status.ready_replicas or 0) == deployment.spec.replicas, name
        selector = deployment.spec.selector.match_labels
        own = [pod for pod in pods if selector.items() <= (pod.metadata.labels or {}).items()]
        running = [
            pod
            for pod in own
            if pod.status.phase == "Running"
            and pod.spec.node_name in nodes
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        ]
        assert len(running) == deployment.spec.replicas, f"{name}: {len(running)} of {len(own)} Pods running"
        ready[name] = len(running)
    return ready


def test_helm_install_wait_rolls_out_every_component_on_simulated_nodes(
    plane: ControlPlane, release_namespace: str, tmp_path: Path
) -> None:
    namespace = release_namespace
    installed = _helm(
        plane,
        namespace,
        "install",
        "enclave",
        str(CHART),
        "--values",
        str(_values(tmp_path / "install.yaml", 2)),
        "--wait",
        "--timeout",
        "180s",
    )
    try:
        assert installed.returncode == 0, installed.stderr
        ready = _rolled_out(plane, namespace)
        assert set(ready) == {f"enclave-{name}" for name in COMPONENTS}
        assert ready["enclave-config"] == 2
        assert ready["enclave-admission"] == 2

        # An upgrade that scales admission waits for the new replica, too.
        upgraded = _helm(
            plane,
            namespace,
            "upgrade",
            "enclave",
            str(CHART),
            "--values",
            str(_values(tmp_path / "upgrade.yaml", 3)),
            "--wait",
            "--timeout",
            "180s",
        )
        assert upgraded.returncode == 0, upgraded.stderr
        assert _rolled_out(plane, namespace)["enclave-admission"] == 3

        uninstalled = _helm(plane, namespace, "uninstall", "enclave", "--wait", "--timeout", "120s")
        assert uninstalled.returncode == 0, uninstalled.stderr
        core = client.CoreV1Api(plane.admin_client())
        # The ReplicaSets' Pods go with them (garbage collector, then kwok's pod-delete stage as a kubelet would).
        poll(lambda: not core.list_namespaced_pod(namespace).items, timeout=60, what="every Pod of the release gone")
    finally:
        _helm(plane, namespace, "uninstall", "enclave", "--ignore-not-found")

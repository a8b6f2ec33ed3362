"""pytest fixtures: one real control plane per test session, a fresh namespace per test.

Loaded automatically (entry point ``pytest11``) wherever ``enclave-testing`` is installed. The control plane
starts lazily, so a run of unit tests alone never builds or starts anything.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.gatewayapi import ensure_crds as gateway_api_crd_dir
from enclave_testing.paths import repo_root
from enclave_testing.shared import StackKeeper, keeper, uses_shared_stack

_kept_workdirs: list[Path] = []


def _session_plane(request: pytest.FixtureRequest, prefix: str, simulated_nodes: int = 0) -> Iterator[ControlPlane]:
    base = os.environ.get("ENCLAVE_TEST_WORKDIR")
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    plane = ControlPlane(workdir, simulated_nodes=simulated_nodes).start()
    try:
        yield plane
    finally:
        plane.stop()
        if request.session.testsfailed:
            _kept_workdirs.append(workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver + kube-controller-manager, shared by the whole session."""
    yield from _session_plane(request, "enclave-cp-")


SIMULATED_NODES = 2
"""Nodes of :func:`simulated_control_plane` unless ``ENCLAVE_SIMULATED_NODES`` says otherwise."""


@pytest.fixture(scope="session")
def simulated_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A second kind of control plane, with kube-scheduler, KWOK Nodes and the deployment controller, so Pods
    are scheduled and reported Running and Ready (:mod:`enclave_testing.kwok`). Its own processes, never the
    session's ``control_plane``: suites that need it (``tox -e kwok``, ``tox -e scale``) take their clients
    from it (``simulated_control_plane.admin_client()``), not from the ``kube`` fixture."""
    nodes = int(os.environ.get("ENCLAVE_SIMULATED_NODES", str(SIMULATED_NODES)))
    yield from _session_plane(request, "enclave-kwok-", simulated_nodes=max(1, nodes))


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Any:
    """Admin ``kubernetes.client.ApiClient``."""
    return control_plane.admin_client()


@pytest.fixture(scope="session")
def impersonate(control_plane: ControlPlane) -> Callable[..., Any]:
    """``impersonate(user, groups)`` -> an ``ApiClient`` acting as that user."""
    return control_plane.impersonate


@pytest.fixture(scope="session")
def enclave_crds(kube: Any) -> list[str]:
    """Every CRD of charts/enclave/crds installed and Established."""
    return install_crds(kube)


@pytest.fixture(scope="session")
def gateway_api_crds(kube: Any) -> list[str]:
    """The pinned Gateway API release's standard-channel CRDs (hack/gatewayapi) installed and Established."""
    return install_crds(kube, gateway_api_crd_dir())


@pytest.fixture(scope="session")
def openshift_route_crd(kube: Any) -> list[str]:
    """OpenShift's ``route.openshift.io/v1`` Route CRD (tests/integration/fixtures/openshift-route) installed."""
    return install_crds(kube, repo_root() / "tests" / "integration" / "fixtures" / "openshift-route")


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Any) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards (without waiting for it to go)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name, "labels": {"enclave.dev/test": "true"}}})
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def stack_keeper(control_plane: ControlPlane) -> Iterator[StackKeeper]:
    """The session's one shared component stack (:mod:`enclave_testing.shared`), closed before the control
    plane stops."""
    try:
        yield keeper
    finally:
        keeper.release()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures start anything: a test that does not share the kept stack may start its own,
    # and two stacks on one control plane would judge each other's requests.
    if not uses_shared_stack(list(getattr(item, "fixturenames", ())), Path(str(item.path))):
        keeper.release()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if keeper.started:
        terminalreporter.write_line(f"shared component stacks: {keeper.started} started, {keeper.reused} reuses")
    for workdir in _kept_workdirs:
        terminalreporter.write_line(f"control-plane logs of the failed session kept in {workdir / 'logs'}")

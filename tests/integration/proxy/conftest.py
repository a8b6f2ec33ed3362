"""enclave-proxy as a real process in front of the session's kube-apiserver, with the tenancy core behind it.

The proxy runs as an identity of its own (a client certificate) holding exactly the chart's ClusterRole for it
(impersonate, create TokenReviews, read namespaces), so a test that passes here also proves those rights are
enough. Callers reach it with kubectl (built from the pinned Kubernetes module) and kubeconfigs that point at
the proxy's HTTPS address: a ServiceAccount token from the TokenRequest API as the bearer token, or a client
certificate of the control plane's CA (the proxy is given that CA).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.binaries import ensure
from enclave_testing.components import RunningComponent
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.proxy import RunningProxy, start_proxy
from enclave_testing.shared import StackKeeper, share_fixture, sharers_first
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy

USERS = "enclave.dev"
SA_GROUPS = ["system:serviceaccounts", "system:authenticated"]


@dataclass
class Caller:
    """A ServiceAccount signing in through the proxy with a TokenRequest token."""

    namespace: str
    name: str
    token: str
    kubeconfig: Path

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@dataclass
class ProxyStack:
    plane: ControlPlane
    stack: TenancyStack
    proxy: RunningComponent
    url: str
    ca_file: Path
    workdir: Path
    kubectl_path: Path
    running: RunningProxy
    """The proxy as :mod:`enclave_testing.proxy` started it (its process is ``proxy``)."""
    home: str = ""
    """A namespace outside every tenant where the suite's ServiceAccounts live."""
    created: list[str] = field(default_factory=list)

    @property
    def kube(self) -> Any:
        return self.plane.admin_client()

    def kubeconfig(self, name: str, user: dict[str, Any]) -> Path:
        return self.running.kubeconfig(name, user)

    def caller(self, name: str) -> Caller:
        """A ServiceAccount of the suite's home namespace and a kubeconfig with its token, for the proxy."""
        core = client.CoreV1Api(self.kube)
        with contextlib.suppress(ApiException):
            core.create_namespaced_service_account(self.home, {"metadata": {"name": name}})
        request = {"spec": {"expirationSeconds": 3600}}
        token = str(core.create_namespaced_service_account_token(name, self.home, request).status.token)
        return Caller(self.home, name, token, self.kubeconfig(name, {"token": token}))

    def tenant_of(self, caller: Caller, count: int, **spec: Any) -> tuple[str, list[str]]:
        """A fresh tenant owned by ``caller`` (with ``spec``) and ``count`` namespaces it created in it (as itself)."""
        tenant = unique("px")
        self.stack.tenant(tenant, [{"kind": "User", "name": caller.user}], **spec)
        names = [f"{tenant}-{i}" for i in range(count)]
        for name in names:
            self.add_namespace(caller, name)
        return tenant, names

    def add_namespace(self, caller: Caller, name: str) -> None:
        """Create ``name`` as ``caller`` (impersonated, in the tenant-user group too: the provisioner role)."""
        create_namespace(self.plane.impersonate(caller.user, [*SA_GROUPS, USERS]), name)
        self.created.append(name)

    def kubectl(
        self, kubeconfig: Path, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            # a discovery cache of this run's own (kubectl keys it by host:port, which another run may have had)
            [str(self.kubectl_path), f"--kubeconfig={kubeconfig}", f"--cache-dir={self.workdir / 'kube-cache'}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def kubectl_json(self, kubeconfig: Path, *args: str) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.kubectl(kubeconfig, *args, "-o", "json").stdout)
        return answer


share_fixture("proxied", Path(__file__).parent)


def _start_proxied(control_plane: ControlPlane, workdir: Path) -> ProxyStack:
    kubectl_path = ensure("kubectl")["kubectl"]
    stack = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}])
    kube = control_plane.admin_client()
    home = unique("proxy-home")
    try:
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": home}})
        assert stack.certificates is not None
        endpoints = {p.spec.name: p.grpc_target for p in stack.processes if p.spec.grpc}
        running = start_proxy(
            control_plane,
            certificates=stack.certificates,
            endpoints=endpoints,
            namespace=stack.namespace,
            workdir=workdir,
            args=["--tls-reload-interval=1s"],
        )
    except BaseException:
        stack.close()
        raise
    return ProxyStack(
        control_plane,
        stack,
        running.component,
        running.url,
        control_plane.ca_file,
        workdir,
        kubectl_path,
        running,
        home=home,
    )


def _close_proxied(proxied: ProxyStack) -> None:
    try:
        proxied.running.stop()
        proxied.stack.close()
    finally:
        with contextlib.suppress(ApiException):
            client.CoreV1Api(proxied.kube).delete_namespace(proxied.home)


def _whole(proxied: ProxyStack) -> bool:
    return proxied.stack.whole() and proxied.proxy.ready()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of this suite that use ``proxied`` run first, so it starts once for all of them."""
    sharers_first(items, Path(__file__).parent)


@pytest.fixture(scope="module")
def proxied(
    control_plane: ControlPlane,
    enclave_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    stack_keeper: StackKeeper,
) -> Iterator[ProxyStack]:
    """The tenancy core and enclave-proxy in front of kube-apiserver: one for every module of this suite in a row
    (each test signs in as ServiceAccounts of its own names; :mod:`enclave_testing.shared`)."""
    found = stack_keeper.acquire(
        "proxy", lambda: _start_proxied(control_plane, tmp_path_factory.mktemp("proxy")), _close_proxied, _whole
    )
    try:
        yield found
    finally:
        stack_keeper.check()


@pytest.fixture
def caller(proxied: ProxyStack) -> Callable[[str], Caller]:
    return proxied.caller

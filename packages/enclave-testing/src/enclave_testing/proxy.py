"""enclave-proxy as a real process in front of a local control plane, with exactly the chart's rights.

The suites that sign in through the proxy (tests/integration/proxy, the Keycloak sign-in, the benchmarks) and
``tox -e up`` start it the same way: an identity of its own (a client certificate of the control plane's CA)
bound to :data:`PROXY_RULES`, a serving certificate for ``127.0.0.1``/``localhost`` from the same CA, the
control plane's CA for client certificates, and subscriptions to enclave-config and enclave-tenants with the
client certificate enclave-config issues it (``certificates.args``), as the chart mounts them.

:data:`FILTERED_KIND_RULES` are the reads the proxy needs to filter the kinds beyond namespaces and nodes (part
of :data:`PROXY_RULES`, as of the chart's role);
:class:`ProxyClient` signs in with a client certificate of the control plane's CA, to the proxy or, for
comparison, to kube-apiserver itself (tests/security/test_proxy_*.py).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.certificates import ComponentCertificates
from enclave_testing.components import ComponentSpec, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.paths import repo_root
from enclave_testing.processes import free_port
from enclave_testing.stack import TenancyStack

PROXY = ComponentSpec("proxy", "enclave_proxy")
_OWN_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]},
    # userextras/<key> for every key a token may carry (RBAC has no "userextras/*"), and uids
    {"apiGroups": ["authentication.k8s.io"], "resources": ["*"], "verbs": ["impersonate"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]
"""What the proxy needs to authenticate callers, act as them and serve namespaces and nodes."""

READ = ["get", "list", "watch"]
FILTERED_KIND_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": READ},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingressclasses"], "verbs": READ},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": READ},
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": READ},
    {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["gatewayclasses"], "verbs": READ},
]
"""Reads of the kinds the proxy filters besides namespaces and nodes (it lists and watches each); without them it
passes those kinds through (docs/proxy.md)."""

PROXY_RULES: list[dict[str, Any]] = [*_OWN_RULES, *FILTERED_KIND_RULES]
"""The chart's ClusterRole for enclave-proxy (charts/enclave/templates/proxy/proxy.yaml), repeated here so
whatever runs on it runs with no more (tests/integration/proxy/test_proxy_chart.py compares the two)."""


def chart_settings() -> list[str]:
    """The flags the chart sets from ``proxy.*`` values that are not addresses or paths, at their defaults in
    charts/enclave/values.yaml (``tokenCacheTTL``, ``upstreamConnections``): the local proxy is the installed one."""
    values = yaml.safe_load((repo_root() / "charts" / "enclave" / "values.yaml").read_text())["proxy"]
    return [
        f"--token-cache-ttl={values['tokenCacheTTL']}",
        f"--upstream-connections={int(values['upstreamConnections'])}",
    ]


@dataclass
class RunningProxy:
    """The proxy's process, the URL callers dial and the CA that signed its serving certificate."""

    plane: ControlPlane
    component: RunningComponent
    url: str
    workdir: Path
    identity: str
    grant: str

    @property
    def ca_file(self) -> Path:
        return self.plane.ca_file

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kubeconfig(self, name: str, user: dict[str, Any]) -> Path:
        """A kubeconfig at ``workdir/<name>.kubeconfig`` that reaches the proxy as ``user`` (a kubeconfig user
        entry: ``token``, ``client-certificate``/``client-key``, ``exec`` or ``auth-provider``)."""
        path = self.workdir / f"{name}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "proxy", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": name}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        """Stop the process and remove the grant (the ClusterRole and its binding)."""
        self.component.process.stop()
        revoke(self.plane.admin_client(), self.grant)


def grant(kube: Any, user: str, name: str = "") -> str:
    """Bind :data:`PROXY_RULES` to ``user`` in a ClusterRole of that ``name`` (a fresh one by default)."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = name or unique("enclave-proxy-test")
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role({"metadata": {"name": name}, "rules": PROXY_RULES})
    with contextlib.suppress(ApiException):
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )
    return name


def revoke(kube: Any, name: str) -> None:
    """Delete what :func:`grant` created under ``name``."""
    rbac = client.RbacAuthorizationV1Api(kube)
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role_binding(name)
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role(name)


def proxy_args(grpc_client: list[str], endpoints: dict[str, str], workdir: Path, port: int, ca_file: Path) -> list[str]:
    """The proxy's own flags, each one the chart sets (charts/enclave/templates/proxy/proxy.yaml): the gRPC client
    certificate flags ``grpc_client`` (``ComponentCertificates.args``), the listener on loopback with
    ``workdir``'s serving pair, ``ca_file`` for client certificates, both subscriptions and :func:`chart_settings`."""
    return [
        *grpc_client,
        f"--listen-address=127.0.0.1:{port}",
        f"--tls-cert-file={workdir / 'serving.crt'}",
        f"--tls-key-file={workdir / 'serving.key'}",
        f"--client-ca-file={ca_file}",
        f"--tenants-endpoint={endpoints['tenants']}",
        f"--config-endpoint={endpoints['config']}",
        *chart_settings(),
    ]


def start_proxy(
    plane: ControlPlane,
    *,
    certificates: ComponentCertificates,
    endpoints: dict[str, str],
    namespace: str,
    workdir: Path,
    log_dir: Path | None = None,
    identity: str = "",
    port: int = 0,
    args: list[str] | None = None,
) -> RunningProxy:
    """Start enclave-proxy on ``127.0.0.1:<port>`` (a free one by default); ``endpoints`` names the gRPC targets
    of ``tenants`` and ``config``. Returns once it is ready (it has listed namespaces and holds its snapshots)."""
    assert plane.ca is not None
    workdir.mkdir(parents=True, exist_ok=True)
    identity = identity or unique("enclave-proxy")
    granted = grant(plane.admin_client(), identity, identity)
    serving = plane.ca.issue("enclave-proxy", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    (workdir / "serving.crt").write_bytes(serving.cert_pem)
    (workdir / "serving.key").write_bytes(serving.key_pem)
    (workdir / "serving.key").chmod(0o600)
    port = port or free_port()
    try:
        component = start_component(
            PROXY,
            kubeconfig=plane.identity_kubeconfig(identity),
            log_dir=log_dir or plane.log_dir,
            namespace=namespace,
            endpoints={},
            identity=identity,
            args=[
                *proxy_args(certificates.args(PROXY), endpoints, workdir, port, plane.ca_file),
                *(args or []),
            ],
        )
    except BaseException:
        revoke(plane.admin_client(), granted)
        raise
    return RunningProxy(plane, component, f"https://127.0.0.1:{port}", workdir, identity, granted)


def start_proxy_on(stack: TenancyStack, workdir: Path) -> RunningProxy:
    """:func:`start_proxy` in front of ``stack``'s control plane, subscribed to its enclave-config and
    enclave-tenants with the client certificate its enclave-config issues."""
    assert stack.certificates is not None
    return start_proxy(
        stack.plane,
        certificates=stack.certificates,
        endpoints={p.spec.name: p.grpc_target for p in stack.processes if p.spec.grpc},
        namespace=stack.namespace,
        workdir=workdir,
    )


def volume(name: str, labels: dict[str, str], claim_namespace: str = "") -> dict[str, Any]:
    """A PersistentVolume body (hostPath, 1Gi), pre-bound to claim ``data`` of ``claim_namespace`` when given:
    what the proxy shows of volumes depends on the labels and the claim alone."""
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": f"/tmp/{name}"},
    }
    if claim_namespace:
        spec["claimRef"] = {"namespace": claim_namespace, "name": "data"}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def subject(user: str) -> dict[str, str]:
    """An RBAC subject naming ``user``."""
    return {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}


def caller(proxy: RunningProxy, user: str, groups: list[str]) -> ProxyClient:
    """A client of ``proxy`` signing in as ``user`` in ``groups`` with a client certificate of the control
    plane's CA."""
    assert proxy.plane.ca is not None
    pair = proxy.plane.ca.issue(user, organizations=groups, server=False, client=True)
    stem = unique("caller")
    cert, key = proxy.workdir / f"{stem}.crt", proxy.workdir / f"{stem}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return ProxyClient(proxy.url, proxy.plane.ca_file, cert, key)


def direct(proxy: RunningProxy, signed: ProxyClient) -> ProxyClient:
    """The same caller talking to kube-apiserver itself: what it may see without the proxy."""
    return ProxyClient(proxy.plane.api_url, proxy.plane.ca_file, signed.cert, signed.key)


@dataclass
class ProxyClient:
    url: str
    ca_file: Path
    cert: Path
    key: Path

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One request; the status and the JSON body."""
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, context=self._context(), timeout=30) as answer:
                return int(answer.status), json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        return self.request("GET", path, headers=headers)

    def names(self, path: str) -> set[str]:
        """The names a list answers (asserting it answered 200)."""
        code, body = self.get(path)
        assert code == 200, (code, body)
        return {item["metadata"]["name"] for item in body.get("items") or []}

    @contextlib.contextmanager
    def watch(self, path: str) -> Iterator[Iterator[dict[str, Any]]]:
        """The events of a watch request, one JSON object per line, until the server ends it."""
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, context=self._context(), timeout=30) as answer:

            def events() -> Iterator[dict[str, Any]]:
                for line in answer:
                    if line.strip():
                        yield json.loads(line)

            yield events()

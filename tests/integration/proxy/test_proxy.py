"""kubectl through enclave-proxy as a tenant owner signed in with a bearer token (a TokenRequest token).

What the proxy answers itself (the tenant's namespaces, listed and watched) and what it passes through with the
caller's own rights (namespaced requests, a refusal kept a refusal), and the refusals that keep a caller from
acting as anyone else (docs/proxy.md's security table names a test of this module per row).
"""

from __future__ import annotations

import json
import queue
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.pki import CertificateAuthority
from enclave_testing.names import unique
from enclave_testing.processes import free_port
from enclave_testing.waiting import poll

from .conftest import SA_GROUPS, Caller, ProxyStack


def names_seen(proxied: ProxyStack, caller: Caller, *args: str) -> set[str]:
    out = proxied.kubectl(caller.kubeconfig, "get", "namespaces", "-o", "name", *args).stdout
    return {line.removeprefix("namespace/") for line in out.split()}


def raw(proxied: ProxyStack, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """One HTTPS request to the proxy with exactly ``headers``; the status and the JSON body."""
    context = ssl.create_default_context(cafile=str(proxied.ca_file))
    request = urllib.request.Request(proxied.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def owner_is_admin(proxied: ProxyStack, owner: Caller, namespace: str) -> None:
    """Wait until the owner's ``admin`` binding in ``namespace`` (enclave-tenants writes it) lets it read there."""
    poll(
        lambda: proxied.kubectl(owner.kubeconfig, "get", "configmaps", "-n", namespace, check=False).returncode == 0,
        timeout=30,
        what=f"the owner's admin binding in {namespace}",
    )


def test_tenant_owner_lists_exactly_its_namespaces(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    owner, stranger = caller("owner-list"), caller("stranger-list")
    _, mine = proxied.tenant_of(owner, 2)
    _, theirs = proxied.tenant_of(stranger, 1)
    poll(lambda: names_seen(proxied, owner) == set(mine), timeout=30, what="the owner's namespaces through the proxy")
    assert names_seen(proxied, stranger) == set(theirs)
    # kubectl's own table (the server-side Table the proxy renders), first column
    table = proxied.kubectl(owner.kubeconfig, "get", "namespaces").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "AGE"]
    assert {line.split()[0] for line in table[1:]} == set(mine)
    # selectors still apply
    assert names_seen(proxied, owner, "-l", f"kubernetes.io/metadata.name={mine[0]}") == {mine[0]}
    assert names_seen(proxied, owner, "--field-selector", f"metadata.name!={mine[0]}") == {mine[1]}
    assert names_seen(proxied, owner, "-l", f"kubernetes.io/metadata.name={theirs[0]}") == set()


def test_namespaced_request_passes_through_with_the_callers_rights(
    proxied: ProxyStack, caller: Callable[[str], Caller]
) -> None:
    owner = caller("owner-pass")
    _, mine = proxied.tenant_of(owner, 1)
    owner_is_admin(proxied, owner, mine[0])
    refused = proxied.kubectl(owner.kubeconfig, "get", "configmaps", "-n", "kube-system", check=False)
    assert refused.returncode != 0
    assert "Forbidden" in refused.stderr
    assert f'User "{owner.user}" cannot list resource "configmaps"' in refused.stderr


def test_tenant_watch_sees_a_namespace_join_the_tenant(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    owner = caller("owner-watch")
    tenant, mine = proxied.tenant_of(owner, 1)
    poll(lambda: names_seen(proxied, owner) == set(mine), timeout=30, what="the owner's namespace through the proxy")
    watch = subprocess.Popen(
        [str(proxied.kubectl_path), f"--kubeconfig={owner.kubeconfig}", "get", "namespaces", "-w", "-o", "name"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            lines.put(line.strip().removeprefix("namespace/"))

    threading.Thread(target=read, daemon=True).start()
    seen: set[str] = set()

    def saw(name: str) -> Callable[[], bool]:
        def check() -> bool:
            while not lines.empty():
                seen.add(lines.get_nowait())
            return name in seen

        return check

    try:
        poll(saw(mine[0]), timeout=30, what="the listed namespace")
        joining = f"{tenant}-late"
        proxied.add_namespace(owner, joining)
        poll(saw(joining), timeout=30, what="the namespace that joined the tenant, on the watch")
        assert seen <= {mine[0], joining}
    finally:
        watch.terminate()
        watch.wait(10)


def test_forged_impersonation_header_is_refused(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    owner = caller("owner-forge")
    # --raw: kubectl's discovery, which the same refusal would fail first, prints no message of it
    as_admin = proxied.kubectl(
        owner.kubeconfig, "--as=admin", "--as-group=system:masters", "get", "--raw", "/api/v1/pods", check=False
    )
    assert as_admin.returncode != 0
    assert f'{owner.user} may not impersonate users "admin"' in as_admin.stderr
    code, body = raw(
        proxied,
        "/api/v1/namespaces/kube-system/secrets",
        {"Authorization": f"Bearer {owner.token}", "impersonate-user": "system:admin"},
    )
    assert (code, body["reason"]) == (403, "Forbidden")


def test_caller_without_credentials_is_unauthorized(proxied: ProxyStack) -> None:
    assert raw(proxied, "/api/v1/namespaces", {})[0] == 401
    assert raw(proxied, "/api/v1/namespaces", {"Authorization": "Bearer not-a-token"})[0] == 401
    assert raw(proxied, "/version", {"Authorization": "Basic YWRtaW46YWRtaW4="})[0] == 401


def admin_kubeconfig(proxied: ProxyStack) -> Path:
    """A kubeconfig for the proxy with a client certificate in ``system:masters``."""
    assert proxied.plane.ca is not None
    pair = proxied.plane.ca.issue("proxy-admin", organizations=["system:masters"], server=False, client=True)
    (proxied.workdir / "admin.crt").write_bytes(pair.cert_pem)
    (proxied.workdir / "admin.key").write_bytes(pair.key_pem)
    return proxied.kubeconfig(
        "admin",
        {"client-certificate": str(proxied.workdir / "admin.crt"), "client-key": str(proxied.workdir / "admin.key")},
    )


def test_administrator_certificate_passes_through(proxied: ProxyStack) -> None:
    out = proxied.kubectl(admin_kubeconfig(proxied), "get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/default" in out
    assert "namespace/kube-system" in out


def test_caller_who_may_impersonate_sees_what_the_impersonated_user_sees(
    proxied: ProxyStack, caller: Callable[[str], Caller]
) -> None:
    owner = caller("owner-as")
    _, mine = proxied.tenant_of(owner, 1)
    kubeconfig = admin_kubeconfig(proxied)

    def listed() -> set[str]:
        out = proxied.kubectl(
            kubeconfig, f"--as={owner.user}", "--as-group=system:serviceaccounts", "get", "namespaces", "-o", "name"
        ).stdout
        return {line.removeprefix("namespace/") for line in out.split()}

    poll(lambda: listed() == set(mine), timeout=30, what="the owner's namespaces, as the owner")
    refused = proxied.kubectl(kubeconfig, f"--as={owner.user}", "get", "secrets", "-n", "kube-system", check=False)
    assert f'User "{owner.user}" cannot list resource "secrets"' in refused.stderr


def test_upgrade_request_reaches_kube_apiserver_as_the_caller(
    proxied: ProxyStack, caller: Callable[[str], Caller]
) -> None:
    owner = caller("owner-exec")
    _, mine = proxied.tenant_of(owner, 1)
    owner_is_admin(proxied, owner, mine[0])
    missing = proxied.kubectl(owner.kubeconfig, "exec", "-n", mine[0], "no-such-pod", "--", "true", check=False)
    assert 'pods "no-such-pod" not found' in missing.stderr
    refused = proxied.kubectl(owner.kubeconfig, "exec", "-n", "kube-system", "no-such-pod", "--", "true", check=False)
    assert "Forbidden" in refused.stderr or "forbidden" in refused.stderr


def test_tenant_owner_signed_in_with_a_client_certificate_lists_its_namespaces(
    proxied: ProxyStack, caller: Callable[[str], Caller]
) -> None:
    owner = caller("owner-cert")  # the tenant is the ServiceAccount's; the certificate names the same user
    _, mine = proxied.tenant_of(owner, 1)
    assert proxied.plane.ca is not None
    pair = proxied.plane.ca.issue(owner.user, organizations=["system:serviceaccounts"], server=False, client=True)
    (proxied.workdir / "owner-cert.crt").write_bytes(pair.cert_pem)
    (proxied.workdir / "owner-cert.key").write_bytes(pair.key_pem)
    kubeconfig = proxied.kubeconfig(
        "owner-cert",
        {
            "client-certificate": str(proxied.workdir / "owner-cert.crt"),
            "client-key": str(proxied.workdir / "owner-cert.key"),
        },
    )

    def listed() -> set[str]:
        out = proxied.kubectl(kubeconfig, "get", "namespaces", "-o", "name").stdout
        return {line.removeprefix("namespace/") for line in out.split()}

    poll(lambda: listed() == set(mine), timeout=30, what="the owner's namespaces through the proxy, by certificate")


def test_client_certificate_of_another_ca_is_refused(proxied: ProxyStack) -> None:
    forged = CertificateAuthority.generate("not-the-cluster-ca").issue(
        "admin", organizations=["system:masters"], server=False, client=True
    )
    (proxied.workdir / "forged.crt").write_bytes(forged.cert_pem)
    (proxied.workdir / "forged.key").write_bytes(forged.key_pem)
    kubeconfig = proxied.kubeconfig(
        "forged",
        {"client-certificate": str(proxied.workdir / "forged.crt"), "client-key": str(proxied.workdir / "forged.key")},
    )
    refused = proxied.kubectl(kubeconfig, "get", "pods", "-A", check=False)
    assert refused.returncode != 0
    assert "kube-system" not in refused.stdout


def test_revoked_token_stops_working_within_the_cache_ttl(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    revoked = caller("revoked")
    assert raw(proxied, "/version", {"Authorization": f"Bearer {revoked.token}"})[0] == 200
    client.CoreV1Api(proxied.kube).delete_namespaced_service_account(revoked.name, revoked.namespace)
    # The TokenReview cache (--token-cache-ttl, 10 s by default) is the most a revoked token keeps working.
    poll(
        lambda: raw(proxied, "/version", {"Authorization": f"Bearer {revoked.token}"})[0] == 401,
        timeout=15,
        what="the deleted ServiceAccount's token refused",
    )


def test_tenant_owner_lists_the_nodes_its_node_selector_matches(
    proxied: ProxyStack, caller: Callable[[str], Caller]
) -> None:
    owner = caller("owner-nodes")
    token = unique("pool")
    core = client.CoreV1Api(proxied.kube)
    names = {"ours": f"{token}-ours", "theirs": f"{token}-theirs"}
    for pool, name in names.items():
        core.create_node({"metadata": {"name": name, "labels": {"proxy-test-pool": f"{token}-{pool}"}}})
    try:
        proxied.tenant_of(owner, 0, nodeSelector={"proxy-test-pool": f"{token}-ours"})

        def listed() -> set[str]:
            out = proxied.kubectl(owner.kubeconfig, "get", "nodes", "-o", "name").stdout
            return {line.removeprefix("node/") for line in out.split()}

        poll(lambda: listed() == {names["ours"]}, timeout=30, what="the tenant's node through the proxy")
        table = proxied.kubectl(owner.kubeconfig, "get", "nodes").stdout.splitlines()
        assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        assert [line.split()[0] for line in table[1:]] == [names["ours"]]
        # kube-apiserver itself refuses the same owner
        direct = proxied.plane.impersonate(owner.user, SA_GROUPS)
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(direct).list_node()
        assert refused.value.status == 403
    finally:
        for name in names.values():
            core.delete_node(name)


def upgraded_answers(proxied: ProxyStack) -> float:
    """How many upgrade requests the proxy relayed as ``101 Switching Protocols`` (its metrics)."""
    with urllib.request.urlopen(f"{proxied.proxy.probe_url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("enclave_proxy_requests_total{") and 'route="upgraded"' in line and 'code="101"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_exec_is_relayed_over_an_upgraded_connection(proxied: ProxyStack, caller: Callable[[str], Caller]) -> None:
    """kubectl exec through the proxy: kube-apiserver switches protocols (WebSocket) and only then dials the
    kubelet. There is no kubelet here (the node is an object whose kubelet port refuses), so the session ends
    with kube-apiserver's dial error, carried back over the upgraded connection the proxy relays."""
    owner = caller("owner-stream")
    _, mine = proxied.tenant_of(owner, 1)
    core = client.CoreV1Api(proxied.kube)
    node = unique("proxy-node")
    core.create_node({"metadata": {"name": node}})
    try:
        core.patch_node_status(
            node,
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": free_port()}},
                }
            },
        )
        pod = {
            "metadata": {"name": "target"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/none:1"}]},
        }
        poll(lambda: core.create_namespaced_pod(mine[0], pod), timeout=30, what="the pod on the node")
        before = upgraded_answers(proxied)
        done = proxied.kubectl(owner.kubeconfig, "exec", "-n", mine[0], "target", "--", "true", check=False)
        assert done.returncode != 0
        assert "127.0.0.1" in done.stderr, done.stderr  # kube-apiserver's dial of the (absent) kubelet
        assert upgraded_answers(proxied) > before, "the exec did not pass through an upgraded connection"
    finally:
        core.delete_node(node)


def presented_name(proxied: ProxyStack) -> str:
    """The CN of the certificate a new TLS connection to the proxy is shown."""
    context = ssl.create_default_context(cafile=str(proxied.ca_file))
    port = int(proxied.url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw_socket,
        context.wrap_socket(raw_socket, server_hostname="127.0.0.1") as tls,
    ):
        peer: dict[str, Any] = dict(tls.getpeercert() or {})
    subject: Any = peer.get("subject", ())
    return next(str(value) for rdn in subject for key, value in rdn if key == "commonName")


def test_renewed_serving_certificate_is_served_without_a_restart(proxied: ProxyStack) -> None:
    assert presented_name(proxied) == "enclave-proxy"
    assert proxied.plane.ca is not None
    renewed = proxied.plane.ca.issue("enclave-proxy-renewed", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    # Rewritten in place, key first: the proxy sees a mismatched pair for a moment and retries.
    (proxied.workdir / "serving.key").write_bytes(renewed.key_pem)
    (proxied.workdir / "serving.crt").write_bytes(renewed.cert_pem)
    poll(lambda: presented_name(proxied) == "enclave-proxy-renewed", timeout=15, what="the renewed certificate")
    assert raw(proxied, "/version", {})[0] == 401  # and the listener still answers

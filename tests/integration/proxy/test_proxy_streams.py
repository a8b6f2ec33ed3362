"""kubectl's streaming commands through enclave-proxy as a tenant owner: exec, attach, port-forward and logs -f
against a pod on a KWOK node, over WebSocket (kubectl's default since 1.31) and over SPDY (the environment
switches kubectl documents force it).

There is no kubelet: KWOK plays the node's lifecycle (the node Ready, the pod Running), but the node it reports
has no InternalIP and no kubelet port, only its name as Hostname, so kube-apiserver dials ``<node>:10250`` by
that name and cannot resolve it. What each test proves is how far a session gets before that:

- WebSocket (exec, attach, port-forward): kube-apiserver answers ``101 Switching Protocols`` to the proxy, the
  proxy relays the upgraded connection, and only then does kube-apiserver dial the kubelet; its error reaches
  kubectl over the relayed stream.
- SPDY: kube-apiserver dials the kubelet *before* it switches protocols, so it answers the upgrade request with
  its own error (no ``101``); the proxy relays that answer.
- logs -f: not an upgrade; kube-apiserver's error about the kubelet comes back as the answer to the GET.

Every command also proves the request went upstream as the caller (a refusal would be the owner's ``403``).
docs/proxy.md says what cannot run without a kubelet.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from enclave_testing import binaries, kwok
from enclave_testing.names import unique
from enclave_testing.processes import ManagedProcess, free_port, wait_until
from enclave_testing.waiting import poll

from .conftest import Caller, ProxyStack

WEBSOCKET = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "true", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "true"}
SPDY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}
TRANSPORTS = {"websocket": WEBSOCKET, "spdy": SPDY}


@dataclass
class Target:
    """A pod KWOK reports Running on a KWOK node, in a namespace of ``owner``'s tenant."""

    owner: Caller
    namespace: str
    pod: str
    node: str


@pytest.fixture(scope="module")
def simulated_node(proxied: ProxyStack) -> Iterator[str]:
    """A KWOK node of this module's own: a kwok process managing only nodes with this module's annotation value,
    so the session's control plane gains a node lifecycle without the scheduler or the other suites' nodes."""
    plane = proxied.plane
    token = unique("proxy-kwok")
    port = free_port()
    process = ManagedProcess(
        f"kwok-{token}",
        [
            str(binaries.ensure("kwok")["kwok"]),
            f"--kubeconfig={plane.identity_kubeconfig(token, ['system:masters'])}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={kwok.NODE_ANNOTATION}={token}",
            f"--cidr={kwok.POD_CIDR}",
            "--node-lease-duration-seconds=0",
            f"--server-address=127.0.0.1:{port}",
            *(f"--config={stage}" for stage in kwok.stage_files()),
        ],
        plane.log_dir / f"kwok-{token}.log",
    ).start()
    core = client.CoreV1Api(proxied.kube)
    body = kwok.node_body(token)
    body["metadata"]["annotations"][kwok.NODE_ANNOTATION] = token
    try:
        wait_until(lambda: _healthy(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="kwok", alive=process)
        core.create_node(body)
        poll(lambda: kwok.ready(core.read_node(token)), timeout=60, what="the KWOK node Ready")
        core.patch_node(token, {"spec": {"taints": None}})  # as the node lifecycle controller would
        yield token
    finally:
        process.stop()
        core.delete_node(token)


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return int(answer.status) == 200


@pytest.fixture(scope="module")
def target(proxied: ProxyStack, simulated_node: str) -> Target:
    owner = proxied.caller("owner-streams")
    _, mine = proxied.tenant_of(owner, 1)
    core = client.CoreV1Api(proxied.kube)
    pod = {
        "metadata": {"name": "target"},
        "spec": {
            "nodeName": simulated_node,
            "containers": [{"name": "main", "image": "registry.invalid/none:1", "ports": [{"containerPort": 8080}]}],
        },
    }
    poll(lambda: core.create_namespaced_pod(mine[0], pod), timeout=30, what="the pod on the KWOK node")
    poll(
        lambda: core.read_namespaced_pod("target", mine[0]).status.phase == "Running",
        timeout=60,
        what="the pod Running (KWOK's pod-ready stage)",
    )
    poll(
        lambda: proxied.kubectl(owner.kubeconfig, "get", "pods", "-n", mine[0], check=False).returncode == 0,
        timeout=30,
        what="the owner's admin binding in its namespace",
    )
    return Target(owner, mine[0], "target", simulated_node)


def kubectl(proxied: ProxyStack, target: Target, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl <args>`` as the owner through the proxy with ``env`` added (the transport switches)."""
    command = [
        str(proxied.kubectl_path),
        f"--kubeconfig={target.owner.kubeconfig}",
        f"--cache-dir={proxied.workdir / 'kube-cache'}",
        "-n",
        target.namespace,
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **env})


def relayed(proxied: ProxyStack) -> dict[str, float]:
    """The proxy's upgraded requests by the code kube-apiserver answered (``101``: a relayed connection)."""
    with urllib.request.urlopen(f"{proxied.proxy.probe_url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("enclave_proxy_requests_total{") and 'route="upgraded"' in line:
            code = line.split('code="', 1)[1].split('"', 1)[0]
            counts[code] = counts.get(code, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


NO_KUBELET = "no preferred addresses found; known addresses: []"
"""kube-apiserver's words when it looks up where the pod's node has its kubelet and the node reports none."""


def kubelet_error(stderr: str) -> None:
    """kube-apiserver's own refusal about the kubelet, not the caller's: the request got as far as the node."""
    assert "forbidden" not in stderr.lower(), stderr
    assert NO_KUBELET in stderr, stderr


COMMANDS: dict[str, Callable[[Target], list[str]]] = {
    "exec": lambda t: ["exec", t.pod, "--", "true"],
    "attach": lambda t: ["attach", t.pod],
    "port-forward": lambda t: ["port-forward", f"pod/{t.pod}", f"{free_port()}:8080"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_streaming_command_reaches_kube_apiserver_through_the_proxy(
    proxied: ProxyStack, target: Target, command: str, transport: str
) -> None:
    before = relayed(proxied)
    done = kubectl(proxied, target, TRANSPORTS[transport], *COMMANDS[command](target))
    assert done.returncode != 0
    kubelet_error(done.stderr)
    after = relayed(proxied)
    grew = {code: after[code] - before.get(code, 0.0) for code in after if after[code] > before.get(code, 0.0)}
    # The proxy relayed an upgrade request, and kube-apiserver answered it without switching protocols: it
    # looks the kubelet up before it upgrades, WebSocket and SPDY alike.
    assert grew, f"the proxy relayed no upgrade request: {before} -> {after}"
    assert "101" not in grew, grew


def test_logs_follow_reaches_kube_apiserver_through_the_proxy(proxied: ProxyStack, target: Target) -> None:
    done = kubectl(proxied, target, {}, "logs", "-f", "--pod-running-timeout=1s", target.pod)
    assert done.returncode != 0
    kubelet_error(done.stderr)


UPGRADES = {
    "websocket": {
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "ZW5jbGF2ZS1wcm94eS10ZXN0",
        "Sec-WebSocket-Protocol": "v5.channel.k8s.io",
    },
    "spdy": {"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"},
}


def upgrade_status(proxied: ProxyStack, token: str, path: str, headers: dict[str, str]) -> str:
    """The status line the proxy answers a raw upgrade request with (what kubectl would get, without its own
    ``GET`` of the pod first)."""
    context = ssl.create_default_context(cafile=str(proxied.ca_file))
    port = int(proxied.url.rsplit(":", 1)[1])
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Authorization: Bearer {token}"]
    lines += ["Connection: Upgrade", *(f"{name}: {value}" for name, value in headers.items())]
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = tls.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


@pytest.mark.parametrize("transport", list(UPGRADES))
def test_upgrade_into_another_tenants_pod_is_refused(proxied: ProxyStack, target: Target, transport: str) -> None:
    """Another tenant's owner sends the exec upgrade itself (no ``GET`` of the pod first, as kubectl does): the
    proxy relays it as that caller, and kube-apiserver refuses it before any protocol switch or kubelet."""
    stranger = proxied.caller("stranger-streams")
    proxied.tenant_of(stranger, 0)
    path = f"/api/v1/namespaces/{target.namespace}/pods/{target.pod}/exec?command=true&stdout=1&stderr=1"
    before = relayed(proxied).get("403", 0.0)
    assert upgrade_status(proxied, stranger.token, path, UPGRADES[transport]).split(" ")[1] == "403"
    assert relayed(proxied).get("403", 0.0) > before

"""Connection starvation: strangers on the pod network open connections to the admission port and sit on them.

The fence's admission runs with client authentication (kube-apiserver presents its webhook client certificate,
``ControlPlane.webhook_client_args``). Each test opens a thousand connections of one kind from this process to
127.0.0.1 (bounded in count and time, closed afterwards), then has a tenant owner create namespaces in parallel
while they are open: more at once than kube-apiserver keeps idle connections to a webhook, so it must open new
ones to admission meanwhile, and every create must pass both namespace hooks within a normal time.

Before the listener bounded strangers, a connection that completed its handshake without a certificate held one
of the replica's 1,000 slots for 120 s (a partial request for 30 s): a thousand of them left kube-apiserver's new
connections closed over capacity, and the tenant's creates failed on the hooks' failure policy.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.listener import Limits
from enclave_testing.components import RunningComponent
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace

STRANGERS = 1000
PARALLEL = 60
"""Creates at once, each on a client of its own: above the idle connections kube-apiserver keeps per webhook
host (client-go: 25), so it must open new ones to admission meanwhile."""
LIMITS = Limits()
BOUND = 20.0
"""Seconds every create must finish in (unloaded: well under one; the hooks' own timeout is 10 s)."""


def admission(stack: TenancyStack) -> RunningComponent:
    return next(running for running in stack.processes if running.spec.name == "admission")


def port_of(stack: TenancyStack) -> int:
    port = urllib.parse.urlsplit(admission(stack).webhook_url).port
    assert port is not None
    return port


def closed_by_server(stack: TenancyStack, reason: str) -> float:
    import urllib.request

    label = f'enclave_admission_connections_closed_by_server_total{{reason="{reason}"}}'
    with urllib.request.urlopen(f"{admission(stack).probe_url}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(label):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


STRANGER_ADDRESS = "127.0.0.2"
"""Where the strangers connect from: another loopback address, so the per-address limits tell them from
kube-apiserver (127.0.0.1) as they would tell a pod from kube-apiserver in a cluster."""


def stranger_context() -> ssl.SSLContext:
    """A TLS client with no certificate that trusts anything (a stranger does not care who answers)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def open_strangers(port: int, count: int, handshake: bool, request: bytes = b"") -> list[socket.socket]:
    """``count`` connections from :data:`STRANGER_ADDRESS` to 127.0.0.1:``port``: idle TCP, or TLS without a certificate (then ``request``
    written, never finished); a connection the server refuses or drops on the way is counted as opened."""
    context = stranger_context()
    opened: list[socket.socket] = []
    deadline = time.monotonic() + 120
    for _ in range(count):
        assert time.monotonic() < deadline, "opening the strangers took over two minutes"
        # From an address of their own, as strangers on the pod network are to kube-apiserver's.
        sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(STRANGER_ADDRESS, 0))
        if not handshake:
            opened.append(sock)
            continue
        try:
            tls = context.wrap_socket(sock)
            if request:
                tls.sendall(request)
            opened.append(tls)
        except (OSError, ssl.SSLError):  # dropped by the server: what the listener is meant to do
            sock.close()
    return opened


@contextlib.contextmanager
def strangers(port: int, handshake: bool, request: bytes = b"") -> Iterator[list[socket.socket]]:
    opened = open_strangers(port, STRANGERS, handshake, request)
    try:
        yield opened
    finally:
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.close()


def creates_pass_meanwhile(stack: TenancyStack, impersonate: Callable[..., Any], owner: str) -> None:
    """``PARALLEL`` namespace creates by a tenant owner at once: every one admitted within ``BOUND``."""
    tenant, _ = owned_namespace(stack, impersonate, owner)
    names = [f"{tenant}-p{index}" for index in range(PARALLEL)]
    apis = [client.CoreV1Api(as_user(impersonate, owner)) for _ in names]  # a client's pool would serialise them

    def create(index: int) -> float:
        started = time.monotonic()
        apis[index].create_namespace({"metadata": {"name": names[index]}})
        return time.monotonic() - started

    core = client.CoreV1Api(stack.kube)
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            took = list(pool.map(create, range(PARALLEL)))
        assert max(took) < BOUND, f"slowest create {max(took):.1f} s"
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


def test_a_thousand_idle_connections_do_not_starve_kube_apiserver(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """TCP connections that never start a TLS handshake: at most 32 handshakes per address are pending, the
    oldest dropped first, and none waits longer than 5 s."""
    before = closed_by_server(fence, "evicted") + closed_by_server(fence, "handshake")
    with strangers(port_of(fence), handshake=False):
        creates_pass_meanwhile(fence, impersonate, "starve-idle-owner")
    after = closed_by_server(fence, "evicted") + closed_by_server(fence, "handshake")
    assert after >= before + STRANGERS - LIMITS.max_handshakes_per_source


def test_a_thousand_handshakes_without_a_certificate_do_not_starve_kube_apiserver(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """TLS connections without a client certificate that then sit idle: they take none of kube-apiserver's
    slots, at most 32 per address stay open (the oldest dropped), each for at most 5 s."""
    before = closed_by_server(fence, "evicted") + closed_by_server(fence, "anonymous-timeout")
    with strangers(port_of(fence), handshake=True) as opened:
        assert opened
        creates_pass_meanwhile(fence, impersonate, "starve-nocert-owner")
    after = closed_by_server(fence, "evicted") + closed_by_server(fence, "anonymous-timeout")
    assert after >= before + STRANGERS - LIMITS.max_anonymous_per_source


def test_a_thousand_slowloris_requests_do_not_starve_kube_apiserver(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Without a certificate, a request line and half a header, never finished: the same bounds, and the
    5 s anonymous timeout (not the 30 s request timeout) ends the newest."""
    port = port_of(fence)
    partial = b"POST /convert HTTP/1.1\r\nHost: enclave\r\nContent-Le"
    before = closed_by_server(fence, "anonymous-timeout")
    with strangers(port, handshake=True, request=partial) as opened:
        creates_pass_meanwhile(fence, impersonate, "starve-slow-owner")
        poll(
            lambda: closed_by_server(fence, "anonymous-timeout") > before,
            timeout=30,
            what="the newest partial requests cut off by the anonymous timeout",
        )
        assert opened

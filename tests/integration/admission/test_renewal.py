"""Certificate renewal under load: config renews the serving certificate every few seconds (``--tls-validity=6s``,
renewed when a third is left) while kube-apiserver and a direct client keep calling the webhooks. Not one call
may fail, and the served certificate must actually change during the run."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from enclave_core.api.meta import Entity
from enclave_testing.names import unique

from .harness import Enclave, namespace_rights, start_enclave, stop_enclave

HAMMER_SECONDS = 14.0


@pytest.fixture(scope="module")
def renewing(
    control_plane: Any, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Enclave]:
    subjects = [{"kind": "Group", "name": "enclave.dev", "apiGroup": "rbac.authorization.k8s.io"}]
    with namespace_rights(kube, "enclave-admission-test-everything", subjects):
        running = start_enclave(control_plane, kube, impersonate, config_args=["--tls-validity=6s"])
        try:
            yield running
        finally:
            stop_enclave(running)


def _served_serial(port: int, context: ssl.SSLContext) -> int:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def _direct_call(port: int, context: ssl.SSLContext) -> int:
    """One AdmissionReview on a fresh TLS connection (a new handshake each time); the HTTP status."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "hammer",
            "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "userInfo": {"username": "hammer", "groups": []},
            "object": {"metadata": {"name": "x"}},
        },
    }
    body = json.dumps(review).encode()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            b"POST /namespaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_renewed_certificate_is_picked_up_without_a_failed_call(renewing: Enclave) -> None:
    alice = unique("alice")
    solar = renewing.tenant(unique("solar"), owners=[Entity(kind="User", name=alice)])
    port = renewing.admission.webhook_port
    assert port is not None
    context = renewing.ssl_context()  # the CA stays; only the serving certificate is renewed
    api = renewing.owner(alice)
    failures: list[str] = []
    serials: set[int] = set()
    counts = {"apiserver": 0, "direct": 0}
    deadline = time.monotonic() + HAMMER_SECONDS
    lock = threading.Lock()

    def through_apiserver() -> None:
        while time.monotonic() < deadline:
            try:
                api.create_namespace({"metadata": {"name": f"{solar.name}-{unique('n')}"}}, dry_run="All")
            except ApiException as err:
                with lock:
                    failures.append(f"apiserver: {err.status} {err.body}")
            with lock:
                counts["apiserver"] += 1

    def direct() -> None:
        while time.monotonic() < deadline:
            try:
                status = _direct_call(port, context)
                serial = _served_serial(port, context)
                with lock:
                    serials.add(serial)
                    if status != 200:
                        failures.append(f"direct: HTTP {status}")
            except (OSError, ssl.SSLError, ValueError) as err:
                with lock:
                    failures.append(f"direct: {err!r}")
            with lock:
                counts["direct"] += 1

    threads = [threading.Thread(target=through_apiserver) for _ in range(4)] + [threading.Thread(target=direct)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"renewal hammer: {counts} calls, {len(serials)} certificates served, {len(failures)} failures")
    assert not failures, failures[:5]
    assert len(serials) >= 2, "the serving certificate was not renewed during the run"
    assert counts["apiserver"] > 50

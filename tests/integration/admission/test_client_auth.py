"""Who may call admission: only kube-apiserver, by its webhook client certificate.

The control plane runs kube-apiserver with ``--admission-control-config-file`` whose webhook kubeconfig gives it
a client certificate (``enclave_testing.controlplane``), and the harness starts admission with
``--client-ca-file`` and ``--client-allowed-names``: every test in this directory therefore proves the apiserver
gets through. These prove nobody else does: a forged AdmissionReview from a pod that can reach the port reserves
nothing, posts no Event and is never even parsed.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from enclave_core.api.meta import Entity
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.webhooks import namespace_creation_review

from .harness import Enclave, metric_value

REFUSED = (ssl.SSLError, ConnectionError, urllib.error.URLError, http.client.HTTPException, OSError)


def forged_creation(owner: str, name: str) -> dict[str, Any]:
    """What kube-apiserver would send when ``owner`` creates namespace ``name``, already assigned."""
    return namespace_creation_review(owner, ["enclave.dev"], {"name": name})


def post(enclave: Enclave, context: ssl.SSLContext, review: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{enclave.admission.webhook_url}/namespaces",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=5) as answer:
        return int(answer.status)


def requests_seen(enclave: Enclave) -> float:
    return metric_value(enclave.admission.probe_url, "enclave_admission_requests_total", 'path="/namespaces"') or 0.0


def test_a_caller_without_the_client_certificate_is_refused_before_any_decision(enclave: Enclave) -> None:
    """Without a certificate the handshake completes (kube-apiserver's conversion calls carry none), but only
    ``/convert`` is answered: a forged review gets 403 as soon as its request line and headers are read."""
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[Entity(kind="User", name=alice)], namespace_quota=1)
    before = requests_seen(enclave)
    for _ in range(3):  # three forged creations would fill a quota of one three times over
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(enclave, enclave.ssl_context(client_certificate=False), forged_creation(alice, unique(solar.name)))
        assert refused.value.code == 403
        assert b"client certificate is required" in refused.value.read()
    assert requests_seen(enclave) == before, "a forged review reached the decision code"
    # Nothing was reserved: the tenant's one namespace is still there to take, through the real apiserver.
    enclave.owner(alice).create_namespace({"metadata": {"name": f"{solar.name}-real"}})


def test_a_certificate_of_the_same_ca_with_another_name_is_refused(
    enclave: Enclave, control_plane: ControlPlane
) -> None:
    """The cluster CA signs every user's client certificate; only the apiserver's webhook name is accepted."""
    context = enclave.ssl_context(client_certificate=False)
    context.load_cert_chain(control_plane.pki_dir / "admin.crt", control_plane.pki_dir / "admin.key")
    before = requests_seen(enclave)
    closed = metric_value(
        enclave.admission.probe_url, "enclave_admission_connections_closed_by_server_total", 'reason="unauthenticated"'
    )
    with pytest.raises(REFUSED):
        post(enclave, context, forged_creation(unique("alice"), unique("ns")))
    assert requests_seen(enclave) == before
    after = metric_value(
        enclave.admission.probe_url, "enclave_admission_connections_closed_by_server_total", 'reason="unauthenticated"'
    )
    assert (after or 0.0) == (closed or 0.0) + 1


def test_the_apiservers_certificate_is_answered(enclave: Enclave) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[Entity(kind="User", name=alice)])
    assert post(enclave, enclave.ssl_context(), forged_creation(alice, f"{solar.name}-x")) == 200


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_many_large_reviews_at_once_stay_inside_the_charts_memory_limit(enclave: Enclave) -> None:
    """Sixty 3 MiB reviews at once (180 MiB), from the apiserver's certificate: the replica holds at most
    --max-buffered-bytes (64 MiB) of them (any beyond would be answered 503; the listener's unit tests prove the
    cap deterministically) and its resident memory stays under the chart's 384 MiB limit."""
    import threading

    popen = enclave.admission.process.popen
    assert popen is not None
    padding = "x" * (3 * 1024 * 1024 - 2048)
    review = forged_creation(unique("alice"), unique("big"))
    review["request"]["object"]["metadata"]["annotations"] = {"padding": padding}
    body = json.dumps(review).encode()
    statuses: list[int | str] = []
    peak = [0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib(popen.pid))
            done.wait(0.02)

    def call() -> None:
        request = urllib.request.Request(
            f"{enclave.admission.webhook_url}/namespaces", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, context=enclave.ssl_context(), timeout=30) as answer:
                statuses.append(int(answer.status))
        except urllib.error.HTTPError as err:
            statuses.append(int(err.code))
        except REFUSED as err:  # closed with the 503 unread while the body was still being sent
            statuses.append(type(err).__name__)

    watcher = threading.Thread(target=watch)
    watcher.start()
    callers = [threading.Thread(target=call) for _ in range(60)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(60)
    done.set()
    watcher.join()
    assert len(statuses) == 60
    assert set(statuses) <= {200, 503, "ConnectionResetError", "URLError", "RemoteDisconnected", "SSLError"}, statuses
    assert 200 in statuses
    print(f"\n60 x 3 MiB reviews: peak RSS {peak[0]:.0f} MiB, answers {sorted(map(str, statuses))}")
    assert peak[0] < 384, f"admission peaked at {peak[0]:.0f} MiB"

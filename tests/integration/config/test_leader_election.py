"""Two enclave-config replicas: one Lease holder writes, the standby takes over when it stops, is killed or
is paused past its lease; a paused leader that resumes writes nothing."""

from __future__ import annotations

import secrets
import signal
import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from enclave_testing.components import RunningComponent
from enclave_testing.waiting import poll

Start = Callable[..., RunningComponent]


FAST_LEASE = ["--lease-duration=6", "--renew-deadline=4", "--retry-period=1"]
LEASE_DURATION, RETRY_PERIOD = 6.0, 1.0


def _metric(running: RunningComponent, name: str, **labels: str) -> float:
    """One sample of the process's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"{running.probe_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def _two_replicas(start_config: Start, kube: Any) -> tuple[str, str, dict[str, RunningComponent], Callable[[], Any]]:
    suffix = secrets.token_hex(3)
    name, home = f"cfg-{suffix}", f"ns-{suffix}"
    client.CustomObjectsApi(kube).create_cluster_custom_object(
        "enclave.dev",
        "v1beta2",
        "serviceconfigurations",
        {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "ServiceConfiguration",
            "metadata": {"name": name},
            "spec": {"rbac": {"provisioner": f"prov-{suffix}", "deleter": f"del-{suffix}"}},
        },
    )
    replicas = {
        identity: start_config(name, home, identity=identity, args=FAST_LEASE)
        for identity in ("replica-a", "replica-b")
    }
    coordination = client.CoordinationV1Api(kube)

    def lease() -> Any:
        return coordination.read_namespaced_lease("enclave-config", home)

    return name, suffix, replicas, lease


def test_standby_takes_over_when_the_leader_stops(start_config: Start, kube: Any) -> None:
    name, suffix, replicas, lease = _two_replicas(start_config, kube)
    custom = client.CustomObjectsApi(kube)

    def holder() -> str | None:
        return lease().spec.holder_identity or None

    leader = poll(holder, what="a lease holder")
    assert leader in replicas
    rbac = client.RbacAuthorizationV1Api(kube)
    poll(lambda: rbac.read_cluster_role_binding(f"prov-{suffix}"), what="provisioner binding")

    replicas[leader].process.stop()  # graceful: the lease is released, not left to expire
    # Within one retry period, not a lease duration: the stopping leader released the lease.
    successor = poll(lambda: (h := holder()) and h != leader and h, timeout=RETRY_PERIOD + 3, what="a new lease holder")
    assert successor in replicas

    # The new leader writes: a change to the users reaches the provisioner binding.
    custom.patch_cluster_custom_object(
        "enclave.dev", "v1beta2", "serviceconfigurations", name, {"spec": {"users": [{"kind": "Group", "name": "g2"}]}}
    )

    def subjects() -> set[tuple[str, str]]:
        return {(s.kind, s.name) for s in rbac.read_cluster_role_binding(f"prov-{suffix}").subjects or []}

    poll(lambda: subjects() == {("Group", "g2")}, what="binding updated by the new leader")


def test_standby_takes_over_within_the_lease_when_the_leader_is_killed(start_config: Start, kube: Any) -> None:
    name, suffix, replicas, lease = _two_replicas(start_config, kube)
    leader = poll(lambda: lease().spec.holder_identity, what="a lease holder")
    rbac = client.RbacAuthorizationV1Api(kube)
    poll(lambda: rbac.read_cluster_role_binding(f"prov-{suffix}"), what="provisioner binding")

    popen = replicas[leader].process.popen
    assert popen is not None
    popen.send_signal(signal.SIGKILL)  # no release: the lease has to expire
    # The standby judges expiry from when it last saw the Lease change: one lease duration, plus one retry.
    successor = poll(
        lambda: (h := lease().spec.holder_identity) != leader and h,
        timeout=LEASE_DURATION + RETRY_PERIOD + 3,
        interval=0.2,
        what="the standby holding the lease",
    )
    assert successor in replicas
    client.CustomObjectsApi(kube).patch_cluster_custom_object(
        "enclave.dev", "v1beta2", "serviceconfigurations", name, {"spec": {"users": [{"kind": "Group", "name": "g3"}]}}
    )
    poll(
        lambda: (
            {(s.kind, s.name) for s in rbac.read_cluster_role_binding(f"prov-{suffix}").subjects or []}
            == {("Group", "g3")}
        ),
        what="binding updated by the new leader",
    )


def test_a_leader_paused_past_its_lease_writes_nothing_when_it_resumes(start_config: Start, kube: Any) -> None:
    name, suffix, replicas, lease = _two_replicas(start_config, kube)
    leader = poll(lambda: lease().spec.holder_identity, what="a lease holder")
    paused = replicas[leader]
    rbac = client.RbacAuthorizationV1Api(kube)
    poll(lambda: rbac.read_cluster_role_binding(f"prov-{suffix}"), what="provisioner binding")
    # Steady state: the leader has written what it had to; its count of writes stops moving.
    previous: list[float] = [-1.0]

    def settled() -> bool:
        now = _metric(paused, "enclave_kube_fenced_writes_total", result="sent")
        steady, previous[0] = now == previous[0], now
        return steady

    poll(settled, interval=1.0, what="the leader's writes settling")
    sent_before = previous[0]
    popen = paused.process.popen
    assert popen is not None
    popen.send_signal(signal.SIGSTOP)
    try:
        successor = poll(
            lambda: (h := lease().spec.holder_identity) != leader and h,
            timeout=LEASE_DURATION + RETRY_PERIOD + 3,
            interval=0.2,
            what="the standby holding the lease",
        )
        taken = lease()
        # Work the paused leader would do when it resumes: its watches deliver this change at once.
        client.CustomObjectsApi(kube).patch_cluster_custom_object(
            "enclave.dev",
            "v1beta2",
            "serviceconfigurations",
            name,
            {"spec": {"users": [{"kind": "Group", "name": "g4"}]}},
        )
    finally:
        popen.send_signal(signal.SIGCONT)
    poll(
        lambda: (
            {(s.kind, s.name) for s in rbac.read_cluster_role_binding(f"prov-{suffix}").subjects or []}
            == {("Group", "g4")}
        ),
        what="binding updated by the new leader",
    )
    # The resumed replica has run its election again and found the lease held elsewhere...
    poll(
        lambda: _metric(paused, "enclave_leader_lease_requests_total", lease="enclave-config", result="held-elsewhere"),
        what="the resumed replica seeing the new holder",
    )
    assert _metric(paused, "enclave_leader_is_leader", lease="enclave-config") == 0
    # ...and wrote nothing: no write left it after the pause, and the Lease is still the successor's.
    assert _metric(paused, "enclave_kube_fenced_writes_total", result="sent") == sent_before
    now = lease()
    assert now.spec.holder_identity == successor
    assert now.spec.lease_transitions == taken.spec.lease_transitions

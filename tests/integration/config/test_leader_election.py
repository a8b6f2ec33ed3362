"""Two enclave-config replicas: one Lease holder writes, the standby takes over when it stops."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from kubernetes import client

from enclave_testing.components import RunningComponent
from enclave_testing.waiting import poll

Start = Callable[..., RunningComponent]


def test_standby_takes_over_when_the_leader_stops(start_config: Start, kube: Any) -> None:
    suffix = secrets.token_hex(3)
    name, home = f"cfg-{suffix}", f"ns-{suffix}"
    custom = client.CustomObjectsApi(kube)
    custom.create_cluster_custom_object(
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
    replicas = {identity: start_config(name, home, identity=identity) for identity in ("replica-a", "replica-b")}
    coordination = client.CoordinationV1Api(kube)

    def holder() -> str | None:
        return coordination.read_namespaced_lease("enclave-config", home).spec.holder_identity or None

    leader = poll(holder, what="a lease holder")
    assert leader in replicas
    rbac = client.RbacAuthorizationV1Api(kube)
    poll(lambda: rbac.read_cluster_role_binding(f"prov-{suffix}"), what="provisioner binding")

    replicas[leader].process.stop()  # graceful: the lease is released, not left to expire
    # Well within the 15s lease duration: the stopping leader released the lease.
    successor = poll(lambda: (h := holder()) and h != leader and h, timeout=8, what="a new lease holder")
    assert successor in replicas

    # The new leader writes: a change to the users reaches the provisioner binding.
    custom.patch_cluster_custom_object(
        "enclave.dev", "v1beta2", "serviceconfigurations", name, {"spec": {"users": [{"kind": "Group", "name": "g2"}]}}
    )

    def subjects() -> set[tuple[str, str]]:
        return {(s.kind, s.name) for s in rbac.read_cluster_role_binding(f"prov-{suffix}").subjects or []}

    poll(lambda: subjects() == {("Group", "g2")}, what="binding updated by the new leader")

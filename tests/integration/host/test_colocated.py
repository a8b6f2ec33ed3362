"""The co-located shape (issue 33): the controllers in one ``enclave-host`` process, admission apart.

Started as real processes on the real control plane: Tenants converge and admission decides as with a process
per component, and a SIGKILL of the shared process hands every component's Lease to a second host.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_core.runtime.host import CONTROLLERS
from enclave_testing.components import RunningHost, start_host
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, remove_configuration, start_tenancy
from enclave_testing.waiting import poll

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0
FAST_LEASE = [
    f"--lease-duration={LEASE_DURATION:g}",
    f"--renew-deadline={RENEW_DEADLINE:g}",
    f"--retry-period={RETRY_PERIOD:g}",
]
TAKEOVER_BOUND = LEASE_DURATION + RETRY_PERIOD + 5
"""A standby takes a Lease one lease duration after it last changed, then at its next retry (+5 s of slack for a
loaded host: six components take theirs in one process)."""


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    running = start_tenancy(
        control_plane,
        users=[{"kind": "Group", "name": "enclave.dev"}],
        colocated=True,
        pools=True,
        quotas=True,
        globalquotas=True,
        replication=True,
    )
    try:
        yield running
    finally:
        running.close()


def test_colocated_tenants_converge_and_admission_decides(stack: TenancyStack, impersonate: Callable[..., Any]) -> None:
    assert stack.host is not None
    assert sorted(stack.host.components) == sorted(CONTROLLERS)
    stack.host.wait_ready()
    tenant, alice, mallory = unique("solar"), unique("alice"), unique("mallory")
    stack.tenant(tenant, [{"kind": "User", "name": alice}])
    owner = client.CoreV1Api(impersonate(alice, ["enclave.dev"]))
    name = f"{tenant}-dev"
    create_namespace(owner.api_client, name)
    labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
    assert labels.get(TENANT_LABEL) == tenant
    poll(
        lambda: stack.tenant_status(tenant).get("namespaces") == [name],
        what="enclave-tenants (hosted) reporting the namespace",
    )

    def owner_can_write() -> bool:  # enclave-tenants bound the owner's roles in it
        try:
            owner.create_namespaced_config_map(name, {"metadata": {"generateName": "cm-"}})
        except ApiException:
            return False
        return True

    poll(owner_can_write, what="the owner writing in her namespace")
    stranger = client.CoreV1Api(impersonate(mallory, ["enclave.dev"]))
    with pytest.raises(ApiException) as refused:
        stranger.create_namespace({"metadata": {"name": f"{tenant}-stolen"}})
    assert refused.value.status == 403, refused.value.body


def _start(plane: ControlPlane, namespace: str, config: str, identity: str) -> RunningHost:
    return start_host(
        list(CONTROLLERS),
        kubeconfig=plane.kubeconfig,
        log_dir=plane.log_dir,
        namespace=namespace,
        args=lambda spec: [f"--service-configuration-name={config}"] if spec.name == "config" else [],
        common=FAST_LEASE,
        identity=identity,
        log_name=identity,
    )


def test_sigkill_of_the_host_hands_every_lease_over(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str]
) -> None:
    home, config = unique("host-home"), unique("host-config")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": home}})
    leases = client.CoordinationV1Api(kube)
    first = second = None
    try:
        first = _start(control_plane, home, config, unique("host-a"))
        first.wait_ready(90)

        def holders() -> dict[str, str]:
            found = {}
            for name in CONTROLLERS:
                try:
                    lease = leases.read_namespaced_lease(f"enclave-{name}", home)
                except ApiException:
                    continue
                found[name] = str(lease.spec.holder_identity or "")
            return found

        held = poll(
            lambda: (h := holders()) and len(h) == len(CONTROLLERS) and len(set(h.values())) == 1 and h,
            what="one host holding every Lease",
        )
        leader = next(iter(held.values()))
        second = _start(control_plane, home, config, unique("host-b"))
        second.wait_ready(90)
        standby = second.process.name
        assert first.process.popen is not None
        first.process.popen.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        taken: dict[str, float] = {}

        def all_taken() -> bool:
            for name, holder in holders().items():
                if holder == standby:
                    taken.setdefault(name, time.monotonic() - killed)
            return len(taken) == len(CONTROLLERS)

        try:
            poll(all_taken, timeout=TAKEOVER_BOUND, interval=0.2, what=f"all {len(CONTROLLERS)} Leases taken over")
        finally:
            print(f"\nLeases taken over after the SIGKILL of {leader}: {taken} (holders now {holders()})")
        second.wait_ready(30)
    finally:
        for running in (first, second):
            if running is not None:
                running.process.stop()
        remove_configuration(kube, config)
        core.delete_namespace(home)

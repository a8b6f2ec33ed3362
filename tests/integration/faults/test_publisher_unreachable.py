"""Faults: the Tenancy publisher (enclave-tenants) unreachable for longer than admission's staleness bound.

enclave-tenants is paused (SIGSTOP: its connections stay open, it never speaks again, the way a stuck or
partitioned publisher looks). Tenancy is a core snapshot (every hook reads it), so past ``--snapshot-staleness``
admission's ``/readyz`` must report the ``snapshot:Tenancy`` gate closed, saying why (the Service would drop the
replica; an optional publisher's outage leaves the replica ready instead, ``tests/security/test_readiness_cascade.py``),
while the reviews it still gets are
decided from the last good snapshot, as docs/architecture.md ("What admission decides meanwhile") says: an
owner's namespace is admitted into its tenant and a stranger's claim on that tenant is refused; nothing fails
open. Resumed, the publisher catches up: the gate reopens and the namespace admitted meanwhile is reported in
the tenant's status (nothing lost).
"""

from __future__ import annotations

import contextlib
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.components import RunningComponent
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

STALENESS = 4.0
USERS = "fault-users"


def _readyz(running: RunningComponent) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{running.probe_url}/readyz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    running = start_tenancy(
        control_plane, [{"kind": "Group", "name": USERS}], admission_args=[f"--snapshot-staleness={STALENESS:g}s"]
    )
    try:
        yield running
    finally:
        for process in running.processes:
            if process.process.popen is not None and process.process.running:
                process.process.popen.send_signal(signal.SIGCONT)
        running.close()


def test_admission_is_not_ready_past_the_bound_and_decides_from_the_last_good_snapshot(stack: TenancyStack) -> None:
    components = {running.spec.name: running for running in stack.processes}
    admission, tenants = components["admission"], components["tenants"]
    tenant, owner, stranger = unique("stale"), unique("owner"), unique("stranger")
    stack.tenant(tenant, [{"kind": "User", "name": owner}])
    as_owner = stack.plane.impersonate(owner, [USERS])
    as_stranger = client.CoreV1Api(stack.plane.impersonate(stranger, [USERS]))
    core = client.CoreV1Api(stack.kube)
    created = [f"{tenant}-before"]
    try:
        create_namespace(as_owner, created[0])  # admission knows the tenant: its snapshot arrived
        poll(lambda: _readyz(admission)[0] == 200, what="admission ready")

        popen = tenants.process.popen
        assert popen is not None
        popen.send_signal(signal.SIGSTOP)
        # Every kind enclave-tenants publishes (Tenancy, Rules) goes stale; Tenancy is the one asserted on.
        code, body = poll(
            lambda: (r := _readyz(admission))[0] != 200 and "snapshot:Tenancy" in r[1] and r,
            timeout=STALENESS * 4 + 10,
            what="admission not ready (snapshot:Tenancy) past the staleness bound",
        )
        assert code == 503
        assert "the Tenancy snapshot is stale" in body, body

        # Decisions meanwhile come from the last good snapshot: the owner is admitted, the stranger is not.
        created.append(f"{tenant}-during")
        client.CoreV1Api(as_owner).create_namespace({"metadata": {"name": created[-1]}})
        labels = core.read_namespace(created[-1]).metadata.labels or {}
        assert labels.get(TENANT_LABEL) == tenant
        with pytest.raises(ApiException) as refused:
            as_stranger.create_namespace({"metadata": {"name": f"{tenant}-stranger", "labels": {TENANT_LABEL: tenant}}})
        assert refused.value.status == 403, refused.value.body

        popen.send_signal(signal.SIGCONT)
        poll(lambda: _readyz(admission)[0] == 200, timeout=30, what="admission ready again")
        poll(
            lambda: sorted(stack.tenant_status(tenant).get("namespaces") or []) == sorted(created),
            timeout=60,
            what="the namespace admitted meanwhile in the tenant's status",
        )
    finally:
        for name in created:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)

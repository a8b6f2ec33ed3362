"""Readiness cascade: one stale optional publisher must not take every admission hook down with it.

A tenant who can freeze enclave-replication (before its renders ran in a sandbox, one heavy template did) made
admission's Replication snapshot go stale; past ``--snapshot-staleness`` every admission replica reported unready,
the Service had no endpoints, and every fail-closed hook in the cluster denied: no tenant could create a
namespace. Now readiness follows the core snapshots (configuration, Tenancy, Rules) only, and a stale optional
snapshot stops the hooks that read it, failing closed with a reason that names it
(docs/architecture.md, "Who an outage blocks").

enclave-replication is paused (SIGSTOP: its connections stay open and silent, as a frozen or partitioned
publisher looks) past admission's 4 s bound.
"""

from __future__ import annotations

import contextlib
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import RunningComponent
from enclave_testing.controlplane import ControlPlane
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, as_user, owned_namespace

STALENESS = 4.0
MANAGED = "enclave.dev/managed-by"


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """The tenancy core with enclave-replication, admission subscribed to it with a 4 s staleness bound."""
    running = start_tenancy(
        control_plane,
        [{"kind": "Group", "name": USERS}],
        admission_args=[f"--snapshot-staleness={STALENESS:g}s"],
        replication=True,
    )
    try:
        yield running
    finally:
        for process in running.processes:
            if process.process.popen is not None and process.process.running:
                process.process.popen.send_signal(signal.SIGCONT)
        running.close()


def component(stack: TenancyStack, name: str) -> RunningComponent:
    return next(running for running in stack.processes if running.spec.name == name)


def readyz(running: RunningComponent) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{running.probe_url}/readyz", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def refusal(call: Callable[[], Any]) -> str:
    """The body of the 403 ``call`` gets ('' when it passes)."""
    try:
        call()
    except ApiException as err:
        if err.status != 403:
            raise
        return str(err.body)
    return ""


def test_a_stale_replication_snapshot_stops_only_the_replication_hooks_is_refused(
    stack: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    admission, replication = component(stack, "admission"), component(stack, "replication")
    owner = "readiness-owner"
    tenant, home = owned_namespace(stack, impersonate, owner)
    core = client.CoreV1Api(stack.kube)
    as_owner = client.CoreV1Api(as_user(impersonate, owner))
    # Labelled as replication labels what it manages, so the replication protection hook judges its updates.
    core.create_namespaced_config_map(home, {"metadata": {"name": "judged", "labels": {MANAGED: "someone"}}})

    def patch() -> None:
        as_owner.patch_namespaced_config_map("judged", home, {"data": {"touched": "yes"}})

    patch()  # not in the Replication snapshot: the hook lets the owner change it
    poll(lambda: readyz(admission) == (200, "ok\n"), timeout=30, what="admission ready with every snapshot fresh")
    popen = replication.process.popen
    assert popen is not None
    created: list[str] = []
    popen.send_signal(signal.SIGSTOP)
    try:
        status, body = poll(
            lambda: (r := readyz(admission))[1].startswith("ok; degraded: snapshot:Replication") and r,
            timeout=STALENESS * 4 + 20,
            what="admission ready but degraded by the stale Replication snapshot",
        )
        assert status == 200, body
        assert "the Replication snapshot is stale" in body

        # The namespace hooks keep deciding: the owner's namespace create passes both of them.
        created.append(f"{tenant}-during")
        as_owner.create_namespace({"metadata": {"name": created[-1]}})
        # The replication hook fails closed, saying why.
        refused = refusal(patch)
        assert "the Replication snapshot is stale" in refused, refused
        assert "fail closed" in refused, refused
    finally:
        popen.send_signal(signal.SIGCONT)
        for name in created:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
    poll(lambda: refusal(patch) == "", timeout=30, what="the replication hook deciding again once fresh")
    poll(lambda: readyz(admission) == (200, "ok\n"), timeout=30, what="admission no longer degraded")

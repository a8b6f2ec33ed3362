"""A dead publisher is noticed: a real subscriber's readiness closes past its staleness bound and reopens.

enclave-config (publisher of ConfigService) and enclave-tenants (its subscriber, with a 4 s staleness bound,
so heartbeats every second) run as processes. Pausing enclave-config (SIGSTOP: its connections stay open, it
just never speaks again) must close enclave-tenants' ``snapshot:ServiceConfiguration`` gate (a core snapshot: ``/readyz`` says it is stale
and since when); resuming it reopens the gate without a restart.
"""

from __future__ import annotations

import secrets
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.waiting import poll

TENANTS = next(spec for spec in COMPONENTS if spec.name == "tenants")


def _readyz(running: RunningComponent) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{running.probe_url}/readyz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_paused_publisher_closes_the_subscribers_gate_until_it_resumes(
    start_config: Callable[..., RunningComponent], control_plane: ControlPlane, kube: Any
) -> None:
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
    config = start_config(name, home)
    tenants = start_component(
        TENANTS,
        kubeconfig=control_plane.kubeconfig,
        log_dir=control_plane.log_dir,
        namespace=home,
        endpoints={"config": config.grpc_target},
        args=["--resync=5s", "--snapshot-staleness=4s", "--no-leader-elect"],
        identity=f"tenants-{suffix}",
    )
    popen = config.process.popen
    assert popen is not None
    try:
        # At once after the first snapshot, before any heartbeat: the bound must apply all the same.
        assert _readyz(tenants)[0] == 200
        popen.send_signal(signal.SIGSTOP)
        _, body = poll(
            lambda: (r := _readyz(tenants))[0] == 503 and r, timeout=30, interval=0.5, what="the gate closing"
        )
        assert "snapshot:ServiceConfiguration (the ServiceConfiguration snapshot is stale" in body, body
    finally:
        popen.send_signal(signal.SIGCONT)
    poll(lambda: _readyz(tenants)[0] == 200, timeout=30, interval=0.5, what="the gate reopening")
    tenants.process.stop()

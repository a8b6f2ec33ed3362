"""`tox -e up` (the main job on a fresh machine): everything comes up, a tenant owner can use it, Ctrl-C stops it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client

from enclave_testing.clients import api_client
from enclave_testing.waiting import poll


def test_up_serves_tenants_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "enclave_testing.up", "--workdir", str(tmp_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        while "Enclave is up." not in log.read_text():
            assert up.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        for component in ("config", "tenants", "pools", "admission"):
            assert f"component {component}: ready" in text
        assert "Tenant/solar" in text
        kubeconfig = tmp_path / "kubeconfig"
        assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"].startswith(
            "https://127.0.0.1:"
        )

        # What the guide tells a user to try: alice (sample tenant solar) creates a namespace and owns it.
        alice = client.CoreV1Api(api_client(kubeconfig, user="alice", groups=["enclave.dev"]))
        alice.create_namespace({"metadata": {"name": "solar-dev"}})
        admin = client.CoreV1Api(api_client(kubeconfig))
        assert admin.read_namespace("solar-dev").metadata.labels["enclave.dev/tenant"] == "solar"
        # The sample GlobalTenantResource replicates its NetworkPolicy into the new namespace of the dev tenant.
        networking = client.NetworkingV1Api(api_client(kubeconfig))
        poll(lambda: networking.read_namespaced_network_policy("same-namespace-only", "solar-dev"))
        rbac = client.RbacAuthorizationV1Api(api_client(kubeconfig))
        poll(
            lambda: (
                "enclave-user-alice-admin"
                in {rb.metadata.name for rb in rbac.list_namespaced_role_binding("solar-dev").items}
            )
        )
        # The sample pool: alice claims in her namespace without naming the pool; admission assigns it and
        # enclave-pools binds the claim into the namespace's quota.
        claims = client.CustomObjectsApi(api_client(kubeconfig, user="alice", groups=["enclave.dev"]))
        claim = {"apiVersion": "enclave.dev/v1beta2", "kind": "ResourcePoolClaim", "metadata": {"name": "web"}}

        def claimed() -> bool:
            body = {**claim, "spec": {"claim": {"requests.cpu": "1"}}}
            created = claims.create_namespaced_custom_object(
                "enclave.dev", "v1beta2", "solar-dev", "resourcepoolclaims", body
            )
            return bool(created["spec"]["pool"] == "solar-compute")

        poll(claimed, what="alice's claim (once her admin role includes claims)")

        def quota() -> dict[str, str]:
            found = admin.read_namespaced_resource_quota("enclave-pool-solar-compute", "solar-dev")
            return dict(found.spec.hard or {})

        poll(lambda: quota() == {"pods": "5", "requests.cpu": "1", "requests.memory": "0"}, what="claim in the quota")
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    assert up.returncode == 0, log.read_text()
    assert "[enclave-up] stopping" in log.read_text()

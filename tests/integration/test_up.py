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
        _assert_every_running_component_has_its_hooks(tmp_path / "kubeconfig", text)
        assert "Tenant/solar" in text
        kubeconfig = tmp_path / "kubeconfig"
        assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"].startswith(
            "https://127.0.0.1:"
        )

        # What the guide tells a user to try, pasted as printed into a shell that has no kubectl of its own:
        # alice (sample tenant solar) creates a namespace, owns it and writes in it.
        pasted = _guide_commands(text)
        assert any("create namespace solar-dev" in line for line in pasted), text
        shell = subprocess.run(
            ["bash", "-euc", "\n".join(pasted)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert "solar-dev" in shell.stdout, shell.stdout
        assert "hello" in shell.stdout, shell.stdout
        admin = client.CoreV1Api(api_client(kubeconfig))
        assert admin.read_namespace("solar-dev").metadata.labels["enclave.dev/tenant"] == "solar"
        # enclave-proxy runs as the chart installs it; alice's own kubeconfig for it lists her tenant's only
        assert "component proxy: ready at https://127.0.0.1:" in text
        assert _through_proxy(tmp_path, "alice") == ["namespace/solar-dev"]
        assert _through_proxy(tmp_path, "bob") == ["namespace/solar-dev"]  # bob owns solar by his TenantOwner
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


def _assert_every_running_component_has_its_hooks(kubeconfig: Path, log: str) -> None:
    """What `tox -e up` runs is wired whole: each running component's hooks are registered (the global quota
    hooks were once left out, and a GlobalResourceQuota of 5 admitted 7), and `enclave doctor` says so."""
    from enclave_admission.defaults import hooks_by_component
    from enclave_cli.__main__ import main as enclave

    running = {name for name in hooks_by_component() if f"component {name}: ready" in log}
    assert {"admission", "globalquotas", "quotas", "pools", "replication"} <= running, log
    registrations = client.AdmissionregistrationV1Api(api_client(kubeconfig))
    registered = {
        hook.name
        for configuration in (
            registrations.read_mutating_webhook_configuration("enclave-mutating-webhook-configuration"),
            registrations.read_validating_webhook_configuration("enclave-validating-webhook-configuration"),
        )
        for hook in configuration.webhooks or []
    }
    for name in sorted(running):
        assert hooks_by_component()[name] <= registered, (name, sorted(hooks_by_component()[name] - registered))
    code = enclave(["--enclave-namespace", "enclave-system", "doctor", "--kubeconfig", str(kubeconfig)])
    assert code == 0


def _through_proxy(workdir: Path, owner: str) -> list[str]:
    """``kubectl get namespaces -o name`` as a sample owner with the kubeconfig `tox -e up` wrote for the proxy."""
    from enclave_testing.binaries import ensure

    kubeconfig = workdir / "proxy" / f"{owner}.kubeconfig"
    done = subprocess.run(
        [str(ensure("kubectl")["kubectl"]), f"--kubeconfig={kubeconfig}", "get", "namespaces", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def _guide_commands(log: str) -> list[str]:
    """The shell lines of the printed guide (``export ...`` and ``kubectl ...``), as a user would paste them."""
    guide = log.split("Try it in another shell", 1)[1].split("# or from Python", 1)[0]
    return [line.strip() for line in guide.splitlines() if line.strip().startswith(("export ", "kubectl "))]

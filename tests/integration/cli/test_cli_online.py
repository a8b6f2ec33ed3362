"""The online verbs against the real control plane: tenants, cordon/uncordon, promote, quota, doctor.

They run against the stack of ``conftest.cluster`` (the policy directory's tenants) with the control plane's
admin kubeconfig; cordon and promote act on a tenant of their own, so the policy cases never see them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from enclave_cli.__main__ import main
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import GROUP, VERSION, Remote


def _run(capsys: pytest.CaptureFixture[str], plane: ControlPlane, *argv: str) -> tuple[int, str, str]:
    verb, *rest = argv
    code = main([verb, "--kubeconfig", str(plane.kubeconfig), *rest])
    out, err = capsys.readouterr()
    return code, out, err


def test_tenants_lists_size_quota_cordoned_ready(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, control_plane, "tenants", "-o", "json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["cli-acme"] == {
        "name": "cli-acme",
        "namespaces": 2,
        "quota": 3,
        "cordoned": False,
        "ready": "True (Active)",
        "owners": "User alice",
    }
    assert rows["cli-beta"]["cordoned"] is True
    code, out, _ = _run(capsys, control_plane, "tenants")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["NAME", "NAMESPACES", "QUOTA", "CORDONED", "READY", "OWNERS"]
    assert any(line.split()[:4] == ["cli-gamma", "1", "1", "False"] for line in lines)


def test_cordon_uncordon_and_promote(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, _ = cluster
    tenant = unique("cli-online")
    stack.tenant(tenant, [{"kind": "User", "name": "olga"}])
    custom = client.CustomObjectsApi(stack.kube)

    def cordoned() -> bool:
        return bool(custom.get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)["spec"].get("cordoned"))

    code, out, _ = _run(capsys, control_plane, "cordon", tenant)
    assert (code, out.strip()) == (0, f"tenant {tenant} cordoned: no namespace can be created or deleted in it")
    assert cordoned()
    code, out, _ = _run(capsys, control_plane, "cordon", tenant)
    assert out.strip() == f"tenant {tenant} is already cordoned"
    code, out, _ = _run(capsys, control_plane, "uncordon", tenant)
    assert code == 0
    assert not cordoned()
    code, _, err = _run(capsys, control_plane, "cordon", "cli-no-such-tenant")
    assert code == 2
    assert err == "enclave: tenant 'cli-no-such-tenant': not found\n"

    namespace = f"{tenant}-apps"
    core = client.CoreV1Api(stack.kube)
    core.create_namespace({"metadata": {"name": namespace, "labels": {"enclave.dev/tenant": tenant}}})
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "deployer"}})
        code, out, _ = _run(capsys, control_plane, "promote", f"{namespace}/deployer")
        assert code == 0, out
        labels = core.read_namespaced_service_account("deployer", namespace).metadata.labels
        assert labels == {"enclave.dev/promoted": "true"}
        account = {"kind": "ServiceAccount", "name": f"system:serviceaccount:{namespace}:deployer"}
        poll(
            lambda: any(
                {"kind": o["kind"], "name": o["name"]} == account
                for o in stack.tenant_status(tenant).get("owners") or []
            ),
            what="the promoted account among the tenant's owners",
        )
        code, out, _ = _run(capsys, control_plane, "promote", "deployer", "-n", namespace, "--undo")
        assert code == 0
        assert not core.read_namespaced_service_account("deployer", namespace).metadata.labels
    finally:
        core.delete_namespace(namespace)


def test_quota_lists_pools_claims_and_shared_quotas(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, control_plane, "quota", "cli-acme-prod")
    assert code == 0
    assert "ResourcePoolClaims" in out
    claims = out.split("ResourcePoolClaims", 1)[1]
    assert any(line.split()[:2] == ["cli-acme-prod", "cli-claim"] for line in claims.splitlines())
    code, out, _ = _run(capsys, control_plane, "quota", "cli-gamma-one")
    assert code == 0
    assert out.splitlines()[0] == "GlobalResourceQuotas"
    assert out.splitlines()[2].split()[:4] == ["cli-shared", "1", "pods=1,requests.cpu=500m", "pods=2,requests.cpu=1"]
    code, out, _ = _run(capsys, control_plane, "quota", "cli-beta-one")
    assert code == 0
    assert out.strip() == "no custom quotas, global quotas or resource pools covering namespace cli-beta-one"


def test_doctor_on_a_healthy_stack(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, _ = cluster
    grpc = [f"--grpc={p.spec.name}={p.grpc_target}" for p in stack.processes if p.spec.grpc]
    probes = [f"--admission-probe={p.probe_url}" for p in stack.processes if p.spec.name == "admission"]
    # The streams are mutual TLS, as in a cluster: the doctor presents admission's client certificate.
    assert stack.certificates is not None
    argv = ["--config", stack.config_name, *grpc, *probes, *stack.certificates.subscriber_args("admission")]
    code = main(
        ["--enclave-namespace", stack.namespace, "doctor", "--kubeconfig", str(control_plane.kubeconfig), *argv]
    )
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert "FAIL" not in out
    assert f"ok    ServiceConfiguration {stack.config_name}: Ready True (Applied)" in out
    assert f"validating webhook configuration {stack.config_name}-validating:" in out
    assert "every one with a caBundle" in out
    assert f"serving certificate in {stack.namespace}/enclave-tls" in out
    assert "config (127.0.0.1:" in out
    assert "gRPC health: SERVING" in out
    assert "tenants publishes " in out
    assert "Tenancy revision " in out
    assert "config publishes " in out
    assert f"ok    admission at {probes[0].split('=', 1)[1]} /readyz: ok" in out
    assert "decides from Tenancy revision " in out
    assert "you may patch tenants (enclave cordon/uncordon)" in out
    for component in ("globalquotas", "pools", "quotas", "tenants"):
        if component in {p.spec.name for p in stack.processes} and component != "tenants":
            assert f"enclave-{component} runs and its " in out


def test_doctor_fails_when_a_running_component_has_no_hooks(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    """A component that holds its Lease while its hooks are missing from the webhook configurations is a
    silent hole (its kinds go unjudged): doctor names it. The stack runs no enclave-replication; a held,
    fresh Lease of that name is what a replica running elsewhere leaves."""
    stack, _ = cluster
    coordination = client.CoordinationV1Api(stack.kube)
    now = datetime.now(UTC)
    lease = {
        "metadata": {"name": "enclave-replication"},
        "spec": {
            "holderIdentity": "replica-elsewhere",
            "leaseDurationSeconds": 15,
            "renewTime": now,
            "acquireTime": now,
        },
    }
    coordination.create_namespaced_lease(stack.namespace, lease)
    try:
        argv = ["--config", stack.config_name]
        code = main(
            ["--enclave-namespace", stack.namespace, "doctor", "--kubeconfig", str(control_plane.kubeconfig), *argv]
        )
        out, _ = capsys.readouterr()
        assert code == 1, out
        assert "FAIL  enclave-replication runs but its hooks are not registered: " in out
        assert "replication.enclave.dev" in out or "replication" in out.split("not registered: ", 1)[1]
    finally:
        coordination.delete_namespaced_lease("enclave-replication", stack.namespace)


def test_doctor_reports_what_is_wrong(
    cluster: tuple[TenancyStack, Remote], control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, control_plane, "doctor", "--config", "cli-absent")
    assert code == 2
    assert err == "enclave: ServiceConfiguration 'cli-absent': not found\n"
    stack, _ = cluster
    flags = ["--config", stack.config_name, "--grpc", "nothing=127.0.0.1:1"]
    code = main(["--enclave-namespace", "cli-nowhere", "doctor", "--kubeconfig", str(control_plane.kubeconfig), *flags])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "FAIL  Secret cli-nowhere/enclave-tls: not found" in out
    assert "FAIL  nothing (127.0.0.1:1, plaintext) gRPC: UNAVAILABLE" in out


def _completion_env() -> dict[str, str]:
    """``enclave`` (the console script beside this interpreter) first on PATH, as an installed shell has it."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_completion_lists_the_clusters_tenants(
    control_plane: ControlPlane, cluster: tuple[TenancyStack, Remote]
) -> None:
    kubeconfig = str(control_plane.kubeconfig)
    script = subprocess.run(
        [sys.executable, "-m", "enclave_cli", "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    driver = (
        script
        + f"COMP_WORDS=(enclave cordon --kubeconfig {kubeconfig} cli-a); COMP_CWORD=4; _enclave; "
        + 'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    answer = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, env=_completion_env(), check=True)
    assert answer.stdout.split() == ["cli-acme"]
    fish = shutil.which("fish")
    if fish is not None:  # fish completes a whole command line on request
        script = subprocess.run(
            [sys.executable, "-m", "enclave_cli", "completion", "fish"], capture_output=True, text=True, check=True
        ).stdout
        command = f"uncordon --kubeconfig {kubeconfig} cli-"
        answer = subprocess.run(
            [fish, "--no-config", "-c", script + f"\ncomplete -C 'enclave {command}'"],
            capture_output=True,
            text=True,
            env=_completion_env(),
            check=True,
        )
        assert {"cli-acme", "cli-beta", "cli-gamma"} <= set(answer.stdout.split())

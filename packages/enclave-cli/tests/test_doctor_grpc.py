"""``enclave doctor``'s gRPC checks against a real snapshot publisher speaking mutual TLS, as in a cluster."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web

from enclave_cli.online import Report, _grpc_checks
from enclave_cli.output import Style
from enclave_core.pki import CertificateAuthority, issue_component_client
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.runtime.options import HostPort
from enclave_core.runtime.probes import ProbeServer, Readiness
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.server import SnapshotServer

CA = CertificateAuthority.generate("enclave-test-ca")
SERVING = CA.issue("enclave-tenants", dns_names=["enclave-tenants.enclave-system.svc"], server=True, client=True)
# The doctor presents admission's client certificate (publishers answer only the kinds its component may read;
# admission reads every kind a publisher serves).
CLIENT = issue_component_client(CA, "enclave-admission", timedelta(days=1))


@pytest.fixture
async def publisher() -> AsyncIterator[int]:
    """A TenantService publisher requiring client certificates of CA; Tenancy at revision 1, Rules at 2."""
    hub = SnapshotHub("test")
    hub.publish("Tenancy", b'{"tenants": []}')
    hub.publish("Rules", b"{}")
    server = SnapshotServer(
        "127.0.0.1:0", tls_source=lambda: (SERVING.cert_pem, SERVING.key_pem), client_ca=lambda: CA.pair.cert_pem
    )
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    await server.start()
    try:
        yield server.port
    finally:
        await server.stop(0)


def _args(tmp_path: Path, port: int, *, client: bool = True) -> argparse.Namespace:
    files = {"ca.crt": CA.pair.cert_pem, "tls.crt": CLIENT.cert_pem, "tls.key": CLIENT.key_pem}
    if not client:  # a certificate of another CA: the publisher must refuse it
        stranger = CertificateAuthority.generate("another-ca").issue("intruder", client=True, server=False)
        files.update({"tls.crt": stranger.cert_pem, "tls.key": stranger.key_pem})
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return argparse.Namespace(
        grpc=[f"tenants=127.0.0.1:{port}"],
        grpc_ca_file=str(tmp_path / "ca.crt"),
        grpc_client_cert=str(tmp_path / "tls.crt"),
        grpc_client_key=str(tmp_path / "tls.key"),
        grpc_server_name="enclave-tenants.enclave-system.svc",
        admission_probe=[],
    )


async def test_health_and_revisions_over_mutual_tls(publisher: int, tmp_path: Path) -> None:
    report = Report(Style(colour=False))
    await asyncio.to_thread(_grpc_checks, report, _args(tmp_path, publisher))
    assert report.failed == 0, report.lines
    assert report.lines == [
        f"ok    tenants (127.0.0.1:{publisher}, mutual TLS) gRPC health: SERVING",
        "ok    tenants publishes Rules revision 2, Tenancy revision 1",
    ]


async def test_a_client_certificate_of_another_ca_fails(publisher: int, tmp_path: Path) -> None:
    report = Report(Style(colour=False))
    await asyncio.to_thread(_grpc_checks, report, _args(tmp_path, publisher, client=False))
    assert report.failed == 1
    assert report.lines[0].startswith(f"FAIL  tenants (127.0.0.1:{publisher}, mutual TLS) gRPC: UNAVAILABLE")


@pytest.mark.parametrize(
    ("optional_ok", "core_ok", "verdict"),
    [(True, True, "ok  "), (False, True, "warn"), (False, False, "FAIL")],
    ids=["ready", "degraded", "not-ready"],
)
async def test_a_degraded_admission_replica_is_a_warning_not_a_failure(
    optional_ok: bool, core_ok: bool, verdict: str, tmp_path: Path
) -> None:
    """A replica whose optional publisher is away still decides every other hook (its /readyz answers 200 with
    "ok; degraded: ..."): doctor warns; only a closed gate fails."""
    readiness = Readiness()
    readiness.add("snapshots", ready=core_ok)
    readiness.add_check("replication-snapshot", lambda: optional_ok, gating=False, detail=lambda: "publisher away")
    probes = ProbeServer(HostPort("127.0.0.1", 0), readiness)
    runner = web.AppRunner(probes.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        args = _args(tmp_path, 0)
        args.grpc, args.admission_probe = [], [f"http://127.0.0.1:{port}"]
        report = Report(Style(colour=False))
        await asyncio.to_thread(_grpc_checks, report, args)
    finally:
        await runner.cleanup()
    assert report.lines[0].startswith(f"{verdict}  admission at http://127.0.0.1:{port} /readyz: "), report.lines
    assert report.failed == (0 if core_ok else 1)

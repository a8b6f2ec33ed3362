"""Kubeconfig and in-cluster connections, against a local HTTPS server that echoes who called.

The server asks for a client certificate (optional) and answers with the Authorization and Impersonate
headers it got and the client certificate's CN, so each test proves a source end to end: the CA trusted,
the certificate presented, the token or basic auth sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from enclave_core.kube.connection import (
    ConfigError,
    Connection,
    ExecCredentials,
    TokenFileCredentials,
    from_kubeconfig,
    in_cluster,
)
from enclave_core.kube.rest import Kube
from enclave_core.pki import CertificateAuthority, KeyPair
from enclave_testing.waiting import poll_async


@dataclass
class Server:
    url: str
    ca: CertificateAuthority
    client: KeyPair
    tokens: list[str]
    """Tokens answered with 401 (an expired one)."""


@pytest.fixture(scope="module")
def pki() -> tuple[CertificateAuthority, KeyPair, KeyPair]:
    ca = CertificateAuthority.generate("test-ca")
    server = ca.issue("apiserver", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    client = ca.issue("alice", organizations=["team"], server=False, client=True)
    return ca, server, client


@pytest.fixture
async def server(tmp_path: Path, pki: tuple[CertificateAuthority, KeyPair, KeyPair]) -> AsyncIterator[Server]:
    async with serve(tmp_path, *pki) as running:
        yield running


@contextlib.asynccontextmanager
async def serve(
    tmp_path: Path, ca: CertificateAuthority, server_pair: KeyPair, client: KeyPair
) -> AsyncIterator[Server]:
    (tmp_path / "server.crt").write_bytes(server_pair.cert_pem)
    (tmp_path / "server.key").write_bytes(server_pair.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.load_verify_locations(cadata=ca.pair.cert_pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL
    refused: list[str] = []

    async def who(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if auth.removeprefix("Bearer ") in refused:
            return web.json_response({"kind": "Status", "reason": "Unauthorized", "message": "expired"}, status=401)
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        cn = ""
        for rdn in (peer or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
        return web.json_response(
            {
                "authorization": auth,
                "impersonate": request.headers.get("Impersonate-User", ""),
                "groups": request.headers.get("Impersonate-Group", ""),
                "cn": cn,
                "path": request.path_qs,
            }
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", who)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Server(f"https://127.0.0.1:{port}", ca, client, refused)
    finally:
        await runner.cleanup()


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def who(connection: Connection) -> dict[str, Any]:
    try:
        return await Kube(connection, field_manager="test").get("/api/v1/namespaces")
    finally:
        await connection.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_files_relative_to_the_kubeconfig(tmp_path: Path, server: Server) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(server.ca.pair.cert_pem)
    (tmp_path / "pki" / "alice.crt").write_bytes(server.client.cert_pem)
    (tmp_path / "pki" / "alice.key").write_bytes(server.client.key_pem)
    path = kubeconfig(
        tmp_path / "config",
        {"server": server.url, "certificate-authority": "pki/ca.crt"},
        {"client-certificate": "pki/alice.crt", "client-key": "pki/alice.key"},
    )
    answer = await who(from_kubeconfig(path))
    assert answer["cn"] == "alice"
    assert answer["authorization"] == ""


async def test_data_fields_and_a_token(tmp_path: Path, server: Server) -> None:
    path = kubeconfig(
        tmp_path / "config",
        {"server": server.url, "certificate-authority-data": b64(server.ca.pair.cert_pem)},
        {
            "client-certificate-data": b64(server.client.cert_pem),
            "client-key-data": b64(server.client.key_pem),
            "token": "t0ken",
            "as": "bob",
            "as-groups": ["g1", "g2"],
        },
    )
    answer = await who(from_kubeconfig(path))
    assert answer == {
        "authorization": "Bearer t0ken",
        "impersonate": "bob",
        "groups": "g1,g2",
        "cn": "alice",
        "path": "/api/v1/namespaces",
    }


async def test_basic_auth(tmp_path: Path, server: Server) -> None:
    path = kubeconfig(
        tmp_path / "config",
        {"server": server.url, "certificate-authority-data": b64(server.ca.pair.cert_pem)},
        {"username": "admin", "password": "s3cret"},
    )
    answer = await who(from_kubeconfig(path))
    assert answer["authorization"] == "Basic " + b64(b"admin:s3cret")


async def test_the_server_is_verified_unless_told_not_to(tmp_path: Path, server: Server) -> None:
    other = CertificateAuthority.generate("someone-else")
    path = kubeconfig(
        tmp_path / "config", {"server": server.url, "certificate-authority-data": b64(other.pair.cert_pem)}, {}
    )
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await who(from_kubeconfig(path))
    path = kubeconfig(tmp_path / "insecure", {"server": server.url, "insecure-skip-tls-verify": True}, {"token": "x"})
    assert (await who(from_kubeconfig(path)))["authorization"] == "Bearer x"


async def test_tls_server_name(tmp_path: Path, pki: tuple[CertificateAuthority, KeyPair, KeyPair]) -> None:
    """A server whose certificate names only ``kube.internal``, reached by IP address."""
    ca, _, client = pki
    named = ca.issue("apiserver", dns_names=["kube.internal"])
    async with serve(tmp_path, ca, named, client) as running:
        cluster = {"server": running.url, "certificate-authority-data": b64(ca.pair.cert_pem)}
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await who(from_kubeconfig(kubeconfig(tmp_path / "plain", cluster, {"token": "x"})))
        cluster["tls-server-name"] = "kube.internal"
        answer = await who(from_kubeconfig(kubeconfig(tmp_path / "named", cluster, {"token": "x"})))
        assert answer["authorization"] == "Bearer x"


async def test_the_context_chooses_cluster_and_user(tmp_path: Path, server: Server) -> None:
    ca = b64(server.ca.pair.cert_pem)
    config = {
        "clusters": [
            {"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}},
            {"name": "live", "cluster": {"server": server.url, "certificate-authority-data": ca}},
        ],
        "users": [{"name": "a", "user": {"token": "a"}}, {"name": "b", "user": {"token": "b"}}],
        "contexts": [
            {"name": "one", "context": {"cluster": "dead", "user": "a"}},
            {"name": "two", "context": {"cluster": "live", "user": "b"}},
        ],
        "current-context": "one",
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    assert from_kubeconfig(path).host == "https://127.0.0.1:1"
    assert (await who(from_kubeconfig(path, "two")))["authorization"] == "Bearer b"


async def test_a_token_file_is_reread(tmp_path: Path, server: Server) -> None:
    (tmp_path / "token").write_text("first\n")
    path = kubeconfig(
        tmp_path / "config",
        {"server": server.url, "certificate-authority-data": b64(server.ca.pair.cert_pem)},
        {"tokenFile": "token"},
    )
    connection = from_kubeconfig(path)
    credentials = connection.credentials
    assert isinstance(credentials, TokenFileCredentials)
    now = [0.0]
    credentials.clock = lambda: now[0]
    credentials.invalidate()
    kube = Kube(connection, field_manager="test")
    assert (await kube.get("/"))["authorization"] == "Bearer first"
    (tmp_path / "token").write_text("second")
    now[0] = 30.0
    assert (await kube.get("/"))["authorization"] == "Bearer first", "read again only after a minute"
    now[0] = 61.0
    assert (await kube.get("/"))["authorization"] == "Bearer second"
    # Rotated in between and the old token refused: the 401 makes the file be read at once, and the request
    # is sent again with the new token.
    (tmp_path / "token").write_text("third")
    server.tokens.append("second")
    assert (await kube.get("/"))["authorization"] == "Bearer third"
    await connection.close()


EXEC_PLUGIN = """
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open(sys.argv[1], "a") as runs:
    runs.write(json.dumps({"info": info, "env": os.environ.get("PLUGIN_ENV")}) + "\\n")
status = json.loads(sys.argv[2])
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def exec_user(tmp_path: Path, status: dict[str, Any], api_version: str = "client.authentication.k8s.io/v1") -> Any:
    (tmp_path / "plugin.py").write_text(EXEC_PLUGIN)
    return {
        "exec": {
            "apiVersion": api_version,
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py"), str(tmp_path / "runs"), json.dumps(status)],
            "env": [{"name": "PLUGIN_ENV", "value": "set"}],
            "provideClusterInfo": True,
            "interactiveMode": "Never",
        }
    }


def runs(tmp_path: Path) -> list[Any]:
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


@pytest.mark.parametrize("api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
async def test_an_exec_token_is_cached_until_it_expires(tmp_path: Path, server: Server, api_version: str) -> None:
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster = {"server": server.url, "certificate-authority-data": b64(server.ca.pair.cert_pem)}
    path = kubeconfig(
        tmp_path / "config", cluster, exec_user(tmp_path, {"token": "ex", "expirationTimestamp": later}, api_version)
    )
    connection = from_kubeconfig(path)
    kube = Kube(connection, field_manager="test")
    assert (await kube.get("/"))["authorization"] == "Bearer ex"
    assert (await kube.get("/"))["authorization"] == "Bearer ex"
    [run] = runs(tmp_path)
    assert run["env"] == "set"
    assert run["info"]["spec"]["interactive"] is False
    assert run["info"]["spec"]["cluster"]["server"] == server.url
    credentials = connection.credentials
    assert isinstance(credentials, ExecCredentials)
    credentials.clock = lambda: datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)
    await kube.get("/")
    assert len(runs(tmp_path)) > 1, "run again once expired"
    await connection.close()


async def test_an_exec_client_certificate(tmp_path: Path, server: Server) -> None:
    cluster = {"server": server.url, "certificate-authority-data": b64(server.ca.pair.cert_pem)}
    status = {"clientCertificateData": server.client.cert_pem.decode(), "clientKeyData": server.client.key_pem.decode()}
    path = kubeconfig(tmp_path / "config", cluster, exec_user(tmp_path, status))
    answer = await who(from_kubeconfig(path))
    assert answer["cn"] == "alice"
    assert answer["authorization"] == ""


async def test_a_failing_exec_plugin_says_why(tmp_path: Path, server: Server) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys; print('no credentials for you', file=sys.stderr); sys.exit(3)")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}}
    path = kubeconfig(tmp_path / "config", {"server": server.url, "insecure-skip-tls-verify": True}, user)
    with pytest.raises(ConfigError, match="exited 3: no credentials for you"):
        await who(from_kubeconfig(path))


async def test_a_request_cancelled_while_its_exec_plugin_runs_is_cancelled(tmp_path: Path, server: Server) -> None:
    """The plugin's run is a timed wait: cancelling the request stops it there, it does not carry on."""
    started, release = tmp_path / "started", tmp_path / "release"
    script = tmp_path / "slow.py"
    script.write_text(
        "import pathlib, sys, time\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "deadline = time.monotonic() + 60\n"
        "while not pathlib.Path(sys.argv[2]).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "sys.exit(1)\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script), str(started), str(release)],
        }
    }
    path = kubeconfig(tmp_path / "config", {"server": server.url, "insecure-skip-tls-verify": True}, user)
    request = asyncio.create_task(who(from_kubeconfig(path)))
    try:
        await poll_async(started.exists, what="the plugin started")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    finally:
        release.touch()  # the plugin ends (a cancelled run leaves it to finish on its own)


@pytest.mark.parametrize(
    ("cluster", "user", "extra", "message"),
    [
        ({"server": "https://x"}, {}, {"current-context": ""}, "no current-context"),
        ({"server": "https://x"}, {}, {"current-context": "other"}, "no context named 'other'"),
        ({}, {}, {}, "cluster 'c' has no server"),
        (
            {"server": "https://x", "certificate-authority": "missing.crt"},
            {},
            {},
            "certificate-authority .*missing.crt",
        ),
        ({"server": "https://x"}, {"client-certificate-data": "eA=="}, {}, "no client-key"),
        ({"server": "https://x"}, {"auth-provider": {"name": "gcp"}}, {}, "auth-provider 'gcp' is not supported"),
        ({"server": "https://x", "proxy-url": "http://p"}, {}, {}, "proxy-url is not supported"),
        ({"server": "https://x"}, {"tokenFile": "nope"}, {}, "cannot read the token file .*nope"),
        ({"server": "https://x"}, {"username": "a"}, {}, "both username and password"),
        ({"server": "https://x"}, {"exec": {"apiVersion": "v2", "command": "x"}}, {}, "exec.apiVersion 'v2'"),
        ({"server": "https://x"}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}, {}, "exec.command"),
        (
            {"server": "https://x"},
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Always"}},
            {},
            "interactiveMode Always",
        ),
    ],
)
def test_what_cannot_be_used_is_named(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        from_kubeconfig(kubeconfig(tmp_path / "config", cluster, user, **extra))


def test_a_missing_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing-here"):
        from_kubeconfig(tmp_path / "nothing-here")
    with pytest.raises(ConfigError, match="several files"):
        from_kubeconfig(f"{tmp_path / 'a'}:{tmp_path / 'b'}")


@pytest.fixture
def service_account(tmp_path: Path, server: Server) -> Path:
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text("sa-token")
    (directory / "ca.crt").write_bytes(server.ca.pair.cert_pem)
    return directory


async def test_in_cluster(server: Server, service_account: Path) -> None:
    port = server.url.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    connection = in_cluster(env, service_account)
    assert connection.host == server.url
    assert (await who(connection))["authorization"] == "Bearer sa-token"
    assert in_cluster(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, service_account
    ).host == ("https://[fd00::1]:443")


def test_not_in_a_cluster(service_account: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster({}, service_account)
    with pytest.raises(ConfigError, match="token"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, service_account / "missing")


async def test_another_address_keeps_the_credentials(tmp_path: Path, server: Server) -> None:
    """Replication's ``impersonation.endpoint``: same credentials, its own CA or no verification."""
    path = kubeconfig(tmp_path / "config", {"server": "https://127.0.0.1:1"}, {"token": "mine"})
    base = from_kubeconfig(path)
    assert (await who(base.with_address(server.url, ca=server.ca.pair.cert_pem, verify=True)))["authorization"] == (
        "Bearer mine"
    )
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await who(base.with_address(server.url, ca=None, verify=True))
    assert (await who(base.with_address(server.url, ca=None, verify=False)))["authorization"] == "Bearer mine"


async def test_a_watch_event_larger_than_aiohttps_default_line_limit() -> None:
    """One watch event is one line; aiohttp refuses lines over twice its read buffer (128 KiB by default),
    and a ConfigMap alone may hold 1 MiB."""
    big = {"type": "ADDED", "object": {"metadata": {"name": "big"}, "data": {"k": "x" * 1_500_000}}}

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(json.dumps(big).encode() + b"\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/configmaps", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    connection = Connection(f"http://127.0.0.1:{port}")
    try:
        events = [
            e async for e in Kube(connection, field_manager="test").watch("/api/v1/configmaps", resource_version="1")
        ]
        assert events == [big]
    finally:
        await connection.close()
        await runner.cleanup()

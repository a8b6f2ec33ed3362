"""A connection to kube-apiserver: address, TLS, credentials and one pooled aiohttp session.

Components talk to the API in JSON over :class:`enclave_core.kube.rest.Kube`; all ``Kube`` needs underneath is
where the server is, how to trust it, who we are, and a connection pool. The ``kubernetes`` client package
gave us that at ~11 MB of RSS and ~300 imported modules per process (docs/decisions/0004-kube-client.md), so
this module does it on aiohttp (already loaded for /healthz and /metrics) and PyYAML.

Sources of a connection:

* :func:`from_kubeconfig`: one kubeconfig file, its ``current-context`` or a named one. Supported: ``server``,
  ``certificate-authority[-data]``, ``insecure-skip-tls-verify``, ``tls-server-name``; users with ``token``,
  ``tokenFile``, ``client-certificate[-data]``/``client-key[-data]``, ``username``/``password``, ``as``/
  ``as-groups`` (impersonation headers) and ``exec`` credential plugins (client.authentication.k8s.io/v1 and
  v1beta1). Refused with a message naming the field: ``auth-provider`` (the legacy gcp/azure/oidc plugins;
  use their ``exec`` replacements), ``proxy-url`` (``HTTPS_PROXY``/``NO_PROXY`` are honoured), ``exec.interactiveMode:
  Always``, a ``KUBECONFIG``-style list of files to merge.
* :func:`in_cluster`: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the pod's ServiceAccount token and CA.

Token files (``tokenFile`` and the in-cluster token) are re-read about every minute, as client-go does, so
bound ServiceAccount tokens keep working when the kubelet rotates them; an ``exec`` credential is cached
until its ``expirationTimestamp``. A 401 drops a cached credential and retries the request once.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import yaml

POOL_LIMIT = 100
"""Connections per process. Every watch holds one for its whole life (up to ~5 minutes), so this bounds
informers plus concurrent requests; the ``kubernetes`` client's aiohttp pool had the same default."""

CONNECT_TIMEOUT = 10.0
"""Seconds to open a TCP+TLS connection: an unreachable server fails fast instead of at the request timeout."""

READ_BUFFER = 2**21
"""aiohttp's line reader refuses a line over twice this; one watch event is one line, and an object may
be ~1.5 MiB in etcd (JSON of it larger)."""

TOKEN_REREAD = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go's period)."""

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

Clock = Callable[[], float]


class ConfigError(Exception):
    """A kubeconfig or in-cluster environment we cannot connect with; the message names what is wrong."""


# -- credentials ---------------------------------------------------------------------------------------------


class Credentials:
    """What a request carries to say who we are: headers, and possibly a client certificate."""

    refreshable = False
    """Whether :meth:`invalidate` can give a different credential (a 401 is then retried once)."""

    async def headers(self) -> dict[str, str]:
        return {}

    async def client_certificate(self) -> tuple[bytes, bytes] | None:
        """PEM certificate and key that credentials obtained at run time (an exec plugin) present in TLS."""
        return None

    def invalidate(self) -> None:
        """The server said 401: forget what is cached, so the next request fetches it anew."""


@dataclass
class StaticCredentials(Credentials):
    """A token or basic auth written in the kubeconfig itself (a client certificate lives in the SSL context)."""

    token: str | None = None
    basic: tuple[str, str] | None = None

    async def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic:
            pair = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}


@dataclass
class TokenFileCredentials(Credentials):
    """A bearer token read from a file and read again every :data:`TOKEN_REREAD` seconds (kubelet rotates
    projected ServiceAccount tokens in place)."""

    path: Path
    refreshable = True
    period: float = TOKEN_REREAD
    clock: Clock = time.monotonic
    _token: str = ""
    _read_at: float | None = None

    def token(self) -> str:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.period:
            try:
                token = self.path.read_text().strip()
            except OSError as err:
                if not self._token:
                    raise ConfigError(f"cannot read the token file {self.path}: {err}") from err
                token = self._token  # keep the last good token through a transient error
            self._token, self._read_at = token, now
        return self._token

    async def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    def invalidate(self) -> None:
        self._read_at = None


@dataclass
class ExecCredentials(Credentials):
    """An ``exec`` credential plugin (client.authentication.k8s.io ExecCredential): run the command, use the
    token or client certificate it prints, again after ``expirationTimestamp`` or a 401."""

    refreshable = True
    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    cluster: dict[str, Any] | None = None
    """Sent in ``spec.cluster`` when the kubeconfig asks for ``provideClusterInfo``."""
    timeout: float = 60.0
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    _status: dict[str, Any] | None = None
    _expires: datetime.datetime | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def status(self) -> dict[str, Any]:
        async with self._lock:
            if self._status is None or (self._expires is not None and self.clock() >= self._expires):
                self._status = await self._run()
                expires = self._status.get("expirationTimestamp")
                self._expires = _timestamp(expires) if expires else None
            return self._status

    async def _run(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        what = f"exec credential plugin {self.command!r}"
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as err:
            raise ConfigError(f"{what} cannot be run: {err}") from err
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: on Python 3.11 it can drop a cancellation
                out, err_out = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise ConfigError(f"{what} did not finish in {self.timeout:g} s") from None
        if proc.returncode != 0:
            raise ConfigError(f"{what} exited {proc.returncode}: {err_out.decode(errors='replace').strip()}")
        try:
            credential = json.loads(out)
        except ValueError as err:
            raise ConfigError(f"{what} printed no ExecCredential JSON: {err}") from err
        if not isinstance(credential, dict) or credential.get("kind") != "ExecCredential":
            raise ConfigError(f"{what} printed something other than an ExecCredential")
        if credential.get("apiVersion") != self.api_version:
            raise ConfigError(
                f"{what} answered apiVersion {credential.get('apiVersion')!r}, the kubeconfig asks for "
                f"{self.api_version!r}"
            )
        status = credential.get("status")
        if not isinstance(status, dict) or not (
            status.get("token") or (status.get("clientCertificateData") and status.get("clientKeyData"))
        ):
            raise ConfigError(f"{what} gave neither status.token nor status.clientCertificateData/clientKeyData")
        return status

    async def headers(self) -> dict[str, str]:
        token = (await self.status()).get("token")
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def client_certificate(self) -> tuple[bytes, bytes] | None:
        status = await self.status()
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            return status["clientCertificateData"].encode(), status["clientKeyData"].encode()
        return None

    def invalidate(self) -> None:
        self._status = None


def _timestamp(value: str) -> datetime.datetime:
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as err:
        raise ConfigError(f"exec credential expirationTimestamp {value!r} is not RFC 3339") from err
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


# -- TLS -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    """How to trust the server and what client certificate to present, as PEM bytes (loaded once into an
    :class:`ssl.SSLContext`; kept so a connection to another address can reuse or replace parts)."""

    ca: bytes | None = None
    """PEM CA bundle; None: the system's trust store."""
    verify: bool = True
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str | None = None

    def context(self, client: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.ca is not None:
            try:
                context.load_verify_locations(cadata=self.ca.decode())
            except (ssl.SSLError, ValueError) as err:
                raise ConfigError(f"the certificate authority is not valid PEM: {err}") from err
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        pair = client or ((self.cert, self.key) if self.cert and self.key else None)
        if pair is not None:
            _load_cert_chain(context, *pair)
        return context


def _load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` takes only paths: hand it an anonymous in-memory file (Linux ``memfd``), or else a
    file in a private directory removed at once, so key material never stays on disk."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("enclave-client-cert")
        try:
            os.write(fd, cert.rstrip(b"\n") + b"\n" + key)
            try:
                context.load_cert_chain(f"/proc/self/fd/{fd}")
            except ssl.SSLError as err:
                raise ConfigError(f"the client certificate and key do not load: {err}") from err
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="enclave-tls-") as directory:  # created 0700
        path = Path(directory) / "client.pem"
        path.touch(mode=0o600)
        path.write_bytes(cert.rstrip(b"\n") + b"\n" + key)
        try:
            context.load_cert_chain(str(path))
        except ssl.SSLError as err:
            raise ConfigError(f"the client certificate and key do not load: {err}") from err


# -- the connection ------------------------------------------------------------------------------------------


@dataclass
class Connection:
    """Where kube-apiserver is, how to reach it and as whom, and the pooled HTTP session to it.

    The session is made on first use (it must be created inside the running event loop) and shared by every
    request and watch of the process; :meth:`close` releases it.
    """

    host: str
    tls: Tls = field(default_factory=Tls)
    credentials: Credentials = field(default_factory=Credentials)
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    """Headers every request carries (a kubeconfig's ``as``/``as-groups`` impersonation)."""
    pool_limit: int = POOL_LIMIT
    _context: ssl.SSLContext | None = None
    _client_pair: tuple[bytes, bytes] | None = None
    _session: aiohttp.ClientSession | None = None

    def __post_init__(self) -> None:
        self.host = self.host.rstrip("/")
        if self.host.startswith("https://"):
            self._context = self.tls.context()

    def with_address(self, host: str, *, ca: bytes | None, verify: bool) -> Connection:
        """The same credentials against another address (replication's ``impersonation.endpoint``), with
        its own CA (None keeps ours) and verification; its own session, closed with :meth:`close`."""
        tls = replace(self.tls, ca=ca if ca is not None else self.tls.ca, verify=verify, server_name=None)
        return Connection(host, tls, self.credentials, dict(self.extra_headers), self.pool_limit)

    async def headers(self) -> dict[str, str]:
        """Credential and fixed headers for one request."""
        return {**self.extra_headers, **await self.credentials.headers()}

    async def _ssl(self) -> ssl.SSLContext | bool:
        if self._context is None:
            return False  # plain http (a local test server); aiohttp's "no TLS" value
        pair = await self.credentials.client_certificate()
        if pair is not None and pair != self._client_pair:
            self._context, self._client_pair = self.tls.context(pair), pair
        return self._context

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.pool_limit),
                trust_env=True,  # HTTPS_PROXY/NO_PROXY from the environment, as client-go honours them
                read_bufsize=READ_BUFFER,
            )
        return self._session

    async def request(
        self,
        method: str,
        path_and_query: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout: float | None = 30.0,  # noqa: ASYNC109 - aiohttp's own timeout, the connect phase bounded apart
    ) -> aiohttp.ClientResponse:
        """Send one request; the caller reads and releases the response. ``headers`` must already carry the
        credentials (:meth:`headers`); on a 401 they are fetched anew and the request is sent once more."""
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=CONNECT_TIMEOUT)
        kwargs: dict[str, Any] = {"ssl": await self._ssl(), "timeout": client_timeout}
        if self.tls.server_name:
            kwargs["server_hostname"] = self.tls.server_name
        url = self.host + path_and_query
        response = await self.session().request(method, url, headers=dict(headers), data=body, **kwargs)
        if response.status == 401 and self.credentials.refreshable:
            response.release()
            self.credentials.invalidate()
            fresh = {**headers, **await self.headers()}
            kwargs["ssl"] = await self._ssl()
            response = await self.session().request(method, url, headers=fresh, data=body, **kwargs)
        return response

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- sources -------------------------------------------------------------------------------------------------


def _named(items: Any, name: str, kind: str, source: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if not isinstance(body, dict):
                raise ConfigError(f"{source}: {kind} {name!r} has no {kind!r} section")
            return body
    raise ConfigError(f"{source}: no {kind} named {name!r} in {kind}s")


def _read_pem(section: dict[str, Any], key: str, base: Path, source: str) -> bytes | None:
    """``key-data`` (base64, wins as in kubectl) or ``key`` (a path, relative to the kubeconfig's directory)."""
    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True)
        except ValueError as err:
            raise ConfigError(f"{source}: {key}-data is not base64: {err}") from err
    path = section.get(key)
    if path:
        full = (base / Path(path).expanduser()).resolve()
        try:
            return full.read_bytes()
        except OSError as err:
            raise ConfigError(f"{source}: {key} {str(full)!r} cannot be read: {err}") from err
    return None


def _exec_credentials(spec: Any, cluster: dict[str, Any], base: Path, source: str) -> ExecCredentials:
    if not isinstance(spec, dict) or not spec.get("command"):
        raise ConfigError(f"{source}: user.exec.command is missing")
    api_version = spec.get("apiVersion")
    if api_version not in ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"):
        raise ConfigError(
            f"{source}: user.exec.apiVersion {api_version!r} is not supported "
            "(client.authentication.k8s.io/v1 or v1beta1)"
        )
    if spec.get("interactiveMode") == "Always":
        raise ConfigError(f"{source}: user.exec.interactiveMode Always needs a terminal, which a controller has not")
    command = str(spec["command"])
    if os.sep in command and not os.path.isabs(command):
        command = str((base / command).resolve())  # as client-go: a relative path is the kubeconfig's
    env = {}
    for entry in spec.get("env") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"{source}: user.exec.env entries need a name and a value")
        env[str(entry["name"])] = str(entry.get("value", ""))
    info = None
    if spec.get("provideClusterInfo"):
        info = {
            "server": cluster.get("server"),
            "tls-server-name": cluster.get("tls-server-name"),
            "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
            "certificate-authority-data": cluster.get("certificate-authority-data"),
        }
        if not info["certificate-authority-data"] and cluster.get("certificate-authority"):
            ca = _read_pem(cluster, "certificate-authority", base, source)
            info["certificate-authority-data"] = base64.b64encode(ca or b"").decode()
        info = {k: v for k, v in info.items() if v}
    return ExecCredentials(command, [str(a) for a in spec.get("args") or []], env, api_version, info)


def from_kubeconfig(path: str | Path, context: str | None = None) -> Connection:
    """A connection for ``context`` (default: ``current-context``) of the kubeconfig at ``path``."""
    path = Path(path).expanduser()
    source = str(path)
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as err:
        if os.pathsep in source:
            raise ConfigError(
                f"kubeconfig {source!r} names several files (a KUBECONFIG list): merging them is not supported, "
                "name one file"
            ) from err
        raise ConfigError(f"kubeconfig {source} cannot be read: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"kubeconfig {source} is not YAML: {err}") from err
    if not isinstance(config, dict):
        raise ConfigError(f"kubeconfig {source} is not a kubeconfig mapping")
    base = path.resolve().parent
    name = context or config.get("current-context")
    if not name:
        raise ConfigError(f"{source}: no context given and no current-context set")
    ctx = _named(config.get("contexts"), name, "context", source)
    if not ctx.get("cluster"):
        raise ConfigError(f"{source}: context {name!r} names no cluster")
    cluster = _named(config.get("clusters"), ctx["cluster"], "cluster", source)
    user = _named(config.get("users"), ctx["user"], "user", source) if ctx.get("user") else {}

    server = cluster.get("server")
    if not server:
        raise ConfigError(f"{source}: cluster {ctx['cluster']!r} has no server")
    if cluster.get("proxy-url"):
        raise ConfigError(f"{source}: cluster {ctx['cluster']!r}: proxy-url is not supported")
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise ConfigError(
            f"{source}: user {ctx.get('user')!r}: auth-provider {provider!r} is not supported (the legacy "
            "in-tree plugins are gone from kubectl too); use an exec credential plugin"
        )
    has_cert, has_key = (
        bool(user.get("client-certificate") or user.get("client-certificate-data")),
        bool(user.get("client-key") or user.get("client-key-data")),
    )
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise ConfigError(f"{source}: user {ctx.get('user')!r} has a client certificate or key but no {missing}")
    tls = Tls(
        ca=_read_pem(cluster, "certificate-authority", base, source),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        cert=_read_pem(user, "client-certificate", base, source),
        key=_read_pem(user, "client-key", base, source),
        server_name=cluster.get("tls-server-name") or None,
    )
    credentials: Credentials
    if user.get("exec"):
        credentials = _exec_credentials(user["exec"], cluster, base, source)
    elif user.get("token"):
        credentials = StaticCredentials(token=str(user["token"]))
    elif user.get("tokenFile"):
        credentials = TokenFileCredentials((base / Path(user["tokenFile"]).expanduser()).resolve())
        credentials.token()  # a missing file fails now, naming it
    elif user.get("username") or user.get("password"):
        if not (user.get("username") and user.get("password")):
            raise ConfigError(f"{source}: user {ctx.get('user')!r} needs both username and password")
        credentials = StaticCredentials(basic=(str(user["username"]), str(user["password"])))
    else:
        credentials = Credentials()  # a client certificate, or anonymous
    extra: dict[str, str] = {}
    if user.get("as"):
        extra["Impersonate-User"] = str(user["as"])
    if user.get("as-groups"):
        extra["Impersonate-Group"] = ",".join(str(g) for g in user["as-groups"])
    if user.get("as-uid"):
        extra["Impersonate-Uid"] = str(user["as-uid"])
    return Connection(str(server), tls, credentials, extra)


def in_cluster(
    environ: Mapping[str, str] | None = None,
    directory: Path = IN_CLUSTER_DIR,
) -> Connection:
    """The pod's own connection: the ``kubernetes`` Service address from the environment, the mounted
    ServiceAccount token (re-read as kubelet rotates it) and cluster CA."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (pass --kubeconfig)"
        )
    if ":" in host:
        host = f"[{host}]"  # IPv6
    token, ca = directory / "token", directory / "ca.crt"
    credentials = TokenFileCredentials(token)
    credentials.token()
    try:
        ca_pem = ca.read_bytes()
    except OSError as err:
        raise ConfigError(f"in-cluster CA {ca} cannot be read: {err}") from err
    return Connection(f"https://{host}:{port}", Tls(ca=ca_pem), credentials)


def connect(kubeconfig: str = "", context: str | None = None) -> Connection:
    """From ``kubeconfig`` when given, else in-cluster: what every component's ``--kubeconfig`` flag means."""
    return from_kubeconfig(kubeconfig, context) if kubeconfig else in_cluster()

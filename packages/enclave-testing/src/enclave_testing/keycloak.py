"""A real Keycloak on loopback: the OpenID Connect identity provider the sign-in tests get their tokens from.

The distribution is ``org.keycloak:keycloak-quarkus-dist`` from Maven Central, fetched once with Maven (the
ordinary client of that registry) into the same cache as the control-plane binaries, then pre-built for an
in-memory database so each start skips Quarkus' build step (``start --optimized``: about half the start time
of ``start-dev``). Every run gets its own home directory (``conf``, ``data`` and ``bin`` are copied, the large
read-only ``lib``, ``providers`` and ``themes`` linked), so two test sessions never share a database or a
transaction log.

Keycloak serves HTTPS only, with a certificate from a CA the caller supplies (the tests make one of their own:
an identity provider with a self-signed CA is the case the client-side ``idp-certificate-authority`` exists
for), binds to 127.0.0.1, keeps its caches local (no JGroups discovery traffic leaves the machine) and imports
the realm from a file through the admin REST API once it answers.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enclave_core.pki import CertificateAuthority
from enclave_testing.binaries import _build_lock, cache_root
from enclave_testing.processes import ManagedProcess, free_port, wait_until

KEYCLOAK_VERSION = os.environ.get("ENCLAVE_KEYCLOAK_VERSION", "26.0.8")
"""26.0 is the newest line that still runs on Java 17, the JDK Debian 12 ships (26.0.8 measured here)."""

ARTIFACT = "org.keycloak:keycloak-quarkus-dist"
ADMIN_USER = "enclave-admin"
ADMIN_PASSWORD = "enclave-admin-password"


class KeycloakUnavailableError(RuntimeError):
    """A prerequisite (Java, Maven) is missing: the message says which and how to install it."""


def _log(message: str) -> None:
    print(f"[enclave-keycloak] {message}", file=sys.stderr, flush=True)


def distribution(version: str = KEYCLOAK_VERSION) -> Path:
    """The unpacked and pre-built distribution in the cache, fetched and built on first use."""
    root = cache_root() / "keycloak" / version
    home = root / f"keycloak-{version}"
    marker = root / ".built"
    if marker.exists():
        return home
    for tool, package in (("java", "openjdk-17-jre-headless"), ("mvn", "maven")):
        if shutil.which(tool) is None:
            raise KeycloakUnavailableError(f"Keycloak needs `{tool}`: apt-get install {package}")
    with _build_lock():  # one fetch-and-build at a time per machine, like the binaries
        if marker.exists():
            return home
        root.mkdir(parents=True, exist_ok=True)
        archive = root / f"keycloak-quarkus-dist-{version}.zip"
        if not archive.exists():
            _log(f"fetching {ARTIFACT}:{version} from Maven Central (about 150 MB, once)")
            _run(
                [
                    "mvn",
                    "-q",
                    "-B",
                    "dependency:copy",
                    f"-Dartifact={ARTIFACT}:{version}:zip",
                    f"-DoutputDirectory={root}",
                ],
                cwd=root,
            )
        shutil.rmtree(home, ignore_errors=True)
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(root)
        kc = home / "bin" / "kc.sh"
        kc.chmod(0o755)
        _log("pre-building Keycloak for an in-memory database (once)")
        _run([str(kc), "build", "--db=dev-mem"], cwd=home)
        marker.write_text(version)
    return home


def _run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


@dataclass
class Keycloak:
    """One Keycloak server rooted in ``workdir``; ``start()`` returns once the admin API answers."""

    workdir: Path
    ca: CertificateAuthority
    port: int = 0
    process: ManagedProcess | None = None
    realms: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "idp-ca.crt"

    def issuer(self, realm: str) -> str:
        return f"{self.url}/realms/{realm}"

    def start(self, timeout: float = 480.0) -> Keycloak:
        dist = distribution()
        home = self.workdir / "home"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        for entry in dist.iterdir():
            if entry.name in ("bin", "conf"):
                shutil.copytree(entry, home / entry.name, symlinks=True)
            elif entry.name != "data":
                (home / entry.name).symlink_to(entry)
        (home / "data").mkdir()
        serving = self.ca.issue("keycloak", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        (self.workdir / "tls.crt").write_bytes(serving.cert_pem)
        key = self.workdir / "tls.key"
        key.write_bytes(serving.key_pem)
        key.chmod(0o600)
        self.ca_file.write_bytes(self.ca.pair.cert_pem)
        self.port = free_port()
        env = {
            **os.environ,
            "KC_BOOTSTRAP_ADMIN_USERNAME": ADMIN_USER,
            "KC_BOOTSTRAP_ADMIN_PASSWORD": ADMIN_PASSWORD,
            # Keycloak sizes its heap from the machine; a test instance needs little.
            "JAVA_OPTS_KC_HEAP": "-Xms64m -Xmx512m",
        }
        command = [
            str(home / "bin" / "kc.sh"),
            "start",
            "--optimized",
            "--http-enabled=false",
            "--http-host=127.0.0.1",
            f"--https-port={self.port}",
            f"--https-certificate-file={self.workdir / 'tls.crt'}",
            f"--https-certificate-key-file={key}",
            f"--hostname={self.url}",
            f"--http-management-port={free_port()}",
            "--cache=local",
            "--log-level=warn",
        ]
        self.process = ManagedProcess("keycloak", command, self.workdir / "keycloak.log", env=env).start()
        started = time.monotonic()
        wait_until(
            lambda: self._status("/realms/master/.well-known/openid-configuration") == 200,
            timeout=timeout,
            what="Keycloak's master realm",
            alive=self.process,
        )
        _log(f"Keycloak {KEYCLOAK_VERSION} answered after {time.monotonic() - started:.0f}s on {self.url}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    # -- HTTP ------------------------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", context=self.ssl_context(), timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def request(
        self,
        path: str,
        *,
        form: dict[str, str] | None = None,
        body: Any = None,
        token: str | None = None,
        basic: tuple[str, str] | None = None,
        method: str | None = None,
    ) -> tuple[int, Any]:
        """POST a form or JSON body (GET without either, or ``method``); returns the status and decoded JSON."""
        headers: dict[str, str] = {}
        data: bytes | None = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if basic is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=180) as response:
                raw = response.read()
                status = int(response.status)
        except urllib.error.HTTPError as err:
            raw = err.read()
            status = int(err.code)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def admin_token(self) -> str:
        status, answer = self.request(
            "/realms/master/protocol/openid-connect/token",
            form={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": ADMIN_USER,
                "password": ADMIN_PASSWORD,
            },
        )
        if status != 200:
            raise RuntimeError(f"Keycloak admin sign-in failed: {status} {answer}")
        return str(answer["access_token"])

    def import_realm(self, realm_file: Path) -> str:
        """Create the realm described by ``realm_file`` (a RealmRepresentation, as Keycloak exports it)."""
        realm = json.loads(realm_file.read_text())
        # Keycloak's first admin requests warm up its caches: on a busy machine they can take a minute or more.
        status, answer = self.request("/admin/realms", body=realm, token=self.admin_token())
        if status not in (201, 409):
            raise RuntimeError(f"importing realm {realm['realm']} failed: {status} {answer}")
        self.realms.append(realm["realm"])
        return str(realm["realm"])

    # -- OpenID Connect, as a client sees it ------------------------------------------------------------------

    def password_grant(
        self, realm: str, client_id: str, username: str, password: str, client_secret: str | None = None
    ) -> dict[str, Any]:
        """The token request of the spec: grant_type=password, response_type=id_token, scope=openid."""
        form = {"grant_type": "password", "response_type": "id_token", "scope": "openid"}
        return self._token(realm, client_id, client_secret, {**form, "username": username, "password": password})

    def refresh(
        self, realm: str, client_id: str, refresh_token: str, client_secret: str | None = None
    ) -> dict[str, Any]:
        return self._token(
            realm, client_id, client_secret, {"grant_type": "refresh_token", "refresh_token": refresh_token}
        )

    def _token(self, realm: str, client_id: str, client_secret: str | None, form: dict[str, str]) -> dict[str, Any]:
        form = {**form, "client_id": client_id}
        if client_secret is not None:
            form["client_secret"] = client_secret
        status, answer = self.request(f"/realms/{realm}/protocol/openid-connect/token", form=form)
        if status != 200:
            raise RuntimeError(f"{form['grant_type']} grant via {client_id} failed: {status} {answer}")
        return dict(answer)

    def introspect(self, realm: str, token: str, client_id: str, client_secret: str) -> dict[str, Any]:
        """Token introspection at the endpoint the issuer's discovery document names.

        Keycloak serves it at ``<issuer>/protocol/openid-connect/token/introspect``, not at the shorter path
        some guides give, so the address is read from discovery rather than assumed.
        """
        status, discovery = self.request(f"/realms/{realm}/.well-known/openid-configuration")
        if status != 200:
            raise RuntimeError(f"discovery for realm {realm} failed: {status} {discovery}")
        endpoint = urllib.parse.urlsplit(str(discovery["introspection_endpoint"])).path
        status, answer = self.request(
            endpoint,
            form={"token": token},
            basic=(client_id, client_secret),
        )
        if status != 200:
            raise RuntimeError(f"introspection failed: {status} {answer}")
        return dict(answer)

    def set_token_lifespan(self, realm: str, seconds: int) -> None:
        """Shorten (or restore) how long access and id tokens live, to watch one expire within a test."""
        status, answer = self.request(
            f"/admin/realms/{realm}", body={"accessTokenLifespan": seconds}, token=self.admin_token(), method="PUT"
        )
        if status not in (200, 204):
            raise RuntimeError(f"setting the token lifespan of {realm} failed: {status} {answer}")

"""What the sign-in tests share: the realm's users and clients, clients that present a bearer token, and the
two ways of telling kube-apiserver to trust the identity provider (the structured file and the legacy flags).

Everything here mirrors docs/authentication.md, which shows the same settings for a real cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import install_crds
from enclave_testing.keycloak import Keycloak

REALM_FILE = Path(__file__).with_name("realm-enclave.json")
PUBLIC_CLIENT = "kubernetes"
CONFIDENTIAL_CLIENT = "kubernetes-confidential"
CONFIDENTIAL_SECRET = "enclave-confidential-secret"
PASSWORDS = {"alice": "alice-password", "bob": "bob-password", "carol": "carol-password"}
PREFIX = "oidc:"
"""The username and group prefix kube-apiserver puts on every claim from this issuer."""
TENANT_GROUP = f"{PREFIX}enclave.dev"
"""The service user group as kube-apiserver reports it: Keycloak's group ``enclave.dev`` with the prefix."""


@dataclass(frozen=True)
class Provider:
    keycloak: Keycloak
    realm: str

    @property
    def issuer(self) -> str:
        return self.keycloak.issuer(self.realm)

    def tokens(self, user: str, client_id: str = PUBLIC_CLIENT) -> dict[str, Any]:
        secret = CONFIDENTIAL_SECRET if client_id == CONFIDENTIAL_CLIENT else None
        return self.keycloak.password_grant(self.realm, client_id, user, PASSWORDS[user], secret)

    def id_token(self, user: str, client_id: str = PUBLIC_CLIENT) -> str:
        return str(self.tokens(user, client_id)["id_token"])


def claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, unverified: for assertions about what the provider put in it."""
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def authentication_config(provider: Provider) -> dict[str, Any]:
    """kube-apiserver's structured ``AuthenticationConfiguration`` trusting ``provider`` for tokens."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {
                    "url": provider.issuer,
                    "audiences": [PUBLIC_CLIENT],
                    "audienceMatchPolicy": "MatchAny",
                    "certificateAuthority": provider.keycloak.ca_file.read_text(),
                },
                "claimMappings": {
                    "username": {"claim": "preferred_username", "prefix": PREFIX},
                    "groups": {"claim": "groups", "prefix": PREFIX},
                },
            }
        ],
    }


def structured_flags(provider: Provider, directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "authentication-config.yaml"
    path.write_text(yaml.safe_dump(authentication_config(provider), sort_keys=False))
    return [f"--authentication-config={path}"]


def legacy_flags(provider: Provider, _directory: Path | None = None) -> list[str]:
    """The same trust through the ``--oidc-*`` flags older clusters use."""
    return [
        f"--oidc-issuer-url={provider.issuer}",
        f"--oidc-ca-file={provider.keycloak.ca_file}",
        f"--oidc-client-id={PUBLIC_CLIENT}",
        "--oidc-username-claim=preferred_username",
        "--oidc-groups-claim=groups",
        f"--oidc-username-prefix={PREFIX}",
        f"--oidc-groups-prefix={PREFIX}",
    ]


def bearer(plane: ControlPlane, token: str) -> Any:
    """An ``ApiClient`` that presents ``token`` and nothing else: no client certificate, no impersonation."""
    configuration = client.Configuration()
    configuration.host = plane.api_url
    configuration.ssl_ca_cert = str(plane.ca_file)
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def whoami(plane: ControlPlane, token: str) -> tuple[str, list[str]]:
    """What kube-apiserver made of ``token`` (``kubectl auth whoami``): the username and groups."""
    review = client.AuthenticationV1Api(bearer(plane, token)).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    info = review.status.user_info
    return str(info.username), list(info.groups or [])


def wait_for_issuer(plane: ControlPlane, provider: Provider, timeout: float = 180.0) -> None:
    """kube-apiserver fetches the issuer's keys in the background after it starts: wait until a token works."""
    token = provider.id_token("alice")
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            whoami(plane, token)
            return
        except client.ApiException as err:
            last = err
            time.sleep(0.5)
    raise AssertionError(f"kube-apiserver did not accept the provider's tokens within {timeout}s: {last}")


def namespace_creator(kube: Any, name: str, subject: dict[str, str]) -> None:
    """Grant ``subject`` the right to create namespaces, as a platform team would grant a non-tenant engineer."""
    rbac = client.RbacAuthorizationV1Api(kube)
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "get", "list"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", **subject}],
        }
    )


@contextlib.contextmanager
def trusting_plane(provider: Provider, flags: Callable[[Path], list[str]]) -> Iterator[ControlPlane]:
    """A control plane of its own whose kube-apiserver trusts ``provider`` through ``flags(workdir)``.

    Ready when the CRDs are installed and kube-apiserver accepts the provider's tokens.
    """
    workdir = Path(tempfile.mkdtemp(prefix="enclave-cp-oidc-"))
    running = ControlPlane(workdir / "plane", apiserver_args=flags(workdir / "auth")).start()
    try:
        install_crds(running.admin_client())
        wait_for_issuer(running, provider)
        yield running
    finally:
        running.stop()
        shutil.rmtree(workdir, ignore_errors=True)

"""Sign-in through enclave-proxy with a real Keycloak token: the proxy's TokenReview accepts the id token as
kube-apiserver does and forwards the request as the OIDC user (``oidc:alice``, her ``oidc:`` groups).

kube-apiserver trusts Keycloak through its structured ``AuthenticationConfiguration`` (the module's own control
plane, as the other sign-in modules); kubectl reaches the proxy with the spec's client configuration: a plain
bearer id token (``--token``), and an ``oidc`` auth-provider entry whose expired id token kubectl refreshes
with the refresh token before it calls the proxy.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from enclave_testing.binaries import ensure
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.proxy import RunningProxy, start_proxy_on
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .signin import (
    CONFIDENTIAL_CLIENT,
    CONFIDENTIAL_SECRET,
    PREFIX,
    TENANT_GROUP,
    Provider,
    claims,
)


@pytest.fixture(scope="module")
def proxy(plane: ControlPlane, stack: TenancyStack) -> Iterator[RunningProxy]:
    running = start_proxy_on(stack, Path(tempfile.mkdtemp(prefix="enclave-proxy-oidc-")))
    try:
        yield running
    finally:
        running.stop()


def kubectl(proxy: RunningProxy, kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            str(ensure("kubectl")["kubectl"]),
            f"--kubeconfig={kubeconfig}",
            f"--cache-dir={proxy.workdir / 'cache'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def listed(proxy: RunningProxy, kubeconfig: Path) -> set[str]:
    out = kubectl(proxy, kubeconfig, "get", "namespaces", "-o", "name").stdout
    return {line.removeprefix("namespace/") for line in out.split()}


def created(proxy: RunningProxy, kubeconfig: Path, name: str) -> Callable[[], bool]:
    """``kubectl create namespace <name>`` through the proxy, for :func:`poll` (admission may still be syncing)."""
    return lambda: kubectl(proxy, kubeconfig, "create", "namespace", name, check=False).returncode == 0


def test_id_token_through_the_proxy_lists_the_owners_namespaces(
    proxy: RunningProxy, stack: TenancyStack, provider: Provider
) -> None:
    tenant = unique("idp-proxy")
    stack.tenant(tenant, [{"kind": "User", "name": f"{PREFIX}alice"}])
    alice = proxy.kubeconfig("alice-token", {"token": provider.id_token("alice")})
    who = json.loads(kubectl(proxy, alice, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == f"{PREFIX}alice"  # the proxy forwarded as the OIDC user, with her groups
    assert TENANT_GROUP in who["groups"]
    mine = [f"{tenant}-dev", f"{tenant}-prod"]
    for name in mine:
        # a write passed through as alice: admission puts the namespace in her tenant
        poll(created(proxy, alice, name), what=f"alice creates {name} through the proxy")
    poll(lambda: listed(proxy, alice) == set(mine), timeout=30, what="alice's namespaces through the proxy")
    stranger = proxy.kubeconfig("carol-token", {"token": provider.id_token("carol")})
    refused = kubectl(proxy, stranger, "get", "namespaces", check=False)
    # carol is signed in but no tenant user and has no right to list: kube-apiserver's 403, as carol
    assert f'User "{PREFIX}carol" cannot list resource "namespaces"' in refused.stderr


def test_auth_provider_kubeconfig_refreshes_its_id_token_and_lists_through_the_proxy(
    proxy: RunningProxy, stack: TenancyStack, provider: Provider
) -> None:
    tenant = unique("idp-refresh")
    stack.tenant(tenant, [{"kind": "User", "name": f"{PREFIX}bob"}])
    keycloak = provider.keycloak
    bob = proxy.kubeconfig("bob-token", {"token": provider.id_token("bob")})
    name = f"{tenant}-dev"
    poll(created(proxy, bob, name), what=f"bob creates {name} through the proxy")
    keycloak.set_token_lifespan(provider.realm, 10)
    try:
        tokens = provider.tokens("bob", CONFIDENTIAL_CLIENT)
    finally:
        keycloak.set_token_lifespan(provider.realm, 300)
    stale = tokens["id_token"]
    poll(lambda: claims(stale)["exp"] < time.time() - 1, timeout=30, interval=0.5, what="the id token expired")
    kubeconfig = proxy.kubeconfig(
        "bob-oidc",
        {
            "auth-provider": {
                "name": "oidc",
                "config": {
                    "idp-issuer-url": provider.issuer,
                    "idp-certificate-authority": str(keycloak.ca_file),
                    "client-id": CONFIDENTIAL_CLIENT,
                    "client-secret": CONFIDENTIAL_SECRET,
                    "refresh-token": tokens["refresh_token"],
                    "id-token": stale,
                    "extra-scopes": "groups",
                },
            }
        },
    )
    poll(lambda: listed(proxy, kubeconfig) == {name}, timeout=30, what="bob's namespace through the proxy")
    persisted = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["auth-provider"]["config"]
    assert persisted["id-token"] != stale  # kubectl refreshed the token it showed the proxy

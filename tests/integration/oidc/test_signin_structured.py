"""Sign-in as a tenant user with a real Keycloak token, kube-apiserver trusting it through its structured
``AuthenticationConfiguration`` (``--authentication-config``): no impersonation anywhere in this module.

The chain under test is the one a platform team builds: Keycloak puts ``groups`` and the cluster's audience in
the id token, kube-apiserver maps ``preferred_username`` and ``groups`` with the prefix ``oidc:``, and Enclave's
ServiceConfiguration names the prefixed group ``oidc:enclave.dev`` as its users.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace
from enclave_testing.waiting import poll

from .signin import (
    CONFIDENTIAL_CLIENT,
    CONFIDENTIAL_SECRET,
    PREFIX,
    PUBLIC_CLIENT,
    TENANT_GROUP,
    Provider,
    bearer,
    claims,
    namespace_creator,
    whoami,
)


def test_password_grant_and_introspection(provider: Provider) -> None:
    tokens = provider.tokens("alice")
    assert {"access_token", "refresh_token", "id_token", "token_type", "scope"} <= tokens.keys()
    assert tokens["token_type"].lower() == "bearer"
    assert "openid" in tokens["scope"].split()
    id_claims = claims(tokens["id_token"])
    assert id_claims["groups"] == ["enclave.dev"]
    assert PUBLIC_CLIENT in ([id_claims["aud"]] if isinstance(id_claims["aud"], str) else id_claims["aud"])
    seen = provider.keycloak.introspect(
        provider.realm, tokens["access_token"], CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET
    )
    assert seen["active"] is True
    assert seen["groups"] == ["enclave.dev"]
    assert seen["username"] == "alice"
    assert {
        "exp",
        "iat",
        "aud",
        "typ",
        "azp",
        "preferred_username",
        "email_verified",
        "acr",
        "client_id",
    } <= seen.keys()


def test_kube_apiserver_maps_claims_with_prefixes(plane: ControlPlane, provider: Provider) -> None:
    user, groups = whoami(plane, provider.id_token("alice"))
    assert user == f"{PREFIX}alice"
    assert TENANT_GROUP in groups
    assert "system:authenticated" in groups


def test_owner_token_creates_namespace_in_her_tenant(
    stack: TenancyStack, plane: ControlPlane, provider: Provider
) -> None:
    tenant = unique("idp")
    stack.tenant(tenant, [{"kind": "User", "name": f"{PREFIX}alice"}])
    alice = bearer(plane, provider.id_token("alice"))
    name = f"{tenant}-dev"
    create_namespace(alice, name)
    labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
    assert labels.get(TENANT_LABEL) == tenant

    def bound() -> bool:
        bindings = client.RbacAuthorizationV1Api(stack.kube).list_namespaced_role_binding(name).items
        return any(
            subject.name == f"{PREFIX}alice" and rb.role_ref.name == "admin"
            for rb in bindings
            for subject in rb.subjects or []
        )

    poll(bound, what="alice's admin RoleBinding")

    def writes() -> bool:
        client.CoreV1Api(alice).create_namespaced_config_map(name, {"metadata": {"generateName": "cm-"}})
        return True

    poll(writes, what="alice writes in her namespace with her own token")
    poll(lambda: stack.tenant_status(tenant).get("namespaces") == [name], what="tenant status")


def test_non_member_is_authenticated_but_not_a_tenant_user(
    stack: TenancyStack, plane: ControlPlane, provider: Provider
) -> None:
    token = provider.id_token("carol")
    user, groups = whoami(plane, token)
    assert user == f"{PREFIX}carol"
    assert TENANT_GROUP not in groups
    # Without a right of her own, kube-apiserver's RBAC stops her: Enclave gave her nothing.
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(bearer(plane, token)).create_namespace({"metadata": {"name": unique("carol")}})
    assert denied.value.status == 403
    # With a platform team's grant she creates namespaces, and Enclave leaves them alone: no tenant.
    role = unique("carol-ns")
    namespace_creator(stack.kube, role, {"kind": "User", "name": f"{PREFIX}carol"})
    name = unique("carol")
    poll(lambda: client.CoreV1Api(bearer(plane, token)).create_namespace({"metadata": {"name": name}}))
    labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
    assert TENANT_LABEL not in labels


def test_expired_token_is_refused_and_a_refreshed_one_works(plane: ControlPlane, provider: Provider) -> None:
    keycloak = provider.keycloak
    keycloak.set_token_lifespan(provider.realm, 10)
    try:
        tokens = provider.tokens("bob")
    finally:
        keycloak.set_token_lifespan(provider.realm, 300)
    stale = tokens["id_token"]
    assert claims(stale)["exp"] - claims(stale)["iat"] == 10
    assert whoami(plane, stale)[0] == f"{PREFIX}bob"

    def refused() -> bool:
        try:
            whoami(plane, stale)
        except ApiException as err:
            return bool(err.status == 401)
        return False

    poll(refused, timeout=90, interval=1, what="kube-apiserver refusing the expired id token")
    fresh = keycloak.refresh(provider.realm, PUBLIC_CLIENT, tokens["refresh_token"])
    assert fresh["id_token"] != stale
    assert whoami(plane, fresh["id_token"])[0] == f"{PREFIX}bob"


def test_kubeconfig_auth_provider_refreshes_an_expired_id_token(
    plane: ControlPlane, provider: Provider, tmp_path: Path
) -> None:
    """The client side of the docs: an ``oidc`` auth-provider entry with a refresh token and the IdP's CA."""
    keycloak = provider.keycloak
    keycloak.set_token_lifespan(provider.realm, 10)
    try:
        tokens = provider.tokens("bob", CONFIDENTIAL_CLIENT)
    finally:
        keycloak.set_token_lifespan(provider.realm, 300)
    stale = tokens["id_token"]
    poll(lambda: claims(stale)["exp"] < time.time() - 1, timeout=30, interval=0.5, what="expiry")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": plane.api_url,
                            "certificate-authority-data": base64.b64encode(plane.ca_file.read_bytes()).decode(),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "bob",
                        "user": {
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
                    }
                ],
                "contexts": [{"name": "bob", "context": {"cluster": "local", "user": "bob"}}],
                "current-context": "bob",
            }
        )
    )
    api = config.new_client_from_config(config_file=str(kubeconfig), persist_config=True)
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == f"{PREFIX}bob"
    persisted = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["auth-provider"]["config"]
    assert persisted["id-token"] != stale  # the client refreshed and wrote the new token back


def test_group_prefix_decides_who_is_a_tenant_user(
    stack: TenancyStack, plane: ControlPlane, provider: Provider
) -> None:
    """bob owns no tenant: as a tenant user his namespace is refused; as a non-tenant user it is left alone."""
    role = unique("bob-ns")
    namespace_creator(stack.kube, role, {"kind": "User", "name": f"{PREFIX}bob"})
    bob = bearer(plane, provider.id_token("bob"))
    core = client.CoreV1Api(bob)

    def refused_as_tenant_user() -> bool:
        try:
            core.create_namespace({"metadata": {"name": unique("bob")}}, dry_run="All")
        except ApiException as err:
            return bool(err.status == 403 and "denied the request" in str(err.body))
        return False

    poll(refused_as_tenant_user, what="bob (group oidc:enclave.dev) refused as a tenant user owning nothing")
    # The same group spelled without kube-apiserver's prefix names nobody: bob is then not a tenant user.
    stack.set_users([{"kind": "Group", "name": "enclave.dev"}])
    try:

        def left_alone() -> bool:
            name = unique("bob")
            core.create_namespace({"metadata": {"name": name}})
            labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
            return TENANT_LABEL not in labels

        poll(left_alone, what="bob treated as a non-tenant user once the group lacks the prefix")
    finally:
        stack.set_users([{"kind": "Group", "name": TENANT_GROUP}])
    poll(refused_as_tenant_user, what="the prefixed group restored")


@pytest.mark.parametrize(
    ("client_id", "expect"),
    [
        ("other-app", "unauthenticated"),  # audience is not the cluster's
        ("groups-not-a-list", "unauthenticated"),  # groups is a JSON object
        ("no-groups", "no-groups"),  # authenticated, in no group of the provider
    ],
)
def test_bad_tokens_never_make_a_tenant_owner(
    stack: TenancyStack, plane: ControlPlane, provider: Provider, client_id: str, expect: str
) -> None:
    """A tenant owned by the prefixed group: a bad token never makes alice one of its owners."""
    tenant = unique("bad")
    stack.tenant(tenant, [{"kind": "Group", "name": TENANT_GROUP}])
    try:
        token = provider.id_token("alice", client_id)
        if expect == "unauthenticated":
            with pytest.raises(ApiException) as caught:
                whoami(plane, token)
            assert caught.value.status == 401
            return
        user, groups = whoami(plane, token)
        assert user == f"{PREFIX}alice"
        assert not [group for group in groups if group.startswith(PREFIX)]
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(bearer(plane, token)).create_namespace({"metadata": {"name": f"{tenant}-x"}})
        assert denied.value.status == 403
    finally:
        client.CustomObjectsApi(stack.kube).delete_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant)
        stack.tenants.remove(tenant)

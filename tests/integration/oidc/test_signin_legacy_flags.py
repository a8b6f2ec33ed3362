"""The same sign-in with kube-apiserver's legacy ``--oidc-*`` flags instead of the structured file."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import create_namespace, start_tenancy
from enclave_testing.waiting import poll

from .signin import PREFIX, TENANT_GROUP, Provider, bearer, legacy_flags, trusting_plane, whoami


@pytest.fixture(scope="module")
def legacy_plane(provider: Provider) -> Iterator[ControlPlane]:
    with trusting_plane(provider, lambda directory: legacy_flags(provider, directory)) as running:
        yield running


def test_legacy_flags_sign_in_a_tenant_owner(legacy_plane: ControlPlane, provider: Provider) -> None:
    token = provider.id_token("alice")
    user, groups = whoami(legacy_plane, token)
    assert user == f"{PREFIX}alice"
    assert TENANT_GROUP in groups
    stack = start_tenancy(legacy_plane, users=[{"kind": "Group", "name": TENANT_GROUP}])
    try:
        tenant = unique("legacy")
        stack.tenant(tenant, [{"kind": "User", "name": f"{PREFIX}alice"}])
        name = f"{tenant}-dev"
        create_namespace(bearer(legacy_plane, token), name)
        labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
        assert labels.get(TENANT_LABEL) == tenant
        poll(lambda: stack.tenant_status(tenant).get("namespaces") == [name], what="tenant status")
        # carol is authenticated by the same flags but is no tenant user: no rights from Enclave.
        carol = provider.id_token("carol")
        assert TENANT_GROUP not in whoami(legacy_plane, carol)[1]
    finally:
        stack.close()

"""Who an admission outage blocks: the namespace hooks fail closed, but only for those the fence is about.

Enclave's admission server is stopped (its hooks stay registered, failurePolicy Fail). Administrators, service
users and anyone touching a namespace in a tenant are refused (the fence holds); a cluster operator and a GitOps
service account outside Enclave's users go on creating, changing and deleting namespaces in no tenant, because
the hooks' matchConditions never send them (kube-apiserver evaluates the CEL here, not a test double).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.meta import Entity
from enclave_core.api.names import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique

from .harness import Enclave, namespace_rights, start_enclave, stop_enclave

OPERATOR = "ops-oncall"
GITOPS = "system:serviceaccount:argocd:argocd-application-controller"


@pytest.fixture(scope="module")
def down(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[tuple[Enclave, str]]:
    """An Enclave with one tenant namespace, then its admission server stopped."""
    subjects = [
        {"kind": "Group", "name": "enclave.dev", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "User", "name": OPERATOR, "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "argocd-application-controller", "namespace": "argocd"},
    ]
    with namespace_rights(kube, "enclave-admission-test-outage", subjects):
        running = start_enclave(control_plane, kube, impersonate)
        try:
            alice = unique("alice")
            solar = running.tenant(unique("solar"), owners=[Entity(kind="User", name=alice)])
            home = f"{solar.name}-home"
            running.owner(alice).create_namespace({"metadata": {"name": home}})
            running.admission.process.stop()
            yield running, home
        finally:
            stop_enclave(running)


def _blocked(call: Callable[[], Any]) -> None:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 500, caught.value.body
    assert "failed calling webhook" in (caught.value.body or ""), caught.value.body


def _cleanup(kube: Any, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CoreV1Api(kube).delete_namespace(name)


@pytest.mark.parametrize(("user", "groups"), [(OPERATOR, ["ops"]), (GITOPS, ["system:serviceaccounts"])])
def test_operators_outside_enclave_manage_namespaces_in_no_tenant(
    down: tuple[Enclave, str], user: str, groups: list[str]
) -> None:
    enclave, _ = down
    api = enclave.core(user, groups)
    name = unique("infra")
    try:
        api.create_namespace({"metadata": {"name": name}})
        api.patch_namespace(name, {"metadata": {"labels": {"team": "platform"}}})
        api.delete_namespace(name)
    finally:
        _cleanup(enclave.kube, name)


def test_the_fence_holds_for_everyone_it_is_about(down: tuple[Enclave, str]) -> None:
    enclave, home = down
    owner = enclave.owner(unique("bob"))
    _blocked(lambda: owner.create_namespace({"metadata": {"name": unique("x")}}))
    _blocked(lambda: enclave.admin().create_namespace({"metadata": {"name": unique("y")}}))
    operator = enclave.core(OPERATOR, ["ops"])
    # anyone touching a tenant namespace: removing its label, or labelling another namespace into a tenant
    _blocked(lambda: operator.patch_namespace(home, {"metadata": {"labels": {TENANT_LABEL: None}}}))
    _blocked(lambda: operator.delete_namespace(home))
    _blocked(
        lambda: operator.create_namespace(
            {"metadata": {"name": unique("sneak"), "labels": {TENANT_LABEL: home.rsplit("-", 1)[0]}}}
        )
    )
    assert enclave.labels(home)[TENANT_LABEL] == home.rsplit("-", 1)[0]

"""Tenants do not learn about each other: a refusal about another tenant's namespace, a claim's status in a
pool two tenants share, and the components' metrics never carry another tenant's name.

Attacks: an owner of tenant A touches a namespace of tenant B (with rights an operator gave them) to read B's
name from the refusal; a claim of A queued behind B's claim reads B's namespace and claim name from its
status; anyone on the pod network scrapes ``/metrics`` for tenant names.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, as_user

GROUP, VERSION = "enclave.dev", "v1beta2"


@pytest.fixture(scope="module")
def shared(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """The tenancy core and enclave-pools (the shared ``fence`` has no pools)."""
    stack = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}], pools=True)
    try:
        yield stack
    finally:
        stack.close()


def _tenant_with_namespace(stack: TenancyStack, impersonate: Callable[..., Any], namespace: str) -> tuple[str, str]:
    """A fresh tenant and its owner, who creates ``namespace`` in it (a name that does not contain the
    tenant's, so a message naming the namespace does not name the tenant): ``(tenant, owner)``."""
    tenant, owner = unique("leak"), unique("owner")
    stack.tenant(tenant, [{"kind": "User", "name": owner}])
    create_namespace(as_user(impersonate, owner), namespace)
    poll(lambda: namespace in (stack.tenant_status(tenant).get("namespaces") or []), what=f"{namespace} in {tenant}")
    return tenant, owner


@pytest.fixture
def namespace_rights(shared: TenancyStack) -> Iterator[Callable[[str], None]]:
    """``grant(user)``: cluster-wide update and delete on namespaces (what a generous operator might give),
    so the user's requests on other tenants' namespaces reach Enclave instead of stopping at RBAC."""
    rbac = client.RbacAuthorizationV1Api(shared.kube)
    name = unique("leak-namespaces")
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "update", "patch", "delete"]}],
        }
    )
    bound: list[str] = []

    def grant(user: str) -> None:
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": f"{name}-{len(bound)}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            }
        )
        bound.append(f"{name}-{len(bound)}")

    yield grant
    with contextlib.suppress(ApiException):
        for binding in bound:
            rbac.delete_cluster_role_binding(binding)
        rbac.delete_cluster_role(name)


def _refused_body(call: Callable[[], Any], hook: str) -> str:
    """The refusal ``call`` gets from Enclave's ``hook`` (retried while RBAC settles)."""

    def attempt() -> str | None:
        try:
            call()
        except ApiException as err:
            if err.status == 403 and hook in str(err.body):
                return str(err.body)
            if err.status == 403 and "forbidden: User" in str(err.body):
                return None  # the ClusterRoleBinding is not in force yet
            raise
        raise AssertionError("the request was allowed")

    body: str = poll(attempt, timeout=20, what=f"a refusal from {hook}")
    return body


def test_an_owner_refused_on_another_tenants_namespace_does_not_learn_its_tenant(
    shared: TenancyStack, impersonate: Callable[..., Any], namespace_rights: Callable[[str], None]
) -> None:
    theirs_ns, mine_ns = unique("target"), unique("home")
    theirs, _ = _tenant_with_namespace(shared, impersonate, theirs_ns)
    mine, me = _tenant_with_namespace(shared, impersonate, mine_ns)
    namespace_rights(me)
    api = client.CoreV1Api(as_user(impersonate, me))
    for attempt in (
        lambda: api.patch_namespace(theirs_ns, {"metadata": {"labels": {"probe": "x"}}}),
        lambda: api.delete_namespace(theirs_ns),
    ):
        body = _refused_body(attempt, "namespaces.enclave.dev")
        assert "belongs to another tenant" in body, body
        assert theirs not in body, body
        assert mine in body, body  # its own tenant it may be told


def test_a_claim_queued_behind_another_tenants_claim_does_not_learn_its_names(
    shared: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    kube = shared.kube
    custom = client.CustomObjectsApi(kube)
    token = unique("pool")
    # claims are served by creationTimestamp (one-second resolution), then namespace: mine sorts after theirs,
    # so a tie in the second still puts mine behind their waiting claim
    theirs_ns, mine_ns = unique("a-target"), unique("z-home")
    theirs, _ = _tenant_with_namespace(shared, impersonate, theirs_ns)
    _tenant_with_namespace(shared, impersonate, mine_ns)
    for name in (theirs_ns, mine_ns):
        client.CoreV1Api(kube).patch_namespace(name, {"metadata": {"labels": {"leak-pool": token}}})
    pool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourcePool",
        "metadata": {"name": token},
        "spec": {
            "quota": {"hard": {"requests.cpu": "2"}},
            "selectors": [{"matchLabels": {"leak-pool": token}}],
            "config": {"orderedQueue": True},
        },
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "resourcepools", pool)
    try:

        def claim(namespace: str, name: str, cpu: str) -> None:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourcePoolClaim",
                "metadata": {"name": name},
                "spec": {"pool": token, "claim": {"requests.cpu": cpu}},
            }

            def create() -> bool:
                try:
                    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", body)
                except ApiException as err:
                    if "does not select" in str(err.body) or "does not exist" in str(err.body):
                        return False  # the pools snapshot is on its way to admission
                    raise
                return True

            poll(create, what=f"claim {namespace}/{name}")

        def condition(namespace: str, name: str, reason: str) -> dict[str, Any] | None:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", name)
            found = (obj.get("status") or {}).get("condition") or {}
            return found if found.get("reason") == reason else None

        claim(theirs_ns, "held", "1")
        poll(lambda: condition(theirs_ns, "held", "Bound"), what="their first claim bound")
        claim(theirs_ns, "secret-project", "2")  # does not fit: holds the queue for requests.cpu
        poll(lambda: condition(theirs_ns, "secret-project", "PoolExhausted"), what="their claim exhausted")
        claim(mine_ns, "mine", "1")
        found = poll(lambda: condition(mine_ns, "mine", "QueueExhausted"), timeout=60, what="my claim queued")
        message = found["message"]
        assert "queued behind 1 claim outside your tenant" in message, message
        for name in (theirs_ns, "secret-project", theirs):
            assert name not in message, message
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "resourcepools", token)


def test_metrics_scraped_from_the_pod_network_carry_no_tenant_names(
    shared: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Every component of the stack, after decisions and writes about a tenant (an admitted namespace and a
    refused one), answers ``/metrics`` without the tenant's or its namespaces' names."""
    home = unique("metrics")
    tenant, owner = _tenant_with_namespace(shared, impersonate, home)
    api = client.CoreV1Api(as_user(impersonate, owner))
    with contextlib.suppress(ApiException):
        api.create_namespace({"metadata": {"name": unique("refused"), "labels": {"enclave.dev/tenant": "nobody"}}})
    assert shared.processes
    for running in shared.processes:
        with urllib.request.urlopen(f"{running.probe_url}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "enclave_" in text, running.spec.name
        assert tenant not in text, running.spec.name
        assert home not in text, running.spec.name
        assert owner not in text, running.spec.name

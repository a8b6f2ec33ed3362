"""The adversarial suite: one test per attack a tenant (or a stranger on the pod network) can try, each against
the real control plane and the real components, named after the attack it tries (docs/security.md maps every
test to its threat).

The shared ``fence`` fixture is the tenancy core (enclave-config, enclave-tenants, enclave-admission) with the
tenant users of the chart's default (the ``enclave.dev`` group); suites that need more components start their
own in their module, as the integration suites do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.shared import StackKeeper, share_fixture, sharers_first
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

USERS = "enclave.dev"
"""The default tenant-user group."""


share_fixture("fence", Path(__file__).parent)


@pytest.fixture(scope="module")
def fence(control_plane: ControlPlane, enclave_crds: list[str], stack_keeper: StackKeeper) -> Iterator[TenancyStack]:
    """config, tenants and admission on the session's control plane, tenant users = the ``enclave.dev`` group.

    One stack serves every module that asks for it in a row (each test makes its own tenants and owners);
    :func:`pytest_collection_modifyitems` puts those modules first. A module that leaves it unwhole has it
    closed at the module's end (:mod:`enclave_testing.shared`)."""
    stack = stack_keeper.acquire(
        "security-fence",
        lambda: start_tenancy(control_plane, [{"kind": "Group", "name": USERS}]),
        TenancyStack.close,
        TenancyStack.whole,
    )
    try:
        yield stack
    finally:
        stack_keeper.check()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of this suite that use the shared ``fence`` run first, so it starts once for all of them."""
    sharers_first(items, Path(__file__).parent)


def as_user(impersonate: Callable[..., Any], user: str, groups: list[str] | None = None) -> Any:
    """An ApiClient acting as ``user`` in the tenant-user group (or ``groups``)."""
    return impersonate(user, groups if groups is not None else [USERS])


def owned_namespace(stack: TenancyStack, impersonate: Callable[..., Any], owner: str, **spec: Any) -> tuple[str, str]:
    """A fresh tenant owned by ``owner`` and one namespace the owner created in it, once the owner's ``admin``
    RoleBinding is there: ``(tenant, namespace)``."""
    tenant = unique("sec")
    stack.tenant(tenant, [{"kind": "User", "name": owner}], **spec)
    name = f"{tenant}-a"
    api = client.CoreV1Api(as_user(impersonate, owner))

    def create() -> bool:
        try:
            api.create_namespace({"metadata": {"name": name}})
        except ApiException as err:
            if err.status == 409:
                return True
            if "not ready" in str(err.body) or "no tenant" in str(err.body):
                return False
            raise
        return True

    poll(create, timeout=30, what=f"create namespace {name}")
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    poll(lambda: any(b.role_ref.name == "admin" for b in rbac.list_namespaced_role_binding(name).items))
    return tenant, name

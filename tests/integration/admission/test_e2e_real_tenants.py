"""End to end with every built component as its own process: enclave-config, enclave-tenants, enclave-admission.

No test double anywhere: the tenants controller publishes the Tenancy snapshot admission decides from, and
writes the RoleBindings that let an owner use the namespace it just created. Users act through impersonation.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, start_tenancy
from enclave_testing.waiting import poll

from .harness import refused

ROBOT_NS = "e2e-robots"


class Stack:
    """The tenancy core (``enclave_testing.stack``) plus what these scenarios ask of it as a tenant user."""

    def __init__(self, running: TenancyStack, impersonate: Callable[..., Any]) -> None:
        self.running = running
        self.kube = running.kube
        self.impersonate = impersonate

    def tenant(self, name: str, owners: list[dict[str, str]], **spec: Any) -> None:
        self.running.tenant(name, owners, **spec)

    def status(self, tenant: str) -> dict[str, Any]:
        return self.running.tenant_status(tenant)

    def as_user(self, user: str, groups: list[str]) -> client.CoreV1Api:
        return client.CoreV1Api(self.impersonate(user, groups))

    def create_namespace(self, api: client.CoreV1Api, name: str) -> None:
        create_namespace(api.api_client, name)

    def namespace_tenant(self, name: str) -> str | None:
        labels = client.CoreV1Api(self.kube).read_namespace(name).metadata.labels or {}
        return labels.get(TENANT_LABEL)


@pytest.fixture(scope="module")
def stack(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Stack]:
    with contextlib.suppress(ApiException):
        client.CoreV1Api(kube).create_namespace({"metadata": {"name": ROBOT_NS}})
    running = start_tenancy(
        control_plane,
        users=[
            {"kind": "Group", "name": "enclave.dev"},
            {"kind": "ServiceAccount", "name": f"system:serviceaccount:{ROBOT_NS}:robot"},
        ],
        nodes=True,
        extra_spec={"nodeMetadata": {"forbiddenLabels": {"denied": ["pool"], "deniedRegex": "^secret\\."}}},
    )
    try:
        yield Stack(running, impersonate)
    finally:
        running.close()


def _rolebindings(kube: Any, namespace: str) -> dict[str, Any]:
    items = client.RbacAuthorizationV1Api(kube).list_namespaced_role_binding(namespace).items
    return {rb.metadata.name: rb for rb in items}


def test_owner_creates_namespace_lands_in_tenant_with_rights(stack: Stack) -> None:
    tenant, alice = unique("solar"), unique("alice")
    stack.tenant(tenant, [{"kind": "User", "name": alice}])
    api = stack.as_user(alice, ["enclave.dev"])
    name = f"{tenant}-dev"
    stack.create_namespace(api, name)
    assert stack.namespace_tenant(name) == tenant
    refs = client.CoreV1Api(stack.kube).read_namespace(name).metadata.owner_references
    assert [(ref.kind, ref.name) for ref in refs] == [("Tenant", tenant)]
    # The tenants controller binds the owner's roles; with them alice works inside her namespace.
    poll(lambda: any(rb.role_ref.name == "admin" for rb in _rolebindings(stack.kube, name).values()))

    def can_write() -> bool:
        try:
            api.create_namespaced_config_map(name, {"metadata": {"generateName": "cm-"}})
        except ApiException:
            return False
        return True

    poll(can_write)
    poll(lambda: stack.status(tenant).get("namespaces") == [name] and stack.status(tenant).get("size") == 1)


def test_status_follows_create_and_delete_and_quota_is_enforced(stack: Stack) -> None:
    tenant, carol = unique("oil"), unique("carol")
    stack.tenant(tenant, [{"kind": "User", "name": carol}], namespaceOptions={"quota": 2})
    api = stack.as_user(carol, ["enclave.dev"])
    first, second = f"{tenant}-a", f"{tenant}-b"
    stack.create_namespace(api, first)
    stack.create_namespace(api, second)
    poll(lambda: stack.status(tenant).get("size") == 2)
    message = refused(lambda: api.create_namespace({"metadata": {"name": f"{tenant}-c"}}))
    assert "quota" in message
    # The owner may delete a namespace of her tenant (deleter role bound there); status follows.
    poll(
        lambda: any(rb.role_ref.name == "enclave-namespace-deleter" for rb in _rolebindings(stack.kube, first).values())
    )

    def deleted() -> bool:
        try:
            api.delete_namespace(first)
        except ApiException as err:
            return bool(err.status == 404)
        return True

    poll(deleted)
    poll(lambda: stack.status(tenant).get("namespaces") == [second], timeout=60)


def test_group_owner_and_ambiguous_names(stack: Stack) -> None:
    one, two, dave = unique("one"), unique("two"), unique("dave")
    team = unique("team")
    stack.tenant(one, [{"kind": "Group", "name": team}])
    stack.tenant(two, [{"kind": "Group", "name": team}])
    api = stack.as_user(dave, ["enclave.dev", team])

    def sees_both() -> bool:
        """Admission's snapshot has both tenants: each prefixed dry-run lands in its own (with only one known,
        both would land in that one). Until then an ambiguous name would be assigned, not refused."""
        for tenant in (one, two):
            try:
                probe = api.create_namespace({"metadata": {"name": f"{tenant}-probe"}}, dry_run="All")
            except ApiException as err:
                if "no tenant" in str(err.body) or "not ready" in str(err.body):
                    return False
                raise
            if (probe.metadata.labels or {}).get(TENANT_LABEL) != tenant:
                return False
        return True

    poll(sees_both, timeout=20, what="both tenants of the group in admission's snapshot")
    # Two tenants and a name matching neither prefix: refused with both tenants named.
    message = refused(lambda: api.create_namespace({"metadata": {"name": unique("neutral")}}))
    assert one in message
    assert two in message
    stack.create_namespace(api, f"{two}-web")
    assert stack.namespace_tenant(f"{two}-web") == two
    poll(
        lambda: any(
            s.kind == "Group" and s.name == team
            for rb in _rolebindings(stack.kube, f"{two}-web").values()
            for s in rb.subjects or []
        )
    )


def test_service_account_owner(stack: Stack) -> None:
    tenant = unique("robots")
    account = f"system:serviceaccount:{ROBOT_NS}:robot"
    stack.tenant(tenant, [{"kind": "ServiceAccount", "name": account}])
    api = stack.as_user(
        account, ["system:serviceaccounts", f"system:serviceaccounts:{ROBOT_NS}", "system:authenticated"]
    )
    name = f"{tenant}-ci"
    stack.create_namespace(api, name)
    assert stack.namespace_tenant(name) == tenant
    poll(
        lambda: any(
            s.kind == "ServiceAccount" and s.name == "robot" and s.namespace == ROBOT_NS
            for rb in _rolebindings(stack.kube, name).values()
            for s in rb.subjects or []
        )
    )


def test_tenant_users_cannot_set_forbidden_node_metadata(stack: Stack) -> None:
    node, erin = unique("e2e-node"), unique("erin")
    core = client.CoreV1Api(stack.kube)
    core.create_node({"metadata": {"name": node, "labels": {"pool": "shared"}}})
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    role = f"{node}-labeler"
    rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": erin, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    try:
        api = stack.as_user(erin, ["enclave.dev"])

        def patched() -> bool:
            try:
                api.patch_node(node, {"metadata": {"labels": {"team": "erin"}}})
            except ApiException as err:
                if err.status == 403 and "denied the request" not in str(err.body):
                    return False  # the RBAC binding is not visible to the authorizer yet
                raise
            return True

        poll(patched)
        assert "pool" in refused(lambda: api.patch_node(node, {"metadata": {"labels": {"pool": "mine"}}}))
        assert "secret.key" in refused(lambda: api.patch_node(node, {"metadata": {"labels": {"secret.key": "x"}}}))
        # the status subresource can rewrite labels too: the hook covers it
        patch = {"metadata": {"labels": {"pool": "mine"}}}
        assert "pool" in refused(lambda: api.patch_node_status(node, patch))
        assert client.CoreV1Api(stack.kube).read_node(node).metadata.labels["pool"] == "shared"
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)
        core.delete_node(node)


def test_namespace_created_right_after_its_tenant_is_never_refused(stack: Stack) -> None:
    """Issue 30: a script creates a Tenant, then at once (no retry, no wait) a namespace as its new owner, in
    30 rounds, ten scripts at a time. The Tenant is stored by kube-apiserver before the tenants controller
    publishes it to admission; admission waits, bounded, for the snapshot that shows it rather than refusing
    "you own no tenant". Every other round names the tenant in the label (the "not your tenant" refusal had
    the same race)."""
    rounds = [(unique("race"), unique("racer")) for _ in range(30)]
    apis = {owner: stack.as_user(owner, ["enclave.dev"]) for _, owner in rounds}

    def script(index: int) -> str:
        tenant, owner = rounds[index]
        labels = {TENANT_LABEL: tenant} if index % 2 else {}
        api = apis[owner]
        stack.tenant(tenant, [{"kind": "User", "name": owner}])
        try:
            api.create_namespace({"metadata": {"name": f"{tenant}-ns", "labels": labels}})
        except ApiException as err:
            return f"round {index}: {err.status} {err.body}"
        return ""

    with ThreadPoolExecutor(10) as pool:
        refusals = [found for found in pool.map(script, range(len(rounds))) if found]
    assert not refusals, "\n".join(refusals)
    for tenant, _ in rounds:
        assert stack.namespace_tenant(f"{tenant}-ns") == tenant


def test_namespace_is_admitted_when_the_tenant_reaches_admission_late(stack: Stack) -> None:
    """The same race, made certain: enclave-tenants is paused (SIGSTOP: connections open, silent, as a publisher
    lagging under load) while the Tenant is stored, and resumes half a second after the owner's namespace
    request has gone out. Admission, which has not seen the Tenant when the request reaches it, waits for the
    snapshot that shows it and admits the namespace into it (on main it refused "you own no tenant")."""
    tenants = next(running for running in stack.running.processes if running.spec.name == "tenants")
    popen = tenants.process.popen
    assert popen is not None
    for labelled in (False, True):
        tenant, owner = unique("late"), unique("lateowner")
        api = stack.as_user(owner, ["enclave.dev"])
        labels = {TENANT_LABEL: tenant} if labelled else {}
        popen.send_signal(signal.SIGSTOP)
        resume = threading.Timer(0.5, popen.send_signal, (signal.SIGCONT,))
        try:
            stack.tenant(tenant, [{"kind": "User", "name": owner}])
            resume.start()
            api.create_namespace({"metadata": {"name": f"{tenant}-ns", "labels": labels}})
        finally:
            resume.cancel()
            popen.send_signal(signal.SIGCONT)
        assert stack.namespace_tenant(f"{tenant}-ns") == tenant

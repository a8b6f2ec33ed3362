"""Every Capsule security advisory through v0.15, tried on Enclave: one test per advisory (or per path of one),
named after it, run by the attacker the advisory names against the real control plane.

Capsule (projectcapsule/capsule) is the closest system to Enclave, so its advisories are the attacks a reviewer
tries first. Each docstring says what the attack was in Capsule and what its analogue here is. The attacker acts
through impersonation with the RBAC the advisory assumes (granted below, so only Enclave stands in the way), and
each test asserts the refusal *and* that nothing changed. docs/security.md maps each test to its threat.

Replication advisories (CVE-2026-22872 and its incomplete fix) are in ``test_capsule_advisories_replication.py``,
which runs enclave-replication.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, as_user, owned_namespace
from .tenant_attacks import GROUP, TENANT_LABEL, VERSION, denied, eventually_denied, granted, service_account_client

FORBIDDEN_NODE_LABEL = "node-role.example.com/tenant-pool"
"""A node label the configuration forbids tenant users to set (their node selectors key on it)."""

NAMESPACE_RIGHTS = [
    {
        "apiGroups": [""],
        "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
        "verbs": ["get", "list", "update", "patch"],
    },
    {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "list", "update", "patch"]},
    {"apiGroups": [GROUP], "resources": ["resourcepoolclaims"], "verbs": ["get", "create", "patch", "delete"]},
]
"""What Capsule's namespace advisories assume the attacker holds: patch and update on namespaces and their
subresources, cluster-wide (and on nodes, for the node-metadata one); and claims, which the chart aggregates
into ``admin``."""


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """config, tenants, pools and admission with the node-metadata hook and a forbidden node label; tenant users
    (the ``enclave.dev`` group) hold :data:`NAMESPACE_RIGHTS` for the module."""
    node_metadata = {"forbiddenLabels": {"denied": [FORBIDDEN_NODE_LABEL], "deniedRegex": r"^isolation\.example\.com/"}}
    running = start_tenancy(
        control_plane,
        [{"kind": "Group", "name": USERS}],
        nodes=True,
        pools=True,
        extra_spec={"nodeMetadata": node_metadata},
    )
    subjects = [{"kind": "Group", "name": USERS, "apiGroup": "rbac.authorization.k8s.io"}]
    try:
        with granted(kube, NAMESPACE_RIGHTS, subjects):
            yield running
    finally:
        running.close()


def core(impersonate: Callable[..., Any], user: str) -> client.CoreV1Api:
    return client.CoreV1Api(as_user(impersonate, user))


def labels_of(kube: Any, namespace: str) -> dict[str, str]:
    return dict(client.CoreV1Api(kube).read_namespace(namespace).metadata.labels or {})


def tenant_references(kube: Any, namespace: str) -> list[str]:
    refs = client.CoreV1Api(kube).read_namespace(namespace).metadata.owner_references or []
    return [ref.name for ref in refs if ref.kind == "Tenant"]


def plain_namespace(kube: Any) -> str:
    """A namespace in no tenant, created by the cluster administrator (the hijack target)."""
    name = unique("sec-unowned")
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    return name


def with_tenant_label(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    body = api.read_namespace(name)
    labels = dict(body.metadata.labels or {})
    if value is None:
        labels.pop(TENANT_LABEL, None)
    else:
        labels[TENANT_LABEL] = value
    body.metadata.labels = labels
    return body


# -- CVE-2022-46167: a tenant service account detaches its namespace --------------------------------------------


def _patching_service_account(kube: Any, namespace: str) -> str:
    """A service account of ``namespace`` that a RoleBinding in that namespace lets patch the namespace itself
    (kube-apiserver authorizes a namespace's own object against RoleBindings in it): the advisory's set-up."""
    name = unique("robot")
    client.CoreV1Api(kube).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac = client.RbacAuthorizationV1Api(kube)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch", "update"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return name


def test_cve_2022_46167_tenant_service_account_cannot_drop_its_namespace_owner_reference(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Capsule < 0.1.3: a ServiceAccount of a tenant namespace with PATCH on that namespace removed the Tenant
    owner reference, detaching the namespace from every enforcement. Here the service account is no tenant user
    (the hooks still see the namespace: it carries the tenant label) and owner references are immutable to it."""
    tenant, namespace = owned_namespace(stack, impersonate, unique("alice"))
    robot = client.CoreV1Api(service_account_client(impersonate, namespace, _patching_service_account(kube, namespace)))
    patch = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    denied(lambda: robot.patch_namespace(namespace, patch), "ownerReferences")
    assert tenant_references(kube, namespace) == [tenant]


def test_cve_2022_46167_tenant_service_account_cannot_drop_its_namespace_tenant_label(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The same service account removing the tenant label instead (what detaches a namespace in Enclave: rules,
    RoleBindings and quotas follow the label)."""
    tenant, namespace = owned_namespace(stack, impersonate, unique("alice"))
    robot = client.CoreV1Api(service_account_client(impersonate, namespace, _patching_service_account(kube, namespace)))
    path = "/metadata/labels/" + TENANT_LABEL.replace("/", "~1")
    denied(lambda: robot.patch_namespace(namespace, [{"op": "remove", "path": path}]), TENANT_LABEL)
    assert labels_of(kube, namespace)[TENANT_LABEL] == tenant


# -- CVE-2024-39690: an owner takes a namespace no tenant owns -------------------------------------------------


def test_cve_2024_39690_owner_cannot_hijack_namespace_by_label_patch(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Capsule <= 0.7.0: a tenant owner with patch on namespaces labelled any namespace without a Tenant owner
    reference into its tenant and so gained control of it. Here the owner labels an unowned namespace."""
    owner = unique("mallory")
    tenant, _ = owned_namespace(stack, impersonate, owner)
    target = plain_namespace(kube)
    api = core(impersonate, owner)
    patch = {"metadata": {"labels": {TENANT_LABEL: tenant}}}
    denied(lambda: api.patch_namespace(target, patch))
    assert TENANT_LABEL not in labels_of(kube, target)


def test_cve_2024_39690_owner_cannot_hijack_namespace_by_owner_reference_patch(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The same hijack through the other half of Capsule's ownership: an owner reference to the owner's Tenant."""
    owner = unique("mallory")
    tenant, _ = owned_namespace(stack, impersonate, owner)
    uid = client.CustomObjectsApi(kube).get_cluster_custom_object(GROUP, VERSION, "tenants", tenant)["metadata"]["uid"]
    target = plain_namespace(kube)
    api = core(impersonate, owner)
    reference = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "name": tenant, "uid": uid}
    denied(lambda: api.patch_namespace(target, {"metadata": {"ownerReferences": [reference]}}))
    assert tenant_references(kube, target) == []


# -- CVE-2025-55205: label injection into system namespaces ----------------------------------------------------


@pytest.mark.parametrize("target", ["kube-system", "default", "kube-public", "kube-node-lease"])
def test_cve_2025_55205_tenant_user_cannot_inject_labels_into_system_namespaces(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any], target: str
) -> None:
    """Capsule 0.10.3: tenant users injected arbitrary labels into kube-system, default and Capsule's namespace,
    which TenantResource selectors then matched. Here neither the tenant label nor an arbitrary label lands on a
    system namespace (or on Enclave's own, below)."""
    owner = unique("mallory")
    tenant, _ = owned_namespace(stack, impersonate, owner)
    api = core(impersonate, owner)
    before = labels_of(kube, target)
    for labels in ({TENANT_LABEL: tenant}, {"team": tenant}):
        patch = {"metadata": {"labels": labels}}
        denied(lambda: api.patch_namespace(target, patch))  # noqa: B023 - called at once
    assert labels_of(kube, target) == before


def test_cve_2025_55205_tenant_user_cannot_inject_labels_into_enclaves_namespace(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The advisory's third target, the operator's own namespace."""
    owner = unique("mallory")
    tenant, _ = owned_namespace(stack, impersonate, owner)
    api = core(impersonate, owner)
    denied(lambda: api.patch_namespace(stack.namespace, {"metadata": {"labels": {TENANT_LABEL: tenant}}}))
    assert TENANT_LABEL not in labels_of(kube, stack.namespace)


# -- CVE-2026-30963 and GO-2026-5406: the namespace subresources -----------------------------------------------


def _victim_and_attacker(stack: TenancyStack, impersonate: Callable[..., Any]) -> tuple[str, str, str]:
    """(attacker's tenant, attacker, victim namespace in another tenant)."""
    attacker = unique("mallory")
    evil, _ = owned_namespace(stack, impersonate, attacker)
    _, victim_namespace = owned_namespace(stack, impersonate, unique("alice"))
    return evil, attacker, victim_namespace


def test_cve_2026_30963_namespace_hijack_through_the_status_subresource_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Capsule < 0.13.0: the namespace webhook did not intercept ``namespaces/status``, whose PUT rewrites
    metadata too, so an owner with rights on it moved another tenant's namespace. Here the hook registers the
    subresource and the owner is refused on the victim's namespace and on its own (moving it out)."""
    evil, attacker, victim = _victim_and_attacker(stack, impersonate)
    api = core(impersonate, attacker)
    before = labels_of(kube, victim)[TENANT_LABEL]
    denied(lambda: api.replace_namespace_status(victim, with_tenant_label(api, victim, evil)))
    assert labels_of(kube, victim)[TENANT_LABEL] == before


def test_cve_2026_30963_owner_cannot_release_own_namespace_through_the_status_subresource(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The other direction of the same hole: dropping the tenant label of one's own namespace through
    ``namespaces/status`` to escape the tenant's rules and quotas."""
    owner = unique("mallory")
    tenant, namespace = owned_namespace(stack, impersonate, owner)
    api = core(impersonate, owner)
    denied(lambda: api.replace_namespace_status(namespace, with_tenant_label(api, namespace, None)), TENANT_LABEL)
    assert labels_of(kube, namespace)[TENANT_LABEL] == tenant


def test_go_2026_5406_namespace_hijack_through_the_finalize_subresource_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """GO-2026-5406 (CVE-2026-55636), the incomplete fix of CVE-2026-30963: Capsule's rule said
    ``namespace/finalize`` (singular), which never matches, so ``PUT .../finalize`` still moved namespaces. Here the
    rule is ``namespaces/finalize`` and this test goes through kube-apiserver, so a misspelt rule would fail it."""
    evil, attacker, victim = _victim_and_attacker(stack, impersonate)
    api = core(impersonate, attacker)
    before = labels_of(kube, victim)[TENANT_LABEL]
    denied(lambda: api.replace_namespace_finalize(victim, with_tenant_label(api, victim, evil)))
    assert labels_of(kube, victim)[TENANT_LABEL] == before


def test_go_2026_5406_owner_cannot_release_own_namespace_through_the_finalize_subresource(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The finalize path used to drop one's own namespace out of its tenant."""
    owner = unique("mallory")
    tenant, namespace = owned_namespace(stack, impersonate, owner)
    api = core(impersonate, owner)
    denied(lambda: api.replace_namespace_finalize(namespace, with_tenant_label(api, namespace, None)), TENANT_LABEL)
    assert labels_of(kube, namespace)[TENANT_LABEL] == tenant


def test_webhook_configuration_names_every_namespace_subresource_in_the_plural(stack: TenancyStack, kube: Any) -> None:
    """GO-2026-5406's root cause, checked where it lives: every subresource rule of Enclave's validating hooks
    names a resource kube-apiserver serves (``namespaces/finalize``, never ``namespace/finalize``)."""
    registrations = client.AdmissionregistrationV1Api(kube)
    hooks = registrations.read_validating_webhook_configuration(f"{stack.config_name}-validating").webhooks
    namespace_rules = {
        resource
        for hook in hooks
        if hook.name.startswith("namespaces.")
        for rule in hook.rules or []
        for resource in rule.resources or []
    }
    assert {"namespaces", "namespaces/status", "namespaces/finalize"} <= namespace_rules, namespace_rules
    assert not any(resource.startswith("namespace/") for resource in namespace_rules), namespace_rules


# -- GHSA-gjw4-3v3v-rqxg: forbidden metadata -------------------------------------------------------------------


FORBIDDEN: dict[str, dict[str, Any]] = {
    "forbiddenLabels": {"denied": ["pod-security.kubernetes.io/enforce"], "deniedRegex": r"^isolation\.example\.com/"},
    "forbiddenAnnotations": {"deniedRegex": r"^scheduler\.example\.com/"},
}
"""The tenant's forbidden namespace metadata: the Pod Security label exactly, anything under two prefixes."""


def test_ghsa_gjw4_3v3v_rqxg_forbidden_namespace_label_is_refused_at_create(
    stack: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Capsule <= 0.13.6: the forbidden metadata lists (namespaces, Services, nodes) could be got round, so an
    owner set the keys other controllers trust (Pod Security Admission's level first). Here a namespace created
    with a forbidden label never exists."""
    owner = unique("mallory")
    tenant, _ = owned_namespace(stack, impersonate, owner, namespaceOptions=FORBIDDEN)
    api = core(impersonate, owner)
    name = f"{tenant}-privileged"
    body = {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    denied(lambda: api.create_namespace(body), "pod-security.kubernetes.io/enforce")
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(stack.kube).read_namespace(name)
    assert missing.value.status == 404


@pytest.mark.parametrize(
    ("what", "metadata"),
    [
        ("denied label", {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}),
        ("label matching the regex", {"labels": {"isolation.example.com/network": "open"}}),
        ("annotation matching the regex", {"annotations": {"scheduler.example.com/pool": "gpu"}}),
    ],
)
def test_ghsa_gjw4_3v3v_rqxg_forbidden_namespace_metadata_is_refused_on_patch(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any], what: str, metadata: dict[str, Any]
) -> None:
    """The same lists on an existing namespace, by merge patch: the exact key and both regular expressions."""
    owner = unique("mallory")
    _, namespace = owned_namespace(stack, impersonate, owner, namespaceOptions=FORBIDDEN)
    api = core(impersonate, owner)
    key = next(iter({**metadata.get("labels", {}), **metadata.get("annotations", {})}))
    denied(lambda: api.patch_namespace(namespace, {"metadata": metadata}), key)
    live = client.CoreV1Api(kube).read_namespace(namespace).metadata
    for key in metadata.get("labels", {}):
        assert key not in (live.labels or {}), what
    for key in metadata.get("annotations", {}):
        assert key not in (live.annotations or {}), what


def test_ghsa_gjw4_3v3v_rqxg_forbidden_namespace_label_is_refused_through_the_status_subresource(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The forbidden label written through ``namespaces/status`` (a metadata write the main resource's rule would
    not see)."""
    owner = unique("mallory")
    _, namespace = owned_namespace(stack, impersonate, owner, namespaceOptions=FORBIDDEN)
    api = core(impersonate, owner)
    body = api.read_namespace(namespace)
    body.metadata.labels = {**(body.metadata.labels or {}), "pod-security.kubernetes.io/enforce": "privileged"}
    denied(lambda: api.replace_namespace_status(namespace, body), "pod-security.kubernetes.io/enforce")
    assert "pod-security.kubernetes.io/enforce" not in labels_of(kube, namespace)


def test_ghsa_gjw4_3v3v_rqxg_tenant_service_account_cannot_set_a_forbidden_namespace_label(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The forbidden lists hold for the tenant's service accounts too: a robot of the tenant namespace with
    get/patch on namespaces (CVE-2022-46167's setup) once set a label the Tenant forbids, since the check ran
    only for tenant users."""
    _, namespace = owned_namespace(stack, impersonate, unique("mallory"), namespaceOptions=FORBIDDEN)
    account = _patching_service_account(kube, namespace)
    robot = client.CoreV1Api(service_account_client(impersonate, namespace, account))
    patch = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    denied(lambda: robot.patch_namespace(namespace, patch), "pod-security.kubernetes.io/enforce")
    assert "pod-security.kubernetes.io/enforce" not in labels_of(kube, namespace)


@pytest.fixture
def node(kube: Any) -> Iterator[str]:
    """A Node object (no kubelet: only its metadata matters to the hook)."""
    name = unique("sec-node")
    core_api = client.CoreV1Api(kube)
    core_api.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    yield name
    core_api.delete_node(name)


@pytest.mark.parametrize("label", [FORBIDDEN_NODE_LABEL, "isolation.example.com/tier"])
def test_ghsa_gjw4_3v3v_rqxg_forbidden_node_label_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any], node: str, label: str
) -> None:
    """The cluster-wide forbidden node metadata of the same advisory: a tenant user allowed to patch nodes
    cannot put the label tenants' node selectors trust on a node (the exact key and the regex)."""
    owner = unique("mallory")
    owned_namespace(stack, impersonate, owner)
    api = core(impersonate, owner)
    denied(lambda: api.patch_node(node, {"metadata": {"labels": {label: "mine"}}}), label)
    assert label not in (client.CoreV1Api(kube).read_node(node).metadata.labels or {})


# -- GHSA-f94q-w3w8-cj67 and GHSA-gxjc-74v5-3vx3: patterns checked on the stale object ---------------------------


def hostname_rule(pattern: str) -> dict[str, Any]:
    return {"enforce": {"action": "allow", "ingress": {"hostnames": [{"exp": pattern}]}}}


def test_ghsa_f94q_w3w8_cj67_tenant_update_to_an_invalid_hostname_pattern_is_refused(
    stack: TenancyStack, kube: Any
) -> None:
    """Capsule 0.13.0-0.13.6: the Tenant hook validated the *old* object's allowed-hostname regex on UPDATE, so
    a valid Tenant could be updated to a pattern that does not compile (which then failed every Ingress of the
    tenant). Here the hook judges the submitted rules: a valid rule is accepted, the update to a broken
    hostname pattern refused naming the field, and the stored Tenant keeps the valid one."""
    custom = client.CustomObjectsApi(kube)
    name = unique("sec-hosts")
    pattern = r"[a-z0-9-]+\.tenant\.example"
    stack.tenant(name, [{"kind": "User", "name": unique("alice")}], rules=[hostname_rule(pattern)])
    bad = hostname_rule("(" + pattern)
    denied(
        lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", name, {"spec": {"rules": [bad]}}),
        "spec.rules[0]",
    )
    stored = custom.get_cluster_custom_object(GROUP, VERSION, "tenants", name)["spec"]["rules"]
    assert stored[0]["enforce"]["ingress"]["hostnames"][0]["exp"] == pattern


def test_ghsa_gxjc_74v5_3vx3_configuration_update_to_an_invalid_forbidden_pattern_is_refused(
    stack: TenancyStack, kube: Any
) -> None:
    """Capsule's forbidden-metadata regex had the same stale-object check, and its cluster-wide configuration had
    none (an invalid node-metadata regex panicked every node review). Here the configuration hook judges the new
    object: the update is refused naming the field, and the last good pattern stays in force."""
    custom = client.CustomObjectsApi(kube)
    patch = {"spec": {"nodeMetadata": {"forbiddenLabels": {"deniedRegex": r"^isolation\.example\.com/("}}}}
    denied(
        lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name, patch),
        "deniedRegex",
    )
    spec = custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name)["spec"]
    assert spec["nodeMetadata"]["forbiddenLabels"]["deniedRegex"] == r"^isolation\.example\.com/"


def test_ghsa_gxjc_74v5_3vx3_tenant_update_to_an_invalid_forbidden_pattern_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The advisory itself: Capsule validated the *old* Tenant's forbidden-metadata regex on UPDATE, so a Tenant
    could be updated to a pattern that does not compile. Here the update is refused naming the field, and the
    valid pattern keeps refusing the owner's label (a pattern that cannot compile must never mean "forbid
    nothing")."""
    owner = unique("mallory")
    tenant, namespace = owned_namespace(stack, impersonate, owner, namespaceOptions=FORBIDDEN)
    custom = client.CustomObjectsApi(kube)
    broken = {**FORBIDDEN["forbiddenLabels"], "deniedRegex": r"^isolation\.example\.com/("}
    patch = {"spec": {"namespaceOptions": {"forbiddenLabels": broken}}}
    denied(
        lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, patch),
        "namespaceOptions.forbiddenLabels.deniedRegex",
    )
    api = core(impersonate, owner)
    denied(lambda: api.patch_namespace(namespace, {"metadata": {"labels": {"isolation.example.com/net": "open"}}}))


# -- Capsule's owner validation (0.13.6): owners the fence cannot see -------------------------------------------


@pytest.fixture(scope="module")
def platform_operator(
    kube: Any, impersonate: Callable[..., Any], stack: TenancyStack
) -> Iterator[client.CustomObjectsApi]:
    """Whoever manages tenants day to day (a GitOps account, an operator): RBAC to create Tenants and
    TenantOwners, and outside ``system:masters`` (which the tenants hook leaves alone as break-glass)."""
    user = unique("platform-ops")
    subjects = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    rules = [{"apiGroups": [GROUP], "resources": ["tenants", "tenantowners"], "verbs": ["create", "get"]}]
    with granted(kube, rules, subjects):
        yield client.CustomObjectsApi(impersonate(user, ["platform-operators"]))


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("ServiceAccount", "system:serviceaccount:kube-system:replicaset-controller"),
        ("Group", "system:masters"),
        ("User", "system:kube-controller-manager"),
    ],
)
def test_tenant_owner_the_namespace_hooks_skip_is_refused(
    platform_operator: client.CustomObjectsApi, kind: str, name: str
) -> None:
    """Capsule 0.13.6 added validation of service-account owners ("fix: add serviceaccount validation for
    tenantowners and tenants"): an owner the namespace webhook skips (a control-plane account) would own a tenant
    with no fence around it. Here such an owner is refused on the Tenant, naming the field."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": unique("sec-sysowner")},
        "spec": {"owners": [{"kind": kind, "name": name}]},
    }
    denied(lambda: platform_operator.create_cluster_custom_object(GROUP, VERSION, "tenants", body), "spec.owners[0]")


def test_tenant_owner_object_the_namespace_hooks_skip_is_refused(platform_operator: client.CustomObjectsApi) -> None:
    """The same owner declared once as a TenantOwner, which tenants pick up by label."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TenantOwner",
        "metadata": {"name": unique("sec-sysowner")},
        "spec": {"kind": "ServiceAccount", "name": "system:serviceaccount:kube-system:namespace-controller"},
    }
    denied(lambda: platform_operator.create_cluster_custom_object(GROUP, VERSION, "tenantowners", body), "spec.name")


def test_owner_cannot_create_a_namespace_in_a_tenant_it_does_not_own(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The creation-time form of every hijack above: naming another tenant in the label of a new namespace."""
    attacker = unique("mallory")
    owned_namespace(stack, impersonate, attacker)
    victim, _ = owned_namespace(stack, impersonate, unique("alice"))
    api = core(impersonate, attacker)
    name = f"{victim}-planted"
    denied(lambda: api.create_namespace({"metadata": {"name": name, "labels": {TENANT_LABEL: victim}}}))
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(kube).read_namespace(name)
    assert missing.value.status == 404


# -- Capsule 0.13.8 "add resourcepoolclaim validation", and the pool bypass reported as capsule#1662 ---------------


@pytest.fixture
def pool(kube: Any) -> Iterator[Callable[[str, dict[str, str]], str]]:
    """``pool(tenant, hard)``: a ResourcePool selecting ``tenant``'s namespaces that gives nothing without a claim
    (``defaultsZero``); the pools are deleted afterwards."""
    custom = client.CustomObjectsApi(kube)
    made: list[str] = []

    def create(tenant: str, hard: dict[str, str]) -> str:
        name = unique("sec-pool")
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourcePool",
            "metadata": {"name": name},
            "spec": {
                "quota": {"hard": hard},
                "config": {"defaultsZero": True},
                "selectors": [{"matchLabels": {TENANT_LABEL: tenant}}],
            },
        }
        custom.create_cluster_custom_object(GROUP, VERSION, "resourcepools", body)
        made.append(name)
        return name

    yield create
    for name in made:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "resourcepools", name)


def claim_body(name: str, amounts: dict[str, str], pool_name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourcePoolClaim",
        "metadata": {"name": name},
        "spec": {"pool": pool_name, "claim": amounts},
    }


def test_owner_cannot_claim_from_a_pool_that_does_not_select_its_namespace(
    stack: TenancyStack, impersonate: Callable[..., Any], pool: Callable[[str, dict[str, str]], str]
) -> None:
    """Capsule 0.13.8 added ResourcePoolClaim validation ("security measures"): a claim naming a pool meant for
    another tenant drew that tenant's resources. Here admission refuses a claim on a pool that does not select
    the claim's namespace, naming ``spec.pool``, once the pool is known to it."""
    attacker = unique("mallory")
    _, namespace = owned_namespace(stack, impersonate, attacker)
    victim, _ = owned_namespace(stack, impersonate, unique("alice"))
    theirs = pool(victim, {"services": "10"})
    custom = client.CustomObjectsApi(as_user(impersonate, attacker))
    body = claim_body("steal", {"services": "10"}, theirs)
    eventually_denied(
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", body),
        "does not select",
    )


def test_pool_limits_bypass_by_deleting_or_shrinking_a_used_claim_is_refused(
    stack: TenancyStack, kube: Any, impersonate: Callable[..., Any], pool: Callable[[str, dict[str, str]], str]
) -> None:
    """The pool bypass reported against Capsule (projectcapsule/capsule#1662): claim everything in namespace A,
    start workloads, delete (or shrink) the claim, claim again in namespace B, and use the pool twice. Here a bound
    claim can be neither deleted nor shrunk below what its namespace uses."""
    owner = unique("alice")
    tenant, namespace = owned_namespace(stack, impersonate, owner)
    mine = pool(tenant, {"services": "2"})
    custom = client.CustomObjectsApi(as_user(impersonate, owner))
    body = claim_body("all", {"services": "2"}, mine)
    poll(
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", body),
        timeout=20,
        what="the claim admitted once admission knows the pool",
    )
    quotas = client.CoreV1Api(kube)

    def used() -> dict[str, str]:
        status = quotas.read_namespaced_resource_quota(f"enclave-pool-{mine}", namespace).status
        return dict((status.used or {}) if status else {})

    poll(
        lambda: quotas.read_namespaced_resource_quota(f"enclave-pool-{mine}", namespace).spec.hard == {"services": "2"}
    )
    service = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}
    poll(lambda: core(impersonate, owner).create_namespaced_service(namespace, service), what="a Service admitted")
    poll(lambda: used().get("services") == "1", what="the quota counting the Service")
    denied(
        lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", "all"),
        "still uses",
    )
    shrink = {"spec": {"claim": {"services": "0"}}}
    denied(
        lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "resourcepoolclaims", "all", shrink),
        "cannot shrink",
    )

"""The behavioural checks of the Kubernetes Multi-Tenancy Benchmarks (kubernetes-sigs/multi-tenancy, profile
levels 1 and 2) that apply to Enclave, each run as a tenant owner against the real control plane.

The benchmark assumes the platform turned its fences on; so does this suite: every tenant here carries
:data:`MTB_RULES`, the rules a platform following the benchmark writes (no privileged or escalating containers,
no added capabilities, no host namespaces, ports or paths, no NodePort Services, images always pulled, Pods run
as non-root). A test per check, named after its benchmark id and title. Checks that belong to RBAC (cluster
resources, quotas, role escalation) are asserted as kube-apiserver refusals: Enclave's part there is the
RoleBindings it writes (``admin`` in the tenant's namespaces, nothing cluster-wide).

Not here, and why (docs/security.md lists them): MTB-PL1-CC-FNS-1/2 (namespace resource and object quotas) are
configuration checks that enclave-globalquotas and enclave-pools satisfy (their own suites prove the quotas);
"default deny network connections across tenants" needs a network plugin enforcing NetworkPolicies, which the
test control plane has not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace
from .tenant_attacks import GROUP, VERSION, denied, eventually_denied, forbidden, granted

IMAGE = "registry.example/app:1.0"

MTB_RULES: list[dict[str, Any]] = [
    {  # BC-CPI-3, -5, -6 and BC-HI-1, -3, -4, -5: no privileges, capabilities, host namespaces, ports or paths
        "enforce": {
            "action": "deny",
            "workloads": {
                "security": {
                    "privileged": True,
                    "allowPrivilegeEscalation": True,
                    "hostNamespaces": True,
                    "hostPorts": True,
                    "hostPaths": [{"exp": "/.*"}],
                    "capabilities": ["ALL"],
                }
            },
        }
    },
    {"enforce": {"action": "deny", "services": {"types": ["NodePort"]}}},  # MTB-PL1-BC-HI-1: no NodePort
    {  # MTB-PL1-CC-DI-1: require always imagePullPolicy
        "enforce": {"action": "allow", "workloads": {"registries": [{"url": ".*", "pullPolicies": ["Always"]}]}}
    },
    {  # MTB-PL1-BC-CPI-4: require run as non-root user (the Pod-level securityContext)
        "enforce": {
            "action": "deny",
            "conditions": [
                {
                    "name": "runs-as-root",
                    "expression": "object.kind == 'Pod' && !(has(object.spec.securityContext) && "
                    "has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot)",
                }
            ],
            "workloads": {"targets": ["Pod"]},
        }
    },
]


def compliant_pod(name: str, **spec: Any) -> dict[str, Any]:
    """A Pod every rule admits; a test changes one field to make it break exactly one check."""
    container = {
        "name": "app",
        "image": IMAGE,
        "imagePullPolicy": "Always",
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    container.update(spec.pop("container", {}))
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"securityContext": {"runAsNonRoot": True}, "containers": [container]},
    }
    body["spec"].update(spec)
    return body


def mtb_tenant(fence: TenancyStack, impersonate: Callable[..., Any]) -> tuple[str, str, str]:
    """(owner, tenant, namespace): a fresh tenant with :data:`MTB_RULES` whose namespace admission already judges
    by them (a compliant Pod is admitted, dry run)."""
    owner = unique("tenant-a")
    tenant, namespace = owned_namespace(fence, impersonate, owner, rules=MTB_RULES)
    api = client.CoreV1Api(as_user(impersonate, owner))
    eventually_denied(lambda: api.create_namespaced_pod(namespace, compliant_pod("probe", hostPID=True), dry_run="All"))
    api.create_namespaced_pod(namespace, compliant_pod("probe"), dry_run="All")
    return owner, tenant, namespace


def pods(impersonate: Callable[..., Any], owner: str) -> client.CoreV1Api:
    return client.CoreV1Api(as_user(impersonate, owner))


# -- Profile level 1: control plane and tenant isolation -------------------------------------------------------


def test_mtb_pl1_cc_cpi_1_block_access_to_cluster_resources(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Tenants cannot list or change cluster-scoped resources: Enclave binds owners only inside their
    namespaces (plus namespace creation), so kube-apiserver's RBAC refuses the rest."""
    owner, _, _ = mtb_tenant(fence, impersonate)
    api = as_user(impersonate, owner)
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for call in (
        core.list_node,
        core.list_persistent_volume,
        rbac.list_cluster_role,
        rbac.list_cluster_role_binding,
        client.StorageV1Api(api).list_storage_class,
        lambda: client.ApiextensionsV1Api(api).list_custom_resource_definition(),
        lambda: client.AdmissionregistrationV1Api(api).list_validating_webhook_configuration(),
    ):
        forbidden(call)
    binding = {
        "metadata": {"name": unique("escape")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": owner, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    forbidden(lambda: rbac.create_cluster_role_binding(binding))


def test_mtb_pl1_cc_ti_2_block_access_to_other_tenant_resources(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Tenant A can neither read nor write anything in tenant B's namespace."""
    owner_a, _, _ = mtb_tenant(fence, impersonate)
    _, _, namespace_b = mtb_tenant(fence, impersonate)
    api = as_user(impersonate, owner_a)
    core = client.CoreV1Api(api)
    for call in (
        lambda: core.list_namespaced_pod(namespace_b),
        lambda: core.list_namespaced_secret(namespace_b),
        lambda: core.list_namespaced_config_map(namespace_b),
        lambda: client.RbacAuthorizationV1Api(api).list_namespaced_role_binding(namespace_b),
        lambda: core.create_namespaced_config_map(namespace_b, {"metadata": {"name": "planted"}}),
    ):
        forbidden(call)


def test_mtb_pl1_cc_ti_1_block_modification_of_resource_quotas(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Tenants cannot create, change or delete the ResourceQuotas (nor the LimitRanges) of their namespaces:
    the ``admin`` role Enclave binds reads them only."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    admin = client.CoreV1Api(kube)
    admin.create_namespaced_resource_quota(namespace, {"metadata": {"name": "fair"}, "spec": {"hard": {"pods": "5"}}})
    admin.create_namespaced_limit_range(
        namespace,
        {"metadata": {"name": "fair"}, "spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]}},
    )
    api = pods(impersonate, owner)
    raise_quota = {"spec": {"hard": {"pods": "500"}}}
    for call in (
        lambda: api.patch_namespaced_resource_quota("fair", namespace, raise_quota),
        lambda: api.delete_namespaced_resource_quota("fair", namespace),
        lambda: api.delete_collection_namespaced_resource_quota(namespace),
        lambda: api.create_namespaced_resource_quota(namespace, {"metadata": {"name": "mine"}, "spec": {"hard": {}}}),
        lambda: api.patch_namespaced_limit_range("fair", namespace, {"spec": {"limits": []}}),
        lambda: api.delete_namespaced_limit_range("fair", namespace),
    ):
        forbidden(call)
    assert admin.read_namespaced_resource_quota("fair", namespace).spec.hard == {"pods": "5"}


def test_mtb_pl1_bc_cpi_2_block_multitenant_resources(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Tenants cannot change what the platform set up for multi-tenancy in their namespace: even when RBAC lets
    them write RuleStatuses (a chart aggregating Enclave's kinds into ``admin``), admission refuses a tenant user's
    RuleStatus write (its ``spec`` rules come last and the last match decides); their Tenant is out of reach."""
    owner, tenant, namespace = mtb_tenant(fence, impersonate)
    subjects = [{"kind": "User", "name": owner, "apiGroup": "rbac.authorization.k8s.io"}]
    rules = [{"apiGroups": [GROUP], "resources": ["rulestatuses"], "verbs": ["get", "update", "patch", "create"]}]
    custom = client.CustomObjectsApi(as_user(impersonate, owner))
    loosen = {"spec": [{"enforce": {"action": "allow", "workloads": {"security": {"privileged": True}}}}]}
    with granted(kube, rules, subjects):
        poll(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rulestatuses", "default"))
        denied(
            lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "rulestatuses", "default", loosen)
        )
    forbidden(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "tenants", tenant, {"spec": {"rules": []}}))
    spec = (
        client.CustomObjectsApi(kube)
        .get_namespaced_custom_object(GROUP, VERSION, namespace, "rulestatuses", "default")
        .get("spec")
    )
    assert not spec


# -- Profile level 1: host and container isolation, each with the rules on -------------------------------------


def refuses_one_pod(fence: TenancyStack, kube: Any, impersonate: Callable[..., Any], named: str, **change: Any) -> None:
    """A Pod breaking exactly one benchmark check is refused naming what broke it and is not stored; a compliant
    Pod in the same namespace is admitted, so the refusal is the check's and not a closed fence's."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    api = pods(impersonate, owner)
    name = unique("breaks")
    denied(lambda: api.create_namespaced_pod(namespace, compliant_pod(name, **change)), named)
    assert not client.CoreV1Api(kube).list_namespaced_pod(namespace, field_selector=f"metadata.name={name}").items
    api.create_namespaced_pod(namespace, compliant_pod(unique("complies")))


def secured(**context: Any) -> dict[str, Any]:
    """A container securityContext that keeps privilege escalation off, plus ``context``."""
    return {"securityContext": {"allowPrivilegeEscalation": False, **context}}


def test_mtb_pl1_bc_cpi_3_block_add_capabilities(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    refuses_one_pod(fence, kube, impersonate, "capabilities", container=secured(capabilities={"add": ["NET_RAW"]}))


def test_mtb_pl1_bc_cpi_4_require_run_as_non_root_user(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """A Pod that does not declare ``runAsNonRoot: true`` is refused by the rule whose CEL condition says so
    (``MTB_RULES[3]``; the denial names the rule)."""
    refuses_one_pod(fence, kube, impersonate, "spec.rules[3]", securityContext={})


def test_mtb_pl1_bc_cpi_5_block_privileged_containers(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """(kube-apiserver itself refuses ``privileged`` with ``allowPrivilegeEscalation: false``, so this container
    leaves escalation unset: the denial must still name ``privileged``.)"""
    refuses_one_pod(fence, kube, impersonate, "privileged", container={"securityContext": {"privileged": True}})


def test_mtb_pl1_bc_cpi_6_block_privilege_escalation(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Explicitly allowed, and unset (which Linux and Pod Security Standards read as allowed)."""
    refuses_one_pod(fence, kube, impersonate, "allowPrivilegeEscalation", container={"securityContext": {}})
    refuses_one_pod(
        fence,
        kube,
        impersonate,
        "allowPrivilegeEscalation",
        container={"securityContext": {"allowPrivilegeEscalation": True}},
    )


def test_mtb_pl1_bc_hi_1_block_use_of_host_path_volumes(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    refuses_one_pod(fence, kube, impersonate, "hostPath", volumes=[{"name": "h", "hostPath": {"path": "/var/lib"}}])


def test_mtb_pl1_bc_hi_1_block_use_of_bind_mounts(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """The container runtime's socket bind-mounted into the Pod (the path normalised: ``//var/./run/``)."""
    socket = {"name": "docker", "hostPath": {"path": "//var/./run/docker.sock", "type": "Socket"}}
    mount = {"volumeMounts": [{"name": "docker", "mountPath": "/sock"}], **secured()}
    refuses_one_pod(fence, kube, impersonate, "hostPath", volumes=[socket], container=mount)


def test_mtb_pl1_bc_hi_3_block_use_of_host_networking_and_ports(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    refuses_one_pod(fence, kube, impersonate, "hostNetwork", hostNetwork=True)
    ports = {"ports": [{"containerPort": 8080, "hostPort": 8080}], **secured()}
    refuses_one_pod(fence, kube, impersonate, "hostPort", container=ports)


def test_mtb_pl1_bc_hi_4_block_use_of_host_pid(fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]) -> None:
    refuses_one_pod(fence, kube, impersonate, "hostPID", hostPID=True)


def test_mtb_pl1_bc_hi_5_block_use_of_host_ipc(fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]) -> None:
    refuses_one_pod(fence, kube, impersonate, "hostIPC", hostIPC=True)


def test_mtb_pl1_cc_di_1_require_always_image_pull_policy(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Another tenant's private image cached on a node cannot be started without pulling it (with credentials)."""
    refuses_one_pod(
        fence, kube, impersonate, "imagePullPolicy", container={"imagePullPolicy": "IfNotPresent", **secured()}
    )


def test_mtb_pl1_bc_hi_1_block_use_of_nodeport_services(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """A NodePort Service (which opens a port on every node) is refused; a ClusterIP Service is admitted, and a
    ClusterIP Service cannot be turned into a NodePort one later."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    api = pods(impersonate, owner)
    port = [{"port": 80, "targetPort": 8080}]

    def service(name: str, kind: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"type": kind, "ports": port, "selector": {"app": "x"}}}

    denied(lambda: api.create_namespaced_service(namespace, service("node", "NodePort")), "NodePort")
    api.create_namespaced_service(namespace, service("inside", "ClusterIP"))
    denied(lambda: api.patch_namespaced_service("inside", namespace, {"spec": {"type": "NodePort"}}), "NodePort")
    assert client.CoreV1Api(kube).read_namespaced_service("inside", namespace).spec.type == "ClusterIP"


def test_mtb_pl1_block_use_of_another_tenants_persistent_volume(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """A claim naming a PersistentVolume of another tenant (its data) is refused, whatever the rules say."""
    owner_a, _, namespace_a = mtb_tenant(fence, impersonate)
    _, tenant_b, _ = mtb_tenant(fence, impersonate)
    volume = unique("sec-pv-b")
    core = client.CoreV1Api(kube)
    core.create_persistent_volume(
        {
            "metadata": {"name": volume, "labels": {"enclave.dev/tenant": tenant_b}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": f"/data/{volume}"},
                "persistentVolumeReclaimPolicy": "Retain",
            },
        }
    )
    try:
        claim = {
            "metadata": {"name": "steal"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": volume,
                "storageClassName": "",
            },
        }
        api = pods(impersonate, owner_a)
        eventually_denied(lambda: api.create_namespaced_persistent_volume_claim(namespace_a, claim), volume)
    finally:
        core.delete_persistent_volume(volume)


# -- Profile level 2: self-service operations ------------------------------------------------------------------


def test_mtb_pl2_bc_ops_3_create_role_bindings(fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]) -> None:
    """Tenant owners can grant their team access inside their namespace without the administrator."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    rbac = client.RbacAuthorizationV1Api(as_user(impersonate, owner))
    binding = {
        "metadata": {"name": "team-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": unique("joe"), "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    assert client.RbacAuthorizationV1Api(kube).read_namespaced_role_binding("team-view", namespace)


def test_mtb_pl2_bc_ops_4_create_network_policies(
    fence: TenancyStack, kube: Any, impersonate: Callable[..., Any]
) -> None:
    """Tenant owners can add NetworkPolicies for their own workloads."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    networking = client.NetworkingV1Api(as_user(impersonate, owner))
    policy = {"metadata": {"name": "deny-all"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    networking.create_namespaced_network_policy(namespace, policy)
    assert client.NetworkingV1Api(kube).read_namespaced_network_policy("deny-all", namespace)


def test_mtb_pl2_cc_ti_1_block_role_privilege_escalation(fence: TenancyStack, impersonate: Callable[..., Any]) -> None:
    """Tenant owners cannot bind (or write a Role holding) more than they hold: binding ``cluster-admin`` in their
    own namespace, or a Role granting ``escalate``/``bind`` and Secrets everywhere, is refused by RBAC."""
    owner, _, namespace = mtb_tenant(fence, impersonate)
    rbac = client.RbacAuthorizationV1Api(as_user(impersonate, owner))
    binding = {
        "metadata": {"name": "escalate"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": owner, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    forbidden(lambda: rbac.create_namespaced_role_binding(namespace, binding))
    role = {
        "metadata": {"name": "escalate"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    forbidden(lambda: rbac.create_namespaced_role(namespace, role))

"""Every RBAC rule the chart can render, held to an explicit allow-list: a widened rule fails here.

The chart is rendered with every component on (and every RBAC-shaping option set) and each ClusterRole, Role and
binding is compared with :data:`ALLOWED` / :data:`BOUND`, written out by hand from what each component's code
calls (the comment at the top of each ``templates/<component>/rbac.yaml`` says which call needs which rule).
Adding a verb, a resource, a namespace or a subject to any of them, or binding a namespace-only role
cluster-wide, changes the render and fails the test until the allow-list is changed too, in review, where the
reason has to be given. ``tests/security/test_rbac_access.py`` asks the real apiserver what the same objects
allow.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from enclave_testing import binaries
from enclave_testing.paths import repo_root

CHART = repo_root() / "charts" / "enclave"
KUBE_VERSION = "1.35.4"
RELEASE_NAMESPACE = "enclave-system"
COMPONENTS = ("config", "tenants", "admission", "quotas", "globalquotas", "pools", "replication")
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")

Manifest = dict[str, Any]
Rule = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""(apiGroups, resources, resourceNames, verbs), each sorted: a PolicyRule compared by what it grants."""


CA_SECRET = "endpoint-ca"
"""``impersonation.caSecretName`` in the every-component render: replication may get that one Secret."""


def every_component_values() -> dict[str, Any]:
    """Every component on, and every value that shapes RBAC set."""
    values: dict[str, Any] = {name: {"enabled": True} for name in COMPONENTS}
    values["tenants"]["rbac"] = {"bindableClusterRoles": ["edit"]}
    values["replication"]["rbac"] = {
        "impersonationNamespaces": ["replication-accounts"],
        "sourceNamespaces": ["replication-sources"],
    }
    values["networkPolicy"] = {"apiServerCIDRs": ["192.0.2.10/32"]}
    impersonation = {"endpoint": "https://proxy.example", "caSecretName": CA_SECRET}
    values["serviceConfiguration"] = {
        "spec": {"impersonation": {**impersonation, "caSecretNamespace": "replication-accounts"}}
    }
    return values


def render(tmp_path: Path, values: dict[str, Any], namespace: str = RELEASE_NAMESPACE) -> list[Manifest]:
    """`helm template` of the chart with ``values`` into ``namespace`` (CRDs excluded)."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    result = subprocess.run([*args, "--values", str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> Rule:
    return (tuple(sorted(groups)), tuple(sorted(resources)), tuple(sorted(names or [])), tuple(sorted(verbs)))


def _rules_of(role: Manifest) -> set[Rule]:
    return {
        _rule(r.get("apiGroups", []), r.get("resources", []), r["verbs"], r.get("resourceNames"))
        for r in role.get("rules") or []
    }


READ = ["get", "list", "watch"]
CRDS = sorted(path.stem for path in (CHART / "crds").glob("*.yaml"))
PLURALS = sorted(name.split(".")[0] for name in CRDS)
WEBHOOK_CONFIGURATIONS = ["enclave-mutating-webhook-configuration", "enclave-validating-webhook-configuration"]
PROVISIONER, DELETER = "enclave-namespace-provisioner", "enclave-namespace-deleter"
ADMISSION_HOOKS = ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]
ADMISSION_POLICIES = ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
TENANT_DELETION = "enclave-default-tenant-deletion"
CLIENT_SECRETS = [
    f"enclave-tls-client-{name}"
    for name in ("admission", "globalquotas", "pools", "proxy", "quotas", "replication", "tenants")
]
"""One client certificate Secret per component that subscribes (enclave_core.snapshots.access.CLIENT_COMPONENTS)."""
KEPT_SECRETS = ["enclave-tls", *CLIENT_SECRETS]


def _own_namespace() -> Rule:
    return _rule([""], ["namespaces"], ["get"], [RELEASE_NAMESPACE])


def _lease(component: str) -> set[Rule]:
    return {
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [f"enclave-{component}"]),
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
    }


EVENTS = _rule([""], ["events"], ["create"])
LEDGERS_OWNED = {
    _rule(["enclave.dev"], ["quantityledgers"], [*READ, "create", "delete"]),
    _rule(["enclave.dev"], ["quantityledgers/status"], ["update"]),
}

ALLOWED: dict[tuple[str, str, str], set[Rule]] = {
    # -- enclave-config: the configuration, the webhook configurations and namespace roles it generates, CRDs.
    ("ClusterRole", "", "enclave-config"): {
        _rule(["enclave.dev"], ["serviceconfigurations"], [*READ, "create", "update", "patch"]),
        _rule(["enclave.dev"], ["serviceconfigurations/status"], ["get", "update", "patch"]),
        _rule(["enclave.dev"], ["tenants", "tenantowners"], READ),
        _rule(["admissionregistration.k8s.io"], ADMISSION_HOOKS, [*READ, "create"]),
        _rule(["admissionregistration.k8s.io"], ADMISSION_HOOKS, ["update", "patch", "delete"], WEBHOOK_CONFIGURATIONS),
        _rule(["admissionregistration.k8s.io"], ADMISSION_POLICIES, [*READ, "create"]),
        _rule(["admissionregistration.k8s.io"], ADMISSION_POLICIES, ["update", "patch", "delete"], [TENANT_DELETION]),
        _rule(["rbac.authorization.k8s.io"], ["clusterroles"], READ),
        _rule(["rbac.authorization.k8s.io"], ["clusterroles"], ["update", "patch", "escalate"], [PROVISIONER, DELETER]),
        _rule(["rbac.authorization.k8s.io"], ["clusterroles"], ["bind"], [PROVISIONER]),
        _rule(["rbac.authorization.k8s.io"], ["clusterrolebindings"], [*READ, "create"]),
        _rule(["rbac.authorization.k8s.io"], ["clusterrolebindings"], ["update", "patch", "delete"], [PROVISIONER]),
        _rule([""], ["serviceaccounts"], READ),
        EVENTS,
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], [*READ, "create"]),
        _rule(
            ["apiextensions.k8s.io"], ["customresourcedefinitions", "customresourcedefinitions/status"], ["patch"], CRDS
        ),
        _rule(["enclave.dev"], PLURALS, ["list", "patch"]),
        _own_namespace(),
    },
    # The TLS Secret it creates and renews (and reads the CA key of) and each component's client certificate
    # Secret: by name, in the release namespace only (create cannot be narrowed by name).
    ("Role", RELEASE_NAMESPACE, "enclave-config"): {
        _rule([""], ["secrets"], ["create"]),
        _rule([""], ["secrets"], [*READ, "update", "patch"], KEPT_SECRETS),
        *_lease("config"),
    },
    # -- enclave-tenants: no Secret anywhere, no `*` resource; namespace-only grants are bound per tenant namespace.
    ("ClusterRole", "", "enclave-tenants"): {
        _rule(["enclave.dev"], ["tenants", "tenantowners"], READ),
        _rule(["enclave.dev"], ["tenants/status", "tenantowners/status"], ["get", "update", "patch"]),
        _rule(["enclave.dev"], ["tenants/finalizers", "tenantowners/finalizers"], ["update"]),
        _rule([""], ["namespaces"], [*READ, "update", "patch"]),
        _rule([""], ["serviceaccounts"], READ),
        _rule(["rbac.authorization.k8s.io"], ["rolebindings"], [*READ, "create", "update", "patch", "delete"]),
        _rule(
            ["rbac.authorization.k8s.io"],
            ["clusterroles"],
            ["bind"],
            [
                "admin",
                DELETER,
                PROVISIONER,
                "edit",
                "enclave-tenants-managed-metadata",
                "enclave-replication-impersonate",
                "enclave-replication-read",
            ],
        ),
        _rule(["enclave.dev"], ["rulestatuses"], [*READ, "create", "update", "patch"]),
        _rule(["enclave.dev"], ["rulestatuses/status"], ["get", "update", "patch"]),
        _rule([""], ["persistentvolumes"], READ),
        _rule(["policy"], ["poddisruptionbudgets"], READ),
        _rule(
            ["admissionregistration.k8s.io"],
            [
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ],
            [*READ, "create", "update", "delete"],
        ),
        EVENTS,
        _own_namespace(),
    },
    ("Role", RELEASE_NAMESPACE, "enclave-tenants"): {*LEDGERS_OWNED, *_lease("tenants")},
    # Bound by enclave-tenants in tenant namespaces only (managed metadata: list and merge-patch per namespace).
    ("ClusterRole", "", "enclave-tenants-managed-metadata"): {_rule(["*"], ["*"], ["list", "patch"])},
    # -- enclave-admission: Events, and ledger reservations (status only) in the release namespace.
    ("ClusterRole", "", "enclave-admission"): {_rule([""], ["events"], ["create", "patch"])},
    ("Role", RELEASE_NAMESPACE, "enclave-admission"): {
        _rule(["enclave.dev"], ["quantityledgers"], READ),
        _rule(["enclave.dev"], ["quantityledgers/status"], ["update"]),
    },
    # -- enclave-quotas.
    ("ClusterRole", "", "enclave-quotas"): {
        _rule(["enclave.dev"], ["customquotas", "globalcustomquotas"], READ),
        _rule(["enclave.dev"], ["customquotas/status", "globalcustomquotas/status"], ["get", "update", "patch"]),
        _rule(["admissionregistration.k8s.io"], ["validatingwebhookconfigurations"], [*READ, "patch"]),
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
        _rule([""], ["namespaces"], READ),
        EVENTS,
        _own_namespace(),
    },
    ("Role", RELEASE_NAMESPACE, "enclave-quotas"): {*LEDGERS_OWNED, *_lease("quotas")},
    # -- enclave-globalquotas.
    ("ClusterRole", "", "enclave-globalquotas"): {
        _rule(["enclave.dev"], ["globalresourcequotas"], [*READ, "create", "update", "patch", "delete"]),
        _rule(["enclave.dev"], ["globalresourcequotas/status"], ["get", "update", "patch"]),
        _rule(["enclave.dev"], ["tenants", "rulestatuses"], READ),
        _rule([""], ["resourcequotas"], [*READ, "create", "update", "patch", "delete"]),
        _rule([""], ["namespaces"], READ),
        # settling a reservation (get) and counting a namespace whose ResourceQuota under-reports (list); no Secrets
        _rule(
            [""],
            ["pods", "services", "configmaps", "persistentvolumeclaims", "replicationcontrollers"],
            ["get", "list"],
        ),
        EVENTS,
        _own_namespace(),
    },
    ("Role", RELEASE_NAMESPACE, "enclave-globalquotas"): {*LEDGERS_OWNED, *_lease("globalquotas")},
    # -- enclave-pools.
    ("ClusterRole", "", "enclave-pools"): {
        _rule(["enclave.dev"], ["resourcepools"], [*READ, "patch"]),
        _rule(["enclave.dev"], ["resourcepools/status"], ["get", "update", "patch"]),
        _rule(["enclave.dev"], ["resourcepools/finalizers"], ["update"]),
        _rule(["enclave.dev"], ["resourcepoolclaims"], [*READ, "delete"]),
        _rule(["enclave.dev"], ["resourcepoolclaims/status"], ["get", "update", "patch"]),
        _rule([""], ["resourcequotas"], [*READ, "create", "patch", "delete"]),
        _rule([""], ["namespaces"], READ),
        EVENTS,
        _own_namespace(),
    },
    ("Role", RELEASE_NAMESPACE, "enclave-pools"): _lease("pools"),
    ("ClusterRole", "", "enclave-resourcepoolclaims-edit"): {
        _rule(["enclave.dev"], ["resourcepoolclaims"], [*READ, "create", "update", "patch", "delete"])
    },
    ("ClusterRole", "", "enclave-resourcepoolclaims-view"): {_rule(["enclave.dev"], ["resourcepoolclaims"], READ)},
    # -- enclave-replication: no Secret and no `*` cluster-wide: the kinds of `readResources` (the chart's
    # default), every kind only where enclave-replication-read is bound; never impersonates cluster-wide.
    ("ClusterRole", "", "enclave-replication"): {
        _rule(["enclave.dev"], ["globaltenantresources", "tenantresources"], [*READ, "update", "patch"]),
        _rule(["enclave.dev"], ["globaltenantresources/status", "tenantresources/status"], ["get", "update", "patch"]),
        _rule(["enclave.dev"], ["globaltenantresources/finalizers", "tenantresources/finalizers"], ["update"]),
        _rule(["enclave.dev"], ["tenants"], READ),
        _rule([""], ["namespaces"], READ),
        _rule([""], ["configmaps", "limitranges", "resourcequotas", "serviceaccounts"], READ),
        _rule(["networking.k8s.io"], ["networkpolicies"], READ),
        EVENTS,
        _own_namespace(),
    },
    ("Role", RELEASE_NAMESPACE, "enclave-replication"): _lease("replication"),
    # Bound by enclave-tenants in tenant namespaces, by the chart in `impersonationNamespaces`, nowhere else.
    ("ClusterRole", "", "enclave-replication-impersonate"): {_rule([""], ["serviceaccounts"], ["impersonate"])},
    # Bound by enclave-tenants in tenant namespaces, by the chart in `sourceNamespaces`, nowhere else: every kind
    # (Secrets included) is read only there.
    ("ClusterRole", "", "enclave-replication-read"): {_rule(["*"], ["*"], READ)},
    # The impersonation endpoint's CA, by name, where `impersonation.caSecretNamespace` says.
    ("Role", "replication-accounts", "enclave-replication-impersonation-ca"): {
        _rule([""], ["secrets"], ["get"], [CA_SECRET])
    },
    # -- what tenant owners get through the built-in admin/edit/view (aggregated; templates/tenant-roles.yaml).
    ("ClusterRole", "", "enclave-tenantresources-edit"): {
        _rule(["enclave.dev"], ["tenantresources"], [*READ, "create", "update", "patch", "delete"])
    },
    ("ClusterRole", "", "enclave-tenantresources-view"): {_rule(["enclave.dev"], ["tenantresources"], READ)},
    ("ClusterRole", "", "enclave-tenant-view"): {_rule(["enclave.dev"], ["rulestatuses", "customquotas"], READ)},
    # -- the roles Enclave hands out (bound by enclave-config and enclave-tenants to tenant users).
    ("ClusterRole", "", PROVISIONER): {_rule([""], ["namespaces"], ["create"])},
    ("ClusterRole", "", DELETER): {_rule([""], ["namespaces"], ["delete"])},
}
"""(kind, namespace, name) -> the rules it may hold, exactly."""


def _account(component: str) -> tuple[str, str, str]:
    return ("ServiceAccount", RELEASE_NAMESPACE, f"enclave-{component}")


BOUND: dict[tuple[str, str, str], tuple[str, str, set[tuple[str, str, str]]]] = {
    **{("ClusterRoleBinding", "", f"enclave-{c}"): ("ClusterRole", f"enclave-{c}", {_account(c)}) for c in COMPONENTS},
    **{("RoleBinding", RELEASE_NAMESPACE, f"enclave-{c}"): ("Role", f"enclave-{c}", {_account(c)}) for c in COMPONENTS},
    ("RoleBinding", "replication-accounts", "enclave-replication-impersonate"): (
        "ClusterRole",
        "enclave-replication-impersonate",
        {_account("replication")},
    ),
    ("RoleBinding", "replication-accounts", "enclave-replication-impersonation-ca"): (
        "Role",
        "enclave-replication-impersonation-ca",
        {_account("replication")},
    ),
    ("RoleBinding", "replication-sources", "enclave-replication-read"): (
        "ClusterRole",
        "enclave-replication-read",
        {_account("replication")},
    ),
}
"""(kind, namespace, name) -> (role kind, role name, subjects): every binding the chart renders, exactly. The
namespace-only roles (managed metadata, impersonation, replication's reads) are bound cluster-wide by no one."""


def _within(rule: Rule, allowed: Rule) -> bool:
    """Whether ``rule`` grants nothing ``allowed`` does not (an empty resourceNames means every name)."""
    groups, resources, names, verbs = rule
    a_groups, a_resources, a_names, a_verbs = allowed
    named = not a_names or (bool(names) and set(names) <= set(a_names))
    return set(groups) <= set(a_groups) and set(resources) <= set(a_resources) and named and set(verbs) <= set(a_verbs)


def _key(doc: Manifest) -> tuple[str, str, str]:
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


def test_every_rendered_rule_is_on_the_allow_list(tmp_path: Path) -> None:
    """Roles: the same set of roles, each with exactly the allowed rules (no extra verb, resource or name)."""
    manifests = [doc for doc in render(tmp_path, every_component_values()) if doc["kind"] in ("ClusterRole", "Role")]
    rendered = {_key(doc): _rules_of(doc) for doc in manifests}
    assert sorted(rendered) == sorted(ALLOWED), "a role was added or removed: put it on the allow-list, with why"
    for key, rules in rendered.items():
        assert rules - ALLOWED[key] == set(), f"{key} holds rules beyond its allow-list"
        assert ALLOWED[key] - rules == set(), f"{key} lost rules (narrowed? update the allow-list too)"


def test_every_rendered_binding_is_on_the_allow_list(tmp_path: Path) -> None:
    """Bindings: who holds which role, and where; a namespace-only role bound cluster-wide fails here."""
    manifests = render(tmp_path, every_component_values())
    rendered = {
        _key(doc): (
            doc["roleRef"]["kind"],
            doc["roleRef"]["name"],
            {(s["kind"], s.get("namespace", ""), s["name"]) for s in doc["subjects"]},
        )
        for doc in manifests
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert rendered == BOUND


@pytest.mark.parametrize(
    "switch",
    ["tenants.managedMetadata.enabled=false", "replication.enabled=false", "tenants.enabled=false"],
)
def test_switching_a_component_off_only_removes_rules(tmp_path: Path, switch: str) -> None:
    """No value turns a rule on that the every-component render does not hold: the allow-list bounds them all."""
    key, _, value = switch.partition("=")
    values = every_component_values()
    section, _, leaf = key.rpartition(".")
    target = values
    for part in section.split("."):
        target = target.setdefault(part, {})
    target[leaf] = value == "true"
    for doc in render(tmp_path, values):
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in _rules_of(doc):
                assert any(_within(rule, allowed) for allowed in ALLOWED[_key(doc)]), (_key(doc), rule)


def test_the_kept_secrets_are_the_ones_enclave_config_writes() -> None:
    """The names the Role grants are the names enclave-config derives (one per component that subscribes)."""
    from enclave_config.tls import client_secret_name
    from enclave_core.snapshots.access import CLIENT_COMPONENTS

    assert sorted(client_secret_name("enclave-tls", component) for component in CLIENT_COMPONENTS) == CLIENT_SECRETS

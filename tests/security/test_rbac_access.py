"""What the chart's RBAC lets Enclave's own accounts do, asked of the real apiserver.

A compromised (or merely buggy) Enclave component is an attacker with its service account's rights. The chart's
roles, rendered with every component on, are applied to the test control plane in a fresh release namespace,
with the namespace grants enclave-tenants keeps in a tenant namespace (built by its own code from the chart's
``--namespace-grant`` flags); then SubjectAccessReviews, and impersonation itself, show each account is refused
what its component never needs: enclave-tenants the CA key, enclave-replication kube-system's accounts and any
Secret outside tenant and source namespaces, enclave-admission a ledger's spec. ``tests/security/test_rbac_rules.py`` pins the rules themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from enclave_tenants.bindings import Grant, binding_templates, bindings_for
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique

from .test_rbac_rules import CA_SECRET, every_component_values, render


@dataclass
class Release:
    """The chart's RBAC applied in ``namespace``; ``tenant_namespace`` carries enclave-tenants' grants."""

    namespace: str
    tenant_namespace: str
    accounts_namespace: str
    sources_namespace: str
    kube: Any

    def allowed(self, component: str, verb: str, resource: str, namespace: str = "", **attributes: str) -> bool:
        """SubjectAccessReview: may ``enclave-<component>`` ``verb`` ``resource`` (``group``, ``subresource``,
        ``name`` as keywords) in ``namespace`` ("" = cluster-wide)?"""
        spec = {
            "user": f"system:serviceaccount:{self.namespace}:enclave-{component}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}", "system:authenticated"],
            "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace, **attributes},
        }
        review = client.AuthorizationV1Api(self.kube).create_subject_access_review({"spec": spec})
        return bool(review.status.allowed)


def _apply(kube: Any, docs: list[dict[str, Any]], namespace: str) -> list[tuple[Any, dict[str, Any]]]:
    dynamic = DynamicClient(kube)
    created = []
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        target = doc["metadata"].get("namespace", namespace) if resource.namespaced else None
        if not resource.namespaced:
            with contextlib.suppress(ApiException):
                resource.delete(name=doc["metadata"]["name"])
        resource.create(body=doc, namespace=target)
        created.append((resource, doc))
    return created


@pytest.fixture(scope="module")
def release(kube: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    core = client.CoreV1Api(kube)
    namespace, tenant_namespace, accounts = unique("rbac-rel"), unique("rbac-tenant"), unique("rbac-accounts")
    sources = unique("rbac-sources")
    for name in (namespace, tenant_namespace, accounts, sources):
        core.create_namespace({"metadata": {"name": name}})
    values = every_component_values()
    values["replication"]["rbac"] = {"impersonationNamespaces": [accounts], "sourceNamespaces": [sources]}
    values["serviceConfiguration"]["spec"]["impersonation"]["caSecretNamespace"] = accounts
    rendered = render(tmp_path_factory.mktemp("rbac"), values, namespace)
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    docs = [doc for doc in rendered if doc["kind"] in kinds]
    tenants = next(d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == "enclave-tenants")
    flags = [a for a in tenants["spec"]["template"]["spec"]["containers"][0]["args"] if "--namespace-grant=" in a]
    grants = [Grant.parse(flag.partition("=")[2], namespace) for flag in flags]
    assert {g.cluster_role for g in grants} == {
        "enclave-tenants-managed-metadata",
        "enclave-replication-impersonate",
        "enclave-replication-read",
    }
    # What enclave-tenants writes in a tenant namespace (no owners: only the grants).
    docs += list(bindings_for(tenant_namespace, "rbac", binding_templates([], grants=grants)).values())
    for account in ("writer",):
        core.create_namespaced_service_account(tenant_namespace, {"metadata": {"name": account}})
    created: list[tuple[Any, dict[str, Any]]] = []
    try:
        created = _apply(kube, docs, namespace)
        yield Release(namespace, tenant_namespace, accounts, sources, kube)
    finally:
        for resource, doc in reversed(created):
            if not resource.namespaced:
                with contextlib.suppress(ApiException):
                    resource.delete(name=doc["metadata"]["name"])
        for name in (namespace, tenant_namespace, accounts, sources):
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


# -- Secrets: each component its own ------------------------------------------------------------------------


CLIENTS = ("admission", "globalquotas", "pools", "quotas", "replication", "tenants")
"""Components whose client certificate is mounted by the kubelet: no Secret right of their own."""


@pytest.mark.parametrize("component", CLIENTS)
def test_a_components_account_reading_another_components_client_certificate_is_refused(
    release: Release, component: str
) -> None:
    for other in (*CLIENTS, "proxy"):
        for verb in ("get", "watch"):
            secret = f"enclave-tls-client-{other}"
            assert not release.allowed(component, verb, "secrets", release.namespace, name=secret), (component, other)


def test_configs_account_reading_secrets_it_does_not_keep_is_refused(release: Release) -> None:
    """enclave-config keeps the serving Secret and the client Secrets, by name: not Helm's release Secrets or
    whatever else the release namespace holds, and no list of them all."""
    for name in ("enclave-tls", "enclave-tls-client-admission"):
        assert release.allowed("config", "get", "secrets", release.namespace, name=name)
        assert release.allowed("config", "watch", "secrets", release.namespace, name=name)
    assert not release.allowed("config", "get", "secrets", release.namespace, name="sh.helm.release.v1.enclave.v1")
    assert not release.allowed("config", "list", "secrets", release.namespace)
    assert not release.allowed("config", "get", "secrets", "kube-system", name="enclave-tls")


# -- enclave-tenants ---------------------------------------------------------------------------------------


def test_tenants_account_reading_the_ca_key_is_refused(release: Release) -> None:
    """The TLS Secret (with the CA's private key) is in the release namespace: enclave-tenants may not read it,
    nor any Secret outside tenant namespaces, where its managed-metadata grant holds."""
    for verb in ("get", "list", "watch"):
        assert not release.allowed("tenants", verb, "secrets", release.namespace, name="enclave-tls")
        assert not release.allowed("tenants", verb, "secrets", release.namespace)
    assert not release.allowed("tenants", "list", "secrets", "kube-system")
    assert not release.allowed("tenants", "list", "secrets"), "no cluster-wide list of Secrets"
    assert not release.allowed("tenants", "list", "pods"), "no cluster-wide list of anything through the grant"
    # What the grant is for: list and metadata-patch objects of tenant namespaces.
    assert release.allowed("tenants", "list", "configmaps", release.tenant_namespace)
    assert release.allowed("tenants", "patch", "deployments", release.tenant_namespace, group="apps")


def test_tenants_account_patching_kube_system_objects_is_refused(release: Release) -> None:
    assert not release.allowed("tenants", "patch", "configmaps", "kube-system")
    assert not release.allowed("tenants", "patch", "deployments", release.namespace, group="apps")


# -- enclave-replication -----------------------------------------------------------------------------------


def test_replication_impersonating_a_kube_system_account_is_refused(release: Release) -> None:
    """Impersonation holds in tenant namespaces and the configured ones only: never kube-system's accounts, nor
    Enclave's own (enclave-config could write webhook configurations)."""
    for namespace, name in (
        ("kube-system", "default"),
        ("kube-system", "clusterrole-aggregation-controller"),
        (release.namespace, "enclave-config"),
        ("default", "default"),
    ):
        assert not release.allowed("replication", "impersonate", "serviceaccounts", namespace, name=name), namespace
    assert not release.allowed("replication", "impersonate", "users"), "no user impersonation"
    assert not release.allowed("replication", "impersonate", "groups"), "no group impersonation"
    assert release.allowed("replication", "impersonate", "serviceaccounts", release.tenant_namespace, name="writer")
    assert release.allowed("replication", "impersonate", "serviceaccounts", release.accounts_namespace, name="any")


def test_replication_account_reading_the_ca_key_is_refused(release: Release) -> None:
    """No Secret outside the tenant namespaces and ``sourceNamespaces``: not the CA key in the release namespace,
    not kube-system's, not a cluster-wide list (which would be all of them)."""
    for verb in ("get", "list", "watch"):
        assert not release.allowed("replication", verb, "secrets", release.namespace, name="enclave-tls"), verb
        assert not release.allowed("replication", verb, "secrets", release.namespace), verb
        assert not release.allowed("replication", verb, "secrets", "kube-system"), verb
        assert not release.allowed("replication", verb, "secrets"), verb
    assert not release.allowed("replication", "list", "*"), "no read of every kind cluster-wide"
    # The impersonation endpoint's CA is read by name, and that Secret only.
    assert release.allowed("replication", "get", "secrets", release.accounts_namespace, name=CA_SECRET)
    assert not release.allowed("replication", "get", "secrets", release.accounts_namespace, name="other")
    assert not release.allowed("replication", "list", "secrets", release.accounts_namespace)
    assert not release.allowed("replication", "list", "deployments", "kube-system", group="apps")


def test_replication_account_reads_sources_where_they_are_granted(release: Release) -> None:
    """What replication needs: every kind, Secrets included, in tenant namespaces (enclave-tenants' grant) and
    in ``sourceNamespaces`` (the chart's); the ``readResources`` kinds cluster-wide, for one watch per kind."""
    for namespace in (release.tenant_namespace, release.sources_namespace):
        for verb in ("get", "list", "watch"):
            assert release.allowed("replication", verb, "secrets", namespace), (namespace, verb)
        assert release.allowed("replication", "watch", "deployments", namespace, group="apps")
    for verb in ("list", "watch"):
        assert release.allowed("replication", verb, "configmaps"), verb
        assert release.allowed("replication", verb, "networkpolicies", group="networking.k8s.io"), verb


def _as_replication(control_plane: ControlPlane, release: Release, acting_as: str) -> client.ApiClient:
    """A client authenticated as enclave-replication (a TokenRequest token, as in its pod), impersonating
    ``acting_as`` the way :class:`enclave_replication.acting.ActingKube` does (``Impersonate-User`` only)."""
    token = client.CoreV1Api(release.kube).create_namespaced_service_account_token(
        "enclave-replication", release.namespace, {"spec": {"expirationSeconds": 600}}
    )
    configuration = client.Configuration()
    configuration.host = control_plane.api_url
    configuration.ssl_ca_cert = str(control_plane.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token.status.token}"}
    api = client.ApiClient(configuration)
    api.set_default_header("Impersonate-User", acting_as)
    return api


def test_replication_acting_as_a_tenant_account_gets_exactly_its_groups(
    control_plane: ControlPlane, release: Release
) -> None:
    """With only the namespaced grant, impersonating a tenant namespace's account works, and kube-apiserver
    fills in the account's groups (so RoleBindings to ``system:serviceaccounts:<ns>`` apply to replicated writes);
    a kube-system account is refused outright."""
    user = f"system:serviceaccount:{release.tenant_namespace}:writer"
    with _as_replication(control_plane, release, user) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    assert review.status.user_info.username == user
    assert set(review.status.user_info.groups) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{release.tenant_namespace}",
        "system:authenticated",
    }
    kube_system = _as_replication(control_plane, release, "system:serviceaccount:kube-system:default")
    with kube_system as api, pytest.raises(ApiException) as refused:
        client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    assert refused.value.status == 403


# -- enclave-admission -------------------------------------------------------------------------------------


def test_admission_rewriting_a_ledger_spec_is_refused(release: Release) -> None:
    """Admission writes reservations into a ledger's status and nothing else: not the spec (a quota's limit),
    not a new or deleted ledger, not a ledger outside the release namespace."""
    ledger = {"group": "enclave.dev", "name": "any"}
    for verb in ("update", "patch", "create", "delete", "deletecollection"):
        assert not release.allowed("admission", verb, "quantityledgers", release.namespace, **ledger), verb
    assert not release.allowed(
        "admission", "patch", "quantityledgers", release.namespace, subresource="status", **ledger
    )
    assert not release.allowed(
        "admission", "update", "quantityledgers", release.tenant_namespace, subresource="status", **ledger
    )
    assert release.allowed("admission", "update", "quantityledgers", release.namespace, subresource="status", **ledger)
    assert not release.allowed("admission", "list", "secrets", release.namespace)


def test_quota_controllers_rewriting_ledgers_elsewhere_is_refused(release: Release) -> None:
    """The ledgers' owners hold them in the release namespace only."""
    for component in ("tenants", "quotas", "globalquotas"):
        assert release.allowed(component, "create", "quantityledgers", release.namespace, group="enclave.dev")
        assert not release.allowed(
            component, "create", "quantityledgers", release.tenant_namespace, group="enclave.dev"
        )
        assert not release.allowed(component, "update", "quantityledgers", release.namespace, group="enclave.dev")


def test_namespace_only_roles_are_bound_cluster_wide_by_no_one(release: Release) -> None:
    rbac = client.RbacAuthorizationV1Api(release.kube)
    for binding in rbac.list_cluster_role_binding().items:
        assert binding.role_ref.name not in (
            "enclave-tenants-managed-metadata",
            "enclave-replication-impersonate",
            "enclave-replication-read",
        )


def test_tenants_binds_the_namespace_grants_and_nothing_wider(release: Release, impersonate: Any) -> None:
    """enclave-tenants may create the grant bindings (``bind`` on those names), not one to cluster-admin."""
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}", "system:authenticated"]
    as_tenants = impersonate(f"system:serviceaccount:{release.namespace}:enclave-tenants", groups)
    api = client.RbacAuthorizationV1Api(as_tenants)
    for role in (
        "enclave-tenants-managed-metadata",
        "enclave-replication-impersonate",
        "enclave-replication-read",
        "cluster-admin",
    ):
        body = {
            "metadata": {"name": f"probe-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "enclave-tenants", "namespace": release.namespace}],
        }
        try:
            api.create_namespaced_role_binding(release.tenant_namespace, body, dry_run="All")
            status = 201
        except ApiException as err:
            status = int(err.status)
        assert (status == 403) == (role == "cluster-admin"), (role, status)

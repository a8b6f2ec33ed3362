"""Tenant owners use Enclave's namespaced kinds out of the box: the chart's aggregated ClusterRoles (and the same
roles in `tox -e up`'s samples) give the `admin` an owner is bound to in their namespaces TenantResources and
ResourcePoolClaims to write and RuleStatuses and CustomQuotas to read, on a real control plane whose
kube-controller-manager aggregates them; `tenantRoles.enabled: false` ships none."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing import binaries
from enclave_testing.names import unique
from enclave_testing.paths import repo_root
from enclave_testing.waiting import poll

CHART = repo_root() / "charts" / "enclave"
SAMPLES = repo_root() / "hack" / "samples"
ROLES = {
    "enclave-tenantresources-edit",
    "enclave-tenantresources-view",
    "enclave-tenant-view",
    "enclave-resourcepoolclaims-edit",
    "enclave-resourcepoolclaims-view",
}
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _cluster_roles(*sets: str) -> dict[str, dict[str, Any]]:
    """The ClusterRoles `helm template` renders with pools and replication on (and ``sets``)."""
    helm = binaries.ensure("helm")["helm"]
    args = [str(helm), "template", "enclave", str(CHART), "--namespace", "enclave-system", "--kube-version", "1.35.4"]
    # An offline render must name kube-apiserver's addresses for the default NetworkPolicies (no cluster to read).
    defaults = ("pools.enabled=true", "replication.enabled=true", "networkPolicy.apiServerCIDRs={192.0.2.10/32}")
    for assignment in (*defaults, *sets):
        args += ["--set", assignment]
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ClusterRole"}


def _essence(role: dict[str, Any]) -> tuple[Any, ...]:
    labels = role["metadata"].get("labels") or {}
    return (sorted(k for k in labels if k.startswith(AGGREGATE)), role["rules"])


def test_the_samples_ship_the_charts_tenant_roles() -> None:
    rendered = _cluster_roles()
    assert set(rendered) >= ROLES
    samples = {
        doc["metadata"]["name"]: doc
        for path in sorted(SAMPLES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "ClusterRole"
    }
    for name in sorted(ROLES):
        assert _essence(samples[name]) == _essence(rendered[name]), name


def test_tenant_roles_can_be_switched_off() -> None:
    assert not ROLES & set(_cluster_roles("tenantRoles.enabled=false"))


def _allowed(kube: Any, user: str, namespace: str, verb: str, resource: str) -> bool:
    review = {
        "spec": {
            "user": user,
            "groups": ["system:authenticated"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": "enclave.dev", "resource": resource},
        }
    }
    answer = client.AuthorizationV1Api(kube).create_subject_access_review(review)
    return bool(answer.status.allowed)


@pytest.fixture
def tenant_roles(kube: Any) -> Iterator[None]:
    """The chart's tenant ClusterRoles, created as the chart would and removed afterwards (they are cluster-scoped:
    left behind, they would stand in the way of other tests that render or install the chart)."""
    rbac = client.RbacAuthorizationV1Api(kube)
    rendered = _cluster_roles()
    for name in sorted(ROLES):
        body = {**rendered[name], "metadata": {**rendered[name]["metadata"]}}
        try:
            rbac.create_cluster_role(body)
        except ApiException as err:
            if err.status != 409:
                raise
            rbac.replace_cluster_role(name, body)
    try:
        yield
    finally:
        for name in sorted(ROLES):
            try:
                rbac.delete_cluster_role(name)
            except ApiException as err:
                if err.status != 404:
                    raise


@pytest.mark.usefixtures("tenant_roles")
def test_an_admin_of_a_namespace_uses_enclaves_namespaced_kinds(kube: Any, namespace: str) -> None:
    rbac = client.RbacAuthorizationV1Api(kube)
    owner = unique("owner")
    binding = {
        "metadata": {"name": "owner-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    wanted = [
        ("create", "tenantresources"),
        ("delete", "tenantresources"),
        ("create", "resourcepoolclaims"),
        ("list", "rulestatuses"),
        ("watch", "customquotas"),
    ]
    # kube-controller-manager folds the aggregated rules into `admin` within a moment.
    poll(lambda: all(_allowed(kube, owner, namespace, verb, resource) for verb, resource in wanted), what="admin")
    for verb, resource in [("create", "rulestatuses"), ("update", "customquotas"), ("delete", "customquotas")]:
        assert not _allowed(kube, owner, namespace, verb, resource), (verb, resource)
    assert not _allowed(kube, owner, unique("elsewhere"), "create", "tenantresources")

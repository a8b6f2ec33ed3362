"""A TenantResource never escapes its tenant: an adversarial table, one row per path a tenant owner could try.

The acting service account is bound to cluster-admin, so nothing but the controller's fence stands between
each row and the victim tenant: every row must end not Ready with the reason given, and the victim namespace
must hold nothing the TenantResource made (and nothing of the victim's secret may surface anywhere).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .conftest import Cluster, Stack

SECRET_VALUE = "victim-secret-value"


def cm(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}}


def leak(source: str) -> dict[str, Any]:
    """A generator that would copy the victim's secret value into a ConfigMap of the tenant."""
    return {"template": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: leak\ndata:\n  v: '{source}'\n"}


def rows(victim: str, account: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Row id -> (TenantResource spec without serviceAccount, expected Ready reason)."""
    return {
        "raw item in another tenant's namespace": ({"resources": [{"rawItems": [cm("raw", victim)]}]}, "OutsideTenant"),
        "raw cluster-scoped ClusterRole": (
            {
                "resources": [
                    {
                        "rawItems": [
                            {
                                "apiVersion": "rbac.authorization.k8s.io/v1",
                                "kind": "ClusterRole",
                                "metadata": {"name": f"escape-{victim}"},
                                "rules": [],
                            }
                        ]
                    }
                ]
            },
            "OutsideTenant",
        ),
        "raw Namespace": (
            {
                "resources": [
                    {"rawItems": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{victim}-x"}}]}
                ]
            },
            "OutsideTenant",
        ),
        "generated object in another namespace": (
            {
                "resources": [
                    {
                        "generators": [
                            {
                                "template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gen\n"
                                f"  namespace: {victim}\n"
                            }
                        ]
                    }
                ]
            },
            "OutsideTenant",
        ),
        "templated namespace field": (
            {
                "resources": [
                    {
                        "generators": [
                            {
                                "template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tpl\n"
                                "  namespace: {{ namespace.metadata.name | replace(tenant.metadata.name, '"
                                + victim.rsplit("-", 1)[0]
                                + "') }}\n"
                            }
                        ]
                    }
                ]
            },
            "OutsideTenant",
        ),
        "namespaced item copied from another tenant": (
            {"resources": [{"namespacedItems": [{"kind": "Secret", "namespace": victim, "name": "secret"}]}]},
            "OutsideTenant",
        ),
        "context read from another tenant": (
            {
                "resources": [
                    {
                        "context": {
                            "resources": [{"kind": "Secret", "namespace": victim, "name": "secret", "index": "s"}]
                        },
                        "generators": [leak("{{ s.data.value }}")],
                    }
                ]
            },
            "OutsideTenant",
        ),
        "cluster-scoped context read": (
            {
                "resources": [
                    {
                        "context": {"resources": [{"kind": "Namespace", "index": "all"}]},
                        "generators": [leak("{{ all | map(attribute='metadata.name') | join(',') }}")],
                    }
                ]
            },
            "OutsideTenant",
        ),
        "service account of another tenant": (
            {"serviceAccount": {"name": account, "namespace": victim}, "resources": [{"rawItems": [cm("sa")]}]},
            "OutsideTenant",
        ),
    }


@dataclass
class Fence:
    cluster: Cluster
    home: str
    victim: str
    names: dict[str, str]
    expected: dict[str, str]


@pytest.fixture(scope="module")
def fence(kube: Any, replication: Stack) -> Iterator[Fence]:
    cluster = Cluster(kube)
    suffix = secrets.token_hex(3)
    tenant, victim_tenant = f"tfence-{suffix}", f"tvictim-{suffix}"
    home, _ = cluster.tenant(tenant, namespaces=2)
    (victim,) = cluster.tenant(victim_tenant, namespaces=1)
    cluster.core.create_namespaced_secret(
        victim, {"metadata": {"name": "secret"}, "stringData": {"value": SECRET_VALUE}}
    )
    account = "admin"
    for namespace in (home, victim):
        cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    binding = f"fence-admin-{suffix}"
    rbac = client.RbacAuthorizationV1Api(kube)
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": home},
                {"kind": "ServiceAccount", "name": account, "namespace": victim},
            ],
        }
    )
    names: dict[str, str] = {}
    expected: dict[str, str] = {}
    try:
        for index, (row, (spec, reason)) in enumerate(rows(victim, account).items()):
            name = f"escape-{index}"
            spec = {"serviceAccount": {"name": account, "namespace": home}, **spec}
            cluster.create_local(home, name, spec)
            names[row], expected[row] = name, reason
        yield Fence(cluster, home, victim, names, expected)
    finally:
        cluster.cleanup()
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(binding)


@pytest.mark.parametrize("row", list(rows("victim", "admin")))
def test_escape_is_refused(fence: Fence, row: str) -> None:
    cluster, name = fence.cluster, fence.names[row]
    obj = cluster.ready("tenantresources", name, fence.home, status="False")
    condition = obj["status"]["conditions"][0]
    assert condition["reason"] == fence.expected[row], condition["message"]
    assert SECRET_VALUE not in str(obj)
    made = [
        cm.metadata.name
        for cm in cluster.core.list_namespaced_config_map(fence.victim).items
        if cm.metadata.name != "kube-root-ca.crt"
    ]
    assert made == []
    assert [s.metadata.name for s in cluster.core.list_namespaced_secret(fence.victim).items] == ["secret"]
    assert cluster.config_map(fence.home, "leak") is None
    with pytest.raises(ApiException) as missing:
        client.RbacAuthorizationV1Api(cluster.api).read_cluster_role(f"escape-{fence.victim}")
    assert missing.value.status == 404


def test_a_tenant_resource_outside_any_tenant_does_nothing(cluster: Cluster) -> None:
    loose = cluster.namespace(f"loose-{secrets.token_hex(3)}")
    cluster.create_local(
        loose, "r", {"serviceAccount": {"name": "x", "namespace": loose}, "resources": [{"rawItems": [cm("c")]}]}
    )
    obj = cluster.ready("tenantresources", "r", loose, status="False")
    assert obj["status"]["conditions"][0]["reason"] in ("OutsideTenant", "NotInTenant")
    assert cluster.config_map(loose, "c") is None

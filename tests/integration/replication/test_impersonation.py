"""Impersonation: every read and write as the resource's service account, or the configured defaults; an
account lacking a right gets a condition and an Event, and nothing is written."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.pki import CertificateAuthority
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import Cluster, Stack

DEFAULT_ACCOUNT = "tenant-replicator"
GLOBAL_ACCOUNT, GLOBAL_NAMESPACE = "global-replicator", "default"
CONFIGURATION: dict[str, Any] = {
    "impersonation": {
        "tenantDefaultServiceAccount": DEFAULT_ACCOUNT,
        "globalDefaultServiceAccount": GLOBAL_ACCOUNT,
        "globalDefaultServiceAccountNamespace": GLOBAL_NAMESPACE,
    }
}
CONFIG_MAPS = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]


def config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


def secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"a": "b"}}


def test_tenant_resource_acts_as_its_account_and_writes_nothing_without_every_right(cluster: Cluster) -> None:
    tenant = unique("timp")
    home, other = cluster.tenant(tenant, namespaces=2)
    account = cluster.service_account(home, "writer", CONFIG_MAPS, [home, other])
    name = unique("tr")
    spec = {"serviceAccount": {"name": "writer", "namespace": home}, "resources": [{"rawItems": [config_map("c")]}]}
    cluster.create_local(home, name, spec)
    obj = cluster.ready("tenantresources", name, home)
    assert obj["status"]["serviceAccount"] == {"name": "writer", "namespace": home}
    assert cluster.config_map(other, "c") is not None
    managers = {m.manager for m in cluster.config_map(other, "c").metadata.managed_fields}
    assert f"enclave-replication/tr/{home}.{name}" in managers
    # A Secret the account may not write: nothing of the new content is written, not even the ConfigMap.
    spec["resources"] = [{"rawItems": [config_map("c"), config_map("d"), secret("s")]}]
    cluster.patch("tenantresources", name, {"spec": spec}, home)
    obj = cluster.ready("tenantresources", name, home, status="False")
    condition = obj["status"]["conditions"][0]
    assert condition["reason"] == "Forbidden"
    assert account in condition["message"]
    assert "nothing was written" in condition["message"]
    assert cluster.config_map(home, "d") is None
    assert cluster.config_map(other, "d") is None
    assert any(e.reason == "Forbidden" for e in cluster.events(home, name))


def test_configured_defaults_are_used(cluster: Cluster) -> None:
    tenant = unique("tdef")
    (home,) = cluster.tenant(tenant, {"defaults": tenant}, namespaces=1)
    cluster.service_account(home, DEFAULT_ACCOUNT, CONFIG_MAPS, [home])
    name = unique("tr")
    cluster.create_local(home, name, {"resources": [{"rawItems": [config_map("by-default")]}]})
    obj = cluster.ready("tenantresources", name, home)
    assert obj["status"]["serviceAccount"] == {"name": DEFAULT_ACCOUNT, "namespace": home}
    assert cluster.config_map(home, "by-default") is not None
    # The global default account has no rights in the tenant namespace: Forbidden, nothing written.
    global_name = unique("gtr")
    cluster.create_global(
        global_name,
        {"tenantSelector": {"matchLabels": {"defaults": tenant}}, "resources": [{"rawItems": [config_map("g")]}]},
    )
    obj = cluster.ready("globaltenantresources", global_name, status="False")
    assert obj["status"]["serviceAccount"] == {"name": GLOBAL_ACCOUNT, "namespace": GLOBAL_NAMESPACE}
    assert obj["status"]["conditions"][0]["reason"] == "Forbidden"
    assert cluster.config_map(home, "g") is None


def test_a_deleted_namespace_never_waits_on_its_tenant_resource(cluster: Cluster) -> None:
    """The TenantResource's own namespace goes away while its account lost its rights elsewhere: cleanup fails
    (an Event says so), and the finalizer is released anyway so the namespace finishes terminating."""
    tenant = unique("tgone")
    home, other = cluster.tenant(tenant, namespaces=2)
    cluster.service_account(home, "writer", CONFIG_MAPS, [home, other])
    name = unique("tr")
    spec = {"serviceAccount": {"name": "writer", "namespace": home}, "resources": [{"rawItems": [config_map("c")]}]}
    cluster.create_local(home, name, spec)
    cluster.ready("tenantresources", name, home)
    assert cluster.config_map(other, "c") is not None
    cluster.rbac.delete_namespaced_role_binding("writer", other)
    cluster.core.delete_namespace(home)

    def namespace_gone() -> bool:
        try:
            cluster.core.read_namespace(home)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(namespace_gone, timeout=60, what="the TenantResource's namespace deleted")
    assert cluster.config_map(other, "c") is not None  # its account could not delete it: left, and reported


def test_impersonation_goes_through_the_configured_endpoint(
    cluster: Cluster, replication: Stack, control_plane: ControlPlane
) -> None:
    """``impersonation.endpoint`` with the CA from ``caSecretName``: a CA that did not sign the endpoint's
    certificate stops every impersonated call (ApiUnreachable); the right one lets them through."""
    custom = client.CustomObjectsApi(cluster.api)
    foreign = CertificateAuthority.generate("not-the-api-server").pair.cert_pem.decode()
    real = control_plane.ca_file.read_text()
    for name, pem in (("wrong-ca", foreign), ("api-ca", real)):
        cluster.core.create_namespaced_secret(
            replication.home, {"metadata": {"name": name}, "stringData": {"ca.crt": pem}}
        )

    def use(secret: str) -> None:
        impersonation = {
            **CONFIGURATION["impersonation"],
            "endpoint": control_plane.api_url,
            "caSecretName": secret,
            "caSecretNamespace": replication.home,
        }
        patch = {"spec": {"impersonation": impersonation}}
        custom.patch_cluster_custom_object(
            "enclave.dev", "v1beta2", "serviceconfigurations", replication.config_name, patch
        )

    tenant = unique("tend")
    (home,) = cluster.tenant(tenant, namespaces=1)
    cluster.service_account(home, "writer", CONFIG_MAPS, [home])
    try:
        use("wrong-ca")
        name = unique("tr")
        # A context read goes through the endpoint on every reconcile, whenever the configuration arrives.
        cluster.core.create_namespaced_config_map(home, {"metadata": {"name": "settings"}, "data": {"v": "1"}})
        block = {
            "context": {"resources": [{"kind": "ConfigMap", "name": "settings", "index": "s"}]},
            "generators": [
                {"template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  v: '{{ s.data.v }}'\n"}
            ],
        }
        spec = {"serviceAccount": {"name": "writer", "namespace": home}, "resources": [block]}
        cluster.create_local(home, name, spec)

        def unreachable() -> bool:
            conditions = (cluster.get("tenantresources", name, home).get("status") or {}).get("conditions") or []
            return any(c["reason"] == "ApiUnreachable" for c in conditions)

        poll(unreachable, what="the wrong CA refused")
        use("api-ca")
        cluster.ready("tenantresources", name, home)
        assert cluster.config_map(home, "e").data == {"v": "1"}
    finally:
        patch = {"spec": {"impersonation": CONFIGURATION["impersonation"]}}
        custom.patch_cluster_custom_object(
            "enclave.dev", "v1beta2", "serviceconfigurations", replication.config_name, patch
        )

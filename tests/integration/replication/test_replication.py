"""enclave-replication against the real control plane: targets, content, policies and lifecycle."""

from __future__ import annotations

import base64
import re
import urllib.request
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import Cluster, Stack

OWNER = "enclave.dev/replicated-by"
CREATED = "enclave.dev/replication-created"
MANAGED = "enclave.dev/managed-by"


def network_policy(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def config_map(name: str, data: dict[str, str], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def has_policy(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        cluster.networking.read_namespaced_network_policy(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def gone(cluster: Cluster, plural: str, name: str) -> bool:
    try:
        cluster.get(plural, name)
    except ApiException as err:
        return bool(err.status == 404)
    return False


def items(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("processedItems") or [])


def test_network_policy_in_every_namespace_of_two_tenants_and_a_later_one(cluster: Cluster) -> None:
    team = unique("team")
    first, second, other = unique("ta"), unique("tb"), unique("tc")
    namespaces = cluster.tenant(first, {"team": team}, namespaces=2) + cluster.tenant(second, {"team": team}, 1)
    outside = cluster.tenant(other, {"team": "else"}, namespaces=1)
    name = unique("deny")
    cluster.create_global(
        name,
        {
            "tenantSelector": {"matchLabels": {"team": team}},
            "resources": [{"rawItems": [network_policy("default-deny")], "additionalMetadata": {"labels": {"x": "y"}}}],
        },
    )
    obj = cluster.ready("globaltenantresources", name)
    for namespace in namespaces:
        policy = cluster.networking.read_namespaced_network_policy("default-deny", namespace)
        assert policy.metadata.labels["x"] == "y"
        assert policy.metadata.labels[MANAGED] == "enclave-replication"
        assert policy.metadata.annotations[OWNER] == f"GlobalTenantResource/{name}"
        assert policy.metadata.annotations[CREATED] == "true"
    assert not has_policy(cluster, outside[0], "default-deny")
    status = obj["status"]
    assert status["size"] == 3
    assert status["selectedTenants"] == sorted([first, second])
    assert {i["namespace"] for i in items(obj)} == set(namespaces)
    assert all(i["status"]["status"] == "True" and i["status"]["created"] for i in items(obj))
    later = cluster.namespace(f"{second}-later", second)
    poll(lambda: has_policy(cluster, later, "default-deny"), what="policy in the later namespace")
    poll(lambda: cluster.get("globaltenantresources", name)["status"]["size"] == 4, what="size 4")
    # Drift is undone.
    cluster.networking.delete_namespaced_network_policy("default-deny", later)
    poll(lambda: has_policy(cluster, later, "default-deny"), what="deleted policy restored")
    # Deleting the GlobalTenantResource removes what it created.
    cluster.delete("globaltenantresources", name)
    poll(lambda: not any(has_policy(cluster, ns, "default-deny") for ns in [*namespaces, later]), what="cleanup")


def test_secret_copied_by_selector_without_the_selector_label(cluster: Cluster) -> None:
    tenant = unique("tsec")
    targets = cluster.tenant(tenant, namespaces=2)
    source = cluster.namespace(unique("source"))
    for name in ("pull-a", "pull-b"):
        cluster.core.create_namespaced_secret(
            source,
            {
                "metadata": {"name": name, "labels": {"replicate": "yes", "kept": "1"}},
                "data": {"token": base64.b64encode(name.encode()).decode()},
            },
        )
    cluster.core.create_namespaced_secret(source, {"metadata": {"name": "not-me"}, "stringData": {"a": "b"}})
    name = unique("secrets")
    cluster.create_global(
        name,
        {
            "tenantSelector": {"matchLabels": {}},
            "resources": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": targets[0]}},
                    "namespacedItems": [
                        {"kind": "Secret", "namespace": source, "selector": {"matchLabels": {"replicate": "yes"}}}
                    ],
                }
            ],
        },
    )
    cluster.ready("globaltenantresources", name)
    copies = {s.metadata.name: s for s in cluster.core.list_namespaced_secret(targets[0]).items}
    assert {"pull-a", "pull-b"} <= set(copies)
    assert "not-me" not in copies
    assert "replicate" not in copies["pull-a"].metadata.labels
    assert copies["pull-a"].metadata.labels["kept"] == "1"
    assert base64.b64decode(copies["pull-b"].data["token"]) == b"pull-b"
    names = {s.metadata.name for s in cluster.core.list_namespaced_secret(targets[1]).items}
    assert "pull-a" not in names  # narrowed by the block's namespaceSelector
    # A change to the source is replicated.
    cluster.core.patch_namespaced_secret("pull-a", source, {"data": {"token": base64.b64encode(b"new").decode()}})
    poll(
        lambda: base64.b64decode(cluster.core.read_namespaced_secret("pull-a", targets[0]).data["token"]) == b"new",
        what="source change replicated",
    )


def test_generator_with_context_and_each_missing_key_mode(cluster: Cluster) -> None:
    tenant = unique("tgen")
    (target,) = cluster.tenant(tenant, {"tier": "gold"}, namespaces=1)
    cluster.core.create_namespaced_config_map(target, {"metadata": {"name": "settings"}, "data": {"color": "blue"}})
    template = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gen-{{ mode }}\n"
        "data:\n  tenant: {{ tenant.metadata.name }}\n  tier: {{ tenant.metadata.labels.tier }}\n"
        "  namespace: {{ namespace.metadata.name }}\n  color: {{ settings.data.color }}\n"
        '  missing: "{{ settings.data.absent }}"\n'
    )
    blocks = []
    for mode in ("zero", "invalid", "error"):
        blocks.append(
            {
                "context": {"resources": [{"kind": "ConfigMap", "name": "settings", "index": "settings"}]},
                "generators": [{"missingKey": mode, "template": template.replace("{{ mode }}", mode)}],
            }
        )
    name = unique("gen")
    cluster.create_global(name, {"tenantSelector": {"matchLabels": {"tier": "gold"}}, "resources": blocks})
    obj = cluster.ready("globaltenantresources", name, status="False")
    zero = cluster.core.read_namespaced_config_map("gen-zero", target).data
    assert zero == {"tenant": tenant, "tier": "gold", "namespace": target, "color": "blue", "missing": ""}
    assert cluster.core.read_namespaced_config_map("gen-invalid", target).data["missing"] == "<no value>"
    assert cluster.config_map(target, "gen-error") is None
    failed = [i for i in items(obj) if i["status"]["status"] == "False"]
    assert [i["origin"] for i in failed] == ["resources[2].generators[0]"]
    assert failed[0]["status"]["reason"] == "RenderFailed"
    assert "absent" in failed[0]["status"]["message"]
    assert obj["status"]["conditions"][0]["reason"] == "RenderFailed"


def test_context_of_every_kind_follows_what_is_labelled(cluster: Cluster) -> None:
    """``kind: "*"``: the selected objects of every kind in the target namespace, as one list; labelling one more
    object (of another kind) re-renders the generated item, so the controller watches what it read."""
    tenant = unique("tall")
    (target,) = cluster.tenant(tenant, {"inventory": "on"}, namespaces=1)
    labels = {"inventory": "yes"}
    cluster.core.create_namespaced_config_map(target, {"metadata": {"name": "conf", "labels": labels}})
    cluster.core.create_namespaced_secret(target, {"metadata": {"name": "cred", "labels": labels}})
    cluster.core.create_namespaced_config_map(target, {"metadata": {"name": "unlabelled"}})
    template = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inventory\n"
        'data:\n  seen: "{% for o in all %}{{ o.kind }}/{{ o.metadata.name }} {% endfor %}"\n'
    )
    block = {
        "context": {"resources": [{"kind": "*", "selector": {"matchLabels": labels}}]},
        "generators": [{"template": template}],
    }
    cluster.create_global(unique("all"), {"tenantSelector": {"matchLabels": {"inventory": "on"}}, "resources": [block]})

    def seen() -> set[str]:
        found = cluster.config_map(target, "inventory")
        return set(((found.data if found is not None else None) or {}).get("seen", "").split())

    poll(lambda: seen() == {"ConfigMap/conf", "Secret/cred"}, timeout=60, what="the inventory of labelled objects")
    cluster.core.create_namespaced_service_account(target, {"metadata": {"name": "bot", "labels": labels}})
    poll(
        lambda: seen() == {"ConfigMap/conf", "Secret/cred", "ServiceAccount/bot"},
        timeout=60,
        what="the inventory re-rendered after a ServiceAccount was labelled",
    )


def test_bad_items_are_reported_while_the_others_apply(cluster: Cluster) -> None:
    tenant = unique("tbad")
    (target,) = cluster.tenant(tenant, {"bad": "items"}, namespaces=1)
    name = unique("bad")
    spec: dict[str, Any] = {
        "tenantSelector": {"matchLabels": {"bad": "items"}},
        "resources": [
            {
                "rawItems": [config_map("good", {"a": "b"}), {"apiVersion": "v1", "metadata": {"name": "nokind"}}],
                "generators": [
                    {"template": "{% if %}"},
                    {"template": "apiVersion: v1\nmetadata:\n  name: nokind\n"},
                    {"template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: generated\n"},
                ],
                "namespacedItems": [{"kind": "Secret", "namespace": target, "name": "absent", "optional": False}],
            }
        ],
    }
    # A raw item without kind is refused by the API itself (the schema embeds resources).
    with pytest.raises(ApiException) as refused:
        cluster.create_global(name, spec)
    assert refused.value.status == 422
    assert "rawItems[1].kind" in str(refused.value.body)
    spec["resources"][0]["rawItems"].pop()
    cluster.create_global(name, spec)
    obj = cluster.ready("globaltenantresources", name, status="False")
    assert cluster.config_map(target, "good") is not None
    assert cluster.config_map(target, "generated") is not None
    reasons = {i["origin"]: i["status"]["reason"] for i in items(obj) if i["status"]["status"] == "False"}
    assert reasons == {
        "resources[0].generators[0]": "RenderFailed",
        "resources[0].generators[1]": "InvalidManifest",
        "resources[0].namespacedItems[0]": "SourceNotFound",
    }
    assert obj["status"]["conditions"][0]["reason"] == "ItemsFailed"
    assert "generators[1]" in obj["status"]["conditions"][0]["message"]
    events = cluster.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    assert any(e.reason == "ItemsFailed" and "generators[0]" in e.message for e in events)


def test_owner_refuses_and_merge_adopts_a_pre_existing_object(cluster: Cluster) -> None:
    tenant = unique("tadopt")
    (target,) = cluster.tenant(tenant, {"adopt": tenant}, namespaces=1)
    # Made by hand (kubectl's field manager): what Merge adopts; an object another manager keeps it does not
    # (tests/security/test_replication_adoption.py).
    existing = {"metadata": {"name": "existing"}, "data": {"mine": "1"}}
    cluster.core.create_namespaced_config_map(target, existing, field_manager="kubectl-create")
    name = unique("owner")
    block: dict[str, Any] = {"rawItems": [config_map("existing", {"theirs": "2"})], "policy": {"creation": "Owner"}}
    cluster.create_global(name, {"tenantSelector": {"matchLabels": {"adopt": tenant}}, "resources": [block]})
    obj = cluster.ready("globaltenantresources", name, status="False")
    assert items(obj)[0]["status"]["reason"] == "AlreadyExists"
    assert cluster.config_map(target, "existing").data == {"mine": "1"}
    block["policy"] = {"creation": "Merge"}
    cluster.patch("globaltenantresources", name, {"spec": {"resources": [block]}})
    obj = cluster.ready("globaltenantresources", name)
    adopted = cluster.config_map(target, "existing")
    assert adopted.data == {"mine": "1", "theirs": "2"}
    assert adopted.metadata.annotations[CREATED] == "false"
    assert items(obj)[0]["status"]["created"] is False
    # Remove relinquishes an adopted object instead of deleting it.
    cluster.patch("globaltenantresources", name, {"spec": {"resources": [{"policy": {"deletion": "Remove"}}]}})
    poll(lambda: OWNER not in (cluster.config_map(target, "existing").metadata.annotations or {}), what="released")
    assert cluster.config_map(target, "existing").data["mine"] == "1"


def test_remove_deletes_and_orphan_keeps_unmarked(cluster: Cluster) -> None:
    tenant = unique("tdel")
    (target,) = cluster.tenant(tenant, {"del": tenant}, namespaces=1)
    name = unique("del")
    blocks = [
        {"rawItems": [config_map("removed", {"a": "1"})], "policy": {"deletion": "Remove"}},
        {"rawItems": [config_map("orphaned", {"a": "2"})], "policy": {"deletion": "Orphan"}},
    ]
    cluster.create_global(name, {"tenantSelector": {"matchLabels": {"del": tenant}}, "resources": blocks})
    cluster.ready("globaltenantresources", name)
    cluster.delete("globaltenantresources", name)
    poll(lambda: gone(cluster, "globaltenantresources", name), what="finalizer released")
    assert cluster.config_map(target, "removed") is None
    orphan = cluster.config_map(target, "orphaned")
    assert orphan.data == {"a": "2"}
    assert MANAGED not in (orphan.metadata.labels or {})
    assert not set(orphan.metadata.annotations or {}) & {OWNER, CREATED}


def test_condition_skips_and_cordon_pauses(cluster: Cluster) -> None:
    tenant = unique("tcond")
    (target,) = cluster.tenant(tenant, {"cond": tenant}, namespaces=1)
    cluster.core.create_namespaced_config_map(target, {"metadata": {"name": "skip-me"}, "data": {"x": "1"}})
    name = unique("cond")
    blocks = [
        {
            "rawItems": [config_map("skip-me", {"y": "2"}), config_map("new-one", {"y": "3"})],
            "policy": {"creation": "Merge", "condition": "object == null"},
        }
    ]
    cluster.create_global(name, {"tenantSelector": {"matchLabels": {"cond": tenant}}, "resources": blocks})
    obj = cluster.ready("globaltenantresources", name)
    assert cluster.config_map(target, "skip-me").data == {"x": "1"}
    assert cluster.config_map(target, "new-one").data == {"y": "3"}
    by_name = {i["name"]: i["status"] for i in items(obj)}
    assert by_name["skip-me"]["reason"] == "Skipped"
    # The condition is false for the object it created too now (it exists): kept, not pruned.
    cluster.patch("globaltenantresources", name, {"spec": {"cordoned": True}})
    cluster.ready("globaltenantresources", name, status="False")
    cluster.core.delete_namespaced_config_map("new-one", target)
    later = cluster.namespace(f"{tenant}-later", tenant)
    cluster.patch("globaltenantresources", name, {"spec": {"resources": [{"rawItems": [config_map("c", {})]}]}})
    obj = cluster.ready("globaltenantresources", name, status="False")
    assert obj["status"]["conditions"][0]["reason"] == "Cordoned"
    assert cluster.config_map(later, "c") is None
    cluster.patch("globaltenantresources", name, {"spec": {"cordoned": False}})
    cluster.ready("globaltenantresources", name)
    assert cluster.config_map(later, "c") is not None


def test_depends_on_waits_for_a_ready_dependency(cluster: Cluster) -> None:
    tenant = unique("tdep")
    (target,) = cluster.tenant(tenant, {"dep": tenant}, namespaces=1)
    first, second = unique("first"), unique("second")
    selector = {"matchLabels": {"dep": tenant}}
    cluster.create_global(
        second,
        {
            "tenantSelector": selector,
            "dependsOn": [{"name": first}],
            "resources": [{"rawItems": [config_map("b", {})]}],
        },
    )
    obj = cluster.ready("globaltenantresources", second, status="False")
    assert obj["status"]["conditions"][0]["reason"] == "WaitingForDependencies"
    assert cluster.config_map(target, "b") is None
    cluster.create_global(first, {"tenantSelector": selector, "resources": [{"rawItems": [config_map("a", {})]}]})
    cluster.ready("globaltenantresources", second)
    assert cluster.config_map(target, "a") is not None
    assert cluster.config_map(target, "b") is not None


def test_a_steady_state_makes_no_api_write(cluster: Cluster, replication: Stack) -> None:
    """Reconciles with nothing to change (metadata touches, a 1 s resync) write nothing: no apply, no status,
    not even for a LimitRange whose quantity the server stores normalised (``1000m`` reads back as ``1``)."""
    tenant = unique("tsteady")
    cluster.tenant(tenant, {"steady": tenant}, namespaces=3)
    name = unique("steady")
    spec = {
        "tenantSelector": {"matchLabels": {"steady": tenant}},
        "resyncPeriod": "1s",
        "resources": [{"rawItems": [network_policy("p"), LIMIT_RANGE]}],
    }
    cluster.create_global(name, spec)
    cluster.ready("globaltenantresources", name)
    reconciles = metric(replication, "enclave_replication_reconciles_total")
    poll(lambda: metric(replication, "enclave_replication_reconciles_total") >= reconciles + 1, what="a resync")
    writes = metric(replication, "enclave_replication_writes_total")
    reconciles = metric(replication, "enclave_replication_reconciles_total")
    for index in range(3):
        cluster.patch("globaltenantresources", name, {"metadata": {"annotations": {"touch": str(index)}}})
    poll(lambda: metric(replication, "enclave_replication_reconciles_total") >= reconciles + 4, what="reconciles")
    assert metric(replication, "enclave_replication_writes_total") == writes


LIMIT_RANGE = {
    "apiVersion": "v1",
    "kind": "LimitRange",
    "metadata": {"name": "defaults"},
    "spec": {"limits": [{"type": "Container", "default": {"cpu": "1000m"}}]},
}


def metric(stack: Stack, name: str) -> float:
    with urllib.request.urlopen(f"{stack.replication.probe_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(text))


def test_tenant_and_none_scopes(cluster: Cluster) -> None:
    """Scope Tenant writes once per tenant (here into each tenant's first namespace, named by the template);
    scope None writes once, a cluster-scoped ClusterRole included, and removes it with the resource."""
    team = unique("scope")
    first, second = unique("tsa"), unique("tsb")
    cluster.tenant(first, {"scope": team}, namespaces=1)
    cluster.tenant(second, {"scope": team}, namespaces=1)
    per_tenant = unique("pertenant")
    template = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-info\n"
        "  namespace: {{ tenant.metadata.name }}-0\ndata:\n  tenant: {{ tenant.metadata.name }}\n"
    )
    cluster.create_global(
        per_tenant,
        {
            "scope": "Tenant",
            "tenantSelector": {"matchLabels": {"scope": team}},
            "resources": [{"generators": [{"template": template}]}],
        },
    )
    obj = cluster.ready("globaltenantresources", per_tenant)
    assert obj["status"]["size"] == 2
    for tenant in (first, second):
        assert cluster.config_map(f"{tenant}-0", "tenant-info").data == {"tenant": tenant}
    role = f"replicated-{team}"
    once = unique("once")
    cluster.create_global(
        once,
        {
            "scope": "None",
            "resources": [
                {
                    "rawItems": [
                        {
                            "apiVersion": "rbac.authorization.k8s.io/v1",
                            "kind": "ClusterRole",
                            "metadata": {"name": role},
                            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
                        }
                    ]
                }
            ],
        },
    )
    obj = cluster.ready("globaltenantresources", once)
    (item,) = items(obj)
    assert item["status"]["clusterScoped"] is True
    assert item["kind"] == "ClusterRole"
    assert cluster.rbac.read_cluster_role(role).metadata.annotations[OWNER] == f"GlobalTenantResource/{once}"
    cluster.delete("globaltenantresources", once)

    def role_gone() -> bool:
        try:
            cluster.rbac.read_cluster_role(role)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll(role_gone, what="cluster-scoped object removed with its resource")


def test_a_null_tenant_selector_selects_no_tenant(cluster: Cluster) -> None:
    """The spec: "a null [label selector] matches nothing". A GlobalTenantResource without tenantSelector is
    Ready and writes nowhere (it used to write into every tenant); ``{}`` is how to say every tenant."""
    tenant = unique("tnull")
    (target,) = cluster.tenant(tenant, {"null": tenant}, namespaces=1)
    name = unique("null")
    cluster.create_global(name, {"resources": [{"rawItems": [config_map("nulled", {"a": "b"})]}]})
    obj = cluster.ready("globaltenantresources", name)
    assert not obj["status"].get("selectedTenants")
    assert cluster.config_map(target, "nulled") is None
    selected = unique("sel")
    cluster.create_global(
        selected,
        {
            "tenantSelector": {"matchLabels": {"null": tenant}},
            "resources": [{"rawItems": [config_map("selected", {"a": "b"})]}],
        },
    )
    cluster.ready("globaltenantresources", selected)
    assert cluster.config_map(target, "selected") is not None
    assert cluster.config_map(target, "nulled") is None


def test_a_template_renders_the_tenants_free_form_data_and_follows_it(cluster: Cluster) -> None:
    """``Tenant.spec.data`` is free-form data for replication templates: a generator reads it through
    ``tenant.spec.data`` and re-renders when the tenant's data changes."""
    tenant = unique("tdata")
    label = {"data-test": tenant}
    (target,) = cluster.tenant(tenant, label, namespaces=1)
    data = {"region": "eu-west", "limits": {"cpu": "4"}}
    cluster.custom.patch_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant, {"spec": {"data": data}})
    template = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-data\n"
        'data:\n  region: "{{ tenant.spec.data.region }}"\n  cpu: "{{ tenant.spec.data.limits.cpu }}"\n'
    )
    name = unique("tdata")
    cluster.create_global(
        name, {"tenantSelector": {"matchLabels": label}, "resources": [{"generators": [{"template": template}]}]}
    )
    rendered = poll(lambda: (found := cluster.config_map(target, "tenant-data")) and found.data, what="rendered")
    assert rendered == {"region": "eu-west", "cpu": "4"}
    patch = {"spec": {"data": {"region": "us-east"}}}
    cluster.custom.patch_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant, patch)
    poll(lambda: cluster.config_map(target, "tenant-data").data.get("region") == "us-east", what="re-rendered")

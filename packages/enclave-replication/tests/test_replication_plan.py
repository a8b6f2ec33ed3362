"""The plan: placing raw, copied and generated items into targets, and the TenantResource fence (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from enclave_core.api.replication import GlobalTenantResourceSpec, TenantResourceSpec
from enclave_core.kube.holds import holds
from enclave_core.selectors import LabelSelector
from enclave_replication import plan
from enclave_replication.names import Owner
from enclave_replication.targets import Target, global_targets, namespaces_by_tenant, select_tenants

JSON = dict[str, Any]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "GlobalTenantResource"}


class FakeReader:
    """Objects by (kind, namespace); records every read."""

    def __init__(self, objects: list[JSON] | None = None) -> None:
        self.objects = objects or []
        self.reads: list[tuple[str, str]] = []
        self.forbidden: set[str] = set()

    async def namespaced(self, api_version: str, kind: str) -> bool:
        if kind == "Unknown":
            raise plan.ReadError("UnknownKind", "no such kind")
        return kind not in CLUSTER_SCOPED

    async def read(
        self, api_version: str, kind: str, namespace: str, name: str | None, selector: LabelSelector | None
    ) -> list[JSON]:
        self.reads.append((kind, namespace))
        if kind in self.forbidden:
            raise plan.ReadError("Forbidden", f"may not list {kind}")
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"].get("namespace", "") == namespace]
        if name:
            return [o for o in found if o["metadata"]["name"] == name]
        assert selector is not None
        return [o for o in found if selector.matches(o["metadata"].get("labels"))]

    async def kinds(self, api_version: str) -> list[str]:
        return ["ConfigMap", "Namespace", "Secret"] if api_version == "v1" else []


def ns(name: str, tenant: str, **labels: str) -> JSON:
    return {"metadata": {"name": name, "labels": {"enclave.dev/tenant": tenant, **labels}}}


def tenant(name: str, **labels: str) -> JSON:
    return {"metadata": {"name": name, "labels": labels}}


def cm(name: str, namespace: str | None = None, **labels: str) -> JSON:
    meta: JSON = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


TENANT_A = tenant("a")
A1, A2 = ns("a-1", "a"), ns("a-2", "a")
TR_OWNER = Owner("TenantResource", "tr", "a-1")
FENCE = plan.Fence(frozenset({"a-1", "a-2"}), "a-1")


async def build_local(block: JSON, reader: FakeReader | None = None) -> plan.Plan:
    spec = TenantResourceSpec.model_validate({"resources": [block]})
    targets = [[Target(TENANT_A, A1), Target(TENANT_A, A2)]]
    return await plan.build(TR_OWNER, spec, targets, reader or FakeReader(), FENCE)


async def test_raw_items_land_in_every_target_with_our_marks() -> None:
    built = await build_local({"rawItems": [cm("x")], "additionalMetadata": {"labels": {"l": "1"}}})
    assert sorted(built.objects) == [("", "ConfigMap", "a-1", "x"), ("", "ConfigMap", "a-2", "x")]
    body = built.objects[("", "ConfigMap", "a-1", "x")].body
    assert body["metadata"]["namespace"] == "a-1"
    assert body["metadata"]["labels"] == {"l": "1", "enclave.dev/managed-by": "enclave-replication"}
    assert body["metadata"]["annotations"]["enclave.dev/replicated-by"] == "TenantResource/a-1/tr"
    assert not built.problems


ESCAPES = [
    ("raw item in another namespace", {"rawItems": [cm("x", "victim")]}, "OutsideTenant"),
    (
        "raw cluster-scoped item",
        {"rawItems": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}]},
        "OutsideTenant",
    ),
    (
        "generated item in another namespace",
        {"generators": [{"template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: g\n  namespace: victim\n"}]},
        "OutsideTenant",
    ),
    (
        "templated namespace field",
        {
            "generators": [
                {
                    "template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: g\n"
                    "  namespace: {{ namespace.metadata.name }}-x\n"
                }
            ]
        },
        "OutsideTenant",
    ),
    (
        "generated cluster-scoped item",
        {
            "generators": [
                {"template": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: c\n"}
            ]
        },
        "OutsideTenant",
    ),
    (
        "namespaced item read elsewhere",
        {"namespacedItems": [{"kind": "Secret", "namespace": "victim", "name": "s"}]},
        "OutsideTenant",
    ),
    (
        "context read elsewhere",
        {
            "context": {"resources": [{"kind": "Secret", "namespace": "victim", "name": "s"}]},
            "generators": [{"template": ""}],
        },
        "OutsideTenant",
    ),
    (
        "cluster-scoped context read",
        {"context": {"resources": [{"kind": "Namespace"}]}, "generators": [{"template": ""}]},
        "OutsideTenant",
    ),
]


@pytest.mark.parametrize(("block", "reason"), [(b, r) for _, b, r in ESCAPES], ids=[i for i, _, _ in ESCAPES])
async def test_a_tenant_resource_never_escapes_its_tenant(block: JSON, reason: str) -> None:
    reader = FakeReader([cm("s", "victim")])
    built = await build_local(block, reader)
    assert not built.objects
    assert built.problems
    assert {p.reason for p in built.problems} == {reason}
    assert all(namespace in ("a-1", "a-2") for _, namespace in reader.reads)


async def test_copies_strip_server_metadata_and_selector_labels() -> None:
    source = cm("s", "a-1", replicate="yes", keep="1")
    source["metadata"].update(uid="u", resourceVersion="9", managedFields=[{}], ownerReferences=[{}])
    source["status"] = {"x": 1}
    built = await build_local(
        {"namespacedItems": [{"kind": "ConfigMap", "selector": {"matchLabels": {"replicate": "yes"}}}]},
        FakeReader([source]),
    )
    body = built.objects[("", "ConfigMap", "a-2", "s")].body
    assert "status" not in body
    assert set(body["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert "replicate" not in body["metadata"]["labels"]
    assert body["metadata"]["labels"]["keep"] == "1"


async def test_a_missing_required_source_fails_only_its_item() -> None:
    built = await build_local(
        {"rawItems": [cm("ok")], "namespacedItems": [{"kind": "ConfigMap", "name": "absent", "optional": False}]}
    )
    assert len(built.objects) == 2
    assert [(p.origin, p.reason) for p in built.problems] == [("resources[0].namespacedItems[0]", "SourceNotFound")]


async def test_unknown_kind_and_duplicates_are_problems() -> None:
    other = cm("x")
    other["data"] = {"k": "other"}
    built = await build_local(
        {"rawItems": [{"apiVersion": "v1", "kind": "Unknown", "metadata": {"name": "u"}}, cm("x"), other]}
    )
    reasons = sorted({p.reason for p in built.problems})
    assert reasons == ["DuplicateItem", "UnknownKind"]


async def test_global_scopes() -> None:
    tenants = select_tenants(
        GlobalTenantResourceSpec.model_validate({"resources": [], "tenantSelector": {"matchLabels": {"t": "1"}}}),
        [tenant("a", t="1"), tenant("b", t="2")],
    )
    assert [t["metadata"]["name"] for t in tenants] == ["a"]
    by_tenant = namespaces_by_tenant([A1, A2, {**ns("a-3", "a"), "status": {"phase": "Terminating"}}])
    spec = GlobalTenantResourceSpec.model_validate({"resources": [{"namespaceSelector": {}}]})
    assert [t.namespace_name for t in global_targets(spec, spec.resources[0], tenants, by_tenant)] == ["a-1", "a-2"]
    tenant_scope = GlobalTenantResourceSpec.model_validate({"scope": "Tenant", "resources": [{}]})
    targets = global_targets(tenant_scope, tenant_scope.resources[0], tenants, by_tenant)
    built = await plan.build(Owner("GlobalTenantResource", "g"), tenant_scope, [targets], FakeReader(), None)
    assert not built.objects
    tenant_scope = GlobalTenantResourceSpec.model_validate(
        {"scope": "Tenant", "resources": [{"rawItems": [cm("x"), cm("y", "fixed")]}]}
    )
    built = await plan.build(Owner("GlobalTenantResource", "g"), tenant_scope, [targets], FakeReader(), None)
    assert list(built.objects) == [("", "ConfigMap", "fixed", "y")]
    assert built.problems[0].reason == "InvalidManifest"


def test_a_replicated_object_holds_its_manifest_despite_server_defaults_but_not_drift() -> None:
    desired = {"spec": {"ports": [{"port": 80}], "flag": False}, "metadata": {"labels": {"a": "1"}}}
    live = {
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "flag": False},
        "metadata": {"labels": {"a": "1", "b": "2"}},
    }
    assert holds(live, desired)
    assert not holds({**live, "spec": {"ports": [{"port": 81}], "flag": False}}, desired)
    assert not holds({**live, "spec": {"ports": [{"port": 80}], "flag": 0}}, desired)
    assert not holds({**live, "spec": {"ports": [], "flag": False}}, desired)


def secret(name: str, namespace: str, **labels: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": labels}}


EVERY_KIND_TEMPLATE = (
    "{% for o in all %}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: seen-{{ o.kind | lower }}-"
    "{{ o.metadata.name }}\n{% endfor %}"
)


async def test_context_every_kind_reads_each_namespaced_kind_in_the_target_only() -> None:
    """``kind: "*"``: one list of every listable kind's selected objects; a TenantResource reads no cluster-scoped
    kind (Namespace here), and each target namespace sees its own objects."""
    reader = FakeReader([cm("c", "a-1", pick="1"), secret("s", "a-1", pick="1"), secret("t", "a-2"), cm("v", "victim")])
    block = {
        "context": {"resources": [{"kind": "*", "selector": {"matchLabels": {"pick": "1"}}}]},
        "generators": [{"template": EVERY_KIND_TEMPLATE}],
    }
    built = await build_local(block, reader)
    assert not built.problems
    assert sorted(key for key in built.objects if key[2] == "a-1") == [
        ("", "ConfigMap", "a-1", "seen-configmap-c"),
        ("", "ConfigMap", "a-1", "seen-secret-s"),
    ]
    assert not [key for key in built.objects if key[2] == "a-2"]
    assert {kind for kind, _ in reader.reads} == {"ConfigMap", "Secret"}
    assert all(namespace in ("a-1", "a-2") for _, namespace in reader.reads)


async def test_context_every_kind_leaves_out_forbidden_kinds_and_requires_a_named_object() -> None:
    reader = FakeReader([cm("s", "a-1"), secret("s", "a-1")])
    reader.forbidden.add("Secret")
    block = {
        "context": {"resources": [{"kind": "*", "name": "s", "index": "named"}]},
        "generators": [{"template": EVERY_KIND_TEMPLATE.replace("in all", "in named")}],
    }
    built = await build_local(block, reader)
    assert ("", "ConfigMap", "a-1", "seen-configmap-s") in built.objects
    assert ("", "ConfigMap", "a-1", "seen-secret-s") not in built.objects
    missing = {"context": {"resources": [{"kind": "*", "name": "absent", "optional": False}]}, "generators": []}
    built = await build_local({**missing, "generators": [{"template": ""}]}, reader)
    assert {p.reason for p in built.problems} == {"SourceNotFound"}

"""enclave-proxy never shows a tenant user an object of a filtered kind it could not see without the proxy, beyond
what its tenant's ``spec.proxy`` (and Enclave's own marks: the volume ownership label, the classes its rules
allow) grant, and never lets it act on one with more than an administrator granted twice (the setting and a
binding of the grant group).

One proxy for the module, in front of the ``fence`` (config, tenants, admission), running as an identity with
the chart's ClusterRole plus the reads of the filtered kinds; callers sign in with client certificates of the
control plane's CA, and the same certificate against kube-apiserver itself says what they see without the proxy.
docs/security.md (and docs/proxy.md) map each test to its row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.proxy import (
    FILTERED_KIND_RULES,
    ProxyClient,
    RunningProxy,
    caller,
    direct,
    start_proxy_on,
    subject,
    volume,
)
from enclave_testing.rbac import granted
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import USERS, owned_namespace

GROUP, VERSION = "enclave.dev", "v1beta2"


@pytest.fixture(scope="module")
def proxy(
    control_plane: ControlPlane,
    fence: TenancyStack,
    gateway_api_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningProxy]:
    running = start_proxy_on(fence, tmp_path_factory.mktemp("proxy-security"))
    try:
        with granted(control_plane.admin_client(), FILTERED_KIND_RULES, [subject(running.identity)]):
            yield running
    finally:
        running.stop()


@pytest.fixture
def made(control_plane: ControlPlane) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    """Create a cluster-scoped object as the administrator (``<group>/<version>/<plural>``, body); deleted after."""
    kube = control_plane.admin_client()
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    created: list[tuple[str, str]] = []

    def make(where: str, body: dict[str, Any]) -> str:
        name = str(body["metadata"]["name"])
        if where == "persistentvolumes":
            core.create_persistent_volume(body)
        else:
            group, version, plural = where.split("/")
            custom.create_cluster_custom_object(group, version, plural, body)
        created.append((where, name))
        return name

    yield make
    for where, name in created:
        try:
            if where == "persistentvolumes":
                core.delete_persistent_volume(name)
            else:
                group, version, plural = where.split("/")
                custom.delete_cluster_custom_object(group, version, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise


# kind in spec.proxy -> (group/version/plural, kind, the fields a valid object needs)
CLASSES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "StorageClasses": ("storage.k8s.io/v1/storageclasses", "StorageClass", {"provisioner": "example.com/x"}),
    "IngressClasses": ("networking.k8s.io/v1/ingressclasses", "IngressClass", {"spec": {"controller": "x.io/i"}}),
    "PriorityClasses": ("scheduling.k8s.io/v1/priorityclasses", "PriorityClass", {"value": 100}),
    "RuntimeClasses": ("node.k8s.io/v1/runtimeclasses", "RuntimeClass", {"handler": "runc"}),
    "GatewayClasses": (
        "gateway.networking.k8s.io/v1/gatewayclasses",
        "GatewayClass",
        {"spec": {"controllerName": "example.com/gateway"}},
    ),
}


def path(where: str, name: str = "", query: str = "") -> str:
    group, version, plural = where.split("/") if where.count("/") == 2 else ("", "v1", where)
    base = f"/apis/{group}/{version}/{plural}" if group else f"/api/v1/{plural}"
    return base + (f"/{name}" if name else "") + (f"?{query}" if query else "")


def make_class(made: Callable[[str, dict[str, Any]], str], kind: str, labels: dict[str, str] | None = None) -> str:
    where, name_of_kind, fields = CLASSES[kind]
    group, version, _ = where.split("/")
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": name_of_kind,
        "metadata": {"name": unique("cls"), "labels": labels or {}},
        **fields,
    }
    return made(where, body)


def grant_of(kind: str, name: str) -> dict[str, Any]:
    """The Tenant spec that gives ``name`` of ``kind``: a rule for priority classes (what admission allows),
    spec.proxy names for the others."""
    if kind == "PriorityClasses":
        placement = {"priorityClasses": [{"exact": [name]}]}
        return {"rules": [{"enforce": {"action": "allow", "workloads": {"placement": placement}}}]}
    return {"proxy": {"kinds": [{"kind": kind, "names": [{"exact": [name]}]}]}}


def owner_of(running: RunningProxy, fence: TenancyStack, **spec: Any) -> tuple[str, ProxyClient]:
    """A fresh tenant with ``spec`` and a tenant user who owns it, signed in to the proxy."""
    user = unique("px-owner")
    tenant = unique("px")
    fence.tenant(tenant, [{"kind": "User", "name": user}], **spec)
    return tenant, caller(running, user, [USERS])


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_listing_classes_the_tenant_is_not_given_is_refused(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str], kind: str
) -> None:
    where = CLASSES[kind][0]
    given, hidden = make_class(made, kind), make_class(made, kind)
    _, owner = owner_of(proxy, fence, **grant_of(kind, given))
    poll(lambda: owner.names(path(where)) == {given}, timeout=30, what=f"exactly the given {kind} through the proxy")
    assert hidden not in owner.names(path(where, query="watch=false"))
    code, _ = direct(proxy, owner).get(path(where))
    assert code == 403, "without the proxy the tenant user lists none (the proxy adds exactly what it is given)"


def test_getting_a_class_not_given_reveals_nothing_about_it(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    where = CLASSES["StorageClasses"][0]
    given, hidden = make_class(made, "StorageClasses"), make_class(made, "StorageClasses")
    _, owner = owner_of(proxy, fence, **grant_of("StorageClasses", given))
    poll(lambda: owner.get(path(where, given))[0] == 200, timeout=30, what="the given class by name")
    hidden_answer = owner.get(path(where, hidden))
    missing_answer = owner.get(path(where, unique("no-such-class")))
    assert hidden_answer[0] == missing_answer[0] == 403
    assert hidden_answer[1]["reason"] == missing_answer[1]["reason"] == "Forbidden"
    assert hidden_answer == direct(proxy, owner).get(path(where, hidden)), "kube-apiserver's own answer"


def test_listing_another_tenants_volumes_is_refused(
    proxy: RunningProxy,
    fence: TenancyStack,
    impersonate: Callable[..., Any],
    made: Callable[[str, dict[str, Any]], str],
) -> None:
    user, other = unique("px-owner"), unique("px-other")
    claimed = {"proxy": {"kinds": [{"kind": "PersistentVolumes", "claimed": True}]}}
    tenant, namespace = owned_namespace(fence, impersonate, user, **claimed)
    other_tenant, other_namespace = owned_namespace(fence, impersonate, other)
    mine = made("persistentvolumes", volume(unique("pv-mine"), {"enclave.dev/tenant": tenant}))
    bound = made("persistentvolumes", volume(unique("pv-bound"), {}, namespace))
    made("persistentvolumes", volume(unique("pv-theirs"), {"enclave.dev/tenant": other_tenant}))
    made("persistentvolumes", volume(unique("pv-their-claim"), {}, other_namespace))
    made("persistentvolumes", volume(unique("pv-loose"), {}))
    owner = caller(proxy, user, [USERS])
    poll(
        lambda: owner.names("/api/v1/persistentvolumes") == {mine, bound},
        timeout=30,
        what="the tenant's labelled and claimed volumes only",
    )
    assert direct(proxy, owner).get("/api/v1/persistentvolumes")[0] == 403


def test_a_selector_naming_a_hidden_object_reveals_nothing(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    where = CLASSES["StorageClasses"][0]
    label = unique("mark")
    given = make_class(made, "StorageClasses")
    hidden = make_class(made, "StorageClasses", {label: "hidden"})
    _, owner = owner_of(proxy, fence, **grant_of("StorageClasses", given))
    poll(lambda: owner.names(path(where)) == {given}, timeout=30, what="the given class")
    assert owner.names(path(where, query=f"fieldSelector=metadata.name%3D{hidden}")) == set()
    assert owner.names(path(where, query=f"labelSelector={label}%3Dhidden")) == set()
    assert owner.names(path(where, query=f"labelSelector={label}")) == set()


def test_a_resumed_watch_shows_no_hidden_object(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    where = CLASSES["StorageClasses"][0]
    given, hidden = make_class(made, "StorageClasses"), make_class(made, "StorageClasses")
    _, owner = owner_of(proxy, fence, **grant_of("StorageClasses", given))
    poll(lambda: owner.names(path(where)) == {given}, timeout=30, what="the given class")
    listed_at = owner.get(path(where))[1]["metadata"]["resourceVersion"]
    custom = client.CustomObjectsApi(proxy.plane.admin_client())
    for name in (hidden, given):
        custom.patch_cluster_custom_object(*where.split("/"), name, {"metadata": {"labels": {"changed": "yes"}}})
    poll(
        lambda: owner.get(path(where, given))[1]["metadata"].get("labels", {}).get("changed") == "yes",
        timeout=30,
        what="the proxy to see the change",
    )
    seen: dict[str, list[tuple[str, str]]] = {}
    for since in (listed_at, "0"):
        with owner.watch(path(where, query=f"watch=true&resourceVersion={since}&timeoutSeconds=1")) as events:
            seen[since] = [(event["type"], event["object"]["metadata"]["name"]) for event in events]
    assert seen == {listed_at: [("MODIFIED", given)], "0": [("ADDED", given)]}, "the hidden class changed too"


def test_a_watch_from_an_expired_version_replays_nothing(proxy: RunningProxy, fence: TenancyStack) -> None:
    _, owner = owner_of(proxy, fence)
    poll(lambda: owner.get("/apis/storage.k8s.io/v1/storageclasses")[0] == 200, timeout=30, what="a tenant user")
    with owner.watch("/apis/storage.k8s.io/v1/storageclasses?watch=true&resourceVersion=1") as events:
        answered = list(events)
    assert [event["type"] for event in answered] == ["ERROR"]
    assert (answered[0]["object"]["code"], answered[0]["object"]["reason"]) == (410, "Expired")


DELETE_VOLUMES = [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["delete", "patch"]}]
GRANT_GROUPS = [
    {"kind": "Group", "name": f"enclave.dev:proxy:persistentvolumes:{verb}", "apiGroup": "rbac.authorization.k8s.io"}
    for verb in ("delete", "patch")
]


def exists(proxy: RunningProxy, name: str) -> bool:
    try:
        stored = client.CoreV1Api(proxy.plane.admin_client()).read_persistent_volume(name)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return stored.metadata.deletion_timestamp is None


def test_deleting_a_volume_without_a_granted_verb_is_refused(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    tenant, owner = owner_of(proxy, fence)
    mine = made("persistentvolumes", volume(unique("pv-mine"), {"enclave.dev/tenant": tenant}))
    with granted(proxy.plane.admin_client(), DELETE_VOLUMES, GRANT_GROUPS):  # bound, but the setting says nothing
        poll(lambda: owner.names("/api/v1/persistentvolumes") == {mine}, timeout=30, what="the tenant's volume")
        code, _ = owner.request("DELETE", f"/api/v1/persistentvolumes/{mine}")
    assert code == 403
    assert exists(proxy, mine)


def test_a_granted_delete_of_another_tenants_volume_is_refused(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    verbs = {"kind": "PersistentVolumes", "verbs": ["get", "list", "watch", "delete"]}
    tenant, owner = owner_of(proxy, fence, proxy={"kinds": [verbs]})
    mine = made("persistentvolumes", volume(unique("pv-mine"), {"enclave.dev/tenant": tenant}))
    theirs = made("persistentvolumes", volume(unique("pv-theirs"), {"enclave.dev/tenant": unique("other")}))
    with granted(proxy.plane.admin_client(), DELETE_VOLUMES, GRANT_GROUPS):
        poll(lambda: owner.names("/api/v1/persistentvolumes") == {mine}, timeout=30, what="the tenant's volume")
        code, _ = owner.request("DELETE", f"/api/v1/persistentvolumes/{theirs}")
        assert code == 403, "another tenant's volume is forwarded as the caller alone"
        assert exists(proxy, theirs)
        code, body = owner.request("DELETE", f"/api/v1/persistentvolumes/{mine}")
        assert code == 200, body
    assert not exists(proxy, mine), "the grant works where the setting and the binding both say so"


def test_forging_the_grant_group_is_refused(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    _, owner = owner_of(proxy, fence)
    theirs = made("persistentvolumes", volume(unique("pv-theirs"), {"enclave.dev/tenant": unique("other")}))
    with granted(proxy.plane.admin_client(), DELETE_VOLUMES, GRANT_GROUPS):
        code, body = owner.request(
            "DELETE",
            f"/api/v1/persistentvolumes/{theirs}",
            headers={
                "Impersonate-User": "px-forger",
                "Impersonate-Group": "enclave.dev:proxy:persistentvolumes:delete",
            },
        )
    assert code == 403, body
    assert "may not impersonate" in body["message"]
    assert exists(proxy, theirs)


def test_relabelling_a_volume_for_another_tenant_through_a_granted_patch_is_refused(
    proxy: RunningProxy, fence: TenancyStack, made: Callable[[str, dict[str, Any]], str]
) -> None:
    verbs = {"kind": "PersistentVolumes", "verbs": ["get", "list", "watch", "patch"]}
    tenant, owner = owner_of(proxy, fence, proxy={"kinds": [verbs]})
    mine = made("persistentvolumes", volume(unique("pv-mine"), {"enclave.dev/tenant": tenant}))
    merge = {"Content-Type": "application/merge-patch+json"}
    with granted(proxy.plane.admin_client(), DELETE_VOLUMES, GRANT_GROUPS):
        poll(lambda: owner.names("/api/v1/persistentvolumes") == {mine}, timeout=30, what="the tenant's volume")
        relabel = {"metadata": {"labels": {"enclave.dev/tenant": unique("other")}}}
        code, body = owner.request("PATCH", f"/api/v1/persistentvolumes/{mine}", relabel, merge)
        assert code != 200, body
        assert "tenant ownership label" in body["message"], body
        code, body = owner.request(
            "PATCH", f"/api/v1/persistentvolumes/{mine}", {"metadata": {"labels": {"a": "b"}}}, merge
        )
        assert code == 200, "the grant itself works: the refusal above is admission's, judging the caller"
    stored = client.CoreV1Api(proxy.plane.admin_client()).read_persistent_volume(mine)
    assert stored.metadata.labels == {"enclave.dev/tenant": tenant, "a": "b"}

"""Tenant users' lists and watches from memory: the events that keep a watch level with the cluster."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

import pytest

from enclave_core.api.meta import Entity
from enclave_core.kube.connection import Connection
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import Kube
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView
from enclave_proxy import listing
from enclave_proxy.listing import (
    NAMESPACES,
    NODES,
    ClusterIndex,
    ClusterWatch,
    Kind,
    ListVersionError,
    TooOldError,
    list_body,
    list_version,
)
from enclave_proxy.query import NAMESPACE_FIELDS, NODE_FIELDS, selection
from enclave_proxy.visibility import Scope, Visibility

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def ns(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": name, "resourceVersion": str(version), "labels": labels},
    }


def tenancy(*names: str, node_selector: dict[str, str] | None = None) -> TenancySnapshot:
    owner = [Entity(kind="User", name="alice")]
    view = TenantView(name="oil", uid="1", owners=owner, namespaces=list(names), node_selector=node_selector or {})
    return TenancySnapshot(tenants=[view])


@dataclass
class World:
    """One kind's index and the snapshots deciding what alice sees (a real informer cache, fed by hand)."""

    index: ClusterIndex
    visibility: Visibility

    @property
    def informer(self) -> Informer:
        return self.index.informer

    def snapshots_changed(self) -> None:
        self.index.snapshots_changed()


def index(*objects: dict[str, Any], kind: Kind = NAMESPACES, snapshot: TenancySnapshot | None = None) -> World:
    built = World(
        ClusterIndex(Kube(Connection("http://127.0.0.1:1"), "test"), kind),
        Visibility(tenancy=snapshot or tenancy("oil-a", "oil-b")),
    )
    for obj in objects:
        built.informer.apply_event("ADDED", obj)
    return built


def watch(
    built: World,
    selector: str = "",
    initial: bool = True,
    groups: tuple[str, ...] = ("enclave.dev",),
    since: int | None = None,
) -> ClusterWatch:
    kind = built.index.kind

    def allowed() -> Scope | None:
        return built.visibility.scope(kind.setting or kind.name, "alice", groups, "watch")

    chosen = selection({"labelSelector": selector}, kind.fields)
    created = ClusterWatch(built.index, allowed, chosen, initial=initial, since=since)
    built.index.watches.add(created)
    return created


def kinds(events: list[tuple[str, dict[str, Any]]] | None) -> list[tuple[str, str]]:
    assert events is not None
    return [(kind, obj["metadata"]["name"]) for kind, obj in events]


def test_a_watch_from_nothing_starts_with_the_tenants_namespaces() -> None:
    built = index(ns("oil-a", 1), ns("oil-b", 2), ns("gas-a", 3))
    assert kinds(watch(built).events()) == [("ADDED", "oil-a"), ("ADDED", "oil-b")]


def test_a_watch_from_a_list_starts_quiet() -> None:
    built = index(ns("oil-a", 1))
    assert kinds(watch(built, initial=False).events()) == []


def test_changes_deletions_and_other_tenants_namespaces() -> None:
    built = index(ns("oil-a", 1), ns("gas-a", 3))
    tenant = watch(built)
    tenant.events()
    built.informer.apply_event("MODIFIED", ns("oil-a", 4, team="x"))
    built.informer.apply_event("MODIFIED", ns("gas-a", 5))
    assert kinds(tenant.events()) == [("MODIFIED", "oil-a")]
    built.informer.apply_event("DELETED", ns("oil-a", 6))
    assert kinds(tenant.events()) == [("DELETED", "oil-a")]


def test_a_namespace_joining_and_leaving_the_tenant_is_added_and_deleted() -> None:
    built = index(ns("oil-a", 1), ns("new", 2))
    tenant = watch(built)
    tenant.events()
    built.visibility.set_tenancy(tenancy("oil-a", "new"))
    built.snapshots_changed()
    assert kinds(tenant.events()) == [("ADDED", "new")]
    built.visibility.set_tenancy(tenancy("new"))
    built.snapshots_changed()
    assert kinds(tenant.events()) == [("DELETED", "oil-a")]


def test_an_object_that_stops_matching_the_selector_is_deleted_from_the_watch() -> None:
    built = index(ns("oil-a", 1, team="x"))
    tenant = watch(built, "team=x")
    assert kinds(tenant.events()) == [("ADDED", "oil-a")]
    built.informer.apply_event("MODIFIED", ns("oil-a", 2, team="y"))
    assert kinds(tenant.events()) == [("DELETED", "oil-a")]


def test_a_caller_who_stops_being_a_tenant_user_ends_the_watch() -> None:
    built = index(ns("oil-a", 1))
    tenant = watch(built, groups=())  # a tenant user only as the owner
    tenant.events()
    built.visibility.set_tenancy(TenancySnapshot())
    built.snapshots_changed()
    assert tenant.events() is None


def test_pages_follow_limit_and_continue() -> None:
    objects = [ns(f"oil-{i}", i) for i in range(5)]
    first = list_body(NAMESPACES, objects, {"limit": "2"}, as_table=None, resource_version="9", now=NOW)
    assert [o["metadata"]["name"] for o in first["items"]] == ["oil-0", "oil-1"]
    second = list_body(
        NAMESPACES,
        objects,
        {"limit": "2", "continue": first["metadata"]["continue"]},
        as_table=None,
        resource_version="9",
        now=NOW,
    )
    assert [o["metadata"]["name"] for o in second["items"]] == ["oil-2", "oil-3"]
    with pytest.raises(ValueError, match="continue token"):
        list_body(NAMESPACES, objects, {"continue": "not-a-token"}, as_table=None, resource_version="9", now=NOW)


def node(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "resourceVersion": str(version), "labels": labels},
    }


def test_nodes_are_those_the_tenants_node_selector_matches() -> None:
    snapshot = tenancy("oil-a", node_selector={"pool": "oil"})
    built = index(node("n1", 1, pool="oil"), node("n2", 2, pool="gas"), node("n3", 3), kind=NODES, snapshot=snapshot)
    scope = built.visibility.scope("Nodes", "alice", ())
    assert scope is not None
    assert [n["metadata"]["name"] for n in built.index.visible(scope, selection({}, NODE_FIELDS))] == ["n1"]
    tenant = watch(built)
    assert kinds(tenant.events()) == [("ADDED", "n1")]
    built.informer.apply_event("MODIFIED", node("n2", 4, pool="oil"))
    assert kinds(tenant.events()) == [("ADDED", "n2")]


def test_a_tenant_without_a_node_selector_sees_no_node() -> None:
    built = index(node("n1", 1, pool="oil"), kind=NODES)
    scope = built.visibility.scope("Nodes", "alice", ())
    assert scope is not None
    assert built.index.visible(scope, selection({}, NODE_FIELDS)) == []


def test_a_watch_resumes_from_a_version_and_sees_what_changed_since() -> None:
    """kubectl lists, then watches from the list's resourceVersion: what changed in between arrives, what did
    not is not sent again (the history holds the objects as they were)."""
    built = index(ns("oil-a", 1), ns("oil-b", 2), ns("gas-a", 3))
    listed_at = 3
    built.informer.apply_event("MODIFIED", ns("oil-a", 4, team="x"))
    built.informer.apply_event("DELETED", ns("oil-b", 5))
    built.informer.apply_event("MODIFIED", ns("gas-a", 6))
    built.visibility.set_tenancy(tenancy("oil-a", "oil-b", "oil-c"))
    built.informer.apply_event("ADDED", ns("oil-c", 7))
    assert kinds(watch(built, initial=False, since=listed_at).events()) == [
        ("MODIFIED", "oil-a"),
        ("DELETED", "oil-b"),
        ("ADDED", "oil-c"),
    ]
    assert kinds(watch(built, initial=False, since=7).events()) == []
    assert kinds(watch(built, initial=False, since=5).events()) == [("ADDED", "oil-c")]


def test_a_version_older_than_the_history_is_gone() -> None:
    built = World(
        ClusterIndex(Kube(Connection("http://127.0.0.1:1"), "test"), NAMESPACES, history=2),
        Visibility(tenancy=tenancy("oil-a")),
    )
    for version in range(1, 5):
        built.informer.apply_event("MODIFIED", ns("oil-a", version))
    with pytest.raises(TooOldError, match="too old resource version: 1"):
        watch(built, initial=False, since=1)
    assert kinds(watch(built, initial=False, since=3).events()) == [("MODIFIED", "oil-a")]


# -- resourceVersion and resourceVersionMatch on lists -------------------------------------------------------


def names_in(built: World, state: Any) -> list[str]:
    scope = built.visibility.scope("Namespace", "alice", (), "list")
    assert scope is not None
    return [obj["metadata"]["name"] for obj in built.index.visible(scope, selection({}, NAMESPACE_FIELDS), state)]


async def test_an_exact_list_answers_the_objects_as_they_were_at_that_version() -> None:
    """``resourceVersionMatch=Exact`` is a list of the past (client-go's paginated relist pins it); the proxy
    used to ignore it and answer now."""
    built = index(ns("oil-a", 1), ns("gas-a", 2))
    built.informer.apply_event("ADDED", ns("oil-b", 3))
    built.informer.apply_event("MODIFIED", ns("oil-a", 4, team="x"))
    state, version = await built.index.list_state({"resourceVersion": "2", "resourceVersionMatch": "Exact"})
    assert version == "2"
    assert names_in(built, state) == ["oil-a"]
    assert state["oil-a"]["metadata"]["resourceVersion"] == "1"
    state, _ = await built.index.list_state({"resourceVersion": "3", "resourceVersionMatch": "NotOlderThan"})
    assert names_in(built, state) == ["oil-a", "oil-b"]
    assert state["oil-a"]["metadata"]["resourceVersion"] == "4"


async def test_an_exact_list_older_than_the_history_is_expired() -> None:
    built = World(
        ClusterIndex(Kube(Connection("http://127.0.0.1:1"), "test"), NAMESPACES, history=2),
        Visibility(tenancy=tenancy("oil-a")),
    )
    for version in range(1, 5):
        built.informer.apply_event("MODIFIED", ns("oil-a", version))
    with pytest.raises(ListVersionError, match="too old") as err:
        await built.index.list_state({"resourceVersion": "1", "resourceVersionMatch": "Exact"})
    assert (err.value.code, err.value.reason) == (410, "Expired")


async def test_a_list_from_a_version_not_reached_yet_waits_for_it() -> None:
    built = index(ns("oil-a", 1))
    waiting = asyncio.create_task(built.index.list_state({"resourceVersion": "2", "resourceVersionMatch": "Exact"}))
    await asyncio.sleep(0)
    assert not waiting.done()
    built.informer.apply_event("ADDED", ns("oil-b", 2))
    state, version = await asyncio.wait_for(waiting, 5)
    assert (names_in(built, state), version) == (["oil-a", "oil-b"], "2")


async def test_a_list_from_a_version_never_reached_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "VERSION_WAIT_SECONDS", 0.05)
    built = index(ns("oil-a", 1))
    with pytest.raises(ListVersionError, match="Too large resource version: 9") as err:
        await built.index.list_state({"resourceVersion": "9"})
    assert err.value.code == 504


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ({"resourceVersionMatch": "Exact"}, 422, "forbidden unless resourceVersion is provided"),
        ({"resourceVersion": "0", "resourceVersionMatch": "Exact"}, 422, 'forbidden for resourceVersion "0"'),
        ({"resourceVersion": "1", "resourceVersionMatch": "Newest"}, 422, 'Unsupported value: "Newest"'),
        ({"resourceVersion": "1", "resourceVersionMatch": "Exact", "continue": "x"}, 422, "continue"),
        ({"resourceVersion": "abc"}, 400, "not a resourceVersion"),
    ],
)
def test_list_versions_kube_apiserver_refuses_are_refused(query: dict[str, str], code: int, message: str) -> None:
    with pytest.raises(ListVersionError, match=message) as err:
        list_version(query)
    assert err.value.code == code


def test_list_versions_that_mean_the_newest() -> None:
    assert list_version({}) == ("", None)
    assert list_version({"resourceVersion": "0"}) == ("", None)
    assert list_version({"resourceVersion": "0", "resourceVersionMatch": "NotOlderThan"}) == ("NotOlderThan", None)
    assert list_version({"resourceVersion": "7"}) == ("", 7)

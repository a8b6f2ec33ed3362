"""A shared informer's view (``enclave_core.kube.shared``) keeps the informer contract: first sync, changes,
deletes, a component's own writes and their echoes, ``failing``; fed by an upstream driven by hand (the
real-apiserver cases, a stalled component among them, are tests/integration/host/test_shared_informers.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from enclave_core.kube import projections
from enclave_core.kube.informer import watching
from enclave_core.kube.rest import JSON, Kube
from enclave_core.kube.shared import SharedInformers, SharedView, _Entry, _Upstream

PATH = "/api/v1/namespaces"


def namespace(name: str, rv: int, **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": labels},
    }


class Fixture:
    """An upstream fed by hand and ``count`` views of it on the running loop, as the hub would wire them."""

    def __init__(self, count: int = 2) -> None:
        self.hub = SharedInformers(lambda: cast(Any, None))
        kube = cast(Kube, None)
        self.changed: list[list[str]] = [[] for _ in range(count)]
        self.views = [
            SharedView(self.hub, kube, PATH, on_change=seen.append, name="namespaces", transform=projections.namespace)
            for seen in self.changed
        ]
        self.entry = _Entry(self.views[0].key)
        self.upstream = _Upstream(
            self.hub,
            self.entry,
            kube,
            path=PATH,
            transform=projections.namespace,
            name="namespaces",
            on_change=lambda key: self.entry.offer(key, list(self.entry.views)),
        )
        self.entry.upstream = self.upstream
        loop = asyncio.get_running_loop()
        for view in self.views:
            view._entry, view._loop = self.entry, loop
            self.entry.views.add(view)

    def listed(self, *objects: JSON, version: str = "10") -> None:
        """What the upstream's list does: its cache, then a fresh read offered to every view."""
        for obj in objects:
            self.upstream.items[str(obj["metadata"]["name"])] = projections.namespace(obj)
        self.upstream.resource_version = version
        self.entry.generation += 1
        self.entry.offer(None, list(self.entry.views))

    def event(self, kind: str, obj: JSON) -> None:
        self.upstream.apply_event(kind, obj)
        self.upstream.resource_version = str(obj["metadata"]["resourceVersion"])


async def handed_over() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_views_sync_from_the_upstream_list_and_report_every_key() -> None:
    f = Fixture()
    f.listed(namespace("a", 1), namespace("b", 2))
    await handed_over()
    for view, seen in zip(f.views, f.changed, strict=True):
        assert view.synced.is_set()
        assert sorted(view.items) == ["a", "b"]
        assert seen == ["a", "b"]
        assert view.items["a"] is f.upstream.items["a"], "the view holds the upstream's object, not a copy"


async def test_changes_and_deletes_reach_every_view_once_each() -> None:
    f = Fixture()
    f.listed(namespace("a", 1))
    await handed_over()
    f.event("MODIFIED", namespace("a", 3, team="x"))
    f.event("MODIFIED", namespace("a", 4, team="y"))  # before the views' loop ran: one hand-over, the latest
    f.event("ADDED", namespace("b", 5))
    await handed_over()
    for view, seen in zip(f.views, f.changed, strict=True):
        assert view.items["a"]["metadata"]["labels"] == {"team": "y"}
        assert seen == ["a", "a", "b"]
    f.event("DELETED", namespace("a", 6))
    await handed_over()
    for view, seen in zip(f.views, f.changed, strict=True):
        assert "a" not in view.items
        assert seen[-1] == "a"


async def test_a_components_own_write_is_not_stepped_back_and_its_echo_holds_the_shared_object() -> None:
    f = Fixture()
    f.listed(namespace("a", 1))
    await handed_over()
    writer, other = f.views
    f.changed[0].clear()
    written = writer.store(namespace("a", 7, team="new"), notify=False)
    assert writer.items["a"] is written
    f.event("MODIFIED", namespace("a", 5, team="old"))  # an older event arriving after the write
    await handed_over()
    assert writer.items["a"]["metadata"]["labels"] == {"team": "new"}, "not stepped back"
    assert other.items["a"]["metadata"]["labels"] == {"team": "old"}
    f.event("MODIFIED", namespace("a", 7, team="new"))  # the write's own echo
    await handed_over()
    assert writer.items["a"] is f.upstream.items["a"], "the echo's shared object replaces the stored copy"
    assert f.changed[0] == [], "nothing changed for the writer"


async def test_a_delete_the_upstream_saw_before_a_components_write_keeps_the_write() -> None:
    f = Fixture()
    f.listed(namespace("a", 1))
    await handed_over()
    f.event("DELETED", namespace("a", 2))
    writer = f.views[0]
    writer.store(namespace("a", 9), notify=False)  # re-created by the component before its loop took the delete
    await handed_over()
    assert "a" in writer.items
    f.event("ADDED", namespace("a", 9))
    f.event("DELETED", namespace("a", 12))
    await handed_over()
    assert "a" not in writer.items


async def test_failing_follows_the_upstream_on_each_components_own_loop() -> None:
    f = Fixture(count=1)
    f.listed(namespace("a", 1))
    await handed_over()
    f.upstream.failing = True
    await handed_over()
    assert f.views[0].failing
    assert not watching()
    f.upstream.failing = False
    await handed_over()
    assert not f.views[0].failing
    assert watching()

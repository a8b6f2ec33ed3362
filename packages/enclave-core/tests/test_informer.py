"""The informer against a scripted apiserver (on virtual time): pagination, 410s, relists, resourceVersions and
handlers that raise."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, KubeError
from enclave_testing import virtualtime


def obj(name: str, rv: int, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, **extra}


WatchScript = list[JSON | Exception | Callable[[], None]]
"""Events to yield, exceptions to raise, or callables to run (changes made "while the watch was down")."""


class FakeKube:
    """Lists from ``objects`` in pages; each watch call plays the next script (events, or an exception)."""

    def __init__(self, objects: list[JSON], version: int) -> None:
        self.objects = objects
        self.version = version
        self.lists: list[tuple[int | None, str | None]] = []
        self.watches: list[str] = []
        self.scripts: list[WatchScript | Exception] = []
        self.expire_continue_once = False
        self.typed = False
        """Answer lists as kube-apiserver does: ``apiVersion`` and ``kind`` on the list, not on its items."""
        self.done = asyncio.Event()

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> JSON:
        self.lists.append((limit, continue_token))
        if continue_token and self.expire_continue_once:
            self.expire_continue_once = False
            raise KubeError(410, "Expired", "The provided continue parameter is too old")
        start = int(continue_token or 0)
        end = start + (limit or len(self.objects))
        meta: JSON = {"resourceVersion": str(self.version)}
        if end < len(self.objects):
            meta["continue"] = str(end)
        page: JSON = {"metadata": meta, "items": [dict(o) for o in self.objects[start:end]]}
        if self.typed:
            page.update(apiVersion="v1", kind="ConfigMapList")
        return page

    async def watch(self, path: str, *, resource_version: str, **_: Any) -> AsyncIterator[JSON]:
        self.watches.append(resource_version)
        if not self.scripts:
            self.done.set()
            await asyncio.Event().wait()
        script = self.scripts.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            if isinstance(event, Exception):
                raise event
            if callable(event):
                event()
                continue
            yield event


async def run_until_done(informer: Informer, kube: FakeKube) -> None:
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(kube.done.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def scenario(body: Callable[[], Any]) -> None:
    virtualtime.run(body())


def test_the_list_is_paginated_and_the_watch_starts_at_its_resource_version() -> None:
    async def body() -> None:
        kube = FakeKube([obj(f"o{i:04}", i) for i in range(1200)], version=5000)
        informer = Informer(kube, "/x", page_size=500)  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert kube.lists == [(500, None), (500, "500"), (500, "1000")]
        assert len(informer.items) == 1200
        assert kube.watches == ["5000"]

    scenario(body)


def test_listed_objects_carry_the_kind_a_watch_event_would_and_a_relist_of_them_reports_nothing() -> None:
    """A list states apiVersion and kind once; an object read from it must look exactly like the same object
    in a watch event (a restarted controller keys what it manages by kind), so a relist after a 410 finds
    the watched object unchanged."""

    async def body() -> None:
        kube = FakeKube([obj("a", 1)], version=1)
        kube.typed = True
        changed: list[str] = []
        informer = Informer(kube, "/api/v1/configmaps", on_change=changed.append)  # type: ignore[arg-type]
        watched = obj("a", 1, apiVersion="v1", kind="ConfigMap")
        kube.scripts = [[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}]]
        await run_until_done(informer, kube)
        assert informer.items["a"] == watched
        assert changed == ["a"], "the relist after the 410 saw nothing new"

    scenario(body)


def test_an_expired_continue_token_restarts_the_list_from_the_first_page() -> None:
    async def body() -> None:
        kube = FakeKube([obj(f"o{i}", i) for i in range(5)], version=10)
        kube.expire_continue_once = True
        informer = Informer(kube, "/x", page_size=2)  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert kube.lists == [(2, None), (2, "2"), (2, None), (2, "2"), (2, "4")]
        assert sorted(informer.items) == [f"o{i}" for i in range(5)]

    scenario(body)


def test_watch_resumes_from_the_last_resource_version_including_bookmarks() -> None:
    async def body() -> None:
        kube = FakeKube([obj("a", 1)], version=10)
        kube.scripts = [
            [{"type": "MODIFIED", "object": obj("a", 11)}, {"type": "BOOKMARK", "object": obj("", 15)}],
            [{"type": "ADDED", "object": obj("b", 16)}],
        ]
        seen: list[str] = []
        informer = Informer(kube, "/x", on_change=seen.append)  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert kube.watches == ["10", "15", "16"]
        assert seen == ["a", "a", "b"]
        assert len(kube.lists) == 1, "a watch that ended normally resumes; it does not relist"

    scenario(body)


@pytest.mark.parametrize(
    "expiry",
    [
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
        KubeError(410, "Gone", "too old resource version"),
    ],
    ids=["error-event", "http-status"],
)
def test_410_relists_and_reports_what_changed_meanwhile(expiry: JSON | Exception) -> None:
    async def body() -> None:
        kube = FakeKube([obj("a", 1), obj("b", 2)], version=10)

        def meanwhile() -> None:
            # While the watch was down: b deleted, a changed, c created.
            kube.objects, kube.version = [obj("a", 20), obj("c", 21)], 22

        kube.scripts = [[meanwhile, expiry]]
        seen: list[str] = []
        informer = Informer(kube, "/x", on_change=seen.append)  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert len(kube.lists) == 2
        assert kube.watches == ["10", "22"]
        assert sorted(informer.items) == ["a", "c"]
        assert seen == ["a", "b", "a", "b", "c"]

    scenario(body)


def test_other_watch_errors_are_logged_and_relist_after_a_backoff(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        kube = FakeKube([obj("a", 1)], version=10)
        kube.scripts = [
            ConnectionResetError("connection reset by peer"),
            [{"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd unavailable"}}],
        ]
        informer = Informer(kube, "/x", name="things")  # type: ignore[arg-type]
        started = asyncio.get_running_loop().time()
        await run_until_done(informer, kube)
        assert len(kube.lists) == 3
        assert asyncio.get_running_loop().time() - started >= 0.2 + 0.4
        failures = [r for r in caplog.records if r.getMessage() == "watch failed; relisting"]
        assert [r.levelno for r in failures] == [logging.WARNING, logging.WARNING]
        assert "connection reset" in failures[0].__dict__["error"]
        assert "etcd unavailable" in failures[1].__dict__["error"]

    with caplog.at_level(logging.INFO, logger="enclave_core.kube.informer"):
        scenario(body)


def test_a_handler_that_raises_is_logged_and_does_not_stop_or_relist(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        kube = FakeKube([obj("bad", 1), obj("good", 2)], version=10)
        kube.scripts = [[{"type": "ADDED", "object": obj("bad2", 11)}, {"type": "ADDED", "object": obj("ok", 12)}]]
        seen: list[str] = []

        def handler(key: str) -> None:
            if key.startswith("bad"):
                raise RuntimeError(f"handler bug on {key}")
            seen.append(key)

        informer = Informer(kube, "/x", on_change=handler, name="things")  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert seen == ["good", "ok"]
        assert len(kube.lists) == 1, "a handler bug must not turn into a relist loop"
        assert sorted(informer.items) == ["bad", "bad2", "good", "ok"]
        errors = [r for r in caplog.records if r.getMessage() == "informer handler failed"]
        assert [r.__dict__["key"] for r in errors] == ["bad", "bad2"]
        assert all(r.exc_info for r in errors)

    with caplog.at_level(logging.INFO, logger="enclave_core.kube.informer"):
        scenario(body)


def test_deleted_events_remove_objects() -> None:
    async def body() -> None:
        kube = FakeKube([obj("a", 1), obj("b", 2)], version=10)
        kube.scripts = [[{"type": "DELETED", "object": obj("a", 11)}]]
        informer = Informer(kube, "/x")  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert sorted(informer.items) == ["b"]
        assert informer.resource_version == "11"

    scenario(body)


def test_keep_managed_fields_keeps_only_the_named_managers_entries() -> None:
    from enclave_core.kube.informer import keep_managed_fields
    from enclave_core.kube.managedfields import owned_keys

    def namespace() -> dict[str, Any]:
        return {
            "metadata": {
                "name": "a",
                "labels": {"x": "1", "y": "2"},
                "managedFields": [
                    {"manager": "mine", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}},
                    {
                        "manager": "kubectl",
                        "operation": "Update",
                        "fieldsV1": {"f:metadata": {"f:labels": {"f:y": {}}}},
                    },
                ],
            }
        }

    kept = keep_managed_fields("mine")(namespace())
    assert [entry["manager"] for entry in kept["metadata"]["managedFields"]] == ["mine"]
    assert owned_keys(kept, "mine", "metadata", "labels") == {"x"}  # what the controller reads is unchanged
    assert "managedFields" not in keep_managed_fields()(namespace())["metadata"]
    assert keep_managed_fields()({"metadata": {"name": "b"}}) == {"metadata": {"name": "b"}}


def test_an_unreachable_apiserver_makes_the_process_blind_until_a_list_works_again() -> None:
    """``informer.watching()`` is what a snapshot publisher vouches by: false from the first failure to reach
    the apiserver (or a 5xx) until a list succeeds again; a 4xx answer (a resource not served) is not blindness.
    The moment it is true again, ``on_watching_resumed`` callbacks run (once: the hub wakes its streams)."""
    from enclave_core.kube import informer as module

    async def body() -> None:
        kube = FakeKube([obj("a", 1)], version=10)
        seen: list[bool] = []
        resumed: list[bool] = []
        forget = module.on_watching_resumed(lambda: resumed.append(module.watching()))
        kube.scripts = [
            [lambda: seen.append(module.watching()), ConnectionRefusedError("apiserver down")],
            [lambda: seen.append(module.watching()), KubeError(404, "NotFound", "the server could not find it")],
            [lambda: seen.append(module.watching())],
        ]
        real_list = kube.list

        async def listing(path: str, **kwargs: Any) -> JSON:
            seen.append(module.watching())  # before each list: blind after the refused watch, not after the 404
            return await real_list(path, **kwargs)

        kube.list = listing  # type: ignore[method-assign]
        informer = Informer(kube, "/x", name="blind")  # type: ignore[arg-type]
        await run_until_done(informer, kube)
        assert seen == [True, True, False, True, True, True]
        assert module.watching()
        assert resumed == [True], "called once, when the relist after the refused watch worked"
        forget()
        forget()  # forgetting twice is harmless

    scenario(body)


def test_compact_shares_equal_strings_and_keeps_the_value() -> None:
    import json

    from enclave_core.kube.informer import compact

    one = json.loads('{"metadata": {"labels": {"role": "admin"}}, "items": ["admin", 1, null, true]}')
    two = json.loads('{"metadata": {"labels": {"role": "admin"}}, "items": ["admin", 1, null, true]}')
    a, b = compact(one), compact(two)
    assert a == one
    assert a["metadata"]["labels"]["role"] is b["metadata"]["labels"]["role"]
    assert next(iter(a)) is next(iter(b))
    long = "x" * 100
    assert compact({"m": long})["m"] is long


def test_share_holds_each_repeated_subtree_once_and_keeps_each_objects_own_parts_apart() -> None:
    import gc
    import json

    from enclave_core.kube import informer as inf

    def binding(namespace: str, version: str) -> JSON:
        return {
            "metadata": {"name": "owner", "namespace": namespace, "resourceVersion": version, "labels": {"t": "a"}},
            "roleRef": {"kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "User", "name": "alice"}],
            "flags": {"on": True, "count": 1, "ratio": 1.0},
        }

    raw_one, raw_two = binding("x", "1"), binding("y", "2")
    one, two = inf.share(json.loads(json.dumps(raw_one))), inf.share(json.loads(json.dumps(raw_two)))
    assert one == raw_one
    assert two == raw_two
    assert one is not two
    assert one["metadata"] is not two["metadata"]
    assert one["roleRef"] is two["roleRef"]
    assert one["subjects"] is two["subjects"]
    assert one["metadata"]["labels"] is two["metadata"]["labels"]
    # True, 1 and 1.0 are equal in Python but not the same JSON: never shared for one another.
    other = inf.share({"metadata": {}, "flags": {"on": 1, "count": True, "ratio": 1}})
    assert other["flags"] is not one["flags"]
    assert [type(v) for v in other["flags"].values()] == [int, bool, int]
    # A managedFields entry carries its time: the object's own, as is every subtree holding one.
    entry = {"manager": "m", "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:metadata": {}}}
    first, second = inf.share({"m": {"e": [dict(entry)]}}), inf.share({"m": {"e": [dict(entry)]}})
    assert first["m"] is not second["m"]
    assert first["m"]["e"][0]["fieldsV1"] is second["m"]["e"][0]["fieldsV1"]
    # The table forgets a shared value with its last holder.
    unique = {"metadata": {}, "spec": {"only": "here-" + "z" * 10}}
    key = ("d", ("only", "here-" + "z" * 10))
    held = inf.share(unique)
    assert held["spec"] == unique["spec"]
    assert key in inf._SHARED
    del held
    gc.collect()
    assert key not in inf._SHARED


async def test_store_caches_a_written_object_trimmed() -> None:
    from enclave_core.kube.informer import keep_managed_fields
    from enclave_testing.memorykube import MemoryKube

    informer = Informer(MemoryKube(), "/api/v1/namespaces", transform=keep_managed_fields())
    stored = informer.store({"metadata": {"name": "a", "managedFields": [{"manager": "x"}]}})
    assert informer.get("a") is stored
    assert stored == {"metadata": {"name": "a"}}


async def test_the_watch_echo_of_a_stored_write_does_not_step_the_cache_back() -> None:
    from enclave_testing.memorykube import MemoryKube

    changed: list[str] = []
    informer = Informer(MemoryKube(), "/x", on_change=changed.append)

    def version(rv: int, status: str = "") -> JSON:
        return {"metadata": {"name": "a", "resourceVersion": str(rv)}, "status": {"s": status}}

    informer.store(version(5, "written"), notify=False)  # a create (4) then a status patch (5), as stored
    informer.apply_event("ADDED", version(4))  # the create's event: older than what is cached
    informer.apply_event("MODIFIED", version(5, "written"))  # the patch's own echo
    assert informer.get("a") == version(5, "written")
    assert changed == []
    informer.apply_event("MODIFIED", version(6, "someone else"))
    assert informer.get("a") == version(6, "someone else")
    assert changed == ["a"]
    informer.store(version(7, "mine"))
    assert changed == ["a", "a"]
    informer.apply_event("DELETED", version(8))
    assert informer.get("a") is None

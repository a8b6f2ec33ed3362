"""The incremental write loop: dirty keys, bounded rounds, order, statuses after each round, no writes at rest."""

from __future__ import annotations

import copy

from loop_helpers import Loop
from tenants_helpers import namespace, tenant

from enclave_core.kube.rest import KubeError
from enclave_tenants import work as wk


def _bound(loop: Loop) -> set[str]:
    return {key.partition("/")[0] for key in loop.controller.bindings.items}


def _status_namespaces(loop: Loop, name: str) -> list[str]:
    return list((loop.controller.tenants.items[name].get("status") or {}).get("namespaces") or [])


async def test_a_tenancy_converges_then_a_round_writes_nothing() -> None:
    loop = Loop()
    loop.tenancy(3, 4)
    await loop.settle()
    names = {f"t{t:04d}-n{n:02d}" for t in range(3) for n in range(4)}
    assert _bound(loop) == names
    assert {key.partition("/")[0] for key in loop.controller.rule_statuses.items} == names
    assert _status_namespaces(loop, "t0001") == [f"t0001-n{n:02d}" for n in range(4)]
    more, writes = await loop.round()
    assert (more, writes) == (False, [])
    loop.controller.set_leading(True)  # a resync or a new Lease: everything is looked at, nothing written
    await loop.settle()
    assert loop.echo() == []


async def test_a_round_writes_at_most_a_batch_and_reports_its_tenants_at_once() -> None:
    loop = Loop(batch_size=5)
    loop.tenancy(4, 5)
    more, writes = await loop.round()
    assert more
    bound = _bound(loop)
    assert len(bound) == 5
    # The oldest (all equal here: then by name) first: one tenant's namespaces, and that tenant's status.
    assert bound == {f"t0000-n{n:02d}" for n in range(5)}
    assert _status_namespaces(loop, "t0000") == sorted(bound)
    assert sum(1 for method, path in writes if "rulestatuses" in path and method == "POST") == 5
    rounds = await loop.settle()
    assert rounds >= 3
    assert len(_bound(loop)) == 20


async def test_a_new_namespace_is_bound_first_while_everything_is_being_looked_at() -> None:
    loop = Loop(batch_size=5)
    loop.tenancy(20, 5)
    await loop.settle()
    loop.controller.set_leading(True)  # a Lease gained: 100 namespaces to look at again, 5 per round
    loop.add_namespace(namespace("t0007-new", "t0007"))
    _, writes = await loop.round()
    assert "t0007-new" in _bound(loop)
    assert "t0007-new" in _status_namespaces(loop, "t0007")
    assert any(path.endswith("/namespaces/t0007-new/rulestatuses/default") for _, path in writes)


async def test_an_owner_change_moves_every_binding_in_bounded_rounds() -> None:
    loop = Loop(batch_size=40)
    loop.tenancy(1, 100)
    await loop.settle()
    before = set(loop.controller.bindings.items)
    changed = copy.deepcopy(loop.controller.tenants.items["t0000"])
    changed["metadata"]["generation"] = 2
    changed["spec"]["owners"] = [{"kind": "User", "name": "bob"}]
    loop.add_tenant(changed)
    rounds, writes = 0, []
    more = True
    while more:
        more, done = await loop.round()
        rounds += 1
        writes += done
    after = set(loop.controller.bindings.items)
    assert not before & after
    assert len(after) == len(before)
    assert {key.partition("/")[2] for key in after} == {"enclave-user-bob-admin"} or all("bob" in k for k in after)
    deletes = [path for method, path in writes if method == "DELETE"]
    assert len(deletes) == len(before)
    assert rounds <= 5  # 100 namespaces at 40 a round, then the statuses settle
    assert [o["name"] for o in loop.controller.tenants.items["t0000"]["status"]["owners"]] == ["bob"]


async def test_our_own_status_writes_need_no_new_plan() -> None:
    loop = Loop()
    loop.tenancy(2, 2)
    await loop.settle()
    plan = loop.controller._plan
    raw = copy.deepcopy(loop.controller.tenants.items["t0000"])
    raw["status"]["size"] = 99  # someone edited the status: it is compared again, the plan stays
    loop.put(loop.controller.tenants, raw)
    assert not loop.controller._plan_stale
    _, writes = await loop.round()
    assert loop.controller._plan is plan
    assert [path for _, path in writes] == ["/apis/enclave.dev/v1beta2/tenants/t0000/status"]


async def test_a_failed_write_is_retried_and_reported() -> None:
    loop = Loop()
    loop.tenancy(1, 3)

    def fail(method: str, path: str) -> KubeError | None:
        if method == "PATCH" and "/namespaces/t0000-n01/rolebindings/" in path:
            return KubeError(500, "InternalError", "etcd is away")
        return None

    loop.kube.fail = fail
    await loop.round()
    assert loop.controller._retry == {"t0000-n01"}
    ready = next(c for c in loop.controller.tenants.items["t0000"]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "ApplyFailed"
    loop.kube.fail = None
    loop.controller._retry_at = 0.0  # the retry is due
    assert loop.controller.has_work()  # what the loop asks then: the namespace is dirty again
    assert loop.controller._retry == set()
    await loop.settle()
    assert _bound(loop) == {"t0000-n00", "t0000-n01", "t0000-n02"}
    ready = next(c for c in loop.controller.tenants.items["t0000"]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


async def test_a_namespace_that_leaves_its_tenant_loses_its_bindings_and_the_tenant_its_status_entry() -> None:
    loop = Loop()
    loop.tenancy(1, 2)
    await loop.settle()
    left = namespace("t0000-n01")
    loop.put(loop.controller.namespaces, left)
    await loop.settle()
    assert _bound(loop) == {"t0000-n00"}
    assert _status_namespaces(loop, "t0000") == ["t0000-n00"]


def test_dirty_tenants_expand_to_their_namespaces_and_statuses() -> None:
    dirty = wk.Dirty(everything=False, owners=False)
    assert not dirty
    dirty.tenants.add("a")
    dirty.accounts.add("b-1")
    dirty.expand({"a-1": "a", "b-1": "b"}, {"a": ["a-1"], "b": ["b-1"]}, (), ())
    assert dirty.namespaces == {"a-1", "b-1"} == dirty.rules
    assert dirty.statuses == {"a", "b"}
    dirty.moved({"x": "a"}, {"x": "b", "y": "b"})
    assert {"x", "y"} <= dirty.namespaces
    assert dirty.statuses == {"a", "b"}


def test_a_batch_takes_the_missing_before_the_drifted_and_the_oldest_first() -> None:
    dirty = wk.Dirty(everything=False, owners=False)
    dirty.queued = {
        "check": (wk.CHECK, "2020"),
        "drift": (wk.DRIFTED, "2019"),
        "new": (wk.MISSING, "2026"),
        "old": (wk.MISSING, "2021"),
    }
    assert dirty.next_batch(3) == ["old", "new", "drift"]
    assert dirty.queued == {"check": (wk.CHECK, "2020")}
    dirty.rules = {"check", "gone"}
    dirty.settle()
    assert dirty.rules == {"check"}


def test_a_status_only_change_keeps_the_spec_signature() -> None:
    raw = tenant("a")
    with_status = {**copy.deepcopy(raw), "status": {"size": 3}}
    assert wk.spec_signature(raw) == wk.spec_signature(with_status)
    assert wk.spec_signature(raw) != wk.spec_signature(tenant("a", generation=2))


async def test_the_loop_settles_then_waits_and_retries_a_failed_write_after_a_backoff() -> None:
    import asyncio

    loop = Loop(batch_size=4)
    loop.tenancy(3, 3)
    failing = {"t0001-n02"}

    def fail(method: str, path: str) -> KubeError | None:
        if method == "PATCH" and any(f"/namespaces/{name}/rolebindings/" in path for name in failing):
            return KubeError(503, "ServiceUnavailable", "try again")
        return None

    loop.kube.fail = fail
    for informer in loop.controller.informers():
        informer.synced.set()  # the caches were filled by hand
    task = asyncio.create_task(loop.controller.loop.run_loops())
    try:
        await asyncio.wait_for(loop.controller.reconciled.wait(), timeout=10)
        assert _bound(loop) == {f"t{t:04d}-n{n:02d}" for t in range(3) for n in range(3)} - failing
        failing.clear()  # the API recovers; the loop retries on its own after its backoff
        for _ in range(100):
            if "t0001-n02" in _bound(loop):
                break
            await asyncio.sleep(0.05)
        assert "t0001-n02" in _bound(loop)
        await asyncio.sleep(0.3)
        settled = len(loop.kube.calls)
        await asyncio.sleep(0.3)
        assert len(loop.kube.calls) == settled  # waiting, not spinning
        assert not task.done()
    finally:
        task.cancel()

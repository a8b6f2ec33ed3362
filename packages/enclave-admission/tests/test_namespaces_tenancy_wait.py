"""A namespace request refused only because this replica has not seen a Tenant yet waits, bounded, for the
Tenancy snapshot that shows it (issue 30: a tenant created milliseconds before its first namespace)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from admission_helpers import ADMIN, make_state, namespace, request, tenant, user

from enclave_admission.namespaces import mutation, validation
from enclave_admission.review import Decision
from enclave_admission.state import Arrivals
from enclave_core.api.names import TENANT_LABEL
from enclave_core.snapshots.tenancy import TenancySnapshot
from enclave_testing.waiting import assert_cancel_is_kept

CAROL = user("carol", "enclave.dev")


async def decided(answer: Decision | Awaitable[Decision]) -> Decision:
    return await answer if inspect.isawaitable(answer) else answer


async def test_a_new_owner_is_assigned_once_the_snapshot_shows_the_tenant() -> None:
    state = make_state([tenant("solar", "alice")])
    answer = mutation.answer(request(CAROL, "CREATE", namespace("moon-dev")), state)
    assert inspect.isawaitable(answer)  # a miss: waits for a newer snapshot
    pending = asyncio.ensure_future(decided(answer))
    await asyncio.sleep(0.01)
    state.set_tenancy(TenancySnapshot(tenants=[tenant("solar", "alice"), tenant("moon", "carol")]))
    assigned = await asyncio.wait_for(pending, 1)
    assert assigned.allowed, assigned
    assert assigned.tenant == "moon"


async def test_a_label_naming_a_tenant_not_seen_yet_is_decided_once_it_is() -> None:
    state = make_state([])
    obj = namespace("moon-dev", {TENANT_LABEL: "moon"})
    pending = asyncio.ensure_future(decided(mutation.answer(request(CAROL, "CREATE", obj), state)))
    await asyncio.sleep(0.01)
    state.set_tenancy(TenancySnapshot(tenants=[tenant("moon", "carol")]))
    assert (await asyncio.wait_for(pending, 1)).allowed


async def test_an_administrator_label_naming_a_new_tenant_waits_too() -> None:
    state = make_state([])
    obj = namespace("moon-dev", {TENANT_LABEL: "moon"})
    pending = asyncio.ensure_future(decided(validation.answer(request(ADMIN, "CREATE", obj), state)))
    await asyncio.sleep(0.01)
    state.set_tenancy(TenancySnapshot(tenants=[tenant("moon", "carol")]))
    decision = await asyncio.wait_for(pending, 1)
    assert decision.reason == "NotAssigned"  # the tenant is known now: judged on (no owner reference here)


async def test_a_true_refusal_comes_after_the_bounded_wait() -> None:
    state = make_state([tenant("solar", "alice")])
    state.tenancy_wait = 0.05
    refused = await decided(mutation.answer(request(CAROL, "CREATE", namespace("moon-dev")), state))
    assert not refused.allowed
    assert refused.reason == "NoTenant"
    # a snapshot that does not change the answer does not end the wait early with a different one
    state.tenancy_wait = 0.2
    pending = asyncio.ensure_future(decided(mutation.answer(request(CAROL, "CREATE", namespace("moon-dev")), state)))
    await asyncio.sleep(0.01)
    state.set_tenancy(TenancySnapshot(tenants=[tenant("solar", "alice")]))
    assert (await pending).reason == "NoTenant"


def test_other_decisions_are_answered_at_once() -> None:
    state = make_state([tenant("solar", "alice")])
    answer = mutation.answer(request(user("alice", "enclave.dev"), "CREATE", namespace("solar-dev")), state)
    assert isinstance(answer, Decision)
    assert answer.allowed
    state.tenancy_wait = 0.0  # offline (enclave explain): a miss is decided at once
    at_once = mutation.answer(request(CAROL, "CREATE", namespace("moon-dev")), state)
    assert isinstance(at_once, Decision)
    assert at_once.reason == "NoTenant"


async def test_a_wait_cancelled_as_the_snapshot_arrives_stops() -> None:
    """A request's wait for a newer snapshot, cancelled (shutdown) in the loop step the snapshot arrives in, must
    end cancelled: Python 3.11's wait_for returned the decision instead and the handler went on."""

    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        arrivals = Arrivals()
        shown: list[str] = []

        def arrive() -> None:
            shown.append("moon")
            arrivals.arrived()

        return arrivals.until(lambda: bool(shown), 30.0), arrive

    await assert_cancel_is_kept(attempt)

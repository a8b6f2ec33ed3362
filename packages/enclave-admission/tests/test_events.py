"""Deny Events: none for dry runs, one object per repeated denial with a moving count, a budget per user."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from admission_helpers import ALICE, namespace, request, user

from enclave_admission import events
from enclave_admission.events import DenyEvents
from enclave_admission.review import Decision
from enclave_core.kube.events import EventRecorder
from enclave_testing.waiting import assert_cancel_is_kept


class FakeRecorder(EventRecorder):
    def __init__(self) -> None:
        self.created: list[tuple[str, str]] = []
        self.bumps: list[tuple[str, int]] = []

    async def emit(self, obj: Any, event_type: Any, reason: str, message: str, *, namespace: str | None = None) -> Any:
        name = f"{obj['metadata']['name']}.{len(self.created)}"
        self.created.append((name, reason))
        return {"metadata": {"name": name, "namespace": namespace}, "reason": reason}

    async def bump(self, event: Any, count: int) -> bool:
        self.bumps.append((event["metadata"]["name"], count))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


DENIED = Decision.deny("TenantNotOwned", "not yours")


async def drain(deny: DenyEvents) -> None:
    while not deny.queue.empty():
        await deny._create(deny.queue.get_nowait())


async def test_a_dry_run_denial_posts_nothing() -> None:
    deny = DenyEvents(FakeRecorder(), clock=Clock())
    deny.post(request(ALICE, "CREATE", namespace("x"), dry_run=True), DENIED, "enclave-system")
    assert deny.queue.empty()


async def test_a_repeated_denial_moves_the_count_of_one_event() -> None:
    recorder, clock = FakeRecorder(), Clock()
    deny = DenyEvents(recorder, clock=clock)
    for _ in range(50):
        deny.post(request(ALICE, "CREATE", namespace("x")), DENIED, "enclave-system")
    await drain(deny)
    assert recorder.created == [("x.0", "TenantNotOwned")]
    await deny.flush()
    assert recorder.bumps == [], "counts are written at most once per FLUSH_EVERY"
    clock.now += events.FLUSH_EVERY
    await deny.flush()
    assert recorder.bumps == [("x.0", 50)]
    await deny.flush(force=True)
    assert recorder.bumps == [("x.0", 50)], "nothing new, nothing written"
    # another message or object is another Event; past the window the same denial starts a new one
    deny.post(request(ALICE, "CREATE", namespace("y")), DENIED, "enclave-system")
    clock.now += events.WINDOW
    deny.post(request(ALICE, "CREATE", namespace("x")), DENIED, "enclave-system")
    await drain(deny)
    assert [name for name, _ in recorder.created] == ["x.0", "y.1", "x.2"]


async def test_new_event_objects_per_user_are_rate_limited() -> None:
    recorder, clock = FakeRecorder(), Clock()
    deny = DenyEvents(recorder, clock=clock)
    suppressed = events.SUPPRESSED._value.get()
    for index in range(events.BURST + 10):  # a new name each time defeats aggregation, not the budget
        deny.post(request(ALICE, "CREATE", namespace(f"n{index}")), DENIED, "enclave-system")
    deny.post(request(user("bob", "enclave.dev"), "CREATE", namespace("b")), DENIED, "enclave-system")
    await drain(deny)
    assert len(recorder.created) == events.BURST + 1, "alice's burst, and bob's own budget"
    assert events.SUPPRESSED._value.get() == suppressed + 10
    clock.now += events.REFILL
    deny.post(request(ALICE, "CREATE", namespace("later")), DENIED, "enclave-system")
    await drain(deny)
    assert recorder.created[-1][0].startswith("later.")


def test_a_denial_event_names_the_tenant_the_refusal_leaves_out() -> None:
    deny = DenyEvents(FakeRecorder(), clock=Clock())
    refusal = Decision.deny("NamespaceNotOwned", "it belongs to another tenant", tenant="oil")
    deny.post(request(ALICE, "DELETE", None, namespace("oil-a")), refusal, "enclave-system")
    assert "(tenant oil) denied: it belongs to another tenant" in deny.queue.get_nowait().message


async def test_the_writer_cancelled_as_a_denial_arrives_stops() -> None:
    """Shutdown cancels the Event writer while it waits on its queue: it must stop even when a denial is
    queued in the same step (Python 3.11's wait_for would return the denial and drop the cancel)."""

    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        deny = DenyEvents(FakeRecorder(), clock=Clock())
        return deny.run(), lambda: deny.post(request(ALICE, "CREATE", namespace("x")), DENIED, "enclave-system")

    await assert_cancel_is_kept(attempt)

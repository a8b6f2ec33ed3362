"""The subscriber's readiness does not lie: accepted snapshots only, stale ones close the gate, dead
publishers are noticed, and payloads from a newer publisher (unknown fields) still parse."""

from __future__ import annotations

import asyncio
import contextlib
import json
import typing
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import REGISTRY
from pydantic import BaseModel

from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest
from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.pools import PoolsSnapshot
from enclave_core.snapshots.quotas import QuotaTargets
from enclave_core.snapshots.replication import ReplicationSnapshot
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.subscriber import SnapshotSubscriber
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView

KIND = "Tenancy"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _snapshot(revision: int, payload: bytes = b"{}", *, heartbeat: bool = False, incarnation: str = "p/1") -> Snapshot:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return Snapshot(
        kind=KIND, revision=revision, incarnation=incarnation, payload=payload, produced_at=stamp, heartbeat=heartbeat
    )


def _subscriber(accepted: list[Snapshot], clock: Clock, staleness: float = 30.0) -> SnapshotSubscriber:
    def accept(snapshot: Snapshot) -> None:
        TenancySnapshot.model_validate_json(snapshot.payload)
        accepted.append(snapshot)

    return SnapshotSubscriber(
        "127.0.0.1:1",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[KIND],
        on_snapshot=accept,
        subscriber="test",
        staleness=staleness,
        clock=clock,
    )


def _rejected() -> float:
    return REGISTRY.get_sample_value("enclave_snapshot_rejected_total", {"kind": KIND}) or 0.0


def test_a_rejected_first_snapshot_leaves_the_gate_closed_and_is_counted() -> None:
    accepted: list[Snapshot] = []
    subscriber = _subscriber(accepted, Clock())
    before = _rejected()
    subscriber.receive(_snapshot(1, b'{"tenants": "not a list"}'))
    assert not subscriber.ready
    assert subscriber.state.rejected == 1
    assert _rejected() == before + 1
    assert KIND not in subscriber.state.latest
    subscriber.receive(_snapshot(2, b'{"tenants": []}'))
    assert subscriber.ready
    assert [s.revision for s in accepted] == [2]


def test_a_rejected_update_keeps_the_last_good_state_which_then_goes_stale() -> None:
    accepted: list[Snapshot] = []
    clock = Clock()
    subscriber = _subscriber(accepted, clock, staleness=30.0)
    subscriber.receive(_snapshot(1, b'{"tenants": []}'))
    subscriber.receive(_snapshot(1, heartbeat=True))
    subscriber.receive(_snapshot(2, b"garbage"))
    assert subscriber.state.latest[KIND].revision == 1
    assert subscriber.ready  # still within the bound: the last good state serves
    # The publisher vouches for revision 2, which this replica does not have: that confirms nothing.
    for _ in range(5):
        clock.now += 10
        subscriber.receive(_snapshot(2, heartbeat=True))
    assert not subscriber.ready
    subscriber.receive(_snapshot(3, b'{"tenants": []}'))
    assert subscriber.ready


def test_heartbeats_keep_an_unchanged_snapshot_fresh_and_silence_closes_the_gate() -> None:
    accepted: list[Snapshot] = []
    clock = Clock()
    subscriber = _subscriber(accepted, clock, staleness=30.0)
    assert subscriber.heartbeat == 8  # asked of the publisher: four chances within the bound
    subscriber.receive(_snapshot(1, b'{"tenants": []}'))
    for _ in range(10):
        clock.now += 8
        subscriber.receive(_snapshot(1, heartbeat=True))
        assert subscriber.ready
    clock.now += 31
    assert not subscriber.ready
    assert REGISTRY.get_sample_value("enclave_snapshot_stale", {"kind": KIND}) == 1.0
    subscriber.receive(_snapshot(1, heartbeat=True))
    assert subscriber.ready
    assert len(accepted) == 1, "heartbeats are not handed to the consumer"
    age = REGISTRY.get_sample_value("enclave_snapshot_age_seconds", {"kind": KIND})
    assert age is not None
    assert 0 <= age < 5


def test_a_blind_publishers_heartbeats_and_resends_keep_the_stream_but_not_the_gate() -> None:
    """A publisher whose watches fail marks what it sends ``unconfirmed``: the staleness bound runs on as if
    it were silent, a re-send after a reconnect does not reset it, and its first real heartbeat reopens it."""
    accepted: list[Snapshot] = []
    clock = Clock()
    subscriber = _subscriber(accepted, clock, staleness=30.0)
    subscriber.receive(_snapshot(1, b'{"tenants": []}'))
    blind_beat = _snapshot(1, heartbeat=True)
    blind_beat.unconfirmed = True
    blind_resend = _snapshot(1, b'{"tenants": []}')
    blind_resend.unconfirmed = True
    for _ in range(3):
        clock.now += 8
        subscriber.receive(blind_beat)
    assert subscriber.ready, "still within the bound"
    clock.now += 8
    subscriber.receive(blind_resend)
    assert not subscriber.ready, "32 s without a confirmation"
    subscriber.receive(_snapshot(1, heartbeat=True))
    assert subscriber.ready
    assert len(accepted) == 1


async def test_a_hub_that_cannot_vouch_marks_everything_it_sends_unconfirmed() -> None:
    seeing = [False]
    hub = SnapshotHub("test", confirming=lambda: seeing[0])
    hub.publish(KIND, b'{"tenants": []}')
    stream = hub.stream([KIND], heartbeat=0.05)
    first = await anext(stream)
    beat = await asyncio.wait_for(anext(stream), timeout=5)
    assert first.unconfirmed
    assert beat.heartbeat
    assert beat.unconfirmed
    assert not hub.latest(KIND).unconfirmed, "the shared snapshot is never marked"  # type: ignore[union-attr]
    seeing[0] = True
    beat = await asyncio.wait_for(anext(stream), timeout=5)
    assert beat.heartbeat
    assert not beat.unconfirmed
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_hub_that_vouches_again_tells_every_stream_at_once_not_a_heartbeat_later() -> None:
    """After a relist (``informer.on_watching_resumed``) ``reconfirm`` sends a confirmed heartbeat of every kind
    a stream was sent, so a subscriber past its staleness bound is ready again without waiting out the beat."""
    seeing = [False]
    hub = SnapshotHub("test", confirming=lambda: seeing[0])
    hub.publish(KIND, b'{"tenants": []}')
    hub.publish("Other", b"{}")
    streams = [hub.stream([KIND], heartbeat=3600), hub.stream(heartbeat=3600), hub.stream([KIND])]
    firsts = [await anext(stream) for stream in streams]
    await anext(streams[1])  # the second kind
    assert all(first.unconfirmed for first in firsts)
    seeing[0] = True
    hub.reconfirm()
    beat = await asyncio.wait_for(anext(streams[0]), timeout=5)
    assert (beat.heartbeat, beat.unconfirmed, beat.kind, beat.revision) == (True, False, KIND, firsts[0].revision)
    beats = [await asyncio.wait_for(anext(streams[1]), timeout=5) for _ in range(2)]
    assert sorted(b.kind for b in beats) == sorted([KIND, "Other"])
    assert all(b.heartbeat and not b.unconfirmed for b in beats)
    with pytest.raises(TimeoutError):  # a stream without heartbeats gets none: nothing it asked for changed
        await asyncio.wait_for(anext(streams[2]), timeout=0.2)
    hub.publish(KIND, b'{"tenants": [1]}')
    changed = await asyncio.wait_for(anext(streams[0]), timeout=5)
    assert (changed.heartbeat, changed.unconfirmed) == (False, False)
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


def test_a_publisher_without_heartbeats_is_not_judged_stale() -> None:
    """One release behind, a publisher sends no heartbeats; an upgraded subscriber must not go unready."""
    clock = Clock()
    subscriber = _subscriber([], clock, staleness=30.0)
    subscriber.receive(_snapshot(1, b'{"tenants": []}'))
    clock.now += 3600
    assert subscriber.ready


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _with_unknown_fields(model: type[BaseModel], value: Any) -> Any:
    """``value`` (the JSON of ``model``) with an extra field in every object of a model, at every depth."""
    if isinstance(value, list):
        return [_with_unknown_fields(model, item) for item in value]
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for name, info in model.model_fields.items():
        key = info.alias if info.alias in value else name
        nested = _models_in(info.annotation)
        if key in value and nested:
            out[key] = _with_unknown_fields(nested[0], value[key])
    out["fieldFromTheFuture"] = {"x": 1}
    return out


@pytest.mark.parametrize(
    "payload",
    [
        TenancySnapshot(
            tenants=[TenantView(name="a", uid="u", owners=[Entity(kind="User", name="alice")], namespaces=["a-dev"])]
        ),
        effective("default", 3, ServiceConfigurationSpec()),
        PoolsSnapshot(),
        QuotaTargets(),
        GlobalQuotasSnapshot(),
        ReplicationSnapshot(),
    ],
    ids=lambda model: type(model).__name__,
)
def test_payloads_from_a_newer_publisher_parse(payload: Any) -> None:
    document = json.loads(payload.model_dump_json(by_alias=True))
    newer = json.dumps(_with_unknown_fields(type(payload), document))
    assert "fieldFromTheFuture" in newer
    parsed = type(payload).model_validate_json(newer)
    assert parsed == type(payload).model_validate_json(json.dumps(document))


async def test_the_hub_sends_heartbeats_on_an_idle_stream() -> None:
    hub = SnapshotHub("test")
    hub.publish(KIND, b'{"tenants": []}')
    stream = hub.stream([KIND], heartbeat=0.05)
    first = await anext(stream)
    beat = await asyncio.wait_for(anext(stream), timeout=5)
    assert not first.heartbeat
    assert beat.heartbeat
    assert (beat.kind, beat.revision, beat.incarnation, beat.payload) == (KIND, first.revision, first.incarnation, b"")
    await stream.aclose()  # type: ignore[attr-defined]


class _HungPublisher:
    """Sends one snapshot and one heartbeat, then nothing: a publisher whose loop is stuck but whose
    connection (and gRPC's own pings) still answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def Watch(self, request: WatchRequest, context: Any) -> AsyncIterator[Snapshot]:  # noqa: N802
        self.calls += 1
        yield _snapshot(1, b'{"tenants": []}')
        yield _snapshot(1, heartbeat=True)
        await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def _subscribed(server: SnapshotServer) -> AsyncIterator[SnapshotSubscriber]:
    """A subscriber with a 2 s staleness bound (heartbeats asked every second) running against ``server``."""
    await server.start()
    subscriber = SnapshotSubscriber(
        f"127.0.0.1:{server.port}",
        tenants_pb2_grpc.TenantServiceStub,
        kinds=[KIND],
        on_snapshot=lambda _s: None,
        subscriber="test",
        staleness=2.0,
        initial_backoff=0.05,
    )
    task = asyncio.create_task(subscriber.run())
    try:
        yield subscriber
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await server.stop(0)


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)


async def test_a_silent_publisher_is_dropped_and_reconnected() -> None:
    server = SnapshotServer("127.0.0.1:0")
    publisher = _HungPublisher()
    tenants_pb2_grpc.add_TenantServiceServicer_to_server(publisher, server.server)  # type: ignore[no-untyped-call]
    async with _subscribed(server) as subscriber:
        # Silence for three heartbeat periods means gone: the stream is dropped and opened again.
        await _until(lambda: publisher.calls >= 2)
        assert publisher.calls >= 2, "the subscriber never gave up on the silent stream"
        assert subscriber.state.reconnects >= 1


async def test_heartbeats_over_a_real_stream_keep_the_subscriber_ready() -> None:
    hub = SnapshotHub("test")
    hub.publish(KIND, b'{"tenants": []}')
    server = SnapshotServer("127.0.0.1:0")
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    async with _subscribed(server) as subscriber:
        await _until(lambda: subscriber.state.heartbeats >= 2)
        assert subscriber.state.heartbeats >= 2
        assert subscriber.ready


def test_unavailable_says_which_snapshot_from_whom_and_for_how_long() -> None:
    """What a hook that reads the snapshot tells a requester, and ``/readyz`` an operator."""
    accepted: list[Snapshot] = []
    clock = Clock()
    subscriber = _subscriber(accepted, clock, staleness=4.0)
    assert subscriber.unavailable(KIND) == f"no {KIND} snapshot from 127.0.0.1:1 yet"
    assert REGISTRY.get_sample_value("enclave_snapshot_accepted", {"kind": KIND}) == 0.0
    subscriber.receive(_snapshot(1, b'{"tenants": []}'))
    subscriber.receive(_snapshot(1, heartbeat=True))
    assert subscriber.unavailable(KIND) == ""
    assert REGISTRY.get_sample_value("enclave_snapshot_accepted", {"kind": KIND}) == 1.0
    clock.now += 9
    assert subscriber.unavailable(KIND) == (
        f"the {KIND} snapshot is stale: 127.0.0.1:1 has not confirmed it for 9 s (--snapshot-staleness 4 s)"
    )
    assert REGISTRY.get_sample_value("enclave_snapshot_stale", {"kind": KIND}) == 1.0, "read at scrape time"

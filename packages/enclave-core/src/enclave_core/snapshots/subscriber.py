"""The subscribing side of a snapshot stream: reconnect with backoff, keep the last good snapshot.

A subscriber is what lets admission decide from memory: it holds the newest snapshot of every kind it wants,
reports ready only once each has been *accepted* (the consumer's callback returned), and keeps serving from
the last good state while the publisher restarts (a rolling update of a controller must not fail admission
calls).

Readiness does not lie:

- a snapshot counts only after ``on_snapshot`` accepted it; a rejected one is logged, counted
  (``enclave_snapshot_rejected_total``) and leaves the gate as it was (closed, if nothing was accepted yet);
- a dead publisher is noticed: gRPC keepalive pings find a dead connection (node gone, partition, a stopped
  process), and the subscriber asks for heartbeats on idle streams, so a stream that stays silent for three
  heartbeat periods is dropped and reconnected;
- with a staleness bound, a kind whose accepted state the publisher has not confirmed (a snapshot or a
  heartbeat of that revision) for longer than the bound closes the gate. Measured on this replica's monotonic
  clock from when the confirmation *arrived*, so clock skew between nodes cannot open or close it; the
  publisher's ``produced_at`` age is exported as ``enclave_snapshot_age_seconds`` for dashboards. The bound
  applies once a publisher has announced that it sends heartbeats (``enclave-heartbeat-seconds`` in the
  stream's initial metadata; one release behind, it would not), so a publisher that stops right after the
  first snapshot, before any heartbeat, is judged stale too.

Once per ``spec.cacheInvalidation`` (less a random part of it, :mod:`enclave_core.invalidation`) the stream
is closed and opened again, and the first whole snapshot of each kind on the new stream goes to the consumer
even when its revision is the one already held, every item parsed anew: whatever the consumer derived from
the old state (admission's compiled rules and indexes) is rebuilt from a fresh copy. Readiness does not
change meanwhile (the last good state stays in use until the fresh one is accepted).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from prometheus_client import Counter, Gauge

from enclave_core import invalidation
from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot, WatchRequest

log = logging.getLogger(__name__)

REJECTED = Counter(
    "enclave_snapshot_rejected_total", "Snapshots the consumer refused (the previous state stays in use)", ["kind"]
)
AGE = Gauge(
    "enclave_snapshot_age_seconds",
    "Seconds since the publisher produced or last confirmed (heartbeat) the snapshot in use, by its produced_at",
    ["kind"],
)
STALE = Gauge(
    "enclave_snapshot_stale",
    "1 while the kind's snapshot is past the staleness bound (what that costs depends on the kind: see readiness)",
    ["kind"],
)
ACCEPTED = Gauge("enclave_snapshot_accepted", "1 once a snapshot of the kind has been accepted", ["kind"])
RECONNECTS = Counter("enclave_snapshot_reconnects_total", "Snapshot streams lost and reconnected", ["target"])

CHANNEL_OPTIONS: list[tuple[str, str | int]] = [
    # Ping the publisher every 10 s without traffic; no answer within 5 s drops the connection. This is what
    # notices a publisher whose node vanished or whose process is stopped, where TCP alone would wait minutes.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


@dataclass
class SubscriberState:
    """What has arrived so far, for readiness and diagnostics."""

    latest: dict[str, Snapshot] = field(default_factory=dict)
    """The last *accepted* snapshot of each kind."""
    confirmed_at: dict[str, float] = field(default_factory=dict)
    """Monotonic time at which the publisher last confirmed each accepted kind (snapshot or heartbeat)."""
    produced_at: dict[str, float] = field(default_factory=dict)
    """The publisher's produced_at (Unix seconds) of that confirmation."""
    connected: bool = False
    reconnects: int = 0
    heartbeats: int = 0
    heartbeats_announced: bool = False
    """A publisher said it sends heartbeats (sticky: the staleness bound applies from then on)."""
    rejected: int = 0


@dataclass(frozen=True)
class ItemsConsumer:
    """How a subscriber takes an itemized kind (see ``hub``): ``parse`` turns one item's JSON into its model
    (only changed items are parsed; many at once, off the event loop), ``accept`` takes the whole current
    state, key -> parsed item, with the revision's envelope (kind, revision, incarnation; no payload), and
    may raise to reject it."""

    parse: Callable[[bytes], Any]
    accept: Callable[[Mapping[str, Any], Snapshot], None]


@dataclass
class _Partial:
    """An itemized revision arriving over several messages."""

    revision: int
    incarnation: str
    delta: bool
    upserts: dict[str, bytes] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)


HEARTBEAT_METADATA = "enclave-heartbeat-seconds"
"""Initial-metadata key by which a publisher announces the heartbeat period it will keep."""

PARSE_OFF_LOOP = 256
"""Parse this many changed items or more in a worker thread: a whole tenancy must not stall admission's loop."""


class SnapshotSubscriber:
    """Watches one snapshot service and hands every new snapshot to ``on_snapshot`` (or, for itemized kinds
    with ``items``, the whole current state to ``items.accept``, parsing only what changed)."""

    def __init__(
        self,
        target: str,
        stub_factory: Callable[[grpc.aio.Channel], Any],
        *,
        kinds: list[str],
        on_snapshot: Callable[[Snapshot], None],
        subscriber: str,
        ca_file: str = "",
        server_name: str = "",
        client_cert_file: str = "",
        client_key_file: str = "",
        initial_backoff: float = 0.2,
        max_backoff: float = 5.0,
        staleness: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        items: ItemsConsumer | None = None,
    ) -> None:
        self.target = target
        self.stub_factory = stub_factory
        self.kinds = kinds
        self.on_snapshot = on_snapshot
        self.subscriber = subscriber
        self.ca_file = ca_file
        self.server_name = server_name
        self.client_cert_file = client_cert_file
        self.client_key_file = client_key_file
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.staleness = staleness
        """Seconds a kind may go unconfirmed before the gate closes; 0: no bound."""
        self.heartbeat = max(1, round(staleness / 4)) if staleness > 0 else 0
        """Heartbeat period asked of the publisher: four chances to confirm within the bound."""
        self.clock = clock
        self.items = items
        self.state = SubscriberState()
        self._stream_raw: dict[str, dict[str, bytes]] = {}
        """Per itemized kind: the state the publisher believes this stream holds (the base of its deltas)."""
        self._partial: dict[str, _Partial] = {}
        self._accepted_raw: dict[str, dict[str, bytes]] = {}
        self._accepted_parsed: dict[str, dict[str, Any]] = {}
        self._deadline = invalidation.Deadline()
        self._refresh: set[str] = set()
        """Kinds whose next whole snapshot goes to the consumer even at the revision it holds, parsed anew (the
        cache was invalidated)."""
        for kind in kinds:
            AGE.labels(kind).set_function(functools.partial(self.age, kind))
            STALE.labels(kind).set_function(functools.partial(self._stale_value, kind))
            ACCEPTED.labels(kind).set_function(functools.partial(self._accepted_value, kind))

    def _stale_value(self, kind: str) -> float:
        return 1.0 if self.stale(kind) else 0.0

    def _accepted_value(self, kind: str) -> float:
        return 1.0 if kind in self.state.latest else 0.0

    def age(self, kind: str) -> float:
        """Seconds since the publisher's produced_at of its last confirmation of ``kind`` (0 before any)."""
        produced = self.state.produced_at.get(kind)
        return max(0.0, time.time() - produced) if produced is not None else 0.0

    def stale(self, kind: str) -> bool:
        """Past the staleness bound (only once a publisher announced heartbeats)."""
        confirmed = self.state.confirmed_at.get(kind)
        if not self.staleness or not self.state.heartbeats_announced or confirmed is None:
            return False
        return self.clock() - confirmed > self.staleness

    @property
    def ready(self) -> bool:
        """Every wanted kind has been accepted at least once and none is past the staleness bound; while the
        publisher is away the last good state still serves until the bound."""
        return all(kind in self.state.latest and not self.stale(kind) for kind in self.kinds)

    def unavailable(self, kind: str) -> str:
        """Why decisions cannot rely on ``kind`` now (never accepted, or past the staleness bound); empty when
        they can. Said to an operator in ``/readyz`` and to a requester in a hook's refusal, so it names the
        snapshot, its publisher and the bound."""
        if kind not in self.state.latest:
            return f"no {kind} snapshot from {self.target} yet"
        if self.stale(kind):
            silent = self.clock() - self.state.confirmed_at[kind]
            return (
                f"the {kind} snapshot is stale: {self.target} has not confirmed it for {silent:.0f} s "
                f"(--snapshot-staleness {self.staleness:g} s)"
            )
        return ""

    def _channel(self) -> grpc.aio.Channel:
        if not self.ca_file:
            return grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)
        # Read on every connection: a renewed CA or client certificate is used from the next reconnect on.
        with open(self.ca_file, "rb") as handle:
            ca = handle.read()
        cert = key = None
        if self.client_cert_file:
            with open(self.client_cert_file, "rb") as cert_handle, open(self.client_key_file, "rb") as key_handle:
                cert, key = cert_handle.read(), key_handle.read()
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        options: list[tuple[str, str | int]] = [*CHANNEL_OPTIONS]
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.aio.secure_channel(self.target, credentials, options=options)

    async def run(self) -> None:
        """Until cancelled: connect, stream, and on any failure back off and reconnect."""
        backoff = self.initial_backoff
        while True:
            due: asyncio.Timeout | None = None
            try:
                self._stream_raw.clear()
                self._partial.clear()
                async with self._channel() as channel:
                    request = WatchRequest(
                        subscriber=self.subscriber,
                        kinds=self.kinds,
                        heartbeat_seconds=self.heartbeat,
                        itemized=self.items is not None,
                    )
                    stream = self.stub_factory(channel).Watch(request)
                    if self.heartbeat:
                        metadata = await stream.initial_metadata()
                        if any(key == HEARTBEAT_METADATA for key, _ in metadata or ()):
                            self.state.heartbeats_announced = True
                    self._deadline.restart()
                    async with invalidation.expiring(self._deadline) as due:
                        while True:
                            snapshot = await self._next(stream)
                            if snapshot is None:
                                break
                            if not self.state.connected:
                                self.state.connected = True
                                log.info("snapshot stream connected", extra={"target": self.target})
                            backoff = self.initial_backoff
                            if self.items is not None and not snapshot.heartbeat and not snapshot.payload:
                                await self.receive_items(snapshot)
                            else:
                                self.receive(snapshot)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                if due is not None and due.expired():
                    # spec.cacheInvalidation ran out: a new stream at once, its snapshots taken whole.
                    self.invalidate()
                    continue
                log.warning(
                    "snapshot stream silent past three heartbeats; reconnecting",
                    extra={"target": self.target, "heartbeat": self.heartbeat},
                )
            except FileNotFoundError as err:
                # A certificate the kubelet has not mounted yet (enclave-config issues it after this pod starts).
                log.warning(
                    "snapshot stream waits for its certificates", extra={"target": self.target, "missing": err.filename}
                )
            except grpc.aio.AioRpcError as err:
                log.warning(
                    "snapshot stream down; keeping last good state",
                    extra={
                        "target": self.target,
                        "code": err.code().name,
                        # the transport's reason: refused, TLS handshake, name mismatch... (an operator's first question)
                        "details": err.details(),
                        "retry_in": round(backoff, 2),
                    },
                )
            except Exception:
                log.exception("snapshot stream failed", extra={"target": self.target})
            self.state.connected = False
            self.state.reconnects += 1
            RECONNECTS.labels(self.target).inc()
            await asyncio.sleep(backoff * (0.5 + random.random()))  # jitter spreads a fleet's reconnects
            backoff = min(self.max_backoff, backoff * 2)

    def invalidate(self) -> None:
        """Take the next whole snapshot of every kind as new (see the module docstring); counted per kind."""
        for kind in self.kinds:
            invalidation.invalidated(f"snapshot:{kind}")
        self._refresh.update(self.kinds)

    async def _next(self, stream: Any) -> Snapshot | None:
        """The next message; None at the end of the stream. Once the publisher has shown it sends heartbeats,
        silence for three periods means it is gone (its process hung, or the path to it): TimeoutError."""
        read = stream.read()
        if self.heartbeat and self.state.heartbeats_announced:
            try:
                async with asyncio.timeout(3 * self.heartbeat):  # not wait_for: it can drop a cancel (see hub)
                    message = await read
            except TimeoutError:
                stream.cancel()
                raise
        else:
            message = await read
        if message is grpc.aio.EOF:
            return None
        assert isinstance(message, Snapshot)
        return message

    def receive(self, snapshot: Snapshot) -> None:
        """Handle one message of the stream: a heartbeat confirms, a new snapshot goes to the consumer."""
        previous = self.state.latest.get(snapshot.kind)
        same = previous is not None and previous.incarnation == snapshot.incarnation
        if snapshot.heartbeat:
            self.state.heartbeats += 1
            self.state.heartbeats_announced = True  # a heartbeat is proof enough
            # Only a heartbeat for the revision in use confirms it: after a rejected snapshot the publisher
            # vouches for a revision this replica does not have, and staleness must keep growing.
            if same and previous is not None and previous.revision == snapshot.revision:
                self._confirm(snapshot)
            return
        refresh = snapshot.kind in self._refresh
        if same and previous is not None and previous.revision >= snapshot.revision:
            if previous.revision == snapshot.revision and not refresh:
                self._confirm(snapshot)  # re-sent after a reconnect: still current
                return
            if previous.revision > snapshot.revision:
                return
        self._refresh.discard(snapshot.kind)
        try:
            self.on_snapshot(snapshot)
        except Exception:  # a bad payload must not kill the stream; the previous state stays in use
            self.state.rejected += 1
            REJECTED.labels(snapshot.kind).inc()
            log.exception(
                "rejected snapshot; keeping the previous state",
                extra={"kind": snapshot.kind, "revision": snapshot.revision, "incarnation": snapshot.incarnation},
            )
            return
        self.state.latest[snapshot.kind] = snapshot
        self._confirm(snapshot)

    async def receive_items(self, message: Snapshot) -> None:
        """One message of an itemized kind: gather a revision's messages, apply it on the stream's state, and
        hand the consumer the whole state with only the changed items parsed."""
        assert self.items is not None
        kind = message.kind
        partial = self._partial.get(kind)
        if partial is None or (partial.revision, partial.incarnation) != (message.revision, message.incarnation):
            partial = self._partial[kind] = _Partial(message.revision, message.incarnation, message.delta)
        for item in message.items:
            partial.upserts[item.key] = item.value
        partial.removed.extend(message.removed)
        if message.more:
            return
        del self._partial[kind]
        base = self._stream_raw.get(kind)
        if partial.delta:
            if base is None:
                raise RuntimeError(f"{kind}: a delta arrived before the whole state; reconnecting")
            raw = dict(base)
            raw.update(partial.upserts)
            for key in partial.removed:
                raw.pop(key, None)
        else:
            raw = partial.upserts
        self._stream_raw[kind] = raw
        previous = self.state.latest.get(kind)
        refresh = not partial.delta and kind in self._refresh
        if (
            previous is not None
            and previous.incarnation == message.incarnation
            and previous.revision >= message.revision
            and not (refresh and previous.revision == message.revision)
        ):
            if previous.revision == message.revision:
                if kind in self._accepted_raw:
                    self._accepted_raw[kind] = raw  # the same revision re-sent: same content, now the delta base
                self._confirm(message)
            return
        self._refresh.discard(kind)
        accepted = {} if refresh else self._accepted_raw.get(kind, {})
        if partial.delta and base is accepted:
            # The usual case: the consumer holds what the delta applies to, so only the delta is compared.
            changed = [key for key, value in partial.upserts.items() if accepted.get(key) != value]
            removed = [key for key in partial.removed if key in accepted]
        else:
            changed = [key for key, value in raw.items() if accepted.get(key) != value]
            removed = [key for key in accepted if key not in raw]
        marker = Snapshot(
            kind=kind, revision=message.revision, incarnation=message.incarnation, produced_at=message.produced_at
        )
        try:
            parsed_changed = await self._parse(raw, changed)
            parsed = {} if refresh else dict(self._accepted_parsed.get(kind, {}))
            parsed.update(parsed_changed)
            for key in removed:
                parsed.pop(key, None)
            self.items.accept(parsed, marker)
        except Exception:  # a bad item must not kill the stream; the previous state stays in use
            self.state.rejected += 1
            REJECTED.labels(kind).inc()
            log.exception(
                "rejected snapshot; keeping the previous state",
                extra={"kind": kind, "revision": message.revision, "incarnation": message.incarnation},
            )
            return
        self._accepted_raw[kind] = raw
        self._accepted_parsed[kind] = parsed
        self.state.latest[kind] = marker
        self._confirm(message)

    async def _parse(self, raw: Mapping[str, bytes], keys: list[str]) -> dict[str, Any]:
        assert self.items is not None
        parse = self.items.parse

        def work() -> dict[str, Any]:
            return {key: parse(raw[key]) for key in keys}

        if len(keys) >= PARSE_OFF_LOOP:
            return await asyncio.to_thread(work)
        return work()

    def _confirm(self, snapshot: Snapshot) -> None:
        if snapshot.unconfirmed and snapshot.kind in self.state.confirmed_at:
            # The publisher cannot see the cluster: what it sends is its last state, not a fresh one. The
            # first state a replica gets counts (it is all there is); after that the bound runs on.
            return
        self.state.confirmed_at[snapshot.kind] = self.clock()
        if snapshot.HasField("produced_at"):
            self.state.produced_at[snapshot.kind] = snapshot.produced_at.ToNanoseconds() / 1e9

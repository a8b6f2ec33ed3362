"""Latest-value fan-out: a slow subscriber skips intermediate revisions instead of queueing them.

Admission only ever needs the newest state of a kind, so each subscriber holds at most one pending snapshot
per kind. Memory stays bounded by (subscribers x kinds) whatever the rate of change.

Two shapes of kind:

- **whole** (``publish``): the payload is one JSON document, re-sent whole on every change. Right for small
  state (the effective configuration).
- **itemized** (``publish_items``): the state is a map key -> JSON item (Tenancy: tenant name -> TenantView).
  A subscriber that asks for items (``WatchRequest.itemized``) gets the whole map once, split into messages
  of at most ``CHUNK_BYTES``, and then per change only the items that changed and the keys removed, computed
  against what *that* stream was last sent; skipping revisions still works, the delta simply spans them. A
  change to one tenant among 10,000 costs one item on the wire and one item to parse. Subscribers that do not
  ask get the whole state assembled as ``{"<envelope>": [items...]}``, as before, so a subscriber one release
  behind keeps working.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import Counter

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Item, Snapshot

CHUNK_BYTES = 1024 * 1024
"""Most item bytes per message: a quarter of gRPC's default 4 MiB limit, whatever the state's size."""

PUBLISHED = Counter(
    "enclave_snapshot_published_total",
    "Revisions published, by kind: a publisher whose inputs did not change publishes nothing",
    ["kind"],
)


class _Subscription:
    def __init__(self, kinds: frozenset[str]) -> None:
        self.kinds = kinds
        self.pending: dict[str, Snapshot] = {}
        self.wakeup = asyncio.Event()
        self.reconfirm = False
        """Send a heartbeat of every kind now: the publisher vouches for its state again."""

    def offer(self, snapshot: Snapshot) -> None:
        if not self.kinds or snapshot.kind in self.kinds:
            self.pending[snapshot.kind] = snapshot
            self.wakeup.set()


@dataclass
class _Itemized:
    """The current state of an itemized kind. ``items`` is replaced, never mutated, so a stream may keep a
    reference to what it sent; unchanged values keep their object identity across revisions, so telling what
    changed is a pointer comparison."""

    items: dict[str, bytes]
    envelope: str
    revision: int
    whole: bytes | None = field(default=None, repr=False)

    def assembled(self) -> bytes:
        """The whole-payload form for subscribers that do not take items (built once per revision)."""
        if self.whole is None:
            body = b",".join(self.items[key] for key in sorted(self.items))
            self.whole = b'{"' + self.envelope.encode() + b'":[' + body + b"]}"
        return self.whole


def _stamp() -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


class SnapshotHub:
    """Holds the newest snapshot of each kind and streams changes to subscribers."""

    def __init__(self, publisher: str, *, confirming: Callable[[], bool] = lambda: True) -> None:
        self.incarnation = f"{publisher}/{os.getpid()}/{time.time_ns()}"
        self.confirming = confirming
        """Whether the publisher can vouch that its state is current (its watches work); while it cannot,
        every message goes out ``unconfirmed`` (``grpc.serve_snapshots`` sets the process's informers)."""
        self._revision = 0
        self._latest: dict[str, Snapshot] = {}
        self._itemized: dict[str, _Itemized] = {}
        self._subscriptions: set[_Subscription] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    def reconfirm(self) -> None:
        """The publisher vouches for its state again (its watches work after a relist): every stream with
        heartbeats sends one per kind now, confirmed, instead of at its next idle timeout. Without this a
        subscriber whose staleness bound ran out while the publisher was blind would stay not-ready for up to a
        heartbeat (a quarter of the bound) after the apiserver came back, when nothing changed in the relist."""
        for subscription in self._subscriptions:
            subscription.reconfirm = True
            subscription.wakeup.set()

    def publishes(self, kind: str) -> bool:
        """Whether a snapshot of ``kind`` has been published (cheap: nothing is assembled)."""
        return kind in self._latest

    def latest(self, kind: str) -> Snapshot | None:
        """The newest snapshot of ``kind`` (for an itemized kind, with the whole payload assembled)."""
        snapshot = self._latest.get(kind)
        state = self._itemized.get(kind)
        if snapshot is not None and state is not None:
            whole = Snapshot()
            whole.CopyFrom(snapshot)
            whole.payload = state.assembled()
            return whole
        return snapshot

    def _advance(self, kind: str, payload: bytes = b"") -> Snapshot:
        self._revision += 1
        snapshot = Snapshot(
            kind=kind, revision=self._revision, incarnation=self.incarnation, payload=payload, produced_at=_stamp()
        )
        self._latest[kind] = snapshot
        PUBLISHED.labels(kind).inc()
        for subscription in self._subscriptions:
            subscription.offer(snapshot)
        return snapshot

    def publish(self, kind: str, payload: bytes, *, only_if_changed: bool = True) -> Snapshot | None:
        """Make ``payload`` the current ``kind``; return the snapshot, or None when nothing changed."""
        current = self._latest.get(kind)
        if only_if_changed and current is not None and current.payload == payload:
            return None
        self._itemized.pop(kind, None)
        return self._advance(kind, payload)

    def publish_items(
        self, kind: str, items: Mapping[str, bytes], *, envelope: str, only_if_changed: bool = True
    ) -> Snapshot | None:
        """Make ``items`` (key -> JSON document) the current state of the itemized ``kind``; return the
        snapshot, or None when nothing changed. ``envelope`` names the list field of the whole-payload form
        (``{"tenants": [...]}``) sent to subscribers that do not take items."""
        current = self._itemized.get(kind)
        old = current.items if current is not None else {}
        fresh: dict[str, bytes] = {}
        changed = len(old) != len(items)
        for key, value in items.items():
            before = old.get(key)
            if before is not None and (before is value or before == value):
                fresh[key] = before  # keep the identity: streams compare by pointer
            else:
                fresh[key] = value
                changed = True
        if only_if_changed and current is not None and not changed:
            return None
        state = _Itemized(fresh, envelope, revision=0)
        self._itemized[kind] = state
        snapshot = self._advance(kind)
        state.revision = snapshot.revision
        return snapshot

    async def stream(
        self, kinds: Iterable[str] = (), *, heartbeat: float = 0.0, itemized: bool = False
    ) -> AsyncIterator[Snapshot]:
        """Current snapshots first, then every change, until the consumer stops iterating.

        With ``heartbeat`` > 0, a stream idle that long gets a heartbeat per kind sent so far (same revision,
        no payload, a fresh ``produced_at``): the subscriber learns the publisher is alive and its state still
        current, which is what its staleness bound measures. With ``itemized``, itemized kinds come as items
        and deltas (see the module docstring); otherwise as whole payloads.
        """
        subscription = _Subscription(frozenset(kinds))
        for snapshot in sorted(self._latest.values(), key=lambda s: s.revision):
            subscription.offer(snapshot)
        self._subscriptions.add(subscription)
        sent: dict[str, Snapshot] = {}
        sent_items: dict[str, dict[str, bytes]] = {}
        try:
            while True:
                if heartbeat > 0:
                    try:
                        # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose event is set as the task
                        # is cancelled drops the cancellation, and the stream would outlive its server.
                        async with asyncio.timeout(heartbeat):
                            await subscription.wakeup.wait()
                    except TimeoutError:
                        unconfirmed = not self.confirming()
                        for kind, last in sorted(sent.items()):
                            yield _heartbeat(kind, last, unconfirmed)
                        continue
                else:
                    await subscription.wakeup.wait()
                subscription.wakeup.clear()
                batch = sorted(subscription.pending.values(), key=lambda s: s.revision)
                subscription.pending.clear()
                unconfirmed = not self.confirming()
                if subscription.reconfirm:
                    subscription.reconfirm = False
                    if heartbeat > 0:
                        fresh = {snapshot.kind for snapshot in batch}  # those go out whole below, marked alike
                        for kind, last in sorted(sent.items()):
                            if kind not in fresh:
                                yield _heartbeat(kind, last, unconfirmed)
                for snapshot in batch:
                    sent[snapshot.kind] = snapshot
                    state = self._itemized.get(snapshot.kind)
                    if state is None:
                        yield _marked(snapshot, unconfirmed)
                    elif not itemized:
                        whole = Snapshot()
                        whole.CopyFrom(snapshot)
                        whole.payload = state.assembled()
                        whole.unconfirmed = unconfirmed
                        yield whole
                    else:
                        for message in _item_messages(snapshot, state.items, sent_items.get(snapshot.kind)):
                            message.unconfirmed = unconfirmed
                            yield message
                        sent_items[snapshot.kind] = state.items
        finally:
            self._subscriptions.discard(subscription)


def _item_messages(snapshot: Snapshot, items: dict[str, bytes], before: dict[str, bytes] | None) -> Iterator[Snapshot]:
    """The whole state (``before`` None) or the delta from ``before``, in messages of at most CHUNK_BYTES."""
    if before is None:
        upserts = list(items.items())
        removed: list[str] = []
    else:
        upserts = [(key, value) for key, value in items.items() if before.get(key) is not value]
        removed = [key for key in before if key not in items]
    delta = before is not None
    chunks: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for key, value in upserts:
        if chunks[-1] and size + len(value) + len(key) > CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append((key, value))
        size += len(value) + len(key)
    for index, chunk in enumerate(chunks):
        last = index == len(chunks) - 1
        yield Snapshot(
            kind=snapshot.kind,
            revision=snapshot.revision,
            incarnation=snapshot.incarnation,
            produced_at=snapshot.produced_at,
            items=[Item(key=key, value=value) for key, value in chunk],
            removed=removed if last else [],
            delta=delta,
            more=not last,
        )


def _heartbeat(kind: str, last: Snapshot, unconfirmed: bool = False) -> Snapshot:
    return Snapshot(
        kind=kind,
        revision=last.revision,
        incarnation=last.incarnation,
        produced_at=_stamp(),
        heartbeat=True,
        unconfirmed=unconfirmed,
    )


def _marked(snapshot: Snapshot, unconfirmed: bool) -> Snapshot:
    """``snapshot`` itself (shared by every stream, never mutated), or a copy marked unconfirmed."""
    if not unconfirmed:
        return snapshot
    copy = Snapshot()
    copy.CopyFrom(snapshot)
    copy.unconfirmed = True
    return copy

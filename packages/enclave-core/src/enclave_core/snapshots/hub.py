"""Latest-value fan-out: a slow subscriber skips intermediate revisions instead of queueing them.

Admission only ever needs the newest state of a kind, so each subscriber holds at most one pending snapshot
per kind. Memory stays bounded by (subscribers x kinds) whatever the rate of change.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable

from google.protobuf.timestamp_pb2 import Timestamp

from enclave_core.proto.enclave.snapshot.v1.snapshot_pb2 import Snapshot


class _Subscription:
    def __init__(self, kinds: frozenset[str]) -> None:
        self.kinds = kinds
        self.pending: dict[str, Snapshot] = {}
        self.wakeup = asyncio.Event()

    def offer(self, snapshot: Snapshot) -> None:
        if not self.kinds or snapshot.kind in self.kinds:
            self.pending[snapshot.kind] = snapshot
            self.wakeup.set()


class SnapshotHub:
    """Holds the newest snapshot of each kind and streams changes to subscribers."""

    def __init__(self, publisher: str) -> None:
        self.incarnation = f"{publisher}/{os.getpid()}/{time.time_ns()}"
        self._revision = 0
        self._latest: dict[str, Snapshot] = {}
        self._subscriptions: set[_Subscription] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    def latest(self, kind: str) -> Snapshot | None:
        return self._latest.get(kind)

    def publish(self, kind: str, payload: bytes, *, only_if_changed: bool = True) -> Snapshot | None:
        """Make ``payload`` the current ``kind``; return the snapshot, or None when nothing changed."""
        current = self._latest.get(kind)
        if only_if_changed and current is not None and current.payload == payload:
            return None
        self._revision += 1
        stamp = Timestamp()
        stamp.GetCurrentTime()
        snapshot = Snapshot(
            kind=kind, revision=self._revision, incarnation=self.incarnation, payload=payload, produced_at=stamp
        )
        self._latest[kind] = snapshot
        for subscription in self._subscriptions:
            subscription.offer(snapshot)
        return snapshot

    async def stream(self, kinds: Iterable[str] = (), *, heartbeat: float = 0.0) -> AsyncIterator[Snapshot]:
        """Current snapshots first, then every change, until the consumer stops iterating.

        With ``heartbeat`` > 0, a stream idle that long gets a heartbeat per kind sent so far (same revision,
        no payload, a fresh ``produced_at``): the subscriber learns the publisher is alive and its state still
        current, which is what its staleness bound measures.
        """
        subscription = _Subscription(frozenset(kinds))
        for snapshot in sorted(self._latest.values(), key=lambda s: s.revision):
            subscription.offer(snapshot)
        self._subscriptions.add(subscription)
        sent: dict[str, Snapshot] = {}
        try:
            while True:
                if heartbeat > 0:
                    try:
                        await asyncio.wait_for(subscription.wakeup.wait(), timeout=heartbeat)
                    except TimeoutError:
                        for kind, last in sorted(sent.items()):
                            yield _heartbeat(kind, last)
                        continue
                else:
                    await subscription.wakeup.wait()
                subscription.wakeup.clear()
                batch = sorted(subscription.pending.values(), key=lambda s: s.revision)
                subscription.pending.clear()
                for snapshot in batch:
                    sent[snapshot.kind] = snapshot
                    yield snapshot
        finally:
            self._subscriptions.discard(subscription)


def _heartbeat(kind: str, last: Snapshot) -> Snapshot:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return Snapshot(kind=kind, revision=last.revision, incarnation=last.incarnation, produced_at=stamp, heartbeat=True)

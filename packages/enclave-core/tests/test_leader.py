"""The Lease on virtual time: never two writers, whatever the clocks, the apiserver's speed or the network do.

Two (or three) electors share one in-memory Lease store, each through its own view that can be slowed down or
cut off. A monitor samples every 50 ms of virtual time and records any instant at which two replicas would
both let a write through (``may_write``); every test asserts there is none.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from enclave_core.kube.connection import Connection
from enclave_core.kube.rest import JSON, FencedWriteError, Kube, KubeError
from enclave_core.runtime.leader import LeaderElector
from enclave_testing import virtualtime

NAMESPACE, NAME = "enclave-system", "enclave-test"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}"


class LeaseStore:
    """The apiserver's side: one Lease with resourceVersion checks, plus the namespace the elector looks for."""

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.version = 0
        self.writes: list[tuple[float, str]] = []
        """(virtual time, holder) of every successful Lease write."""

    def handle(self, method: str, path: str, body: Any) -> JSON:
        now = asyncio.get_running_loop().time()
        if path.startswith("/api/v1/namespaces"):
            return {"metadata": {"name": NAMESPACE}}
        if method == "GET":
            if self.lease is None:
                raise KubeError(404, "NotFound", "lease not found")
            return copy.deepcopy(self.lease)
        if method == "POST":
            if self.lease is not None:
                raise KubeError(409, "AlreadyExists", "lease exists")
        elif method == "PUT":
            if self.lease is None:
                raise KubeError(404, "NotFound", "lease not found")
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise KubeError(409, "Conflict", "the object has been modified")
        self.version += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.lease = stored
        self.writes.append((now, stored["spec"].get("holderIdentity", "")))
        return copy.deepcopy(stored)


class View(Kube):
    """One replica's connection to the store: ``latency`` per request, ``down`` raises, ``hang`` never answers."""

    def __init__(self, store: LeaseStore) -> None:
        super().__init__(api=Connection("http://unused"), field_manager="test")  # requests answered here
        self.store = store
        self.latency = 0.01
        self.down = False
        self.hang = False
        self.timeouts: list[float | None] = []
        self.methods: list[str] = []
        """The method of every Lease request this replica made."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = 30.0,
        accept: str = "application/json",
    ) -> JSON:
        self.timeouts.append(request_timeout)
        if path.startswith(LEASE_PATH.rsplit("/", 1)[0]):
            self.methods.append(method)
        if self.hang:
            await asyncio.Event().wait()
        await asyncio.sleep(self.latency)
        if self.down:
            raise ConnectionError("network unreachable")
        return self.store.handle(method, path, body)


class Replica:
    def __init__(self, store: LeaseStore, identity: str, *, skew: timedelta = timedelta(0)) -> None:
        self.view = View(store)
        self.elector = LeaderElector(
            self.view,
            name=NAME,
            namespace=NAMESPACE,
            identity=identity,
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=2.0,
            wall=lambda: datetime.now(UTC) + skew,
        )
        self.identity = identity
        self.led: list[tuple[float, bool]] = []
        self.work_stopped: list[float] = []
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        async def work() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                self.work_stopped.append(asyncio.get_running_loop().time())

        def note(leading: bool) -> None:
            self.led.append((asyncio.get_running_loop().time(), leading))

        self.task = asyncio.create_task(self.elector.run(work, note))

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    def took_over_at(self) -> float | None:
        return next((at for at, leading in self.led if leading), None)


async def monitor(replicas: list[Replica], seconds: float, overlaps: list[float]) -> None:
    """Sample who may write; record any instant at which two may."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        if sum(replica.elector.may_write() for replica in replicas) > 1:
            overlaps.append(loop.time())
        await asyncio.sleep(0.05)


async def leader_and_standby(store: LeaseStore) -> tuple[Replica, Replica]:
    """Replica a started first (it takes the Lease), b a second later (it waits)."""
    a, b = Replica(store, "a"), Replica(store, "b")
    a.start()
    await asyncio.sleep(1)
    b.start()
    return a, b


def scenario(body: Callable[[LeaseStore], Any]) -> Any:
    return virtualtime.run(body(LeaseStore()))


def test_one_leader_and_a_standby_that_never_writes() -> None:
    async def body(store: LeaseStore) -> None:
        a, b = await leader_and_standby(store)
        overlaps: list[float] = []
        await monitor([a, b], 60, overlaps)
        assert overlaps == []
        assert a.elector.leading
        assert not b.elector.leading
        assert b.led == []
        assert {holder for _, holder in store.writes} == {"a"}
        await a.stop()
        await b.stop()

    scenario(body)


@pytest.mark.parametrize("skew", [timedelta(hours=1), timedelta(hours=-1)])
def test_clock_skew_between_nodes_changes_nothing(skew: timedelta) -> None:
    """The standby's wall clock is an hour off: comparing the holder's renewTime with it would make the
    standby take a live lease (clock ahead) or never take a dead one (clock behind)."""

    async def body(store: LeaseStore) -> None:
        a, b = Replica(store, "a"), Replica(store, "b", skew=skew)
        a.start()
        await asyncio.sleep(1)
        b.start()
        overlaps: list[float] = []
        await monitor([a, b], 40, overlaps)
        assert b.led == [], "the standby took a lease that was being renewed"
        # The leader's node is cut off: the standby takes over one lease duration after it last saw a change.
        a.view.down = True
        cut = asyncio.get_running_loop().time()
        await monitor([a, b], 30, overlaps)
        taken = b.took_over_at()
        assert taken is not None, "the standby never took over a dead lease"
        assert taken <= cut + 15.0 + 2.0 + 0.5
        assert overlaps == []
        await a.stop()
        await b.stop()

    scenario(body)


def test_a_slow_apiserver_bounds_each_attempt_and_stops_writes_at_the_deadline() -> None:
    """The leader's requests hang: each attempt gives up when the renew deadline comes, the work is cancelled
    and writes stop at the deadline, before the standby can judge the lease expired."""

    async def body(store: LeaseStore) -> None:
        a, b = await leader_and_standby(store)
        overlaps: list[float] = []
        await monitor([a, b], 10, overlaps)
        last_renewal = max(at for at, holder in store.writes if holder == "a")
        a.view.hang = True
        a.view.timeouts.clear()
        await monitor([a, b], 30, overlaps)
        assert overlaps == []
        # Every request the leader made while hanging was bounded by what was left of the renew deadline.
        assert a.view.timeouts
        assert all(t is not None and t <= 10.0 for t in a.view.timeouts)
        stopped = next(at for at, leading in a.led if not leading)
        assert stopped <= last_renewal + 10.0 + 0.06
        assert a.work_stopped
        assert a.work_stopped[0] <= last_renewal + 10.0 + 0.06
        taken = b.took_over_at()
        assert taken is not None
        assert taken > stopped
        await a.stop()
        await b.stop()

    scenario(body)


def test_a_partitioned_leader_stops_before_the_standby_starts() -> None:
    async def body(store: LeaseStore) -> None:
        a, b, c = Replica(store, "a"), Replica(store, "b"), Replica(store, "c")
        a.start()
        await asyncio.sleep(0.5)
        b.start()
        c.start()
        overlaps: list[float] = []
        await monitor([a, b, c], 10, overlaps)
        a.view.down = True
        await monitor([a, b, c], 40, overlaps)
        assert overlaps == []
        assert not a.elector.may_write()
        leaders = [r for r in (b, c) if r.elector.leading]
        assert len(leaders) == 1
        # The network heals: the old leader sees the new holder and stays a standby, writing nothing.
        writes_before = len([w for w in store.writes if w[1] == "a"])
        a.view.down = False
        await monitor([a, b, c], 20, overlaps)
        assert overlaps == []
        assert len([w for w in store.writes if w[1] == "a"]) == writes_before
        for replica in (a, b, c):
            await replica.stop()

    scenario(body)


def test_a_paused_leader_may_not_write_the_moment_it_resumes() -> None:
    """SIGSTOP past the lease, then SIGCONT: before any of its timers has run again, the fence is shut."""

    async def body(store: LeaseStore) -> None:
        a = Replica(store, "a")
        a.start()
        await asyncio.sleep(5)
        assert a.elector.may_write()
        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualTimeLoop)
        loop.advance(20.0)  # paused: no callback ran meanwhile
        assert not a.elector.may_write()
        await asyncio.sleep(0)
        assert not a.elector.may_write()
        await a.stop()

    scenario(body)


def test_a_lease_taken_by_another_writer_stops_the_work_at_once() -> None:
    async def body(store: LeaseStore) -> None:
        a = Replica(store, "a")
        a.start()
        await asyncio.sleep(5)
        assert store.lease is not None
        store.lease["spec"]["holderIdentity"] = "intruder"
        store.version += 1
        store.lease["metadata"]["resourceVersion"] = str(store.version)
        await asyncio.sleep(2.5)
        assert not a.elector.leading
        assert a.work_stopped
        await a.stop()

    scenario(body)


def test_graceful_stop_hands_over_within_a_retry_period() -> None:
    async def body(store: LeaseStore) -> None:
        a, b = await leader_and_standby(store)
        await asyncio.sleep(10)
        await a.stop()
        stopped = asyncio.get_running_loop().time()
        assert store.lease is not None
        assert store.lease["spec"]["holderIdentity"] == ""
        await asyncio.sleep(3)
        taken = b.took_over_at()
        assert taken is not None
        assert taken <= stopped + 2.0 + 0.1
        await b.stop()

    scenario(body)


def test_the_leader_renews_with_one_write_per_retry_period() -> None:
    """client-go's fast path: a steady leader PUTs over its own last write and never reads the Lease; the
    standby only reads."""

    async def body(store: LeaseStore) -> None:
        a, b = await leader_and_standby(store)
        await asyncio.sleep(1)
        a.view.methods.clear()
        b.view.methods.clear()
        await asyncio.sleep(20)
        assert a.view.methods == ["PUT"] * 10
        assert set(b.view.methods) == {"GET"}
        assert 9 <= len(b.view.methods) <= 11
        await a.stop()
        await b.stop()

    scenario(body)


def test_a_renewal_that_meets_a_conflict_reads_the_lease_and_renews_from_it() -> None:
    """Someone wrote the Lease without taking it (an annotation, say): the fast PUT meets a 409, the attempt
    reads the Lease, finds itself the holder and renews from what it read, in the same retry period."""

    async def body(store: LeaseStore) -> None:
        a = Replica(store, "a")
        a.start()
        await asyncio.sleep(3)
        assert store.lease is not None
        store.version += 1
        store.lease["metadata"]["resourceVersion"] = str(store.version)
        store.lease["metadata"]["annotations"] = {"touched": "yes"}
        a.view.methods.clear()
        await asyncio.sleep(2)
        assert a.view.methods == ["PUT", "GET", "PUT"]
        assert a.elector.leading
        assert store.lease["metadata"]["annotations"] == {"touched": "yes"}
        assert store.writes[-1][1] == "a"
        await a.stop()

    scenario(body)


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElector(View(LeaseStore()), name=NAME, namespace=NAMESPACE, identity="a", renew_deadline=20.0)


class _RecordingApi:
    """Just enough of a :class:`~enclave_core.kube.connection.Connection` for ``Kube.request``."""

    host = "https://apiserver"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def headers(self) -> dict[str, str]:
        return {}

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        self.calls.append(method)

        class Response:
            status = 200

            async def read(self) -> bytes:
                return b"{}"

            def release(self) -> None:
                return None

        return Response()


def test_a_fenced_client_refuses_writes_and_still_reads() -> None:
    async def body() -> None:
        api = _RecordingApi()
        allowed = [True]
        kube = Kube(cast(Connection, api), field_manager="test", fence=lambda: allowed[0])
        await kube.merge_patch("/api/v1/namespaces/x", {})
        allowed[0] = False
        for write in (
            kube.merge_patch("/api/v1/namespaces/x", {}),
            kube.apply("/api/v1/namespaces/x", {}),
            kube.create("/api/v1/namespaces", {}),
            kube.delete("/api/v1/namespaces/x"),
        ):
            with pytest.raises(FencedWriteError):
                await write
        await kube.get("/api/v1/namespaces/x")
        # Questions asked by POST store nothing and are not fenced; nor are dry runs.
        await kube.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {})
        await kube.request("POST", "/api/v1/namespaces", body={}, query={"dryRun": "All"})
        assert api.calls == ["PATCH", "GET", "POST", "POST"]

    virtualtime.run(body())

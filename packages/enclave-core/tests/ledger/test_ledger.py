"""The ledger protocol without a cluster: the arithmetic of each step, and the client's conflict handling
against an in-memory apiserver that enforces resourceVersion the way kube-apiserver does."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from enclave_core.api.ledger import QuantityLedgerStatus, Reservation, TargetRef
from enclave_core.api.meta import ObjectRef
from enclave_core.kube.rest import JSON, KubeError
from enclave_core.ledger import (
    Hold,
    LedgerBusyError,
    LedgerClient,
    LedgerMissingError,
    Refusal,
    add_pending_delete,
    fold,
    ledger_name,
    new_ledger,
    reserve,
    rollback,
    totals,
)
from enclave_core.quantity import Quantity

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REF = ObjectRef(api_version="v1", kind="ConfigMap", namespace="team", name="a")


def q(value: int | str) -> Quantity:
    return Quantity.parse(value)


def initialised(allocated: int | str = 0) -> QuantityLedgerStatus:
    return QuantityLedgerStatus(allocated=str(allocated), reserved="0")


def test_ledger_names_are_unambiguous_and_bounded() -> None:
    assert ledger_name(TargetRef(kind="CustomQuota", name="cm", namespace="team")) == "customquota.team.cm"
    assert ledger_name(TargetRef(kind="GlobalCustomQuota", name="cm")) == "globalcustomquota.cm"
    long = ledger_name(TargetRef(kind="CustomQuota", name="x" * 253, namespace="team"))
    assert len(long) <= 253
    assert long != ledger_name(TargetRef(kind="CustomQuota", name="x" * 252 + "y", namespace="team"))


def test_reserve_takes_up_to_the_limit_and_not_beyond() -> None:
    status = initialised(8)
    first = reserve(status, Hold("r1", REF, q(2)), q(10), now=NOW)
    assert isinstance(first, QuantityLedgerStatus)
    assert first.allocated == "10"
    assert first.reserved == "2"
    assert first.reservations
    assert first.reservations[0].expires_at == NOW + timedelta(seconds=60)
    refused = reserve(first, Hold("r2", REF, q(1)), q(10), now=NOW)
    assert refused == Refusal(q(1), q(8), q(2), q(10))
    assert "requested 1, used 8, reserved 2, limit 10" in refused.describe("team/cm")


def test_reserve_is_idempotent_per_request() -> None:
    status = reserve(initialised(0), Hold("r1", REF, q(1)), q(1), now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    assert reserve(status, Hold("r1", REF, q(1)), q(1), now=NOW) is None


def test_an_update_holds_only_its_delta() -> None:
    status = reserve(initialised(5), Hold("u1", REF, q("3Gi"), delta=q("1Gi")), q("10Gi"), now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    assert totals(status) is not None
    assert q(status.allocated or 0) == q(5) + q("1Gi")
    assert q(status.reserved or 0) == q("1Gi")


def test_an_uninitialised_ledger_refuses() -> None:
    refused = reserve(QuantityLedgerStatus(), Hold("r1", REF, q(1)), q(10), now=NOW)
    assert isinstance(refused, Refusal)
    assert not refused.initialised
    assert "not initialised" in refused.describe("team/cm")


def test_rollback_releases_exactly_its_own_reservation() -> None:
    status = reserve(initialised(0), Hold("r1", REF, q(2)), q(10), now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    status = reserve(status, Hold("r2", REF, q(3)), q(10), now=NOW)
    assert isinstance(status, QuantityLedgerStatus)
    undone = rollback(status, "r1")
    assert undone is not None
    assert undone.allocated == "3"
    assert undone.reserved == "3"
    assert [r.id for r in undone.reservations or ()] == ["r2"]
    assert rollback(undone, "r1") is None


def test_pending_delete_hints_once_and_rolls_back() -> None:
    status = add_pending_delete(initialised(1), "d1", REF, now=NOW)
    assert status is not None
    assert status.pending_deletes
    assert status.pending_deletes[0].id == "d1"
    assert add_pending_delete(status, "d1", REF, now=NOW) is None
    undone = rollback(status, "d1")
    assert undone is not None
    assert not undone.pending_deletes


def test_fold_drops_settled_and_expired_and_recomputes() -> None:
    status = initialised(0)
    for rid, when in (("settled", NOW), ("live", NOW), ("expired", NOW - timedelta(minutes=5))):
        result = reserve(status, Hold(rid, REF, q(1)), q(10), now=when)
        assert isinstance(result, QuantityLedgerStatus)
        status = result
    status = add_pending_delete(status, "d1", REF, now=NOW) or status

    def settled(reservation: Reservation) -> bool:
        return reservation.id == "settled"

    folded = fold(status, q(4), settled=settled, gone=lambda hint: True, now=NOW)
    assert [r.id for r in folded.reservations or ()] == ["live"]
    assert folded.allocated == "5"
    assert folded.reserved == "1"
    assert folded.pending_deletes is None
    assert folded.conditions
    assert folded.conditions[0].reason == "Accounted"
    again = fold(folded, q(4), settled=settled, gone=lambda hint: True, now=NOW + timedelta(seconds=1))
    assert again == folded  # an unchanged world folds to an equal status: no write
    negative = fold(folded, q(-3), settled=settled, gone=lambda hint: True, now=NOW)
    assert negative.allocated == "1"  # usage never counts below zero


# -- the client against an in-memory apiserver ---------------------------------------------------------------


class FakeApi:
    """One ledger store with kube-apiserver's optimistic concurrency on PUT .../status."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.version = 0
        self.writes = 0
        self.interfere = 0
        """Writes by "another replica" to slip in before each of the next N writes."""

    def _bump(self, obj: JSON) -> JSON:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    async def get_or_none(self, path: str) -> JSON | None:
        await asyncio.sleep(0)
        obj = self.objects.get(path.rsplit("/", 1)[1])
        return copy.deepcopy(obj) if obj else None

    async def get(self, path: str) -> JSON:
        found = await self.get_or_none(path)
        if found is None:
            raise KubeError(404, "NotFound", path)
        return found

    async def create(self, path: str, body: JSON) -> JSON:
        name = body["metadata"]["name"]
        if name in self.objects:
            raise KubeError(409, "AlreadyExists", name)
        self.objects[name] = copy.deepcopy(body)
        return self._bump(self.objects[name])

    async def replace(self, path: str, body: JSON) -> JSON:
        await asyncio.sleep(0)
        name = path.split("/")[-2]
        stored = self.objects.get(name)
        if stored is None:
            raise KubeError(404, "NotFound", name)
        if self.interfere:
            self.interfere -= 1
            self._bump(stored)
        if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified")
        stored["status"] = copy.deepcopy(body["status"])
        self.writes += 1
        return self._bump(stored)


def client_for(api: FakeApi, **kwargs: Any) -> LedgerClient:
    return LedgerClient(api, "enclave-system", **kwargs)  # type: ignore[arg-type]


async def make_ledger(api: FakeApi, allocated: int = 0) -> str:
    ledger = new_ledger(TargetRef(kind="CustomQuota", name="cm", namespace="team"), "enclave-system")
    ledger.status = initialised(allocated)
    stored = await api.create("", ledger.to_k8s())
    return str(stored["metadata"]["name"])


async def test_client_retries_conflicts_and_never_exceeds_the_limit() -> None:
    api = FakeApi()
    name = await make_ledger(api)
    replicas = [client_for(api) for _ in range(3)]

    async def admit(index: int) -> bool:
        client = replicas[index % 3]
        hold = Hold(f"req-{index}", REF, q(1))
        result, _ = await client.update(name, lambda status: reserve(status, hold, q(10), now=NOW))
        return not isinstance(result, Refusal)

    admitted = await asyncio.gather(*(admit(i) for i in range(40)))
    assert sum(admitted) == 10
    stored = api.objects[name]["status"]
    assert stored["allocated"] == "10"
    assert len(stored["reservations"]) == 10
    assert sum(client.conflicts for client in replicas) > 0


async def test_client_gives_up_after_its_budget() -> None:
    api = FakeApi()
    name = await make_ledger(api)
    api.interfere = 100
    client = client_for(api, attempts=3, backoff=0.0)
    with pytest.raises(LedgerBusyError):
        await client.update(name, lambda status: reserve(status, Hold("r", REF, q(1)), q(10), now=NOW))
    assert api.writes == 0


async def test_client_writes_nothing_when_the_status_is_unchanged() -> None:
    api = FakeApi()
    name = await make_ledger(api)
    client = client_for(api)
    result, stored = await client.update(name, lambda status: rollback(status, "never-written"))
    assert result is None
    assert stored is None
    assert api.writes == 0


async def test_client_reports_a_missing_ledger() -> None:
    client = client_for(FakeApi())
    with pytest.raises(LedgerMissingError):
        await client.update("customquota.team.gone", lambda status: status)


async def test_concurrent_requests_on_one_replica_are_committed_in_groups() -> None:
    api = FakeApi()
    name = await make_ledger(api)
    client = client_for(api)

    async def admit(index: int) -> bool:
        hold = Hold(f"req-{index}", REF, q(1))
        result, _ = await client.update(name, lambda status: reserve(status, hold, q(15), now=NOW))
        return not isinstance(result, Refusal)

    admitted = await asyncio.gather(*(admit(i) for i in range(20)))
    assert sum(admitted) == 15
    assert api.objects[name]["status"]["allocated"] == "15"
    assert api.writes < 20  # the requests queued behind the first write went out together


def test_the_ledger_watch_feeds_the_client_before_the_controller_hears() -> None:
    """What the watch brings is the copy the next write starts from, and a deleted ledger is forgotten; the
    controller's own callback runs after, so it already reads the client's newest copy."""
    client = client_for(FakeApi())
    heard: list[tuple[str, int | None]] = []

    def on_change(key: str) -> None:
        cached = client.cached(key.rpartition("/")[2])
        heard.append((key, cached.metadata.generation if cached is not None else None))

    watched = client.informer("enclave-quotas", on_change)
    assert watched.label_selector == "app.kubernetes.io/managed-by=enclave-quotas"
    ledger = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "QuantityLedger",
        "metadata": {"name": "l1", "namespace": "enclave-system", "resourceVersion": "7", "generation": 3},
        "spec": {"targetRef": {"kind": "CustomQuota", "name": "q", "namespace": "team"}},
    }
    watched.apply_event("ADDED", ledger)
    watched.apply_event("DELETED", {"metadata": {"name": "l1", "namespace": "enclave-system"}})
    assert heard == [("enclave-system/l1", 3), ("enclave-system/l1", None)]
    assert client.informer().label_selector is None, "admission follows every ledger of the namespace"

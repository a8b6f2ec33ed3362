"""The one reservation path (:mod:`enclave_admission.reservation`): claims held in ledger-name order, the first
refusal taking back what was held before it, dry runs writing nothing; and the namespace quota confirmed by the
``/namespaces`` route itself, whichever way its decision came (at once, or after the Tenancy wait)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import orjson
from admission_helpers import make_state, namespace, request, review, tenant, user
from test_quotas import Store

from enclave_admission import reservation
from enclave_admission.namespaces import validation
from enclave_admission.quotas.validation import QuotaClaim
from enclave_admission.review import Decision
from enclave_admission.server import AdmissionServer
from enclave_core.api.meta import ObjectRef
from enclave_core.api.names import TENANT_LABEL
from enclave_core.kube.rest import JSON
from enclave_core.ledger import Hold, LedgerClient
from enclave_core.quantity import Quantity
from enclave_core.snapshots.quotas import QuotaEntry
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView

GRANTED = Decision.allow("QuotaReserved")
CAROL = user("carol", "enclave.dev")


class Recording(Store):
    """The in-memory ledgers, remembering which ledger each status write went to, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    async def replace(self, path: str, body: JSON) -> JSON:
        self.writes.append(path.split("/")[-2])
        return await super().replace(path, body)


def claim(ledger: str, limit: str, request_id: str = "req-1") -> QuotaClaim:
    quota = QuotaEntry(kind="CustomQuota", name=ledger, namespace="team", ledger=ledger, limit=limit, sources=[])
    ref = ObjectRef(api_version="v1", kind="ConfigMap", name="x", namespace="team")
    return QuotaClaim(
        quota, Quantity.parse(limit), Hold(request_id, ref, Quantity.from_units(1)), timedelta(seconds=60)
    )


def ledgers(store: Store, *names: str) -> LedgerClient:
    for name in names:
        store.add(name)
    return LedgerClient(store, "enclave-system")  # type: ignore[arg-type]


def reservations(store: Store, name: str) -> list[Any]:
    return list(store.status(name).get("reservations") or [])


async def test_claims_are_held_in_ledger_name_order_and_a_refusal_takes_back_those_before_it() -> None:
    store = Recording()
    client = ledgers(store, "a", "b", "c")
    denied = await reservation.reserve(client, [claim("c", "5"), claim("b", "0"), claim("a", "5")], GRANTED)
    assert denied.reason == "QuotaExceeded"
    assert "CustomQuota team/b" in denied.message
    assert store.writes == ["a", "a"]  # held, then taken back; b refused without a write, c never tried
    assert not reservations(store, "a")
    assert store.status("a")["allocated"] == "0"


async def test_every_claim_held_is_the_granted_decision() -> None:
    store = Recording()
    client = ledgers(store, "a", "b")
    assert await reservation.reserve(client, [claim("b", "5"), claim("a", "5")], GRANTED) == GRANTED
    assert store.writes == ["a", "b"]
    assert [r["id"] for r in reservations(store, "a")] == ["req-1"]
    # a retry of the same request finds its holds and is admitted again without a second one
    assert await reservation.reserve(client, [claim("a", "5"), claim("b", "5")], GRANTED) == GRANTED
    assert len(reservations(store, "b")) == 1


async def test_two_requests_wanting_the_same_two_ledgers_never_both_lose() -> None:
    """Each asks for the last unit of x and of y, naming them in opposite orders: both meet on x first, so one
    wins both. Written all at once, each could win one ledger and both be refused."""
    store = Recording()
    client = ledgers(store, "x", "y")
    first = reservation.reserve(client, [claim("x", "1", "r1"), claim("y", "1", "r1")], GRANTED)
    second = reservation.reserve(client, [claim("y", "1", "r2"), claim("x", "1", "r2")], GRANTED)
    outcomes = await asyncio.gather(first, second)
    assert sorted(outcome.allowed for outcome in outcomes) == [False, True]
    winner = "r1" if outcomes[0].allowed else "r2"
    assert [r["id"] for r in reservations(store, "x")] == [winner]
    assert [r["id"] for r in reservations(store, "y")] == [winner]


async def test_a_dry_run_checks_in_the_same_order_and_writes_nothing() -> None:
    store = Recording()
    client = ledgers(store, "a", "b")
    denied = await reservation.check(client, [claim("b", "0"), claim("a", "5")], GRANTED)
    assert denied.reason == "QuotaExceeded"
    assert "team/b" in denied.message
    assert await reservation.check(client, [claim("a", "5")], GRANTED) == GRANTED
    assert store.writes == []


async def test_without_a_ledger_client_a_quota_claim_is_refused_not_admitted() -> None:
    denied = await reservation.reserve(None, [claim("a", "5")], GRANTED)
    assert denied.reason == "QuotaNotReady"
    assert "no ledger client" in denied.message


# -- the namespace quota, confirmed by the /namespaces route ------------------------------------------------


def moon(**fields: Any) -> TenantView:
    return tenant("moon", "carol", namespace_quota=2, namespace_ledger="tenant.moon", **fields)


def moon_namespace(name: str) -> JSON:
    owner: JSON = {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "moon", "uid": "uid-moon"}
    owner |= {"controller": True, "blockOwnerDeletion": True}
    return namespace(name, {TENANT_LABEL: "moon"}, ownerReferences=[owner])


async def test_a_namespace_admitted_after_the_tenancy_wait_is_held_on_its_tenants_ledger() -> None:
    """A request that waited for the Tenancy snapshot (its requester was just made an owner) is confirmed on the
    tenant's ledger like any other: the ledger is where replicas meet, and an admission that skipped it would
    let N replicas admit past the quota together."""
    store = Store()
    state = make_state([])
    state.ledgers = ledgers(store, "tenant.moon")
    server = AdmissionServer(state)
    answer = server.answer("POST", "/namespaces", orjson.dumps(review(CAROL, "CREATE", moon_namespace("moon-dev"))))
    assert not isinstance(answer, tuple)  # waits for the tenant
    pending = asyncio.ensure_future(answer)
    await asyncio.sleep(0.01)
    state.set_tenancy(TenancySnapshot(tenants=[moon()]))
    status, body = await asyncio.wait_for(pending, 2)
    assert status == 200
    assert orjson.loads(body)["response"]["allowed"] is True
    assert [r["objectRef"]["name"] for r in reservations(store, "tenant.moon")] == ["moon-dev"]
    assert state.reservations.pending(state.tenancy.by_name["moon"]) == {"moon-dev"}


async def test_a_full_namespace_ledger_refuses_and_counts_nothing_on_this_replica() -> None:
    store = Store()
    state = make_state([moon()])
    store.add("tenant.moon", allocated="2")
    state.ledgers = LedgerClient(store, "enclave-system")  # type: ignore[arg-type]
    decided = validation.answer(request(CAROL, "CREATE", moon_namespace("moon-dev")), state)
    assert not isinstance(decided, Decision)  # the ledger is asked
    denied = await decided
    assert denied.reason == "NamespaceQuotaExceeded"
    assert "is full (2 namespaces and 0 being created, of 2)" in denied.message
    assert not state.reservations.pending(state.tenancy.by_name["moon"])


async def test_a_dry_run_namespace_creation_holds_and_counts_nothing() -> None:
    store = Recording()
    state = make_state([moon()])
    state.ledgers = ledgers(store, "tenant.moon")
    decided = validation.answer(request(CAROL, "CREATE", moon_namespace("moon-dev"), dry_run=True), state)
    assert isinstance(decided, Decision)
    assert decided.allowed
    assert store.writes == []
    assert not state.reservations.pending(state.tenancy.by_name["moon"])


def test_without_a_ledger_the_namespace_counts_on_this_replica_at_once() -> None:
    state = make_state([tenant("moon", "carol", namespace_quota=2)])
    decided = validation.answer(request(CAROL, "CREATE", moon_namespace("moon-dev")), state)
    assert isinstance(decided, Decision)
    assert decided.allowed
    assert state.reservations.pending(state.tenancy.by_name["moon"]) == {"moon-dev"}

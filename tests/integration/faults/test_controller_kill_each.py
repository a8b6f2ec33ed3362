"""Faults: the Lease holder of enclave-quotas, enclave-globalquotas, enclave-pools and enclave-replication
SIGKILLed in the middle of a reconcile (no graceful release), one parametrized case each.

Every case has the same shape. Two replicas of the controller run with a fast Lease in a home namespace of
their own. Phase one makes a change and waits for its first visible effect (the leader is writing), then the
leader is SIGKILLed. Phase two makes more changes at once, while no replica leads: the dead leader cannot
see them and the standby does not hold the Lease yet (a fresh standby waits one lease duration from the last
Lease change it saw). The standby must take the Lease within lease duration + retry period (+3 s of slack
for a loaded host), then converge from observed state, and what the controller writes must end exactly
right: every object counted once (quota claims and ledger), every ResourceQuota at its computed ``hard``,
exactly the claims that fit bound and recorded once in the pool's ledger, every replicated object present
once in every selected namespace, and each status describing its current generation.

The takeover time (kill to the successor seen holding the Lease) is printed (``-s``); docs/benchmarks.md
("Lease takeover") quotes it.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.quotas import wait_for_quota_monitors
from enclave_testing.waiting import poll

SPECS = {spec.name: spec for spec in COMPONENTS}
GROUP, VERSION = "enclave.dev", "v1beta2"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0
FAST_LEASE = [
    f"--lease-duration={LEASE_DURATION:g}",
    f"--renew-deadline={RENEW_DEADLINE:g}",
    f"--retry-period={RETRY_PERIOD:g}",
]
TAKEOVER_BOUND = LEASE_DURATION + RETRY_PERIOD + 3


@dataclass
class Pair:
    """Two replicas of one controller (active and standby) and what a case created, removed afterwards."""

    component: str
    home: str
    token: str
    kube: Any
    replicas: dict[str, RunningComponent]
    cleanups: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.kube)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def holder(self) -> str:
        lease = client.CoordinationV1Api(self.kube).read_namespaced_lease(f"enclave-{self.component}", self.home)
        return str(lease.spec.holder_identity or "")

    def leader(self) -> str:
        found: str = poll(lambda: self.holder() in self.replicas and self.holder(), what="a lease holder")
        return found

    def kill(self, leader: str) -> float:
        """SIGKILL ``leader`` (no release); return the monotonic time of the kill."""
        popen = self.replicas[leader].process.popen
        assert popen is not None
        popen.send_signal(signal.SIGKILL)
        return time.monotonic()

    def takeover(self, leader: str, killed: float) -> str:
        """The standby holding the Lease within its bound; prints how long the takeover took."""
        successor: str = poll(
            lambda: (holder := self.holder()) != leader and holder in self.replicas and holder,
            timeout=TAKEOVER_BOUND,
            interval=0.1,
            what=f"the standby holding enclave-{self.component} within {TAKEOVER_BOUND:g}s",
        )
        print(f"\n{self.component}: lease taken over {time.monotonic() - killed:.1f}s after the SIGKILL")
        return successor

    def delete_cluster(self, plural: str, name: str) -> None:
        """Delete a cluster-scoped object and wait until it is gone (its finalizer is the controller's)."""
        self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)

        def gone() -> bool:
            try:
                self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as err:
                return bool(err.status == 404)
            return False

        poll(gone, timeout=30, what=f"{plural}/{name} gone")

    def namespace(self, name: str, labels: dict[str, str]) -> str:
        self.core.create_namespace({"metadata": {"name": name, "labels": labels}})
        self.cleanups.append(lambda: self.core.delete_namespace(name))
        return name


def _ready(obj: dict[str, Any]) -> bool:
    generation = obj["metadata"].get("generation")
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c["type"] == "Ready" and c["status"] == "True" and c.get("observedGeneration") in (None, generation)
        for c in conditions
    ) and (obj.get("status") or {}).get("observedGeneration") in (None, generation)


def _create(call: Callable[[], Any]) -> None:
    """Create through kube-apiserver, retrying what a client retries (a ResourceQuota whose status is not
    computed yet, a 409 on quota status); an object that already exists was created by an earlier try."""

    def attempt() -> bool:
        try:
            call()
        except ApiException as err:
            if err.status == 409 and "AlreadyExists" in (err.body or ""):
                return True
            raise
        return True

    poll(attempt, timeout=30, what="create admitted")


# --- enclave-quotas: a CustomQuota's claims, usage and ledger --------------------------------------------------


def quotas_case(pair: Pair) -> None:
    namespace = pair.namespace(f"fq-{pair.token}", {})
    labels = {"kill": pair.token}
    name = "counted"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CustomQuota",
        "metadata": {"name": name},
        "spec": {
            "limit": 1000,
            "sources": [{"kind": "ConfigMap", "op": "count", "selectors": [{"matchLabels": labels}]}],
        },
    }
    pair.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "customquotas", body)
    ledger = f"customquota.{namespace}.{name}"

    def ledger_status() -> dict[str, Any]:
        found = pair.custom.get_namespaced_custom_object(GROUP, VERSION, pair.home, "quantityledgers", ledger)
        return dict(found.get("status") or {})

    def quota() -> dict[str, Any]:
        return dict(pair.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "customquotas", name))

    def counted() -> set[str]:
        return {c["name"] for c in (quota().get("status") or {}).get("claims") or []}

    poll(lambda: ledger_status().get("allocated") == "0", what="the quota's ledger initialised")
    leader = pair.leader()
    for index in range(15):  # phase one
        pair.core.create_namespaced_config_map(namespace, {"metadata": {"name": f"a{index:02d}", "labels": labels}})
    poll(lambda: counted(), interval=0.05, what="the leader counting")
    killed = pair.kill(leader)
    for index in range(10):  # phase two: nobody leads
        pair.core.create_namespaced_config_map(namespace, {"metadata": {"name": f"b{index:02d}", "labels": labels}})
    for index in range(3):
        pair.core.delete_namespaced_config_map(f"a{index:02d}", namespace)
    pair.takeover(leader, killed)

    expected = {f"a{i:02d}" for i in range(3, 15)} | {f"b{i:02d}" for i in range(10)}
    poll(lambda: counted() == expected, timeout=60, what="every ConfigMap counted once")
    claims = [c["name"] for c in quota()["status"]["claims"]]
    assert len(claims) == len(set(claims)), f"an object counted twice: {sorted(claims)}"
    settled = poll(
        lambda: (s := ledger_status()).get("allocated") == str(len(expected)) and s.get("reserved") == "0" and s,
        timeout=60,
        what=f"the ledger at {len(expected)} used, nothing reserved",
    )
    assert not settled.get("reservations"), settled
    final = poll(lambda: (q := quota()) and _ready(q) and q, what="the quota Ready for its generation")
    assert final["status"]["usage"]["used"] == str(len(expected))
    ledgers = pair.custom.list_namespaced_custom_object(GROUP, VERSION, pair.home, "quantityledgers")["items"]
    assert [item["metadata"]["name"] for item in ledgers] == [ledger], "one ledger for the quota"


# --- enclave-globalquotas: one ResourceQuota per selected namespace at usage + shared headroom -----------------


def globalquotas_case(pair: Pair) -> None:
    wait_for_quota_monitors(pair.core, pair.home)  # usage comes from kube-controller-manager's quota status
    limit = 30
    selector = {"gq-kill": pair.token}
    names = [pair.namespace(f"fgq-{pair.token}-{index}", selector) for index in range(6)]
    quota = f"kill-{pair.token}"
    rq_name = f"globalquota-{quota}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GlobalResourceQuota",
        "metadata": {"name": quota},
        "spec": {"quota": {"hard": {"services": limit}}, "namespaceSelectors": [{"matchLabels": selector}]},
    }
    leader = pair.leader()
    pair.custom.create_cluster_custom_object(GROUP, VERSION, "globalresourcequotas", body)  # phase one
    pair.cleanups.append(lambda: pair.delete_cluster("globalresourcequotas", quota))

    def has_quota(namespace: str) -> bool:
        try:
            pair.core.read_namespaced_resource_quota(rq_name, namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    poll(lambda: any(has_quota(ns) for ns in names), interval=0.05, what="the leader provisioning ResourceQuotas")
    killed = pair.kill(leader)

    # Phase two, while nobody leads: services in two namespaces, one namespace joins and one leaves.
    services = {names[0]: 3, names[1]: 2, names[2]: 1}
    for namespace, count in services.items():
        for index in range(count):
            body = {"metadata": {"name": f"s{index}"}, "spec": {"ports": [{"port": 80}]}}
            _create(partial(pair.core.create_namespaced_service, namespace, body))
    joined = pair.namespace(f"fgq-{pair.token}-joined", selector)
    left = names[-1]
    pair.core.patch_namespace(left, {"metadata": {"labels": {"gq-kill": None}}})
    pair.takeover(leader, killed)

    selected = [*names[:-1], joined]
    total = sum(services.values())
    expected = {ns: {"services": str(services.get(ns, 0) + limit - total)} for ns in selected}

    def hard() -> dict[str, dict[str, str]]:
        found = {}
        for namespace in selected:
            rq = pair.core.read_namespaced_resource_quota(rq_name, namespace)
            found[namespace] = dict(rq.spec.hard or {})
        return found

    poll(lambda: hard() == expected, timeout=60, what=f"every ResourceQuota at usage + headroom {expected}")
    poll(lambda: not has_quota(left), timeout=30, what="the ResourceQuota gone from the namespace that left")

    def settled() -> dict[str, Any] | None:
        obj = dict(pair.custom.get_cluster_custom_object(GROUP, VERSION, "globalresourcequotas", quota))
        status = obj.get("status") or {}
        if (
            _ready(obj)
            and status.get("namespaces") == sorted(selected)
            and status.get("total", {}).get("used") == {"services": str(total)}
        ):
            return obj
        return None

    obj = poll(settled, timeout=60, what="the GlobalResourceQuota's status converged")
    assert obj["status"]["namespaceCount"] == len(selected)
    block = poll(
        lambda: (
            (
                b := (
                    pair.custom.get_namespaced_custom_object(
                        GROUP, VERSION, pair.home, "quantityledgers", f"globalresourcequota.{quota}"
                    ).get("status")
                    or {}
                ).get("resourceQuota")
                or {}
            ).get("used")
            == {"services": str(total)}
            and b
        ),
        timeout=30,
        what="the ledger's usage",
    )
    assert block["initialized"] is True


# --- enclave-pools: claims bound exactly up to the pool, the ledger of bindings, per-namespace quotas -----------


def pools_case(pair: Pair) -> None:
    selector = {"pool-kill": pair.token}
    names = [pair.namespace(f"fpl-{pair.token}-{index}", selector) for index in range(2)]
    pool = f"kill-{pair.token}"
    room, claims = 10, 14
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourcePool",
        "metadata": {"name": pool},
        "spec": {"quota": {"hard": {"requests.cpu": str(room)}}, "selectors": [{"matchLabels": selector}]},
    }
    pair.custom.create_cluster_custom_object(GROUP, VERSION, "resourcepools", body)
    pair.cleanups.append(lambda: pair.delete_cluster("resourcepools", pool))
    poll(
        lambda: (pair.custom.get_cluster_custom_object(GROUP, VERSION, "resourcepools", pool).get("status") or {}).get(
            "observedGeneration"
        ),
        what="the pool's status",
    )

    def where(index: int) -> str:
        return names[index % 2]

    def claim(index: int) -> None:
        spec = {"pool": pool, "claim": {"requests.cpu": "1"}}
        obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourcePoolClaim", "metadata": {"name": f"c{index:02d}"}}
        pair.custom.create_namespaced_custom_object(
            GROUP, VERSION, where(index), "resourcepoolclaims", {**obj, "spec": spec}
        )

    def reason(index: int) -> str:
        found = pair.custom.get_namespaced_custom_object(
            GROUP, VERSION, where(index), "resourcepoolclaims", f"c{index:02d}"
        )
        return str(((found.get("status") or {}).get("condition") or {}).get("reason") or "")

    leader = pair.leader()
    for index in range(8):  # phase one
        claim(index)
    poll(lambda: any(reason(i) == "Bound" for i in range(8)), interval=0.05, what="the leader binding claims")
    killed = pair.kill(leader)
    for index in range(8, claims):  # phase two: nobody leads
        claim(index)
    pair.takeover(leader, killed)

    def reasons() -> dict[int, str] | None:
        found = {index: reason(index) for index in range(claims)}
        return found if all(found.values()) and list(found.values()).count("Bound") == room else None

    final = poll(reasons, timeout=60, what=f"exactly {room} of {claims} claims bound")
    bound = {(where(i), f"c{i:02d}") for i, r in final.items() if r == "Bound"}
    assert sorted(final.values()).count("PoolExhausted") == claims - room, final

    def pool_settled() -> dict[str, Any] | None:
        obj = dict(pair.custom.get_cluster_custom_object(GROUP, VERSION, "resourcepools", pool))
        status = obj.get("status") or {}
        return obj if _ready(obj) and status.get("claimCount") == room else None

    status = poll(pool_settled, timeout=30, what="the pool's status converged")["status"]
    recorded = [(ns, ref["name"]) for ns, refs in (status.get("claims") or {}).items() for ref in refs]
    assert len(recorded) == len(set(recorded)), f"a binding recorded twice: {recorded}"
    assert set(recorded) == bound, "the ledger of bindings is exactly the Bound claims"
    assert status["allocation"]["used"] == {"requests.cpu": str(room)}
    per_namespace = {ns: sum(1 for n, _ in bound if n == ns) for ns in names}

    def hard() -> dict[str, str]:
        return {
            ns: str(
                (pair.core.read_namespaced_resource_quota(f"enclave-pool-{pool}", ns).spec.hard or {}).get(
                    "requests.cpu"
                )
            )
            for ns in names
        }

    poll(
        lambda: hard() == {ns: str(count) for ns, count in per_namespace.items()},
        timeout=30,
        what=f"each namespace's quota at its bound claims {per_namespace}",
    )


# --- enclave-replication: every item in every selected namespace, once ----------------------------------------

OWNER = "enclave.dev/replicated-by"
MANAGED = "enclave.dev/managed-by=enclave-replication"


def replication_case(pair: Pair) -> None:
    team = pair.token
    tenants: list[str] = []

    def tenant(name: str, count: int) -> list[str]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Tenant",
            "metadata": {"name": name, "labels": {"team": team}},
            "spec": {},
        }
        pair.custom.create_cluster_custom_object(GROUP, VERSION, "tenants", body)
        pair.cleanups.append(lambda: pair.custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", name))
        tenants.append(name)
        return [pair.namespace(f"{name}-{index}", {"enclave.dev/tenant": name}) for index in range(count)]

    namespaces = tenant(f"frp-{team}-a", 4) + tenant(f"frp-{team}-b", 4)
    gtr = f"kill-{team}"
    items = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"k": "v"}},
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        },
    ]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GlobalTenantResource",
        "metadata": {"name": gtr},
        "spec": {"tenantSelector": {"matchLabels": {"team": team}}, "resources": [{"rawItems": items}]},
    }

    def managed(namespace: str) -> list[tuple[str, str, str]]:
        found = [
            ("ConfigMap", cm.metadata.name, (cm.metadata.annotations or {}).get(OWNER, ""))
            for cm in pair.core.list_namespaced_config_map(namespace, label_selector=MANAGED).items
        ]
        found += [
            ("NetworkPolicy", np.metadata.name, (np.metadata.annotations or {}).get(OWNER, ""))
            for np in client.NetworkingV1Api(pair.kube)
            .list_namespaced_network_policy(namespace, label_selector=MANAGED)
            .items
        ]
        return sorted(found)

    leader = pair.leader()
    pair.custom.create_cluster_custom_object(GROUP, VERSION, "globaltenantresources", body)  # phase one

    def delete_gtr() -> None:
        pair.custom.delete_cluster_custom_object(GROUP, VERSION, "globaltenantresources", gtr)
        poll(lambda: not any(managed(ns) for ns in namespaces), timeout=30, what="replicated objects removed")

    pair.cleanups.append(delete_gtr)
    poll(lambda: any(managed(ns) for ns in namespaces), interval=0.05, what="the leader replicating")
    killed = pair.kill(leader)
    # Phase two, while nobody leads: a third tenant arrives and a replicated object is deleted (drift).
    namespaces += tenant(f"frp-{team}-c", 3)
    with contextlib.suppress(ApiException):  # the dead leader may not have reached this namespace
        pair.core.delete_namespaced_config_map("shared", namespaces[0])
    pair.takeover(leader, killed)

    wanted = [
        ("ConfigMap", "shared", f"GlobalTenantResource/{gtr}"),
        ("NetworkPolicy", "default-deny", f"GlobalTenantResource/{gtr}"),
    ]
    poll(
        lambda: all(managed(ns) == wanted for ns in namespaces),
        timeout=60,
        what="both items once in every selected namespace",
    )

    seen: list[dict[str, Any]] = [{}]

    def settled() -> dict[str, Any] | None:
        obj = seen[0] = dict(pair.custom.get_cluster_custom_object(GROUP, VERSION, "globaltenantresources", gtr))
        status = obj.get("status") or {}
        processed = status.get("processedItems") or []
        if (
            _ready(obj)
            and status.get("size") == 2 * len(namespaces)
            and status.get("selectedTenants") == sorted(tenants)
            and len(processed) == 2 * len(namespaces)
            and all(item["status"]["status"] == "True" for item in processed)
        ):
            return obj
        return None

    try:
        obj = poll(settled, timeout=60, what="the GlobalTenantResource's status converged")
    except AssertionError as err:
        raise AssertionError(f"{err}; last seen: {seen[0]}") from None
    processed = [(i["namespace"], i["kind"], i["name"]) for i in obj["status"]["processedItems"]]
    assert len(processed) == len(set(processed)), f"an item reported twice: {processed}"
    assert {ns for ns, _, _ in processed} == set(namespaces)


CASES: dict[str, tuple[Callable[[Pair], None], list[str]]] = {
    # --concurrency/--writes at their lowest: one write at a time, so the kill lands inside the reconcile.
    "quotas": (quotas_case, ["--resync=5s"]),
    "globalquotas": (globalquotas_case, ["--resync=5s", "--concurrency=1"]),
    "pools": (pools_case, ["--resync=5s"]),
    "replication": (replication_case, ["--concurrency=1", "--writes=1"]),
}


@pytest.fixture(params=sorted(CASES))
def pair(
    request: pytest.FixtureRequest, control_plane: ControlPlane, kube: Any, enclave_crds: list[str]
) -> Iterator[Pair]:
    component: str = request.param
    token = secrets.token_hex(3)
    home = f"fk-{component}-{token}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": home}})
    args = [*CASES[component][1], *FAST_LEASE]
    if component == "quotas":
        args.append(f"--webhook-configuration=fk-absent-{token}")  # scope no hook of anyone else's
    started: dict[str, RunningComponent] = {}
    made = Pair(component, home, token, kube, started)
    try:
        for side in ("a", "b"):
            identity = f"{component}-{side}-{token}"
            started[identity] = start_component(
                SPECS[component],
                kubeconfig=control_plane.kubeconfig,
                log_dir=control_plane.log_dir,
                namespace=home,
                endpoints={},
                args=args,
                identity=identity,
            )
        yield made
    finally:
        for cleanup in reversed(made.cleanups):
            with contextlib.suppress(ApiException, AssertionError):
                cleanup()
        for running in started.values():
            running.process.stop()
        with contextlib.suppress(ApiException):
            core.delete_namespace(home)


def test_a_killed_leader_is_replaced_within_its_lease_and_what_it_writes_ends_exactly_right(pair: Pair) -> None:
    CASES[pair.component][0](pair)

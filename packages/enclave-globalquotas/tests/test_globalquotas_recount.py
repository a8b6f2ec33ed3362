"""When a ResourceQuota's report goes down, the namespace is counted and the plan uses the larger figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from enclave_globalquotas import naming
from enclave_globalquotas.plan import build_plan
from enclave_globalquotas.recount import Recounts, count, kind_of, kinds_for

from enclave_core.api import names
from enclave_core.api.meta import ObjectRef
from enclave_core.ledger.resources import ResourceHold, ResourceRefusal, fold_resources, reserve_resources
from enclave_core.quantity import Quantity
from enclave_core.snapshots.globalquotas import GlobalQuotaView

Q = Quantity.parse
PAIR = ("shared", "x")


def view(hard: dict[str, str], scopes: list[str] | None = None) -> GlobalQuotaView:
    return GlobalQuotaView(
        name="shared",
        uid="u",
        generation=1,
        ledger_namespace="enclave",
        ledger_name="globalresourcequota.shared",
        hard=hard,
        scopes=scopes or [],
        scope_selector=[],
        namespaces=["x"],
        used={},
        initialized=True,
        valid=True,
    )


def test_kinds_of_resource_names() -> None:
    assert kind_of("services") == kind_of("count/services") == kind_of("services.loadbalancers") == "services"
    assert kind_of("requests.cpu") == kind_of("memory") == kind_of("hugepages-2Mi") == "pods"
    assert kind_of("requests.storage") == "persistentvolumeclaims"
    assert kind_of("gold.storageclass.storage.k8s.io/requests.storage") == "persistentvolumeclaims"
    assert kind_of("count/deployments.apps") is None
    assert kind_of("secrets") is None  # never read: an account that may read Secrets reads the CA key
    assert kinds_for(["pods", "requests.cpu", "count/deployments.apps", "configmaps"]) == {
        "pods": ["pods", "requests.cpu"],
        "configmaps": ["configmaps"],
    }


def test_count_follows_the_evaluators_and_scopes() -> None:
    pods: list[dict[str, Any]] = [
        {"spec": {"containers": [{"resources": {"requests": {"cpu": "250m"}}}]}},
        {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}},
        {"spec": {"containers": [{}]}},
    ]
    assert count(view({"pods": "10", "requests.cpu": "4"}), "pods", pods) == {"pods": Q(2), "requests.cpu": Q("250m")}
    # A BestEffort quota counts only the pod without requests.
    assert count(view({"pods": "10"}, ["BestEffort"]), "pods", pods) == {"pods": Q(1)}
    services: list[dict[str, Any]] = [{"spec": {"type": "LoadBalancer", "ports": [{}, {}]}}, {"spec": {}}]
    assert count(view({"services": "5", "services.nodeports": "9"}), "services", services) == {
        "services": Q(2),
        "services.nodeports": Q(2),
    }
    # Metadata-only items (configmaps, replication controllers) count by their number.
    items = [{"metadata": {"name": "a"}}] * 3
    assert count(view({"count/configmaps": "5"}), "configmaps", items) == {"count/configmaps": Q(3)}
    assert count(view({"pods": "1"}), "services", services) == {}


def test_growing_reports_are_trusted_without_a_count() -> None:
    recounts = Recounts()
    assert not recounts.wants_count(PAIR, {"services": Q(1)}, ("1", 0), 0.0, seed={"services": Q(1)})
    assert recounts.effective(PAIR, {"services": Q(1)}, pending=False, now=0.0) == {"services": Q(1)}
    assert not recounts.wants_count(PAIR, {"services": Q(3)}, ("2", 0), 1.0)
    assert recounts.effective(PAIR, {"services": Q(3)}, pending=False, now=1.0) == {"services": Q(3)}
    assert recounts.overrides() == {}
    assert recounts.recheck_at() is None


def test_a_namespace_new_to_the_quota_is_counted_once() -> None:
    recounts = Recounts()
    assert recounts.wants_count(PAIR, {"services": Q(0)}, ("1", 0), 10.0, seed=None)
    recounts.counted(PAIR, {"services": Q(2)}, ("1", 0), 10.0)
    # Two exist that the new ResourceQuota's first recount missed: the count stands until the report has them.
    assert recounts.effective(PAIR, {"services": Q(0)}, pending=False, now=10.0) == {"services": Q(2)}
    assert recounts.overrides() == {"shared": {"x": {"services": Q(2)}}}
    assert not recounts.wants_count(PAIR, {"services": Q(0)}, ("1", 0), 11.0)
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 0), 12.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 12.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=12.0) == {"services": Q(2)}
    assert recounts.overrides() == {}
    assert not recounts.wants_count(PAIR, {"services": Q(2)}, ("3", 0), 13.0)


def test_a_report_that_goes_down_is_counted_until_it_holds() -> None:
    recounts = Recounts(window=5.0)
    recounts.wants_count(PAIR, {"services": Q(3)}, ("1", 0), 0.0, seed={"services": Q(3)})
    recounts.effective(PAIR, {"services": Q(3)}, pending=False, now=0.0)
    # A recount missed an object in flight: the report went from 3 to 2.
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 0), 1.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 1.0)  # the object is not stored yet either
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=True, now=1.0) == {"services": Q(2)}
    assert recounts.recheck_at() == 6.0
    # Its reservation settles (the object exists): counted again, and the count has it.
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 1), 2.0)
    recounts.counted(PAIR, {"services": Q(3)}, ("2", 1), 2.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=2.0) == {"services": Q(3)}
    # Nothing changed but the window ending: one more count after it, then still held at the count.
    assert not recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 1), 4.0)
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 1), 6.0)
    recounts.counted(PAIR, {"services": Q(3)}, ("2", 1), 6.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=6.0) == {"services": Q(3)}
    assert recounts.recheck_at() is None
    # kube-controller-manager recounts right: the report has it and the suspicion ends.
    assert recounts.wants_count(PAIR, {"services": Q(3)}, ("3", 1), 8.0)
    recounts.counted(PAIR, {"services": Q(3)}, ("3", 1), 8.0)
    assert recounts.effective(PAIR, {"services": Q(3)}, pending=False, now=8.0) == {"services": Q(3)}
    assert recounts.overrides() == {}


def test_a_settle_is_counted_even_while_the_report_only_grows() -> None:
    recounts = Recounts(window=5.0)
    recounts.wants_count(PAIR, {"services": Q(0)}, ("1", 0), 0.0, seed={"services": Q(0)})
    recounts.effective(PAIR, {"services": Q(0)}, pending=True, now=0.0)
    # Two objects are stored; the report is 1 (a recount missed one, and went 1 -> 0 -> 1 between passes).
    assert not recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 1.0)  # growth alone is believed
    recounts.settling(PAIR, 1.0)
    assert recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 1.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 1.0)
    assert recounts.effective(PAIR, {"services": Q(1)}, pending=False, now=1.0) == {"services": Q(2)}
    assert recounts.recheck_at() is None  # the objects are stored: no window to wait out
    assert not recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 2.0)  # the count stands meanwhile
    assert recounts.effective(PAIR, {"services": Q(1)}, pending=False, now=2.0) == {"services": Q(2)}
    # A count that fails is taken again on the next pass.
    recounts.settling(PAIR, 3.0)
    assert recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 3.0)
    recounts.failed(PAIR, ("2", 0))
    assert recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 4.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 4.0)
    # The report catches up: believed again, with nothing more to count.
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("3", 0), 5.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("3", 0), 5.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=5.0) == {"services": Q(2)}
    assert recounts.overrides() == {}
    assert not recounts.wants_count(PAIR, {"services": Q(2)}, ("4", 0), 6.0)


def test_a_deletion_is_counted_once_and_believed() -> None:
    recounts = Recounts(window=5.0)
    recounts.wants_count(PAIR, {"services": Q(3)}, ("1", 0), 0.0, seed={"services": Q(3)})
    recounts.effective(PAIR, {"services": Q(3)}, pending=False, now=0.0)
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 0), 10.0)
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 10.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=10.0) == {"services": Q(2)}
    assert recounts.wants_count(PAIR, {"services": Q(2)}, ("2", 0), 15.0)  # the window's own count
    recounts.counted(PAIR, {"services": Q(2)}, ("2", 0), 15.0)
    assert recounts.effective(PAIR, {"services": Q(2)}, pending=False, now=15.0) == {"services": Q(2)}
    assert recounts.overrides() == {}


def test_a_failed_count_holds_the_namespace_at_what_was_accepted() -> None:
    recounts = Recounts()
    recounts.wants_count(PAIR, {"services": Q(3)}, ("1", 0), 0.0, seed={"services": Q(3)})
    recounts.effective(PAIR, {"services": Q(3)}, pending=False, now=0.0)
    assert recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 1.0)
    recounts.failed(PAIR, ("2", 0))
    assert recounts.effective(PAIR, {"services": Q(1)}, pending=False, now=1.0) == {"services": Q(3)}
    assert recounts.wants_count(PAIR, {"services": Q(1)}, ("2", 0), 2.0)


def rq(namespace: str, used: str, hard: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": naming.resource_quota_name("shared"),
            "namespace": namespace,
            "resourceVersion": "5",
            "labels": {names.MANAGED_BY: names.GLOBALQUOTAS_MANAGER, names.GLOBALQUOTA_LABEL: "shared"},
        },
        "spec": {"hard": {"services": hard}},
        "status": {"hard": {"services": hard}, "used": {"services": used}},
    }


def test_plan_counts_the_larger_figure_and_keeps_hard_on_the_report() -> None:
    raw = {
        "metadata": {"name": "shared", "uid": "u", "generation": 1},
        "spec": {"quota": {"hard": {"services": "5"}}, "namespaceSelectors": [{"matchLabels": {"team": "a"}}]},
    }
    namespaces = {n: {"metadata": {"name": n, "labels": {"team": "a"}}} for n in ("x", "y")}
    live = {
        f"x/{naming.resource_quota_name('shared')}": rq("x", "1", "5"),
        f"y/{naming.resource_quota_name('shared')}": rq("y", "0", "4"),
    }
    # x reports 1 but holds 3: two are left, not four.
    plan = build_plan([raw], namespaces, live, ledger_namespace="e", counted={"shared": {"x": {"services": Q(3)}}})
    quota = plan.quotas["shared"]
    assert quota.used == {"services": Q(3)}
    assert quota.usage["x"] == {"services": Q(3)}
    assert quota.reported_usage["x"] == {"services": Q(1)}
    # kube-apiserver compares with x's report (1): hard 1 + 2 lets x grow by the two left, no more.
    assert quota.desired["x"]["spec"]["hard"] == {"services": "3"}
    assert quota.desired["y"]["spec"]["hard"] == {"services": "2"}
    # The ledger folds the larger figure, so admission refuses the third create.
    folded = fold_resources(
        None,
        used=quota.used,
        namespaces=quota.namespaces,
        initialized=True,
        generation=1,
        settled=lambda _: False,
        now=datetime.now(UTC),
    )
    ref = ObjectRef(api_version="v1", kind="Service", name="s", namespace="y")
    hard = {"services": Q(5)}
    now = datetime.now(UTC)
    first = reserve_resources(folded, ResourceHold("a", ref, {"services": Q(1)}), hard, now=now)
    assert not isinstance(first, ResourceRefusal)
    assert first is not None
    other = ref.model_copy(update={"name": "t"})
    second = reserve_resources(first, ResourceHold("b", other, {"services": Q(1)}), hard, now=now)
    assert not isinstance(second, ResourceRefusal)
    assert second is not None
    third = ref.model_copy(update={"name": "u"})
    assert isinstance(
        reserve_resources(second, ResourceHold("c", third, {"services": Q(1)}), hard, now=now), ResourceRefusal
    )


def test_a_retried_create_replaces_its_own_reservation() -> None:
    """kube-apiserver's quota plugin answers 409 to one of two creates racing on a ResourceQuota; the client
    sends it again (a new request id). The retry takes the first attempt's place instead of a second unit."""
    ledger = fold_resources(
        None,
        used={"services": Q(4)},
        namespaces=["x"],
        initialized=True,
        generation=1,
        settled=lambda _: False,
        now=datetime.now(UTC),
    )
    now = datetime.now(UTC)
    hard = {"services": Q(5)}
    ref = ObjectRef(api_version="v1", kind="Service", name="s", namespace="x")
    first = reserve_resources(ledger, ResourceHold("try-1", ref, {"services": Q(1)}), hard, now=now)
    assert not isinstance(first, ResourceRefusal)
    assert first is not None
    retry = reserve_resources(
        first, ResourceHold("try-2", ref, {"services": Q(1)}), hard, now=now + timedelta(seconds=1)
    )
    assert not isinstance(retry, ResourceRefusal)
    assert retry is not None
    block = retry.resource_quota
    assert block is not None
    assert [r.id for r in block.reservations or []] == ["try-2"]
    assert block.allocated == {"services": "5"}
    assert block.reserved == {"services": "1"}
    # Another object still finds the quota full; a nameless create (generateName) never replaces anything.
    other = ref.model_copy(update={"name": "t"})
    assert isinstance(
        reserve_resources(retry, ResourceHold("b", other, {"services": Q(1)}), hard, now=now), ResourceRefusal
    )
    nameless = ref.model_copy(update={"name": None})
    assert isinstance(
        reserve_resources(retry, ResourceHold("c", nameless, {"services": Q(1)}), hard, now=now), ResourceRefusal
    )

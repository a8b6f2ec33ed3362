"""GlobalResourceQuota admission: what objects count for, which requests reserve, and quota validation."""

from __future__ import annotations

from typing import Any

from admission_helpers import make_state, request, review, user

from enclave_admission.defaults import url_client, webhooks
from enclave_admission.globalquotas.validation import _object_ref, validate, validate_quota
from enclave_admission.review import AdmissionRequest
from enclave_core.quantity import Quantity
from enclave_core.resourceusage import scoped, usage
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot, GlobalQuotaView, ScopeRequirement

ADMIN = user("root", "system:masters")


def q(value: Any) -> Quantity:
    return Quantity.parse(value)


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "a"}, "spec": {"containers": list(containers), **spec}}


def container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": "c", "image": "x", "resources": resources, **extra}


def view(hard: dict[str, str], **fields: Any) -> GlobalQuotaView:
    return GlobalQuotaView(
        name="shared",
        uid="u",
        ledger_namespace="enclave",
        ledger_name="globalresourcequota.shared",
        hard=hard,
        namespaces=["a", "b"],
        initialized=True,
        **fields,
    )


def test_pod_compute_usage_follows_kubernetes() -> None:
    spec = pod(
        container({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1"}),
        container({"cpu": "250m"}),
        initContainers=[container({"cpu": "2"})],
        overhead={"cpu": "100m"},
    )
    names = ["requests.cpu", "cpu", "limits.cpu", "requests.memory", "pods", "count/pods"]
    assert usage("", "pods", spec, names) == {
        "requests.cpu": q("2100m"),
        "cpu": q("2100m"),
        "limits.cpu": q("1100m"),
        "requests.memory": q("1Gi"),
        "pods": q(1),
        "count/pods": q(1),
    }
    assert usage("", "pods", {**spec, "status": {"phase": "Succeeded"}}, names) == {}


def test_services_claims_and_generic_counts() -> None:
    service = {"spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}}
    names = ["services", "services.nodeports", "services.loadbalancers"]
    assert usage("", "services", service, names) == {"services": q(1), "services.nodeports": q(2)}
    claim = {"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "5Gi"}}}}
    gold = "gold.storageclass.storage.k8s.io/requests.storage"
    assert usage("", "persistentvolumeclaims", claim, ["requests.storage", gold]) == {
        "requests.storage": q("5Gi"),
        gold: q("5Gi"),
    }
    assert usage("apps", "deployments", {"spec": {}}, ["count/deployments.apps"]) == {"count/deployments.apps": q(1)}


def test_scopes_count_only_matching_pods() -> None:
    best = view({"pods": "1"}, scopes=["BestEffort"])
    assert scoped(best, "", "pods", pod(container()))
    assert not scoped(best, "", "pods", pod(container({"cpu": "1"})))
    assert not scoped(best, "", "services", {"spec": {}})
    high = view(
        {"pods": "1"}, scope_selector=[ScopeRequirement(scope_name="PriorityClass", operator="In", values=["high"])]
    )
    assert scoped(high, "", "pods", pod(container(), priorityClassName="high"))
    assert not scoped(high, "", "pods", pod(container()))


def test_only_selected_namespaces_and_growing_updates_reserve() -> None:
    state = make_state([])
    state.set_globalquotas(GlobalQuotasSnapshot(quotas=[view({"services": "5"})]))
    service = {"metadata": {"name": "s", "namespace": "z"}, "spec": {}}
    elsewhere = request(ADMIN, "CREATE", service, resource="services", kind="Service", namespace="z")
    assert validate(elsewhere, state).reason == "NotCounted"  # type: ignore[union-attr]
    unchanged = request(ADMIN, "UPDATE", service, service, resource="services", kind="Service", namespace="a")
    assert validate(unchanged, state).reason == "WithinQuota"  # type: ignore[union-attr]


def test_reservations_name_generated_objects_and_the_hook_sees_everyone_everywhere() -> None:
    """A create with generateName reaches a validating hook with an empty request.name and the generated name
    in the object: the reservation names the object, so the controller can settle it once it exists. And the
    reservation hook skips no requester and no namespace (a quota counts every namespace it selects)."""
    generated = {"metadata": {"generateName": "web-", "name": "web-x7k2p", "namespace": "a"}, "spec": {}}
    body = review(ADMIN, "CREATE", generated, resource="pods", kind="Pod", namespace="a")
    body["request"]["name"] = ""
    assert _object_ref(AdmissionRequest.from_review(body)).name == "web-x7k2p"
    validating = webhooks(url_client("https://127.0.0.1:8443"), globalquotas=True).validating
    assert validating is not None
    hooks = {hook.name: hook for hook in validating.webhooks or []}
    reservations = hooks["globalquotas.enclave.dev"]
    assert reservations.namespace_selector is None
    assert not reservations.match_conditions
    assert reservations.failure_policy == "Ignore"
    assert hooks["globalresourcequotas.enclave.dev"].namespace_selector is not None


def test_quota_validation_names_the_field() -> None:
    state = make_state([])
    body = {"metadata": {"name": "g"}, "spec": {"quota": {"hard": {"gpus": 1}}, "namespaceSelectors": [{}]}}
    decision = validate_quota(
        request(
            ADMIN, "CREATE", body, resource="globalresourcequotas", group="enclave.dev", kind="GlobalResourceQuota"
        ),
        state,
    )
    assert not decision.allowed
    assert "spec.quota.hard[gpus]: unknown resource name" in decision.message
    old = {**body, "spec": {"quota": {"hard": {"pods": 10}}}, "status": {"total": {"used": {"pods": "4"}}}}
    lowered = {**body, "spec": {"quota": {"hard": {"pods": 3}}}}
    decision = validate_quota(
        request(
            ADMIN,
            "UPDATE",
            lowered,
            old,
            resource="globalresourcequotas",
            group="enclave.dev",
            kind="GlobalResourceQuota",
        ),
        state,
    )
    assert decision.reason == "HardBelowAllocated"
    assert "spec.quota.hard[pods]: 3 is below the 4 already used" in decision.message

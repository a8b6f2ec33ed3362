"""spec.proxy: which objects of each kind a tenant user sees, and with which verbs (the Tenant's entry for a kind
replaces the ServiceConfiguration's; no entry: get, list, watch on what Enclave derives)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity, ValueMatcher
from enclave_core.api.proxy import ProxyKind
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView
from enclave_proxy.server import request_verb
from enclave_proxy.visibility import Visibility, name_matchers

ALICE = ("alice", ("enclave.dev",))


def obj(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def seen(*tenants: TenantView, config: dict[str, Any] | None = None) -> Visibility:
    visibility = Visibility(tenancy=TenancySnapshot(tenants=list(tenants)))
    if config is not None:
        visibility.set_config(effective("default", 1, ServiceConfigurationSpec.model_validate(config)))
    return visibility


def tenant(name: str = "oil", **fields: Any) -> TenantView:
    return TenantView(name=name, uid=name, owners=[Entity(kind="User", name="alice")], **fields)


def shown(visibility: Visibility, kind: str, objects: list[dict[str, Any]], verb: str = "list") -> list[str] | None:
    scope = visibility.scope(kind, *ALICE, verb)
    if scope is None:
        return None
    return [o["metadata"]["name"] for o in objects if scope.admits(o)]


VOLUMES = [
    obj("mine", {"enclave.dev/tenant": "oil"}),
    obj("theirs", {"enclave.dev/tenant": "gas"}),
    obj("bound", claimRef={"namespace": "oil-a", "name": "data"}),
    obj("elsewhere", claimRef={"namespace": "gas-a", "name": "data"}),
    obj("loose"),
]


def test_volumes_labelled_for_the_tenant_are_shown_and_bound_ones_only_when_claimed() -> None:
    assert shown(seen(tenant(namespaces=["oil-a"])), "PersistentVolumes", VOLUMES) == ["mine"]
    claimed = tenant(namespaces=["oil-a"], proxy=[ProxyKind(kind="PersistentVolumes", claimed=True)])
    assert shown(seen(claimed), "PersistentVolumes", VOLUMES) == ["mine", "bound"]


CLASSES = [obj("gold", {"tier": "1"}), obj("silver"), obj("solar-fast"), obj("other", {"shared": "yes"})]


def test_classes_are_shown_only_when_named_by_settings_or_allowed_by_rules() -> None:
    assert shown(seen(tenant()), "StorageClasses", CLASSES) == []
    by_name = tenant(
        proxy=[ProxyKind(kind="StorageClasses", names=[ValueMatcher(exact=["gold"]), ValueMatcher(exp="^solar-.*$")])]
    )
    assert shown(seen(by_name), "StorageClasses", CLASSES) == ["gold", "solar-fast"]
    assert shown(seen(by_name), "IngressClasses", CLASSES) == [], "an entry is for its kind only"
    ruled = tenant(priority_classes=[ValueMatcher(exact=["silver"])], runtime_classes=[ValueMatcher(exp="g.*")])
    assert shown(seen(ruled), "PriorityClasses", CLASSES) == ["silver"]
    assert shown(seen(ruled), "RuntimeClasses", CLASSES) == ["gold"]


def test_the_configuration_is_the_default_and_a_tenant_entry_replaces_it() -> None:
    config = {"proxy": {"kinds": [{"kind": "GatewayClasses", "selector": {"matchLabels": {"shared": "yes"}}}]}}
    assert shown(seen(tenant(), config=config), "GatewayClasses", CLASSES) == ["other"]
    own = tenant(proxy=[ProxyKind(kind="GatewayClasses", names=[ValueMatcher(exact=["gold"])])])
    assert shown(seen(own, config=config), "GatewayClasses", CLASSES) == ["gold"]
    volumes = {"proxy": {"kinds": [{"kind": "PersistentVolumes", "claimed": True, "verbs": ["list"]}]}}
    everyone = seen(tenant(namespaces=["oil-a"]), config=volumes)
    assert shown(everyone, "PersistentVolumes", VOLUMES) == ["mine", "bound"]
    assert everyone.scope("PersistentVolumes", *ALICE, "get") is None, "the default's verbs apply too"


def test_verbs_default_to_reading_and_an_empty_list_hides_the_kind() -> None:
    plain = seen(tenant(node_selector={"pool": "oil"}))
    for verb in ("get", "list", "watch"):
        assert plain.scope("Nodes", *ALICE, verb) is not None
    for verb in ("update", "patch", "delete"):
        assert plain.scope("Nodes", *ALICE, verb) is None, "never more than reading unless an administrator says"
    hidden = seen(tenant(proxy=[ProxyKind(kind="Nodes", verbs=[])]))
    assert hidden.scope("Nodes", *ALICE, "list") is None
    granted = seen(tenant(proxy=[ProxyKind(kind="PersistentVolumes", verbs=["get", "delete"])]))
    assert granted.scope("PersistentVolumes", *ALICE, "delete") is not None
    assert granted.scope("PersistentVolumes", *ALICE, "list") is None


def test_with_two_tenants_each_grants_its_own_objects_only() -> None:
    oil = tenant("oil", proxy=[ProxyKind(kind="PersistentVolumes", verbs=["get", "list", "watch", "delete"])])
    gas = tenant("gas")
    both = seen(oil, gas)
    assert shown(both, "PersistentVolumes", VOLUMES) == ["mine", "theirs"]
    assert shown(both, "PersistentVolumes", VOLUMES, "delete") == ["mine"]


def test_callers_who_are_not_tenant_users_are_passed_through() -> None:
    visibility = seen(tenant())
    assert visibility.scope("StorageClasses", "root", ("system:masters",)) is None
    nobody = visibility.scope("StorageClasses", "dave", ("enclave.dev",))
    assert nobody is not None
    assert not nobody.admits(CLASSES[0])


@pytest.mark.parametrize(
    ("method", "name", "watch_path", "query", "verb"),
    [
        ("GET", "", False, {}, "list"),
        ("GET", "", False, {"watch": "true"}, "watch"),
        ("GET", "", True, {}, "watch"),
        ("GET", "gold", False, {}, "get"),
        ("PUT", "gold", False, {}, "update"),
        ("PATCH", "gold", False, {}, "patch"),
        ("DELETE", "gold", False, {}, "delete"),
        ("DELETE", "", False, {}, ""),
        ("POST", "", False, {}, ""),
    ],
)
def test_request_verbs_are_kube_apiservers(
    method: str, name: str, watch_path: bool, query: dict[str, str], verb: str
) -> None:
    assert request_verb(method, name, watch_path, query) == verb


def test_a_hostile_name_pattern_matches_in_linear_time() -> None:
    """Patterns are an administrator's, but every object name goes through them on every list: RE2, one pass."""
    (matcher,) = name_matchers([ValueMatcher(exp="(a+)+$")])
    started = time.perf_counter()
    assert not matcher.matches("a" * 20_000 + "!")
    assert time.perf_counter() - started < 0.5
    (broken,) = name_matchers([ValueMatcher(exact=["gold"], exp="(?=x)")])
    assert broken.matches("gold")
    assert not broken.matches("x")

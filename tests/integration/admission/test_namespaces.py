"""Namespace ownership through the real kube-apiserver, acting as real users by impersonation."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import enclave_admission.server
from enclave_core.api.meta import Entity
from enclave_core.api.names import NODE_SELECTOR_ANNOTATION, PROMOTED_LABEL, TENANT_LABEL
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .harness import GROUP, VERSION, Enclave, refused


def user(name: str) -> Entity:
    return Entity(kind="User", name=name)


def ns(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels or {}}}


def test_owner_creates_namespaces_that_land_in_the_right_tenant(enclave: Enclave) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)])
    api = enclave.owner(alice)
    api.create_namespace(ns(f"{solar.name}-unlabelled"))
    assert enclave.labels(f"{solar.name}-unlabelled")[TENANT_LABEL] == solar.name
    assert enclave.owner_references(f"{solar.name}-unlabelled") == [("Tenant", solar.name, solar.uid)]
    wind = enclave.tenant(unique("wind"), owners=[user(alice)])
    api.create_namespace(ns(unique("labelled"), {TENANT_LABEL: wind.name}))
    api.create_namespace(ns(f"{wind.name}-prefixed"))
    assert enclave.labels(f"{wind.name}-prefixed")[TENANT_LABEL] == wind.name
    assert enclave.owner_references(f"{wind.name}-prefixed") == [("Tenant", wind.name, wind.uid)]


def test_user_owning_two_tenants_is_refused_an_ambiguous_name(enclave: Enclave) -> None:
    alice = unique("alice")
    first = enclave.tenant(unique("first"), owners=[user(alice)])
    second = enclave.tenant(unique("second"), owners=[user(alice)])
    refused(lambda: enclave.owner(alice).create_namespace(ns(unique("dev"))), first.name, second.name)


def test_tenant_label_of_a_tenant_not_owned_is_refused(enclave: Enclave) -> None:
    alice, bob = unique("alice"), unique("bob")
    enclave.tenant(unique("solar"), owners=[user(alice)])
    oil = enclave.tenant(unique("oil"), owners=[user(bob)])
    refused(lambda: enclave.owner(alice).create_namespace(ns(unique("x"), {TENANT_LABEL: oil.name})), "do not own")


def test_prefix_and_protected_regex(enclave: Enclave) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)], force_tenant_prefix=True)
    api = enclave.owner(alice)
    refused(lambda: api.create_namespace(ns(unique("dev"))), f"must start with '{solar.name}-'")
    api.create_namespace(ns(f"{solar.name}-dev"))
    refused(lambda: api.create_namespace(ns(f"{solar.name}-protected")), "-protected$")


def test_namespace_quota_refuses_the_fourth_of_three(enclave: Enclave) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)], namespace_quota=3)
    api = enclave.owner(alice)
    # Back to back: the snapshot does not show them yet; this replica's reservations count them.
    for index in range(3):
        api.create_namespace(ns(f"{solar.name}-{index}"))
    refused(lambda: api.create_namespace(ns(f"{solar.name}-3")), "quota", "3 of 3")
    enclave.sync()  # the "controller" catches up: still full
    refused(lambda: api.create_namespace(ns(f"{solar.name}-4")), "3 of 3")


def test_administrators_assign_migrate_and_unassign(enclave: Enclave) -> None:
    solar = enclave.tenant(unique("solar"), owners=[user(unique("alice"))])
    oil = enclave.tenant(unique("oil"), owners=[user(unique("bob"))])
    admin = enclave.admin()
    plain = unique("ops")
    admin.create_namespace(ns(plain))
    assert TENANT_LABEL not in enclave.labels(plain)
    assert enclave.owner_references(plain) == []
    name = unique("shared")
    admin.create_namespace(ns(name, {TENANT_LABEL: solar.name}))
    assert enclave.owner_references(name) == [("Tenant", solar.name, solar.uid)]
    admin.patch_namespace(name, {"metadata": {"labels": {TENANT_LABEL: oil.name}}})
    assert enclave.labels(name)[TENANT_LABEL] == oil.name
    assert enclave.owner_references(name) == [("Tenant", oil.name, oil.uid)]
    admin.patch_namespace(name, {"metadata": {"labels": {TENANT_LABEL: None}}})
    assert TENANT_LABEL not in enclave.labels(name)
    assert enclave.owner_references(name) == []
    admin.patch_namespace(plain, {"metadata": {"labels": {TENANT_LABEL: oil.name}}})  # assign an existing one
    assert enclave.owner_references(plain) == [("Tenant", oil.name, oil.uid)]


def test_cordoned_tenant_refuses_new_namespaces_and_deletions(enclave: Enclave) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)])
    api = enclave.owner(alice)
    api.create_namespace(ns(f"{solar.name}-a"))
    enclave.update(solar.name, cordoned=True)
    refused(lambda: api.create_namespace(ns(f"{solar.name}-b")), "cordoned")
    refused(lambda: api.delete_namespace(f"{solar.name}-a"), "cordoned")
    enclave.update(solar.name, cordoned=False)
    api.delete_namespace(f"{solar.name}-a")


def test_tenant_with_prevent_deletion_cannot_be_deleted(enclave: Enclave) -> None:
    """Refused by whichever check kube-apiserver runs first: enclave-config's deletion policy (in-process) or
    the Tenant webhook; both name the flag."""
    solar = enclave.tenant(unique("solar"), owners=[user(unique("alice"))], prevent_deletion=True)
    custom = client.CustomObjectsApi(enclave.impersonate("root-admin", ["enclave-admins"]))
    with pytest.raises(ApiException) as caught:
        custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", solar.name)
    assert caught.value.status in (400, 403, 422), caught.value.body
    assert "preventDeletion" in str(caught.value.body)


def test_invalid_service_configuration_is_refused_naming_the_field(enclave: Enclave) -> None:
    custom = client.CustomObjectsApi(enclave.kube)
    refused(
        lambda: custom.patch_cluster_custom_object(
            GROUP, VERSION, "serviceconfigurations", enclave.config_name, {"spec": {"protectedNamespaceRegex": "(["}}
        ),
        "spec.protectedNamespaceRegex",
    )


def test_webhook_entries_kube_apiserver_would_refuse_are_refused_naming_the_field(enclave: Enclave) -> None:
    """sideEffects Some, no supported review version, a client URL naming an in-cluster Service: refused at
    admission, never applied half and left Ready=False by kube-apiserver's later refusal."""
    custom = client.CustomObjectsApi(enclave.kube)
    live = custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", enclave.config_name)
    admission = live["spec"]["admission"]
    hooks = admission["validating"]["webhooks"]

    def patched(side: dict[str, Any]) -> Callable[[], object]:
        spec = {"admission": {**admission, "validating": {**admission["validating"], **side}}}
        return lambda: custom.patch_cluster_custom_object(
            GROUP, VERSION, "serviceconfigurations", enclave.config_name, {"spec": spec}
        )

    some = [{**hooks[0], "sideEffects": "Some"}, *hooks[1:]]
    refused(patched({"webhooks": some}), "spec.admission.validating.webhooks[0].sideEffects")
    v2 = [{**hooks[0], "admissionReviewVersions": ["v2"]}, *hooks[1:]]
    refused(patched({"webhooks": v2}), "spec.admission.validating.webhooks[0].admissionReviewVersions")
    in_cluster = {"client": {"url": "https://enclave-admission.enclave-system.svc:443"}}
    refused(patched(in_cluster), "spec.admission.validating.client.url")
    after = custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", enclave.config_name)
    assert after["spec"]["admission"] == admission


def test_promotion_only_by_owners_and_not_by_promoted_accounts(enclave: Enclave) -> None:
    alice, bob = unique("alice"), unique("bob")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)])
    enclave.tenant(unique("oil"), owners=[user(bob)])
    home = f"{solar.name}-apps"
    enclave.owner(alice).create_namespace(ns(home))
    enclave.sync()  # the "controller" publishes the new namespace
    admin = client.CoreV1Api(enclave.kube)
    for name in ("robot", "builder", "other"):
        admin.create_namespaced_service_account(home, {"metadata": {"name": name}})
    promote = {"metadata": {"labels": {PROMOTED_LABEL: "true"}}}
    refused(lambda: enclave.owner(bob).patch_namespaced_service_account("builder", home, promote), "only owners")
    enclave.owner(alice).patch_namespaced_service_account("robot", home, promote)
    robot = f"system:serviceaccount:{home}:robot"
    robot_entity = Entity(kind="ServiceAccount", name=robot)
    enclave.update(solar.name, promoted=[robot_entity], owners=[user(alice), robot_entity])
    robot_api = enclave.core(robot, ["system:serviceaccounts", f"system:serviceaccounts:{home}"])
    # The config component adds the promoted account to the namespace hooks' audience (opts.serviceUsers).
    registrations = client.AdmissionregistrationV1Api(enclave.kube)

    def in_audience() -> bool:
        hooks = registrations.read_validating_webhook_configuration(f"{enclave.config_name}-validating").webhooks
        namespaces = next(hook for hook in hooks if hook.name == "namespaces.enclave.dev")
        return any(robot in condition.expression for condition in namespaces.match_conditions or [])

    poll(in_audience, what="the promoted account in the namespace hooks' audience")
    refused(lambda: robot_api.patch_namespaced_service_account("other", home, promote), "promoted service account")
    # a promoted account is an owner: it creates namespaces in its tenant
    robot_api.create_namespace(ns(f"{solar.name}-by-robot"))
    assert enclave.labels(f"{solar.name}-by-robot")[TENANT_LABEL] == solar.name


def test_deny_posts_one_aggregated_event_and_none_for_dry_runs(enclave: Enclave) -> None:
    alice = unique("alice")
    enclave.tenant(unique("solar"), owners=[user(alice)])
    enclave.tenant(unique("wind"), owners=[user(alice)])
    name, rehearsed = unique("ambiguous"), unique("rehearsed")
    api = enclave.owner(alice)
    refused(lambda: api.create_namespace(ns(rehearsed), dry_run="All"))
    for _ in range(4):  # a tenant retrying in a loop: one Event, its count moving
        refused(lambda: api.create_namespace(ns(name)))
    core = client.CoreV1Api(enclave.kube)

    def events(involved: str) -> list[Any]:
        items = core.list_namespaced_event(enclave.namespace, field_selector=f"involvedObject.name={involved}").items
        return [e for e in items if e.reason == "AmbiguousTenant" and alice in e.message]

    poll(lambda: [e.count for e in events(name)] == [4], timeout=30, what="one deny event counted 4 times")
    # Events are posted in order: the dry run's would be there by now.
    assert events(rehearsed) == []


def test_unknown_path_is_an_error_never_an_allow(enclave: Enclave) -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "1", "operation": "CREATE", "userInfo": {"username": "x"}},
    }
    request = urllib.request.Request(
        f"{enclave.admission.webhook_url}/validate-anything",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, context=enclave.ssl_context(), timeout=5)
    assert caught.value.code == 404
    assert "/namespaces" in caught.value.read().decode()


def test_metrics_and_readiness(enclave: Enclave) -> None:
    with urllib.request.urlopen(f"{enclave.admission.probe_url}/readyz", timeout=2) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"{enclave.admission.probe_url}/metrics", timeout=2) as answer:
        text = answer.read().decode()
    assert 'enclave_admission_decisions_total{path="/namespaces",result="allowed"}' in text
    assert 'enclave_admission_request_duration_seconds_bucket{le="0.005",path="/namespaces"}' in text
    # the server runs what this interpreter imports: compiled under tox, which must test the shipped build
    compiled = not str(enclave_admission.server.__file__).endswith(".py")
    assert f'enclave_admission_build_info{{compiled="{str(compiled).lower()}"}} 1.0' in text
    if os.environ.get("ENCLAVE_TEST_EXPECT_MYPYC") == "1":
        assert compiled, "tox installs enclave-admission from its mypyc-compiled wheel"


def test_node_selector_annotation_and_ownership_of_own_namespace_are_immutable_for_its_service_account(
    enclave: Enclave,
) -> None:
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)])
    home = f"{solar.name}-apps"
    enclave.owner(alice).create_namespace(ns(home))
    enclave.sync()  # the namespace is in the tenant: its service accounts are tenant service accounts
    admin = client.CoreV1Api(enclave.kube)
    admin.patch_namespace(home, {"metadata": {"annotations": {NODE_SELECTOR_ANNOTATION: "pool=solar"}}})
    sa = enclave.core(f"system:serviceaccount:{home}:deployer", ["system:serviceaccounts"])
    refused(lambda: sa.patch_namespace(home, {"metadata": {"labels": {TENANT_LABEL: None}}}), "cannot be changed")
    refused(
        lambda: sa.patch_namespace(home, [{"op": "remove", "path": "/metadata/ownerReferences"}]),
        "ownerReferences",
    )
    refused(
        lambda: sa.patch_namespace(home, {"metadata": {"annotations": {NODE_SELECTOR_ANNOTATION: ""}}}),
        NODE_SELECTOR_ANNOTATION,
    )
    sa.patch_namespace(home, {"metadata": {"labels": {"team": "deployers"}}})
    assert enclave.labels(home)[TENANT_LABEL] == solar.name


def test_quota_does_not_double_count_once_the_snapshot_catches_up(enclave: Enclave) -> None:
    """Reservations are dropped once the snapshot shows the namespace: no double counting."""
    alice = unique("alice")
    solar = enclave.tenant(unique("solar"), owners=[user(alice)], namespace_quota=2)
    api = enclave.owner(alice)
    api.create_namespace(ns(f"{solar.name}-a"))
    enclave.sync()
    api.create_namespace(ns(f"{solar.name}-b"))
    enclave.sync()
    refused(lambda: api.create_namespace(ns(f"{solar.name}-c")), "2 of 2")

"""The API models: every kind round-trips, defaults match the specification, deprecated fields load."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api import (
    KINDS,
    CustomQuota,
    GlobalTenantResource,
    KindInfo,
    ResourcePoolClaim,
    RuleStatus,
    ServiceConfiguration,
    Tenant,
    TenantOwner,
    kind_info,
)
from enclave_core.api.meta import GO_DURATION
from enclave_core.durations import parse_duration
from enclave_testing.examples import EXAMPLES, example, status_example

BY_KIND = pytest.mark.parametrize("info", KINDS, ids=lambda info: info.kind)


def _is_subset(small: Any, big: Any) -> bool:
    """Every key and list element of ``small`` appears in ``big`` with the same value."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and _is_subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(_is_subset, small, big))
    return bool(small == big)


def test_registry_has_the_twelve_kinds_with_designed_scopes() -> None:
    scopes = {info.kind: info.scope for info in KINDS}
    assert scopes == {
        "CustomQuota": "Namespaced",
        "GlobalCustomQuota": "Cluster",
        "GlobalResourceQuota": "Cluster",
        "GlobalTenantResource": "Cluster",
        "QuantityLedger": "Namespaced",
        "ResourcePool": "Cluster",
        "ResourcePoolClaim": "Namespaced",
        "RuleStatus": "Namespaced",
        "ServiceConfiguration": "Cluster",
        "Tenant": "Cluster",
        "TenantOwner": "Cluster",
        "TenantResource": "Namespaced",
    }
    assert kind_info("Tenant").short_names == ("tnt",)
    assert set(EXAMPLES) == set(scopes)
    short_names = [name for info in KINDS for name in info.short_names]
    assert len(short_names) == len(set(short_names))


def test_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="Tenant"):
        kind_info("Tenat")


@BY_KIND
def test_api_version_and_kind_are_fixed(info: KindInfo) -> None:
    obj = info.model.model_validate(example(info.kind))
    assert obj.api_version == GROUP_VERSION
    assert obj.kind == info.kind
    with pytest.raises(ValidationError):
        info.model.model_validate({**example(info.kind), "apiVersion": "enclave.dev/v1beta1"})


@BY_KIND
def test_example_round_trips(info: KindInfo) -> None:
    raw = example(info.kind)
    raw["status"] = status_example(info.kind)
    model = info.model.model_validate(raw)
    out = model.to_k8s()
    assert _is_subset(raw, out), "to_k8s lost or changed a field the user wrote"
    assert info.model.model_validate(out) == model
    assert info.model.model_validate(out).to_k8s() == out


@BY_KIND
def test_snake_case_names_are_accepted_too(info: KindInfo) -> None:
    model = info.model.model_validate(example(info.kind))
    again = info.model.model_validate(model.model_dump())  # python names, not aliases
    assert again == model


def test_metadata_accepts_everything_kube_apiserver_returns() -> None:
    raw = example("Tenant")
    raw["metadata"].update(
        uid="u",
        resourceVersion="42",
        generation=3,
        creationTimestamp="2025-01-01T00:00:00Z",
        managedFields=[{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
        ownerReferences=[{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "y"}],
        selfLink="/legacy",
        somethingNew={"a": 1},
    )
    out = Tenant.model_validate(raw).to_k8s()
    assert out["metadata"] == raw["metadata"]


def test_spec_types_refuse_unknown_fields_and_status_types_ignore_them() -> None:
    raw = example("TenantOwner")
    raw["spec"]["clusterRole"] = ["typo"]
    with pytest.raises(ValidationError, match="clusterRole"):
        TenantOwner.model_validate(raw)
    raw = example("TenantOwner")
    raw["status"] = {"tenants": ["a"], "addedByANewerController": True}
    assert TenantOwner.model_validate(raw).status is not None


def test_free_form_fields_keep_anything() -> None:
    tenant = Tenant.model_validate(example("Tenant"))
    assert tenant.spec.data == {"region": "eu", "replicas": 3, "nested": {"list": [1, "two"]}}
    gtr = GlobalTenantResource.model_validate(example("GlobalTenantResource"))
    assert gtr.spec.resources[0].raw_items is not None
    assert gtr.spec.resources[0].raw_items[0]["data"] == {"greeting": "hello", "nested": "x"}


def test_service_configuration_defaults() -> None:
    config = ServiceConfiguration.model_validate({"metadata": {"name": "default"}, "spec": {}})
    spec = config.spec
    assert spec.cache_invalidation == "24h"
    assert spec.enable_tls_reconciler is False
    assert spec.rbac.administration_cluster_roles == ["enclave-namespace-deleter"]
    assert spec.rbac.deleter == "enclave-namespace-deleter"
    assert spec.rbac.promotion_cluster_roles == ["enclave-namespace-provisioner", "enclave-namespace-deleter"]
    assert spec.rbac.provisioner == "enclave-namespace-provisioner"
    assert spec.events.namespace == "default"
    assert spec.overrides.tls_secret_name == "enclave-tls"
    assert spec.overrides.mutating_webhook_configuration_name == "enclave-mutating-webhook-configuration"
    assert spec.overrides.validating_webhook_configuration_name == "enclave-validating-webhook-configuration"
    assert spec.allow_service_account_promotion is False
    assert spec.force_tenant_prefix is False
    assert config.to_k8s()["spec"]["overrides"]["TLSSecretName"] == "enclave-tls"
    assert config.to_k8s()["spec"]["enableTLSReconciler"] is False


def test_webhook_defaults() -> None:
    raw = example("ServiceConfiguration")
    webhook = {"name": "a.b.c", "path": "/a", "admissionReviewVersions": ["v1"], "sideEffects": "None"}
    raw["spec"]["admission"]["mutating"]["webhooks"] = [{**webhook, "rules": [{}], "opts": {}}]
    spec = ServiceConfiguration.model_validate(raw).spec
    assert spec.admission is not None
    assert spec.admission.service_name == "enclave-webhook-service"
    mutating = spec.admission.mutating
    assert mutating is not None
    assert mutating.client.service is not None
    assert mutating.client.service.port == 443
    assert mutating.webhooks is not None
    hook = mutating.webhooks[0]
    assert (hook.failure_policy, hook.match_policy, hook.timeout_seconds) == ("Fail", "Equivalent", 10)
    assert hook.reinvocation_policy == "Never"
    assert hook.rules is not None
    assert hook.rules[0].scope == "*"
    assert hook.opts is not None
    assert (hook.opts.administrators, hook.opts.service_users) == (False, False)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("timeoutSeconds", 0),
        ("timeoutSeconds", 31),
        ("sideEffects", "Maybe"),
        ("failurePolicy", "Sometimes"),
        ("name", "not-qualified"),
        ("path", "relative"),
    ],
)
def test_models_enforce_ranges_and_enums_too(path: str, value: object) -> None:
    raw = example("ServiceConfiguration")
    raw["spec"]["admission"]["validating"]["webhooks"][0][path] = value
    with pytest.raises(ValidationError, match=path):
        ServiceConfiguration.model_validate(raw)


def test_port_range() -> None:
    raw = example("ServiceConfiguration")
    raw["spec"]["admission"]["mutating"]["client"]["service"]["port"] = 70000
    with pytest.raises(ValidationError, match="port"):
        ServiceConfiguration.model_validate(raw)


def test_tenant_defaults() -> None:
    tenant = Tenant.model_validate({"metadata": {"name": "t"}, "spec": {"owners": [{"kind": "User", "name": "bob"}]}})
    assert tenant.spec.owners is not None
    assert tenant.spec.owners[0].cluster_roles == ["admin", "enclave-namespace-deleter"]
    assert (tenant.spec.cordoned, tenant.spec.prevent_deletion, tenant.spec.force_tenant_prefix) == (False, False, None)
    owner = TenantOwner.model_validate({"metadata": {"name": "o"}, "spec": {"kind": "Group", "name": "g"}})
    assert owner.spec.cluster_roles == ["admin", "enclave-namespace-deleter"]
    assert owner.spec.aggregate is False


def test_quota_and_rule_defaults() -> None:
    quota = CustomQuota.model_validate(
        {"metadata": {"name": "q"}, "spec": {"limit": 1, "sources": [{"kind": "Pod", "path": ".spec"}]}}
    )
    assert quota.spec.options.emit_metric_per_claim_usage is False
    assert quota.spec.sources[0].op == "add"
    rules = RuleStatus.model_validate({"metadata": {"name": "r"}, "spec": [{"enforce": {}}]})
    assert rules.spec is not None
    assert rules.spec[0].enforce is not None
    assert rules.spec[0].enforce.action == "deny"


def test_replication_defaults() -> None:
    gtr = GlobalTenantResource.model_validate(
        {
            "metadata": {"name": "g"},
            "spec": {
                "resources": [
                    {"policy": {}, "generators": [{"template": "x"}], "namespacedItems": [{"kind": "Secret"}]}
                ]
            },
        }
    )
    spec = gtr.spec
    assert (spec.resync_period, spec.scope, spec.cordoned, spec.pruning_on_delete) == ("60s", "Namespace", False, True)
    assert (spec.settings.adopt, spec.settings.force) == (False, False)
    block = spec.resources[0]
    assert block.policy is not None
    assert (block.policy.creation, block.policy.deletion, block.policy.force, block.policy.protect) == (
        "Owner",
        "Remove",
        False,
        True,
    )
    assert block.generators is not None
    assert block.generators[0].missing_key == "zero"
    assert block.namespaced_items is not None
    assert block.namespaced_items[0].optional is True


def test_quantities_keep_the_users_spelling() -> None:
    claim = ResourcePoolClaim.model_validate(example("ResourcePoolClaim"))
    assert claim.spec.claim == {"requests.cpu": "2", "requests.memory": 1073741824}
    with pytest.raises(ValidationError, match="quantity"):
        ResourcePoolClaim.model_validate(
            {**example("ResourcePoolClaim"), "spec": {"claim": {"cpu": "2 cpus"}, "pool": "p"}}
        )


def test_deprecated_fields_are_accepted() -> None:
    config = ServiceConfiguration.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "userGroups": ["legacy-group"],
                "userNames": ["legacy-user"],
                "overrides": {
                    "mutatingWebhookConfigurationName": "old-mutating",
                    "validatingWebhookConfigurationName": "old-validating",
                },
            },
        }
    )
    assert config.spec.user_groups == ["legacy-group"]
    assert config.spec.user_names == ["legacy-user"]
    assert config.spec.overrides.mutating_webhook_configuration_name == "old-mutating"
    assert config.spec.overrides.tls_secret_name == "enclave-tls"

    gtr = GlobalTenantResource.model_validate(
        {
            "metadata": {"name": "g"},
            "spec": {"resources": [{}], "settings": {"adopt": True, "force": True}, "pruningOnDelete": False},
        }
    )
    assert (gtr.spec.settings.adopt, gtr.spec.settings.force, gtr.spec.pruning_on_delete) == (True, True, False)

    raw = example("ResourcePoolClaim")
    raw["status"] = status_example("ResourcePoolClaim")
    claim = ResourcePoolClaim.model_validate(raw)
    assert claim.status is not None
    assert claim.status.condition is not None
    assert claim.status.condition.type == "Ready"

    tenant = Tenant.model_validate(example("Tenant"))
    assert tenant.spec.rules is not None
    enforce = tenant.spec.rules[0].enforce
    assert enforce is not None
    assert enforce.workloads is not None
    assert enforce.workloads.schedulers is not None


def test_to_k8s_leaves_unset_optional_fields_out() -> None:
    out = TenantOwner.model_validate({"metadata": {"name": "o"}, "spec": {"kind": "User", "name": "u"}}).to_k8s()
    assert out == {
        "apiVersion": GROUP_VERSION,
        "kind": "TenantOwner",
        "metadata": {"name": "o"},
        "spec": {
            "kind": "User",
            "name": "u",
            "clusterRoles": ["admin", "enclave-namespace-deleter"],
            "aggregate": False,
        },
    }


@pytest.mark.parametrize("text", ["24h", "1h30m", "1.5h", ".5s", "500ms", "0", "10µs", "90s"])
def test_duration_pattern_accepts_what_parse_duration_accepts(text: str) -> None:
    assert re.fullmatch(GO_DURATION, text)
    parse_duration(text)


@pytest.mark.parametrize("text", ["", "1", "h", "-1h", "1d", "tomorrow", "1h "])
def test_duration_pattern_refuses_what_parse_duration_refuses(text: str) -> None:
    assert not re.fullmatch(GO_DURATION, text)
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)

"""The generated CRDs on a real kube-apiserver: they install, accept valid objects, reject bad ones.

Every invalid case must be refused with HTTP 422 and a message that names the offending field, so a
user learns from the error alone what to fix. Cases are data (see ``INVALID``); each one starts from
the valid example of its kind (:mod:`enclave_testing.examples`) and changes a few fields.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core import API_GROUP, API_VERSION
from enclave_core.api import KINDS, KindInfo, kind_info
from enclave_testing.examples import example, status_example

DELETE = object()
"""Marker value: remove the key instead of setting it."""


def _set(obj: Any, path: str, value: Any) -> None:
    """Set ``a.b[0].c`` (dots and list indexes; ``['x.y']`` for keys with dots) in ``obj``."""
    tokens = re.findall(r"\['([^']+)'\]|\[(\d+)\]|([^.\[\]]+)", path)
    keys: list[str | int] = [quoted or (int(index) if index else plain) for quoted, index, plain in tokens]
    target = obj
    for key in keys[:-1]:
        target = target[key] if isinstance(key, int) else target.setdefault(key, {})
    last = keys[-1]
    if value is DELETE:
        del target[last]
    else:
        target[last] = copy.deepcopy(value)


class Objects:
    """Creates Enclave objects in the test cluster and removes cluster-scoped ones afterwards."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.api = client.CustomObjectsApi(kube)
        self.namespace = namespace
        self._created: list[tuple[KindInfo, str]] = []

    def unique(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Give cluster-scoped objects a name no other test uses."""
        info = kind_info(obj["kind"])
        if not info.namespaced:
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{secrets.token_hex(3)}"
        return obj

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        info = kind_info(obj["kind"])
        if info.namespaced:
            out = self.api.create_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, info.plural, obj)
        else:
            out = self.api.create_cluster_custom_object(API_GROUP, API_VERSION, info.plural, obj)
        self._created.append((info, obj["metadata"]["name"]))
        return dict(out)

    def get(self, info: KindInfo, name: str) -> dict[str, Any]:
        if info.namespaced:
            return dict(
                self.api.get_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, info.plural, name)
            )
        return dict(self.api.get_cluster_custom_object(API_GROUP, API_VERSION, info.plural, name))

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        info, name = kind_info(obj["kind"]), obj["metadata"]["name"]
        if info.namespaced:
            return dict(
                self.api.replace_namespaced_custom_object(
                    API_GROUP, API_VERSION, self.namespace, info.plural, name, obj
                )
            )
        return dict(self.api.replace_cluster_custom_object(API_GROUP, API_VERSION, info.plural, name, obj))

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        info, name = kind_info(obj["kind"]), obj["metadata"]["name"]
        if info.namespaced:
            return dict(
                self.api.replace_namespaced_custom_object_status(
                    API_GROUP, API_VERSION, self.namespace, info.plural, name, obj
                )
            )
        return dict(self.api.replace_cluster_custom_object_status(API_GROUP, API_VERSION, info.plural, name, obj))

    def cleanup(self) -> None:
        for info, name in reversed(self._created):
            if not info.namespaced:
                with contextlib.suppress(ApiException):
                    self.api.delete_cluster_custom_object(API_GROUP, API_VERSION, info.plural, name)


@pytest.fixture
def objects(kube: Any, namespace: str, enclave_crds: list[str]) -> Iterator[Objects]:
    store = Objects(kube, namespace)
    yield store
    store.cleanup()


def test_every_crd_is_established(kube: Any, enclave_crds: list[str]) -> None:
    expected = {info.crd_name for info in KINDS}
    assert set(enclave_crds) == expected
    ext = client.ApiextensionsV1Api(kube)
    for name in expected:
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", name
        assert conditions.get("NamesAccepted") == "True", name


@pytest.mark.parametrize("info", KINDS, ids=lambda info: info.kind)
def test_valid_example_round_trips(objects: Objects, info: KindInfo) -> None:
    sample = objects.unique(example(info.kind))
    stored = objects.create(sample)

    # kube-apiserver applied the CRD defaults; the model applies the same ones, so both read equal.
    expected = info.model.model_validate(sample)
    got = info.model.model_validate(stored)
    assert got.model_dump(include={"spec"}) == expected.model_dump(include={"spec"})
    assert got.metadata.name == sample["metadata"]["name"]
    # What kube-apiserver stored is exactly what the model writes: defaults and pruning agree.
    assert {k: v for k, v in stored.items() if k in ("spec",)} == {
        k: v for k, v in expected.to_k8s().items() if k in ("spec",)
    }

    stored["status"] = status_example(info.kind)
    written = objects.replace_status(stored)
    status_of = info.model.model_validate
    assert status_of(written).model_dump(include={"status"}) == status_of(stored).model_dump(include={"status"})
    assert written["status"] == info.model.model_validate(stored).to_k8s()["status"]


def test_claim_pool_may_change_until_bound(objects: Objects) -> None:
    info = kind_info("ResourcePoolClaim")
    stored = objects.create(example("ResourcePoolClaim"))
    stored["spec"]["pool"] = "another-pool"
    stored = objects.replace(stored)  # not bound yet: allowed
    assert stored["spec"]["pool"] == "another-pool"
    status = status_example("ResourcePoolClaim")
    status["pool"] = {"name": "another-pool", "uid": "u-9"}
    stored["status"] = status
    stored = objects.replace_status(stored)
    stored["spec"]["claim"] = {"requests.cpu": "3"}  # other fields stay mutable once bound
    stored = objects.replace(stored)
    assert objects.get(info, stored["metadata"]["name"])["spec"]["claim"] == {"requests.cpu": "3"}


Target = Literal["create", "status", "update"]


@dataclass(frozen=True)
class Case:
    """An invalid object: the example of ``kind`` with ``changes``, refused naming ``field``."""

    id: str
    kind: str
    changes: tuple[tuple[str, Any], ...]
    field: str
    message: str
    target: Target = "create"
    before: tuple[tuple[str, Any], ...] = ()
    """For ``update``: changes applied (and stored through the status subresource) first."""


def _c(
    id: str,
    kind: str,
    changes: dict[str, Any],
    field: str,
    message: str,
    target: Target = "create",
    before: dict[str, Any] | None = None,
) -> Case:
    return Case(id, kind, tuple(changes.items()), field, message, target, tuple((before or {}).items()))


_SC = "ServiceConfiguration"
_MUT = "spec.admission.mutating"
_VAL = "spec.admission.validating"
_WH = f"{_VAL}.webhooks[0]"
_RULE = "spec.rules[0]"
_ENF = f"{_RULE}.enforce"
_TOO_MANY_CONDITIONS = [{"name": f"c{i}", "expression": "true"} for i in range(65)]
_UNSUPPORTED = "Unsupported value"

INVALID: list[Case] = [
    # ServiceConfiguration: webhook client
    _c(
        "client-url-and-service",
        _SC,
        {f"{_VAL}.client.service": {"name": "s", "namespace": "n"}},
        f"{_VAL}.client",
        "exactly one of client.url or client.service",
    ),
    _c(
        "client-neither",
        _SC,
        {f"{_MUT}.client.service": DELETE},
        f"{_MUT}.client",
        "exactly one of client.url or client.service",
    ),
    _c("url-http", _SC, {f"{_VAL}.client.url": "http://h.example.com/x"}, f"{_VAL}.client.url", "https://"),
    _c("url-userinfo", _SC, {f"{_VAL}.client.url": "https://u:p@h.example.com/"}, f"{_VAL}.client.url", "user info"),
    _c("url-query", _SC, {f"{_VAL}.client.url": "https://h.example.com/x?a=b"}, f"{_VAL}.client.url", "query"),
    _c("url-fragment", _SC, {f"{_VAL}.client.url": "https://h.example.com/x#f"}, f"{_VAL}.client.url", "fragment"),
    _c(
        "port-zero",
        _SC,
        {f"{_MUT}.client.service.port": 0},
        f"{_MUT}.client.service.port",
        "greater than or equal to 1",
    ),
    _c(
        "port-high",
        _SC,
        {f"{_MUT}.client.service.port": 65536},
        f"{_MUT}.client.service.port",
        "less than or equal to 65535",
    ),
    _c(
        "service-no-name", _SC, {f"{_MUT}.client.service.name": DELETE}, f"{_MUT}.client.service.name", "Required value"
    ),
    # webhook entries
    _c("timeout-zero", _SC, {f"{_WH}.timeoutSeconds": 0}, f"{_WH}.timeoutSeconds", "greater than or equal to 1"),
    _c("timeout-31", _SC, {f"{_WH}.timeoutSeconds": 31}, f"{_WH}.timeoutSeconds", "less than or equal to 30"),
    _c(
        "65-match-conditions",
        _SC,
        {f"{_WH}.matchConditions": _TOO_MANY_CONDITIONS},
        f"{_WH}.matchConditions",
        "at most 64",
    ),
    _c(
        "match-condition-name",
        _SC,
        {f"{_WH}.matchConditions[0].name": "-bad name"},
        f"{_WH}.matchConditions[0].name",
        "should match",
    ),
    _c(
        "match-condition-name-too-long",
        _SC,
        {f"{_WH}.matchConditions[0].name": "a" * 64},
        f"{_WH}.matchConditions[0].name",
        "should match",
    ),
    _c(
        "match-condition-duplicate",
        _SC,
        {f"{_WH}.matchConditions[1].name": "not-kube-system"},
        f"{_WH}.matchConditions[1]",
        "Duplicate value",
    ),
    _c(
        "match-condition-no-expression",
        _SC,
        {f"{_WH}.matchConditions[0].expression": DELETE},
        f"{_WH}.matchConditions[0].expression",
        "Required value",
    ),
    _c(
        "star-api-groups",
        _SC,
        {f"{_WH}.rules[1].apiGroups": ["*", "apps"]},
        f"{_WH}.rules[1].apiGroups",
        "'*' must be the only",
    ),
    _c(
        "star-api-versions",
        _SC,
        {f"{_WH}.rules[1].apiVersions": ["v1", "*"]},
        f"{_WH}.rules[1].apiVersions",
        "'*' must be the only",
    ),
    _c(
        "star-operations",
        _SC,
        {f"{_WH}.rules[1].operations": ["*", "CREATE"]},
        f"{_WH}.rules[1].operations",
        "'*' must be the only",
    ),
    _c(
        "star-resources",
        _SC,
        {f"{_WH}.rules[1].resources": ["pods", "*"]},
        f"{_WH}.rules[1].resources",
        "'*' must be the only",
    ),
    _c("operation-enum", _SC, {f"{_WH}.rules[0].operations": ["PATCH"]}, f"{_WH}.rules[0].operations[0]", _UNSUPPORTED),
    _c("rule-scope-enum", _SC, {f"{_WH}.rules[0].scope": "Everywhere"}, f"{_WH}.rules[0].scope", _UNSUPPORTED),
    _c("side-effects-enum", _SC, {f"{_WH}.sideEffects": "Maybe"}, f"{_WH}.sideEffects", _UNSUPPORTED),
    _c("side-effects-required", _SC, {f"{_WH}.sideEffects": DELETE}, f"{_WH}.sideEffects", "Required value"),
    _c("failure-policy-enum", _SC, {f"{_WH}.failurePolicy": "Sometimes"}, f"{_WH}.failurePolicy", _UNSUPPORTED),
    _c("match-policy-enum", _SC, {f"{_WH}.matchPolicy": "Fuzzy"}, f"{_WH}.matchPolicy", _UNSUPPORTED),
    _c(
        "reinvocation-enum",
        _SC,
        {f"{_MUT}.webhooks[0].reinvocationPolicy": "Always"},
        f"{_MUT}.webhooks[0].reinvocationPolicy",
        _UNSUPPORTED,
    ),
    _c("webhook-name-not-qualified", _SC, {f"{_WH}.name": "namespaces"}, f"{_WH}.name", "should match"),
    _c("webhook-path-relative", _SC, {f"{_WH}.path": "namespaces"}, f"{_WH}.path", "should match"),
    _c(
        "webhook-review-versions-missing",
        _SC,
        {f"{_WH}.admissionReviewVersions": DELETE},
        f"{_WH}.admissionReviewVersions",
        "Required value",
    ),
    _c(
        "webhook-review-versions-empty",
        _SC,
        {f"{_WH}.admissionReviewVersions": []},
        f"{_WH}.admissionReviewVersions",
        "at least 1 items",
    ),
    _c(
        "selector-operator-enum",
        _SC,
        {f"{_WH}.namespaceSelector.matchExpressions[0].operator": "Maybe"},
        f"{_WH}.namespaceSelector.matchExpressions[0].operator",
        _UNSUPPORTED,
    ),
    _c(
        "selector-in-without-values",
        _SC,
        {f"{_WH}.namespaceSelector.matchExpressions[0].operator": "In"},
        f"{_WH}.namespaceSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    _c(
        "selector-exists-with-values",
        _SC,
        {f"{_WH}.objectSelector.matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        f"{_WH}.objectSelector.matchExpressions[0].values",
        "values must be empty",
    ),
    # ServiceConfiguration: other fields
    _c("entity-kind-enum", _SC, {"spec.users[0].kind": "Robot"}, "spec.users[0].kind", _UNSUPPORTED),
    _c(
        "entity-name-required",
        _SC,
        {"spec.administrators[0].name": DELETE},
        "spec.administrators[0].name",
        "Required value",
    ),
    _c(
        "cache-invalidation-duration",
        _SC,
        {"spec.cacheInvalidation": "tomorrow"},
        "spec.cacheInvalidation",
        "should match",
    ),
    _c("spec-required", _SC, {"spec": DELETE}, "spec", "Required value"),
    # Tenant
    _c(
        "tenant-name-not-label",
        "Tenant",
        {"metadata.name": "solar.prod"},
        "metadata.name",
        "DNS-1123 label",
    ),
    _c("tenant-name-too-long", "Tenant", {"metadata.name": "t" * 70}, "metadata.name", "DNS-1123 label"),
    _c("owner-kind-enum", "Tenant", {"spec.owners[0].kind": "Team"}, "spec.owners[0].kind", _UNSUPPORTED),
    _c(
        "owner-duplicate",
        "Tenant",
        {"spec.owners[1]": {"kind": "User", "name": "alice"}},
        "spec.owners[1]",
        "Duplicate value",
    ),
    _c(
        "namespace-quota-negative",
        "Tenant",
        {"spec.namespaceOptions.quota": -1},
        "spec.namespaceOptions.quota",
        "greater than or equal to 0",
    ),
    _c(
        "subject-sa-without-namespace",
        "Tenant",
        {"spec.additionalRoleBindings[0].subjects[1].namespace": DELETE},
        "spec.additionalRoleBindings[0].subjects[1].namespace",
        "namespace is required when kind is ServiceAccount",
    ),
    _c("tenant-data-not-object", "Tenant", {"spec.data": ["a"]}, "spec.data", "must be of type object"),
    # rule bodies (inside Tenant.spec.rules)
    _c("action-enum", "Tenant", {f"{_ENF}.action": "block"}, f"{_ENF}.action", _UNSUPPORTED),
    _c(
        "value-matcher-empty",
        "Tenant",
        {f"{_ENF}.ingress.hostnames[0]": {"negate": True}},
        f"{_ENF}.ingress.hostnames[0]",
        "at least one of exact or exp",
    ),
    _c(
        "metadata-value-matcher-empty",
        "Tenant",
        {f"{_ENF}.metadata[0].labels.team.values[0]": {"exact": []}},
        f"{_ENF}.metadata[0].labels[team].values[0]",
        "at least one of exact or exp",
    ),
    _c(
        "metadata-kinds-required",
        "Tenant",
        {f"{_ENF}.metadata[0].kinds": DELETE},
        f"{_ENF}.metadata[0].kinds",
        "Required value",
    ),
    _c("ingress-type-enum", "Tenant", {f"{_ENF}.ingress.types": ["Service"]}, f"{_ENF}.ingress.types[0]", _UNSUPPORTED),
    _c(
        "service-type-enum",
        "Tenant",
        {f"{_ENF}.services.types": ["Headless"]},
        f"{_ENF}.services.types[0]",
        _UNSUPPORTED,
    ),
    _c(
        "node-port-from-zero",
        "Tenant",
        {f"{_ENF}.services.nodePorts.ports[0].from": 0},
        f"{_ENF}.services.nodePorts.ports[0].from",
        "greater than or equal to 1",
    ),
    _c(
        "node-port-to-high",
        "Tenant",
        {f"{_ENF}.services.nodePorts.ports[0].to": 65536},
        f"{_ENF}.services.nodePorts.ports[0].to",
        "less than or equal to 65535",
    ),
    _c(
        "node-port-from-above-to",
        "Tenant",
        {f"{_ENF}.services.nodePorts.ports[0]": {"from": 31000, "to": 30000}},
        f"{_ENF}.services.nodePorts.ports[0].from",
        "from must be <= to",
    ),
    _c(
        "network-cidr-invalid",
        "Tenant",
        {f"{_ENF}.network.policies.egress.cidrs": ["10.0.0.0/33"]},
        f"{_ENF}.network.policies.egress.cidrs",
        "IP address or a CIDR",
    ),
    _c(
        "external-ip-invalid",
        "Tenant",
        {f"{_ENF}.services.externalIPs.cidrs": ["not-an-ip"]},
        f"{_ENF}.services.externalIPs.cidrs",
        "IP address or a CIDR",
    ),
    _c(
        "audience-kind-enum",
        "Tenant",
        {f"{_RULE}.audience[0].kind": "Robot"},
        f"{_RULE}.audience[0].kind",
        _UNSUPPORTED,
    ),
    _c(
        "qos-class-enum",
        "Tenant",
        {f"{_ENF}.workloads.qosClasses": ["Premium"]},
        f"{_ENF}.workloads.qosClasses[0]",
        _UNSUPPORTED,
    ),
    _c(
        "workload-target-pattern",
        "Tenant",
        {f"{_ENF}.workloads.targets": ["Foo"]},
        f"{_ENF}.workloads.targets[0]",
        "should match",
    ),
    _c(
        "toleration-operator-enum",
        "Tenant",
        {f"{_ENF}.workloads.placement.tolerations[0].operator": "Maybe"},
        f"{_ENF}.workloads.placement.tolerations[0].operator",
        _UNSUPPORTED,
    ),
    _c(
        "pull-policy-enum",
        "Tenant",
        {f"{_ENF}.workloads.registries[0].pullPolicies": ["Sometimes"]},
        f"{_ENF}.workloads.registries[0].pullPolicies[0]",
        _UNSUPPORTED,
    ),
    _c(
        "storage-volume-selector-required",
        "Tenant",
        {f"{_ENF}.storage.volumes[0].selector": DELETE},
        f"{_ENF}.storage.volumes[0].selector",
        "Required value",
    ),
    _c(
        "enforce-condition-names-unique",
        "Tenant",
        {f"{_ENF}.conditions": [{"name": "dup", "expression": "true"}, {"name": "dup", "expression": "false"}]},
        f"{_ENF}.conditions",
        "names must be unique",
    ),
    _c(
        "mutation-both",
        "Tenant",
        {f"{_RULE}.mutate[0].workloads": {"imagePullPolicy": "Always"}},
        f"{_RULE}.mutate[0]",
        "exactly one of metadata or workloads",
    ),
    _c(
        "mutation-neither",
        "Tenant",
        {f"{_RULE}.mutate[0]": {"name": "empty"}},
        f"{_RULE}.mutate[0]",
        "exactly one of metadata or workloads",
    ),
    _c(
        "rule-quota-duplicate",
        "Tenant",
        {f"{_RULE}.quota": [{"name": "compute", "hard": {"pods": 1}}, {"name": "compute", "hard": {"pods": 2}}]},
        f"{_RULE}.quota[1]",
        "Duplicate value",
    ),
    _c(
        "rule-quota-scope-values",
        "Tenant",
        {f"{_RULE}.quota[0].scopeSelector.matchExpressions[0].operator": "In"},
        f"{_RULE}.quota[0].scopeSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    _c(
        "rule-namespace-selector-values",
        "Tenant",
        {f"{_RULE}.namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "NotIn"}]}},
        f"{_RULE}.namespaceSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    # RuleStatus
    _c(
        "rulestatus-action-enum",
        "RuleStatus",
        {"spec[1].enforce.action": "warn"},
        "spec[1].enforce.action",
        _UNSUPPORTED,
    ),
    _c(
        "rulestatus-quota-hard-quantity",
        "RuleStatus",
        {"spec[0].quota[0].hard['requests.cpu']": "eight"},
        "spec[0].quota[0].hard.requests.cpu",
        "should match",
    ),
    # TenantOwner
    _c("tenant-owner-kind-required", "TenantOwner", {"spec.kind": DELETE}, "spec.kind", "Required value"),
    _c("tenant-owner-kind-enum", "TenantOwner", {"spec.kind": "Robot"}, "spec.kind", _UNSUPPORTED),
    # CustomQuota / GlobalCustomQuota
    _c(
        "count-with-path",
        "CustomQuota",
        {"spec.sources[1].path": ".spec"},
        "spec.sources[1].path",
        "path must be empty when op is count",
    ),
    _c(
        "count-with-cel",
        "CustomQuota",
        {"spec.sources[1].cel": "1"},
        "spec.sources[1].cel",
        "cel must be empty when op is count",
    ),
    _c(
        "add-without-path-or-cel",
        "CustomQuota",
        {"spec.sources[0].path": DELETE},
        "spec.sources[0]",
        "exactly one of path or cel",
    ),
    _c(
        "sub-with-path-and-cel",
        "CustomQuota",
        {"spec.sources[2].path": ".spec"},
        "spec.sources[2]",
        "exactly one of path or cel",
    ),
    _c("op-enum", "CustomQuota", {"spec.sources[0].op": "mul"}, "spec.sources[0].op", _UNSUPPORTED),
    _c("sources-empty", "CustomQuota", {"spec.sources": []}, "spec.sources", "at least 1 items"),
    _c(
        "source-kind-required",
        "CustomQuota",
        {"spec.sources[0].kind": DELETE},
        "spec.sources[0].kind",
        "Required value",
    ),
    _c(
        "source-api-version-pattern",
        "CustomQuota",
        {"spec.sources[1].apiVersion": "Apps/V1"},
        "spec.sources[1].apiVersion",
        "should match",
    ),
    _c("limit-not-quantity", "CustomQuota", {"spec.limit": "lots"}, "spec.limit", "should match"),
    _c("limit-required", "CustomQuota", {"spec.limit": DELETE}, "spec.limit", "Required value"),
    _c(
        "source-selector-values",
        "CustomQuota",
        {"spec.sources[0].selectors[0].matchExpressions[0].operator": "DoesNotExist"},
        "spec.sources[0].selectors[0].matchExpressions[0].values",
        "values must be empty",
    ),
    _c(
        "scope-selectors-values",
        "CustomQuota",
        {"spec.scopeSelectors[0].matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        "spec.scopeSelectors[0].matchExpressions[0].values",
        "values must be non-empty",
    ),
    _c(
        "global-namespace-selectors-values",
        "GlobalCustomQuota",
        {"spec.namespaceSelectors[0].matchExpressions[0].operator": "Exists"},
        "spec.namespaceSelectors[0].matchExpressions[0].values",
        "values must be empty",
    ),
    _c(
        "global-count-with-cel",
        "GlobalCustomQuota",
        {"spec.sources[0].op": "count"},
        "spec.sources[0].cel",
        "cel must be empty when op is count",
    ),
    # GlobalResourceQuota
    _c(
        "grq-hard-quantity",
        "GlobalResourceQuota",
        {"spec.quota.hard.pods": "many"},
        "spec.quota.hard.pods",
        "should match",
    ),
    _c(
        "grq-scope-operator-enum",
        "GlobalResourceQuota",
        {"spec.quota.scopeSelector.matchExpressions[0].operator": "Any"},
        "spec.quota.scopeSelector.matchExpressions[0].operator",
        _UNSUPPORTED,
    ),
    _c(
        "grq-scope-not-in-empty",
        "GlobalResourceQuota",
        {"spec.quota.scopeSelector.matchExpressions[0]": {"operator": "NotIn", "scopeName": "PriorityClass"}},
        "spec.quota.scopeSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    _c(
        "grq-scope-exists-values",
        "GlobalResourceQuota",
        {"spec.quota.scopeSelector.matchExpressions[0].operator": "Exists"},
        "spec.quota.scopeSelector.matchExpressions[0].values",
        "values must be empty",
    ),
    _c("grq-quota-required", "GlobalResourceQuota", {"spec.quota": DELETE}, "spec.quota", "Required value"),
    # GlobalTenantResource / TenantResource
    _c("gtr-scope-enum", "GlobalTenantResource", {"spec.scope": "Cluster"}, "spec.scope", _UNSUPPORTED),
    _c(
        "gtr-creation-enum",
        "GlobalTenantResource",
        {"spec.resources[0].policy.creation": "Replace"},
        "spec.resources[0].policy.creation",
        _UNSUPPORTED,
    ),
    _c(
        "gtr-deletion-enum",
        "GlobalTenantResource",
        {"spec.resources[0].policy.deletion": "Delete"},
        "spec.resources[0].policy.deletion",
        _UNSUPPORTED,
    ),
    _c(
        "gtr-missing-key-enum",
        "GlobalTenantResource",
        {"spec.resources[0].generators[0].missingKey": "default"},
        "spec.resources[0].generators[0].missingKey",
        _UNSUPPORTED,
    ),
    _c(
        "gtr-resync-duration",
        "GlobalTenantResource",
        {"spec.resyncPeriod": "soon"},
        "spec.resyncPeriod",
        "should match",
    ),
    _c(
        "gtr-service-account-namespace",
        "GlobalTenantResource",
        {"spec.serviceAccount.namespace": DELETE},
        "spec.serviceAccount.namespace",
        "Required value",
    ),
    _c(
        "gtr-raw-item-kind",
        "GlobalTenantResource",
        {"spec.resources[1].rawItems[0].kind": DELETE},
        "spec.resources[1].rawItems[0].kind",
        "Required value",
    ),
    _c(
        "gtr-tenant-selector-values",
        "GlobalTenantResource",
        {"spec.tenantSelector.matchExpressions": [{"key": "a", "operator": "In"}]},
        "spec.tenantSelector.matchExpressions[0].values",
        "values must be non-empty",
    ),
    _c("tr-resources-required", "TenantResource", {"spec.resources": DELETE}, "spec.resources", "Required value"),
    _c(
        "tr-depends-on-name",
        "TenantResource",
        {"spec.dependsOn": [{"name": ""}]},
        "spec.dependsOn[0].name",
        "at least 1 chars long",
    ),
    _c(
        "tr-context-name-missing-kind",
        "TenantResource",
        {"spec.resources[0].context.resources[0].kind": DELETE},
        "spec.resources[0].context.resources[0].kind",
        "Required value",
    ),
    # QuantityLedger
    _c(
        "ledger-cluster-target-with-namespace",
        "QuantityLedger",
        {"spec.targetRef.kind": "GlobalResourceQuota"},
        "spec.targetRef.namespace",
        "must be empty for cluster-scoped targets",
    ),
    _c(
        "ledger-custom-quota-without-namespace",
        "QuantityLedger",
        {"spec.targetRef.namespace": DELETE},
        "spec.targetRef.namespace",
        "required for a CustomQuota target",
    ),
    _c(
        "ledger-target-kind-required",
        "QuantityLedger",
        {"spec.targetRef.kind": DELETE},
        "spec.targetRef.kind",
        "Required value",
    ),
    _c(
        "ledger-target-immutable",
        "QuantityLedger",
        {"spec.targetRef.name": "other"},
        "spec.targetRef",
        "targetRef is immutable",
        "update",
    ),
    # ResourcePool / ResourcePoolClaim
    _c("pool-quota-required", "ResourcePool", {"spec.quota": DELETE}, "spec.quota", "Required value"),
    _c(
        "pool-defaults-quantity",
        "ResourcePool",
        {"spec.defaults['requests.cpu']": "half"},
        "spec.defaults.requests.cpu",
        "should match",
    ),
    _c(
        "pool-selector-values",
        "ResourcePool",
        {"spec.selectors[0].matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["b"]}]},
        "spec.selectors[0].matchExpressions[0].values",
        "values must be empty",
    ),
    _c("claim-pool-required", "ResourcePoolClaim", {"spec.pool": DELETE}, "spec.pool", "Required value"),
    _c("claim-empty", "ResourcePoolClaim", {"spec.claim": {}}, "spec.claim", "at least 1 properties"),
    _c(
        "claim-quantity",
        "ResourcePoolClaim",
        {"spec.claim['requests.cpu']": "2 cpus"},
        "spec.claim.requests.cpu",
        "should match",
    ),
    _c(
        "claim-pool-immutable-once-bound",
        "ResourcePoolClaim",
        {"spec.pool": "other-pool"},
        "spec.pool",
        "immutable once the claim is bound",
        "update",
        before={"status": status_example("ResourcePoolClaim")},
    ),
    # Conditions and other status fields (status subresource)
    _c(
        "condition-type-pattern",
        "Tenant",
        {"status.conditions[0].type": "not camel"},
        "status.conditions[0].type",
        "should match",
        "status",
    ),
    _c(
        "condition-status-enum",
        "Tenant",
        {"status.conditions[0].status": "Maybe"},
        "status.conditions[0].status",
        _UNSUPPORTED,
        "status",
    ),
    _c(
        "condition-reason-empty",
        "TenantOwner",
        {"status.conditions[0].reason": ""},
        "status.conditions[0].reason",
        "at least 1 chars long",
        "status",
    ),
    _c(
        "condition-reason-pattern",
        "TenantOwner",
        {"status.conditions[0].reason": "not camel"},
        "status.conditions[0].reason",
        "should match",
        "status",
    ),
    _c(
        "condition-message-required",
        "CustomQuota",
        {"status.conditions[0].message": DELETE},
        "status.conditions[0].message",
        "Required value",
        "status",
    ),
    _c(
        "condition-time-format",
        "ResourcePool",
        {"status.conditions[0].lastTransitionTime": "yesterday"},
        "status.conditions[0].lastTransitionTime",
        "date-time",
        "status",
    ),
    _c(
        "condition-observed-generation",
        "GlobalResourceQuota",
        {"status.conditions[0].observedGeneration": -1},
        "status.conditions[0].observedGeneration",
        "greater than or equal to 0",
        "status",
    ),
    _c(
        "status-conditions-required",
        "CustomQuota",
        {"status.conditions": DELETE},
        "status.conditions",
        "Required value",
        "status",
    ),
    _c(
        "status-size-negative",
        "TenantResource",
        {"status.size": -1},
        "status.size",
        "greater than or equal to 0",
        "status",
    ),
    _c(
        "claim-deprecated-condition",
        "ResourcePoolClaim",
        {"status.condition.status": "Yes"},
        "status.condition.status",
        _UNSUPPORTED,
        "status",
    ),
]


def _cause_text(err: ApiException) -> str:
    """The message plus every cause, as a user would read them (kubectl prints both)."""
    body = json.loads(err.body)
    causes = body.get("details", {}).get("causes", [])
    return "\n".join([body.get("message", ""), *(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)])


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_invalid_object_is_rejected(objects: Objects, case: Case) -> None:
    info = kind_info(case.kind)
    obj = objects.unique(example(case.kind))
    if case.target == "create":
        for path, value in case.changes:
            _set(obj, path, value)
        with pytest.raises(ApiException) as raised:
            objects.create(obj)
    else:
        stored = objects.create(obj)
        if case.target == "status":
            stored["status"] = status_example(case.kind)
        for path, value in case.before:
            _set(stored, path, value)
        if case.before:
            stored = objects.replace_status(stored)
        for path, value in case.changes:
            _set(stored, path, value)
        write = objects.replace_status if case.target == "status" else objects.replace
        with pytest.raises(ApiException) as raised:
            write(stored)
        # Nothing invalid was stored.
        assert objects.get(info, stored["metadata"]["name"])["metadata"]["generation"] in (1, None)
    err = raised.value
    text = _cause_text(err)
    assert err.status == 422, text
    assert case.field in text, f"field {case.field!r} not named in:\n{text}"
    assert case.message in text, f"{case.message!r} not in:\n{text}"


def test_invalid_table_covers_every_kind() -> None:
    assert {case.kind for case in INVALID} == {info.kind for info in KINDS}
    assert len({case.id for case in INVALID}) == len(INVALID) >= 60

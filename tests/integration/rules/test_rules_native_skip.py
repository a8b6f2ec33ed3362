"""``spec.rules.engine: native`` saves the webhook round trip: a namespace whose rules are all policies (its
label mutations and default values a MutatingAdmissionPolicy) carries ``enclave.dev/native-rules`` and the
``resources`` hooks are not called for it; a namespace with a rule left on
the webhook is still judged there. Counted by admission's own request counter, on the real control plane.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import NATIVE_RULES_LABEL
from enclave_testing.components import RunningComponent
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, VERSION, Stack, eventually_refused

NATIVE = {
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["Pod"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
    }
}
MUTATING = {
    "mutate": [{"metadata": {"kinds": ["Pod"], "labels": {"team": "native"}}}],
    "enforce": {
        "action": "allow",
        "metadata": [{"kinds": ["Pod"], "labels": {"owner": {"default": "platform"}, "cost": {"managed": "cc"}}}],
    },
}
"""A mutation, a default and a managed value: the MutatingAdmissionPolicy sets them (Kubernetes 1.36 and later),
the ValidatingAdmissionPolicy refuses any other managed value."""
ON_WEBHOOK = {
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["Pod"], "labels": {"team": {}}}],
        "conditions": [{"name": "always", "expression": "now > timestamp('2000-01-01T00:00:00Z')"}],
    }
}
ROUTES = ("/resources", "/resources/mutate")


def set_engine(stack: Stack, engine: str) -> None:
    patch = {"spec": {"rules": {"engine": engine}}}
    client.CustomObjectsApi(stack.kube).patch_cluster_custom_object(
        GROUP, VERSION, "serviceconfigurations", stack.config_name, patch
    )


def webhook_calls(admission: RunningComponent) -> float:
    """AdmissionReviews admission received on the rules routes, from its metrics."""
    with urllib.request.urlopen(f"{admission.probe_url}/metrics", timeout=5) as answer:
        lines = answer.read().decode().splitlines()
    wanted = {f'enclave_admission_requests_total{{path="{route}"}}' for route in ROUTES}
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[0] in wanted)


def native_label(stack: Stack, namespace: str) -> str | None:
    labels = client.CoreV1Api(stack.kube).read_namespace(namespace).metadata.labels or {}
    value: str | None = labels.get(NATIVE_RULES_LABEL)
    return value


def pod(**labels: str) -> dict[str, Any]:
    return {
        "metadata": {"generateName": "p-", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]},
    }


def policy_refusal(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    message = str(json.loads(caught.value.body or "{}").get("message", ""))
    assert "ValidatingAdmissionPolicy" in message, message
    return message


def test_a_native_tenants_pod_create_skips_the_webhook_and_a_webhook_tenants_does_not(stack: Stack) -> None:
    admission = next(running for running in stack.processes if running.spec.name == "admission")
    native_owner, webhook_owner = unique("nso"), unique("wso")
    native_tenant = stack.tenant(native_owner, [NATIVE, MUTATING])
    webhook_tenant = stack.tenant(webhook_owner, [NATIVE, ON_WEBHOOK])
    native_ns = stack.namespace_of(native_tenant, native_owner)
    webhook_ns = stack.namespace_of(webhook_tenant, webhook_owner)
    stack.wait_rules(native_ns, 2)
    stack.wait_rules(webhook_ns, 2)
    set_engine(stack, "native")
    try:
        poll(lambda: native_label(stack, native_ns) == "true", timeout=60, what="the native-rules label")
        assert native_label(stack, webhook_ns) is None  # its second rule reads `now`: the webhook's
        conditions = stack.rule_status(native_ns)["status"]["conditions"]
        (native_policies,) = [c for c in conditions if c["type"] == "NativePolicies"]
        assert native_policies["status"] == "True", native_policies
        assert "the resources hooks skip the namespace" in native_policies["message"], native_policies

        native_core, webhook_core = stack.core(native_owner), stack.core(webhook_owner)
        before = webhook_calls(admission)
        message = policy_refusal(lambda: native_core.create_namespaced_pod(native_ns, pod(env="prod")))
        assert f"Tenant {native_tenant} spec.rules[0] denies metadata.labels['env']='prod'" in message
        created = native_core.create_namespaced_pod(native_ns, pod(env="dev", cost="free"))
        assert created.metadata.labels == {"env": "dev", "team": "native", "owner": "platform", "cost": "cc"}
        assert webhook_calls(admission) == before  # no decision nor mutation reached admission

        eventually_refused(
            lambda: webhook_core.create_namespaced_pod(webhook_ns, pod(team="x")),
            f"Tenant {webhook_tenant} spec.rules[1]",
        )
        webhook_core.create_namespaced_pod(webhook_ns, pod(env="dev"))
        assert webhook_calls(admission) >= before + 4  # mutating and validating, twice

        # engine both: native enforces, the webhook still audits, so it is called again.
        set_engine(stack, "both")
        poll(lambda: native_label(stack, native_ns) is None, timeout=30, what="the label removed under both")
    finally:
        set_engine(stack, "webhook")
    poll(lambda: native_label(stack, native_ns) is None, timeout=30, what="the label removed under webhook")
    eventually_refused(
        lambda: stack.core(native_owner).create_namespaced_pod(native_ns, pod(env="prod")),
        f"Tenant {native_tenant} spec.rules[0]",
    )

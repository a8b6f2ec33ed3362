"""``spec.rules.engine: native``: enclave-tenants keeps ValidatingAdmissionPolicies in step with the rules, and
kube-apiserver enforces them itself, through an admission outage.

The outage: the admission process is paused (SIGSTOP) with the rules hooks' failure policy at ``Ignore`` (the
chart's setting for installations whose rules are conventions), so a webhook that does not answer admits.
A rule that compiled to a policy still refuses; a rule left on the webhook does not.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, VERSION, Stack, eventually_refused

NATIVE = {
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
    }
}
ON_WEBHOOK = {
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["ConfigMap"], "labels": {"team": {}}}],
        "conditions": [{"name": "always", "expression": "now > timestamp('2000-01-01T00:00:00Z')"}],
    }
}

NOT_OFFERED = {
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["ConfigMap"], "labels": {"tier": {}}}],
        "conditions": [{"name": "greatest", "expression": "math.greatest(1, 2) == 2"}],
    }
}
"""A condition Enclave's CEL engine takes and kube-apiserver's policy environment does not (no ``math``
library): compiled into the policy, kube-apiserver would refuse to store it, and no rule of the namespace would
be enforced natively."""


def _configure(stack: Stack, engine: str, failure_policy: str) -> None:
    custom = client.CustomObjectsApi(stack.kube)
    config = custom.get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name)
    admission = config["spec"]["admission"]
    for side in ("validating", "mutating"):
        for hook in admission[side]["webhooks"]:
            if hook["name"] in ("resources.enclave.dev", "resources.mutate.enclave.dev"):
                hook["failurePolicy"] = failure_policy
                hook["timeoutSeconds"] = 2
    patch = {"spec": {"rules": {"engine": engine}, "admission": admission}}
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name, patch)
    registrations = client.AdmissionregistrationV1Api(stack.kube)

    def applied() -> bool:
        hooks = registrations.read_validating_webhook_configuration(f"{stack.config_name}-validating").webhooks
        return any(h.name == "resources.enclave.dev" and h.failure_policy == failure_policy for h in hooks)

    poll(applied, timeout=30, what=f"the resources hook at failurePolicy {failure_policy}")


def _policy_refusal(call: Any) -> str:
    """The refusal's message when a ValidatingAdmissionPolicy refused ``call``, else '' (admitted, or refused
    otherwise: the webhook timing out is not what is asked)."""
    try:
        call()
    except ApiException as err:
        message = str(json.loads(err.body or "{}").get("message", ""))
        return message if "ValidatingAdmissionPolicy" in message else ""
    return ""


def _assert_kube_apiserver_refuses(registrations: client.AdmissionregistrationV1Api, expression: str) -> None:
    """What compiling such a condition into the policy would meet: kube-apiserver refuses the policy (422)."""
    body = {
        "metadata": {"generateName": "enclave-test-not-offered-"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
                ]
            },
            "validations": [{"expression": expression}],
        },
    }
    with pytest.raises(ApiException) as refused:
        registrations.create_validating_admission_policy(body, dry_run="All")
    assert refused.value.status == 422, refused.value.body
    assert "math.greatest" in str(refused.value.body)


def _configmap(**labels: str) -> dict[str, Any]:
    return {"metadata": {"generateName": "c-", "labels": labels}, "data": {"k": "v"}}


def test_native_rules_are_policies_and_refuse_while_admission_is_stopped(stack: Stack) -> None:
    owner = unique("nap")
    tenant = stack.tenant(owner, [NATIVE, ON_WEBHOOK, NOT_OFFERED])
    namespace = stack.namespace_of(tenant, owner)
    stack.wait_rules(namespace, 3)
    _configure(stack, "native", "Ignore")
    registrations = client.AdmissionregistrationV1Api(stack.kube)
    selector = f"enclave.dev/native-rules-tenant={tenant}"

    def bound() -> Any:
        bindings = registrations.list_validating_admission_policy_binding(label_selector=selector).items
        for binding in bindings:
            names = [e.values for e in binding.spec.match_resources.namespace_selector.match_expressions]
            if [namespace] in names:
                return binding
        return None

    binding = poll(bound, timeout=30, what="a policy binding for the namespace")
    assert binding.spec.validation_actions == ["Deny"]
    policy = registrations.read_validating_admission_policy(binding.spec.policy_name)
    assert policy.spec.failure_policy == "Fail"

    # The rule left on the webhook is reported: condition and Event.
    def reported() -> Any:
        conditions = (stack.rule_status(namespace).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "NativePolicies"), None)

    condition = poll(reported, timeout=30, what="the NativePolicies condition")
    assert condition["status"] == "False", condition
    assert condition["reason"] == "OnWebhook"
    assert f"Tenant {tenant} spec.rules[1] metadata: enforce.conditions[0] reads `now`" in condition["message"]
    not_offered = f"Tenant {tenant} spec.rules[2] metadata: enforce.conditions[0] cannot be a policy expression: "
    assert not_offered + "math.greatest() is not in kube-apiserver's CEL environment" in condition["message"]
    _assert_kube_apiserver_refuses(registrations, "math.greatest(1, 2) == 2")
    poll(
        lambda: [
            e
            for e in client.CoreV1Api(stack.kube).list_namespaced_event(namespace).items
            if e.reason == "RuleNotNative"
        ],
        what="a RuleNotNative Event",
    )
    # A deleted policy comes back (level-based).
    registrations.delete_validating_admission_policy(policy.metadata.name)
    poll(lambda: registrations.read_validating_admission_policy(policy.metadata.name), what="the policy recreated")

    core = stack.core(owner)
    admission = next(running for running in stack.processes if running.spec.name == "admission")
    popen = admission.process.popen
    assert popen is not None
    popen.send_signal(signal.SIGSTOP)
    try:
        message = poll(
            lambda: _policy_refusal(lambda: core.create_namespaced_config_map(namespace, _configmap(env="prod"))),
            timeout=30,
            what="the policy's refusal",
        )
        assert f"Tenant {tenant} spec.rules[0] denies metadata.labels['env']='prod'" in message
        assert "admission webhook" not in message
        # What only the webhook judges passes while it is stopped and the hook ignores failures.
        core.create_namespaced_config_map(namespace, _configmap(team="x"))
    finally:
        popen.send_signal(signal.SIGCONT)
        _configure(stack, "webhook", "Fail")
    # Back to the webhook engine: the policies go.
    poll(lambda: not registrations.list_validating_admission_policy(label_selector=selector).items, what="no policy")
    eventually_refused(lambda: core.create_namespaced_config_map(namespace, _configmap(team="x")), "spec.rules[1]")

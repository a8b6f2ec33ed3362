"""``enclave test``'s native engine on workload rules, which go native by default: a Pod within the rules'
envelope is judged (the compiler proved the rule's cost there within kube-apiserver's limits, so the engine runs
it without its static estimate, far above what kube-apiserver counts); a hostile Pod past it is answered within
seconds and never admitted offline (undecided, refused in the engine's words, the webhook standing in).

kube-apiserver's own answers on the same Pods: tests/integration/rules/test_rules_native_differential.py."""

from __future__ import annotations

import functools
import time
from typing import Any

from enclave_cli.native import PolicyVerdict, judge_policy
from enclave_core.api.rules import AppliedRule
from enclave_tenants.native.compiler import compile_namespace
from enclave_tenants.native.objects import policies
from enclave_tenants.native.workload_limits import ENVELOPE_ITEMS, ENVELOPE_TEXT

RULE = {
    "origin": {"kind": "Tenant", "name": "t", "index": 0},
    "enforce": {"action": "allow", "workloads": {"registries": [{"url": "^registry\\.example/"}]}},
}
LABELS = {"enclave.dev/tenant": "t", "kubernetes.io/metadata.name": "ns"}


def _pod(containers: int, image_length: int, refused: bool = True) -> dict[str, Any]:
    prefix = "quay.io/" if refused else "registry.example/"
    image = prefix + "x" * (image_length - len(prefix))
    spec = {"containers": [{"name": f"c{i}", "image": image} for i in range(containers)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@functools.cache
def _compiled() -> tuple[dict[str, Any], dict[str, Any]]:
    """The rule's policy and binding, as enclave-tenants writes them."""
    program = compile_namespace([AppliedRule.model_validate(RULE)])
    objects = policies("t", program, ["ns"], enclave_namespace="enclave", ignored_groups=[])
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["spec"]["policyName"] == policy["metadata"]["name"]
    )
    return policy, binding


def _judge(pod: dict[str, Any]) -> PolicyVerdict:
    policy, binding = _compiled()
    request = {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "ns",
        "name": "p",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["g"]},
        "object": pod,
        "oldObject": None,
    }
    return judge_policy(policy, binding, request, LABELS)


def test_a_registry_rule_is_native_by_default() -> None:
    """The rule the engine's static estimate kept on the webhook (1.31e6 at 32 characters) is native now."""
    program = compile_namespace([AppliedRule.model_validate(RULE)])
    assert [(p.area, p.path) for p in program.placements] == [("workloads", "native")]
    strict = compile_namespace([AppliedRule.model_validate(RULE)], local_check=True)
    assert [(p.area, p.path) for p in strict.placements] == [("workloads", "webhook")]


def test_a_pod_within_the_envelope_is_judged_offline() -> None:
    for containers, length in ((1, 20), (ENVELOPE_ITEMS, ENVELOPE_TEXT)):
        refused = _judge(_pod(containers, length))
        assert not refused.undecided, refused.undecided
        assert refused.denies
        assert "quay.io/" in refused.denials[0].message
        assert not refused.denials[0].error
        admitted = _judge(_pod(containers, length, refused=False))
        assert not admitted.undecided
        assert not admitted.denials


def test_the_worst_case_pod_is_answered_in_bounded_time_and_never_admitted_offline() -> None:
    """Just past the envelope (one container or one character more) and a hostile Pod near kube-apiserver's 3 MiB
    request limit (3,000 containers of 512-character images): undecided offline, refused (failure policy Fail) in
    the engine's words naming the budget, within seconds; an allowed image likewise, never a guessed admission."""
    for containers, length in ((ENVELOPE_ITEMS + 1, ENVELOPE_TEXT), (ENVELOPE_ITEMS, ENVELOPE_TEXT + 1), (3000, 512)):
        for refused in (True, False):
            started = time.process_time()  # CPU time: a loaded host does not inflate it
            verdict = _judge(_pod(containers, length, refused))
            assert time.process_time() - started < 10
            assert "budget" in verdict.undecided
            assert verdict.denies
            assert verdict.denials[0].error

"""The compiler from a namespace's rule mutations to a MutatingAdmissionPolicy: what goes where, and why, and the
values the policy sets, worked out with enclave test's local engine (:func:`enclave_cli.native.judge_mutating`).

That kube-apiserver stores the same object after the policy as after the mutating webhook is proven in
tests/integration/rules/test_rules_native_differential.py (``test_webhook_and_mutating_policy_store_the_same_object``).
"""

from __future__ import annotations

import time
from typing import Any

from enclave_cli.native import apply_json_patch, judge_mutating, judge_policy
from enclave_core.api.rules import AppliedRule
from enclave_tenants.native.compiler import compile_namespace, webhook_needed
from enclave_tenants.native.mutations import MAX_TERMS, WORKLOADS_ON_WEBHOOK, compile_mutations, pointer
from enclave_tenants.native.objects import policies

NAMESPACE = "ns"


def _rules(*bodies: dict[str, Any]) -> list[AppliedRule]:
    return [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})
        for index, body in enumerate(bodies)
    ]


def _mutate(labels: dict[str, str], overwrite: bool = False, **rule: Any) -> dict[str, Any]:
    return {"mutate": [{"metadata": {"kinds": ["ConfigMap"], "labels": labels, "overwrite": overwrite}}], **rule}


def _values(**labels: Any) -> dict[str, Any]:
    return {"enforce": {"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": labels}]}}


def _placed(rules: list[AppliedRule]) -> dict[tuple[str, str], tuple[str, str]]:
    return {(p.origin, p.area): (p.path, p.why) for p in compile_namespace(rules).placements}


def _request(
    labels: dict[str, str] | None, operation: str, user: str, kind: str, old_labels: Any = "same"
) -> dict[str, Any]:
    """An AdmissionReview request for an object of ``kind`` with ``labels``; on UPDATE the old object has the same
    labels, or ``old_labels``."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": NAMESPACE}}
    if labels is not None:
        obj["metadata"]["labels"] = labels
    old: dict[str, Any] = {**obj, "metadata": {"name": "x", "namespace": NAMESPACE}}
    if old_labels == "same" and labels is not None:
        old["metadata"]["labels"] = labels
    elif old_labels not in ("same", None):
        old["metadata"]["labels"] = old_labels
    return {
        "uid": "u",
        "operation": operation,
        "namespace": NAMESPACE,
        "name": "x",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
        "subResource": "",
        "userInfo": {"username": user, "groups": ["enclave.dev"]},
        "object": obj,
        "oldObject": old if operation == "UPDATE" else None,
    }


def _mutated(
    rules: list[AppliedRule],
    labels: dict[str, str] | None,
    *,
    user: str = "alice",
    operation: str = "CREATE",
    kind: str = "ConfigMap",
) -> dict[str, str] | None:
    """The labels after the compiled policy, as enclave test's native engine applies it."""
    program = compile_namespace(rules)
    made = policies("t", program, [NAMESPACE], enclave_namespace="enclave", ignored_groups=[])
    request = _request(labels, operation, user, kind)
    obj = request["object"]
    by_name = {o["metadata"]["name"]: o for o in made if o["kind"] == "MutatingAdmissionPolicy"}
    for binding in made:
        if binding["kind"] == "MutatingAdmissionPolicyBinding":
            verdict = judge_mutating(
                by_name[binding["spec"]["policyName"]],
                binding,
                request,
                {"enclave.dev/tenant": "t", "kubernetes.io/metadata.name": NAMESPACE},
            )
            assert not verdict.denials, verdict
            assert not verdict.undecided, verdict
            obj = apply_json_patch(obj, verdict.patch)
    found: dict[str, str] | None = obj["metadata"].get("labels")
    return found


def test_mutate_entries_follow_the_webhooks_order() -> None:
    rules = _rules(
        _mutate({"team": "a"}),
        _mutate({"team": "b"}, overwrite=True, audience=[{"kind": "User", "name": "bob"}]),
        _mutate({"team": "c", "site": "s1"}),
    )
    assert _mutated(rules, None) == {"team": "a", "site": "s1"}  # the first non-overwrite entry
    assert _mutated(rules, {"team": "mine"}) == {"team": "mine", "site": "s1"}  # present: kept
    assert _mutated(rules, {"team": "mine"}, user="bob") == {"team": "b", "site": "s1"}  # overwrite applies
    assert _mutated(rules, None, kind="Secret") is None  # out of the entries' kinds


def test_a_managed_value_wins_and_a_default_fills_only_an_absent_key_on_create() -> None:
    rules = _rules(
        _mutate({"env": "dev", "owner": "m"}, overwrite=True),
        _values(env={"managed": "prod"}, owner={"default": "d"}, zone={"default": "z1"}),
        _values(zone={"default": "z2"}),
    )
    assert _mutated(rules, None) == {"env": "prod", "owner": "m", "zone": "z2"}
    assert _mutated(rules, {"env": "x"}, operation="UPDATE") == {"env": "prod", "owner": "m"}
    assert _mutated(rules, {"zone": "mine"}) == {"env": "prod", "owner": "m", "zone": "mine"}


def test_a_key_already_holding_its_value_is_not_patched() -> None:
    rules = _rules(_values(env={"managed": "prod"}))
    program = compile_namespace(rules)
    made = policies("t", program, [NAMESPACE], enclave_namespace="enclave", ignored_groups=[])
    assert _mutated(rules, {"env": "prod"}) == {"env": "prod"}
    (policy,) = [o for o in made if o["kind"] == "MutatingAdmissionPolicy"]
    assert policy["spec"]["reinvocationPolicy"] == "IfNeeded"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert "request.?name.orValue('')" in policy["spec"]["matchConditions"][0]["expression"]  # generateName


def test_keys_are_escaped_as_json_pointers_and_literals() -> None:
    assert pointer("metadata", "labels", "example.com/a~b") == "/metadata/labels/example.com~1a~0b"
    hostile = "x\"] + [['/metadata/name', 'owned']] + [[\""
    found = compile_mutations(_rules(_mutate({hostile: "v"})))
    listed = next(v["expression"] for v in found.variables if v["name"] == "mu_labels")
    assert "'/metadata/name'" not in listed.replace('\\"', "")  # only inside the key's own literal
    assert _mutated(_rules(_mutate({hostile: "v"})), None) == {hostile: "v"}


def test_conditional_and_custom_rules_keep_their_keys_on_the_webhook() -> None:
    conditional = _mutate({"team": "a"})
    conditional["enforce"] = {"conditions": [{"expression": "object.data.k == 'x'"}]}
    custom = _mutate({"team": "b"}, audience=[{"kind": "Custom", "name": "request.operation == 'CREATE'"}])
    rules = _rules(_mutate({"team": "z", "site": "s"}), conditional, custom)
    placed = _placed(rules)
    for index in (0, 1, 2):
        assert placed[(f"Tenant t spec.rules[{index}]", "mutate")][0] == "webhook"
    assert (
        "spec.rules[1] also sets it and its enforce.conditions may error"
        in placed[("Tenant t spec.rules[0]", "mutate")][1]
    )
    found = compile_mutations(rules)
    assert found.keys == [("labels", "site")]  # the key no conditional rule touches still compiles
    program = compile_namespace(rules)
    assert "mutate stays on the webhook" in webhook_needed(rules, program)


def test_workload_mutations_stay_on_the_webhook() -> None:
    rules = _rules({"mutate": [{"workloads": {"nodeSelector": {"pool": "a"}}}]})
    assert _placed(rules)[("Tenant t spec.rules[0]", "mutate[].workloads")] == ("webhook", WORKLOADS_ON_WEBHOOK)
    assert compile_namespace(rules).mutations == []


def test_a_namespace_of_mutations_and_native_rules_needs_no_webhook() -> None:
    deny = {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
        }
    }
    rules = _rules(deny, _mutate({"team": "a"}), _values(owner={"default": "d"}))
    assert webhook_needed(rules, compile_namespace(rules)) == ""
    assert webhook_needed(rules, compile_namespace(rules, mutations=False)) != ""


def test_a_key_past_the_budget_stays_on_the_webhook_quickly() -> None:
    rules = _rules(*[_mutate({"team": str(n)}) for n in range(MAX_TERMS + 1)])
    started = time.process_time()  # CPU time: a loaded host does not inflate it
    placed = _placed(rules)
    assert time.process_time() - started < 10
    path, why = placed[("Tenant t spec.rules[0]", "mutate")]
    assert path == "webhook"
    assert f"more than {MAX_TERMS} entries" in why


def _refusal(rules: list[AppliedRule], labels: dict[str, str] | None, operation: str = "CREATE") -> str:
    """The validating policy's first refusal of a ConfigMap with ``labels`` (no mutating policy before it)."""
    made = policies("t", compile_namespace(rules), [NAMESPACE], enclave_namespace="enclave", ignored_groups=[])
    request = _request(labels, operation, "alice", "ConfigMap", old_labels=None)
    by_name = {o["metadata"]["name"]: o for o in made if o["kind"] == "ValidatingAdmissionPolicy"}
    labels_of = {"enclave.dev/tenant": "t", "kubernetes.io/metadata.name": NAMESPACE}
    for binding in made:
        if binding["kind"] == "ValidatingAdmissionPolicyBinding":
            verdict = judge_policy(by_name[binding["spec"]["policyName"]], binding, request, labels_of)
            if verdict.denies:
                return verdict.denials[0].message
    return ""


def test_a_managed_key_is_validated_by_the_policy_in_the_webhooks_words() -> None:
    """What the mutating policy set passes the validating one (kube-apiserver validates after every mutation);
    any other value is refused as the webhook refuses it, and no other rule judges the key meanwhile."""
    deny_all = {"enforce": {"action": "deny", "metadata": [{"kinds": ["ConfigMap"], "labels": {"cost": {}}}]}}
    rules = _rules(deny_all, _values(cost={"managed": "cc-1"}))
    assert _placed(rules)[("Tenant t spec.rules[1]", "metadata")][0] == "native"
    assert _refusal(rules, {"cost": "cc-1"}) == ""  # the deny rule does not judge a managed key
    assert _refusal(rules, {"cost": "x"}) == (
        "metadata.labels['cost'] is managed by Tenant t spec.rules[1]: it must be 'cc-1', not 'x'"
    )
    assert _refusal(rules, None) == (
        "metadata.labels['cost'] is managed by Tenant t spec.rules[1]: it must be 'cc-1', not absent"
    )
    assert _refusal(rules, None, operation="UPDATE") == ""  # unchanged on UPDATE: not judged
    assert _mutated(rules, {"cost": "x"}) == {"cost": "cc-1"}  # and the mutating policy sets it first
    audit = {"enforce": {"action": "audit", "metadata": [{"kinds": ["ConfigMap"], "labels": {"cost": {}}}]}}
    path, why = _placed(_rules(audit, _values(cost={"managed": "cc-1"})))[("Tenant t spec.rules[1]", "metadata")]
    assert path == "webhook"
    assert "audit" in why

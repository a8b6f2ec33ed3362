"""``spec.rules.engine: native`` offline: the ValidatingAdmissionPolicies enclave-tenants would write, judged as
kube-apiserver judges them, with the project's CEL engine.

Nothing is compiled here: each namespace's rules go through :func:`enclave_tenants.native.compiler.
compile_namespace` and :func:`enclave_tenants.native.objects.policies`, the functions enclave-tenants' native
loop runs, and :func:`~enclave_tenants.native.compiler.webhook_needed` says whether the namespace would carry
``enclave.dev/native-rules`` (then the ``resources`` hooks skip it, :mod:`enclave_cli.engine`). What is modelled
here is kube-apiserver's ValidatingAdmissionPolicy plugin (``k8s.io/apiserver/pkg/admission/plugin/policy/
validating``) for what those objects use:

* **match**: the policy's ``matchConstraints.resourceRules`` (operations, groups, versions, resources where
  ``*`` is every resource but no subresource, scope), the binding's ``namespaceSelector`` on the namespace's
  labels (the tenant label and ``kubernetes.io/metadata.name`` as enclave-tenants and kube-apiserver set them),
  then ``matchConditions``: one false skips the policy, an error (none false) is the failure policy's.
* **variables**: each expression is evaluated with the variables it reads bound around it (``cel.bind``, in
  declaration order, :func:`~enclave_cli.policy_cel.with_variables`), so one that errors is an error only where
  it is read, and CEL's ``&&``, ``||`` and ``?:`` absorb it there as kube-apiserver's lazy variables would.
* **validations**: false denies with the ``messageExpression`` (trimmed; a non-string, empty, multi-line or
  over 5 KiB result falls back), else ``message``, else ``failed expression: <expression>``; the reason is
  the validation's (default ``Invalid``). An error is the failure policy's (``Fail`` denies with
  ``expression '<expression>' resulted in error: <error>``, ``Ignore`` admits). The first denial is the answer,
  as kube-apiserver's dispatcher reports it; :attr:`PolicyVerdict.denials` keeps every one.
* **actions**: a binding with ``Deny`` refuses; ``Warn`` and ``Audit`` admit with the message as a warning
  (what ``expect.audit`` matches, as the webhook's audit findings).

Every expression is evaluated by :mod:`enclave_cli.policy_cel` under the engine's guards: the per-evaluation
cost budget (kube-apiserver's per-call limit, :data:`enclave_core.cel.limits.COST_BUDGET`) measured on the
input, RE2 for ``matches``, and the size limits; a policy's validations and messages share kube-apiserver's
per-policy budget (:data:`~enclave_cli.policy_cel.POLICY_BUDGET`), charged the engine's estimate of each
evaluation on its input before it runs, and exhausting it is an error of the failure policy's, as in
kube-apiserver. The budgets are charged the engine's *estimate* of the work (an upper bound: cel-expr-python
counts nothing as it runs), and the engine's parser and tree depth are shallower than kube-apiserver's, so an
expression past one of these is not known to fail there: the verdict is :attr:`PolicyVerdict.undecided`, never
a guessed refusal or admission. An expression the local engine refuses to compile is reported as such (never
guessed): the policy's failure policy decides, and the case says why.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Final

from enclave_cli.policy_cel import OUT_OF_BUDGET, Budget, error_text, evaluate
from enclave_core import cel
from enclave_core.api.names import NAMESPACE_NAME_LABEL, TENANT_LABEL
from enclave_core.api.rules import AppliedRule
from enclave_core.selectors import matches
from enclave_core.snapshots.rules import RulesSnapshot
from enclave_tenants.native.compiler import Program, compile_namespace, webhook_needed
from enclave_tenants.native.minors import literal_end
from enclave_tenants.native.objects import policies
from enclave_tenants.policy import Policy

JSON = dict[str, Any]

MAX_MESSAGE_BYTES: Final = 5 * 1024
"""kube-apiserver's limit on a ``messageExpression`` result (``MaxEvaluatedMessageExpressionSizeBytes``)."""

ENGINES: Final = ("webhook", "native", "both")


@dataclass(frozen=True)
class Refusal:
    """One validation that failed (or errored under ``Fail``)."""

    message: str
    reason: str
    error: bool = False
    """The expression errored (kube-apiserver's error text, not the rule's message)."""


@dataclass
class PolicyVerdict:
    """One policy and binding on one request."""

    policy: str
    binding: str
    actions: tuple[str, ...]
    matched: bool = True
    why: str = ""
    """Why it did not match, or what errored."""
    denials: list[Refusal] = field(default_factory=list)
    undecided: str = ""
    """Why the local engine could not evaluate an expression kube-apiserver would (its parser or tree depth, or
    its cost *estimate* past a budget kube-apiserver counts on the actual work): then this policy's answer is
    not known offline, and :mod:`enclave_cli.engine` lets the webhook stand in."""

    patch: list[JSON] = field(default_factory=list)
    """For a MutatingAdmissionPolicy: the JSON patch operations its mutations produced."""

    @property
    def denies(self) -> bool:
        return self.matched and "Deny" in self.actions and bool(self.denials)

    @property
    def warnings(self) -> list[str]:
        if not self.matched or not ({"Warn", "Audit"} & set(self.actions)):
            return []
        return [refusal.message for refusal in self.denials]


@dataclass
class NamespacePolicies:
    """What enclave-tenants would enforce natively in one tenant namespace."""

    namespace: str
    tenant: str
    program: Program
    objects: list[JSON]
    webhook_needed: str
    """Why the ``resources`` hooks are still called there, or '' (then it carries the native-rules label under
    ``native``)."""


@dataclass
class NativeRules:
    """Every tenant namespace's compiled policies, and the engine they run under."""

    engine: str
    namespaces: dict[str, NamespacePolicies] = field(default_factory=dict)

    @classmethod
    def compile(cls, rules: RulesSnapshot, policy: Policy, enclave_namespace: str, engine: str) -> NativeRules:
        """As enclave-tenants' native loop (:meth:`enclave_tenants.native.controller.NativePolicies.wanted`)
        compiles them: per namespace with rules, its program and the objects of its tenant."""
        found = cls(engine)
        if engine == "webhook":
            return found
        for entry in rules.namespaces:
            if not entry.rules:
                continue
            applied: list[AppliedRule] = list(entry.rules)
            program = compile_namespace(applied)
            objects = policies(
                entry.tenant,
                program,
                [entry.namespace],
                enclave_namespace=enclave_namespace,
                ignored_groups=policy.ignored_groups,
            )
            found.namespaces[entry.namespace] = NamespacePolicies(
                entry.namespace, entry.tenant, program, objects, webhook_needed(applied, program)
            )
        return found

    def labelled(self, namespace: str) -> bool:
        """Whether the namespace carries ``enclave.dev/native-rules`` (the ``resources`` hooks skip it)."""
        found = self.namespaces.get(namespace)
        return self.engine == "native" and found is not None and not found.webhook_needed

    def judge(self, review: JSON, namespace_labels: dict[str, str]) -> list[PolicyVerdict]:
        """Every policy bound in the request's namespace, judged on the AdmissionReview's request."""
        request = review["request"]
        found = self.namespaces.get(str(request.get("namespace") or ""))
        if found is None:
            return []
        labels = {
            **namespace_labels,
            TENANT_LABEL: found.tenant,
            NAMESPACE_NAME_LABEL: found.namespace,
        }
        by_name = {obj["metadata"]["name"]: obj for obj in found.objects if obj["kind"] == "ValidatingAdmissionPolicy"}
        verdicts = []
        for binding in found.objects:
            if binding["kind"] != "ValidatingAdmissionPolicyBinding":
                continue
            policy = by_name.get(binding["spec"]["policyName"])
            if policy is not None:
                verdicts.append(judge_policy(policy, binding, request, labels))
        return verdicts

    def judge_mutations(self, review: JSON, namespace_labels: dict[str, str]) -> list[PolicyVerdict]:
        """Every MutatingAdmissionPolicy bound in the request's namespace, on the AdmissionReview's request."""
        request = review["request"]
        found = self.namespaces.get(str(request.get("namespace") or ""))
        if found is None:
            return []
        labels = {**namespace_labels, TENANT_LABEL: found.tenant, NAMESPACE_NAME_LABEL: found.namespace}
        by_name = {obj["metadata"]["name"]: obj for obj in found.objects if obj["kind"] == "MutatingAdmissionPolicy"}
        return [
            judge_mutating(by_name[binding["spec"]["policyName"]], binding, request, labels)
            for binding in found.objects
            if binding["kind"] == "MutatingAdmissionPolicyBinding" and binding["spec"]["policyName"] in by_name
        ]


def _rule_matches(rule: JSON, request: JSON) -> bool:
    """A ``resourceRules`` entry against the request (kube-apiserver's ``rules.Matcher``)."""
    kind, resource = request.get("kind") or {}, request.get("resource") or {}
    if request.get("operation") not in (rule.get("operations") or []) and "*" not in (rule.get("operations") or []):
        return False
    groups, versions = rule.get("apiGroups") or [], rule.get("apiVersions") or []
    if "*" not in groups and resource.get("group", "") not in groups:
        return False
    if "*" not in versions and resource.get("version", kind.get("version", "")) not in versions:
        return False
    name = str(resource.get("resource") or "")
    sub = str(request.get("subResource") or "")
    wanted = name + ("/" + sub if sub else "")
    resources = rule.get("resources") or []
    if not any(
        entry == wanted
        or (entry == "*" and not sub)
        or entry == "*/*"
        or (entry.startswith("*/") and sub and entry[2:] == sub)
        or (entry.endswith("/*") and sub and entry[:-2] == name)
        for entry in resources
    ):
        return False
    scope = rule.get("scope") or "*"
    namespaced = bool(request.get("namespace"))
    return scope == "*" or scope == ("Namespaced" if namespaced else "Cluster")


def _variables_of(request: JSON, namespace_labels: dict[str, str]) -> JSON:
    return {
        "object": request.get("object"),
        "oldObject": request.get("oldObject"),
        "request": request,
        "params": None,
        "namespaceObject": {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": request.get("namespace") or "", "labels": dict(namespace_labels)},
        },
    }


def _message(validation: JSON, variables: JSON, declared: list[JSON], budget: Budget) -> str:
    """The denial text of a failed validation, with kube-apiserver's fallbacks."""
    text = ""
    expression = validation.get("messageExpression")
    if expression:
        result = budget.evaluate(str(expression), variables, declared)
        if isinstance(result, cel.Ok) and isinstance(result.value, str):
            text = result.value.strip()
            if len(text.encode()) > MAX_MESSAGE_BYTES or "\n" in text:
                text = ""
    if not text:
        text = str(validation.get("message") or "").strip()
    if not text:
        text = f"failed expression: {str(validation.get('expression') or '').strip()}"
    return text


def _match(
    policy: JSON, binding: JSON, request: JSON, namespace_labels: dict[str, str], verdict: PolicyVerdict
) -> JSON | None:
    """The policy's match (constraints, the binding's namespace selector, matchConditions) on ``request``: the
    CEL variables when it matches, else None with ``verdict`` saying why (or refusing, for a matchCondition
    that errors under failure policy Fail). Shared by validating and mutating policies, which match alike."""
    spec, bound = policy.get("spec") or {}, binding.get("spec") or {}
    fail = (spec.get("failurePolicy") or "Fail") == "Fail"
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    if not any(_rule_matches(rule, request) for rule in rules):
        verdict.matched, verdict.why = False, "matchConstraints do not match the request"
        return None
    selector = (bound.get("matchResources") or {}).get("namespaceSelector")
    if request.get("namespace") and selector is not None and not matches(selector, namespace_labels):
        verdict.matched, verdict.why = False, "the binding's namespaceSelector does not select the namespace"
        return None
    variables = _variables_of(request, namespace_labels)
    errored = ""
    for condition in spec.get("matchConditions") or []:
        expression = str(condition["expression"])
        result = evaluate(expression, variables)
        if isinstance(result, cel.Ok) and result.value is False:
            verdict.matched, verdict.why = False, f"matchCondition {condition['name']!r} is false"
            return None
        if isinstance(result, cel.Failed):
            if result.error.kind is cel.ErrorKind.LIMIT:
                verdict.undecided = verdict.undecided or error_text(expression, result.error)
            errored = errored or error_text(expression, result.error)
        elif result.value is not True:
            errored = errored or f"expression '{expression}' did not evaluate to a bool"
    if errored:
        verdict.why = errored
        if fail:
            verdict.denials.append(Refusal(errored, "Invalid", error=True))
        else:
            verdict.matched = False
        return None
    return variables


def _start(
    policy: JSON, binding: JSON, request: JSON, namespace_labels: dict[str, str], actions: tuple[str, ...]
) -> tuple[PolicyVerdict, JSON | None, bool]:
    """A policy's verdict begun: the verdict, the CEL variables when it matches (:func:`_match`), and whether
    its failure policy is ``Fail``."""
    verdict = PolicyVerdict(policy["metadata"]["name"], binding["metadata"]["name"], actions)
    fail = ((policy.get("spec") or {}).get("failurePolicy") or "Fail") == "Fail"
    return verdict, _match(policy, binding, request, namespace_labels, verdict), fail


def judge_policy(policy: JSON, binding: JSON, request: JSON, namespace_labels: dict[str, str]) -> PolicyVerdict:
    """One ValidatingAdmissionPolicy with one binding on an AdmissionReview ``request``."""
    actions = tuple((binding.get("spec") or {}).get("validationActions") or ())
    verdict, variables, fail = _start(policy, binding, request, namespace_labels, actions)
    if variables is None:
        return verdict
    spec = policy.get("spec") or {}
    declared = list(spec.get("variables") or [])
    budget = Budget()
    for validation in spec.get("validations") or []:
        expression = str(validation["expression"])
        result = budget.evaluate(expression, variables, declared)
        if isinstance(result, cel.Failed) and result.error.kind is cel.ErrorKind.LIMIT:
            verdict.undecided = verdict.undecided or error_text(expression, result.error)
            if result.error.message == OUT_OF_BUDGET:
                if fail:
                    verdict.denials.append(Refusal(OUT_OF_BUDGET, "Invalid", error=True))
                break
        if isinstance(result, cel.Failed):
            if fail:
                verdict.denials.append(Refusal(error_text(expression, result.error), "Invalid", error=True))
            continue
        if result.value is True:
            continue
        if result.value is not False:
            if fail:
                verdict.denials.append(
                    Refusal(f"expression '{expression}' did not evaluate to a bool", "Invalid", True)
                )
            continue
        message = _message(validation, variables, declared, budget)
        verdict.denials.append(Refusal(message, str(validation.get("reason") or "Invalid")))
    return verdict


_PATCH_FIELD: Final = re.compile(r"([{,]\s*)(op|path|value)\s*:")


def _patch_maps(expression: str) -> str:
    """A JSONPatch mutation's expression with each ``JSONPatch{op: .., path: .., value: ..}`` read as the map
    ``{'op': .., 'path': .., 'value': ..}`` (the local engine has no JSONPatch type; the fields are the same)."""
    out: list[str] = []
    at = 0
    while at < len(expression):
        if expression[at] in "'\"":
            end = literal_end(expression, at)
            out.append(expression[at:end])
            at = end
            continue
        if expression.startswith("JSONPatch{", at):
            at += len("JSONPatch")  # the brace opens a map instead, its fields quoted below
            continue
        found = _PATCH_FIELD.match(expression, at)
        if found is not None:
            out.append(f"{found.group(1)}'{found.group(2)}':")
            at = found.end()
            continue
        out.append(expression[at])
        at += 1
    return "".join(out)


def judge_mutating(policy: JSON, binding: JSON, request: JSON, namespace_labels: dict[str, str]) -> PolicyVerdict:
    """One MutatingAdmissionPolicy with one binding on an AdmissionReview ``request``: its JSONPatch mutations
    evaluated in order, each on the object the previous ones left (kube-apiserver's ``mutating`` plugin), under
    the same guards and per-policy budget as a validating policy. An error is the failure policy's (``Fail``
    refuses in kube-apiserver's words); an ``ApplyConfiguration`` mutation (Enclave writes none) is undecided."""
    spec = policy.get("spec") or {}
    verdict, variables, fail = _start(policy, binding, request, namespace_labels, ("Mutate",))
    if variables is None:
        return verdict
    declared = list(spec.get("variables") or [])
    budget = Budget()
    obj = variables["object"]
    for mutation in spec.get("mutations") or []:
        if mutation.get("patchType") != "JSONPatch":
            verdict.undecided = f"a {mutation.get('patchType')} mutation is not evaluated offline"
            return verdict
        expression = str((mutation.get("jsonPatch") or {}).get("expression") or "")
        result = budget.evaluate(_patch_maps(expression), {**variables, "object": obj}, declared)
        if isinstance(result, cel.Failed):
            if result.error.kind is cel.ErrorKind.LIMIT:
                verdict.undecided = verdict.undecided or error_text(expression, result.error)
            if fail:
                verdict.denials.append(Refusal(error_text(expression, result.error), "Invalid", error=True))
            return verdict
        operations = [dict(op) for op in result.value or ()]
        verdict.patch += operations
        obj = apply_json_patch(obj, operations)
    return verdict


def apply_json_patch(obj: Any, patch: list[JSON]) -> Any:
    """RFC 6902 ``add``/``replace``/``remove`` on objects and arrays: the operations admission and the compiled
    MutatingAdmissionPolicies emit."""
    result = copy.deepcopy(obj)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        if not parts:
            result = copy.deepcopy(op.get("value"))
            continue
        parent: Any = result
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(copy.deepcopy(op["value"]))
                elif op["op"] == "add":
                    parent.insert(int(last), copy.deepcopy(op["value"]))
                else:
                    parent[int(last)] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last, None)
        else:
            raise ValueError(f"unsupported JSON patch operation {op['op']!r}")
    return result

"""What a compiled workload rule may cost: kube-apiserver's limits on a policy's CEL evaluation, an upper estimate
of a rule's cost over the largest Pod a native rule must fit (the envelope), and what that proof lets ``enclave
test`` evaluate.

kube-apiserver counts the actual cost of each evaluation and stops it past the per-call limit; Enclave's CEL engine
(cel-expr-python, what ``enclave test`` judges native policies with) counts nothing as it runs and cannot be
interrupted, so it guards each evaluation with its static estimate on the input, which for the workload rules'
expressions (containers x registries x characters) is far above what cel-go counts (millions on a one-container
Pod). The envelope closes that gap for the rules' own expressions: a rule goes native only when its cost over a Pod
of the envelope fits the per-call limit, and the rules together the policy budget (:func:`estimated_cost`), so on a
Pod within the envelope (:func:`within_envelope`) a workload validation (:func:`proven_at_envelope`) is known to stay
within kube-apiserver's limits and the engine may run it unmeasured (the work is bounded by the envelope). Past the
envelope, the engine's estimate decides, and where it is over the budget the answer is undecided offline (the
webhook stands in, said), never a guessed refusal.

Apart from :mod:`enclave_tenants.native.workloads` so each file stays one idea: that module writes the CEL, this
one says whether it may be used.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any, Final

from enclave_core import cel
from enclave_core.api.meta import ValueMatcher
from enclave_core.api.rules import PlacementPolicy, WorkloadsPolicy
from enclave_core.cel.limits import MAX_STRING_INPUT

JSON = dict[str, Any]

PER_CALL_LIMIT: Final = 1_000_000
"""kube-apiserver's runtime cost limit of one CEL expression (``celconfig.PerCallLimit``)."""
POLICY_BUDGET: Final = 10_000_000
"""kube-apiserver's runtime cost budget of one policy evaluation (``celconfig.RuntimeCELCostBudget``)."""
ENVELOPE_ITEMS: Final = 100
"""The largest Pod a native rule must fit: this many containers (all lists), tolerations, nodeSelector keys."""
ENVELOPE_TEXT: Final = 512
"""... and image references (and class names) of this many characters."""


def _text_cost(length: int) -> int:
    return math.ceil(0.1 * length)


def _match_cost(values: Sequence[ValueMatcher]) -> int:
    """One value against matchers: each exact value compared, each pattern an RE2 match (cel-go charges the
    value's length by the pattern's, a tenth by a quarter)."""
    cost = 0
    for matcher in values:
        cost += len(matcher.exact or ()) * (1 + _text_cost(ENVELOPE_TEXT))
        if matcher.exp:
            cost += 1 + _text_cost(ENVELOPE_TEXT) * math.ceil(0.25 * (len(matcher.exp) + 8))
    return cost


def estimated_cost(policy: WorkloadsPolicy) -> int:
    """An upper estimate of a rule's runtime cost on a Pod of the envelope (every item of every list refused,
    its message built), in kube-apiserver's units."""
    per_container = 0
    text = _text_cost(ENVELOPE_TEXT)
    if policy.registries:
        per_container += 80 + 12 * text  # normalising, defaulting, comparing with the old container, the message
        for entry in policy.registries:
            per_container += 1 + (text + 4) * math.ceil(0.25 * (len(entry.url) + 8)) + 4
    if policy.resources:
        names = 0
        for limit in (policy.resources.requests, policy.resources.limits):
            if limit is not None:
                names += len(limit.required or ()) + 3 * (len(limit.min or {}) + len(limit.max or {}))
        per_container += 40 + 30 * names
    cost = ENVELOPE_ITEMS * per_container
    if policy.qos_classes:
        cost += 2 * ENVELOPE_ITEMS * 80  # the class of the new and of the old spec
    placement = policy.placement or PlacementPolicy()
    schedulers = [*(placement.schedulers or []), *(policy.schedulers or [])]
    for values in (schedulers, placement.priority_classes or [], placement.runtime_classes or []):
        if values:
            cost += 20 + 2 * text + _match_cost(values)
    if placement.node_selector_keys:
        cost += ENVELOPE_ITEMS * (20 + 2 * text + len(placement.node_selector_keys) * (1 + text))
    if placement.tolerations:
        cost += ENVELOPE_ITEMS * (60 + 4 * text + len(placement.tolerations) * (10 + 4 * text))
    return cost


VALIDATION: Final = "variables.{name}.all(l, l.all(m, size(m) == 0))"
"""A workload rule part's validation (``{name}``: its variable): every container list's messages empty."""
MESSAGE: Final = "string(variables.{name}.map(l, l.filter(m, size(m) > 0)).filter(l, size(l) > 0)[0][0])"
"""... and its message: the first message of the first list that has one."""
_PART: Final = r"w[0-9]+[kqirp]"
_PROVEN: Final = re.compile(
    "|".join(re.escape(text).replace(re.escape("{name}"), _PART) for text in (VALIDATION, MESSAGE))
)


def proven_at_envelope(expression: str) -> bool:
    """Whether ``expression`` is a workload rule's validation or message (:data:`VALIDATION`, :data:`MESSAGE`), whose
    cost over a Pod of the envelope the compiler proved within kube-apiserver's limits."""
    return _PROVEN.fullmatch(expression) is not None


def within_envelope(values: Sequence[Any]) -> bool:
    """Whether every list and map in ``values`` (what an expression reads of a request, projected) holds at most
    :data:`ENVELOPE_ITEMS` entries and every string at most :data:`ENVELOPE_TEXT` characters. One pass without
    recursion, stopping at the first thing past it (the input may be a hostile 3 MiB Pod)."""
    stack: list[Any] = list(values)
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > ENVELOPE_TEXT:
                return False
        elif kind is list or kind is dict:
            if len(item) > ENVELOPE_ITEMS:
                return False
            if kind is dict:
                stack += item.keys()
                stack += item.values()
            else:
                stack += item
    return True


LOCAL_INPUT: Final = MAX_STRING_INPUT
"""The input size (elements or characters of one list or string of a Pod) up to which Enclave's CEL engine
must bound a rule's expression: past it the engine measures each evaluation and may refuse a Pod that
kube-apiserver would judge."""

_ENV: Final = cel.Environment.of(
    "native-workloads", object=cel.VarType.DYN, oldObject=cel.VarType.DYN, request=cel.VarType.DYN
)
_READ: Final = re.compile(r"(?<![A-Za-z0-9_.])variables\.([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=1024)
def local_problem(text: str) -> str:
    """Why Enclave's own CEL engine (what ``enclave test`` judges the policies with) refuses ``text``, a
    validation with the variables it reads bound around it, or ''."""
    try:
        facts = cel.default().compile(text, _ENV).compiled.facts
    except cel.CelCompileError as err:
        return "; ".join(str(issue.message) if hasattr(issue, "message") else str(issue) for issue in err.issues)
    cost = facts.cost if facts is not None else None
    if cost is not None and cost.max_input < LOCAL_INPUT:
        # past that input size the engine measures each evaluation and refuses it over budget: a Pod with one
        # long string (an annotation, a digest) would be refused by enclave test and admitted by kube-apiserver
        return f"its cost grows with the Pod past the engine's budget (bounded for inputs up to {cost.max_input})"
    return ""


def bound(expression: str, variables: Sequence[JSON]) -> str:
    """``expression`` with the variables it reads (transitively) bound around it in declaration order, as the
    local engine evaluates a policy's expression (a literal that spells ``variables.`` is read as a read too:
    that only makes this check stricter)."""
    texts = {str(v["name"]): _READ.sub(r"v_\1", str(v["expression"])) for v in variables}
    needed: set[str] = set()
    pending = _READ.findall(expression)
    while pending:
        name = pending.pop()
        if name not in needed and name in texts:
            needed.add(name)
            pending += re.findall(r"\bv_([A-Za-z_][A-Za-z0-9_]*)", texts[name])
    body = _READ.sub(r"v_\1", expression)
    for name in reversed([str(v["name"]) for v in variables if v["name"] in needed]):
        body = f"cel.bind(v_{name}, {texts[name]}, {body})"
    return body


def locally_unbounded(
    applies: str, shared: Sequence[JSON], variables: Sequence[JSON], validations: Sequence[JSON]
) -> str:
    """Why Enclave's CEL engine could not bound one of the rule's validations for Pods of every size by its static
    estimate, or ''. Only under ``compile_rules(..., local_check=True)`` (off by default): ``enclave test`` judges a
    Pod within the envelope without that estimate (:func:`within_envelope`), so it no longer keeps rules off."""
    declared = [*shared, *[{**v, "expression": v["expression"].replace(applies, "true", 1)} for v in variables]]
    for validation in validations:
        for key in ("expression", "messageExpression"):
            problem = local_problem(bound(validation[key], declared))
            if problem:
                return (
                    f"its policy expression is past the limits of Enclave's CEL engine ({problem}), which "
                    "enclave test judges native policies with: kept on the webhook so both engines answer alike"
                )
    return ""

"""kube-apiserver's evaluation of a policy's CEL, offline: what :mod:`enclave_cli.native` judges each compiled
ValidatingAdmissionPolicy and MutatingAdmissionPolicy expression with.

Apart from the policy model because it is the part with budgets and guards: each expression is evaluated with the
variables it reads bound around it (``cel.bind``, in declaration order, :func:`with_variables`), so one that
errors is an error only where it is read, as with kube-apiserver's lazy variables; under the engine's guards (the
per-call cost budget, :data:`enclave_core.cel.limits.COST_BUDGET`, measured on the input, RE2 for ``matches``,
the size limits) and a policy's shared budget (:data:`POLICY_BUDGET`, :class:`Budget`), charged the engine's
*estimate* of each evaluation before it runs (an upper bound: cel-expr-python counts nothing as it runs). A
workload rule's validation on a Pod within the rules' envelope is not charged (:func:`enveloped`). An expression
the local engine will not compile (:func:`compiled`: its parser, depth, length or comprehensions) is an error of
kind ``LIMIT`` that says so, which :mod:`enclave_cli.native` reports as undecided, never a guessed answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

from enclave_core import cel
from enclave_core.cel import cost
from enclave_core.cel.engine import CompiledExpression
from enclave_core.cel.limits import COST_BUDGET, MAX_EXPRESSION_LENGTH
from enclave_core.cel.projection import project
from enclave_core.cel.syntax import PathTrie
from enclave_tenants.native import workload_limits
from enclave_tenants.native.minors import calls, literal_end

JSON = dict[str, Any]

POLICY_ENV: Final = cel.Environment.of(
    "validating-admission-policy",
    object=cel.VarType.DYN,
    oldObject=cel.VarType.DYN,
    request=cel.VarType.DYN,
    params=cel.VarType.DYN,
    namespaceObject=cel.VarType.DYN,
    variables=cel.VarType.DYN,
    authorizer=cel.VarType.DYN,
)
"""What a ValidatingAdmissionPolicy expression sees (``authorizer`` is declared, not modelled)."""

POLICY_BUDGET: Final = 10_000_000
"""kube-apiserver's cost budget for one policy's evaluation of one request (``RuntimeCELCostBudget``); each
expression also has the per-call limit, :data:`enclave_core.cel.limits.COST_BUDGET`."""

OUT_OF_BUDGET: Final = "validation failed due to running out of cost budget, no further validation rules will be run"
"""kube-apiserver's words when a policy's evaluation exhausts :data:`POLICY_BUDGET`."""

_VARIABLE_READ: Final = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING_KEY: Final = re.compile(r'NOT_FOUND: Key not found in map : "([^"\\]*)"')
"""cel-expr-python's words for a string key a map lacks (a key with a quote or backslash is escaped: left as is)."""


def error_text(expression: str, error: cel.EvalError) -> str:
    """kube-apiserver's words for an expression that errored. A missing map key is said as cel-go says it
    (``no such key: <key>``), so that the error a compiled policy raises on purpose (a rule whose condition
    errored, :func:`enclave_tenants.native.celtext.raise_text`) reads here exactly as kube-apiserver reports it;
    other errors keep the engine's own text."""
    missing = _MISSING_KEY.fullmatch(error.message) if error.kind is cel.ErrorKind.NO_SUCH_KEY else None
    text = f"no such key: {missing.group(1)}" if missing else error.message
    return f"expression '{expression}' resulted in error: {text}"


@functools.lru_cache(maxsize=4096)
def _rewrite(expression: str) -> tuple[str, tuple[str, ...]]:
    """``expression`` with each ``variables.<name>`` outside string literals read as the identifier ``v_<name>``,
    and the names, in order of first use. Cached: a policy's every expression binds the same variables, rewritten
    character by character (most of what judging a compiled workload policy cost)."""
    out: list[str] = []
    names: list[str] = []
    at = 0
    while at < len(expression):
        char = expression[at]
        if char in "'\"":
            end = literal_end(expression, at)
            out.append(expression[at:end])
            at = end
            continue
        found = _VARIABLE_READ.match(expression, at)
        if found is not None and (at == 0 or not (expression[at - 1].isalnum() or expression[at - 1] in "_.")):
            name = found.group(1)
            out.append("v_" + name)
            if name not in names:
                names.append(name)
            at = found.end()
            continue
        out.append(char)
        at += 1
    return "".join(out), tuple(names)


def with_variables(expression: str, declared: list[JSON]) -> str:
    """``expression`` with the policy's variables it reads (and those they read) bound around it in declaration
    order (``cel.bind``): one program that evaluates them as kube-apiserver's lazy variables would, an error in
    one counting only where it is read (CEL's ``&&``, ``||`` and ``?:`` absorb it there as well)."""
    rewritten = {str(v["name"]): _rewrite(str(v["expression"])) for v in declared}
    body, wanted = _rewrite(expression)
    needed: set[str] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name in needed or name not in rewritten:
            continue
        needed.add(name)
        pending += rewritten[name][1]
    for name in reversed([str(v["name"]) for v in declared if v["name"] in needed]):
        body = f"cel.bind(v_{name}, {rewritten[name][0]}, {body})"
    return body


class Budget:
    """What is left of the policy's cost budget for this request (kube-apiserver's ``RuntimeCELCostBudget``,
    shared by the policy's validations and their messages); each evaluation is charged the engine's estimate on
    its input (an upper bound of the work), before it runs."""

    def __init__(self) -> None:
        self.left = float(POLICY_BUDGET)

    def evaluate(self, expression: str, variables: JSON, declared: list[JSON] | None = None) -> cel.EvalResult[Any]:
        """One expression, with the variables it reads, under the engine's guards (its per-call budget among
        them) and this one; a local compile refusal is an error result that says so."""
        text = with_variables(expression, declared) if declared else expression
        try:
            program = compiled(text)
        except cel.CelCompileError as err:
            issues = "; ".join(str(issue) for issue in err.issues)
            return cel.Failed(cel.EvalError(cel.ErrorKind.LIMIT, f"not evaluated offline: {issues}", expression))
        facts = program.facts
        if facts is not None and enveloped(expression, facts.paths, variables):
            # a workload rule's validation on a Pod within its envelope: the compiler proved it (and the rules
            # together) within kube-apiserver's limits there, and the envelope bounds the engine's work; its
            # estimate (a walk of the whole tree, millions on a one-container Pod) is neither needed nor charged
            return program.evaluate(variables, measured=False)
        spent = cost.on_input(facts.cost, variables) if facts is not None and facts.cost is not None else 0.0
        if spent <= COST_BUDGET:  # past it, the per-call limit refuses first (the engine's error)
            self.left -= spent
            if self.left < 0:
                return cel.Failed(cel.EvalError(cel.ErrorKind.LIMIT, OUT_OF_BUDGET, expression))
        return program.evaluate(variables)


def enveloped(expression: str, paths: Mapping[str, PathTrie], variables: JSON) -> bool:
    """Whether ``expression`` (a policy's own text) is a workload rule's validation or message and what it reads of
    the request (its projection) is within the rules' envelope (:mod:`enclave_tenants.native.workload_limits`)."""
    if not workload_limits.proven_at_envelope(expression):
        return False
    return workload_limits.within_envelope(
        [project(variables[name], trie) for name, trie in paths.items() if name in variables]
    )


_COMPILED: dict[str, CompiledExpression] = {}
MAX_LOCAL_LENGTH: Final = MAX_EXPRESSION_LENGTH
MAX_LOCAL_COMPREHENSIONS: Final = 12
"""Characters and comprehensions (``all``, ``exists``, ``map``, ``filter``, ``transformList``...) of an expression,
its variables bound in, that the local engine compiles: its static cost estimate grows far faster than the
expression past them (minutes for one NetworkPolicy program, whose chains nest twenty and more), so a larger one
is undecided offline and the webhook stands in."""
_COMPREHENSION: Final = re.compile(r"\.(?:all|exists|exists_one|map|filter|transformList|transformMap)\(")


def compiled(text: str) -> CompiledExpression:
    """A policy expression compiled by the engine (cached). Not through the facade's static guards: those refuse
    what a *tenant* may write (nesting, an estimate over the budget for small inputs, length), and kube-apiserver
    takes the compiled policies' larger expressions; what bounds the work here is what bounds it there, the cost
    of the evaluation, which the engine measures on each input before running it (an input that would take an
    expression over the per-call budget fails closed, never runs)."""
    loops = len(_COMPREHENSION.findall(text))
    why = ""
    if len(text) > MAX_LOCAL_LENGTH:
        why = f"{len(text)} characters with its variables, past the {MAX_LOCAL_LENGTH} the local engine takes"
    elif loops > MAX_LOCAL_COMPREHENSIONS:
        why = f"{loops} comprehensions with its variables, past the {MAX_LOCAL_COMPREHENSIONS} the local engine takes"
    if why:
        raise cel.CelCompileError(text, [cel.CelIssue(text, why)])
    found = _COMPILED.get(text)
    if found is None:
        if len(_COMPILED) > 4096:
            _COMPILED.clear()
        found = _COMPILED[text] = cel.default().engine.compile(text, POLICY_ENV)
    return found


def evaluate(expression: str, variables: JSON, declared: list[JSON] | None = None) -> cel.EvalResult[Any]:
    return Budget().evaluate(expression, variables, declared)


_NAMESPACES: Final = frozenset({"optional", "ip", "math", "strings", "base64", "sets", "lists"})
_MACROS: Final = frozenset(
    {"all", "exists", "exists_one", "map", "filter", "transformList", "transformMap", "has", "cel.bind"}
)


def _calls(text: str) -> set[str]:
    """The functions ``text`` calls, outside its string literals (macros are the language's own)."""
    return {name for name in calls(text) if name not in _MACROS and name.rpartition(".")[2] not in _MACROS}


def functions_used(policy: JSON) -> set[str]:
    """Every named CEL function a policy's expressions call (operators are the language's own), ``optional.none``
    style for namespaced ones: what the local evaluation must implement with kube-apiserver's semantics."""
    spec = policy.get("spec") or {}
    declared = list(spec.get("variables") or [])
    texts = [str(c["expression"]) for c in spec.get("matchConditions") or []]
    for validation in spec.get("validations") or []:
        texts += [
            with_variables(str(validation[key]), declared)
            for key in ("expression", "messageExpression")
            if key in validation
        ]
    found: set[str] = set()
    for text in texts:
        try:
            facts = compiled(text).facts
        except cel.CelCompileError:  # past the local parser's depth: read the calls off the text instead
            found |= _calls(text)
            continue
        for name in facts.functions if facts is not None else ():
            prefix, dot, _ = name.partition(".")
            if name[0] not in "_!@" and (not dot or prefix in _NAMESPACES):
                found.add(name)
    return found

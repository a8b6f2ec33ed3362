"""``enclave test``: every case of a directory through admission's decisions, compared with its expectation.

Each case is decided under the rules engine the ServiceConfiguration's ``spec.rules.engine`` selects, or the one
asked for: ``webhook`` (admission judges every rule), ``native`` (the compiled ValidatingAdmissionPolicies judged
as kube-apiserver would, :mod:`enclave_cli.native`, and the webhook for what stays on it) or ``both`` (each, and
a difference between their answers fails the case)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enclave_admission.routes import RESOURCES
from enclave_cli import documents
from enclave_cli.areas import Usage
from enclave_cli.cases import Case, parse_cases
from enclave_cli.engine import MUTATING, NATIVE, Outcome, Request, UnsupportedRouteError, evaluate
from enclave_cli.output import Style, table
from enclave_cli.world import DEFAULT_NAMESPACE, Compiled, World, compile_world

CONDITION_ERRORED = "could not be evaluated"
"""What the webhook says of a rule whose condition errored (:mod:`enclave_admission.rules.engine`)."""

_POLICY_CONDITION_ERROR = re.compile(r" resulted in error: no such key: (.+?) could not be evaluated: ")
"""What kube-apiserver says when a compiled policy refuses for a rule whose condition errored (the rule's origin
in the error the policy raises, :meth:`enclave_tenants.native.compiler._Compiler.conditions_evaluate`)."""


@dataclass
class Result:
    case: Case
    outcome: Outcome | None
    problems: list[str]
    engine: str = "webhook"
    webhook: Outcome | None = None
    """Under ``both``, the webhook's outcome (:attr:`outcome` is the native one)."""

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def got(self) -> str:
        return self.outcome.result if self.outcome is not None else "error"

    @property
    def decided(self) -> str:
        step = self.outcome.decided_by if self.outcome is not None else None
        if step is None:
            return "no Enclave webhook"
        where = step.hook if step.path in (NATIVE, MUTATING) else step.path
        return f"{where} {step.decision.reason}".strip()

    def as_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "suite": self.case.suite,
            "name": self.case.name,
            "file": str(self.case.document.path),
            "line": self.case.line,
            "passed": self.passed,
            "engine": self.engine,
            "expected": self.case.expect.result,
            "result": self.got,
            "decidedBy": (outcome.decided_by.path if outcome and outcome.decided_by else ""),
            "reason": (outcome.decided_by.decision.reason if outcome and outcome.decided_by else ""),
            "message": outcome.message if outcome else "",
            "patch": outcome.patch if outcome else [],
            "audits": outcome.audits if outcome else [],
            "problems": self.problems,
            "notes": outcome.notes if outcome else [],
        }


def load_world(paths: list[Path]) -> World:
    found: list[documents.Document] = []
    for path in documents.files(paths):
        found += documents.load(path)
    return World.collect(found)


def _contains(patch: list[dict[str, Any]], wanted: dict[str, Any]) -> bool:
    return any(all(op.get(key) == value for key, value in wanted.items()) for op in patch)


def judge(case: Case, outcome: Outcome) -> list[str]:
    """What differs between the outcome and the expectation (nothing: the case passes)."""
    expect = case.expect
    problems = []
    if outcome.result != expect.result:
        detail = f": {outcome.message}" if outcome.message else ""
        problems.append(f"expected {expect.result}, got {outcome.result}{detail}")
    step = outcome.decided_by
    reason = step.decision.reason if step is not None else ""
    if expect.reason and expect.reason != reason:
        problems.append(f"expected reason {expect.reason}, got {reason or 'none'}")
    if expect.message and expect.message not in outcome.message:
        problems.append(f"message does not contain {expect.message!r}: {outcome.message or '(no message)'}")
    if expect.audit and not any(expect.audit in audit for audit in outcome.audits):
        problems.append(f"no audit finding contains {expect.audit!r}: {'; '.join(outcome.audits) or '(none)'}")
    for wanted in expect.patch:
        if not _contains(outcome.patch, wanted):
            problems.append(f"patch lacks {json.dumps(wanted, sort_keys=True)}")
    return problems


def decide(request: Request, usage: Usage, compiled: Compiled, engine: str) -> Outcome:
    """``request`` under one rules engine (``webhook`` or ``native``), on a fresh admission state."""
    native = compiled.native(engine) if engine != "webhook" else None
    labels = compiled.namespace_labels.get(request.namespace, {})
    return evaluate(request, compiled.state(usage), compiled.namespace, native=native, namespace_labels=labels)


def run_case(case: Case, compiled: Compiled, engine: str = "") -> Result:
    """One case under ``engine`` (default: the configuration's ``spec.rules.engine``); under ``both`` the case
    is decided by each engine, judged on the native outcome, and fails where the two answers differ."""
    engine = engine or compiled.engine
    try:
        if engine == "both":
            webhook = decide(case.request, case.usage, compiled, "webhook")
            native = decide(case.request, case.usage, compiled, "native")
            return Result(case, native, judge(case, native) + differences(webhook, native), engine, webhook)
        outcome = decide(case.request, case.usage, compiled, engine)
    except UnsupportedRouteError as err:
        return Result(case, None, [str(err)], engine)
    return Result(case, outcome, judge(case, outcome), engine)


def _said(outcome: Outcome) -> str:
    return outcome.result + (f" ({outcome.message})" if outcome.message else "")


def differences(webhook: Outcome, native: Outcome) -> list[str]:
    """Where the two engines answer differently: the result, the denial (the same refusals: kube-apiserver
    reports a policy's first, the webhook lists up to five) and the audit findings. A refusal because a rule's
    condition errored is the same answer when both name the same rule: kube-apiserver reports an error in its
    own form, never a validation's message (docs/rules.md "Native policies", "Known differences")."""
    if webhook.result != native.result:
        return [f"the engines differ: webhook {_said(webhook)}, native {_said(native)}"]
    found = []
    if webhook.message != native.message and not _same_refusals(webhook, native):
        found.append(f"the engines differ in the message: webhook {webhook.message!r}, native {native.message!r}")
    if webhook.allowed and webhook.obj != native.obj:
        found.append(f"the engines differ in the object stored: webhook {webhook.obj}, native {native.obj}")
    if sorted(set(webhook.audits)) != sorted(set(native.audits)):
        found.append(f"the engines differ in the audit findings: webhook {webhook.audits}, native {native.audits}")
    return found


def _same_refusals(webhook: Outcome, native: Outcome) -> bool:
    """Whether a rules denial of the webhook and the policies' denial name the same refusals."""
    ours, theirs = webhook.denial, native.denial
    if ours is None or theirs is None or ours.path != RESOURCES or theirs.path != NATIVE:
        return False
    refusals = [refusal for verdict in theirs.verdicts if verdict.denies for refusal in verdict.denials]
    if refusals and refusals[0].error:
        named = _POLICY_CONDITION_ERROR.search(refusals[0].message)
        return named is not None and f"{named.group(1)} {CONDITION_ERRORED} (" in ours.decision.message
    if any(refusal.error for refusal in refusals):
        return CONDITION_ERRORED in ours.decision.message
    message = ours.decision.message
    if not all(refusal.message in message for refusal in refusals):
        return False
    truncated = bool(re.search(r"; and \d+ more$", message))  # the webhook lists five and counts the rest
    return truncated or len(message) == len("; ".join(refusal.message for refusal in refusals))


def collect_cases(world: World) -> list[Case]:
    tenants = world.tenant_names()
    cases = [case for document in world.tests for case in parse_cases(document, tenants)]
    if not cases:
        raise documents.InputError("no EnclaveTest manifest (kind: EnclaveTest) among the files")
    return cases


def run(paths: list[Path], namespace: str = DEFAULT_NAMESPACE, selected: str = "", engine: str = "") -> list[Result]:
    world = load_world(paths)
    compiled = compile_world(world, namespace)
    cases = [case for case in collect_cases(world) if selected in case.name]
    return [run_case(case, compiled, engine) for case in cases]


def render_table(results: list[Result], style: Style) -> str:
    rows = []
    for result in results:
        mark = style.green("PASS") if result.passed else style.red("FAIL")
        outcome = result.outcome
        detail = ""
        if outcome is not None and outcome.message:
            detail = outcome.message
        elif outcome is not None and outcome.audits:
            detail = "audit: " + "; ".join(outcome.audits)
        elif outcome is not None and outcome.patch:
            detail = "; ".join(f"{op['op']} {op['path']}" for op in outcome.patch)
        rows.append([mark, result.case.name, result.got, result.decided, detail])
        rows += [["", style.red(f"  {problem}"), "", "", ""] for problem in result.problems]
        rows += [["", style.yellow(f"  note: {note}"), "", "", ""] for note in (outcome.notes if outcome else [])]
    passed = sum(result.passed for result in results)
    engines = ", ".join(dict.fromkeys(result.engine for result in results))
    summary = f"{passed} passed, {len(results) - passed} failed (rules engine: {engines})"
    return table(["", "TEST", "RESULT", "DECIDED BY", "PATCH / MESSAGE"], rows) + "\n" + summary


def render_json(results: list[Result]) -> str:
    passed = sum(result.passed for result in results)
    body = {"passed": passed, "failed": len(results) - passed, "results": [r.as_json() for r in results]}
    return json.dumps(body, indent=2)


def render_junit(results: list[Result]) -> str:
    suites = ET.Element("testsuites")
    by_suite: dict[str, list[Result]] = {}
    for result in results:
        by_suite.setdefault(result.case.suite, []).append(result)
    for name, members in by_suite.items():
        failures = sum(not result.passed for result in members)
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(members)), failures=str(failures))
        for result in members:
            case = ET.SubElement(
                suite, "testcase", classname=name, name=result.case.name, file=str(result.case.document.path)
            )
            case.set("line", str(result.case.line))
            if not result.passed:
                failure = ET.SubElement(case, "failure", message=result.problems[0])
                failure.text = "\n".join(result.problems)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)

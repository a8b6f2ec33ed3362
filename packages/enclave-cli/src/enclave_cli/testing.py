"""``enclave test``: every case of a directory through admission's decisions, compared with its expectation."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enclave_cli import documents
from enclave_cli.cases import Case, parse_cases
from enclave_cli.engine import Outcome, UnsupportedRouteError, evaluate
from enclave_cli.output import Style, table
from enclave_cli.world import DEFAULT_NAMESPACE, Compiled, World, compile_world


@dataclass
class Result:
    case: Case
    outcome: Outcome | None
    problems: list[str]

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
        return f"{step.path} {step.decision.reason}".strip()

    def as_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "suite": self.case.suite,
            "name": self.case.name,
            "file": str(self.case.document.path),
            "line": self.case.line,
            "passed": self.passed,
            "expected": self.case.expect.result,
            "result": self.got,
            "decidedBy": (outcome.decided_by.path if outcome and outcome.decided_by else ""),
            "reason": (outcome.decided_by.decision.reason if outcome and outcome.decided_by else ""),
            "message": outcome.message if outcome else "",
            "patch": outcome.patch if outcome else [],
            "audits": outcome.audits if outcome else [],
            "problems": self.problems,
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


def run_case(case: Case, compiled: Compiled) -> Result:
    try:
        outcome = evaluate(case.request, compiled.state(case.usage), compiled.namespace)
    except UnsupportedRouteError as err:
        return Result(case, None, [str(err)])
    return Result(case, outcome, judge(case, outcome))


def collect_cases(world: World) -> list[Case]:
    tenants = world.tenant_names()
    cases = [case for document in world.tests for case in parse_cases(document, tenants)]
    if not cases:
        raise documents.InputError("no EnclaveTest manifest (kind: EnclaveTest) among the files")
    return cases


def run(paths: list[Path], namespace: str = DEFAULT_NAMESPACE, selected: str = "") -> list[Result]:
    world = load_world(paths)
    compiled = compile_world(world, namespace)
    cases = [case for case in collect_cases(world) if selected in case.name]
    return [run_case(case, compiled) for case in cases]


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
    passed = sum(result.passed for result in results)
    summary = f"{passed} passed, {len(results) - passed} failed"
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

"""Replication object validation (``/replication/spec``): refuse what cannot work, naming the field.

On CREATE and UPDATE of a GlobalTenantResource or TenantResource whose spec changed, the hook refuses a
``resyncPeriod`` out of range, a ``policy.condition`` that does not compile as CEL
(:func:`enclave_core.api.validation.replication_problems`, shared with the CLI and the controller's view) and a
generator template that does not parse as Jinja2. Only what the object alone decides is checked here: a
condition that fails on the live object, a render error, a missing context object still show in status.

Templates are tenant-written input (TenantResources belong to tenant owners), so parsing is bounded: it is
parse only (the AST, never compiled or rendered), in one dedicated thread so the event loop keeps deciding every
other review while a template parses (Jinja2's parser is pure Python, about 10 us of CPU per character, so
64 KiB costs ~0.6 s of CPU), and at most :data:`PARSE_BUDGET` characters per object: a template past the budget
is left to the controller, which renders it in its sandboxed workers and reports a syntax error in status. The
hook fails open (``failurePolicy: Ignore``) for the same reason: the controller checks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from jinja2 import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import ValidationError

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.replication import GlobalTenantResourceSpec, TenantResourceSpec
from enclave_core.api.validation import Problem, replication_problems

PARSE_BUDGET: Final = 64 * 1024
"""Template characters parsed per admission review; the rest is checked by the controller only."""

MAX_PROBLEMS: Final = 10
"""Problems named in one denial."""

_PARSER: Final = SandboxedEnvironment(keep_trailing_newline=True)
"""Parse only: the same syntax as the controller's environments (filters matter only when compiling)."""

_PARSING: Final = ThreadPoolExecutor(max_workers=1, thread_name_prefix="template-parse")
"""One thread: concurrent hostile templates queue behind each other instead of taking the whole process."""


def _kind(resource: str) -> str:
    return "GlobalTenantResource" if resource == "globaltenantresources" else "TenantResource"


def validate(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    del state  # decided from the object alone
    if request.operation not in ("CREATE", "UPDATE") or request.obj is None or request.sub_resource:
        return Decision.allow()
    raw = request.obj.get("spec")
    if request.operation == "UPDATE" and request.old is not None and raw == request.old.get("spec"):
        return Decision.allow("SpecUnchanged")  # a stored object never blocks its finalizer's removal
    model = GlobalTenantResourceSpec if request.resource == "globaltenantresources" else TenantResourceSpec
    try:
        spec = model.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError:
        return Decision.allow()  # kube-apiserver's schema validation names the field itself
    where = f"{request.namespace}/{request.name}" if request.namespace else request.name
    what = f"{_kind(request.resource)} {where}"
    problems = replication_problems(spec)
    templates = [
        (f"spec.resources[{index}].generators[{position}].template", generator.template)
        for index, block in enumerate(spec.resources)
        for position, generator in enumerate(block.generators or [])
        if generator.template
    ]
    if not templates:
        return _decide(what, problems)
    return _with_templates(what, problems, templates)


async def _with_templates(what: str, problems: list[Problem], templates: list[tuple[str, str]]) -> Decision:
    found = await asyncio.get_running_loop().run_in_executor(_PARSING, template_problems, templates)
    return _decide(what, problems + found)


def template_problems(templates: list[tuple[str, str]]) -> list[Problem]:
    """Syntax errors of ``(field, template)`` pairs, parsing at most :data:`PARSE_BUDGET` characters."""
    budget = PARSE_BUDGET
    found: list[Problem] = []
    for field, text in templates:
        if len(text) > budget:
            continue  # left to the controller (module doc)
        budget -= len(text)
        try:
            _PARSER.parse(text)
        except TemplateSyntaxError as err:
            found.append(Problem(field=field, message=f"line {err.lineno}: {err.message or err}"))
        except RecursionError:
            found.append(Problem(field=field, message="nested too deeply to parse"))
    return found


def _decide(what: str, problems: list[Problem]) -> Decision:
    if not problems:
        return Decision.allow()
    listed = "; ".join(str(problem) for problem in problems[:MAX_PROBLEMS])
    more = f" (and {len(problems) - MAX_PROBLEMS} more)" if len(problems) > MAX_PROBLEMS else ""
    return Decision.deny("InvalidSpec", f"{what} cannot work: {listed}{more}")

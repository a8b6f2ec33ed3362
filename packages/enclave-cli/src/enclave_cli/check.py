"""``enclave check``: Enclave objects against the models and the validation the webhooks and controllers run.

Three layers, each the project's own code:

1. the pydantic model of the kind (what the CRD schema and every controller parse with);
2. the extra rules beyond the schema: :func:`enclave_core.api.validation.service_configuration_problems` for
   the ServiceConfiguration, the problems :func:`enclave_tenants.plan.build_plan` reports for Tenants and
   TenantOwners (invalid regexes, owners);
3. the validating webhooks for the kind, called as a CREATE by a cluster operator (so the tenant fence
   passes and only the object's own validity is judged).

Each problem is printed as ``file:line: Kind name: field: message``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.routes import ROUTES
from enclave_admission.state import State
from enclave_cli import documents
from enclave_cli.documents import Document, InputError
from enclave_cli.engine import Request, hooks, resource_of
from enclave_cli.world import DEFAULT_NAMESPACE, TEST_KIND, World, compile_configuration
from enclave_core.api import KINDS_BY_NAME
from enclave_core.api.validation import rules_problems, service_configuration_problems, tenant_problems
from enclave_tenants.plan import build_plan
from enclave_tenants.policy import Policy

CHECK_USER = "enclave-cli:check"


@dataclass
class Problem:
    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def _model_problems(document: Document) -> list[Problem]:
    info = KINDS_BY_NAME[document.kind]
    try:
        info.model.model_validate(document.data)
    except ValidationError as err:
        found = []
        for error in err.errors():
            loc = tuple(error["loc"])
            field = ".".join(str(p) for p in loc) or "(object)"
            found.append(
                Problem(
                    document.path, document.line_of(loc), f"{document.kind} {document.name!r}: {field}: {error['msg']}"
                )
            )
        return found
    if document.kind in ("Tenant", "RuleStatus"):
        parsed = info.model.model_validate(document.data)
        rules, where = (parsed.spec.rules, "spec.rules") if document.kind == "Tenant" else (parsed.spec, "spec")  # type: ignore[attr-defined]
        problems = rules_problems(rules, where)
        if document.kind == "Tenant":
            problems += tenant_problems(parsed.spec)  # type: ignore[attr-defined]
        return [
            Problem(
                document.path, document.line_of(_loc(problem.field)), f"{document.kind} {document.name!r}: {problem}"
            )
            for problem in problems
        ]
    if document.kind == "ServiceConfiguration":
        spec = info.model.model_validate(document.data).spec  # type: ignore[attr-defined]
        return [
            Problem(
                document.path,
                document.line_of(_loc(problem.field)),
                f"ServiceConfiguration {document.name!r}: {problem}",
            )
            for problem in service_configuration_problems(spec)
        ]
    return []


def _loc(field: str) -> tuple[str | int, ...]:
    """``spec.rules[0].enforce`` -> ("spec", "rules", 0, "enforce"), the document's line index keys."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]']+", field) if p)


def _tenancy_problems(world: World) -> list[Problem]:
    plan = build_plan(
        [document.data for document in world.tenants if document.name],
        [document.data for document in world.owners if document.name],
        [],
        [],
        Policy(),
    )
    by_kind = {("Tenant", d.name): d for d in world.tenants} | {("TenantOwner", d.name): d for d in world.owners}
    found = []
    for kind, plans in (("Tenant", plan.tenants), ("TenantOwner", plan.owners)):
        for name, item in plans.items():
            document = by_kind[(kind, name)]
            for problem in item.problems:
                if problem.reason == "InvalidSpec":
                    continue  # the model layer reported it (tenant_problems), with the field's line
                field = problem.message.partition(":")[0]
                line = document.line_of(tuple(field.split("."))) if "." in field else document.line
                found.append(Problem(document.path, line, f"{kind} {name!r}: {problem.message} ({problem.reason})"))
    return found


def _webhook_problems(document: Document, state: State, namespace: str) -> list[Problem]:
    resource = resource_of(document.kind, str(document.data.get("apiVersion") or ""))
    meta = document.data.get("metadata") or {}
    request = Request(
        user=CHECK_USER,
        groups=("system:authenticated",),
        operation="CREATE",
        obj=document.data,
        old=None,
        group=resource[0],
        resource=resource[1],
        kind=document.kind,
        api_version=str(document.data.get("apiVersion") or ""),
        name=document.name,
        namespace=str(meta.get("namespace") or "") if isinstance(meta, dict) else "",
    )
    found = []
    for hook in hooks(namespace):
        if hook.mutating or not hook.matches(request.group, request.resource, "CREATE", request.namespaced):
            continue
        try:
            decided = ROUTES[hook.path](
                AdmissionRequest.from_review(request.review(document.data, dry_run=True)), state
            )
        except Exception as err:  # a decision function that cannot read this object: say so, never a traceback
            found.append(
                Problem(document.path, document.line, f"{document.kind} {document.name!r}: {hook.name}: {err}")
            )
            continue
        if isinstance(decided, Decision) and not decided.allowed:
            found.append(
                Problem(
                    document.path, document.line, f"{document.kind} {document.name!r}: {decided.message} ({hook.name})"
                )
            )
        elif not isinstance(decided, Decision):
            close = getattr(decided, "close", None)
            if close is not None:
                close()
    return found


def check(paths: list[Path], namespace: str = DEFAULT_NAMESPACE) -> tuple[list[Problem], int]:
    """Problems of every object in ``paths`` and how many objects were checked. Unreadable files and unknown
    kinds raise :class:`InputError` (exit code 2)."""
    loaded: list[Document] = []
    for path in documents.files(paths):
        loaded += documents.load(path)
    world = World.collect(loaded)
    problems: list[Problem] = []
    enclave = [d for d in loaded if d.kind in KINDS_BY_NAME]
    invalid: set[int] = set()
    for document in enclave:
        found = _model_problems(document)
        if found:
            invalid.add(id(document))
        problems += found
    problems += _tenancy_problems(world)
    state = State(expect_tenancy=False, namespace=namespace)
    try:
        state.set_config(compile_configuration(world.configuration))
    except InputError:
        state.set_config(compile_configuration(None))  # already reported above; judge the rest with defaults
    for document in enclave:
        if id(document) not in invalid:
            problems += _webhook_problems(document, state, namespace)
    checked = len(enclave) + sum(1 for d in loaded if d.kind == TEST_KIND)
    problems.sort(key=lambda p: (str(p.path), p.line))
    return problems, checked

"""Test manifests (``kind: EnclaveTest``): requests and what admission must answer.

```yaml
kind: EnclaveTest
metadata: {name: namespace rules}
tests:
- name: alice creates a namespace in her only tenant
  user: alice
  groups: [enclave.dev]
  operation: CREATE            # CREATE (default), UPDATE, DELETE
  tenant: acme                 # optional: the tenant the case is about (must exist in the directory)
  object: {apiVersion: v1, kind: Namespace, metadata: {name: acme-dev}}
  oldObject: ...               # UPDATE and DELETE
  subResource: status          # optional
  resource: networkpolicies    # optional: the plural, where Kubernetes' naming rule does not give it
  expect:
    result: patched            # allowed | patched | denied
    reason: TenantCordoned     # optional: the reason of the deciding webhook
    message: is cordoned       # optional: a fragment of the denial message
    audit: spec.rules[1]       # optional: a fragment of a rule's audit finding
    patch:                     # optional: operations the patch must contain
    - {op: add, path: /metadata/labels, value: {enclave.dev/tenant: acme}}
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from enclave_cli.areas import NO_USAGE, Usage, parse_usage
from enclave_cli.documents import Document
from enclave_cli.engine import OPERATIONS, Request, resource_of

RESULTS = ("allowed", "patched", "denied")
_CASE_KEYS = {
    "name",
    "user",
    "groups",
    "operation",
    "tenant",
    "object",
    "oldObject",
    "subResource",
    "resource",
    "expect",
    "usage",
}
_EXPECT_KEYS = {"result", "reason", "message", "patch", "audit"}


@dataclass
class Expectation:
    result: str
    reason: str = ""
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    audit: str = ""
    """A fragment of one of the rules' audit findings."""


@dataclass
class Case:
    suite: str
    name: str
    request: Request
    expect: Expectation
    document: Document
    index: int
    tenant: str = ""
    usage: Usage = NO_USAGE
    """What the cluster's objects use (the manifest's ``usage``, then the case's)."""

    @property
    def line(self) -> int:
        return self.document.line_of(("tests", self.index))

    @property
    def where(self) -> str:
        return f"{self.document.path}:{self.line}"


def _str(document: Document, value: Any, loc: tuple[str | int, ...], what: str) -> str:
    if not isinstance(value, str):
        raise document.error(f"{what} must be a string", loc)
    return value


def parse_request(document: Document, raw: Any, loc: tuple[str | int, ...]) -> Request:
    """A request (the part of a case that says who does what) from ``raw`` at ``loc`` of ``document``."""
    if not isinstance(raw, dict):
        raise document.error("a request must be a mapping", loc)
    user = _str(document, raw.get("user"), (*loc, "user"), "user")
    groups = raw.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise document.error("groups must be a list of strings", (*loc, "groups"))
    operation = str(raw.get("operation") or "CREATE").upper()
    if operation not in OPERATIONS:
        raise document.error(f"operation {operation!r} is not one of {', '.join(OPERATIONS)}", (*loc, "operation"))
    obj, old = raw.get("object"), raw.get("oldObject")
    for key, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise document.error(f"{key} must be a mapping", (*loc, key))
    if operation == "DELETE":
        if old is None:
            old, obj = obj, None
        if old is None:
            raise document.error("a DELETE needs the object being deleted (object or oldObject)", loc)
    elif obj is None:
        raise document.error(f"a {operation} needs an object", loc)
    elif operation == "UPDATE" and old is None:
        raise document.error("an UPDATE needs oldObject (the object before the change)", loc)
    shown = obj if obj is not None else old
    assert shown is not None
    kind = str(shown.get("kind") or "")
    api_version = str(shown.get("apiVersion") or "")
    key = "object" if obj is not None else "oldObject"
    if not kind or not api_version:
        raise document.error(f"{key} needs apiVersion and kind", (*loc, key))
    resource = resource_of(kind, api_version)
    if raw.get("resource"):
        resource = (resource[0], _str(document, raw["resource"], (*loc, "resource"), "resource"))
    meta = shown.get("metadata") or {}
    if not isinstance(meta, dict) or not meta.get("name"):
        raise document.error(f"{key} has no metadata.name", (*loc, key))
    sub_resource = str(raw.get("subResource") or "")
    return Request(
        user=user,
        groups=tuple(groups),
        operation=operation,
        obj=obj,
        old=old,
        group=resource[0],
        resource=resource[1],
        sub_resource=sub_resource,
        kind=kind,
        api_version=api_version,
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or ""),
    )


def _expectation(document: Document, raw: Any, loc: tuple[str | int, ...]) -> Expectation:
    if isinstance(raw, str):
        raw = {"result": raw}
    if not isinstance(raw, dict):
        raise document.error("expect must be a result (allowed, patched, denied) or a mapping", loc)
    unknown = set(raw) - _EXPECT_KEYS
    if unknown:
        raise document.error(f"unknown field {sorted(unknown)[0]!r} in expect", (*loc, sorted(unknown)[0]))
    result = raw.get("result")
    if result not in RESULTS:
        raise document.error(f"expect.result must be one of {', '.join(RESULTS)}, not {result!r}", (*loc, "result"))
    patch = raw.get("patch") or []
    if not isinstance(patch, list):
        raise document.error("expect.patch must be a list of JSON patch operations", (*loc, "patch"))
    return Expectation(
        result=result,
        reason=str(raw.get("reason") or ""),
        message=str(raw.get("message") or ""),
        patch=patch,
        audit=str(raw.get("audit") or ""),
    )


def parse_cases(document: Document, tenants: set[str]) -> list[Case]:
    """Every case of one manifest; ``tenants`` are the directory's tenant names (a case naming another is an
    error in the test, not a failure of the policy)."""
    suite = document.name or document.path.stem
    tests = document.data.get("tests")
    if not isinstance(tests, list) or not tests:
        raise document.error("an EnclaveTest needs a non-empty list 'tests'", ("tests",))
    shared = parse_usage(document, document.data.get("usage"), ("usage",))
    cases = []
    for index, raw in enumerate(tests):
        loc: tuple[str | int, ...] = ("tests", index)
        if not isinstance(raw, dict):
            raise document.error("a test must be a mapping", loc)
        unknown = set(raw) - _CASE_KEYS
        if unknown:
            first = sorted(unknown)[0]
            raise document.error(f"unknown field {first!r} in test", (*loc, first))
        name = str(raw.get("name") or f"test {index + 1}")
        tenant = str(raw.get("tenant") or "")
        if tenant and tenant not in tenants:
            known = ", ".join(sorted(tenants)) or "none"
            raise document.error(
                f"test {name!r} names tenant {tenant!r}, which no file defines (tenants: {known})", (*loc, "tenant")
            )
        if "expect" not in raw:
            raise document.error(f"test {name!r} has no expect", loc)
        request = parse_request(document, raw, loc)
        usage = shared.merged(parse_usage(document, raw.get("usage"), (*loc, "usage")))
        expect = _expectation(document, raw["expect"], (*loc, "expect"))
        cases.append(Case(suite, name, request, expect, document, index, tenant, usage))
    return cases

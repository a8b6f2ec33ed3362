"""docs/coverage.md maps every ``spec`` field of every kind to the test that proves its behaviour.

A field accepted and then ignored is the worst bug a policy product can have (issue 30): the user gets no error
and no effect. This test keeps the table honest in both directions. It walks the storage version of every
generated CRD in charts/enclave/crds and fails on a field the table does not list, on a row naming a field the
CRDs no longer have, and on a row naming a test that does not exist (the file is parsed, not imported, so the
check costs no control plane). Rows marked "not yet proven" are accepted and reported as a warning, so the gap
stays visible in every run instead of being papered over with a test name.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[4]
CRD_DIR = REPO / "charts" / "enclave" / "crds"
TABLE = REPO / "docs" / "coverage.md"

OPAQUE: dict[str, frozenset[str]] = {
    "LabelSelector": frozenset({"matchExpressions", "matchLabels"}),
    "ScopeSelector": frozenset({"matchExpressions"}),
    "Toleration": frozenset({"effect", "key", "operator", "tolerationSeconds", "value"}),
    "RuleWithOperations": frozenset({"apiGroups", "apiVersions", "operations", "resources", "scope"}),
    "ValueMatcher": frozenset({"exact", "exp", "negate"}),
    "Subject": frozenset({"apiGroup", "kind", "name", "namespace"}),
}
"""Shared types proven as a whole where they are used: an object whose properties are exactly one of these sets
is a leaf of the walk (docs/coverage.md says so too)."""

ROW = re.compile(r"^\| (?P<kind>[A-Za-z]+) \| `(?P<field>spec[^`]*)` \| (?P<proof>.+?) \|$")
TEST = re.compile(r"^`(?P<file>[\w./-]+\.py)::(?P<name>test_\w+)`$")
NOT_YET = "not yet proven: "


def _opaque(node: dict[str, Any]) -> bool:
    properties: dict[str, Any] = node.get("properties") or {}
    return bool(properties) and frozenset(properties) in OPAQUE.values()


def leaves(node: dict[str, Any], path: str) -> Iterator[str]:
    """Field paths under ``node``: leaves, free-form objects and maps, and the shared types of :data:`OPAQUE`."""
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        items = node["items"]
        if items.get("properties") and not _opaque(items):
            yield from leaves(items, f"{path}[]")
        else:
            yield path
        return
    properties = node.get("properties")
    if properties and not _opaque(node):
        for key, child in properties.items():
            yield from leaves(child, f"{path}.{key}")
        return
    yield path


def crd_fields() -> set[tuple[str, str]]:
    """(kind, spec field path) of the storage version of every generated CRD."""
    found: set[tuple[str, str]] = set()
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("storage"):
                continue
            spec = version["schema"]["openAPIV3Schema"].get("properties", {}).get("spec")
            if spec is not None:
                found.update((kind, field) for field in leaves(spec, "spec"))
    return found


def table_rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in TABLE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match["kind"], match["field"], match["proof"]))
    return rows


@cache
def defined_tests(file: str) -> frozenset[str]:
    """Names of the test functions a test file defines (module level or in a class), from its syntax tree."""
    path = REPO / file
    if not path.is_file():
        return frozenset()
    tree = ast.parse(path.read_text(), filename=file)
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    )


def test_the_walk_sees_every_kind_and_stops_at_shared_types() -> None:
    fields = crd_fields()
    assert {kind for kind, _ in fields} >= {"Tenant", "ServiceConfiguration", "GlobalTenantResource", "RuleStatus"}
    assert ("GlobalTenantResource", "spec.tenantSelector") in fields  # a LabelSelector is one field
    assert ("GlobalTenantResource", "spec.tenantSelector.matchLabels") not in fields
    assert ("Tenant", "spec.data") in fields  # free-form
    assert ("RuleStatus", "spec[].enforce.action") in fields  # RuleStatus.spec is a list of rules


def test_every_spec_field_is_in_the_table_once() -> None:
    rows = table_rows()
    listed = [(kind, field) for kind, field, _ in rows]
    duplicates = sorted({row for row in listed if listed.count(row) > 1})
    assert not duplicates, f"docs/coverage.md lists these more than once: {duplicates}"
    missing = sorted(crd_fields() - set(listed))
    assert not missing, "spec fields docs/coverage.md does not map to a test:\n" + "\n".join(
        f"| {kind} | `{field}` | `tests/...py::test_...` |" for kind, field in missing
    )


def test_every_row_names_a_field_that_exists() -> None:
    stale = sorted({(kind, field) for kind, field, _ in table_rows()} - crd_fields())
    assert not stale, f"docs/coverage.md lists fields the CRDs do not have: {stale}"


def test_every_named_test_exists_and_gaps_are_reported() -> None:
    broken, gaps = [], []
    for kind, field, proof in table_rows():
        if proof.startswith(NOT_YET):
            gaps.append(f"{kind} {field}: {proof.removeprefix(NOT_YET)}")
            continue
        match = TEST.match(proof)
        if match is None:
            broken.append(f"{kind} {field}: {proof!r} is neither `path.py::test_name` nor '{NOT_YET}<why>'")
        elif match["name"] not in defined_tests(match["file"]):
            broken.append(f"{kind} {field}: {match['file']} has no test {match['name']}")
    assert not broken, "\n".join(broken)
    if gaps:
        warnings.warn(f"{len(gaps)} spec fields not yet proven by a test:\n" + "\n".join(gaps), stacklevel=1)


def test_the_table_parser_reads_both_row_forms() -> None:
    good = ROW.match("| Tenant | `spec.cordoned` | `tests/a/test_b.py::test_c` |")
    assert good is not None
    assert TEST.match(good["proof"]) is not None
    gap = ROW.match("| QuantityLedger | `spec.targetRef.uid` | not yet proven: written by Enclave only |")
    assert gap is not None
    assert gap["proof"].startswith(NOT_YET)

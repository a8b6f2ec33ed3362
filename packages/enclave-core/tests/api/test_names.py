"""The Helm chart spells some of :mod:`enclave_core.api.names` again (hook selectors and matchConditions in
``values.yaml``, the matchConditions ``_helpers.tpl`` appends): a key the chart writes that the module does not
define would be a label no component sets or selects on, so the two must agree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from enclave_core.api import names

CHART = Path(__file__).resolve().parents[4] / "charts" / "enclave"
_ENCLAVE_KEY = re.compile(r"(?<![\w./-])((?:[a-z0-9-]+\.)*enclave\.dev/[A-Za-z0-9._-]+)")
_MANAGERS = {value for key, value in vars(names).items() if key.endswith("_MANAGER")}


def _module_values() -> set[str]:
    return {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}


def _chart_texts() -> dict[str, str]:
    paths = [CHART / "values.yaml", *sorted((CHART / "templates").rglob("*")), CHART / "values.schema.json"]
    return {str(path.relative_to(CHART)): path.read_text() for path in paths if path.is_file()}


def test_every_enclave_key_the_chart_writes_is_defined_in_names() -> None:
    defined = _module_values()
    unknown = sorted(
        f"{source}: {key}"
        for source, text in _chart_texts().items()
        for key in _ENCLAVE_KEY.findall(text)
        if not re.fullmatch(r"enclave\.dev/v1(alpha|beta)?\d*", key) and key not in defined
    )
    assert not unknown, "\n".join(unknown)


def test_the_charts_keys_are_found_at_all() -> None:
    """Guards the test above against a pattern that silently matches nothing."""
    found = {key for text in _chart_texts().values() for key in _ENCLAVE_KEY.findall(text)}
    assert {names.TENANT_LABEL, names.PROMOTED_LABEL, names.ENCLAVE_MANAGED_BY, names.SKIP_UNJUDGED_CONDITION} <= found


def _selector_requirements(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node] if {"key", "operator"} <= node.keys() else []
        return found + [r for value in node.values() for r in _selector_requirements(value)]
    if isinstance(node, list):
        return [r for item in node for r in _selector_requirements(item)]
    return []


def test_the_charts_managed_by_selectors_name_a_component_manager() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    managed_by = [r for r in _selector_requirements(values) if r["key"] == names.MANAGED_BY]
    assert managed_by, "the managedRoleBindings hook selects on app.kubernetes.io/managed-by"
    for requirement in managed_by:
        assert set(requirement.get("values") or []) <= _MANAGERS, requirement


def test_each_component_writes_as_enclave_dash_its_name() -> None:
    """Field managers are what ``kubectl get -o yaml --show-managed-fields`` and the RBAC tests look for."""
    assert all(manager.startswith("enclave-") for manager in _MANAGERS)
    assert len(_MANAGERS) == 8

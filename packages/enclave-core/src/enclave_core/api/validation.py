"""Validation of API objects beyond what their CRD schema can express (the validating webhook's rules).

kube-apiserver's CEL rules cannot compile a regular expression, parse a duration's range or compile an
embedded CEL expression. These checks are pure functions shared by the validating webhook (which refuses
the object) and the owning controller (which reports it in status), so the two can never disagree.
"""

from __future__ import annotations

import re
from typing import Final

from enclave_core import cel
from enclave_core.api.configuration import MutatingAdmission, ServiceConfigurationSpec, ValidatingAdmission
from enclave_core.api.meta import ApiModel
from enclave_core.durations import parse_duration

# Namespaces whose failure to admit would stop the cluster from healing itself.
CRITICAL_NAMESPACES: Final = ("kube-system",)


class Problem(ApiModel):
    """One thing wrong with an object, located by its JSON path."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _regex_problem(field: str, pattern: str | None) -> list[Problem]:
    if not pattern:
        return []
    try:
        re.compile(pattern)
    except re.error as err:
        return [Problem(field=field, message=f"invalid regular expression {pattern!r}: {err}")]
    return []


def service_configuration_problems(spec: ServiceConfigurationSpec) -> list[Problem]:
    """Everything the schema cannot check: regexes, durations, CEL, webhooks that would break the cluster."""
    found: list[Problem] = []
    found += _regex_problem("spec.protectedNamespaceRegex", spec.protected_namespace_regex)
    if spec.node_metadata is not None:
        for key, forbidden in (
            ("forbiddenLabels", spec.node_metadata.forbidden_labels),
            ("forbiddenAnnotations", spec.node_metadata.forbidden_annotations),
        ):
            if forbidden is not None:
                found += _regex_problem(f"spec.nodeMetadata.{key}.deniedRegex", forbidden.denied_regex)
    try:
        if parse_duration(spec.cache_invalidation).total_seconds() < 1:
            found.append(Problem(field="spec.cacheInvalidation", message="must be at least 1s"))
    except ValueError as err:
        found.append(Problem(field="spec.cacheInvalidation", message=str(err)))
    if spec.admission is not None:
        for side_name, side in (("mutating", spec.admission.mutating), ("validating", spec.admission.validating)):
            if side is not None:
                found += _admission_problems(f"spec.admission.{side_name}", side)
    return found


def _admission_problems(path: str, side: MutatingAdmission | ValidatingAdmission) -> list[Problem]:
    found: list[Problem] = []
    seen: set[str] = set()
    for index, webhook in enumerate(side.webhooks or []):
        where = f"{path}.webhooks[{index}]"
        if webhook.name in seen:
            found.append(Problem(field=f"{where}.name", message=f"duplicate webhook name {webhook.name!r}"))
        seen.add(webhook.name)
        for position, condition in enumerate(webhook.match_conditions or []):
            if "authorizer" in condition.expression:
                # kube-apiserver's authorizer library is not modelled by our CEL environment; the API server
                # itself rejects a bad expression when the configuration is applied (reported as ApplyFailed).
                continue
            for issue in cel.check(condition.expression, cel.MATCH_CONDITION_ENV):
                found.append(Problem(field=f"{where}.matchConditions[{position}].expression", message=str(issue)))
        if webhook.failure_policy == "Fail" and _catches_critical_namespaces(webhook):
            found.append(
                Problem(
                    field=f"{where}.namespaceSelector",
                    message="a failurePolicy: Fail webhook on all resources must exclude kube-system "
                    "(e.g. kubernetes.io/metadata.name NotIn [kube-system]); otherwise an outage of the "
                    "webhook stops the cluster's own controllers",
                )
            )
    return found


def _catches_critical_namespaces(webhook: object) -> bool:
    """A fail-closed webhook on every resource that does not exclude kube-system would wedge the cluster."""
    rules = getattr(webhook, "rules", None) or []
    wildcard = any((rule.resources or []) in (["*"], ["*/*"]) and (rule.api_groups or []) == ["*"] for rule in rules)
    if not wildcard:
        return False
    selector = getattr(webhook, "namespace_selector", None)
    if selector is None:
        return True
    for requirement in selector.match_expressions or []:
        if (
            requirement.key == "kubernetes.io/metadata.name"
            and requirement.operator == "NotIn"
            and all(ns in (requirement.values or []) for ns in CRITICAL_NAMESPACES)
        ):
            return False
    labels = selector.match_labels or {}
    return not labels

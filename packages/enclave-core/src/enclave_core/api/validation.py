"""Validation of API objects beyond what their CRD schema can express (the validating webhook's rules).

kube-apiserver's CEL rules cannot compile a regular expression, parse a duration's range or compile an
embedded CEL expression. These checks are pure functions shared by the validating webhook (which refuses
the object) and the owning controller (which reports it in status), so the two can never disagree.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import urlsplit

from pydantic import ValidationError

from enclave_core import cel, patterns
from enclave_core.api.configuration import MutatingAdmission, ServiceConfigurationSpec, ValidatingAdmission
from enclave_core.api.meta import ApiModel, ValueMatcher
from enclave_core.api.names import NAMESPACE_NAME_LABEL
from enclave_core.api.proxy import ProxySettings
from enclave_core.api.replication import TenantResourceSpec
from enclave_core.api.rules import RuleBody, Toleration, WorkloadMutation, WorkloadsPolicy
from enclave_core.api.tenancy import ForbiddenList, TenantSpec
from enclave_core.durations import parse_duration
from enclave_core.quantity import Quantity
from enclave_core.selectors import validate_label_key, validate_label_value

# Namespaces whose failure to admit would stop the cluster from healing itself.
CRITICAL_NAMESPACES: Final = ("kube-system",)


class Problem(ApiModel):
    """One thing wrong with an object, located by its JSON path."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validation_message(err: ValidationError, under: str = "") -> str:
    """The first five of what the schema refused, as ``path: message`` (each path prefixed with ``under``):
    what a status condition or an admission refusal says about an object that does not parse, short enough to
    read, never the whole dump a deeply wrong object gives."""
    return "; ".join(f"{under}{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in err.errors()[:5])


def _regex_problem(field: str, pattern: str | None) -> list[Problem]:
    """A pattern the linear-time engine (:mod:`enclave_core.patterns`) cannot compile, named by its field: the
    object is refused whole rather than applied without the pattern."""
    if not pattern:
        return []
    why = patterns.problem(pattern)
    return [Problem(field=field, message=why)] if why else []


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
    found += proxy_problems("spec.proxy", spec.proxy)
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


def forbidden_problems(field: str, forbidden: ForbiddenList | None) -> list[Problem]:
    """A Tenant's ``forbiddenLabels``/``forbiddenAnnotations`` (at ``field``) whose deniedRegex cannot work."""
    return [] if forbidden is None else _regex_problem(f"{field}.deniedRegex", forbidden.denied_regex)


def tenant_problems(spec: TenantSpec) -> list[Problem]:
    """Everything the schema cannot check in a Tenant's spec outside its rules (:func:`rules_problems`): the
    namespace options' forbidden-metadata patterns and the proxy settings' name patterns."""
    found = proxy_problems("spec.proxy", spec.proxy)
    options = spec.namespace_options
    if options is None:
        return found
    return (
        found
        + forbidden_problems("spec.namespaceOptions.forbiddenLabels", options.forbidden_labels)
        + forbidden_problems("spec.namespaceOptions.forbiddenAnnotations", options.forbidden_annotations)
    )


def proxy_problems(field: str, proxy: ProxySettings | None) -> list[Problem]:
    """``spec.proxy`` entries whose name patterns the linear-time engine cannot compile (enclave-proxy would
    otherwise show nothing for the kind, silently)."""
    found: list[Problem] = []
    for index, entry in enumerate(proxy.kinds or [] if proxy is not None else []):
        found += _matchers_problems(f"{field}.kinds[{index}].names", entry.names)
    return found


RESYNC_RANGE: Final = (1, 24 * 3600)
"""Seconds a replication object's ``resyncPeriod`` may span: below 1s the controller would spin; past a day a
drift it exists to repair would outlive the configuration's own cache invalidation."""


def replication_problems(spec: TenantResourceSpec) -> list[Problem]:
    """Everything the schema cannot check in a GlobalTenantResource's or TenantResource's spec, except templates
    (their parse needs Jinja2, which the admission hook does itself): ``resyncPeriod`` out of
    :data:`RESYNC_RANGE` and ``policy.condition`` CEL that does not compile. What can only fail at reconcile
    time (a condition's evaluation, a render) stays in status."""
    found: list[Problem] = []
    low, high = RESYNC_RANGE
    try:
        seconds = parse_duration(spec.resync_period).total_seconds()
    except (ValueError, OverflowError) as err:
        found.append(Problem(field="spec.resyncPeriod", message=str(err)))
    else:
        if not low <= seconds <= high:
            found.append(Problem(field="spec.resyncPeriod", message="must be between 1s and 24h"))
    for index, block in enumerate(spec.resources):
        if block.policy is not None and block.policy.condition:
            for issue in cel.check(block.policy.condition, cel.POLICY_CONDITION_ENV):
                found.append(Problem(field=f"spec.resources[{index}].policy.condition", message=str(issue)))
    return found


REVIEW_VERSIONS: Final = ("v1", "v1beta1")
"""AdmissionReview versions kube-apiserver speaks; a webhook must name at least one."""


def _in_cluster_host(url: str) -> str | None:
    """The host of ``url`` when it names an in-cluster Service (``<name>.<namespace>.svc[.<domain>]``)."""
    host = urlsplit(url).hostname or ""
    labels = host.rstrip(".").split(".")
    return host if len(labels) >= 3 and "svc" in labels[2:] else None


def _admission_problems(path: str, side: MutatingAdmission | ValidatingAdmission) -> list[Problem]:
    """What kube-apiserver would refuse (or accept and then fail on) when the configuration is applied, refused
    up front with the field named, so nothing is half-applied and the configuration never goes Ready=False."""
    found: list[Problem] = []
    url = side.client.url
    if url is not None and _in_cluster_host(url) is not None:
        found.append(
            Problem(
                field=f"{path}.client.url",
                message=f"host {_in_cluster_host(url)} is an in-cluster Service: use client.service "
                "(name, namespace, port) so kube-apiserver reaches it through the Service, not DNS",
            )
        )
    seen: set[str] = set()
    for index, webhook in enumerate(side.webhooks or []):
        where = f"{path}.webhooks[{index}]"
        if webhook.name in seen:
            found.append(Problem(field=f"{where}.name", message=f"duplicate webhook name {webhook.name!r}"))
        seen.add(webhook.name)
        if not set(webhook.admission_review_versions) & set(REVIEW_VERSIONS):
            found.append(
                Problem(
                    field=f"{where}.admissionReviewVersions",
                    message=f"names no version kube-apiserver supports ({', '.join(REVIEW_VERSIONS)})",
                )
            )
        if webhook.side_effects in ("Some", "Unknown"):
            found.append(
                Problem(
                    field=f"{where}.sideEffects",
                    message=f"{webhook.side_effects} is allowed only for webhooks created through "
                    "admissionregistration v1beta1; use None or NoneOnDryRun",
                )
            )
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
            requirement.key == NAMESPACE_NAME_LABEL
            and requirement.operator == "NotIn"
            and all(ns in (requirement.values or []) for ns in CRITICAL_NAMESPACES)
        ):
            return False
    labels = selector.match_labels or {}
    return not labels


# -- rules (Tenant.spec.rules[], RuleStatus.spec[]) --------------------------------------------------------

KIND_PATTERN: Final = re.compile(r"^(\*|[A-Z][A-Za-z0-9]*)$")
"""A kind name as the API spells it (``ConfigMap``), or ``*``."""


def _matchers_problems(field: str, matchers: Sequence[ValueMatcher] | None) -> list[Problem]:
    found: list[Problem] = []
    for index, matcher in enumerate(matchers or []):
        found += _regex_problem(f"{field}[{index}].exp", matcher.exp)
    return found


def _cidr_problems(field: str, cidrs: Sequence[str] | None) -> list[Problem]:
    found: list[Problem] = []
    for index, cidr in enumerate(cidrs or []):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            found.append(Problem(field=f"{field}[{index}]", message=f"{cidr!r} is not an IP address or a CIDR"))
    return found


def _kinds_problems(field: str, kinds: Sequence[str]) -> list[Problem]:
    return [
        Problem(field=f"{field}[{index}]", message=f"{kind!r} is not a kind name (e.g. ConfigMap) or '*'")
        for index, kind in enumerate(kinds)
        if not KIND_PATTERN.match(kind)
    ]


def _quantity_problems(field: str, values: Mapping[str, object] | None) -> list[Problem]:
    found: list[Problem] = []
    for key, value in (values or {}).items():
        try:
            Quantity.parse(str(value))
        except ValueError as err:
            found.append(Problem(field=f"{field}[{key!r}]", message=f"{value!r} is not a quantity: {err}"))
    return found


def rule_problems(rule: RuleBody, path: str) -> list[Problem]:
    """What in ``rule`` (found at ``path``, e.g. ``spec.rules[2]``) could never work: CEL that does not compile,
    regular expressions, CIDRs, kind names and quantities. The Tenant webhook refuses such a rule naming the
    field; the tenants controller reports one that got in anyway (webhook down) in the RuleStatus."""
    found: list[Problem] = []
    for index, audience in enumerate(rule.audience or []):
        if audience.kind == "Custom":
            for issue in cel.check(audience.name, cel.RULE_AUDIENCE_ENV):
                found.append(Problem(field=f"{path}.audience[{index}].name", message=str(issue)))
    enforce = rule.enforce
    if enforce is not None:
        where = f"{path}.enforce"
        for index, condition in enumerate(enforce.conditions or []):
            for issue in cel.check(condition.expression, cel.RULE_CONDITION_ENV):
                found.append(Problem(field=f"{where}.conditions[{index}].expression", message=str(issue)))
        for index, metadata in enumerate(enforce.metadata or []):
            found += _kinds_problems(f"{where}.metadata[{index}].kinds", metadata.kinds)
            for part, entries in (("labels", metadata.labels), ("annotations", metadata.annotations)):
                for key, value in (entries or {}).items():
                    found += _matchers_problems(f"{where}.metadata[{index}].{part}[{key!r}].values", value.values)
        if enforce.ingress is not None:
            found += _matchers_problems(f"{where}.ingress.hostnames", enforce.ingress.hostnames)
        services = enforce.services
        if services is not None:
            if services.external_i_ps is not None:
                found += _cidr_problems(f"{where}.services.externalIPs.cidrs", services.external_i_ps.cidrs)
            if services.load_balancers is not None:
                found += _cidr_problems(f"{where}.services.loadBalancers.cidrs", services.load_balancers.cidrs)
            if services.external_names is not None:
                found += _matchers_problems(
                    f"{where}.services.externalNames.hostnames", services.external_names.hostnames
                )
        policies = enforce.network.policies if enforce.network else None
        if policies is not None:
            for direction, policy in (("ingress", policies.ingress), ("egress", policies.egress)):
                if policy is not None:
                    found += _cidr_problems(f"{where}.network.policies.{direction}.cidrs", policy.cidrs)
        if enforce.workloads is not None:
            found += _workloads_problems(f"{where}.workloads", enforce.workloads)
    for index, mutation in enumerate(rule.mutate or []):
        if mutation.metadata is not None:
            found += _kinds_problems(f"{path}.mutate[{index}].metadata.kinds", mutation.metadata.kinds)
        if mutation.workloads is not None:
            workload = mutation.workloads
            found += _workload_mutation_problems(f"{path}.mutate[{index}].workloads", workload)
    return found


def _workload_mutation_problems(where: str, workload: WorkloadMutation) -> list[Problem]:
    """What would make every mutated Pod invalid (kube-apiserver would refuse each for a value the tenant
    never wrote): bad quantities, nodeSelector labels, class names, tolerations."""
    found = _quantity_problems(f"{where}.defaultRequests", workload.default_requests)
    found += _quantity_problems(f"{where}.defaultLimits", workload.default_limits)
    for key, value in (workload.node_selector or {}).items():
        for check in (validate_label_key, validate_label_value):
            try:
                check(key if check is validate_label_key else value)
            except ValueError as err:
                found.append(Problem(field=f"{where}.nodeSelector[{key!r}]", message=str(err)))
    for field, name in (
        ("priorityClassName", workload.priority_class_name),
        ("runtimeClassName", workload.runtime_class_name),
        ("schedulerName", workload.scheduler_name),
    ):
        if name and not _SUBDOMAIN.fullmatch(name):
            found.append(Problem(field=f"{where}.{field}", message=f"{name!r} is not a DNS subdomain name"))
    found += _tolerations_problems(f"{where}.tolerations", workload.tolerations)
    return found


_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _tolerations_problems(field: str, tolerations: Sequence[Toleration] | None) -> list[Problem]:
    """Pod validation's rules for a toleration (a rule listing one Kubernetes refuses could never match)."""
    found: list[Problem] = []
    for index, toleration in enumerate(tolerations or []):
        where = f"{field}[{index}]"
        if toleration.operator == "Exists" and toleration.value:
            found.append(Problem(field=f"{where}.value", message="must be empty when operator is Exists"))
        if not toleration.key and toleration.operator != "Exists":
            found.append(Problem(field=f"{where}.operator", message="must be Exists when key is empty"))
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            found.append(Problem(field=f"{where}.tolerationSeconds", message="only with effect NoExecute"))
        if toleration.key:
            try:
                validate_label_key(toleration.key)
            except ValueError as err:
                found.append(Problem(field=f"{where}.key", message=str(err)))
    return found


def _budget_problem(field: str, value: int | str | None) -> list[Problem]:
    """A PodDisruptionBudget bound: a non-negative number or a percentage from 0% to 100%."""
    if value is None:
        return []
    text = str(value)
    number = text[:-1] if text.endswith("%") else text
    if not number.isdigit() or (text.endswith("%") and int(number) > 100):
        return [Problem(field=field, message=f"{value!r} is not a non-negative number or a percentage (0%-100%)")]
    return []


def _bounds_problems(field: str, low: Mapping[str, object] | None, high: Mapping[str, object] | None) -> list[Problem]:
    """min above max for the same resource: no container could ever satisfy the rule."""
    found: list[Problem] = []
    for name in sorted(set(low or {}) & set(high or {})):
        try:
            below, above = Quantity.parse(str((low or {})[name])), Quantity.parse(str((high or {})[name]))
        except ValueError:
            continue  # reported as a bad quantity
        if below > above:
            found.append(Problem(field=f"{field}.min[{name!r}]", message=f"{below} is above max {above}"))
    return found


def _workloads_problems(where: str, workloads: WorkloadsPolicy) -> list[Problem]:
    found = _matchers_problems(f"{where}.schedulers", workloads.schedulers)
    for index, registry in enumerate(workloads.registries or []):
        found += _regex_problem(f"{where}.registries[{index}].url", registry.url)
    placement = workloads.placement
    if placement is not None:
        found += _matchers_problems(f"{where}.placement.schedulers", placement.schedulers)
        found += _matchers_problems(f"{where}.placement.priorityClasses", placement.priority_classes)
        found += _matchers_problems(f"{where}.placement.runtimeClasses", placement.runtime_classes)
    if workloads.security is not None:
        found += _matchers_problems(f"{where}.security.hostPaths", workloads.security.host_paths)
    resources = workloads.resources
    if resources is not None:
        for part, bounds in (("requests", resources.requests), ("limits", resources.limits)):
            if bounds is not None:
                found += _quantity_problems(f"{where}.resources.{part}.min", bounds.min)
                found += _quantity_problems(f"{where}.resources.{part}.max", bounds.max)
                found += _bounds_problems(f"{where}.resources.{part}", bounds.min, bounds.max)
    if placement is not None:
        found += _tolerations_problems(f"{where}.placement.tolerations", placement.tolerations)
    if workloads.disruption_budgets is not None:
        budget = workloads.disruption_budgets.max_unavailable
        found += _budget_problem(f"{where}.disruptionBudgets.maxUnavailable", budget)
    return found


def rules_problems(rules: Sequence[RuleBody] | None, path: str) -> list[Problem]:
    """:func:`rule_problems` of every rule of a list found at ``path`` (``spec.rules`` or ``spec``)."""
    found: list[Problem] = []
    for index, rule in enumerate(rules or []):
        found += rule_problems(rule, f"{path}[{index}]")
    return found

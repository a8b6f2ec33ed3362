"""Each item's verdict under one rule, and its message: the one place a workload refusal is worded, so the
compiled checks of :mod:`plan` (which only decide *whether* an item yields a finding) and the reference judge
of the tests say the same thing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from enclave_admission.rules import matching
from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Item
from enclave_admission.rules.workloads.items import Finding, capability_name, path_prefixes
from enclave_admission.rules.workloads.podspec import (
    as_map,
    default_pull_policy,
    nanos,
    normalize_image,
    requests_as_stored,
)
from enclave_core.api.rules import Toleration, WorkloadsPolicy
from enclave_core.patterns import Pattern, compile_pattern


def verdict(item: Item, rule: CompiledRule, inside: bool, path: str, shown: str, constraint: str) -> None:
    """``inside``: the item is within what the rule lists (what deny/audit match and allow requires)."""
    if rule.action == "allow":
        item.allow(rule, inside, f"{rule.origin} allows {path} only {constraint}; got {shown}")
    elif inside:
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} {path}={shown} ({constraint})")


def judge_item(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, found: Finding) -> None:
    what, path, value = found.what, found.path, found.value
    if what == "qos":
        classes = sorted(policy.qos_classes or ())
        verdict(item, rule, value in classes, path + " (QoS class)", value, f"QoS classes {classes}")
    elif what == "registry":
        _registry(item, rule, policy, path, value)
    elif what == "resources":
        _resources(item, rule, policy, path, found.data)
    elif what in SECURITY_FLAGS or what in ("hostPaths", "capabilities"):
        _security(item, rule, policy, what, path, value)
    else:
        _placement(item, rule, policy, found)


def _registry(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, path: str, value: str) -> None:
    image, _, pull = value.partition("\x00")
    reference = normalize_image(image)
    pull = pull or default_pull_policy(image)
    matched = False
    for entry in policy.registries or ():
        if _search(entry.url, reference) and (not entry.pull_policies or not pull or pull in entry.pull_policies):
            matched = True
            break
    urls = ", ".join(repr(entry.url) for entry in policy.registries or ())
    shown = f"{image!r} ({reference}, imagePullPolicy {pull})"
    verdict(item, rule, matched, path, shown, f"registries {urls} with their pull policies")


def compiled_pattern(pattern: str) -> Pattern:
    """Patterns were compiled when the rule was (a broken one makes the whole rule broken); cached by text in
    :func:`enclave_core.patterns.compile_pattern` (linear-time)."""
    return compile_pattern(pattern)


def _search(pattern: str, value: str) -> bool:
    return compiled_pattern(pattern).match(value)


def _resources(
    item: Item, rule: CompiledRule, policy: WorkloadsPolicy, path: str, resources: Mapping[str, Any]
) -> None:
    bounds = policy.resources
    assert bounds is not None
    problems: list[str] = []
    for part, limit in (("requests", bounds.requests), ("limits", bounds.limits)):
        if limit is None:
            continue
        declared = requests_as_stored(resources) if part == "requests" else as_map(resources.get(part))
        for name in limit.required or ():
            if name not in declared:
                problems.append(f"{path}.{part}[{name!r}] is missing")
        for name in (*(limit.min or {}), *(limit.max or {})):
            if name in declared and nanos(declared[name]) is None:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]!r} is not a quantity")
        for name, low in (limit.min or {}).items():
            have = nanos(declared.get(name)) if name in declared else None
            bound = nanos(low)
            if have is not None and bound is not None and have < bound:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]} is below {low}")
        for name, high in (limit.max or {}).items():
            have = nanos(declared.get(name)) if name in declared else None
            bound = nanos(high)
            if have is not None and bound is not None and have > bound:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]} is above {high}")
    outside = bool(problems)
    if rule.action == "allow":
        item.allow(rule, not outside, f"{rule.origin} bounds container resources: {'; '.join(problems)}")
    elif outside:
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} container resources out of bounds: {'; '.join(problems)}")


SECURITY_FLAGS: Final = {
    "privileged": "privileged",
    "allowPrivilegeEscalation": "allow_privilege_escalation",
    "hostNamespaces": "host_namespaces",
    "hostPorts": "host_ports",
}


def _security(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, what: str, path: str, value: str) -> None:
    security = policy.security
    assert security is not None
    if what in SECURITY_FLAGS:
        setting = getattr(security, SECURITY_FLAGS[what])
        if setting is None:
            return
        if rule.action == "allow":
            item.allow(rule, bool(setting), f"{rule.origin} does not allow {what}: {path}={value}")
        elif setting:
            item.hit(rule, f"{rule.origin} {'denies' if rule.action == 'deny' else 'audits'} {what}: {path}={value}")
        return
    if what == "hostPaths":
        if security.host_paths is None:
            return
        compiled = matching.matchers(security.host_paths)
        # Exact values are directory prefixes (at a "/" boundary); expressions match the whole normalised path.
        inside = any(m.regex is not None and m.matches(value) for m in compiled) or any(
            prefix in m.exact for prefix in path_prefixes(value) for m in compiled
        )
        verdict(item, rule, inside, path, repr(value), f"hostPaths {matching.describe(compiled)} (exact: prefixes)")
        return
    if security.capabilities is None:
        return
    listed = {capability_name(name) for name in security.capabilities}
    inside = value in listed or "ALL" in listed
    verdict(item, rule, inside, path, repr(value), f"capabilities {sorted(listed)}")


def tolerates(rule_toleration: Toleration, toleration: Mapping[str, Any]) -> bool:
    return (
        (rule_toleration.key or "") == str(toleration.get("key") or "")
        and rule_toleration.operator == str(toleration.get("operator") or "Equal")
        and (rule_toleration.value or "") == str(toleration.get("value") or "")
        and (rule_toleration.effect is None or rule_toleration.effect == toleration.get("effect"))
    )


def _placement(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, found: Finding) -> None:
    what, path, value = found.what, found.path, found.value
    placement = policy.placement
    if what == "scheduler":
        listed = [*(placement.schedulers if placement and placement.schedulers else []), *(policy.schedulers or [])]
        if listed:
            compiled = matching.matchers(listed)
            verdict(
                item,
                rule,
                matching.match_any(compiled, value),
                path,
                repr(value),
                f"schedulers {matching.describe(compiled)}",
            )
        return
    if placement is None:
        return
    if what in ("priority", "runtime"):
        values = placement.priority_classes if what == "priority" else placement.runtime_classes
        if values:
            compiled = matching.matchers(values)
            verdict(item, rule, matching.match_any(compiled, value), path, repr(value), matching.describe(compiled))
    elif what == "nodeSelector":
        if placement.node_selector_keys:
            keys = sorted(placement.node_selector_keys)
            verdict(item, rule, value in keys, path, repr(value), f"nodeSelector keys {keys}")
    elif what == "toleration" and placement.tolerations:
        toleration = found.data
        inside = any(tolerates(entry, toleration) for entry in placement.tolerations)
        shown = ", ".join(f"{k}={v}" for k, v in toleration.items())
        verdict(item, rule, inside, path, f"{{{shown}}}", "the rule's tolerations")

"""Workload rules (``enforce.workloads``) to CEL: what the webhook's ``enclave_admission.rules.workloads`` judges
of a Pod spec, for the pod-bearing kinds it reads (Pods and the controllers' Pod templates), as policy text.

Unlike metadata and Services, workload items never interact across rules: the webhook judges each rule's items
on an item of its own (``Judging.emit``), so each rule compiles alone, to one policy variable holding the
webhook's messages for what it refuses in this request (in the webhook's order: the kind itself, QoS, images,
resources, placement) and one validation asking it to be empty, whose message is the first of them (the
webhook's first refusal of that rule). Audit rules' validations go to the auditing policy.

What is read is what the webhook reads (``podspec.py``, ``items.py``, ``judges.py``): image references
normalised as the runtime does (``nginx`` is ``docker.io/library/nginx:latest``) with the pull policy
kube-apiserver defaults, each registry pattern matched from the start of the reference (RE2 on both sides:
``\\A(?:...)``); the QoS class as ``ComputePodQOS``; requests as stored (a limit stands for a missing request),
compared as quantities (``quantity()``); schedulerName (``default-scheduler`` when unset), priority and runtime
classes, each nodeSelector key, each toleration but the two kube-apiserver adds. On UPDATE an item the old
object had (same field path, same value) is not judged.

The QoS class without sums: the webhook sums requests and limits over the containers, and CEL has no fold. API
validation runs before validating admission and keeps every request at most its limit, so with every cpu and
memory limit positive the summed requests equal the summed limits exactly when each container's (stored)
request equals its limit: that per-container test is what the policy asks.

**What stays on the webhook** (:func:`compile_rules` says why per rule): ``security`` (hostPath prefixes,
capability spellings, escalation defaults: not compiled) and ``disruptionBudgets`` (PodDisruptionBudgets are
state a policy is not given); a registry or placement pattern Go's regexp would read differently; a rule whose
expression could pass kube-apiserver's per-expression cost limit over the envelope (:data:`ENVELOPE_ITEMS`
containers, tolerations or selector keys, references of :data:`ENVELOPE_TEXT` characters), or the rules
together the policy's budget (:mod:`~enclave_tenants.native.workload_limits`). That envelope is also what lets
``enclave test`` judge these expressions offline on a Pod within it (``local_check=True`` restores the older, stricter
rule: keep off any rule whose expressions Enclave's CEL engine cannot bound by its static estimate for Pods of every
size). A Pod past the envelope may make kube-apiserver stop the evaluation: the policy (failure policy Fail) then
refuses it, where the webhook might admit: a difference that only ever refuses.

Known message differences (decisions are the same): a value the webhook quotes with Python's ``repr`` (an
image, a key) is quoted ``'...'`` as is, so one holding a quote or a control character reads differently;
nodeSelector keys are judged in map order, so which of several refused keys a denial names first may differ.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from enclave_core.api.meta import ValueMatcher
from enclave_core.api.rules import PlacementPolicy, ResourceBounds, Toleration, WorkloadsPolicy
from enclave_core.quantity import Quantity
from enclave_tenants.native import celtext
from enclave_tenants.native.area import Area, Rule
from enclave_tenants.native.workload_limits import (
    ENVELOPE_ITEMS,
    ENVELOPE_TEXT,
    MESSAGE,
    PER_CALL_LIMIT,
    POLICY_BUDGET,
    VALIDATION,
    estimated_cost,
    locally_unbounded,
)

JSON = dict[str, Any]

LISTS: Final = ("initContainers", "containers", "ephemeralContainers")

KINDS: Final[tuple[tuple[str, str, str, tuple[str, ...]], ...]] = (
    ("", "pods", "Pod", ("spec",)),
    ("apps", "deployments", "Deployment", ("spec", "template", "spec")),
    ("apps", "statefulsets", "StatefulSet", ("spec", "template", "spec")),
    ("apps", "daemonsets", "DaemonSet", ("spec", "template", "spec")),
    ("apps", "replicasets", "ReplicaSet", ("spec", "template", "spec")),
    ("", "replicationcontrollers", "ReplicationController", ("spec", "template", "spec")),
    ("batch", "jobs", "Job", ("spec", "template", "spec")),
    ("batch", "cronjobs", "CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
)
"""(API group, resource, target kind, path of the Pod spec): the kinds admission judges
(``enclave_admission.rules.workloads.podspec.workload_kind``; a unit test keeps the two equal)."""

RESOURCES: Final = frozenset(
    {f"{resource}.{group}" if group else resource for group, resource, _, _ in KINDS} | {"pods/ephemeralcontainers"}
)
"""Policy resources (``resource[.group]``): the kinds, and the subresource ``kubectl debug`` writes."""

_DEFAULT_TOLERATIONS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


# -- the request's Pod spec, read once per request (shared variables) ------------------------------------------

_SPEC: Final = "variables.w_spec"
_OLD: Final = "variables.w_old"
_UPDATE: Final = "size(variables.w_old) > 0"
"""An UPDATE (the old object's Pod spec is never empty: its containers are required)."""
_LISTS: Final = "['initContainers', 'containers', 'ephemeralContainers']"


def _by_kind(pod: str, cron: str, other: str) -> str:
    return f"(variables.w_kind == 'Pod' ? {pod} : (variables.w_kind == 'CronJob' ? {cron} : {other}))"


_BASE: Final = _by_kind("'spec'", "'spec.jobTemplate.spec.template.spec'", "'spec.template.spec'")
"""The field path of the Pod spec (kept out of the variables: the local engine binds each variable it reads
around an expression, and parses only so deep)."""


def _join(*terms: str) -> str:
    """CEL string of ``terms`` (CEL strings) joined: a list, so a long message does not nest one ``+`` per term
    (each a ``string``: kube-apiserver's type checker takes no list of strings and ``dyn`` values)."""
    return "[" + ", ".join(term if _LITERAL.fullmatch(term) else f"string({term})" for term in terms) + "].join('')"


_LITERAL: Final = re.compile(r"'[^'\\]*'|\"[^\"\\]*\"")


def _lists(parts: Sequence[str]) -> str:
    """A list of the parts' lists of messages, each ``dyn`` (one literal of one type for kube-apiserver)."""
    return "[" + ", ".join(f"dyn({part})" for part in parts) + "]"


def _spec_of(root: str) -> str:
    paths = ("spec", "spec.jobTemplate.spec.template.spec", "spec.template.spec")
    return _by_kind(*(root + "".join(f".?{part}" for part in path.split(".")) + ".orValue({})" for path in paths))


def _positive(value: str) -> str:
    return f"(isQuantity({value}) && quantity({value}).isGreaterThan(quantity('0')))"


def _stored(part: str, name: str) -> str:
    """The request (``requests``) or limit of ``name`` of resources ``x`` as a string, '' when absent; a limit
    stands for a missing request (``podspec.requests_as_stored``)."""
    limit = f"({lit(name)} in x.?limits.orValue({{}}) ? string(x.limits[{lit(name)}]) : '')"
    if part == "limits":
        return limit
    return f"({lit(name)} in x.?requests.orValue({{}}) ? string(x.requests[{lit(name)}]) : {limit})"


def shared_variables(registries: bool, qos: bool, resources: bool) -> list[JSON]:
    """The request's kind, Pod spec (and the old object's), field-path base, and what several rules read of the
    containers: image references and pull policies, QoS classes, resources."""
    table = {f"{group}/{resource}": name for group, resource, name, _ in KINDS}
    kind = "{" + ", ".join(f"{lit(key)}: {lit(name)}" for key, name in table.items()) + "}"
    found = [
        {
            "name": "w_kind",
            "expression": f"{kind}[?(request.resource.group + '/' + request.resource.resource)].orValue('')",
        },
        {"name": "w_spec", "expression": _spec_of("object")},
        {
            "name": "w_old",
            "expression": f"request.operation == 'UPDATE' && oldObject != null ? {_spec_of('oldObject')} : {{}}",
        },
    ]
    if registries:
        old = f"{_OLD}[ln][i]"
        image, written = "c.?image.orValue('')", "c.?imagePullPolicy.orValue('')"
        same = (
            f"{_UPDATE} && size({_OLD}[?ln].orValue([])) > i && {old}.?image.orValue('') == {image} && "
            f"{old}.?imagePullPolicy.orValue('') == {written} ? 'y' : ''"
        )
        nm = f"{image}.split('@')[0]"
        fs = f"{nm}.split('/')[0]"
        tagged = f"{nm}.matches(':[^/]*$')"
        pull = (
            f"{written} != '' ? {written} : ({tagged} ? ({nm}.matches('(^|/)[^/:]*:latest$') ? 'Always' : "
            f"'IfNotPresent') : ({image}.contains('@') ? 'IfNotPresent' : 'Always'))"
        )
        hub = f"(({fs} == 'docker.io' || {fs} == 'index.docker.io') ? 'docker.io/' + ({nm}.matches('^[^/]*/[^/]*$') ? 'library/' : '') + {nm}.substring(size({fs}) + 1) : {nm})"
        base = f"(!{nm}.matches('^([^/]*[.:][^/]*|localhost)/') ? 'docker.io/' + ({nm}.contains('/') ? '' : 'library/') + {nm} : {hub})"
        ref = f"{base} + ({tagged} || {image}.contains('@') ? '' : ':latest') + {image}.substring(size({nm}))"
        at = "'.' + ln + '[' + string(i) + '].image'"
        fields = {"img": image, "same": same, "ref": ref, "pull": pull, "at": at}
        record = "{" + ", ".join(f"'{key}': string({value})" for key, value in fields.items()) + "}"
        found.append(
            {"name": "w_ctr", "expression": f"{_LISTS}.map(ln, {_SPEC}[?ln].orValue([]).transformList(i, c, {record}))"}
        )
    if qos:
        sources = (
            "(size(sp.?resources.orValue({})) > 0 ? [sp.resources] : sp.?initContainers.orValue([]).map(c, "
            "c.?resources.orValue({})) + sp.?containers.orValue([]).map(c, c.?resources.orValue({})))"
        )
        amounts = ", ".join(_stored(part, name) for part in ("requests", "limits") for name in ("cpu", "memory"))
        some = " || ".join(_positive(f"a[{n}]") for n in range(4))
        equal = " && ".join(
            f"isQuantity(a[{r}]) && quantity(a[{r}]).compareTo(quantity(a[{r + 2}])) == 0" for r in (0, 1)
        )
        guaranteed = f"{_positive('a[2]')} && {_positive('a[3]')} && {equal}"
        found += [
            {"name": "w_src", "expression": f"[dyn({_SPEC}), dyn({_OLD})].map(sp, {sources}.map(x, [{amounts}]))"},
            {
                "name": "w_qos",
                "expression": f"variables.w_src.map(s, !s.exists(a, {some}) ? 'BestEffort' : "
                f"(s.all(a, {guaranteed}) ? 'Guaranteed' : 'Burstable'))",
            },
        ]
    if resources:
        old = f"{_OLD}[ln][i]"
        same = f"{_UPDATE} && size({_OLD}[?ln].orValue([])) > i && {old}.?resources.orValue({{}}) == c.?resources.orValue({{}})"
        pair = f"[dyn(c.?resources.?requests.orValue({{}})), dyn(c.?resources.?limits.orValue({{}})), dyn({same} ? 'y' : '')]"
        found.append(
            {
                "name": "w_res",
                "expression": f"['initContainers', 'containers'].map(ln, {_SPEC}[?ln].orValue([]).transformList(i, c, {pair}))",
            }
        )
    return found


# -- messages ---------------------------------------------------------------------------------------------------


def lit(text: str) -> str:
    return celtext.lit(text)


def _verdict(rule: Rule, inside: str, path: Sequence[str], shown: Sequence[str], constraint: str) -> tuple[str, str]:
    """(CEL true when the item yields a finding, its message) as ``judges.verdict`` words it; ``path`` and
    ``shown`` are CEL strings to join, ``constraint`` text."""
    if rule.action == "allow":
        return f"!({inside})", _join(lit(rule.origin + " allows "), *path, lit(f" only {constraint}; got "), *shown)
    verb = "denies" if rule.action == "deny" else "audits"
    return inside, _join(lit(f"{rule.origin} {verb} "), *path, "'='", *shown, lit(f" ({constraint})"))


def _pick(finding: str, old: str, message: str) -> str:
    """The message when the item yields a finding the old object did not have, else ''."""
    return f"(({finding}) && !({old}) ? {message} : '')"


# -- the parts of a rule: each a CEL list of lists of messages ('' for no finding) ---------------------------


def _itself(rule: Rule) -> str:
    if rule.action == "allow":
        return "[]"
    verb = "denies" if rule.action == "deny" else "audits"
    creating = "(request.operation == 'CREATE' || request.subResource != '')"
    return f"[{creating} ? [{_join(lit(f'{rule.origin} {verb} '), 'variables.w_kind', lit(' objects'))}] : []]"


def _qos(rule: Rule, classes: Sequence[str]) -> str:
    listed = sorted(classes)
    inside = f"variables.w_qos[0] in {celtext.list_literal(listed)}"
    path = [_BASE, "' (QoS class)'"]
    finding, message = _verdict(rule, inside, path, ["variables.w_qos[0]"], f"QoS classes {listed}")
    return f"[[{_pick(finding, f'{_UPDATE} && variables.w_qos[1] == variables.w_qos[0]', message)}]]"


def _registries(rule: Rule, policy: WorkloadsPolicy, lists: tuple[str, ...]) -> str:
    entries = policy.registries or []
    ref, pull = "f.ref", "f.pull"
    terms = []
    for entry in entries:
        match = f"{ref}.matches({lit(anchored(entry.url))})"
        if entry.pull_policies:
            match = f"({match} && {pull} in {celtext.list_literal(entry.pull_policies)})"
        terms.append(match)
    urls = ", ".join(repr(entry.url) for entry in entries)
    constraint = f"registries {urls} with their pull policies"
    shown = ['"\'"', "f.img", '"\' ("', ref, "', imagePullPolicy '", pull, "')'"]
    finding, message = _verdict(rule, " || ".join(terms), [_BASE, "f.at"], shown, constraint)
    item = _pick(finding, "f.same == 'y'", message)
    return _lists([f"variables.w_ctr[{LISTS.index(name)}].map(f, {item})" for name in lists])


def _problems(part: str, limit: ResourceBounds) -> str:
    """CEL for the problems of container resources ``p`` (requests, limits) at the field path
    ``w`` (``judges._resources``, in its order), each ``'; '`` and its text, concatenated."""

    def present(name: str) -> str:
        key = lit(name)
        return f"({key} in p[0] || {key} in p[1])" if part == "requests" else f"({key} in p[1])"

    def value(name: str) -> str:
        key = lit(name)
        return f"string(({key} in p[0] ? p[0] : p[1])[{key}])" if part == "requests" else f"string(p[1][{key}])"

    def at(name: str) -> str:
        return f"'; ' + w + {lit(f'.{part}[{name!r}]')}"

    found = [f"(!{present(name)} ? {at(name)} + ' is missing' : '')" for name in limit.required or ()]
    for name in (*(limit.min or {}), *(limit.max or {})):
        found.append(
            f"({present(name)} && !isQuantity({value(name)}) ? {at(name)} + \"='\" + {value(name)} + \"' is not a quantity\" : '')"
        )
    for bounds, sign, words in ((limit.min, "< 0", "is below"), (limit.max, "> 0", "is above")):
        for name, bound in (bounds or {}).items():
            text = str(bound)
            if _nanos(text) is None:
                continue  # the webhook ignores a bound it cannot read (the API refuses it first)
            test = (
                f"{present(name)} && isQuantity({value(name)}) && "
                f"quantity({value(name)}).compareTo(quantity({lit(text)})) {sign}"
            )
            found.append(f"({test} ? {at(name)} + '=' + {value(name)} + {lit(f' {words} {text}')} : '')")
    return " + ".join(found) or "''"


def _nanos(text: str) -> int | None:
    try:
        return Quantity.parse(text).nanos
    except (ValueError, TypeError):
        return None


def _resources(rule: Rule, policy: WorkloadsPolicy, lists: tuple[str, ...]) -> str:
    bounds = policy.resources
    assert bounds is not None
    parts = (("requests", bounds.requests), ("limits", bounds.limits))
    problems = [_problems(part, limit) for part, limit in parts if limit is not None]
    chosen = [name for name in lists if name != "ephemeralContainers"]
    if not problems or not chosen:
        return "[]"  # Kubernetes forbids resources on ephemeral containers: the webhook does not bound them
    if rule.action == "allow":
        prefix = f"{rule.origin} bounds container resources: "
    else:
        prefix = f"{rule.origin} {'denies' if rule.action == 'deny' else 'audits'} container resources out of bounds: "
    found = []
    for name in chosen:
        where = _join(_BASE, lit(f".{name}["), "string(i)", "'].resources'")
        item = f"[{' + '.join(problems)}].map(t, t == '' || p[2] == 'y' ? '' : {lit(prefix)} + t.substring(2))[0]"
        found.append(f"variables.w_res[{LISTS.index(name)}].transformList(i, p, [{where}].map(w, {item})[0])")
    return _lists(found)


def _named(rule: Rule, field_name: str, values: Sequence[ValueMatcher], constraint: str, always: bool) -> str:
    """schedulerName (``always``: unset reads ``default-scheduler``), priorityClassName, runtimeClassName."""
    if always:
        read = "({0}.?" + field_name + ".orValue('') == '' ? 'default-scheduler' : {0}." + field_name + ")"
    else:
        read = "{0}.?" + field_name + ".orValue('')"
    new, old = read.format(_SPEC), read.format(_OLD)
    finding, message = _verdict(
        rule, celtext.matchers(new, values), [_BASE, lit("." + field_name)], ['"\'"', new, '"\'"'], constraint
    )
    present = "true" if always else f"{new} != ''"
    return f"({present} ? {_pick(finding, f'{_UPDATE} && {old} == {new}', message)} : '')"


def _toleration_shown() -> str:
    fields = [
        f"t.?{name}.hasValue() ? {lit(name + '=')} + string(t.{name}) : ''"
        for name in ("key", "operator", "value", "effect", "tolerationSeconds")
    ]
    return _join("'{'", f"[{', '.join(fields)}].filter(x, x != '').join(', ')", "'}'")


def _tolerates(entry: Toleration) -> str:
    terms = [
        f"t.?key.orValue('') == {lit(entry.key or '')}",
        f"(t.?operator.orValue('') == '' ? 'Equal' : t.operator) == {lit(entry.operator)}",
        f"t.?value.orValue('') == {lit(entry.value or '')}",
    ]
    if entry.effect is not None:
        terms.append(f"(t.?effect.hasValue() && t.effect == {lit(entry.effect)})")
    return "(" + " && ".join(terms) + ")"


def _placement(rule: Rule, policy: WorkloadsPolicy) -> str:
    placement = policy.placement or PlacementPolicy()
    named = []
    schedulers = [*(placement.schedulers or []), *(policy.schedulers or [])]
    if schedulers:
        named.append(_named(rule, "schedulerName", schedulers, f"schedulers {celtext.describe(schedulers)}", True))
    if placement.priority_classes:
        described = celtext.describe(placement.priority_classes)
        named.append(_named(rule, "priorityClassName", placement.priority_classes, described, False))
    if placement.runtime_classes:
        described = celtext.describe(placement.runtime_classes)
        named.append(_named(rule, "runtimeClassName", placement.runtime_classes, described, False))
    parts = [f"[{', '.join(named)}]"] if named else []
    if placement.node_selector_keys:
        keys = sorted(placement.node_selector_keys)
        path = [_BASE, '".nodeSelector[\'"', "n", '"\']"']
        inside = f"n in {celtext.list_literal(keys)}"
        finding, message = _verdict(rule, inside, path, ['"\'"', "n", '"\'"'], f"nodeSelector keys {keys}")
        old = f"{_UPDATE} && n in {_OLD}.?nodeSelector.orValue({{}})"
        parts.append(f"{_SPEC}.?nodeSelector.orValue({{}}).map(n, {_pick(finding, old, message)})")
    if placement.tolerations:
        inside = " || ".join(_tolerates(entry) for entry in placement.tolerations)
        path = [_BASE, "'.tolerations['", "string(i)", "']'"]
        finding, message = _verdict(rule, inside, path, [_toleration_shown()], "the rule's tolerations")
        defaulted = (
            f"(t.?key.orValue('') in {celtext.list_literal(_DEFAULT_TOLERATIONS)} && "
            "t.?operator.orValue('') == 'Exists' && t.?effect.orValue('') == 'NoExecute')"
        )
        olds = f"{_OLD}.?tolerations.orValue([])"
        old = f"{_UPDATE} && size({olds}) > i && {olds}[i] == t"
        parts.append(
            f"{_SPEC}.?tolerations.orValue([]).transformList(i, t, {defaulted} ? '' : {_pick(finding, old, message)})"
        )
    return _lists(parts) if parts else "[]"


# -- what stays on the webhook ----------------------------------------------------------------------------------


def anchored(pattern: str) -> str:
    """A registry pattern matched from the start of the reference (``Pattern.match``) as RE2 ``matches()``."""
    return "\\A(?:" + pattern + ")"


def _problem(policy: WorkloadsPolicy) -> str:
    """Why a rule's workload policy cannot be a policy, or ''."""
    if policy.security is not None:
        return (
            "security features (hostPath prefixes, capability spellings, escalation defaults) are judged by the webhook"
        )
    if policy.disruption_budgets is not None:
        return "PodDisruptionBudget rules read the namespace's budgets, state a policy is not given"
    for entry in policy.registries or ():
        found = celtext.go_regex_problem(entry.url)
        if found:
            return f"registries: {found}"
    placement = policy.placement or PlacementPolicy()
    for values in (placement.schedulers, policy.schedulers, placement.priority_classes, placement.runtime_classes):
        problems = celtext.matcher_problems(values)
        if problems:
            return f"placement: {problems[0]}"
    cost = estimated_cost(policy)
    if cost > PER_CALL_LIMIT:
        return (
            f"its expression could cost {cost} over a Pod of {ENVELOPE_ITEMS} containers, tolerations or keys "
            f"({ENVELOPE_TEXT}-character references), past kube-apiserver's per-expression limit {PER_CALL_LIMIT}"
        )
    return ""


def targets(policy: WorkloadsPolicy) -> dict[str, tuple[str, ...]]:
    """Target kind -> container lists (``podspec.targets_of``): omitted targets mean every list of Pods."""
    found: dict[str, set[str]] = {}
    for target in policy.targets or ["Pod"]:
        kind, _, part = target.partition("/")
        found.setdefault(kind, set()).update([part] if part else LISTS)
    known = {name for _, _, name, _ in KINDS}
    return {kind: tuple(name for name in LISTS if name in lists) for kind, lists in found.items() if kind in known}


_POLICIES: Final = (
    "qos_classes",
    "registries",
    "resources",
    "security",
    "placement",
    "schedulers",
    "disruption_budgets",
)


def _has_policies(policy: WorkloadsPolicy) -> bool:
    """Whether the rule judges items at all (``podspec.has_policies``); without, it judges the kinds themselves."""
    return any(getattr(policy, name) is not None for name in _POLICIES)


def _parts(policy: WorkloadsPolicy) -> list[tuple[str, Callable[[Rule, WorkloadsPolicy, tuple[str, ...]], str]]]:
    """(variable suffix, CEL of that part for the container lists) per part of the rule, in the webhook's order."""
    if not _has_policies(policy):
        return [("k", lambda rule, _, __: _itself(rule))]
    found: list[tuple[str, Callable[[Rule, WorkloadsPolicy, tuple[str, ...]], str]]] = []
    if policy.qos_classes:
        found.append(("q", lambda rule, policy, _: _qos(rule, policy.qos_classes or [])))
    if policy.registries:
        found.append(("i", _registries))
    if policy.resources:
        found.append(("r", _resources))
    if policy.placement is not None or policy.schedulers:
        found.append(("p", lambda rule, policy, _: _placement(rule, policy)))
    return found


_SHARED: Final = shared_variables(True, True, True)


def compile_rules(rules: Sequence[tuple[Rule, WorkloadsPolicy]], *, local_check: bool = False) -> Area:
    """The namespace's workload rules (those that compile to CEL at all), in order, to one :class:`Area`: per
    rule and part (the kind itself, QoS, images, resources, placement) a variable holding the messages of what
    it refuses, per container list, and a validation asking them all to be ''; kube-apiserver reports the first
    failing validation, so the first refusal of the first refusing rule, as the webhook's message begins."""
    area = Area()
    spent = 0
    wanted: set[str] = set()
    for rule, policy in rules:
        why = _problem(policy)
        if not why:
            cost = estimated_cost(policy)
            if spent + cost > POLICY_BUDGET:
                why = (
                    f"with the namespace's earlier workload rules its expression could pass the policy's cost budget "
                    f"{POLICY_BUDGET} over a Pod of {ENVELOPE_ITEMS} containers"
                )
            else:
                spent += cost
        if why:
            area.placements.append((rule.origin, "webhook", why))
            continue
        kinds = targets(policy)
        by_lists: dict[tuple[str, ...], list[str]] = {}
        for kind, lists in kinds.items():
            by_lists.setdefault(lists, []).append(kind)
        asked = f"variables.w_kind in {celtext.list_literal(sorted(kinds))}"
        variables: list[JSON] = []
        validations: list[JSON] = []
        suffixes = [suffix for suffix, _ in _parts(policy)] if kinds else []
        for suffix, part in _parts(policy) if kinds else []:
            found = "[]"
            for lists, names in reversed(by_lists.items()):
                found = f"(variables.w_kind in {celtext.list_literal(sorted(names))} ? {part(rule, policy, lists)} : {found})"
            name = f"w{rule.index}{suffix}"
            variables.append({"name": name, "expression": f"{rule.variable} && {asked} ? {found} : []"})
            validations.append(
                {"expression": VALIDATION.format(name=name), "messageExpression": MESSAGE.format(name=name)}
            )
        local = locally_unbounded(rule.variable, _SHARED, variables, validations) if local_check else ""
        if local:
            area.placements.append((rule.origin, "webhook", local))
            continue
        area.placements.append((rule.origin, "native", "workload rules compile to the policy"))
        if not kinds:
            continue  # it targets no kind admission judges: nothing to ask
        area.asked[rule.index] = asked
        wanted.update(["", *suffixes])
        area.variables += variables
        if rule.action == "audit":
            area.audit_validations += validations
        else:
            area.validations += [{**validation, "reason": "Forbidden"} for validation in validations]
    if wanted:
        area.variables[:0] = shared_variables("i" in wanted, "q" in wanted, "r" in wanted)
        area.resources |= RESOURCES
    return area

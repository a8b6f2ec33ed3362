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
together the policy's budget. A Pod past the envelope may make kube-apiserver stop the evaluation: the policy
(failure policy Fail) then refuses it, where the webhook might admit: a difference that only ever refuses.

Known message differences (decisions are the same): a value the webhook quotes with Python's ``repr`` (an
image, a key) is quoted ``'...'`` as is, so one holding a quote or a control character reads differently;
nodeSelector keys are judged in map order, so which of several refused keys a denial names first may differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from enclave_core.api.meta import ValueMatcher
from enclave_core.api.rules import PlacementPolicy, ResourceBounds, Toleration, WorkloadsPolicy
from enclave_core.quantity import Quantity
from enclave_tenants.native import celtext

JSON = dict[str, Any]
Path = Literal["native", "webhook"]

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

PER_CALL_LIMIT: Final = 1_000_000
"""kube-apiserver's runtime cost limit of one CEL expression (``celconfig.PerCallLimit``)."""
POLICY_BUDGET: Final = 10_000_000
"""kube-apiserver's runtime cost budget of one policy evaluation (``celconfig.RuntimeCELCostBudget``)."""
ENVELOPE_ITEMS: Final = 100
"""The largest Pod a native rule must fit: this many containers (all lists), tolerations, nodeSelector keys."""
ENVELOPE_TEXT: Final = 512
"""... and image references (and class names) of this many characters."""

_DEFAULT_TOLERATIONS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass
class Area:
    """What the namespace's workload rules compile to, for the compiler to add to its program."""

    placements: list[tuple[str, Path, str]] = field(default_factory=list)
    """(origin, ``native``/``webhook``, why) per rule with ``enforce.workloads``."""
    variables: list[JSON] = field(default_factory=list)
    validations: list[JSON] = field(default_factory=list)
    audit_validations: list[JSON] = field(default_factory=list)
    resources: set[str] = field(default_factory=set)
    asked: dict[int, str] = field(default_factory=dict)
    """Rule index -> CEL true when the webhook asks whether the rule applies (the request is of a kind it
    targets): a conditional rule whose conditions error refuses exactly then."""


@dataclass(frozen=True)
class Rule:
    """One rule as the compiler has it: position, origin text, action and the variable saying it applies."""

    index: int
    origin: str
    action: str
    applies: str


# -- the request's Pod spec -------------------------------------------------------------------------------------

_SPEC: Final = "variables.w_spec"
_OLD: Final = "variables.w_old"
_UPDATE: Final = "variables.w_update"
_BASE: Final = "variables.w_base"


def _dig(root: str, path: tuple[str, ...]) -> str:
    return root + "".join(f".?{part}" for part in path) + ".orValue({})"


def _by_kind(values: dict[str, str], otherwise: str) -> str:
    expression = otherwise
    for kind, value in reversed(values.items()):
        expression = f"(variables.w_kind == {celtext.lit(kind)} ? {value} : {expression})"
    return expression


def shared_variables(qos: bool) -> list[JSON]:
    """The request's kind, Pod spec (and the old object's), field-path base, and QoS classes, read once."""
    kind = "''"
    for group, resource, name, _ in reversed(KINDS):
        test = f"request.resource.group == {celtext.lit(group)} && request.resource.resource == {celtext.lit(resource)}"
        kind = f"({test} ? {celtext.lit(name)} : {kind})"
    specs = {name: _dig("object", path) for _, _, name, path in KINDS}
    olds = {name: _dig("oldObject", path) for _, _, name, path in KINDS}
    bases = {name: celtext.lit(".".join(path)) for _, _, name, path in KINDS}
    found = [
        {"name": "w_kind", "expression": kind},
        {"name": "w_spec", "expression": _by_kind(specs, "{}")},
        {"name": "w_update", "expression": "request.operation == 'UPDATE' && oldObject != null"},
        {"name": "w_old", "expression": f"{_UPDATE} ? {_by_kind(olds, '{}')} : {{}}"},
        {"name": "w_base", "expression": _by_kind(bases, "''")},
    ]
    if qos:
        found.append({"name": "w_qos", "expression": qos_class(_SPEC)})
        found.append({"name": "w_old_qos", "expression": f"{_UPDATE} ? {qos_class(_OLD)} : ''"})
    return found


def _positive(amounts: str, name: str) -> str:
    value = f"string({amounts}[{celtext.lit(name)}])"
    return (
        f"({celtext.lit(name)} in {amounts} && isQuantity({value}) && quantity({value}).isGreaterThan(quantity('0')))"
    )


def qos_class(spec: str) -> str:
    """CEL for the QoS class of the Pod spec ``spec`` (``podspec.qos_class``): the Pod-level ``resources`` when
    set, else init and regular containers; only cpu and memory, positive amounts; Guaranteed per container (see
    the module's note on sums)."""
    sources = (
        f"(size({spec}.?resources.orValue({{}})) > 0 ? [{spec}.resources] : "
        f"{spec}.?initContainers.orValue([]).map(c, c.?resources.orValue({{}})) + "
        f"{spec}.?containers.orValue([]).map(c, c.?resources.orValue({{}})))"
    )
    requests, limits = "x.?requests.orValue({})", "x.?limits.orValue({})"

    def stored(name: str) -> str:
        return f"({celtext.lit(name)} in {requests} ? {requests} : {limits})"

    def equal(name: str) -> str:
        request = f"string({stored(name)}[{celtext.lit(name)}])"
        limit = f"string({limits}[{celtext.lit(name)}])"
        return f"(isQuantity({request}) && quantity({request}).compareTo(quantity({limit})) == 0)"

    some = " || ".join(
        [
            _positive(stored("cpu"), "cpu"),
            _positive(stored("memory"), "memory"),
            _positive(limits, "cpu"),
            _positive(limits, "memory"),
        ]
    )
    guaranteed = " && ".join([_positive(limits, "cpu"), _positive(limits, "memory"), equal("cpu"), equal("memory")])
    return bind(
        "s", sources, f"!s.exists(x, {some}) ? 'BestEffort' : (s.all(x, {guaranteed}) ? 'Guaranteed' : 'Burstable')"
    )


def bind(name: str, value: str, body: str) -> str:
    """``body`` with ``name`` bound to ``value``, evaluated once: a one-element map (kube-apiserver's policy
    environment has no ``cel.bind``)."""
    return f"[{value}].map({name}, {body})[0]"


def normalised(image: str) -> str:
    """CEL for the reference the runtime pulls (``podspec.normalize_image``) of the string ``image``."""
    steps = [
        ("nm", f"{image}.split('@')[0]"),
        ("dg", f"{image}.indexOf('@') >= 0 ? {image}.substring({image}.indexOf('@')) : ''"),
        ("fs", "nm.split('/')[0]"),
        ("hub", "!nm.contains('/') || (!fs.contains('.') && !fs.contains(':') && fs != 'localhost')"),
        ("rg", "hub || fs == 'index.docker.io' ? 'docker.io' : fs"),
        ("pt", "hub ? nm : nm.substring(size(fs) + 1)"),
        ("pl", "rg == 'docker.io' && !pt.contains('/') ? 'library/' + pt : pt"),
    ]
    body = "rg + '/' + pl + (pl.substring(pl.lastIndexOf('/') + 1).contains(':') || dg != '' ? '' : ':latest') + dg"
    for name, value in reversed(steps):
        body = bind(name, value, body)
    return body


def default_pull(image: str) -> str:
    """CEL for the imagePullPolicy kube-apiserver defaults (``podspec.default_pull_policy``)."""
    tagged = "ls.contains(':') ? (ls.substring(ls.indexOf(':') + 1) == 'latest' ? 'Always' : 'IfNotPresent') : "
    body = tagged + f"({image}.contains('@') ? 'IfNotPresent' : 'Always')"
    return bind("nm", f"{image}.split('@')[0]", bind("ls", "nm.substring(nm.lastIndexOf('/') + 1)", body))


# -- messages ---------------------------------------------------------------------------------------------------


def _verdict(rule: Rule, inside: str, path: str, shown: str, constraint: str) -> tuple[str, str]:
    """(CEL true when the item yields a finding, its message) as ``judges.verdict`` words it; ``path`` and
    ``shown`` are CEL strings, ``constraint`` text."""
    if rule.action == "allow":
        message = (
            f"{celtext.lit(rule.origin + ' allows ')} + {path} + {celtext.lit(f' only {constraint}; got ')} + {shown}"
        )
        return f"!({inside})", message
    verb = "denies" if rule.action == "deny" else "audits"
    message = f"{celtext.lit(f'{rule.origin} {verb} ')} + {path} + '=' + {shown} + {celtext.lit(f' ({constraint})')}"
    return inside, message


def _pick(finding: str, old: str, message: str) -> str:
    """The message when the item yields a finding the old object did not have, else ''."""
    return f"(({finding}) && !({_UPDATE} && ({old})) ? {message} : '')"


def _old_container(list_name: str) -> tuple[str, str]:
    """(CEL true when the old spec has a container at index ``i`` of ``list_name``, that container)."""
    old = f"{_OLD}.?{list_name}.orValue([])"
    return f"size({old}) > i", f"{old}[i]"


# -- the parts of a rule ----------------------------------------------------------------------------------------


def _itself(rule: Rule) -> str:
    verb = "denies" if rule.action != "audit" else "audits"
    if rule.action == "allow":
        return "[]"
    creating = "(request.operation == 'CREATE' || request.subResource != '')"
    return f"({creating} ? [{celtext.lit(f'{rule.origin} {verb} ')} + variables.w_kind + ' objects'] : [])"


def _qos(rule: Rule, classes: Sequence[str]) -> str:
    listed = sorted(classes)
    inside = f"variables.w_qos in {celtext.list_literal(listed)}"
    finding, message = _verdict(rule, inside, f"{_BASE} + ' (QoS class)'", "variables.w_qos", f"QoS classes {listed}")
    return f"[{_pick(finding, 'variables.w_old_qos == variables.w_qos', message)}]"


def _registries(rule: Rule, policy: WorkloadsPolicy, lists: tuple[str, ...]) -> str:
    entries = policy.registries or []
    terms = []
    for entry in entries:
        match = f"ref.matches({celtext.lit(anchored(entry.url))})"
        if entry.pull_policies:
            match = f"({match} && pull in {celtext.list_literal(entry.pull_policies)})"
        terms.append(match)
    urls = ", ".join(repr(entry.url) for entry in entries)
    path = f"{_BASE} + {celtext.lit('.')} + ln + '[' + string(i) + '].image'"
    shown = "\"'\" + img + \"' (\" + ref + ', imagePullPolicy ' + pull + ')'"
    finding, message = _verdict(rule, " || ".join(terms), path, shown, f"registries {urls} with their pull policies")
    parts = []
    for list_name in lists:
        has, old = _old_container(list_name)
        same = f"{has} && {old}.?image.orValue('') == img && {old}.?imagePullPolicy.orValue('') == written"
        item = bind("ln", celtext.lit(list_name), _pick(finding, same, message))
        item = bind("pull", f"written != '' ? written : {default_pull('img')}", item)
        item = bind("ref", normalised("img"), item)
        item = bind("img", "c.?image.orValue('')", bind("written", "c.?imagePullPolicy.orValue('')", item))
        parts.append(f"{_SPEC}.?{list_name}.orValue([]).transformList(i, c, {item})")
    return " + ".join(parts) or "[]"


def _problems(part: str, limit: ResourceBounds) -> list[str]:
    """CEL strings, each a problem's text or '' (``judges._resources``, in its order), for container ``c``
    (requests ``rq``, limits ``lm``) whose field path is the CEL string ``where``."""

    def present(name: str) -> str:
        key = celtext.lit(name)
        return f"({key} in rq || {key} in lm)" if part == "requests" else f"({key} in lm)"

    def value(name: str) -> str:
        key = celtext.lit(name)
        if part == "requests":
            return f"string(({key} in rq ? rq : lm)[{key}])"
        return f"string(lm[{key}])"

    def at(name: str) -> str:
        return f"where + {celtext.lit(f'.{part}[{name!r}]')}"

    found = []
    for name in limit.required or ():
        found.append(f"(!{present(name)} ? {at(name)} + ' is missing' : '')")
    for name in (*(limit.min or {}), *(limit.max or {})):
        shown = f'"=\'" + {value(name)} + "\' is not a quantity"'
        found.append(f"({present(name)} && !isQuantity({value(name)}) ? {at(name)} + {shown} : '')")
    for bounds, sign, words in ((limit.min, "< 0", "is below"), (limit.max, "> 0", "is above")):
        for name, bound in (bounds or {}).items():
            text = str(bound)
            if _nanos(text) is None:
                continue  # the webhook ignores a bound it cannot read (the API refuses it first)
            test = (
                f"{present(name)} && isQuantity({value(name)}) && "
                f"quantity({value(name)}).compareTo(quantity({celtext.lit(text)})) {sign}"
            )
            found.append(f"({test} ? {at(name)} + '=' + {value(name)} + {celtext.lit(f' {words} {text}')} : '')")
    return found


def _nanos(text: str) -> int | None:
    try:
        return Quantity.parse(text).nanos
    except (ValueError, TypeError):
        return None


def _resources(rule: Rule, policy: WorkloadsPolicy, lists: tuple[str, ...]) -> str:
    bounds = policy.resources
    assert bounds is not None
    problems: list[str] = []
    for part, limit in (("requests", bounds.requests), ("limits", bounds.limits)):
        if limit is not None:
            problems += _problems(part, limit)
    if not problems:
        return "[]"
    if rule.action == "allow":
        prefix = f"{rule.origin} bounds container resources: "
    else:
        prefix = f"{rule.origin} {'denies' if rule.action == 'deny' else 'audits'} container resources out of bounds: "
    parts = []
    for list_name in lists:
        if list_name == "ephemeralContainers":
            continue  # Kubernetes forbids resources on them: the webhook does not bound them
        has, old = _old_container(list_name)
        same = f"{has} && {old}.?resources.orValue({{}}) == c.?resources.orValue({{}})"
        listed = f"[{', '.join(problems)}].filter(m, m != '')"
        message = f"{celtext.lit(prefix)} + p.join('; ')"
        item = bind("p", listed, _pick("size(p) > 0", same, message))
        item = bind("where", f"{_BASE} + {celtext.lit(f'.{list_name}[')} + string(i) + '].resources'", item)
        item = bind("lm", "c.?resources.?limits.orValue({})", item)
        item = bind("rq", "c.?resources.?requests.orValue({})", item)
        parts.append(f"{_SPEC}.?{list_name}.orValue([]).transformList(i, c, {item})")
    return " + ".join(parts) or "[]"


def _named(rule: Rule, field_name: str, values: Sequence[ValueMatcher], constraint: str, always: bool) -> str:
    """schedulerName (``always``: unset reads ``default-scheduler``), priorityClassName, runtimeClassName."""
    if always:
        read = f"({{0}}.?{field_name}.orValue('') == '' ? 'default-scheduler' : {{0}}.{field_name})"
    else:
        read = f"{{0}}.?{field_name}.orValue('')"
    new, old = read.format(_SPEC), read.format(_OLD)
    finding, message = _verdict(
        rule,
        celtext.matchers("v", values),
        f"{_BASE} + {celtext.lit('.' + field_name)}",
        celtext.quoted("v"),
        constraint,
    )
    present = "true" if always else "v != ''"
    return bind("v", new, f"[{present} ? {_pick(finding, f'{old} == v', message)} : '']")


def _toleration_shown() -> str:
    fields = [
        f"t.?{name}.hasValue() ? {celtext.lit(name + '=')} + string(t.{name}) : ''"
        for name in ("key", "operator", "value", "effect", "tolerationSeconds")
    ]
    return f"'{{' + [{', '.join(fields)}].filter(x, x != '').join(', ') + '}}'"


def _tolerates(entry: Toleration) -> str:
    terms = [
        f"t.?key.orValue('') == {celtext.lit(entry.key or '')}",
        f"(t.?operator.orValue('') == '' ? 'Equal' : t.operator) == {celtext.lit(entry.operator)}",
        f"t.?value.orValue('') == {celtext.lit(entry.value or '')}",
    ]
    if entry.effect is not None:
        terms.append(f"(t.?effect.hasValue() && t.effect == {celtext.lit(entry.effect)})")
    return "(" + " && ".join(terms) + ")"


def _placement(rule: Rule, policy: WorkloadsPolicy) -> str:
    placement = policy.placement or PlacementPolicy()
    parts = []
    schedulers = [*(placement.schedulers or []), *(policy.schedulers or [])]
    if schedulers:
        constraint = f"schedulers {celtext.describe(schedulers)}"
        parts.append(_named(rule, "schedulerName", schedulers, constraint, True))
    if placement.priority_classes:
        described = celtext.describe(placement.priority_classes)
        parts.append(_named(rule, "priorityClassName", placement.priority_classes, described, False))
    if placement.runtime_classes:
        described = celtext.describe(placement.runtime_classes)
        parts.append(_named(rule, "runtimeClassName", placement.runtime_classes, described, False))
    if placement.node_selector_keys:
        keys = sorted(placement.node_selector_keys)
        path = f"{_BASE} + '.nodeSelector[' + {celtext.quoted('k')} + ']'"
        finding, message = _verdict(
            rule, f"k in {celtext.list_literal(keys)}", path, celtext.quoted("k"), f"nodeSelector keys {keys}"
        )
        old = f"k in {_OLD}.?nodeSelector.orValue({{}})"
        parts.append(f"{_SPEC}.?nodeSelector.orValue({{}}).map(k, {_pick(finding, old, message)})")
    if placement.tolerations:
        inside = " || ".join(_tolerates(entry) for entry in placement.tolerations)
        path = f"{_BASE} + '.tolerations[' + string(i) + ']'"
        finding, message = _verdict(rule, inside, path, _toleration_shown(), "the rule's tolerations")
        defaulted = (
            f"(t.?key.orValue('') in {celtext.list_literal(_DEFAULT_TOLERATIONS)} && "
            "t.?operator.orValue('') == 'Exists' && t.?effect.orValue('') == 'NoExecute')"
        )
        olds = f"{_OLD}.?tolerations.orValue([])"
        old = f"size({olds}) > i && {olds}[i] == t"
        parts.append(
            f"{_SPEC}.?tolerations.orValue([]).transformList(i, t, {defaulted} ? '' : {_pick(finding, old, message)})"
        )
    return " + ".join(parts) or "[]"


# -- cost and what stays on the webhook -------------------------------------------------------------------------


def _text_cost(length: int) -> int:
    return math.ceil(0.1 * length)


def _match_cost(values: Sequence[ValueMatcher]) -> int:
    """One value against matchers: each exact value compared, each pattern an RE2 match (cel-go charges the
    value's length by the pattern's, a tenth by a quarter)."""
    cost = 0
    for matcher in values:
        cost += len(matcher.exact or ()) * (1 + _text_cost(ENVELOPE_TEXT))
        if matcher.exp:
            cost += 1 + _text_cost(ENVELOPE_TEXT) * math.ceil(0.25 * (len(matcher.exp) + 8))
    return cost


def estimated_cost(policy: WorkloadsPolicy) -> int:
    """An upper estimate of a rule's runtime cost on a Pod of the envelope (every item of every list refused,
    its message built), in kube-apiserver's units."""
    per_container = 0
    text = _text_cost(ENVELOPE_TEXT)
    if policy.registries:
        per_container += 80 + 12 * text  # normalising, defaulting, comparing with the old container, the message
        for entry in policy.registries:
            per_container += 1 + (text + 4) * math.ceil(0.25 * (len(entry.url) + 8)) + 4
    if policy.resources:
        names = 0
        for limit in (policy.resources.requests, policy.resources.limits):
            if limit is not None:
                names += len(limit.required or ()) + 3 * (len(limit.min or {}) + len(limit.max or {}))
        per_container += 40 + 30 * names
    cost = ENVELOPE_ITEMS * per_container
    if policy.qos_classes:
        cost += 2 * ENVELOPE_ITEMS * 80  # the class of the new and of the old spec
    placement = policy.placement or PlacementPolicy()
    schedulers = [*(placement.schedulers or []), *(policy.schedulers or [])]
    for values in (schedulers, placement.priority_classes or [], placement.runtime_classes or []):
        if values:
            cost += 20 + 2 * text + _match_cost(values)
    if placement.node_selector_keys:
        cost += ENVELOPE_ITEMS * (20 + 2 * text + len(placement.node_selector_keys) * (1 + text))
    if placement.tolerations:
        cost += ENVELOPE_ITEMS * (60 + 4 * text + len(placement.tolerations) * (10 + 4 * text))
    return cost


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


def _findings(rule: Rule, policy: WorkloadsPolicy, lists: tuple[str, ...]) -> str:
    """CEL list of the rule's messages for a request of a kind it targets with ``lists``, in the webhook's order."""
    if not _has_policies(policy):
        return _itself(rule)
    parts = []
    if policy.qos_classes:
        parts.append(_qos(rule, policy.qos_classes))
    if policy.registries:
        parts.append(_registries(rule, policy, lists))
    if policy.resources:
        parts.append(_resources(rule, policy, lists))
    if policy.placement is not None or policy.schedulers:
        parts.append(_placement(rule, policy))
    return "(" + " + ".join(part for part in parts if part != "[]") + ")" if any(p != "[]" for p in parts) else "[]"


def compile_rules(rules: Sequence[tuple[Rule, WorkloadsPolicy]]) -> Area:
    """The namespace's workload rules (those that compile to CEL at all), in order, to one :class:`Area`."""
    area = Area()
    spent = 0
    compiled = qos = False
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
        area.placements.append((rule.origin, "native", "workload rules compile to the policy"))
        if not kinds:
            continue  # it targets no kind admission judges: nothing to ask
        compiled, qos = True, qos or bool(policy.qos_classes)
        by_lists: dict[tuple[str, ...], list[str]] = {}
        for kind, lists in kinds.items():
            by_lists.setdefault(lists, []).append(kind)
        found = "[]"
        for lists, names in reversed(by_lists.items()):
            found = f"(variables.w_kind in {celtext.list_literal(sorted(names))} ? {_findings(rule, policy, lists)} : {found})"
        asked = f"variables.w_kind in {celtext.list_literal(sorted(kinds))}"
        area.asked[rule.index] = asked
        name = f"w{rule.index}"
        area.variables.append(
            {"name": name, "expression": f"{rule.applies} && {asked} ? {found}.filter(m, m != '') : []"}
        )
        validation = {"expression": f"size(variables.{name}) == 0", "messageExpression": f"string(variables.{name}[0])"}
        if rule.action == "audit":
            area.audit_validations.append(validation)
        else:
            area.validations.append({**validation, "reason": "Forbidden"})
    if compiled:
        area.variables[:0] = shared_variables(qos)
        area.resources |= RESOURCES
    return area

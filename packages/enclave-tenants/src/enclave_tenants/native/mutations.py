"""A namespace's rule mutations to the body of a MutatingAdmissionPolicy (``admissionregistration.k8s.io/v1``,
served from Kubernetes 1.36).

Pure: no API, no clock. What compiles is what the mutating webhook (``enclave_admission.rules.mutation``) sets
on labels and annotations: ``mutate[].metadata`` entries, then the ``managed`` values of ``enforce.metadata``
(CREATE and UPDATE, the last applicable one wins over any mutation) and their ``default`` values (CREATE, when
the key is still absent). The webhook works key by key (a key's outcome reads that key alone), so each
``(labels|annotations, key)`` folds into one optional value, in the webhook's order::

    over    = the last applicable overwrite entry's value               (or none)
    first   = the first applicable non-overwrite entry's value          (or none)
    after   = over, else the object's own value, else first             (the mutate[] entries, in order)
    final   = the last applicable managed value, else after, else (on CREATE) the last applicable default

and the policy's one JSONPatch mutation adds ``final`` where it differs from the object's value (adding the
map first when the object has none), so a key already holding its value is never touched and a re-invocation
changes nothing. Applicability is the rule's audience (``User``, ``Group``, ``ServiceAccount``), the kind scope
each entry's ``kinds``/``apiGroups``.

**What stays on the webhook**, per key (a key's entries all go native or all stay, since the webhook would
otherwise see a value the policy set before its own entries ran): a key one rule with ``enforce.conditions`` or
a ``Custom`` audience touches (an erroring condition makes the webhook skip that rule alone, where a policy's
error fails its whole mutation), a rule that does not compile, and a key past :data:`MAX_TERMS`. Workload
mutations (``mutate[].workloads``) stay on the webhook whole (:data:`WORKLOADS_ON_WEBHOOK`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from enclave_core.api.rules import AppliedRule, KindScope
from enclave_tenants.native import celtext

JSON = dict[str, Any]
Path = Literal["native", "webhook"]

MAX_TERMS: Final = 256
"""Entries one key's value may fold (mutate entries, managed and default values); past it the key stays on
the webhook. Each is a constant-cost ternary, far below kube-apiserver's per-expression budget."""

AREA: Final = "mutate"
MANAGED_AREA: Final = "managed and default metadata"
WORKLOADS_ON_WEBHOOK: Final = (
    "workload mutations stay on the mutating webhook: resource defaults compare the container's quantities (a "
    "request never above its limit) and a priority class needs the priority kube-apiserver resolved removed, "
    "neither exact in a JSONPatch expression"
)
NOT_SERVED: Final = (
    "kube-apiserver does not serve MutatingAdmissionPolicies (admissionregistration.k8s.io/v1, Kubernetes 1.36 "
    "and later): mutations run on the mutating webhook"
)


@dataclass
class Mutations:
    """What a namespace's rule mutations compile to: the policy's variables and mutations, and per rule and area
    where it runs (``(origin, area, path, why)``)."""

    placements: list[tuple[str, str, Path, str]] = field(default_factory=list)
    variables: list[JSON] = field(default_factory=list)
    mutations: list[JSON] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)
    """The keys the policy sets, in order."""


@dataclass(frozen=True)
class _Entry:
    """One thing a rule says about a key's value: a ``mutate[]`` entry (``overwrite`` or not), or a managed or
    default value of ``enforce.metadata``."""

    index: int
    what: Literal["overwrite", "set", "managed", "default"]
    scope: KindScope
    value: str


def _rule_problem(rule: AppliedRule) -> str:
    """Why a rule's mutations cannot be in a policy, or ''."""
    why = celtext.applies(rule)[1]
    if why:
        return why
    if rule.enforce is not None and rule.enforce.conditions:
        return (
            "its enforce.conditions may error, which the webhook takes as the rule not applying while a policy's "
            "error fails the whole mutation"
        )
    if any(a.kind == "Custom" for a in rule.audience or ()):
        return (
            "its Custom audience may error, which the webhook takes as the rule not applying while a policy's "
            "error fails the whole mutation"
        )
    return ""


def _entries(rules: Sequence[AppliedRule]) -> dict[tuple[str, str], list[_Entry]]:
    """Per key, in the webhook's order: the ``mutate[]`` entries (rule then entry order), then the managed and
    default values (rule then entry order)."""
    keys: dict[tuple[str, str], list[_Entry]] = {}
    for index, rule in enumerate(rules):
        for mutation in rule.mutate or ():
            entry = mutation.metadata
            if entry is None:
                continue
            scope = KindScope.of(entry.kinds, entry.api_groups)
            what: Literal["overwrite", "set"] = "overwrite" if entry.overwrite else "set"
            for part, values in (("labels", entry.labels), ("annotations", entry.annotations)):
                for key, value in (values or {}).items():
                    keys.setdefault((part, key), []).append(_Entry(index, what, scope, value))
    for index, rule in enumerate(rules):
        for metadata in (rule.enforce.metadata if rule.enforce else None) or ():
            scope = KindScope.of(metadata.kinds, metadata.api_groups)
            for part, found in (("labels", metadata.labels), ("annotations", metadata.annotations)):
                for key, rule_value in (found or {}).items():
                    if rule_value.managed is not None:
                        keys.setdefault((part, key), []).append(_Entry(index, "managed", scope, rule_value.managed))
                    if rule_value.default is not None:
                        keys.setdefault((part, key), []).append(_Entry(index, "default", scope, rule_value.default))
    return keys


def _prevail(stages: list[tuple[str, str]], name: str, tags: tuple[str, str], pick: str) -> None:
    """Two stages: ``pick`` (the last applicable value of these entries), then that value where there is one and
    the previous stage's where not (an overwrite, and the managed value, win over what came before)."""
    picked, out = tags
    before = f"variables.{name}{stages[-1][0]}"
    stages.append((picked, pick))
    stages.append((out, f"variables.{name}{picked}.hasValue() ? variables.{name}{picked} : {before}"))


def _pick(entries: Sequence[_Entry], applies: dict[int, str], last: bool) -> str:
    """CEL optional: the value of the last (or first) entry that applies to the request, else none."""
    links = [
        (f"{applies[e.index]} && {celtext.kind_scope(e.scope)}", f"optional.of({celtext.lit(e.value)})")
        for e in entries
    ]
    expression = "optional.none()"
    for matches, value in links if last else reversed(links):
        expression = f"(({matches}) ? {value} : {expression})"
    return expression


def pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) to ``parts``."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def compile_mutations(rules: Sequence[AppliedRule]) -> Mutations:
    """A namespace's rules (in ``status.rules`` order) to one MutatingAdmissionPolicy body."""
    found = Mutations()
    problems = {index: _rule_problem(rule) for index, rule in enumerate(rules)}
    origins = [celtext.origin_text(rule) for rule in rules]
    applies = {index: f"variables.ma{index}" for index, rule in enumerate(rules) if not problems[index]}
    outcome: dict[tuple[int, str], list[tuple[Path, str]]] = {}
    sets: dict[str, list[str]] = {"labels": [], "annotations": []}
    used: set[int] = set()
    for number, ((part, key), entries) in enumerate(_entries(rules).items()):
        path = f"metadata.{part}[{key!r}]"
        why = next(
            (f"{path}: {origins[e.index]} also sets it and {problems[e.index]}" for e in entries if problems[e.index]),
            "",
        )
        if not why and len(entries) > MAX_TERMS:
            why = f"{path}: more than {MAX_TERMS} entries set it, past the policy's budget"
        for entry in entries:
            area = AREA if entry.what in ("overwrite", "set") else MANAGED_AREA
            result: tuple[Path, str] = ("webhook", why) if why else ("native", f"{path} in the mutating policy")
            outcome.setdefault((entry.index, area), []).append(result)
        if why:
            continue
        used |= {e.index for e in entries}
        name = f"mu{number}"
        stages: list[tuple[str, str]] = [("c", f"object.metadata.?{part}[?{celtext.lit(key)}]")]
        plain = [e for e in entries if e.what == "set"]
        if plain:
            stages.append(("p", f"variables.{name}c.hasValue() ? variables.{name}c : {_pick(plain, applies, False)}"))
        overwrites = [e for e in entries if e.what == "overwrite"]
        if overwrites:
            _prevail(stages, name, ("w", "o"), _pick(overwrites, applies, True))
        defaults = [e for e in entries if e.what == "default"]
        if defaults:
            before = f"variables.{name}{stages[-1][0]}"
            pick = _pick(defaults, applies, True)
            stages.append(("d", f"{before}.hasValue() || request.operation != 'CREATE' ? {before} : {pick}"))
        managed = [e for e in entries if e.what == "managed"]
        if managed:
            _prevail(stages, name, ("v", "m"), _pick(managed, applies, True))
        found.variables += [{"name": f"{name}{stage}", "expression": text} for stage, text in stages]
        current, value = f"variables.{name}c", f"variables.{name}{stages[-1][0]}"
        changed = f"{value}.hasValue() && (!{current}.hasValue() || {current}.value() != {value}.value())"
        target = celtext.lit(pointer("metadata", part, key))
        sets[part].append(f"({changed} ? [[{target}, {value}.value()]] : [])")
        found.keys.append((part, key))
    found.variables[:0] = [{"name": f"ma{i}", "expression": celtext.applies(rules[i])[0]} for i in sorted(used)]
    patches = []
    for part, parts in sets.items():
        if not parts:
            continue
        found.variables.append({"name": f"mu_{part}", "expression": " + ".join(parts)})
        listed = f"variables.mu_{part}"
        patches.append(
            f"(size({listed}) > 0 && !has(object.metadata.{part}) ? "
            f"[JSONPatch{{op: 'add', path: {celtext.lit(pointer('metadata', part))}, value: {{}}}}] : [])"
        )
        patches.append(f"{listed}.map(e, JSONPatch{{op: 'add', path: e[0], value: e[1]}})")
    if patches:
        found.mutations.append({"patchType": "JSONPatch", "jsonPatch": {"expression": " + ".join(patches)}})
    for (index, area), results in outcome.items():
        webhook = [why for path, why in results if path == "webhook"]
        if webhook:
            found.placements.append((origins[index], area, "webhook", "; ".join(dict.fromkeys(webhook))))
        else:
            found.placements.append(
                (origins[index], area, "native", "labels and annotations set by the mutating policy")
            )
    for index, rule in enumerate(rules):
        if any(m.workloads is not None for m in rule.mutate or ()):
            found.placements.append((origins[index], "mutate[].workloads", "webhook", WORKLOADS_ON_WEBHOOK))
    return found

"""A namespace's compiled rules (RuleStatus ``status.rules``) to the body of a ValidatingAdmissionPolicy.

Pure: no API, no clock. The unit is the namespace, never the rule: per judged item (a label key, an external
IP, a node port) the webhook walks the namespace's rules in order and the *last matching* allow/deny decides,
so the item's rules are folded into one CEL expression, a chain of ternaries built from the last rule back::

    A(r2) && S(r2) ? V(r2) : (A(r1) && S(r1) ? V(r1) : (... : ''))

``A`` is whether the rule applies (audience and conditions, one policy variable per rule), ``S`` whether it
speaks about the item, ``V`` the verdict: ``''`` when the item passes, else the webhook's own message for it
(origin, field path, value), so a native denial reads like the webhook's. Each item is a variable; a
validation asks it to be ``''`` and uses it as its ``messageExpression``.

**What stays on the webhook**, and why, is reported per rule and area (:class:`Placement`): a rule whose
conditions read ``now`` (a policy has no clock variable) or that is broken; storage (PersistentVolume labels),
NetworkPolicy grants unless asked for (:data:`NETWORK_ON_WEBHOOK`) and the workload parts
:mod:`~enclave_tenants.native.workloads` keeps there; workload mutations, metadata ones that
:mod:`~enclave_tenants.native.mutations` cannot fold into the MutatingAdmissionPolicy (or all of them where
kube-apiserver serves none); quotas (ledgers).
Services, workloads, ingress and network compile in modules of their own (:mod:`~enclave_tenants.native.services`,
:mod:`~enclave_tenants.native.workloads`, :meth:`_Compiler.areas`), folded in the order the compiler calls them.
Items interact across rules, so an item is native only when *every* rule that speaks about it is: a label key one
webhook-only rule governs stays on the webhook for all of them,
as does a key with a ``managed`` value where no MutatingAdmissionPolicy sets it (else the policy refuses any other
value in the webhook's words, :meth:`_Compiler._managed`) or that an audit rule also judges,
and an item whose expression would pass the policy's budget (:data:`MAX_TERMS`). Audit rules never decide;
they go to a second policy bound with ``Warn`` and ``Audit`` (a warning to the client, an annotation in the
API audit log) and failure policy ``Ignore``.

Known differences from the webhook, both only for inputs that already fail closed there: a ``Custom`` audience
that errors makes the webhook apply the rule, the policy fail (and so refuse); a condition that errors refuses
in kube-apiserver's form for an error, ``expression '...' resulted in error: no such key: <origin> could not be
evaluated: ...`` (:meth:`_Compiler.conditions_evaluate`), without the webhook's list of the failed conditions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from enclave_core.api.rules import AppliedRule, KindScope, MetadataValue
from enclave_tenants.native import celtext, ingress, minors, mutations, network, services, workloads
from enclave_tenants.native.area import Area
from enclave_tenants.native.area import Rule as AreaRule

JSON = dict[str, Any]
Path = Literal["native", "webhook"]

MAX_TERMS: Final = 512
"""Matcher terms one item's expression may fold (rules x values); past it the item stays on the webhook. A
policy expression's runtime cost is bounded by kube-apiserver (per expression and per policy); staying far
below it means a policy never fails on a large object."""

GROUP_VERSION: Final = "admissionregistration.k8s.io/v1"

NETWORK_ON_WEBHOOK: Final = (
    "NetworkPolicy grants are judged by the webhook: the exact test of a CIDR minus its except blocks "
    "(enclave_tenants.native.network) costs quadratically in the blocks, past the CEL cost a policy may spend on "
    "a large NetworkPolicy and past what enclave test's engine evaluates, so it is not switched on"
)
_AREAS_ON_WEBHOOK: Final = {
    "storage": "storage rules judge the labels of the PersistentVolume a claim names, which kube-apiserver does "
    "not give a policy (it sees the claim only); every claim still goes to the webhook (volumeclaims.enclave.dev "
    "in a native namespace), so this keeps no namespace on the resources hooks",
}


@dataclass(frozen=True)
class Placement:
    """Where one area of one rule is judged, and why."""

    origin: str
    area: str
    path: Path
    why: str


@dataclass
class Program:
    """What a namespace's rules compile to: the deciding and the auditing policy bodies, and each rule's path."""

    placements: list[Placement] = field(default_factory=list)
    variables: list[JSON] = field(default_factory=list)
    validations: list[JSON] = field(default_factory=list)
    audit_validations: list[JSON] = field(default_factory=list)
    resources: set[str] = field(default_factory=set)
    """What the policy matches: ``*`` (every resource) or ``resource[/subresource][.group]`` names."""
    mutation_variables: list[JSON] = field(default_factory=list)
    mutations: list[JSON] = field(default_factory=list)
    """The MutatingAdmissionPolicy's body (:mod:`~enclave_tenants.native.mutations`); empty: none."""
    served: minors.Minor = minors.NEWEST
    """The kube-apiserver minor the program is for (what its CEL environment offers, :mod:`.minors`)."""

    @property
    def empty(self) -> bool:
        return not self.validations and not self.audit_validations and not self.mutations

    def signature(self) -> str:
        """Identical programs (namespaces of a tenant with the same rules) share one policy."""
        body = json.dumps(
            [self.variables, self.validations, self.audit_validations, sorted(self.resources), self.mutations]
            + ([self.mutation_variables] if self.mutations else [])
        )
        return hashlib.sha256(body.encode()).hexdigest()[:10]


# -- items ----------------------------------------------------------------------------------------------------


@dataclass
class _Rule:
    index: int
    origin: str
    action: str
    variable: str
    """``variables.a<index>``: the rule applies."""
    conditional: bool


class _Compiler:
    def __init__(self, rules: Sequence[AppliedRule], program: Program) -> None:
        self.program = program
        self.rules: list[tuple[AppliedRule, _Rule | None]] = []
        self.asked: dict[int, list[str]] = {}
        self.scopes: dict[str, str] = {}
        """A kind scope's CEL -> the variable holding it (``k<n>``): evaluated once per request however many
        links and checks read it."""
        for index, rule in enumerate(rules):
            origin = celtext.origin_text(rule)
            applies, why = celtext.applies(rule, program.served)
            if why:
                self.rules.append((rule, None))
                for area in _areas(rule):
                    program.placements.append(Placement(origin, area, "webhook", why))
                continue
            name = f"a{index}"
            conditional = bool(rule.enforce and rule.enforce.conditions)
            program.variables.append({"name": name, "expression": applies})
            action = rule.enforce.action if rule.enforce else "deny"
            self.rules.append((rule, _Rule(index, origin, action, f"variables.{name}", conditional)))

    # -- metadata

    def metadata(self, managed_native: bool) -> None:
        """``enforce.metadata``; ``managed_native``: a MutatingAdmissionPolicy sets managed values (kube-apiserver
        serves them), so the refusal of any other value compiles too, else such a key stays on the webhook."""
        keys: dict[tuple[str, str], list[tuple[_Rule | None, AppliedRule, KindScope, MetadataValue]]] = {}
        for rule, compiled in self.rules:
            for entry in (rule.enforce.metadata if rule.enforce else None) or ():
                scope = KindScope.of(entry.kinds, entry.api_groups)
                for part, values in (("labels", entry.labels), ("annotations", entry.annotations)):
                    for key, value in (values or {}).items():
                        keys.setdefault((part, key), []).append((compiled, rule, scope, value))
        outcome: dict[str, list[tuple[Path, str]]] = {}
        on_namespaces: set[str] = set()
        for number, ((part, key), pairs) in enumerate(keys.items()):
            path = f"metadata.{part}[{key!r}]"
            why = self._metadata_problem(pairs, path, managed_native)
            deciding = [(c, s, v) for c, _, s, v in pairs if c is not None and c.action != "audit"]
            if not why and deciding:
                self._metadata_key(number, part, key, path, deciding)
            for compiled, rule, scope, value in pairs:
                origin = celtext.origin_text(rule)
                if compiled is None:
                    continue  # its placement is already said
                if why:
                    outcome.setdefault(origin, []).append(("webhook", why))
                    continue
                if compiled.action == "audit":
                    self._metadata_audit(number, compiled, scope, part, key, path, value)
                self.asked.setdefault(compiled.index, []).append(self._scope(scope))
                self.program.resources.add("*")
                outcome.setdefault(origin, []).append(("native", f"{path} in one chain with the namespace's rules"))
                if _covers_namespaces(scope):
                    on_namespaces.add(origin)
        for origin, results in outcome.items():
            webhook = [why for path, why in results if path == "webhook"]
            if webhook:
                self.program.placements.append(
                    Placement(origin, "metadata", "webhook", "; ".join(dict.fromkeys(webhook)))
                )
                continue
            self.program.placements.append(
                Placement(origin, "metadata", "native", "labels and annotations compile to the policy")
            )
            if origin in on_namespaces:
                self.program.placements.append(
                    Placement(
                        origin,
                        "metadata of Namespace objects",
                        "webhook",
                        "the policy matches namespaced objects only; the namespaces hook judges the Namespace itself",
                    )
                )

    @staticmethod
    def _metadata_problem(
        pairs: Sequence[tuple[_Rule | None, AppliedRule, KindScope, MetadataValue]], path: str, managed_native: bool
    ) -> str:
        managed = any(value.managed is not None for *_, value in pairs)
        if managed and managed_native and any(c is not None and c.action == "audit" for c, *_ in pairs):
            return f"{path} has a managed value and an audit rule: the webhook audits only where none applies"
        if sum(celtext.terms(value.values) for *_, value in pairs) > MAX_TERMS:
            return f"{path}: its rules fold into more than {MAX_TERMS} terms, past the policy's budget"
        for compiled, rule, _, value in pairs:
            if compiled is None:
                return f"{path}: {celtext.origin_text(rule)} also governs it and stays on the webhook (the last match decides)"
            if value.managed is not None and not managed_native:
                return f"{path} has a managed value: the mutating webhook sets it and refuses any other"
            problems = celtext.matcher_problems(value.values)
            if problems:
                return f"{path}: {problems[0]}"
        return ""

    def _scope(self, scope: KindScope) -> str:
        """``variables.k<n>``, true when the request's kind is in ``scope`` (declared on first use, before the
        variables that read it, as kube-apiserver requires)."""
        text = celtext.kind_scope(scope)
        if text == "true":
            return text
        name = self.scopes.get(text)
        if name is None:
            name = self.scopes[text] = f"k{len(self.scopes)}"
            self.program.variables.append({"name": name, "expression": text})
        return f"variables.{name}"

    @staticmethod
    def _present(part: str, key: str) -> tuple[str, str]:
        new = f"object.metadata.?{part}[?{celtext.lit(key)}]"
        old = f"(oldObject == null ? optional.none() : oldObject.metadata.?{part}[?{celtext.lit(key)}])"
        return new, old

    def _metadata_key(
        self, number: int, part: str, key: str, path: str, pairs: Sequence[tuple[_Rule, KindScope, MetadataValue]]
    ) -> None:
        """The item's chain, written so the common request costs little: kube-apiserver evaluates every
        ``messageExpression`` (here the item's variable) again, in a context of its own, for every request it
        admits, so whatever the variable does is done twice. Where no rule requires the key, an absent key
        decides ``''`` before anything else is read; each link tests its kind scope (one shared variable) before
        the rule's conditions. CEL's ``&&`` is commutative (false wins over an error), so the order changes the
        cost only, never the answer; a condition that errors still refuses through :meth:`conditions_evaluate`."""
        new, old = self._present(part, key)
        name = f"m{number}"
        self.program.variables.append({"name": f"{name}v", "expression": new})
        self.program.variables.append({"name": f"{name}o", "expression": old})
        value, previous = f"variables.{name}v", f"variables.{name}o"
        managed = [(rule, scope, entry.managed) for rule, scope, entry in pairs if entry.managed is not None]
        absent_matters = bool(managed) or any(rule.action == "allow" and entry.required for rule, _, entry in pairs)
        got = f"{value}.value()"
        links = []
        for rule, scope, entry in pairs:
            applies = " && ".join(t for t in (self._scope(scope), rule.variable) if t != "true")
            if rule.action == "allow":
                refused = (
                    celtext.lit(f"{rule.origin} allows {path} only {celtext.describe(entry.values or [])}; got ")
                    + " + "
                    + celtext.quoted(got)
                )
                present = f"({celtext.matchers(got, entry.values)} ? '' : {refused})" if entry.values else "''"
                if absent_matters:
                    absent = celtext.lit(f"{rule.origin} requires {path}") if entry.required else "''"
                    present = f"{value}.hasValue() ? {present} : {absent}"
                links.append((applies, present))
            else:
                hit = celtext.matchers(got, entry.values) if entry.values else "true"
                if absent_matters:
                    hit = f"({value}.hasValue() ? {hit} : false)"
                matched = f" (matches {celtext.describe(entry.values)})" if entry.values else ""
                message = (
                    celtext.lit(f"{rule.origin} denies {path}=")
                    + " + "
                    + celtext.quoted(got)
                    + (f" + {celtext.lit(matched)}" if matched else "")
                )
                links.append((applies if hit == "true" else f"{applies} && {hit}", message))
        chained = celtext.chain(links)
        if managed:
            chained = self._managed(name, path, value, managed, chained)
        if absent_matters:
            changed = (
                f"request.operation != 'UPDATE' || {value}.hasValue() != {previous}.hasValue() || "
                f"({value}.hasValue() && {value}.value() != {previous}.value())"
            )
            expression = f"!({changed}) ? '' : {chained}"
        else:
            # present here: changed unless an UPDATE keeps the old value
            changed = f"request.operation != 'UPDATE' || !{previous}.hasValue() || {got} != {previous}.value()"
            expression = f"!{value}.hasValue() || !({changed}) ? '' : {chained}"
        self.program.variables.append({"name": name, "expression": expression})
        self._validate(name, self.program.validations)

    def _managed(
        self, name: str, path: str, value: str, managed: Sequence[tuple[_Rule, KindScope, str]], otherwise: str
    ) -> str:
        """A key with managed values: where one applies (the last), the value must be it, and nothing else is
        judged (the webhook's ``metadata.judge``); else ``otherwise``, the key's chain. The mutating policy set
        the value before this runs, so a refusal means something changed it afterwards."""
        picks, messages = [], []
        for rule, scope, wanted in managed:
            applies = " && ".join(t for t in (self._scope(scope), rule.variable) if t != "true") or "true"
            picks.append((applies, f"optional.of({celtext.lit(wanted)})"))
            shown = f"({value}.hasValue() ? {celtext.quoted(value + '.value()')} : 'absent')"
            text = celtext.lit(f"{path} is managed by {rule.origin}: it must be {wanted!r}, not ")
            messages.append((applies, f"{text} + {shown}"))
        pick = "optional.none()"
        for applies, chosen in picks:
            pick = f"(({applies}) ? {chosen} : {pick})"
        self.program.variables.append({"name": f"{name}g", "expression": pick})
        wanted_value = f"variables.{name}g"
        holds = f"{value}.hasValue() && {value}.value() == {wanted_value}.value()"
        return f"({wanted_value}.hasValue() ? ({holds} ? '' : {celtext.chain(messages)}) : {otherwise})"

    def _metadata_audit(
        self, number: int, rule: _Rule, scope: KindScope, part: str, key: str, path: str, entry: MetadataValue
    ) -> None:
        new, old = self._present(part, key)
        changed = (
            f"request.operation != 'UPDATE' || ({new}).hasValue() != ({old}).hasValue() || "
            f"(({new}).hasValue() && ({new}).value() != ({old}).value())"
        )
        got = f"({new}).value()"
        hit = celtext.matchers(got, entry.values) if entry.values else "true"
        matched = f" (matches {celtext.describe(entry.values)})" if entry.values else ""
        message = (
            celtext.lit(f"{rule.origin} audits {path}=")
            + " + "
            + celtext.quoted(got)
            + (f" + {celtext.lit(matched)}" if matched else "")
        )
        self.program.audit_validations.append(
            {
                "expression": f"!({self._scope(scope)} && {rule.variable} && ({new}).hasValue() && ({changed}) && {hit})",
                "messageExpression": message,
            }
        )

    # -- areas compiled in modules of their own

    def services(self) -> None:
        """``enforce.services``: :mod:`~enclave_tenants.native.services`, one chain per Service item."""
        self._fold("services", services.compile_area(self._area_rules()))

    def workloads(self, local_check: bool) -> None:
        """``enforce.workloads``: :mod:`enclave_tenants.native.workloads` (each rule alone: no chain)."""
        found = [
            (AreaRule(compiled.index, compiled.origin, compiled.action, compiled.variable), policy)
            for rule, compiled in self.rules
            if compiled is not None and rule.enforce and (policy := rule.enforce.workloads) is not None
        ]
        self._fold("workloads", workloads.compile_rules(found, local_check=local_check))

    def areas(self, network_grants: bool) -> None:
        """Ingress and network (:mod:`~enclave_tenants.native.ingress`, :mod:`~enclave_tenants.native.network`),
        each an :class:`~enclave_tenants.native.area.Area`; network only when asked, else on the webhook."""
        rules = self._area_rules()
        compiled = [("ingress", ingress.compile_area), ("network", network.compile_area)]
        if not network_grants:
            compiled.pop()
            self.program.placements += [
                Placement(c.origin, "network", "webhook", NETWORK_ON_WEBHOOK)
                for rule, c in self.rules
                if c is not None and network.governs(rule)
            ]
        for name, compile_area in compiled:
            self._fold(name, compile_area(rules))

    def _area_rules(self) -> list[tuple[AppliedRule, AreaRule | None]]:
        """The namespace's rules in order as an area module takes them (None: the rule is on the webhook)."""
        return [
            (rule, None if c is None else AreaRule(c.index, c.origin, c.action, c.variable)) for rule, c in self.rules
        ]

    def _fold(self, name: str, found: Area) -> None:
        """An area module's part appended to the program, in the order the compiler calls the areas."""
        self.program.placements += [Placement(origin, name, path, why) for origin, path, why in found.placements]
        self.program.variables += found.variables
        self.program.validations += found.validations
        self.program.audit_validations += found.audit_validations
        self.program.resources |= found.resources
        for index, asked in found.asked.items():
            self.asked.setdefault(index, []).append(asked)

    # -- checks

    def conditions_evaluate(self) -> None:
        """A rule whose conditions error refuses the request whenever an area asks about it (the webhook's
        rule), and kube-apiserver's refusal then names the rule in the webhook's words.

        A validation that errors is refused as ``expression '<expression>' resulted in error: <error>``, never
        with its message, and no CEL expression can turn an error into ``false`` (``&&``, ``||`` absorb one only
        where the result does not depend on it). What the policy can choose is *which* error: ``||`` returns the
        first error among its terms when none is true, so ``!(asked) || E || A || !A``, with ``E`` an error of
        our own text (:func:`~enclave_tenants.native.celtext.raise_text`), is true while ``A`` (the rule
        applies) is a bool and fails with ``E`` when it errors. ``!(asked)`` goes first: a request of a kind the
        rule is not asked about is decided before ``E`` is built (an error value, on every request it reaches).
        These checks come first among the validations, so they are what kube-apiserver reports (its first
        denial), not a chain that read the same variable."""
        checks = []
        for _, compiled in self.rules:
            if compiled is None or not compiled.conditional or compiled.index not in self.asked:
                continue
            if compiled.action == "audit":
                continue  # an audit rule's error is reported, never a refusal
            asked = " || ".join(dict.fromkeys(self.asked[compiled.index]))
            message = condition_error_message(compiled.origin)
            raised, applies = celtext.raise_text(message), compiled.variable
            checks.append(
                {
                    "expression": f"!({asked}) || {raised} || {applies} || !{applies}",
                    "message": message,
                    "reason": "Forbidden",
                }
            )
        self.program.validations[:0] = checks

    def other_areas(self) -> None:
        for rule, compiled in self.rules:
            if compiled is None:
                continue
            origin = celtext.origin_text(rule)
            enforce = rule.enforce
            for area, why in _AREAS_ON_WEBHOOK.items():
                if enforce is not None and getattr(enforce, area) is not None:
                    self.program.placements.append(Placement(origin, area, "webhook", why))
            if rule.quota:
                self.program.placements.append(
                    Placement(origin, "quota", "webhook", "quotas are ledgers (enclave-globalquotas), never a policy")
                )

    def mutating(self, rules: Sequence[AppliedRule], served: bool) -> None:
        """``mutate[].metadata`` and managed/default metadata values: a MutatingAdmissionPolicy where kube-apiserver
        serves them (:mod:`~enclave_tenants.native.mutations`), else the mutating webhook (said per rule)."""
        if not served:
            for rule, compiled in self.rules:
                if compiled is None:
                    continue
                if rule.mutate:
                    self.program.placements.append(
                        Placement(compiled.origin, "mutate", "webhook", mutations.NOT_SERVED)
                    )
                if _sets_values(rule):
                    self.program.placements.append(
                        Placement(compiled.origin, mutations.MANAGED_AREA, "webhook", mutations.NOT_SERVED)
                    )
            return
        found = mutations.compile_mutations(rules)
        broken = {celtext.origin_text(rule) for rule, compiled in self.rules if compiled is None}
        self.program.placements += [
            Placement(origin, area, path, why) for origin, area, path, why in found.placements if origin not in broken
        ]
        self.program.mutation_variables = found.variables
        self.program.mutations = found.mutations

    def _validate(self, name: str, target: list[JSON]) -> None:
        target.append(
            {"expression": f"variables.{name} == ''", "messageExpression": f"variables.{name}", "reason": "Forbidden"}
        )


def _sets_values(rule: AppliedRule) -> bool:
    """Whether a rule's metadata entries have a managed or default value (the mutating side sets them)."""
    return any(
        value.managed is not None or value.default is not None
        for entry in (rule.enforce.metadata if rule.enforce else None) or ()
        for values in (entry.labels, entry.annotations)
        for value in (values or {}).values()
    )


def _covers_namespaces(scope: KindScope) -> bool:
    """Whether a metadata rule's kinds take in Namespace objects (core ``v1``), which no policy bound by namespace
    sees: they stay the namespaces hook's."""
    kind = scope.any_kind or "Namespace" in scope.kinds
    return kind and (scope.any_group or "" in scope.groups or "v1" in scope.versions)


def _areas(rule: AppliedRule) -> list[str]:
    enforce = rule.enforce
    found = [
        area
        for area in ("metadata", "services", "workloads", "ingress", "network", *_AREAS_ON_WEBHOOK)
        if enforce is not None and getattr(enforce, area) is not None
    ]
    return found + (["mutate"] if rule.mutate else []) + (["quota"] if rule.quota else [])


# -- the webhook round trip -----------------------------------------------------------------------------------

ELSEWHERE: Final = frozenset({"quota", "metadata of Namespace objects", "storage"})
"""Areas whose webhook path is not the ``resources`` hooks: quotas are the global quota hooks' ledgers, Namespace
objects the namespaces hook's, PersistentVolumeClaims (all storage rules judge) go to ``/resources`` through
``volumeclaims.enclave.dev`` in a native namespace. Their placement never keeps a namespace on the
``resources`` hooks."""


def webhook_needed(rules: Sequence[AppliedRule], program: Program) -> str:
    """Why the ``resources`` hooks must still be called for a namespace with ``rules`` compiled to ``program``,
    or '' when the policies decide everything those hooks would (the namespace may carry
    :data:`~enclave_core.api.names.NATIVE_RULES_LABEL`).

    Never '' for: a rule that did not compile (admission refuses its audience's requests as broken), or a rule
    area left on the webhook (mutations and managed/default values among them, where no MutatingAdmissionPolicy
    sets them: :meth:`_Compiler.mutating` says so per rule)."""
    for rule in rules:
        if celtext.applies(rule, program.served)[1]:
            return f"{celtext.origin_text(rule)} does not compile to a policy"
    for placement in program.placements:
        if placement.path == "webhook" and placement.area not in ELSEWHERE:
            return f"{placement.origin} {placement.area} stays on the webhook"
    return ""


def condition_error_message(origin: str) -> str:
    """What a policy says of a rule whose condition errored: the webhook's words (``enclave_admission.rules.
    engine``) without the failed conditions and their errors, which no policy expression can read."""
    return f"{origin} could not be evaluated: a condition that errors rejects the request unless another condition is false"


# -- entry points ---------------------------------------------------------------------------------------------


def compile_namespace(
    rules: Sequence[AppliedRule],
    *,
    local_check: bool = False,
    network_grants: bool = False,
    mutations: bool = True,
    served: minors.Minor = minors.NEWEST,
) -> Program:
    """A namespace's rules (in order, as RuleStatus ``status.rules`` holds them) to one policy program.

    ``local_check``: keep on the webhook a workload rule whose policy expressions Enclave's own CEL engine (what
    ``enclave test`` judges native policies with) cannot bound by its static estimate for Pods of every size; off
    by default: the rule's envelope (:mod:`~enclave_tenants.native.workload_limits`) bounds them for ``enclave
    test`` on a Pod within it, and past it the offline answer is undecided rather than different.
    ``network_grants`` compiles NetworkPolicy grants too (:mod:`~enclave_tenants.native.network`, exact, proven against the webhook by the
    differential test); off by default (:data:`NETWORK_ON_WEBHOOK` says why). ``mutations``: kube-apiserver serves
    MutatingAdmissionPolicies (Kubernetes 1.36 and later), so metadata mutations compile to one; else they stay
    on the mutating webhook and say why. ``served``: the minor of the kube-apiserver the policies are for
    (``/version``, :func:`.minors.served`): a rule whose conditions or audience call a function its CEL
    environment does not offer stays on the webhook, and every rule does when a function the compiler writes is
    not offered (a kube-apiserver older than Enclave supports)."""
    program = Program(served=served)
    compiler = _Compiler(rules, program)
    compiler.metadata(managed_native=mutations)
    compiler.services()
    compiler.workloads(local_check)
    compiler.areas(network_grants)
    compiler.conditions_evaluate()
    compiler.other_areas()
    compiler.mutating(rules, mutations)
    missing = minors.unavailable(_texts(program), served)
    if missing:
        why = "the compiled policy would call what kube-apiserver does not offer: " + "; ".join(missing)
        on_webhook = [
            Placement(p.origin, p.area, "webhook", why if p.path == "native" else p.why) for p in program.placements
        ]
        return Program(placements=on_webhook, served=served)
    return program


def _texts(program: Program) -> list[str]:
    """Every CEL text of the program's policies (the match conditions are :mod:`.objects`', of the base library)."""
    found = [str(v["expression"]) for v in (*program.variables, *program.mutation_variables)]
    for validation in (*program.validations, *program.audit_validations):
        found += [str(validation[key]) for key in ("expression", "messageExpression") if key in validation]
    for mutation in program.mutations:
        found += [
            str(patch["expression"])
            for patch in (mutation.get("jsonPatch"), mutation.get("applyConfiguration"))
            if patch
        ]
    return found

"""One request against a namespace's rules: who a rule applies to, and how the verdicts of rules combine.

**Applies**: a rule applies to a request when its audience includes the requester (empty: everyone) and all
its ``enforce.conditions`` are true. A false condition skips the rule; a condition that errors (and no other
condition is false) makes the rule *reject* the request naming the condition and the error (an ``audit``
rule reports it instead). Each rule is asked at most once per request, and only when an area module found
that the rule speaks about this request at all (its kinds, its resource).

**Verdicts**: area modules judge *items* (one label key, one external IP, one hostname, one address grant).
For each item the rules are walked in order: a ``deny`` rule *matches* when the item hits its constraint; an
``allow`` rule *matches* whenever it governs the item, satisfied or not; an ``audit`` rule never decides and
reports what it matched. The last matching ``allow``/``deny`` decides the item: a matching deny, or an allow
whose constraint the item does not satisfy, refuses the request. So a broad deny followed by a narrower allow
reads as "deny all but", and the reverse as "allow these, but never that".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from enclave_admission.review import AdmissionRequest
from enclave_admission.rules.compiled import CompiledRule, NamespaceSet
from enclave_core import cel

_UNKNOWN = -2
"""Condition bits not evaluated yet."""


class Finding(NamedTuple):
    deny: bool
    """False: an audit record."""
    origin: str
    message: str


class Item:
    """The verdicts of the rules on one judged value, in rule order."""

    __slots__ = ("audits", "last")

    def __init__(self) -> None:
        self.last: tuple[CompiledRule, bool, str] | None = None
        self.audits: list[tuple[CompiledRule, str]] = []

    def deny(self, rule: CompiledRule, why: str) -> None:
        self.last = (rule, False, why)

    def allow(self, rule: CompiledRule, satisfied: bool, why: str) -> None:
        self.last = (rule, satisfied, why)

    def audit(self, rule: CompiledRule, why: str) -> None:
        self.audits.append((rule, why))

    def hit(self, rule: CompiledRule, why: str) -> None:
        """A deny or audit rule whose constraint the item hits."""
        if rule.action == "audit":
            self.audit(rule, why)
        elif rule.action == "deny":
            self.deny(rule, why)


class Review:
    """The state of judging one request: the namespace's rules, memoised applicability, the findings."""

    __slots__ = (
        "_applies",
        "_batch",
        "_bits",
        "_conditional",
        "_conditions",
        "_masks",
        "_outcomes",
        "_request_vars",
        "_variables",
        "findings",
        "malformed",
        "request",
        "rules",
    )

    def __init__(self, request: AdmissionRequest, rules: NamespaceSet, *, mutating: bool = False) -> None:
        self.request = request
        self.rules = rules
        # Which conditions the first rule asked evaluates together: every rule's for the validating hook, only
        # those of the rules the mutating hook asks about for it (any other rule asked is evaluated alone).
        self._conditional = rules.mutating if mutating else rules.conditional
        self._batch = rules.mutating_batch if mutating else rules.batch
        self.findings: list[Finding] = []
        self.malformed = ""
        """Why the object cannot be judged (a field of the wrong JSON type): answered as a bad request."""
        self._applies: dict[int, bool] = {}
        self._variables: dict[str, Any] | None = None
        self._request_vars: dict[str, Any] | None = None
        self._conditions: dict[int, list[cel.EvalResult[bool]]] = {}
        """The condition results of rules whose conditions did not all hold (for their messages)."""
        self._outcomes: dict[int, bool | None] | None = None
        self._masks = rules.mutating_masks if mutating else rules.masks
        self._bits = _UNKNOWN
        """Per conditional rule: all conditions true, one false, or None (an error and none false)."""

    # -- applicability ----------------------------------------------------------------------------------------

    def request_variable(self) -> dict[str, Any]:
        """``request`` as CEL sees it: the AdmissionReview request fields rules may reasonably look at."""
        found = self._request_vars
        if found is None:
            req = self.request
            group, _, version = req.api_version.rpartition("/")
            found = self._request_vars = {
                "uid": req.uid,
                "operation": req.operation,
                "name": req.name,
                "namespace": req.namespace,
                "kind": {"group": group, "version": version, "kind": req.kind},
                "resource": {"group": req.group, "resource": req.resource},
                "subResource": req.sub_resource,
                "userInfo": {"username": req.username, "groups": list(req.groups)},
                "dryRun": req.dry_run,
            }
        return found

    def variables(self) -> Mapping[str, Any]:
        """What the namespace's conditions read of ``object``, ``oldObject``, ``request`` and ``now``: the
        others are left out (decided per snapshot, :attr:`NamespaceSet.reads`)."""
        found = self._variables
        if found is None:
            reads = self.rules.reads
            found = self._variables = {"object": self.request.obj, "oldObject": self.request.old}
            if "request" in reads:
                found["request"] = self.request_variable()
            if "now" in reads:
                found["now"] = datetime.now(UTC)
        return found

    def in_audience(self, rule: CompiledRule) -> bool:
        if rule.everyone:
            return True
        request = self.request
        if request.username in rule.users or any(group in rule.groups for group in request.groups):
            return True
        for program in rule.custom:
            result = program.evaluate({"request": self.request_variable()})
            # A Custom audience that errors includes the requester: the rule then applies (fails closed).
            if isinstance(result, cel.Failed) or result.value:
                return True
        return False

    def applies(self, rule: CompiledRule) -> bool:
        """Whether ``rule`` applies to this request; records a rejection when its conditions error."""
        known = self._applies.get(rule.index)
        if known is not None:
            return known
        verdict = self._decide(rule)
        self._applies[rule.index] = verdict
        return verdict

    def _decide(self, rule: CompiledRule) -> bool:
        if rule.broken or not self.in_audience(rule):
            return False  # a broken rule is reported once by check_broken
        if not rule.conditions:
            return True
        mask = self._masks.get(rule.index)
        if mask is not None:
            bits = self._condition_bits()
            if bits >= 0:  # every condition a bool: the rule applies when all of its conditions are true
                return bits & mask == mask
        verdict = self._condition_outcomes().get(rule.index)
        if verdict is not None:
            return verdict
        results = self._conditions.get(rule.index) or cel.default().evaluate_all(
            list(rule.conditions), self.variables()
        )
        outcome, _ = cel.combine_conditions(results)
        if outcome is cel.ConditionOutcome.MATCH:
            return True
        if outcome is cel.ConditionOutcome.ERROR:
            failed = [
                f"condition {name!r}: {result.error.message}"
                for name, result in zip(rule.condition_names, results, strict=True)
                if isinstance(result, cel.Failed)
            ]
            self.findings.append(
                Finding(
                    rule.action != "audit",
                    rule.origin,
                    f"{rule.origin} could not be evaluated ({'; '.join(failed)}): "
                    "a condition that errors rejects the request unless another condition is false",
                )
            )
        return False

    def _condition_bits(self) -> int:
        """Every batched condition's value as a bit (:meth:`enclave_core.cel.ConditionBatch.bits`), evaluated
        once, when the first rule is asked; -1 when some condition errored or is not a bool (then
        :meth:`_condition_outcomes` works out each rule's outcome and message)."""
        bits = self._bits
        if bits == _UNKNOWN:
            batch = self._batch
            found = batch.bits(self.variables()) if batch is not None else 0
            bits = self._bits = -1 if found is None else found
        return bits

    def _condition_outcomes(self) -> dict[int, bool | None]:
        """Whether each conditional rule's conditions hold. The first rule asked evaluates the conditions of
        every rule of the namespace at once (one folded program, :class:`enclave_core.cel.ConditionBatch`):
        the request's object is converted for CEL once and the runtime is called once, not once per rule."""
        found = self._outcomes
        if found is None:
            batch = self._batch
            results = batch.evaluate(self.variables()) if batch is not None else []
            found = self._outcomes = {}
            position = 0
            for candidate in self._conditional:
                count = len(candidate.conditions)
                verdict: bool | None = True
                for result in results[position : position + count]:
                    if not isinstance(result, cel.Ok) or result.value is not True:
                        verdict = None
                        break
                if verdict is None:
                    chunk = results[position : position + count]
                    outcome, _ = cel.combine_conditions(chunk)
                    if outcome is cel.ConditionOutcome.SKIP:
                        verdict = False
                    self._conditions[candidate.index] = chunk
                found[candidate.index] = verdict
                position += count
        return found

    def check_broken(self) -> None:
        """Rules that cannot be evaluated reject every request of their audience (they were refused at the
        API; one got in while the webhook was down)."""
        for rule in self.rules.rules:
            if rule.broken and self.in_audience(rule):
                self.findings.append(
                    Finding(rule.action != "audit", rule.origin, f"{rule.origin} cannot be evaluated: {rule.broken}")
                )

    def asked(self) -> dict[int, bool]:
        """Rule index -> whether it applies, for every rule an area asked about (the ones that govern something
        in this request); the others were never asked. Read by ``enclave explain``; costs nothing otherwise."""
        return dict(self._applies)

    # -- verdicts ---------------------------------------------------------------------------------------------

    def settle(self, item: Item) -> None:
        self.findings.extend(settled(item))


def settled(item: Item) -> list[Finding]:
    """The findings an item's verdicts come to: its audits, then its refusal when the deciding rule refuses."""
    found = [Finding(False, rule.origin, why) for rule, why in item.audits]
    if item.last is not None:
        rule, satisfied, why = item.last
        if not satisfied:
            found.append(Finding(True, rule.origin, why))
    return found

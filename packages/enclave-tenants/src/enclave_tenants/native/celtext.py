"""The CEL text the native-rules compiler writes: literals, value matchers, kind scopes, and whether a rule
applies to a request (its audience and conditions), each a pure function of the rule.

Apart from :mod:`enclave_tenants.native.compiler` so each file stays one idea: this module knows CEL and the
rule model, the compiler knows how a namespace's rules fold into one policy.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Iterable, Sequence
from typing import Any

from enclave_core import cel
from enclave_core.api.meta import ValueMatcher
from enclave_core.api.rules import AppliedRule, KindScope
from enclave_core.patterns import PatternError, compile_pattern
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX
from enclave_tenants.native import dialect, minors


def lit(text: str) -> str:
    """A CEL string literal for ``text`` (JSON escaping is CEL's; non-ASCII stays as is, never a surrogate)."""
    return json.dumps(text, ensure_ascii=False)


def list_literal(values: Iterable[str]) -> str:
    return "[" + ", ".join(lit(value) for value in values) + "]"


def origin_text(rule: AppliedRule) -> str:
    """How the webhook names a rule in its messages."""
    origin = rule.origin
    if origin.kind == "Tenant":
        return f"Tenant {origin.name} spec.rules[{origin.index}]"
    return f"RuleStatus {origin.namespace}/{origin.name} spec[{origin.index}]"


def describe(values: Sequence[ValueMatcher]) -> str:
    """The webhook's wording of a list of matchers."""
    texts = []
    for matcher in values:
        parts = []
        if matcher.exact:
            parts.append(f"exact {sorted(matcher.exact)}")
        if matcher.exp:
            parts.append(f"{'not ' if matcher.negate else ''}matching {matcher.exp!r}")
        texts.append(" or ".join(parts) or "nothing")
    return "; ".join(texts)


@functools.lru_cache(maxsize=4096)
def go_regex_problem(pattern: str) -> str:
    """Why kube-apiserver's Go regexp might not read a pattern as the webhook's RE2 does (it does not compile, or
    is outside :mod:`~enclave_tenants.native.dialect`), or ''."""
    try:
        compile_pattern(pattern)
    except PatternError as err:
        return f"regular expression {pattern!r} does not compile: {err.reason}"
    if "\\C" in pattern:
        return f"regular expression {pattern!r} uses \\C (any byte), which Go's regexp refuses"
    try:
        compile_pattern("\\A(?:" + pattern + ")\\z")
    except PatternError:
        # \Q without \E quotes to the end: the group the policy wraps the pattern in would not close
        return f"regular expression {pattern!r} does not stay within a group (an unterminated \\Q quote)"
    return dialect.problem(pattern)


def matchers(var: str, values: Sequence[ValueMatcher]) -> str:
    """CEL true when the string ``var`` matches one of ``values`` (exact, or the whole value a regex)."""
    alternatives = []
    for matcher in values:
        parts = []
        if matcher.exact:
            parts.append(f"{var} in {list_literal(matcher.exact)}")
        if matcher.exp:
            anchored = lit("\\A(?:" + matcher.exp + ")\\z")
            parts.append(f"{'!' if matcher.negate else ''}{var}.matches({anchored})")
        alternatives.append("(" + (" || ".join(parts) or "false") + ")")
    return "(" + (" || ".join(alternatives) or "false") + ")"


def networks(cidrs: Iterable[str]) -> list[str]:
    """The fewest networks covering the same addresses as ``cidrs`` (disjoint, no two siblings, so a value is
    covered by their union exactly when one network contains it); entries that do not parse are skipped, as
    the webhook skips them."""
    parsed: dict[int, list[Any]] = {4: [], 6: []}
    for text in cidrs:
        try:
            network = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            continue
        parsed[network.version].append(network)
    return [str(n) for version in (4, 6) for n in ipaddress.collapse_addresses(parsed[version])]


def terms(values: Sequence[ValueMatcher] | None) -> int:
    return sum(len(m.exact or ()) + (1 if m.exp else 0) for m in values or ()) + 1


def matcher_problems(values: Sequence[ValueMatcher] | None) -> list[str]:
    return [problem for m in values or () if m.exp for problem in [go_regex_problem(m.exp)] if problem]


def kind_scope(scope: KindScope) -> str:
    """CEL true when the request's kind is in a metadata rule's ``kinds``/``apiGroups``."""
    kind = "true" if scope.any_kind else f"request.kind.kind in {list_literal(sorted(scope.kinds))}"
    if scope.any_group:
        return kind
    api_version = "(request.kind.group == '' ? request.kind.version : request.kind.group + '/' + request.kind.version)"
    terms = [f"request.kind.group in {list_literal(sorted(scope.groups))}"] if scope.groups else []
    # a core version (no '/') is the whole apiVersion only in the core group: no string is built for it
    core = sorted(version for version in scope.versions if "/" not in version)
    grouped = sorted(version for version in scope.versions if "/" in version)
    if core:
        terms.append(f"(request.kind.group == '' && request.kind.version in {list_literal(core)})")
    if grouped:
        terms.append(f"{api_version} in {list_literal(grouped)}")
    return f"({kind} && ({' || '.join(terms) or 'false'}))"


# -- applicability --------------------------------------------------------------------------------------------


def applies(rule: AppliedRule, served: minors.Minor = minors.NEWEST) -> tuple[str, str]:
    """(CEL for "the rule applies to this request", why it cannot be native or ''). ``served``: the minor of the
    kube-apiserver the policy is for; a condition or audience calling a function its CEL environment does not
    offer (Enclave's engine knows more, :mod:`.minors`) keeps the rule on the webhook."""
    audience = rule.audience or []
    terms = []
    users = sorted(
        {
            a.name if a.kind == "User" or a.name.startswith(SERVICE_ACCOUNT_PREFIX) else SERVICE_ACCOUNT_PREFIX + a.name
            for a in audience
            if a.kind in ("User", "ServiceAccount")
        }
    )
    groups = sorted({a.name for a in audience if a.kind == "Group"})
    if users:
        terms.append(f"request.userInfo.username in {list_literal(users)}")
    if groups:
        terms.append(f"request.userInfo.groups.exists(g, g in {list_literal(groups)})")
    facade = cel.default()
    for position, entry in enumerate(audience):
        if entry.kind == "Custom":
            try:
                facade.condition(entry.name, cel.RULE_AUDIENCE_ENV)
            except cel.CelCompileError as err:
                return "", f"audience[{position}] does not compile ({err}): the webhook refuses what it applies to"
            missing = minors.unavailable([entry.name], served)
            if missing:
                return "", f"audience[{position}] cannot be a policy expression: {'; '.join(missing)}"
            terms.append(f"({entry.name})")
    conditions = []
    for position, condition in enumerate((rule.enforce.conditions if rule.enforce else None) or ()):
        try:
            program = facade.condition(condition.expression, cel.RULE_CONDITION_ENV)
        except cel.CelCompileError as err:
            return (
                "",
                f"enforce.conditions[{position}] does not compile ({err}): the webhook refuses what it applies to",
            )
        if any(read == "now" or read.startswith("now.") for read in program.reads):
            return (
                "",
                f"enforce.conditions[{position}] reads `now`, which a ValidatingAdmissionPolicy has no variable for",
            )
        missing = minors.unavailable([condition.expression], served)
        if missing:
            return "", f"enforce.conditions[{position}] cannot be a policy expression: {'; '.join(missing)}"
        conditions.append(f"({condition.expression})")
    who = ["(" + " || ".join(terms) + ")"] if terms else []
    return " && ".join([*who, *conditions]) or "true", ""


def chain(links: Sequence[tuple[str, str]]) -> str:
    """``links`` in rule order, each (matches, verdict): the last matching link's verdict, else ''."""
    expression = "''"
    for matches, verdict in links:
        expression = f"(({matches}) ? ({verdict}) : {expression})"
    return expression


def raise_text(text: str) -> str:
    """A CEL bool expression that always fails with the error ``no such key: <text>`` (kube-apiserver's cel-go
    and the CEL engine of ``enclave test`` alike): how a policy chooses the text of the error it fails with."""
    return "{'': false}[" + lit(text) + "]"


def quoted(var: str) -> str:
    """The webhook's ``{value!r}`` of a plain string value."""
    return f'"\'" + {var} + "\'"'

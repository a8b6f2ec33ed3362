"""Ingress rules (``enforce.ingress``) to CEL: the hostnames the webhook's ``enclave_admission.rules.ingress``
judges, on every ingress-like kind it reads, as policy text.

Per kind (Ingress, Gateway, ListenerSet, HTTPRoute, GRPCRoute, TLSRoute, OpenShift Route) the hostname fields
are those of the webhook's ``hostnames()``, with the same field paths, and an empty value standing for a missing
one (an Ingress without rules, a Route without ``spec.host``, a listener without a hostname, a route without
hostnames). Each hostname is an item judged by the kind's rules (``types`` empty or naming it) folded into one
chain, the last rule outermost (:func:`enclave_tenants.native.celtext.chain`), so the last matching allow or
deny decides as on the webhook: a missing hostname is refused by any allow or deny rule; a value is refused by
an allow whose matchers it misses, or by a deny whose matchers it hits (a deny without matchers hits all). On
UPDATE a non-empty hostname the old object had anywhere is not judged. Audit rules report the same items
through the auditing policy.

Stays on the webhook, for every ingress rule of the namespace (items interact across rules): a rule whose
applicability did not compile, a matcher outside the dialect Go's regexp reads alike
(:mod:`~enclave_tenants.native.dialect`), or rules folding into more than :data:`MAX_TERMS` matcher terms.

Known message difference (decisions are the same): a hostname holding a quote, backslash or control character
is quoted ``'...'`` as is where the webhook uses Python's ``repr``; kube-apiserver's validation (DNS names) and
the Gateway API schemas keep such values out of every field but unvalidated CRDs'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from enclave_core.api.meta import ValueMatcher
from enclave_core.api.rules import AppliedRule
from enclave_tenants.native import celtext
from enclave_tenants.native.area import Area, Rule

MAX_TERMS: Final = 256
"""Matcher terms of every ingress rule together; the chain is written once per hostname field of a kind (up to
four for an Ingress), so this stays within the compiler's per-item budget."""

_GATEWAY: Final = ("gateway.networking.k8s.io", "gateway.networking.x-k8s.io")
KINDS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "Ingress": (("networking.k8s.io", "ingresses"),),
    "Route": (("route.openshift.io", "routes"),),
    "Gateway": tuple((group, "gateways") for group in _GATEWAY),
    "ListenerSet": tuple((group, plural) for group in _GATEWAY for plural in ("listenersets", "xlistenersets")),
    "HTTPRoute": tuple((group, "httproutes") for group in _GATEWAY),
    "GRPCRoute": tuple((group, "grpcroutes") for group in _GATEWAY),
    "TLSRoute": tuple((group, "tlsroutes") for group in _GATEWAY),
}
"""Rule type -> the (API group, resource) pairs the webhook reads as it (``ingress._TYPES``)."""


def is_kind(kind: str) -> str:
    """CEL true when the request is for a resource the webhook reads as ``kind``."""
    tests = [
        f"(request.resource.group == {celtext.lit(group)} && request.resource.resource == {celtext.lit(plural)})"
        for group, plural in KINDS[kind]
    ]
    return "(" + " || ".join(tests) + ")"


def _field(path: str) -> str:
    return celtext.lit(path)


Judge = Callable[[str, str], str]
"""(field path, hostname), both CEL expressions, -> CEL for what is said of that hostname."""


def items(kind: str, obj: str, judge: Judge) -> str:
    """CEL list: ``judge`` of every hostname field of ``obj`` as the webhook's ``hostnames()`` lists them, in
    its order."""
    spec = f"{obj}.?spec"
    none = "''"
    if kind == "Ingress":
        rules = f"{spec}.?rules.orValue([])"
        tls = f"{spec}.?tls.orValue([])"
        no_rules = judge(celtext.lit("spec.rules"), none)
        host = judge("'spec.rules[' + string(i) + '].host'", "r.?host.orValue('')")
        no_hosts = judge("'spec.tls[' + string(i) + '].hosts'", none)
        tls_host = judge("'spec.tls[' + string(i) + '].hosts[' + string(j) + ']'", "h")
        return (
            f"(size({rules}) == 0 ? [{no_rules}] : {rules}.transformList(i, r, {host})) + "
            f"{tls}.transformList(i, t, size(t.?hosts.orValue([])) == 0 ? [{no_hosts}] : "
            f"t.hosts.transformList(j, h, {tls_host})).flatten()"
        )
    if kind in ("Gateway", "ListenerSet"):
        listener = judge("'spec.listeners[' + string(i) + '].hostname'", "l.?hostname.orValue('')")
        return f"{spec}.?listeners.orValue([]).transformList(i, l, {listener})"
    if kind == "Route":
        return "[" + judge(celtext.lit("spec.host"), f"{spec}.?host.orValue('')") + "]"
    names = f"{spec}.?hostnames.orValue([])"
    no_names = judge(celtext.lit("spec.hostnames"), none)
    name = judge("'spec.hostnames[' + string(i) + ']'", "h")
    return f"(size({names}) == 0 ? [{no_names}] : []) + {names}.transformList(i, h, {name})"


def _old(kind: str) -> str:
    """CEL list of the old object's hostnames on UPDATE (none otherwise)."""
    values = items(kind, "oldObject", lambda _, value: value)
    return f"(request.operation == 'UPDATE' && oldObject != null ? {values} : [])"


def _links(kind: str, rules: Sequence[tuple[Rule, AppliedRule]], path: str, value: str) -> list[tuple[str, str]]:
    """(matches, verdict) per deciding rule of ``kind`` on the hostname ``value`` at ``path``."""
    links = []
    for rule, applied in rules:
        matchers = _matchers(applied)
        hit = celtext.matchers(value, matchers) if matchers else "true"
        missing = (
            celtext.lit(f"{rule.origin} requires a hostname in every hostname field of a {kind}; ")
            + f" + {path} + ' has none'"
        )
        if rule.action == "allow":
            refused = (
                celtext.lit(f"{rule.origin} allows ")
                + f" + {path} + "
                + celtext.lit(f" only {celtext.describe(matchers)}; got ")
                + " + "
                + celtext.quoted(value)
            )
            links.append((rule.variable, f"{value} == '' ? {missing} : ({hit} ? '' : {refused})"))
        else:
            denied = celtext.lit(f"{rule.origin} denies ") + f" + {path} + '=' + " + celtext.quoted(value)
            links.append((f"{rule.variable} && ({value} == '' || {hit})", f"{value} == '' ? {missing} : {denied}"))
    return links


def _audit(kind: str, rule: Rule, applied: AppliedRule, path: str, value: str) -> str:
    """The audit rule's message for the hostname ``value`` at ``path``, '' when it reports nothing."""
    matchers = _matchers(applied)
    hit = celtext.matchers(value, matchers) if matchers else "true"
    missing = celtext.lit(f"{rule.origin} audits a {kind} without a hostname at ") + f" + {path}"
    found = celtext.lit(f"{rule.origin} audits ") + f" + {path} + '=' + " + celtext.quoted(value)
    return f"{value} == '' ? {missing} : ({hit} ? {found} : '')"


def _matchers(applied: AppliedRule) -> list[ValueMatcher]:
    policy = applied.enforce.ingress if applied.enforce else None
    return list((policy.hostnames if policy else None) or [])


def _types(applied: AppliedRule) -> list[str]:
    policy = applied.enforce.ingress if applied.enforce else None
    return list((policy.types if policy else None) or [])


def _deciding(kind: str, rules: Sequence[tuple[Rule, AppliedRule]], old: str) -> Judge:
    def judge(path: str, value: str) -> str:
        chain = celtext.chain(_links(kind, rules, path, value))
        return f"(({value} != '' && {value} in {old}) ? '' : {chain})"

    return judge


def _auditing(kind: str, rule: Rule, applied: AppliedRule, old: str) -> Judge:
    def judge(path: str, value: str) -> str:
        return f"(({value} != '' && {value} in {old}) ? '' : {_audit(kind, rule, applied, path, value)})"

    return judge


def compile_area(rules: Sequence[tuple[AppliedRule, Rule | None]]) -> Area:
    """The ingress rules of a namespace (all its rules, in order) to policy text, or to the webhook."""
    area = Area()
    governing = [(applied, rule) for applied, rule in rules if applied.enforce and applied.enforce.ingress]
    if not governing:
        return area
    why = ""
    on_webhook = [celtext.origin_text(applied) for applied, rule in governing if rule is None]
    if on_webhook:
        why = f"{on_webhook[0]} also judges ingress hostnames and stays on the webhook (the last match decides)"
    matchers = [m for applied, _ in governing for m in _matchers(applied)]
    problems = celtext.matcher_problems(matchers)
    if not why and problems:
        why = problems[0]
    if not why and celtext.terms(matchers) > MAX_TERMS:
        why = f"the ingress rules fold into more than {MAX_TERMS} matcher terms, past the policy's budget"
    compiled = [(rule, applied) for applied, rule in governing if rule is not None]
    if why:
        area.placements += [(rule.origin, "webhook", why) for rule, _ in compiled]
        return area
    for kind in KINDS:
        of_kind = [(rule, applied) for rule, applied in compiled if not _types(applied) or kind in _types(applied)]
        if not of_kind:
            continue
        test = is_kind(kind)
        for rule, _ in of_kind:
            area.asked[rule.index] = " || ".join(filter(None, [area.asked.get(rule.index), test]))
        area.resources |= {f"{plural}.{group}" for group, plural in KINDS[kind]}
        name = f"i_{kind}"
        old = f"variables.{name}_old"
        area.variables.append({"name": f"{name}_old", "expression": f"{test} ? {_old(kind)} : []"})
        deciding = [(rule, applied) for rule, applied in of_kind if rule.action != "audit"]
        if deciding:
            listed = items(kind, "object", _deciding(kind, deciding, old))
            area.refuse_listed(name, f"{test} ? ({listed}).filter(m, m != '') : []")
        for rule, applied in of_kind:
            if rule.action == "audit":
                listed = f"({items(kind, 'object', _auditing(kind, rule, applied, old))}).filter(m, m != '')"
                area.audit_listed(f"{rule.variable} && {test}", listed)
    area.placements += [(rule.origin, "native", "hostnames compile to the policy") for rule, _ in compiled]
    return area

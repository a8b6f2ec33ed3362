"""Service rules (``enforce.services``) to CEL: the items the webhook's ``enclave_admission.rules.services``
judges on a Service, as policy text.

Per constraint (``types``, each ``spec.externalIPs`` entry, ``spec.externalName``, ``spec.loadBalancerIP`` and
each ``spec.loadBalancerSourceRanges`` entry, each port's ``nodePort``) the items of the new object are judged by
the namespace's rules folded into one chain, the last rule outermost (:func:`enclave_tenants.native.celtext.chain`),
so the last matching allow or deny decides as on the webhook; on UPDATE an item the old object already had is not
judged. Addresses compare as networks (``cidr()``, the rule's CIDRs as the fewest networks covering them). Audit
rules report the same items through the auditing policy.

Stays on the webhook, for every Service rule of the namespace (items interact across rules): a rule whose
applicability did not compile, or an external-name matcher outside the dialect Go's regexp reads alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from enclave_core.api.rules import AppliedRule, CidrList
from enclave_tenants.native import celtext
from enclave_tenants.native.area import Area, Rule

SERVICES: Final = "request.resource.group == '' && request.resource.resource == 'services'"
"""CEL true when the request is for a Service (what a Service rule is asked about)."""


def compile_area(rules: Sequence[tuple[AppliedRule, Rule | None]]) -> Area:
    """The Service constraints of the namespace's rules, in order (None: a rule on the webhook), as policy text."""
    area = Area()
    governing = [(rule, compiled) for rule, compiled in rules if rule.enforce and rule.enforce.services]
    if not governing:
        return area
    on_webhook = [celtext.origin_text(rule) for rule, compiled in governing if compiled is None]
    problems: list[str] = []
    for rule, _ in governing:
        services = rule.enforce.services if rule.enforce else None
        if services and services.external_names:
            problems += celtext.matcher_problems(services.external_names.hostnames)
    if on_webhook or problems:
        why = (
            f"{on_webhook[0]} also judges Services and stays on the webhook (the last match decides)"
            if on_webhook
            else problems[0]
        )
        for rule, compiled in governing:
            if compiled is not None:
                area.placements.append((celtext.origin_text(rule), "webhook", why))
        return area
    judged = [(rule, compiled) for rule, compiled in governing if compiled is not None]
    area.resources.add("services")
    for _, compiled in judged:
        area.asked[compiled.index] = SERVICES
        area.placements.append((compiled.origin, "native", "Service fields compile to the policy"))
    _items(area, judged)
    return area


def _items(area: Area, rules: Sequence[tuple[AppliedRule, Rule]]) -> None:
    """Per Service constraint, the items it judges (``v`` a string, or ``p`` a port of ``spec.ports``), those
    of the old object (an UPDATE judges only new values), and the items' field path."""
    spec, old = "object.spec", "(oldObject == null ? {} : oldObject.spec)"
    kind = "(has({0}.type) && {0}.type != '' ? {0}.type : 'ClusterIP')"
    lb_old = (
        f"({old}.?loadBalancerIP.orValue('') == '' ? [] : [{old}.loadBalancerIP]) + "
        f"{old}.?loadBalancerSourceRanges.orValue([])"
    )
    ports = f"{old}.?ports.orValue([]).map(p, p.?nodePort.orValue(0))"
    constraints = [
        (
            "types",
            f"[{kind.format(spec)}]",
            f"(oldObject == null ? [] : [{kind.format('oldObject.spec')}])",
            "'spec.type'",
        ),
        (
            "externalIPs",
            f"{spec}.?externalIPs.orValue([])",
            f"{old}.?externalIPs.orValue([])",
            "'spec.externalIPs[' + string(i) + ']'",
        ),
        (
            "externalNames",
            f"({spec}.?externalName.orValue('') == '' ? [] : [{spec}.externalName])",
            f"({old}.?externalName.orValue('') == '' ? [] : [{old}.externalName])",
            "'spec.externalName'",
        ),
        (
            "loadBalancerIP",
            f"({spec}.?loadBalancerIP.orValue('') == '' ? [] : [{spec}.loadBalancerIP])",
            lb_old,
            "'spec.loadBalancerIP'",
        ),
        (
            "loadBalancerSourceRanges",
            f"{spec}.?loadBalancerSourceRanges.orValue([])",
            lb_old,
            "'spec.loadBalancerSourceRanges[' + string(i) + ']'",
        ),
        ("nodePorts", f"{spec}.?ports.orValue([])", ports, "'spec.ports[' + string(i) + '].nodePort'"),
    ]
    for what, items, previous, path in constraints:
        links = []
        audits = []
        for rule, compiled in rules:
            services = rule.enforce.services if rule.enforce else None
            found = _link(what, compiled, services, path)
            if found is None:
                continue
            if compiled.action == "audit":
                audits.append((compiled, found))
            else:
                links.append((f"{compiled.variable} && ({found[0]})", found[1]))
        if what == "nodePorts":
            element, skip = "p", f"(p.?nodePort.orValue(0) == 0 || p.?nodePort.orValue(0) in {previous})"
        else:
            element, skip = "v", f"v in {previous}"
        if links:
            judged = f"{items}.transformList(i, {element}, {skip} ? '' : {celtext.chain(links)}).filter(m, m != '')"
            area.refuse_listed(f"s_{what}", judged)
        for compiled, (matches, message) in audits:
            listed = f"{items}.transformList(i, {element}, {skip} || !({matches}) ? '' : {message})"
            area.audit_validations.append(
                {
                    "expression": f"!({compiled.variable}) || {listed}.all(m, m == '')",
                    "messageExpression": f"{listed}.filter(m, m != '').join('; ')",
                }
            )


def _networks(cidrs: CidrList | None) -> list[str] | None:
    """The rule's CIDRs as the fewest networks covering the same addresses (:func:`celtext.networks`); None when
    the rule has no such constraint."""
    return None if cidrs is None else celtext.networks(cidrs.cidrs or ())


_AS_CIDR: Final = "(isCIDR(v) ? cidr(v).masked() : cidr(v + (ip(v).family() == 4 ? '/32' : '/128')))"


def _link(what: str, rule: Rule, services: Any, path: str) -> tuple[str, str] | None:
    """(matches, verdict) of one rule on one Service item (``v``, or Service port ``p``), or None when the rule has
    no constraint on it (the webhook's ``services.py``)."""
    verb = "denies" if rule.action == "deny" else "audits"
    value = celtext.quoted("v")

    def verdict(inside: str, constraint: str) -> tuple[str, str]:
        if rule.action == "allow":
            return (
                "true",
                f"({inside}) ? '' : {celtext.lit(f'{rule.origin} allows ')} + {path} + {celtext.lit(f' only {constraint}; got ')} + {value}",
            )
        return (
            inside,
            f"{celtext.lit(f'{rule.origin} {verb} ')} + {path} + '=' + {value} + {celtext.lit(f' ({constraint})')}",
        )

    if what == "types":
        if not services.types:
            return None
        return verdict(f"v in {celtext.list_literal(services.types)}", f"types {sorted(services.types)}")
    if what == "externalNames":
        names = services.external_names.hostnames if services.external_names else None
        if not names:
            return None
        return verdict(celtext.matchers("v", names), f"hostnames {celtext.describe(names)}")
    if what == "nodePorts":
        ranges = [(r.from_, r.to) for r in (services.node_ports.ports if services.node_ports else None) or ()]
        if not ranges:
            return None
        port = "p.?nodePort.orValue(0)"
        inside = " || ".join(f"({low} <= {port} && {port} <= {high})" for low, high in ranges)
        text = ", ".join(f"{low}-{high}" for low, high in ranges)
        value = celtext.quoted(f"string({port})")
        if rule.action == "allow":
            return (
                "true",
                f"({inside}) ? '' : {celtext.lit(f'{rule.origin} allows ')} + {path} + {celtext.lit(f' only node ports {text}; got ')} + {value}",
            )
        return (
            f"({inside})",
            f"{celtext.lit(f'{rule.origin} {verb} ')} + {path} + '=' + {value} + {celtext.lit(f' (node ports {text})')}",
        )
    cidrs = services.external_i_ps if what == "externalIPs" else services.load_balancers
    networks = _networks(cidrs)
    if networks is None:
        return None
    parses = "(isIP(v) || isCIDR(v))"
    if what == "externalIPs":
        constraint = "the rule's externalIPs CIDRs"
        if not networks:
            if rule.action == "allow":
                return None
            return verdict("true", "no external IPs at all")
    else:
        constraint = "the rule's loadBalancers CIDRs"
    contains = f"{celtext.list_literal(networks)}.exists(c, cidr(c).containsCIDR({_AS_CIDR}))"
    if rule.action == "allow":
        inside = contains
    else:
        inside = f"{celtext.list_literal(networks)}.exists(c, cidr(c).containsCIDR({_AS_CIDR}) || {_AS_CIDR}.containsCIDR(cidr(c)))"
    matches, message = verdict(inside, constraint)
    return f"{parses} && ({matches})", message

"""Ingress rules (``enforce.ingress``): hostnames of every kind of ingress-like resource.

Hostname fields per type (``types`` of the rule; empty means all):

* ``Ingress`` (networking.k8s.io): ``spec.rules[].host`` and ``spec.tls[].hosts[]``; an Ingress without rules
  (a default backend only) answers every host, which counts as a missing hostname at ``spec.rules``;
* ``Gateway`` and ``ListenerSet`` (gateway.networking.k8s.io, and ``XListenerSet`` of
  gateway.networking.x-k8s.io): ``spec.listeners[].hostname``;
* ``HTTPRoute``, ``GRPCRoute``, ``TLSRoute``: ``spec.hostnames[]``;
* ``Route`` (route.openshift.io): ``spec.host``.

A hostname is judged against the rule's matchers (a deny or audit without matchers matches every hostname;
an allow without matchers accepts any). A resource targeted by an allow or deny rule must fill every hostname
field: a missing one is refused; an audit rule records it. On UPDATE only hostnames the old object did not
have are judged.
"""

from __future__ import annotations

from typing import Any

from enclave_admission.rules import matching
from enclave_admission.rules.engine import Item, Review

_GATEWAY = ("gateway.networking.k8s.io", "gateway.networking.x-k8s.io")
_TYPES: dict[tuple[str, str], str] = {
    ("networking.k8s.io", "ingresses"): "Ingress",
    ("route.openshift.io", "routes"): "Route",
    **{(group, "gateways"): "Gateway" for group in _GATEWAY},
    **{(group, "listenersets"): "ListenerSet" for group in _GATEWAY},
    **{(group, "xlistenersets"): "ListenerSet" for group in _GATEWAY},
    **{(group, "httproutes"): "HTTPRoute" for group in _GATEWAY},
    **{(group, "grpcroutes"): "GRPCRoute" for group in _GATEWAY},
    **{(group, "tlsroutes"): "TLSRoute" for group in _GATEWAY},
}
"""(API group, resource) -> the rule's type name."""


def kind_of(group: str, resource: str) -> str:
    return _TYPES.get((group, resource), "")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def hostnames(kind: str, obj: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(field path, hostname) for every hostname field of ``obj``; an empty hostname marks a missing one."""
    spec = (obj or {}).get("spec")
    if not isinstance(spec, dict):
        spec = {}
    found: list[tuple[str, str]] = []
    if kind == "Ingress":
        rules = _list(spec.get("rules"))
        if not rules:
            found.append(("spec.rules", ""))
        for i, rule in enumerate(rules):
            found.append((f"spec.rules[{i}].host", str((rule or {}).get("host") or "")))
        for i, tls in enumerate(_list(spec.get("tls"))):
            hosts = _list((tls or {}).get("hosts"))
            if not hosts:
                found.append((f"spec.tls[{i}].hosts", ""))
            found += [(f"spec.tls[{i}].hosts[{j}]", str(host or "")) for j, host in enumerate(hosts)]
    elif kind in ("Gateway", "ListenerSet"):
        for i, listener in enumerate(_list(spec.get("listeners"))):
            found.append((f"spec.listeners[{i}].hostname", str((listener or {}).get("hostname") or "")))
    elif kind == "Route":
        found.append(("spec.host", str(spec.get("host") or "")))
    elif kind:
        names = _list(spec.get("hostnames"))
        if not names:
            found.append(("spec.hostnames", ""))
        found += [(f"spec.hostnames[{i}]", str(name or "")) for i, name in enumerate(names)]
    return found


def judge(review: Review) -> None:
    request = review.request
    kind = kind_of(request.group, request.resource)
    if not kind or request.obj is None:
        return
    rules = [
        rule
        for rule in review.rules.ingress
        if rule.ingress is not None and (not rule.ingress.types or kind in rule.ingress.types) and review.applies(rule)
    ]
    if not rules:
        return
    old = {value for _, value in hostnames(kind, request.old)} if request.operation == "UPDATE" else set()
    for path, value in hostnames(kind, request.obj):
        if value and value in old:
            continue
        item = Item()
        for rule in rules:
            assert rule.ingress is not None
            matchers = rule.ingress.hostnames
            if not value:
                why = f"{rule.origin} requires a hostname in every hostname field of a {kind}; {path} has none"
                if rule.action == "audit":
                    item.audit(rule, f"{rule.origin} audits a {kind} without a hostname at {path}")
                else:
                    item.allow(rule, False, why)
                continue
            hit = not matchers or matching.match_any(matchers, value)
            if rule.action == "allow":
                item.allow(rule, hit, f"{rule.origin} allows {path} only {matching.describe(matchers)}; got {value!r}")
            elif hit:
                verb = "denies" if rule.action == "deny" else "audits"
                item.hit(rule, f"{rule.origin} {verb} {path}={value!r}")
        review.settle(item)

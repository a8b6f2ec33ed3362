"""Service rules (``enforce.services``): types, external IPs, external names, load balancer addresses, node ports.

Each constraint judges its own items: the type, every ``spec.externalIPs`` entry, ``spec.externalName``,
``spec.loadBalancerIP`` and every ``spec.loadBalancerSourceRanges`` entry, every explicitly requested
``spec.ports[].nodePort``. An empty or omitted list imposes no constraint, except ``externalIPs`` under deny,
where an empty list denies every external IP. Addresses: a deny matches an overlap, an allow needs the value
wholly inside its CIDRs. On UPDATE only values the old object did not have are judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from enclave_admission.rules import matching
from enclave_admission.rules.compiled import CompiledRule, ServicesPart
from enclave_admission.rules.engine import Item, Review


def _spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _items(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(constraint, field path, value) of everything a services rule can judge."""
    found = [("types", "spec.type", str(spec.get("type") or "ClusterIP"))]
    found += [("externalIPs", f"spec.externalIPs[{i}]", ip) for i, ip in enumerate(_strings(spec.get("externalIPs")))]
    if spec.get("externalName"):
        found.append(("externalNames", "spec.externalName", str(spec["externalName"])))
    if spec.get("loadBalancerIP"):
        found.append(("loadBalancers", "spec.loadBalancerIP", str(spec["loadBalancerIP"])))
    found += [
        ("loadBalancers", f"spec.loadBalancerSourceRanges[{i}]", cidr)
        for i, cidr in enumerate(_strings(spec.get("loadBalancerSourceRanges")))
    ]
    ports = spec.get("ports")
    for i, port in enumerate(ports if isinstance(ports, list) else []):
        if isinstance(port, dict) and port.get("nodePort"):
            found.append(("nodePorts", f"spec.ports[{i}].nodePort", str(port["nodePort"])))
    return found


def judge(review: Review) -> None:
    request = review.request
    if request.group or request.resource != "services" or request.obj is None:
        return
    rules = [rule for rule in review.rules.services if review.applies(rule)]
    if not rules:
        return
    spec = _spec(request.obj)
    old = {(what, value) for what, _, value in _items(_spec(request.old))} if request.operation == "UPDATE" else set()
    for what, path, value in _items(spec):
        if (what, value) in old:
            continue
        item = Item()
        for rule in rules:
            assert rule.services is not None
            _JUDGES[what](item, rule, rule.services, path, value)
        review.settle(item)


def _verdict(item: Item, rule: CompiledRule, inside: bool, path: str, value: str, constraint: str) -> None:
    if rule.action == "allow":
        item.allow(rule, inside, f"{rule.origin} allows {path} only {constraint}; got {value!r}")
    elif inside:
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} {path}={value!r} ({constraint})")


def _types(item: Item, rule: CompiledRule, part: ServicesPart, path: str, value: str) -> None:
    if part.types:
        _verdict(item, rule, value in part.types, path, value, f"types {sorted(part.types)}")


def _external_ips(item: Item, rule: CompiledRule, part: ServicesPart, path: str, value: str) -> None:
    cidrs = part.external_ips
    if cidrs is None:
        return
    if cidrs.empty:
        if rule.action != "allow":  # deny/audit with an empty list: every external IP
            _verdict(item, rule, True, path, value, "no external IPs at all")
        return
    space = matching.grant(value)
    if space is None:
        return  # kube-apiserver refuses an invalid address itself
    inside = matching.covered(space, cidrs) if rule.action == "allow" else matching.overlaps(space, cidrs)
    _verdict(item, rule, inside, path, value, "the rule's externalIPs CIDRs")


def _external_names(item: Item, rule: CompiledRule, part: ServicesPart, path: str, value: str) -> None:
    if part.external_names:
        hit = matching.match_any(part.external_names, value)
        _verdict(item, rule, hit, path, value, f"hostnames {matching.describe(part.external_names)}")


def _load_balancers(item: Item, rule: CompiledRule, part: ServicesPart, path: str, value: str) -> None:
    cidrs = part.load_balancers
    if cidrs is None:
        return
    space = matching.grant(value)
    if space is None:
        return
    inside = matching.covered(space, cidrs) if rule.action == "allow" else matching.overlaps(space, cidrs)
    _verdict(item, rule, inside, path, value, "the rule's loadBalancers CIDRs")


def _node_ports(item: Item, rule: CompiledRule, part: ServicesPart, path: str, value: str) -> None:
    if part.node_ports:
        port = int(value) if value.isdigit() else -1
        inside = any(low <= port <= high for low, high in part.node_ports)
        ranges = ", ".join(f"{low}-{high}" for low, high in part.node_ports)
        _verdict(item, rule, inside, path, value, f"node ports {ranges}")


_JUDGES: dict[str, Callable[[Item, CompiledRule, ServicesPart, str, str], None]] = {
    "types": _types,
    "externalIPs": _external_ips,
    "externalNames": _external_names,
    "loadBalancers": _load_balancers,
    "nodePorts": _node_ports,
}

"""Network rules (``enforce.network.policies``): the address space NetworkPolicies grant, per direction.

Each ``spec.ingress[]``/``spec.egress[]`` rule of a NetworkPolicy grants address space through its ``ipBlock``
peers (the CIDR minus its ``except`` blocks) or, when it has no peers at all, all of IPv4 and IPv6.
Selector-only peers grant pods, not addresses, and are not judged. A deny rule matches a grant that overlaps
its CIDRs, an allow rule needs the grant wholly inside them, an audit rule reports overlaps. Ingress and
egress are judged each against their own list; an empty list imposes nothing. On UPDATE only grants the old
object did not make are judged.
"""

from __future__ import annotations

from typing import Any

from enclave_admission.rules import matching
from enclave_admission.rules.engine import Item, Review
from enclave_admission.rules.matching import Grant

_PEERS = {"ingress": "from", "egress": "to"}


def _grants(obj: dict[str, Any] | None, direction: str) -> list[tuple[str, str, Grant]]:
    """(field path, how it reads, granted space) per grant of ``direction``."""
    spec = (obj or {}).get("spec")
    rules = spec.get(direction) if isinstance(spec, dict) else None
    found: list[tuple[str, str, Grant]] = []
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        peers = rule.get(_PEERS[direction])
        if not peers:
            found.append((f"spec.{direction}[{i}]", "every address (no peers)", matching.EVERYTHING))
            continue
        for j, peer in enumerate(peers if isinstance(peers, list) else []):
            block = peer.get("ipBlock") if isinstance(peer, dict) else None
            if not isinstance(block, dict) or not block.get("cidr"):
                continue
            excepts = [str(e) for e in block.get("except") or []]
            space = matching.grant(str(block["cidr"]), excepts)
            if space is None:
                continue  # kube-apiserver refuses an invalid CIDR itself
            shown = str(block["cidr"]) + (f" except {', '.join(excepts)}" if excepts else "")
            found.append((f"spec.{direction}[{i}].{_PEERS[direction]}[{j}].ipBlock", shown, space))
    return found


def judge(review: Review) -> None:
    request = review.request
    if request.group != "networking.k8s.io" or request.resource != "networkpolicies" or request.obj is None:
        return
    rules = [rule for rule in review.rules.network if review.applies(rule)]
    if not rules:
        return
    for direction in ("ingress", "egress"):
        directed = [(rule, getattr(rule.network, direction)) for rule in rules]
        directed = [(rule, cidrs) for rule, cidrs in directed if cidrs is not None]
        if not directed:
            continue
        old = {shown for _, shown, _ in _grants(request.old, direction)} if request.operation == "UPDATE" else set()
        for path, shown, space in _grants(request.obj, direction):
            if shown in old:
                continue
            item = Item()
            for rule, cidrs in directed:
                if rule.action == "allow":
                    item.allow(
                        rule,
                        matching.covered(space, cidrs),
                        f"{rule.origin} allows {direction} grants only inside its CIDRs; {path} grants {shown}",
                    )
                elif matching.overlaps(space, cidrs):
                    verb = "denies" if rule.action == "deny" else "audits"
                    item.hit(
                        rule, f"{rule.origin} {verb} {direction} grants overlapping its CIDRs: {path} grants {shown}"
                    )
            review.settle(item)

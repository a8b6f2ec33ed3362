"""Network rules (``enforce.network.policies``) to CEL: the address grants of NetworkPolicies, judged as the
webhook's ``enclave_admission.rules.network`` judges them, with Kubernetes' ``cidr()`` library.

Per direction (``ingress``, ``egress``) each grant of ``spec.<direction>[]`` is an item: a rule without peers
grants every address (IPv4 and IPv6), an ``ipBlock`` peer its CIDR minus its ``except`` blocks; selector-only
peers grant no addresses. The direction's rules fold into one chain (last rule outermost, the last matching
allow or deny decides). A deny (or audit) hits a grant that overlaps its networks, an allow needs the grant
wholly inside them. On UPDATE a grant the old object made (same CIDR and excepts, as written) is not judged.

**Exactly, with excepts.** A rule's CIDRs are collapsed at compile time (:func:`~enclave_tenants.native.
celtext.networks`), so the networks are disjoint and no two are siblings. CIDR blocks nest or are disjoint,
so every question reduces to "is block X covered by a family F of blocks": it is when one member contains X,
or when the members inside X that no other member contains (the maximal ones, disjoint) add up to X, i.e. the
sum over them of 2^(128 - (prefix - prefix of X)) is 2^128 (Kraft's equality for a complete prefix code). CEL
has 64-bit integers only, so the sum is taken in four 32-bit limbs and carried: exact at any depth, where a
floating sum would call a block short of one address out of 2^128 covered. Then

* allow: ``C \\ E`` inside ``N`` when ``C`` is covered by ``N`` and ``E`` together;
* deny: ``C \\ E`` overlaps ``N`` when some network ``n`` overlapping ``C`` has ``n`` meet ``C`` (the smaller of the
  two) not covered by ``E``.

kube-apiserver refuses a CIDR with host bits, leading zeros, an IPv4-mapped address or an except block that is
not a strict subset of its CIDR before admission, so every value judged parses (``isCIDR`` guards the rest, as
the webhook skips what it cannot parse).

Cost: the maximal-member test is quadratic in a grant's except blocks. A grant with thousands of them can pass
kube-apiserver's CEL cost limit; the policy (failure policy Fail) then refuses the request where the webhook
might admit it (a difference that only ever refuses, and only the tenant's own object), and ``enclave test``'s
engine, which checks each expression's cost for 32-element inputs and parses to a depth of 32, cannot evaluate
it. So this area compiles only when asked (``compile_namespace(..., network_grants=True)``: the differential
test proves it against the webhook on kube-apiserver); by default network rules stay on the webhook
(:data:`enclave_tenants.native.compiler.NETWORK_ON_WEBHOOK`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from enclave_core.api.rules import AppliedRule
from enclave_tenants.native import celtext
from enclave_tenants.native.area import Area, Rule

DIRECTIONS: Final = {"ingress": "from", "egress": "to"}
_IS_POLICY: Final = "(request.resource.group == 'networking.k8s.io' && request.resource.resource == 'networkpolicies')"
_POWERS: Final = "[" + ", ".join(str(1 << bit) for bit in range(32)) + "]"
_LIMB: Final = 1 << 32


def _kraft(block: str) -> str:
    """CEL: the maximal blocks of ``G`` (CIDR strings, each strictly inside the cidr ``block``) cover ``block``:
    their sizes relative to it, 2^(128 - depth) each, add up to 2^128, summed in four carried 32-bit limbs."""
    depth = f"(cidr(g).prefixLength() - {block}.prefixLength())"
    maximal = "!G.exists(y, h, y != x && cidr(h).containsCIDR(cidr(g)) && (!cidr(g).containsCIDR(cidr(h)) || y < x))"
    bits = f"G.transformList(x, g, {maximal} ? 128 - {depth} : -1).filter(b, b >= 0)"
    limbs = f"[0, 1, 2, 3].map(q, D.filter(b, b / 32 == q).map(b, {_POWERS}[b % 32]).sum())"
    return (
        f"[{bits}].exists(D, [{limbs}].exists(l, [l[1] + l[0] / {_LIMB}].exists(t1, "
        f"[l[2] + t1 / {_LIMB}].exists(t2, [l[3] + t2 / {_LIMB}].exists(t3, l[0] % {_LIMB} == 0 && "
        f"t1 % {_LIMB} == 0 && t2 % {_LIMB} == 0 && t3 % {_LIMB} == 0 && t3 / {_LIMB} >= 1)))))"
    )


def covered(block: str, family: str) -> str:
    """CEL: every address of the cidr ``block`` is in a member of ``family`` (a list of CIDR strings)."""
    inside = f"{family}.filter(f, {block}.containsCIDR(cidr(f)) && !cidr(f).containsCIDR({block}))"
    return f"({family}.exists(f, cidr(f).containsCIDR({block})) || [{inside}].exists(G, {_kraft(block)}))"


def _inside(rule_networks: list[str]) -> str:
    """CEL: the grant ``C`` (cidr, ``E`` its parsed except blocks) lies wholly inside ``rule_networks``."""
    return covered("C", f"({celtext.list_literal(rule_networks)} + E)")


def _overlaps(rule_networks: list[str]) -> str:
    """CEL: the grant ``C`` minus ``E`` shares an address with ``rule_networks``."""
    meet = "(cidr(n).containsCIDR(C) ? C : cidr(n))"
    return (
        f"{celtext.list_literal(rule_networks)}.exists(n, (cidr(n).containsCIDR(C) || C.containsCIDR(cidr(n))) && "
        f"!{covered(meet, 'E')})"
    )


def _constant(rule_networks: list[str], allow: bool) -> bool:
    """The verdict on a peer-less grant (every address): constant per rule."""
    if allow:
        return {"0.0.0.0/0", "::/0"} <= set(rule_networks)
    return bool(rule_networks)


def _rule_networks(applied: AppliedRule, direction: str) -> list[str] | None:
    """The rule's collapsed networks for ``direction``, or None when it sets no constraint there (an empty or
    omitted list imposes nothing, as on the webhook)."""
    network = applied.enforce.network if applied.enforce else None
    policies = network.policies if network else None
    policy = getattr(policies, direction) if policies else None
    cidrs = (policy.cidrs if policy else None) or []
    if not cidrs:
        return None
    return celtext.networks(cidrs)


def governs(applied: AppliedRule) -> bool:
    """Whether the webhook reads the rule as a network rule (some direction has CIDRs)."""
    return any(_rule_networks(applied, direction) is not None for direction in DIRECTIONS)


def _messages(rule: Rule, direction: str, path: str, shown: str) -> tuple[str, str]:
    """(refusal of an allow, hit of a deny or audit), CEL strings of the webhook's messages."""
    allows = celtext.lit(f"{rule.origin} allows {direction} grants only inside its CIDRs; ") + f" + {path}"
    verb = "audits" if rule.action == "audit" else "denies"
    hits = celtext.lit(f"{rule.origin} {verb} {direction} grants overlapping its CIDRs: ") + f" + {path}"
    return f"{allows} + ' grants ' + {shown}", f"{hits} + ' grants ' + {shown}"


def _grants(direction: str, obj: str, judge_all: str, judge_block: str) -> str:
    """CEL list over the grants of ``obj`` in ``direction``: ``judge_all`` for a peer-less rule (``i`` its
    index), ``judge_block`` for an ipBlock peer (``i``, ``j``, the peer ``p``), in the webhook's order."""
    peers = DIRECTIONS[direction]
    blocks = (
        f"r.{peers}.transformList(j, p, has(p.ipBlock) && p.ipBlock.?cidr.orValue('') != '' && "
        f"isCIDR(p.ipBlock.cidr) ? [{judge_block}] : []).flatten()"
    )
    return (
        f"{obj}.?spec.?{direction}.orValue([]).transformList(i, r, "
        f"size(r.?{peers}.orValue([])) == 0 ? [{judge_all}] : {blocks}).flatten()"
    )


_SHOWN: Final = (
    "(p.ipBlock.cidr + (size(p.ipBlock.?except.orValue([])) > 0 ? ' except ' + p.ipBlock.except.join(', ') : ''))"
)
_EVERY: Final = "'every address (no peers)'"


def compile_area(rules: Sequence[tuple[AppliedRule, Rule | None]]) -> Area:
    """The network rules of a namespace (all its rules, in order) to policy text, or to the webhook."""
    area = Area()
    governing = [(applied, rule) for applied, rule in rules if governs(applied)]
    if not governing:
        return area
    compiled = [(rule, applied) for applied, rule in governing if rule is not None]
    on_webhook = [celtext.origin_text(applied) for applied, rule in governing if rule is None]
    if on_webhook:
        why = f"{on_webhook[0]} also judges NetworkPolicy grants and stays on the webhook (the last match decides)"
        area.placements += [(rule.origin, "webhook", why) for rule, _ in compiled]
        return area
    area.resources.add("networkpolicies.networking.k8s.io")
    for rule, _ in compiled:
        area.asked[rule.index] = _IS_POLICY
    path_all = "'spec." + "{direction}[' + string(i) + ']'"
    for direction, peers in DIRECTIONS.items():
        directed = [
            (rule, nets) for rule, applied in compiled if (nets := _rule_networks(applied, direction)) is not None
        ]
        if not directed:
            continue
        path_every = path_all.format(direction=direction)
        path_block = path_every[:-1] + f".{peers}[' + string(j) + '].ipBlock'"
        old_name = f"n_{direction}_old"
        old = (
            f"request.operation == 'UPDATE' && oldObject != null ? "
            f"{_grants(direction, 'oldObject', _EVERY, _SHOWN)} : []"
        )
        area.variables.append({"name": old_name, "expression": f"{_IS_POLICY} ? ({old}) : []"})
        skip_every = f"{_EVERY} in variables.{old_name}"
        skip_block = f"{_SHOWN} in variables.{old_name}"
        every_links = []
        block_links = []
        for rule, nets in directed:
            if rule.action == "audit":
                continue
            allow = rule.action == "allow"
            refused_every, hit_every = _messages(rule, direction, path_every, _EVERY)
            refused_block, hit_block = _messages(rule, direction, path_block, _SHOWN)
            if allow:
                every_links.append((rule.variable, "''" if _constant(nets, True) else refused_every))
                block_links.append((rule.variable, f"{_inside(nets)} ? '' : {refused_block}"))
            else:
                if _constant(nets, False):
                    every_links.append((rule.variable, hit_every))
                block_links.append((f"{rule.variable} && {_overlaps(nets)}", hit_block))
        if every_links or block_links:
            every = f"{skip_every} ? '' : {celtext.chain(every_links)}"
            block = f"{skip_block} ? '' : {_bind_block(celtext.chain(block_links))}"
            listed = _grants(direction, "object", every, block)
            area.refuse_listed(f"n_{direction}", f"{_IS_POLICY} ? {listed}.filter(m, m != '') : []")
        for rule, nets in directed:
            if rule.action != "audit":
                continue
            _, hit_every = _messages(rule, direction, path_every, _EVERY)
            _, hit_block = _messages(rule, direction, path_block, _SHOWN)
            every = f"{skip_every} || !{str(_constant(nets, False)).lower()} ? '' : {hit_every}"
            block = f"{skip_block} ? '' : {_bind_block(f'{_overlaps(nets)} ? {hit_block} : {chr(39) * 2}')}"
            listed = f"{_grants(direction, 'object', every, block)}.filter(m, m != '')"
            area.audit_listed(f"{rule.variable} && {_IS_POLICY}", listed)
    area.placements += [(rule.origin, "native", "NetworkPolicy grants compile to the policy") for rule, _ in compiled]
    return area


def _bind_block(expression: str) -> str:
    """``expression`` with ``C`` bound to the peer's masked cidr and ``E`` to its except blocks that parse."""
    excepts = "p.ipBlock.?except.orValue([]).filter(e, isCIDR(e))"
    return f"[cidr(p.ipBlock.cidr).masked()].map(C, [{excepts}].map(E, {expression})[0])[0]"

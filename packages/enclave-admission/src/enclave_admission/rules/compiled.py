"""A namespace's rules compiled for deciding: done once per Rules snapshot and namespace, never per request.

Everything a request needs is prepared here: audience sets, CEL programs (through the facade, which caches
by text), value matchers, address ranges, and for each rule the areas it speaks about, so a request skips a
rule that has nothing to say about its kind without evaluating its audience or conditions.

A rule that cannot work (a condition that does not compile, a bad regular expression or CIDR) is refused at
the API; one that got in anyway (the webhook was down) is kept as *broken*: whenever it would apply it
rejects the request with the reason, exactly like a condition that errors (fail closed), and never crashes
the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from enclave_admission.rules import matching
from enclave_admission.rules.matching import Grant, Matcher
from enclave_core import cel
from enclave_core.api.rules import AppliedRule, KindScope, MetadataMutation, MetadataRule, Mutation, WorkloadsPolicy
from enclave_core.patterns import PatternError, compile_pattern
from enclave_core.snapshots.rules import BudgetView, NamespaceRules
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

Action = Literal["allow", "deny", "audit"]


def kind_scope(kinds: list[str], api_groups: list[str] | None) -> KindScope:
    return KindScope.of(kinds, api_groups)


@dataclass(frozen=True, slots=True)
class KeyRule:
    """One label or annotation key of a metadata rule."""

    part: Literal["labels", "annotations"]
    key: str
    default: str | None
    managed: str | None
    required: bool
    values: tuple[Matcher, ...]


@dataclass(frozen=True, slots=True)
class MetadataPart:
    scope: KindScope
    keys: tuple[KeyRule, ...]


@dataclass(frozen=True, slots=True)
class ServicesPart:
    types: frozenset[str]
    external_ips: Grant | None
    """None: no externalIPs constraint; an empty grant: the rule's list is empty."""
    external_names: tuple[Matcher, ...]
    load_balancers: Grant | None
    node_ports: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class IngressPart:
    types: frozenset[str]
    """Empty: every type."""
    hostnames: tuple[Matcher, ...]


@dataclass(frozen=True, slots=True)
class NetworkPart:
    ingress: Grant | None
    egress: Grant | None


@dataclass(frozen=True, slots=True)
class StoragePart:
    selectors: tuple[tuple[str, Any], ...]
    """(entry name, LabelSelector) per volumes[] entry."""


@dataclass(frozen=True, slots=True)
class MutationPart:
    name: str
    metadata: MetadataMutation | None
    scope: KindScope | None
    workloads: Any


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """One rule of a namespace, ready to be asked about a request."""

    index: int
    origin: str
    """How messages name the rule: ``Tenant solar spec.rules[0]`` or ``RuleStatus ns/default spec[1]``."""
    action: Action
    everyone: bool
    users: frozenset[str]
    groups: frozenset[str]
    custom: tuple[cel.Program[bool], ...]
    conditions: tuple[cel.Program[bool], ...]
    condition_names: tuple[str, ...]
    broken: str
    """Why the rule cannot be evaluated (empty when it can): it then rejects whatever it would apply to."""
    metadata: tuple[MetadataPart, ...] = ()
    services: ServicesPart | None = None
    ingress: IngressPart | None = None
    network: NetworkPart | None = None
    storage: StoragePart | None = None
    workloads: WorkloadsPolicy | None = None
    mutations: tuple[MutationPart, ...] = ()
    source: AppliedRule | None = field(default=None, compare=False)


def origin_text(rule: AppliedRule) -> str:
    origin = rule.origin
    if origin.kind == "Tenant":
        return f"Tenant {origin.name} spec.rules[{origin.index}]"
    return f"RuleStatus {origin.namespace}/{origin.name} spec[{origin.index}]"


def _metadata(rules: list[MetadataRule] | None) -> tuple[MetadataPart, ...]:
    parts = []
    for rule in rules or ():
        keys = []
        for part_name, entries in (("labels", rule.labels), ("annotations", rule.annotations)):
            for key, value in (entries or {}).items():
                keys.append(
                    KeyRule(
                        "labels" if part_name == "labels" else "annotations",
                        key,
                        value.default,
                        value.managed,
                        value.required,
                        matching.matchers(value.values),
                    )
                )
        parts.append(MetadataPart(kind_scope(rule.kinds, rule.api_groups), tuple(keys)))
    return tuple(parts)


def _mutations(mutations: list[Mutation] | None) -> tuple[MutationPart, ...]:
    found = []
    for index, mutation in enumerate(mutations or ()):
        name = mutation.name or f"mutate[{index}]"
        scope = kind_scope(mutation.metadata.kinds, mutation.metadata.api_groups) if mutation.metadata else None
        found.append(MutationPart(name, mutation.metadata, scope, mutation.workloads))
    return tuple(found)


def compile_rule(index: int, rule: AppliedRule) -> CompiledRule:
    origin = origin_text(rule)
    enforce = rule.enforce
    action: Action = enforce.action if enforce is not None else "deny"
    audience = rule.audience or []
    users = frozenset(
        (a.name if a.kind == "User" or a.name.startswith(SERVICE_ACCOUNT_PREFIX) else SERVICE_ACCOUNT_PREFIX + a.name)
        for a in audience
        if a.kind in ("User", "ServiceAccount")
    )
    groups = frozenset(a.name for a in audience if a.kind == "Group")
    problems: list[str] = []
    custom: list[cel.Program[bool]] = []
    facade = cel.default()
    for position, entry in enumerate(audience):
        if entry.kind == "Custom":
            try:
                custom.append(facade.condition(entry.name, cel.RULE_AUDIENCE_ENV))
            except cel.CelCompileError as err:
                problems.append(f"audience[{position}].name: {err}")
    conditions: list[cel.Program[bool]] = []
    names: list[str] = []
    for position, condition in enumerate((enforce.conditions if enforce else None) or ()):
        try:
            conditions.append(facade.condition(condition.expression, cel.RULE_CONDITION_ENV))
            names.append(condition.name or f"conditions[{position}]")
        except cel.CelCompileError as err:
            problems.append(f"enforce.conditions[{position}]: {err}")
    try:
        areas = _areas(rule)
    except ValueError as err:
        problems.append(str(err))
        areas = {}
    broken = "; ".join(problems)
    return CompiledRule(
        index=index,
        origin=origin,
        action=action,
        everyone=not audience,
        users=users,
        groups=groups,
        custom=tuple(custom),
        conditions=tuple(conditions),
        condition_names=tuple(names),
        broken=broken,
        source=rule,
        **areas,
    )


def _areas(rule: AppliedRule) -> dict[str, Any]:
    areas: dict[str, Any] = {"mutations": _mutations(rule.mutate)}
    enforce = rule.enforce
    if enforce is None:
        return areas
    areas["metadata"] = _metadata(enforce.metadata)
    services = enforce.services
    if services is not None:
        ips = services.external_i_ps
        balancers = services.load_balancers
        areas["services"] = ServicesPart(
            types=frozenset(services.types or ()),
            external_ips=matching.ranges(ips.cidrs or ()) if ips is not None else None,
            external_names=matching.matchers(services.external_names.hostnames if services.external_names else None),
            load_balancers=matching.ranges(balancers.cidrs) if balancers is not None and balancers.cidrs else None,
            node_ports=tuple(
                (port.from_, port.to) for port in (services.node_ports.ports if services.node_ports else None) or ()
            ),
        )
    if enforce.ingress is not None:
        areas["ingress"] = IngressPart(
            frozenset(enforce.ingress.types or ()), matching.matchers(enforce.ingress.hostnames)
        )
    policies = enforce.network.policies if enforce.network else None
    if policies is not None:
        ingress = policies.ingress.cidrs if policies.ingress else None
        egress = policies.egress.cidrs if policies.egress else None
        if ingress or egress:
            areas["network"] = NetworkPart(
                matching.ranges(ingress) if ingress else None, matching.ranges(egress) if egress else None
            )
    if enforce.storage is not None and enforce.storage.volumes is not None:
        areas["storage"] = StoragePart(
            tuple((entry.name or f"volumes[{i}]", entry.selector) for i, entry in enumerate(enforce.storage.volumes))
        )
    if enforce.workloads is not None:
        workloads = enforce.workloads
        for entry in workloads.registries or ():
            try:
                compile_pattern(entry.url)
            except PatternError as err:
                raise ValueError(f"registries url {entry.url!r} does not compile: {err.reason}") from err
        placement = workloads.placement
        matching.matchers(workloads.schedulers)  # raise for a broken regular expression
        if placement is not None:
            for values in (placement.schedulers, placement.priority_classes, placement.runtime_classes):
                matching.matchers(values)
        if workloads.security is not None:
            matching.matchers(workloads.security.host_paths)
        areas["workloads"] = workloads
    return areas


MAX_CACHED_KINDS = 256
"""Bound of the per-kind memo of a namespace's rules (a cluster has a few hundred kinds at most)."""
MAX_CACHED_AUDIENCES = 64
"""Bound of the per-applicability memo of a kind's metadata keys."""
MAX_CACHED_VALUES = 256
"""Bound of the per-value memo of one key's findings (:attr:`KeyGroup.verdicts`)."""


class KeyGroup:
    """One label or annotation key and the (rule, key rule) pairs that apply to it, in rule order, with what
    every request would otherwise work out again: its field path, its effective managed value (the last
    one) and whether any allow rule governs it (without one, an absent key has nothing to answer)."""

    __slots__ = ("governed", "managed", "pairs", "path", "verdicts")

    def __init__(self, part: str, key: str, pairs: tuple[tuple[CompiledRule, KeyRule], ...]) -> None:
        self.pairs = pairs
        self.verdicts: dict[str | None, tuple[Any, ...]] = {}
        """Per value of the key: the findings its rules settle on (engine ``Finding`` values). They depend on
        the value alone, and a key has few distinct values (``app=web``), so each is worked out once per
        snapshot (bounded by :data:`MAX_CACHED_VALUES`)."""
        self.path = f"metadata.{part}[{key!r}]"
        managed: tuple[str, CompiledRule] | None = None
        for rule, key_rule in pairs:
            if key_rule.managed is not None:
                managed = (key_rule.managed, rule)
        self.managed = managed
        self.governed = any(rule.action == "allow" for rule, _ in pairs)


MetadataKeys = dict[tuple[str, str], KeyGroup]
"""Per (labels|annotations, key): the key's group of applicable rules."""


class MetadataScope:
    """The metadata rules of one namespace that speak about one kind, and their keys grouped per label or
    annotation for each combination of those rules that applies to a request (usually one or two: rules
    with audiences or conditions split it)."""

    __slots__ = ("by_applicable", "rules")

    def __init__(self, rules: tuple[tuple[CompiledRule, tuple[KeyRule, ...]], ...]) -> None:
        self.rules = rules
        self.by_applicable: dict[tuple[int, ...], MetadataKeys] = {}

    def keys(self, applicable: tuple[int, ...]) -> MetadataKeys:
        """The keys of the rules at positions ``applicable`` (of :attr:`rules`); shared, never to be changed."""
        found = self.by_applicable.get(applicable)
        if found is None:
            grouped: dict[tuple[str, str], list[tuple[CompiledRule, KeyRule]]] = {}
            for position in applicable:
                rule, keys = self.rules[position]
                for key in keys:
                    grouped.setdefault((key.part, key.key), []).append((rule, key))
            found = {(part, key): KeyGroup(part, key, tuple(pairs)) for (part, key), pairs in grouped.items()}
            if len(self.by_applicable) >= MAX_CACHED_AUDIENCES:
                self.by_applicable.clear()
            self.by_applicable[applicable] = found
        return found


@dataclass(frozen=True, slots=True)
class NamespaceSet:
    """A namespace's compiled rules and which of them speak about each area (for skipping quickly)."""

    namespace: str
    tenant: str
    rules: tuple[CompiledRule, ...]
    metadata: tuple[CompiledRule, ...]
    managed: bool
    """Some metadata rule has a default or managed value (the mutating hook has work)."""
    services: tuple[CompiledRule, ...]
    ingress: tuple[CompiledRule, ...]
    network: tuple[CompiledRule, ...]
    storage: tuple[CompiledRule, ...]
    workloads: tuple[CompiledRule, ...]
    mutations: tuple[CompiledRule, ...]
    conditional: tuple[CompiledRule, ...] = ()
    """Rules with conditions (and not broken), in order: their conditions are evaluated together."""
    programs: tuple[cel.Program[bool], ...] = ()
    """Every condition of ``conditional``, flattened in the same order: one evaluation per request shares the
    conversion of the object between all of them."""
    mutating: tuple[CompiledRule, ...] = ()
    """The rules the mutating hook asks about (``mutate[]`` or managed/default metadata) that have conditions."""
    mutating_programs: tuple[cel.Program[bool], ...] = ()
    """Their conditions, flattened: the mutating hook evaluates these, not every rule's (see ``programs``)."""
    mutating_batch: cel.ConditionBatch | None = None
    """``mutating_programs`` folded like ``batch``."""
    budgets: tuple[BudgetView, ...] = ()
    """The namespace's PodDisruptionBudgets (only when a rule requires coverage; see the Rules snapshot)."""
    batch: cel.ConditionBatch | None = None
    """``programs`` folded for evaluation together: one runtime call per request for all of them."""
    masks: dict[int, int] = field(default_factory=dict, compare=False)
    """Per rule of ``conditional``: its conditions' bits in ``batch`` (see ``ConditionBatch.bits``)."""
    mutating_masks: dict[int, int] = field(default_factory=dict, compare=False)
    """The same for ``mutating`` in ``mutating_batch``."""
    reads: frozenset[str] = frozenset()
    """The CEL variables any condition of the namespace references: a request builds only those (``request``
    and ``now`` cost a dict and a clock read that most conditions never look at)."""
    metadata_scopes: dict[tuple[str, str], MetadataScope] = field(default_factory=dict, compare=False)
    """Per (kind, apiVersion): the metadata rules that speak about it, filled on first use (see
    :meth:`metadata_scope`)."""
    plans: dict[str, Any] = field(default_factory=dict, compare=False)
    """Per area module: what it compiles from these rules on first use and keeps for the snapshot's life (the
    workload rules' checks per kind and merged workload mutations: ``workloads.plan.Plans``)."""

    def metadata_scope(self, kind: str, api_version: str) -> MetadataScope:
        """The metadata rules whose kinds match ``kind``/``api_version``, with their keys: worked out once per
        kind for the snapshot, not per request."""
        found = self.metadata_scopes.get((kind, api_version))
        if found is None:
            rules = []
            for rule in self.metadata:
                parts = [part for part in rule.metadata if part.scope.matches(kind, api_version)]
                if parts:
                    rules.append((rule, tuple(key for part in parts for key in part.keys)))
            found = MetadataScope(tuple(rules))
            if len(self.metadata_scopes) >= MAX_CACHED_KINDS:
                self.metadata_scopes.clear()
            self.metadata_scopes[(kind, api_version)] = found
        return found


def compile_namespace(item: NamespaceRules, budgets: tuple[BudgetView, ...] = ()) -> NamespaceSet:
    rules = tuple(compile_rule(index, rule) for index, rule in enumerate(item.rules))
    mutating = tuple(
        r
        for r in rules
        if r.conditions
        and not r.broken
        and (r.mutations or any(k.default is not None or k.managed is not None for p in r.metadata for k in p.keys))
    )
    programs = tuple(p for r in rules if r.conditions and not r.broken for p in r.conditions)
    mutating_programs = tuple(p for r in mutating for p in r.conditions)
    return NamespaceSet(
        namespace=item.namespace,
        tenant=item.tenant,
        rules=rules,
        metadata=tuple(r for r in rules if r.metadata or (r.broken and r.source and r.source.enforce)),
        managed=any(k.default is not None or k.managed is not None for r in rules for p in r.metadata for k in p.keys),
        services=tuple(r for r in rules if r.services is not None),
        ingress=tuple(r for r in rules if r.ingress is not None),
        network=tuple(r for r in rules if r.network is not None),
        storage=tuple(r for r in rules if r.storage is not None),
        workloads=tuple(r for r in rules if r.workloads is not None),
        mutations=tuple(r for r in rules if r.mutations),
        conditional=tuple(r for r in rules if r.conditions and not r.broken),
        programs=programs,
        batch=cel.default().condition_batch(programs) if programs else None,
        mutating=mutating,
        mutating_programs=mutating_programs,
        mutating_batch=cel.default().condition_batch(mutating_programs) if mutating_programs else None,
        budgets=budgets,
        reads=frozenset(name for r in rules for p in r.conditions for name in p.reads),
        masks=_masks(tuple(r for r in rules if r.conditions and not r.broken)),
        mutating_masks=_masks(mutating),
    )


def _masks(rules: tuple[CompiledRule, ...]) -> dict[int, int]:
    """Rule index -> the bits of its conditions among all of ``rules``' conditions, flattened in order."""
    found = {}
    position = 0
    for rule in rules:
        count = len(rule.conditions)
        found[rule.index] = ((1 << count) - 1) << position
        position += count
    return found


EMPTY = NamespaceSet("", "", (), (), False, (), (), (), (), (), ())

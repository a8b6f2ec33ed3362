"""The workload rules of a namespace compiled once per Rules snapshot (per target kind: matchers, parsed
bounds, refused features), and the one walk of a request's Pod spec they run over. A check here only decides
whether an item yields a finding; the finding itself is worded by :mod:`judges`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from enclave_admission.rules import matching
from enclave_admission.rules.compiled import CompiledRule, NamespaceSet
from enclave_admission.rules.engine import Item, Review
from enclave_admission.rules.workloads.budgets import REPLICATED
from enclave_admission.rules.workloads.items import (
    Finding,
    View,
    all_items,
    capability_name,
    container_security,
    path_prefixes,
    placement_items,
    pod_security,
)
from enclave_admission.rules.workloads.judges import SECURITY_FLAGS, compiled_pattern, judge_item, tolerates
from enclave_admission.rules.workloads.mutation import MutationPlan, mutated_fields
from enclave_admission.rules.workloads.podspec import (
    CONTAINER_LISTS,
    as_map,
    default_pull_policy,
    has_policies,
    nanos,
    normalize_image,
    qos_of,
    targets_of,
)
from enclave_core.api.rules import Toleration, WorkloadMutation, WorkloadsPolicy
from enclave_core.patterns import Pattern

MAX_MERGED_MUTATIONS = 64
"""Bound of the memo of merged workload mutations per combination of applicable rules (usually one or two)."""


class Plans:
    """A namespace's workload rules compiled for one Rules snapshot (kept in ``NamespaceSet.plans``): the
    checks of the rules that target each kind, and the workload mutations merged per combination of rules
    that apply."""

    __slots__ = ("_kinds", "merged", "mutating", "rules")

    def __init__(self, rules: NamespaceSet) -> None:
        self.rules = rules
        self._kinds: dict[str, KindPlan] = {}
        mutating: list[tuple[CompiledRule, tuple[tuple[str, WorkloadMutation], ...]]] = []
        for rule in rules.mutations:
            entries: list[tuple[str, WorkloadMutation]] = []
            for part in rule.mutations:
                if isinstance(part.workloads, WorkloadMutation):
                    entries.append((part.name, part.workloads))
            if entries:
                mutating.append((rule, tuple(entries)))
        self.mutating = tuple(mutating)
        """The rules with workload mutations, with those entries (name, mutation), in order."""
        self.merged: dict[tuple[int, ...], MutationPlan] = {}

    def kind(self, kind: str) -> KindPlan:
        found = self._kinds.get(kind)
        if found is None:
            found = self._kinds[kind] = KindPlan(self.rules, kind)
        return found

    def mutations(self, applicable: tuple[int, ...]) -> MutationPlan:
        """The entries of the rules at positions ``applicable`` (of :attr:`mutating`) merged in order."""
        found = self.merged.get(applicable)
        if found is None:
            if len(self.merged) >= MAX_MERGED_MUTATIONS:
                self.merged.clear()
            found = self.merged[applicable] = MutationPlan([self.mutating[i] for i in applicable])
        return found


def plans_of(rules: NamespaceSet) -> Plans:
    found = rules.plans.get("workloads")
    if found is None:
        found = rules.plans["workloads"] = Plans(rules)
    plans: Plans = found
    return plans


class KindPlan:
    """The workload rules that target one kind, in rule order, and what the walk of a spec must read for them."""

    __slots__ = ("registries", "resources", "rules", "security")

    def __init__(self, rules: NamespaceSet, kind: str) -> None:
        found = []
        for rule in rules.workloads:
            policy = rule.workloads
            if isinstance(policy, WorkloadsPolicy) and kind in targets_of(policy):
                found.append(RulePlan(rule, policy, kind))
        self.rules = tuple(found)
        self.registries = any(plan.registries is not None for plan in found)
        self.resources = any(plan.bounds is not None or plan.qos is not None for plan in found)
        self.security = any(plan.security for plan in found)


_Bounds = tuple[tuple[bool, tuple[str, ...], tuple[tuple[str, int | None, int | None], ...]], ...]
"""Per requests/limits: (of requests, required names, (name, min, max) per name with a min or a max, in
nano-units; None when the rule has none or it does not parse)."""


class RulePlan:
    """One workload rule's checks for one target kind, compiled once per Rules snapshot from its policy: the
    matchers, parsed bounds and refused security features a request would otherwise work out per item. A check
    only decides whether an item yields a finding (most do not); the finding of one that does is made by the
    item's judge (:func:`judge_item`), the one source of every message."""

    __slots__ = (
        "allow",
        "bounds",
        "capabilities",
        "coverage",
        "flags",
        "host_paths",
        "itself",
        "lists",
        "node_keys",
        "placement",
        "policy",
        "priority",
        "qos",
        "registries",
        "rule",
        "runtime",
        "scheduler",
        "security",
        "tolerations",
        "verdicts",
    )

    def __init__(self, rule: CompiledRule, policy: WorkloadsPolicy, kind: str) -> None:
        self.rule, self.policy = rule, policy
        self.lists: tuple[str, ...] = targets_of(policy)[kind]
        self.allow = rule.action == "allow"
        """What a check's ``inside`` must be for the item to yield nothing (an allow governs, deny and audit
        match): a finding comes of ``inside != allow``."""
        self.itself = not has_policies(policy)
        budgets = policy.disruption_budgets
        self.coverage = budgets is not None and budgets.required and kind in REPLICATED
        self.qos: frozenset[str] | None = frozenset(policy.qos_classes) if policy.qos_classes else None
        self.registries: tuple[tuple[Pattern, tuple[str, ...]], ...] | None = None
        if policy.registries:
            self.registries = tuple(
                (compiled_pattern(entry.url), tuple(entry.pull_policies or ())) for entry in policy.registries
            )
        self.verdicts: dict[str, bool] = {}
        """Normalised reference and pull policy (:attr:`Box.key`) -> within the registries: Pods repeat a
        handful of images."""
        self.bounds: _Bounds | None = _bounds(policy) if policy.resources else None
        security = policy.security if policy.security else None
        self.security = security is not None
        flags: set[str] = set()
        self.host_paths: tuple[matching.Matcher, ...] | None = None
        self.capabilities: frozenset[str] | None = None
        if security is not None:
            for what, attribute in SECURITY_FLAGS.items():
                setting = getattr(security, attribute)
                if setting is not None and bool(setting) != self.allow:
                    flags.add(what)
            if security.host_paths is not None:
                self.host_paths = matching.matchers(security.host_paths)
            if security.capabilities is not None:
                self.capabilities = frozenset(capability_name(name) for name in security.capabilities)
        self.flags = frozenset(flags)
        """The security features (privileged, hostPorts, ...) that yield a finding wherever they are used."""
        placement = policy.placement
        self.placement = placement is not None or bool(policy.schedulers)
        listed = [*(placement.schedulers if placement and placement.schedulers else []), *(policy.schedulers or [])]
        self.scheduler = matching.matchers(listed) if listed else None
        self.priority: tuple[matching.Matcher, ...] | None = None
        self.runtime: tuple[matching.Matcher, ...] | None = None
        self.node_keys: frozenset[str] | None = None
        self.tolerations: tuple[Toleration, ...] | None = None
        if placement is not None:
            if placement.priority_classes:
                self.priority = matching.matchers(placement.priority_classes)
            if placement.runtime_classes:
                self.runtime = matching.matchers(placement.runtime_classes)
            if placement.node_selector_keys:
                self.node_keys = frozenset(placement.node_selector_keys)
            if placement.tolerations:
                self.tolerations = tuple(placement.tolerations)

    def judge(self, judging: Judging) -> None:
        """This rule's findings on the request, in the order of its items: QoS, images, resources, security,
        placement."""
        facts, allow, lists = judging.facts, self.allow, self.lists
        if self.qos is not None:
            value = facts.qos()
            if (value in self.qos) != allow:
                judging.emit(self, Finding("qos", facts.base, value))
        if self.registries is not None:
            for box in facts.boxes:
                if box.list_name in lists and self._registered(box) != allow:
                    judging.emit(self, box.registry())
        bounds = self.bounds
        if bounds is not None:
            for box in facts.boxes:
                # Kubernetes forbids resources on ephemeral containers: a bound would only block `kubectl debug`
                skip = box.list_name not in lists or box.list_name == "ephemeralContainers"
                if not skip and _outside(bounds, box.requests, box.limits):
                    judging.emit(self, box.resources())
        if self.security:
            for found in facts.pod_security():
                if self._security_finding(found):
                    judging.emit(self, found)
            for box in facts.boxes:
                if box.list_name in lists:
                    for found in box.security:
                        if self._security_finding(found):
                            judging.emit(self, found)
        if self.placement:
            for found in facts.placement():
                if self._placement_finding(found):
                    judging.emit(self, found)

    def _registered(self, box: Box) -> bool:
        known = self.verdicts.get(box.key)
        if known is None:
            known = False
            assert self.registries is not None
            reference, pull = box.reference, box.pull
            for pattern, pulls in self.registries:
                if pattern.match(reference) and (not pulls or not pull or pull in pulls):
                    known = True
                    break
            if len(self.verdicts) >= 1024:
                self.verdicts.clear()
            self.verdicts[box.key] = known
        return known

    def _security_finding(self, found: Finding) -> bool:
        what = found.what
        if what in self.flags:
            return True
        if what == "hostPaths":
            compiled = self.host_paths
            if compiled is None:
                return False
            # Exact values are directory prefixes (at a "/" boundary); expressions match the whole normalised path.
            value = found.value
            inside = any(m.regex is not None and m.matches(value) for m in compiled) or any(
                prefix in m.exact for prefix in path_prefixes(value) for m in compiled
            )
            return inside != self.allow
        if what == "capabilities":
            listed = self.capabilities
            return listed is not None and (found.value in listed or "ALL" in listed) != self.allow
        return False

    def _placement_finding(self, found: Finding) -> bool:
        what, value = found.what, found.value
        if what == "scheduler":
            return self.scheduler is not None and matching.match_any(self.scheduler, value) != self.allow
        if what == "priority":
            return self.priority is not None and matching.match_any(self.priority, value) != self.allow
        if what == "runtime":
            return self.runtime is not None and matching.match_any(self.runtime, value) != self.allow
        if what == "nodeSelector":
            return self.node_keys is not None and (value in self.node_keys) != self.allow
        if what == "toleration" and self.tolerations is not None:
            inside = any(tolerates(entry, found.data) for entry in self.tolerations)
            return inside != self.allow
        return False


def _bounds(policy: WorkloadsPolicy) -> _Bounds:
    resources = policy.resources
    assert resources is not None
    found = []
    for part, limit in (("requests", resources.requests), ("limits", resources.limits)):
        if limit is None:
            continue
        lows, highs = limit.min or {}, limit.max or {}
        ranges = []
        for name in dict.fromkeys([*lows, *highs]):
            low = nanos(lows[name]) if name in lows else None
            high = nanos(highs[name]) if name in highs else None
            ranges.append((name, low, high))
        found.append((part == "requests", tuple(limit.required or ()), tuple(ranges)))
    return tuple(found)


def _outside(bounds: _Bounds, requests: Mapping[str, Any], limits: Mapping[str, Any]) -> bool:
    """Whether a container (its declared requests and limits) is outside a rule's resource bounds: what
    :func:`_resources` lists the problems of, with requests read as stored (a limit stands for a missing
    request)."""
    for of_requests, required, ranges in bounds:
        declared = requests if of_requests else limits
        for name in required:
            if name not in declared and (not of_requests or name not in limits):
                return True
        for name, low, high in ranges:
            if name in declared:
                have = nanos(declared[name])
            elif of_requests and name in limits:
                have = nanos(limits[name])
            else:
                continue
            if have is None or (low is not None and have < low) or (high is not None and have > high):
                return True
    return False


class Box:
    """One container of a spec as the rules read it: its fields read once per request, in one walk."""

    __slots__ = (
        "body",
        "image",
        "key",
        "limits",
        "list_name",
        "path",
        "pull",
        "reference",
        "requests",
        "security",
        "suspect",
        "written_pull",
    )

    def __init__(self, list_name: str, index: int, body: dict[str, Any], base: str, plan: KindPlan) -> None:
        self.list_name, self.body = list_name, body
        self.path = path = f"{base}.{list_name}[{index}]"
        image = body.get("image")
        resources = body.get("resources")
        context = body.get("securityContext")
        ports = body.get("ports")
        suspect = (
            (image is not None and not isinstance(image, str))
            or (resources is not None and not isinstance(resources, dict))
            or (context is not None and not isinstance(context, dict))
            or (ports is not None and not isinstance(ports, list))
        )
        stored = as_map(resources)
        requests, limits = stored.get("requests"), stored.get("limits")
        if (requests is not None and not isinstance(requests, dict)) or (
            limits is not None and not isinstance(limits, dict)
        ):
            suspect = True
        capabilities = as_map(context).get("capabilities")
        if capabilities is not None and not isinstance(capabilities, dict):
            suspect = True
        added = as_map(capabilities).get("add")
        if added is not None and not isinstance(added, list):
            suspect = True
        self.suspect = suspect
        """A field of the wrong JSON type: :func:`shape` says which (the request is then not judged)."""
        self.image = str(image or "")
        self.written_pull = str(body.get("imagePullPolicy") or "")
        self.reference = self.pull = self.key = ""
        if plan.registries:
            self.reference = normalize_image(self.image)
            self.pull = self.written_pull or default_pull_policy(self.image)
            self.key = f"{self.reference}\x00{self.pull}"
        self.requests: dict[str, Any] = {}
        self.limits: dict[str, Any] = {}
        if plan.resources:
            self.requests, self.limits = as_map(requests), as_map(limits)
        self.security: list[Finding] = container_security(body, path) if plan.security else []

    def registry(self) -> Finding:
        return Finding("registry", f"{self.path}.image", f"{self.image}\x00{self.written_pull}")

    def resources(self) -> Finding:
        resources = as_map(self.body.get("resources"))
        return Finding("resources", f"{self.path}.resources", repr(sorted(resources.items())), resources)


_SPEC_LISTS: Final = (*CONTAINER_LISTS, "volumes", "tolerations")


class Facts:
    """One Pod spec of a request read once for every rule: its containers (:class:`Box`) in one walk, and on
    first use its QoS class, Pod-level security items and placement items."""

    __slots__ = ("_placement", "_pod_security", "_qos", "base", "boxes", "spec", "suspect")

    def __init__(self, spec: dict[str, Any], base: str, plan: KindPlan) -> None:
        self.spec, self.base = spec, base
        suspect = False
        for name in _SPEC_LISTS:
            value = spec.get(name)
            if value is not None and not isinstance(value, list):
                suspect = True
        selector = spec.get("nodeSelector")
        if selector is not None and not isinstance(selector, dict):
            suspect = True
        boxes: list[Box] = []
        for list_name in CONTAINER_LISTS:
            entries = spec.get(list_name)
            if not isinstance(entries, list):
                continue
            for index, body in enumerate(entries):
                if not isinstance(body, dict):
                    suspect = True
                    continue
                box = Box(list_name, index, body, base, plan)
                suspect = suspect or box.suspect
                boxes.append(box)
        self.boxes = boxes
        self.suspect = suspect
        self._qos = ""
        self._pod_security: list[Finding] | None = None
        self._placement: list[Finding] | None = None

    def qos(self) -> str:
        if not self._qos:
            pod_level = as_map(self.spec.get("resources"))
            if pod_level:
                self._qos = qos_of([(as_map(pod_level.get("requests")), as_map(pod_level.get("limits")))], True)
            else:
                sources = [(box.requests, box.limits) for box in self.boxes if box.list_name != "ephemeralContainers"]
                self._qos = qos_of(sources, False)
        return self._qos

    def pod_security(self) -> list[Finding]:
        found = self._pod_security
        if found is None:
            found = self._pod_security = pod_security(self.spec, self.base)
        return found

    def placement(self) -> list[Finding]:
        found = self._placement
        if found is None:
            found = self._placement = list(placement_items(self.spec, self.base))
        return found


class Judging:
    """One request's findings being made: on UPDATE an item the old object had is not judged (the old spec's
    items are read only when a finding is about to be made), and a refused value a mutation set says so."""

    __slots__ = ("_mutated", "_old_items", "facts", "old_spec", "review")

    def __init__(self, review: Review, facts: Facts, old_spec: dict[str, Any] | None) -> None:
        self.review, self.facts, self.old_spec = review, facts, old_spec
        self._old_items: set[Finding] | None = None
        self._mutated: dict[str, str] | None = None

    def emit(self, plan: RulePlan, found: Finding) -> None:
        old_spec = self.old_spec
        if old_spec is not None:
            if self._old_items is None:
                self._old_items = all_items(View(old_spec, self.facts.base))
            if found in self._old_items:
                return
        review = self.review
        item = Item()
        judge_item(item, plan.rule, plan.policy, found)
        last = item.last
        if last is not None and not last[1] and review.rules.mutations:
            if self._mutated is None:
                self._mutated = mutated_fields(review)
            setter = self._mutated.get(found.path)
            if setter:
                item.last = (last[0], False, f"{last[2]} (the value was set by {setter})")
        review.settle(item)

"""Workload rules (``enforce.workloads``) and workload mutations (``mutate[].workloads``).

**Targets** select what a rule judges: ``<Kind>`` or ``<Kind>/<containers|initContainers|ephemeralContainers>``;
omitted means every container list of Pods. Controller kinds (Deployment, StatefulSet, DaemonSet, ReplicaSet,
ReplicationController, Job, CronJob) are opt-in and judged on their Pod template, so a bad Deployment is
refused at ``kubectl apply``, not only when its ReplicaSet fails to make Pods. Ephemeral containers arrive
through the ``pods/ephemeralcontainers`` subresource and are judged there: ``kubectl debug`` is no way around
a rule. A rule with targets and no workload policy matches the selected kinds themselves (deny CronJobs).

**Items** (each judged as in :mod:`~enclave_admission.rules.engine`, the last matching allow/deny deciding):

* ``registries``: every image, normalised as the container runtime does (``nginx`` is
  ``docker.io/library/nginx:latest``), against each entry's regular expression (searched from the start of the
  reference), with the entry's allowed pull policies when it lists them;
* ``qosClasses``: the Pod's QoS class, computed as Kubernetes does;
* ``resources``: per container, required request/limit names and min/max per resource; a container outside
  the bounds is what deny and audit match and what allow refuses;
* ``security``: the features a container or Pod uses (privileged, allowPrivilegeEscalation, host
  namespaces, host ports, hostPath volumes by path, added capabilities). A deny or audit matches a used
  feature it sets true (or lists); an allow governs the features it mentions and refuses one it sets false or
  whose value (path, capability) it does not list;
* ``placement`` (and the deprecated ``schedulers``, merged): schedulerName, priorityClassName,
  runtimeClassName, each nodeSelector key, each toleration;
* ``disruptionBudgets``: a PodDisruptionBudget's ``maxUnavailable`` above the rule's bound; with ``required``,
  a replicated controller (more than one replica) not covered by a PodDisruptionBudget of its namespace, read
  from the Rules snapshot (enclave-tenants watches the budgets; admission reads no API).

Controller templates are judged as the Pods they will make: requests default to limits and pull policies to
what kube-apiserver would set. On UPDATE only items the old object did not have are judged. Messages name the
container and the field (``spec.template.spec.containers[1].image``), and a refused value a workload mutation
produced names that mutation.

**Mutations** (Pod CREATE only: never on UPDATE, on controller templates or through the ephemeralcontainers
subresource; rule then entry order): see :func:`mutation_patch`; the patch is minimal and idempotent, and the
validating hook judges what it produced.

**Cost**: the rules are compiled once per Rules snapshot and namespace (:class:`_Plans`, kept on the
``NamespaceSet``): per target kind the rules that target it with their matchers, parsed bounds and refused
features (:class:`_RulePlan`), and the applicable mutation entries merged (:class:`_MutationPlan`). A request
walks its Pod spec once (:class:`_Facts`: each container's fields read once, its image normalised once, QoS
computed once), runs every applicable rule's checks over that in rule order, and builds a message only for an
item that yields a finding (through the same judge functions as before, so messages are unchanged).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple

from enclave_admission.review import JSON, pointer
from enclave_admission.rules import matching
from enclave_admission.rules.compiled import CompiledRule, NamespaceSet
from enclave_admission.rules.engine import Item, Review
from enclave_core.api.rules import Toleration, WorkloadMutation, WorkloadsPolicy
from enclave_core.patterns import Pattern, compile_pattern
from enclave_core.quantity import Quantity

CONTAINER_LISTS: Final = ("initContainers", "containers", "ephemeralContainers")

_TEMPLATES: Final[dict[tuple[str, str], tuple[str, tuple[str, ...]]]] = {
    ("", "pods"): ("Pod", ("spec",)),
    ("apps", "deployments"): ("Deployment", ("spec", "template", "spec")),
    ("apps", "statefulsets"): ("StatefulSet", ("spec", "template", "spec")),
    ("apps", "daemonsets"): ("DaemonSet", ("spec", "template", "spec")),
    ("apps", "replicasets"): ("ReplicaSet", ("spec", "template", "spec")),
    ("", "replicationcontrollers"): ("ReplicationController", ("spec", "template", "spec")),
    ("batch", "jobs"): ("Job", ("spec", "template", "spec")),
    ("batch", "cronjobs"): ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
}
"""(API group, resource) -> (target kind, path of the Pod spec in the object)."""


def workload_kind(group: str, resource: str) -> tuple[str, tuple[str, ...]] | None:
    return _TEMPLATES.get((group, resource))


def _dig(obj: Any, path: tuple[str, ...]) -> dict[str, Any]:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- image references ------------------------------------------------------------------------------------------


_IMAGES: Final[dict[str, str]] = {}


def normalize_image(image: str) -> str:
    """The reference the runtime pulls: registry, repository, and tag (``latest`` when none) or digest."""
    found = _IMAGES.get(image)
    if found is None:
        found = _normalize_image(image)
        if len(_IMAGES) > 4096:
            _IMAGES.clear()
        _IMAGES[image] = found
    return found


def _normalize_image(image: str) -> str:
    name, at, digest = image.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        registry, path = "docker.io", name
    else:
        registry, path = first, rest
    if registry == "index.docker.io":
        registry = "docker.io"  # the legacy name of Docker Hub, as the runtime reads it
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    last = path.rsplit("/", 1)[-1]
    if ":" not in last and not at:
        path += ":latest"
    return f"{registry}/{path}{at}{digest}"


def default_pull_policy(image: str) -> str:
    """The imagePullPolicy kube-apiserver defaults a container to: ``Always`` for a ``latest`` (or missing) tag
    without a digest, else ``IfNotPresent``. Pods and Pod templates arrive defaulted; a raw review may not."""
    name, at, _ = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    _, colon, tag = last.partition(":")
    if at and not colon:
        return "IfNotPresent"
    return "Always" if not colon or tag == "latest" else "IfNotPresent"


# -- what a Pod spec is made of --------------------------------------------------------------------------------


class Container(NamedTuple):
    list_name: str
    position: int
    body: dict[str, Any]
    path: str
    """Field path of the container, e.g. ``spec.template.spec.containers[1]``."""


def containers(spec: Mapping[str, Any], base: str, lists: tuple[str, ...] = CONTAINER_LISTS) -> Iterator[Container]:
    for list_name in lists:
        for index, body in enumerate(_list(spec.get(list_name))):
            if isinstance(body, dict):
                yield Container(list_name, index, body, f"{base}.{list_name}[{index}]")


_QUANTITIES: Final[dict[str, int | None]] = {}
"""Amounts in nano-units by spelling (None: not a quantity): a cluster's Pods repeat a handful of them
(``256Mi``, ``100m``). Quantities compare by this exact integer, as Kubernetes' ``Cmp`` does."""


def _nanos(value: Any) -> int | None:
    text = value if isinstance(value, str) else str(value)
    if text in _QUANTITIES:
        return _QUANTITIES[text]
    try:
        found: int | None = Quantity.parse(text).nanos
    except (ValueError, TypeError):
        found = None
    if len(_QUANTITIES) > 4096:
        _QUANTITIES.clear()
    _QUANTITIES[text] = found
    return found


def _requests_as_stored(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A container's (or the Pod's) requests as kube-apiserver stores them: a limit without a request makes the
    request equal to the limit. Pods arrive defaulted; Pod templates do not (their Pods will be), so a
    Deployment is judged by the Pods it will make."""
    requests = dict(_map(resources.get("requests")))
    for name, amount in _map(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def qos_class(spec: Mapping[str, Any]) -> str:
    """BestEffort, Burstable or Guaranteed, as Kubernetes computes it (``ComputePodQOS``): from the Pod-level
    ``resources`` when set, else from init and regular containers (ephemeral ones declare none); only cpu and
    memory count, zero amounts count as unset; Guaranteed needs cpu and memory limits on every container
    and the summed requests equal to the summed limits."""
    pod_level = _map(spec.get("resources"))
    if pod_level:
        return _qos([(_map(pod_level.get("requests")), _map(pod_level.get("limits")))], True)
    sources = []
    for container in containers(spec, "", ("initContainers", "containers")):
        resources = _map(container.body.get("resources"))
        sources.append((_map(resources.get("requests")), _map(resources.get("limits"))))
    return _qos(sources, False)


def _qos(sources: list[tuple[dict[str, Any], dict[str, Any]]], pod_level: bool) -> str:
    """:func:`qos_class` from (declared requests, declared limits) per source (the Pod-level pair, or each init
    and regular container's); a request is as stored (:func:`_requests_as_stored`). Sums are in nano-units,
    exact; 0 stands for unset (only positive amounts count)."""
    requested_cpu = requested_memory = limited_cpu = limited_memory = 0
    guaranteed = True
    for declared_requests, declared_limits in sources:
        requested_cpu += _positive(declared_requests if "cpu" in declared_requests else declared_limits, "cpu")
        requested_memory += _positive(declared_requests if "memory" in declared_requests else declared_limits, "memory")
        cpu, memory = _positive(declared_limits, "cpu"), _positive(declared_limits, "memory")
        limited_cpu += cpu
        limited_memory += memory
        if pod_level and not declared_limits:
            continue
        if not cpu or not memory:
            guaranteed = False
    if not (requested_cpu or requested_memory or limited_cpu or limited_memory):
        return "BestEffort"
    if guaranteed and requested_cpu == limited_cpu and requested_memory == limited_memory:
        return "Guaranteed"
    return "Burstable"


def _positive(amounts: Mapping[str, Any], name: str) -> int:
    """The amount of ``name`` in nano-units when it is a positive quantity, else 0 (unset for QoS)."""
    if name not in amounts:
        return 0
    found = _nanos(amounts[name])
    return found if found is not None and found > 0 else 0


# -- targets ---------------------------------------------------------------------------------------------------


_TARGETS: Final[dict[int, tuple[WorkloadsPolicy | WorkloadMutation, dict[str, tuple[str, ...]]]]] = {}


def _targets(policy: WorkloadsPolicy | WorkloadMutation) -> dict[str, tuple[str, ...]]:
    """Target kind -> container lists it covers (kept per policy object: rules live as long as a snapshot)."""
    hit = _TARGETS.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    found = _read_targets(policy)
    if len(_TARGETS) > 4096:
        _TARGETS.clear()
    _TARGETS[id(policy)] = (policy, found)
    return found


def _read_targets(policy: WorkloadsPolicy | WorkloadMutation) -> dict[str, tuple[str, ...]]:
    found: dict[str, set[str]] = {}
    for target in policy.targets or ["Pod"]:
        kind, _, part = target.partition("/")
        found.setdefault(kind, set()).update([part] if part else CONTAINER_LISTS)
    return {kind: tuple(name for name in CONTAINER_LISTS if name in lists) for kind, lists in found.items()}


def _has_policies(policy: WorkloadsPolicy) -> bool:
    return any(
        value is not None
        for value in (
            policy.qos_classes,
            policy.registries,
            policy.resources,
            policy.security,
            policy.placement,
            policy.schedulers,
            policy.disruption_budgets,
        )
    )


# -- judging ---------------------------------------------------------------------------------------------------


class Finding:
    """One item of a workload: what a policy looks at, its field path and value (compared on UPDATE), and the
    piece of the spec it came from (``data``: a container or a toleration)."""

    __slots__ = ("data", "path", "value", "what")

    def __init__(self, what: str, path: str, value: str, data: Mapping[str, Any] | None = None) -> None:
        self.what, self.path, self.value, self.data = what, path, value, data or {}

    def _key(self) -> tuple[str, str, str]:
        return (self.what, self.path, self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finding) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def judge(review: Review) -> None:
    """Every workload rule of the namespace on one request: the spec is walked once (:class:`_Facts`) and each
    applicable rule's compiled checks (:class:`_RulePlan`) run over what the walk read, in rule order."""
    request = review.request
    if request.obj is None or not review.rules.workloads:
        return
    if request.group == "policy" and request.resource == "poddisruptionbudgets":
        _disruption_budgets(review)
        return
    located = workload_kind(request.group, request.resource)
    if located is None:
        return
    kind, spec_path = located
    base = ".".join(spec_path)
    spec = _dig(request.obj, spec_path)
    plan = _plans(review.rules).kind(kind)
    facts = _Facts(spec, base, plan)
    malformed = _path_shape(request.obj, spec_path) or (_shape(spec, base) if facts.suspect else "")
    if malformed:
        # Never an allow by mistake: a spec we cannot read is refused (kube-apiserver refuses it first anyway).
        review.malformed = f"cannot judge {kind} {request.name}: {malformed}"
        return
    if not plan.rules:
        return
    old_spec = _dig(request.old, spec_path) if request.operation == "UPDATE" and request.old else None
    judging = _Judging(review, facts, old_spec)
    creating = request.operation == "CREATE" or bool(request.sub_resource)
    for rule_plan in plan.rules:
        rule = rule_plan.rule
        if not review.applies(rule):
            continue
        if rule_plan.itself:
            if creating:
                item = Item()
                why = f"{rule.origin} {'denies' if rule.action != 'audit' else 'audits'} {kind} objects"
                if rule.action == "allow":
                    item.allow(rule, True, "")
                else:
                    item.hit(rule, why)
                review.settle(item)
            continue
        if rule_plan.coverage:
            _coverage(review, rule, kind)
        rule_plan.judge(judging)


# -- the compiled plan -----------------------------------------------------------------------------------------


MAX_MERGED_MUTATIONS = 64
"""Bound of the memo of merged workload mutations per combination of applicable rules (usually one or two)."""


class _Plans:
    """A namespace's workload rules compiled for one Rules snapshot (kept in ``NamespaceSet.plans``): the
    checks of the rules that target each kind, and the workload mutations merged per combination of rules
    that apply."""

    __slots__ = ("_kinds", "merged", "mutating", "rules")

    def __init__(self, rules: NamespaceSet) -> None:
        self.rules = rules
        self._kinds: dict[str, _KindPlan] = {}
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
        self.merged: dict[tuple[int, ...], _MutationPlan] = {}

    def kind(self, kind: str) -> _KindPlan:
        found = self._kinds.get(kind)
        if found is None:
            found = self._kinds[kind] = _KindPlan(self.rules, kind)
        return found

    def mutations(self, applicable: tuple[int, ...]) -> _MutationPlan:
        """The entries of the rules at positions ``applicable`` (of :attr:`mutating`) merged in order."""
        found = self.merged.get(applicable)
        if found is None:
            if len(self.merged) >= MAX_MERGED_MUTATIONS:
                self.merged.clear()
            found = self.merged[applicable] = _MutationPlan([self.mutating[i] for i in applicable])
        return found


def _plans(rules: NamespaceSet) -> _Plans:
    found = rules.plans.get("workloads")
    if found is None:
        found = rules.plans["workloads"] = _Plans(rules)
    plans: _Plans = found
    return plans


class _KindPlan:
    """The workload rules that target one kind, in rule order, and what the walk of a spec must read for them."""

    __slots__ = ("registries", "resources", "rules", "security")

    def __init__(self, rules: NamespaceSet, kind: str) -> None:
        found = []
        for rule in rules.workloads:
            policy = rule.workloads
            if isinstance(policy, WorkloadsPolicy) and kind in _targets(policy):
                found.append(_RulePlan(rule, policy, kind))
        self.rules = tuple(found)
        self.registries = any(plan.registries is not None for plan in found)
        self.resources = any(plan.bounds is not None or plan.qos is not None for plan in found)
        self.security = any(plan.security for plan in found)


_Bounds = tuple[tuple[bool, tuple[str, ...], tuple[tuple[str, int | None, int | None], ...]], ...]
"""Per requests/limits: (of requests, required names, (name, min, max) per name with a min or a max, in
nano-units; None when the rule has none or it does not parse)."""


class _RulePlan:
    """One workload rule's checks for one target kind, compiled once per Rules snapshot from its policy: the
    matchers, parsed bounds and refused security features a request would otherwise work out per item. A check
    only decides whether an item yields a finding (most do not); the finding of one that does is made by the
    item's judge (:func:`_judge_item`), the one source of every message."""

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
        self.lists: tuple[str, ...] = _targets(policy)[kind]
        self.allow = rule.action == "allow"
        """What a check's ``inside`` must be for the item to yield nothing (an allow governs, deny and audit
        match): a finding comes of ``inside != allow``."""
        self.itself = not _has_policies(policy)
        budgets = policy.disruption_budgets
        self.coverage = budgets is not None and budgets.required and kind in REPLICATED
        self.qos: frozenset[str] | None = frozenset(policy.qos_classes) if policy.qos_classes else None
        self.registries: tuple[tuple[Pattern, tuple[str, ...]], ...] | None = None
        if policy.registries:
            self.registries = tuple(
                (_pattern(entry.url), tuple(entry.pull_policies or ())) for entry in policy.registries
            )
        self.verdicts: dict[str, bool] = {}
        """Normalised reference and pull policy (:attr:`_Box.key`) -> within the registries: Pods repeat a
        handful of images."""
        self.bounds: _Bounds | None = _bounds(policy) if policy.resources else None
        security = policy.security if policy.security else None
        self.security = security is not None
        flags: set[str] = set()
        self.host_paths: tuple[matching.Matcher, ...] | None = None
        self.capabilities: frozenset[str] | None = None
        if security is not None:
            for what, attribute in _SECURITY_FLAGS.items():
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

    def judge(self, judging: _Judging) -> None:
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

    def _registered(self, box: _Box) -> bool:
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
                prefix in m.exact for prefix in _path_prefixes(value) for m in compiled
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
            inside = any(_tolerates(entry, found.data) for entry in self.tolerations)
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
            low = _nanos(lows[name]) if name in lows else None
            high = _nanos(highs[name]) if name in highs else None
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
                have = _nanos(declared[name])
            elif of_requests and name in limits:
                have = _nanos(limits[name])
            else:
                continue
            if have is None or (low is not None and have < low) or (high is not None and have > high):
                return True
    return False


class _Box:
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

    def __init__(self, list_name: str, index: int, body: dict[str, Any], base: str, plan: _KindPlan) -> None:
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
        stored = _map(resources)
        requests, limits = stored.get("requests"), stored.get("limits")
        if (requests is not None and not isinstance(requests, dict)) or (
            limits is not None and not isinstance(limits, dict)
        ):
            suspect = True
        capabilities = _map(context).get("capabilities")
        if capabilities is not None and not isinstance(capabilities, dict):
            suspect = True
        added = _map(capabilities).get("add")
        if added is not None and not isinstance(added, list):
            suspect = True
        self.suspect = suspect
        """A field of the wrong JSON type: :func:`_shape` says which (the request is then not judged)."""
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
            self.requests, self.limits = _map(requests), _map(limits)
        self.security: list[Finding] = _container_security(body, path) if plan.security else []

    def registry(self) -> Finding:
        return Finding("registry", f"{self.path}.image", f"{self.image}\x00{self.written_pull}")

    def resources(self) -> Finding:
        resources = _map(self.body.get("resources"))
        return Finding("resources", f"{self.path}.resources", repr(sorted(resources.items())), resources)


_SPEC_LISTS: Final = (*CONTAINER_LISTS, "volumes", "tolerations")


class _Facts:
    """One Pod spec of a request read once for every rule: its containers (:class:`_Box`) in one walk, and on
    first use its QoS class, Pod-level security items and placement items."""

    __slots__ = ("_placement", "_pod_security", "_qos", "base", "boxes", "spec", "suspect")

    def __init__(self, spec: dict[str, Any], base: str, plan: _KindPlan) -> None:
        self.spec, self.base = spec, base
        suspect = False
        for name in _SPEC_LISTS:
            value = spec.get(name)
            if value is not None and not isinstance(value, list):
                suspect = True
        selector = spec.get("nodeSelector")
        if selector is not None and not isinstance(selector, dict):
            suspect = True
        boxes: list[_Box] = []
        for list_name in CONTAINER_LISTS:
            entries = spec.get(list_name)
            if not isinstance(entries, list):
                continue
            for index, body in enumerate(entries):
                if not isinstance(body, dict):
                    suspect = True
                    continue
                box = _Box(list_name, index, body, base, plan)
                suspect = suspect or box.suspect
                boxes.append(box)
        self.boxes = boxes
        self.suspect = suspect
        self._qos = ""
        self._pod_security: list[Finding] | None = None
        self._placement: list[Finding] | None = None

    def qos(self) -> str:
        if not self._qos:
            pod_level = _map(self.spec.get("resources"))
            if pod_level:
                self._qos = _qos([(_map(pod_level.get("requests")), _map(pod_level.get("limits")))], True)
            else:
                sources = [(box.requests, box.limits) for box in self.boxes if box.list_name != "ephemeralContainers"]
                self._qos = _qos(sources, False)
        return self._qos

    def pod_security(self) -> list[Finding]:
        found = self._pod_security
        if found is None:
            found = self._pod_security = _pod_security(self.spec, self.base)
        return found

    def placement(self) -> list[Finding]:
        found = self._placement
        if found is None:
            found = self._placement = list(_placement_items(self.spec, self.base))
        return found


class _Judging:
    """One request's findings being made: on UPDATE an item the old object had is not judged (the old spec's
    items are read only when a finding is about to be made), and a refused value a mutation set says so."""

    __slots__ = ("_mutated", "_old_items", "facts", "old_spec", "review")

    def __init__(self, review: Review, facts: _Facts, old_spec: dict[str, Any] | None) -> None:
        self.review, self.facts, self.old_spec = review, facts, old_spec
        self._old_items: set[Finding] | None = None
        self._mutated: dict[str, str] | None = None

    def emit(self, plan: _RulePlan, found: Finding) -> None:
        old_spec = self.old_spec
        if old_spec is not None:
            if self._old_items is None:
                self._old_items = _all_items(_View(old_spec, self.facts.base))
            if found in self._old_items:
                return
        review = self.review
        item = Item()
        _judge_item(item, plan.rule, plan.policy, found)
        last = item.last
        if last is not None and not last[1] and review.rules.mutations:
            if self._mutated is None:
                self._mutated = mutated_fields(review)
            setter = self._mutated.get(found.path)
            if setter:
                item.last = (last[0], False, f"{last[2]} (the value was set by {setter})")
        review.settle(item)


def _all_items(view: _View) -> set[Finding]:
    """Every item of a spec, whatever a rule selects: an item of a rule is in the old spec's items of that rule
    exactly when it is among these (its field path names its container list)."""
    found: set[Finding] = set()
    for what in ("qos", "placement"):
        found.update(view.found(what))
    for what in ("registry", "resources", "security"):
        found.update(view.found(what, CONTAINER_LISTS))
    return found


class _View:
    """One Pod spec of a request, read once for every rule: the items of each kind per container selection
    (independent of the rule asking), and its QoS class."""

    __slots__ = ("_found", "base", "spec")

    def __init__(self, spec: Mapping[str, Any], base: str) -> None:
        self.spec, self.base = spec, base
        self._found: dict[tuple[str, tuple[str, ...]], list[Finding]] = {}

    def found(self, what: str, lists: tuple[str, ...] = ()) -> list[Finding]:
        key = (what, lists)
        hit = self._found.get(key)
        if hit is None:
            hit = self._found[key] = list(self._read(what, lists))
        return hit

    def _read(self, what: str, lists: tuple[str, ...]) -> Iterator[Finding]:
        spec, base = self.spec, self.base
        if what == "qos":
            yield Finding("qos", base, qos_class(spec))
        elif what == "registry":
            for container in containers(spec, base, lists):
                image = str(container.body.get("image") or "")
                pull = str(container.body.get("imagePullPolicy") or "")
                yield Finding("registry", f"{container.path}.image", f"{image}\x00{pull}")
        elif what == "resources":
            for container in containers(spec, base, lists):
                if container.list_name == "ephemeralContainers":
                    continue  # Kubernetes forbids resources on them: a bound would only block `kubectl debug`
                resources = _map(container.body.get("resources"))
                yield Finding("resources", f"{container.path}.resources", repr(sorted(resources.items())), resources)
        elif what == "security":
            yield from _security_items(spec, base, list(containers(spec, base, lists)))
        else:
            yield from _placement_items(spec, base)


def _items(policy: WorkloadsPolicy, view: _View, lists: tuple[str, ...]) -> Iterator[Finding]:
    """The items ``policy`` judges in a Pod spec."""
    if policy.qos_classes:
        yield from view.found("qos")
    if policy.registries:
        yield from view.found("registry", lists)
    if policy.resources:
        yield from view.found("resources", lists)
    if policy.security:
        yield from view.found("security", lists)
    if policy.placement is not None or policy.schedulers:
        yield from view.found("placement")


def _placement_items(spec: Mapping[str, Any], base: str) -> Iterator[Finding]:
    yield Finding("scheduler", f"{base}.schedulerName", str(spec.get("schedulerName") or "default-scheduler"))
    if spec.get("priorityClassName"):
        yield Finding("priority", f"{base}.priorityClassName", str(spec["priorityClassName"]))
    if spec.get("runtimeClassName"):
        yield Finding("runtime", f"{base}.runtimeClassName", str(spec["runtimeClassName"]))
    for key in sorted(_map(spec.get("nodeSelector"))):
        yield Finding("nodeSelector", f"{base}.nodeSelector[{key!r}]", key)
    for index, toleration in enumerate(_list(spec.get("tolerations"))):
        body = _map(toleration)
        if _defaulted(body):
            continue
        yield Finding("toleration", f"{base}.tolerations[{index}]", repr(sorted(body.items())), body)


_DEFAULT_TOLERATIONS: Final = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def _defaulted(toleration: Mapping[str, Any]) -> bool:
    """The tolerations kube-apiserver's DefaultTolerationSeconds plugin adds to every Pod before webhooks run:
    not the tenant's choice, so never judged."""
    return (
        toleration.get("key") in _DEFAULT_TOLERATIONS
        and toleration.get("operator") == "Exists"
        and toleration.get("effect") == "NoExecute"
    )


def _path_shape(obj: Any, path: tuple[str, ...]) -> str:
    """Where the way to the Pod spec is not an object (``spec.template`` a string), or an empty string."""
    for depth, part in enumerate(path):
        value = obj.get(part) if isinstance(obj, dict) else None
        if value is not None and not isinstance(value, dict):
            return f"{'.'.join(path[: depth + 1])} must be an object, not {type(value).__name__}"
        obj = value
    return ""


_CONTAINER_OBJECTS: Final = ("securityContext", "resources")
_CONTAINER_LISTS_OF: Final = ("ports",)


def _shape(spec: Mapping[str, Any], base: str) -> str:
    """Why the Pod spec cannot be judged (a field of the wrong JSON type), or an empty string."""
    for name in (*CONTAINER_LISTS, "volumes", "tolerations"):
        if name in spec and spec[name] is not None and not isinstance(spec[name], list):
            return f"{base}.{name} must be a list, not {type(spec[name]).__name__}"
    for name in CONTAINER_LISTS:
        for index, entry in enumerate(_list(spec.get(name))):
            if not isinstance(entry, dict):
                return f"{base}.{name}[{index}] must be an object"
            where = f"{base}.{name}[{index}]"
            if "image" in entry and entry["image"] is not None and not isinstance(entry["image"], str):
                return f"{where}.image must be a string"
            for field in _CONTAINER_OBJECTS:
                if field in entry and entry[field] is not None and not isinstance(entry[field], dict):
                    return f"{where}.{field} must be an object"
            for field in _CONTAINER_LISTS_OF:
                if field in entry and entry[field] is not None and not isinstance(entry[field], list):
                    return f"{where}.{field} must be a list"
            resources = _map(entry.get("resources"))
            for part in ("requests", "limits"):
                if resources.get(part) is not None and not isinstance(resources[part], dict):
                    return f"{where}.resources.{part} must be an object"
            capabilities = _map(entry.get("securityContext")).get("capabilities")
            if capabilities is not None and not isinstance(capabilities, dict):
                return f"{where}.securityContext.capabilities must be an object"
            added = _map(capabilities).get("add")
            if added is not None and not isinstance(added, list):
                return f"{where}.securityContext.capabilities.add must be a list"
    if "nodeSelector" in spec and spec["nodeSelector"] is not None and not isinstance(spec["nodeSelector"], dict):
        return f"{base}.nodeSelector must be an object"
    return ""


def _security_items(spec: Mapping[str, Any], base: str, chosen: list[Container]) -> Iterator[Finding]:
    yield from _pod_security(spec, base)
    for container in chosen:
        yield from _container_security(container.body, container.path)


def _pod_security(spec: Mapping[str, Any], base: str) -> list[Finding]:
    """The security items of the Pod itself: host namespaces and hostPath volumes."""
    found = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag) is True:
            found.append(Finding("hostNamespaces", f"{base}.{flag}", "true"))
    for index, volume in enumerate(_list(spec.get("volumes"))):
        host_path = _map(_map(volume).get("hostPath"))
        if host_path.get("path"):
            path = host_path_of(str(host_path["path"]))
            found.append(Finding("hostPaths", f"{base}.volumes[{index}].hostPath.path", path))
    return found


def _container_security(body: Mapping[str, Any], where: str) -> list[Finding]:
    """The security items of one container (``where`` is its field path)."""
    found = []
    context = _map(body.get("securityContext"))
    if context.get("privileged") is True:
        found.append(Finding("privileged", f"{where}.securityContext.privileged", "true"))
    escalation = context.get("allowPrivilegeEscalation")
    if escalation is not False:
        # Unset means allowed (the process may gain privileges: no_new_privs is not set), as Pod Security
        # Standards read it: only an explicit false keeps a container from escalating.
        shown = "true" if escalation is True else "unset (allowed)"
        found.append(Finding("allowPrivilegeEscalation", f"{where}.securityContext.allowPrivilegeEscalation", shown))
    for index, port in enumerate(_list(body.get("ports"))):
        if _map(port).get("hostPort"):
            found.append(Finding("hostPorts", f"{where}.ports[{index}].hostPort", str(_map(port)["hostPort"])))
    added = _list(_map(context.get("capabilities")).get("add"))
    for index, capability in enumerate(added):
        path = f"{where}.securityContext.capabilities.add[{index}]"
        found.append(Finding("capabilities", path, capability_name(capability)))
    return found


def capability_name(value: Any) -> str:
    """``cap_net_admin`` and ``NET_ADMIN`` are the same capability to the runtime."""
    text = str(value).upper()
    return text[4:] if text.startswith("CAP_") else text


def host_path_of(path: str) -> str:
    """The directory a hostPath volume really mounts: ``//etc/./x/`` is ``/etc/x`` (kube-apiserver refuses
    ``..`` segments), so no spelling of a path slips past a rule about it."""
    parts = [part for part in path.split("/") if part and part != "."]
    return ("/" if path.startswith("/") else "") + "/".join(parts)


def _path_prefixes(path: str) -> list[str]:
    """``/etc/kubernetes/pki`` -> itself, ``/etc/kubernetes``, ``/etc``, ``/``."""
    found = [path]
    while "/" in path.strip("/"):
        path = path.rsplit("/", 1)[0]
        found.append(path)
    if path != "/" and path.startswith("/"):
        found.append("/")
    return found


def _verdict(item: Item, rule: CompiledRule, inside: bool, path: str, shown: str, constraint: str) -> None:
    """``inside``: the item is within what the rule lists (what deny/audit match and allow requires)."""
    if rule.action == "allow":
        item.allow(rule, inside, f"{rule.origin} allows {path} only {constraint}; got {shown}")
    elif inside:
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} {path}={shown} ({constraint})")


def _judge_item(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, found: Finding) -> None:
    what, path, value = found.what, found.path, found.value
    if what == "qos":
        classes = sorted(policy.qos_classes or ())
        _verdict(item, rule, value in classes, path + " (QoS class)", value, f"QoS classes {classes}")
    elif what == "registry":
        _registry(item, rule, policy, path, value)
    elif what == "resources":
        _resources(item, rule, policy, path, found.data)
    elif what in _SECURITY_FLAGS or what in ("hostPaths", "capabilities"):
        _security(item, rule, policy, what, path, value)
    else:
        _placement(item, rule, policy, found)


def _registry(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, path: str, value: str) -> None:
    image, _, pull = value.partition("\x00")
    reference = normalize_image(image)
    pull = pull or default_pull_policy(image)
    matched = False
    for entry in policy.registries or ():
        if _search(entry.url, reference) and (not entry.pull_policies or not pull or pull in entry.pull_policies):
            matched = True
            break
    urls = ", ".join(repr(entry.url) for entry in policy.registries or ())
    shown = f"{image!r} ({reference}, imagePullPolicy {pull})"
    _verdict(item, rule, matched, path, shown, f"registries {urls} with their pull policies")


def _pattern(pattern: str) -> Pattern:
    """Patterns were compiled when the rule was (a broken one makes the whole rule broken); cached by text in
    :func:`enclave_core.patterns.compile_pattern` (linear-time)."""
    return compile_pattern(pattern)


def _search(pattern: str, value: str) -> bool:
    return _pattern(pattern).match(value)


def _resources(
    item: Item, rule: CompiledRule, policy: WorkloadsPolicy, path: str, resources: Mapping[str, Any]
) -> None:
    bounds = policy.resources
    assert bounds is not None
    problems: list[str] = []
    for part, limit in (("requests", bounds.requests), ("limits", bounds.limits)):
        if limit is None:
            continue
        declared = _requests_as_stored(resources) if part == "requests" else _map(resources.get(part))
        for name in limit.required or ():
            if name not in declared:
                problems.append(f"{path}.{part}[{name!r}] is missing")
        for name in (*(limit.min or {}), *(limit.max or {})):
            if name in declared and _nanos(declared[name]) is None:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]!r} is not a quantity")
        for name, low in (limit.min or {}).items():
            have = _nanos(declared.get(name)) if name in declared else None
            bound = _nanos(low)
            if have is not None and bound is not None and have < bound:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]} is below {low}")
        for name, high in (limit.max or {}).items():
            have = _nanos(declared.get(name)) if name in declared else None
            bound = _nanos(high)
            if have is not None and bound is not None and have > bound:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]} is above {high}")
    outside = bool(problems)
    if rule.action == "allow":
        item.allow(rule, not outside, f"{rule.origin} bounds container resources: {'; '.join(problems)}")
    elif outside:
        verb = "denies" if rule.action == "deny" else "audits"
        item.hit(rule, f"{rule.origin} {verb} container resources out of bounds: {'; '.join(problems)}")


_SECURITY_FLAGS: Final = {
    "privileged": "privileged",
    "allowPrivilegeEscalation": "allow_privilege_escalation",
    "hostNamespaces": "host_namespaces",
    "hostPorts": "host_ports",
}


def _security(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, what: str, path: str, value: str) -> None:
    security = policy.security
    assert security is not None
    if what in _SECURITY_FLAGS:
        setting = getattr(security, _SECURITY_FLAGS[what])
        if setting is None:
            return
        if rule.action == "allow":
            item.allow(rule, bool(setting), f"{rule.origin} does not allow {what}: {path}={value}")
        elif setting:
            item.hit(rule, f"{rule.origin} {'denies' if rule.action == 'deny' else 'audits'} {what}: {path}={value}")
        return
    if what == "hostPaths":
        if security.host_paths is None:
            return
        compiled = matching.matchers(security.host_paths)
        # Exact values are directory prefixes (at a "/" boundary); expressions match the whole normalised path.
        inside = any(m.regex is not None and m.matches(value) for m in compiled) or any(
            prefix in m.exact for prefix in _path_prefixes(value) for m in compiled
        )
        _verdict(item, rule, inside, path, repr(value), f"hostPaths {matching.describe(compiled)} (exact: prefixes)")
        return
    if security.capabilities is None:
        return
    listed = {capability_name(name) for name in security.capabilities}
    inside = value in listed or "ALL" in listed
    _verdict(item, rule, inside, path, repr(value), f"capabilities {sorted(listed)}")


def _tolerates(rule_toleration: Toleration, toleration: Mapping[str, Any]) -> bool:
    return (
        (rule_toleration.key or "") == str(toleration.get("key") or "")
        and rule_toleration.operator == str(toleration.get("operator") or "Equal")
        and (rule_toleration.value or "") == str(toleration.get("value") or "")
        and (rule_toleration.effect is None or rule_toleration.effect == toleration.get("effect"))
    )


def _placement(item: Item, rule: CompiledRule, policy: WorkloadsPolicy, found: Finding) -> None:
    what, path, value = found.what, found.path, found.value
    placement = policy.placement
    if what == "scheduler":
        listed = [*(placement.schedulers if placement and placement.schedulers else []), *(policy.schedulers or [])]
        if listed:
            compiled = matching.matchers(listed)
            _verdict(
                item,
                rule,
                matching.match_any(compiled, value),
                path,
                repr(value),
                f"schedulers {matching.describe(compiled)}",
            )
        return
    if placement is None:
        return
    if what in ("priority", "runtime"):
        values = placement.priority_classes if what == "priority" else placement.runtime_classes
        if values:
            compiled = matching.matchers(values)
            _verdict(item, rule, matching.match_any(compiled, value), path, repr(value), matching.describe(compiled))
    elif what == "nodeSelector":
        if placement.node_selector_keys:
            keys = sorted(placement.node_selector_keys)
            _verdict(item, rule, value in keys, path, repr(value), f"nodeSelector keys {keys}")
    elif what == "toleration" and placement.tolerations:
        toleration = found.data
        inside = any(_tolerates(entry, toleration) for entry in placement.tolerations)
        shown = ", ".join(f"{k}={v}" for k, v in toleration.items())
        _verdict(item, rule, inside, path, f"{{{shown}}}", "the rule's tolerations")


REPLICATED: Final = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})
"""Controller kinds with ``spec.replicas``: what ``disruptionBudgets.required`` is about (a DaemonSet, a Job or
a single replica has no availability a budget could protect during a drain)."""


def _replicated(obj: Mapping[str, Any] | None) -> tuple[int, dict[str, Any]] | None:
    """(replicas, Pod template labels) of a controller that runs more than one replica, else None."""
    spec = _map(_map(obj).get("spec"))
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas <= 1:
        return None
    return replicas, dict(_map(_map(_map(spec.get("template")).get("metadata")).get("labels")))


def _coverage(review: Review, rule: CompiledRule, kind: str) -> None:
    """``disruptionBudgets.required``: a controller of more than one replica must be covered by a
    PodDisruptionBudget of its namespace selecting its Pod template's labels. Judged on CREATE, and on UPDATE
    when it starts to need coverage (replicas raised above one, template labels changed): an existing
    Deployment is never refused for a budget deleted since."""
    request = review.request
    found = _replicated(request.obj)
    if found is None:
        return
    if request.operation == "UPDATE" and _replicated(request.old) == found:
        return
    replicas, labels = found
    covering = [b.name for b in review.rules.budgets if b.selector is not None and b.selector.matches(labels)]
    item = Item()
    shown = ", ".join(f"{key}={value}" for key, value in sorted(labels.items())) or "none"
    known = len(review.rules.budgets)
    why = (
        f"{rule.origin} requires a PodDisruptionBudget covering {kind} {request.name or '(generated name)'} "
        f"({replicas} replicas, spec.template.metadata.labels {shown}): none of the {known} PodDisruptionBudgets "
        f"admission knows in {request.namespace} selects these labels. Create the PodDisruptionBudget first; one "
        "created in the last few seconds may not have reached admission yet, retry in a moment"
    )
    if rule.action == "allow":
        item.allow(rule, bool(covering), why)
    elif not covering:
        item.hit(rule, why if rule.action == "deny" else f"{rule.origin} audits: {why}")
    review.settle(item)


def _disruption_budgets(review: Review) -> None:
    request = review.request
    spec = _map(_map(request.obj).get("spec"))
    value = spec.get("maxUnavailable")
    if value is None:
        return
    for rule in review.rules.workloads:
        budgets = rule.workloads.disruption_budgets if rule.workloads else None
        if budgets is None or budgets.max_unavailable is None or not review.applies(rule):
            continue
        item = Item()
        bound = budgets.max_unavailable
        inside = _within(value, bound)
        _verdict(item, rule, inside, "spec.maxUnavailable", repr(value), f"maxUnavailable at most {bound!r}")
        review.settle(item)


def _within(value: Any, bound: Any) -> bool:
    """Both numbers or both percentages compare; a number against a percentage cannot be judged (admitted)."""
    text, limit = str(value), str(bound)
    if text.endswith("%") != limit.endswith("%"):
        return True
    try:
        return int(text.rstrip("%")) <= int(limit.rstrip("%"))
    except ValueError:
        return False


# -- mutations -------------------------------------------------------------------------------------------------


_NONE: Final = (None, "")
_UNSET: Final = {"schedulerName": (None, "", "default-scheduler")}
"""Values a scalar mutation treats as unset: kube-apiserver defaults schedulerName before webhooks run, so a
Pod that named no scheduler arrives with ``default-scheduler``."""

_RESOLVED: Final = {"priorityClassName": ("priority", "preemptionPolicy")}
"""Fields kube-apiserver resolves from a class before webhooks run, removed when a mutation names the class.
Its Priority plugin gives a Pod naming no class the default priority (0) and preemption policy; once a webhook
changed the object it runs again, and it refuses a Pod whose priority differs from the named class's ("the
integer value of priority (0) must not be provided in pod spec"). Without them it resolves the class the
mutation named. (RuntimeClass needs nothing: a Pod naming none gets no overhead.)"""

_Default = tuple[str, str, str, int | None]
"""(requests|limits, resource name, amount as written, amount parsed)."""


class _MutationPlan:
    """The workload mutation entries of the rules that apply to a Pod CREATE, merged in rule and entry order
    once per snapshot and combination of applicable rules: each field is set at most once (the first entry
    wins, later ones see it set), except nodeSelector values and forced pull policies, where a later entry's
    value wins; so the result does not depend on how often it is computed."""

    __slots__ = ("lists", "node_selector", "scalars", "tolerations")

    def __init__(self, rules: list[tuple[CompiledRule, tuple[tuple[str, WorkloadMutation], ...]]]) -> None:
        self.node_selector: dict[str, str] = {}
        self.tolerations: list[dict[str, Any]] = []
        scalars: dict[str, str] = {}
        pulls: dict[str, str | None] = {}
        """Per container list, in the order entries first select it: the forced pull policy (the last)."""
        defaults: dict[str, list[_Default]] = {}
        for _, entries in rules:
            for _, mutation in entries:
                self.node_selector.update(mutation.node_selector or {})
                for toleration in mutation.tolerations or ():
                    wanted = toleration.to_k8s()
                    if wanted not in self.tolerations:
                        self.tolerations.append(wanted)
                for field, scalar in (
                    ("schedulerName", mutation.scheduler_name),
                    ("priorityClassName", mutation.priority_class_name),
                    ("runtimeClassName", mutation.runtime_class_name),
                ):
                    if scalar and field not in scalars:
                        scalars[field] = scalar
                for list_name in _targets(mutation).get("Pod", ()):
                    pull = pulls.setdefault(list_name, None)
                    pulls[list_name] = mutation.image_pull_policy or pull
                    if list_name == "ephemeralContainers":
                        continue  # Kubernetes forbids resources on them
                    into = defaults.setdefault(list_name, [])
                    for part, amounts in (("requests", mutation.default_requests), ("limits", mutation.default_limits)):
                        for name, amount in (amounts or {}).items():
                            into.append((part, name, str(amount), _nanos(amount)))
        self.scalars = tuple(scalars.items())
        self.lists = tuple((name, pull, tuple(defaults.get(name, ()))) for name, pull in pulls.items())
        """(container list, forced pull policy or None, default amounts in order) per list the entries select."""

    def patch(self, spec: Mapping[str, Any]) -> list[JSON]:
        """The JSON patch for one Pod spec: minimal (one operation per key added, lists appended to) and
        idempotent (a Pod that already holds every value gets none)."""
        operations: list[JSON] = []
        present = spec.get("nodeSelector")
        if self.node_selector:
            selector = _map(present)
            wanted = {key: value for key, value in self.node_selector.items() if selector.get(key) != value}
            if wanted and isinstance(present, dict):
                for key, value in wanted.items():
                    operations.append({"op": "add", "path": pointer("spec", "nodeSelector", key), "value": value})
            elif wanted:
                operations.append({"op": "add", "path": "/spec/nodeSelector", "value": wanted})
        if self.tolerations:
            tolerations = spec.get("tolerations")
            added = [wanted for wanted in self.tolerations if wanted not in _list(tolerations)]
            if added and isinstance(tolerations, list):
                operations += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in added]
            elif added:
                operations.append({"op": "add", "path": "/spec/tolerations", "value": added})
        for field, value in self.scalars:
            if spec.get(field) in _UNSET.get(field, _NONE):
                operations.append({"op": "add", "path": f"/spec/{field}", "value": value})
                for resolved in _RESOLVED.get(field, ()):
                    if resolved in spec:
                        operations.append({"op": "remove", "path": f"/spec/{resolved}"})
        for list_name, pull, defaults in self.lists:
            for index, body in enumerate(_list(spec.get(list_name))):
                if isinstance(body, dict):
                    _container_patch(operations, f"/spec/{list_name}/{index}", body, pull, defaults)
        return operations


def _container_patch(
    operations: list[JSON], where: str, body: dict[str, Any], pull: str | None, defaults: tuple[_Default, ...]
) -> None:
    """A container's operations: the forced pull policy, then default amounts it declares none of. Never a
    default that makes the container invalid (a request above its limit): kube-apiserver would refuse the Pod
    for a value the user did not write."""
    if pull is not None and pull != body.get("imagePullPolicy"):
        operations.append({"op": "add", "path": f"{where}/imagePullPolicy", "value": pull})
    if not defaults:
        return
    resources = body.get("resources")
    stored = _map(resources)
    requests, limits = _map(stored.get("requests")), _map(stored.get("limits"))
    amounts: dict[tuple[str, str], str] = {}
    for part, name, amount, mine in defaults:
        declared, other = (requests, limits) if part == "requests" else (limits, requests)
        if name in declared or (part, name) in amounts:
            continue
        if mine is not None and name in other and other[name] is not None:
            theirs = _nanos(other[name])
            if theirs is not None and (mine > theirs if part == "requests" else mine < theirs):
                continue
        amounts[(part, name)] = amount
    if not amounts:
        return
    if not isinstance(resources, dict):
        grouped: dict[str, dict[str, str]] = {}
        for (part, name), amount in amounts.items():
            grouped.setdefault(part, {})[name] = amount
        operations.append({"op": "add", "path": f"{where}/resources", "value": grouped})
        return
    for part in ("requests", "limits"):
        mine_part = {name: amount for (kind, name), amount in amounts.items() if kind == part}
        if not mine_part:
            continue
        if isinstance(resources.get(part), dict):
            for name, amount in mine_part.items():
                operations.append({"op": "add", "path": f"{where}/resources/{part}/{_escape(name)}", "value": amount})
        else:
            operations.append({"op": "add", "path": f"{where}/resources/{part}", "value": mine_part})


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def mutation_patch(review: Review) -> list[JSON]:
    """``mutate[].workloads`` on Pod creation, in rule and entry order (see :class:`_MutationPlan`): the
    entries of the applicable rules are merged once per snapshot, then applied in one walk of the Pod."""
    request = review.request
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.sub_resource:
        return []
    if request.obj is None or not review.rules.mutations:
        return []
    plans = _plans(review.rules)
    applicable = tuple(position for position, (rule, _) in enumerate(plans.mutating) if review.applies(rule))
    if not applicable:
        return []
    return plans.mutations(applicable).patch(_map(request.obj.get("spec")))


def mutated_fields(review: Review) -> dict[str, str]:
    """Field path -> the mutation that set it, for a Pod being created, so a denial of a value a mutation
    produced says so. Read from the mutated object (what the validating hook gets): a field holding exactly
    what an applicable mutation sets is taken as set by it (the first such mutation is named)."""
    request = review.request
    found: dict[str, str] = {}
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.obj is None:
        return found
    spec = _map(request.obj.get("spec"))
    selector, tolerations = _map(spec.get("nodeSelector")), _list(spec.get("tolerations"))
    for rule in review.rules.mutations:
        entries = [part for part in rule.mutations if isinstance(part.workloads, WorkloadMutation)]
        if not entries or not review.applies(rule):
            continue
        for part in entries:
            mutation = part.workloads
            assert isinstance(mutation, WorkloadMutation)
            who = f"{rule.origin} mutate {part.name!r}"
            for key, value in (mutation.node_selector or {}).items():
                if selector.get(key) == value:
                    found.setdefault(f"spec.nodeSelector[{key!r}]", who)
            for toleration in mutation.tolerations or ():
                wanted = toleration.to_k8s()
                for index, present in enumerate(tolerations):
                    if present == wanted:
                        found.setdefault(f"spec.tolerations[{index}]", who)
            for field, scalar in (
                ("schedulerName", mutation.scheduler_name),
                ("priorityClassName", mutation.priority_class_name),
                ("runtimeClassName", mutation.runtime_class_name),
            ):
                if scalar and spec.get(field) == scalar:
                    found.setdefault(f"spec.{field}", who)
            for container in containers(spec, "spec", _targets(mutation).get("Pod", ())):
                if mutation.image_pull_policy and container.body.get("imagePullPolicy") == mutation.image_pull_policy:
                    found.setdefault(f"{container.path}.image", who)
                resources = _map(container.body.get("resources"))
                for section, defaults in (
                    ("requests", mutation.default_requests),
                    ("limits", mutation.default_limits),
                ):
                    declared = _map(resources.get(section))
                    if any(str(declared.get(name)) == str(amount) for name, amount in (defaults or {}).items()):
                        found.setdefault(f"{container.path}.resources", who)
    return found

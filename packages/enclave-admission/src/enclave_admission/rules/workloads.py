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

**Mutations** (Pod CREATE, rule then entry order): see :func:`mutation_patch`; the patch is minimal and
idempotent, and the validating hook judges what it produced.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple

from enclave_admission.review import JSON, pointer
from enclave_admission.rules import matching
from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Item, Review
from enclave_core.api.rules import Toleration, WorkloadMutation, WorkloadsPolicy
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


_QUANTITIES: Final[dict[str, Quantity | None]] = {}
"""Parsed amounts by spelling: a cluster's Pods repeat a handful of them (``256Mi``, ``100m``)."""


def _quantity(value: Any) -> Quantity | None:
    text = value if isinstance(value, str) else str(value)
    if text in _QUANTITIES:
        return _QUANTITIES[text]
    try:
        found: Quantity | None = Quantity.parse(text)
    except (ValueError, TypeError):
        found = None
    if len(_QUANTITIES) > 4096:
        _QUANTITIES.clear()
    _QUANTITIES[text] = found
    return found


_QOS_RESOURCES: Final = ("cpu", "memory")


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
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    """Summed amounts in nano-units (exact integers)."""
    guaranteed = True
    pod_level = _map(spec.get("resources"))
    if pod_level:
        sources = [pod_level]
    else:
        sources = [_map(c.body.get("resources")) for c in containers(spec, "", ("initContainers", "containers"))]
    for resources in sources:
        declared_limits = _map(resources.get("limits"))
        for part, into in ((_requests_as_stored(resources), requests), (declared_limits, limits)):
            for name in _QOS_RESOURCES:
                amount = _quantity(part[name]) if name in part else None
                if amount is not None and amount.nanos > 0:
                    into[name] = into.get(name, 0) + amount.nanos
        if pod_level and not declared_limits:
            continue
        for name in _QOS_RESOURCES:
            amount = _quantity(declared_limits[name]) if name in declared_limits else None
            if amount is None or amount.nanos <= 0:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


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
    malformed = _path_shape(request.obj, spec_path) or _shape(spec, base)
    if malformed:
        # Never an allow by mistake: a spec we cannot read is refused (kube-apiserver refuses it first anyway).
        review.malformed = f"cannot judge {kind} {request.name}: {malformed}"
        return
    old_spec = _dig(request.old, spec_path) if request.operation == "UPDATE" and request.old else None
    view = _View(spec, base)
    old_view = _View(old_spec, base) if old_spec is not None else None
    mutated: dict[str, str] | None = None
    for rule in review.rules.workloads:
        policy = rule.workloads
        assert policy is not None
        targets = _targets(policy)
        if kind not in targets or not review.applies(rule):
            continue
        if not _has_policies(policy):
            if request.operation == "CREATE" or request.sub_resource:
                item = Item()
                why = f"{rule.origin} {'denies' if rule.action != 'audit' else 'audits'} {kind} objects"
                if rule.action == "allow":
                    item.allow(rule, True, "")
                else:
                    item.hit(rule, why)
                review.settle(item)
            continue
        if policy.disruption_budgets is not None and policy.disruption_budgets.required and kind in REPLICATED:
            _coverage(review, rule, kind)
        lists = targets[kind]
        old_items = set(_items(policy, old_view, lists)) if old_view is not None else None
        for found in _items(policy, view, lists):
            if old_items is not None and found in old_items:
                continue
            item = Item()
            _judge_item(item, rule, policy, found)
            if item.last is not None and not item.last[1] and review.rules.mutations:
                if mutated is None:
                    mutated = mutated_fields(review)
                setter = mutated.get(found.path)
                if setter:
                    item.last = (item.last[0], False, f"{item.last[2]} (the value was set by {setter})")
            review.settle(item)


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
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag) is True:
            yield Finding("hostNamespaces", f"{base}.{flag}", "true")
    for index, volume in enumerate(_list(spec.get("volumes"))):
        host_path = _map(_map(volume).get("hostPath"))
        if host_path.get("path"):
            yield Finding("hostPaths", f"{base}.volumes[{index}].hostPath.path", host_path_of(str(host_path["path"])))
    for container in chosen:
        context = _map(container.body.get("securityContext"))
        if context.get("privileged") is True:
            yield Finding("privileged", f"{container.path}.securityContext.privileged", "true")
        escalation = context.get("allowPrivilegeEscalation")
        if escalation is not False:
            # Unset means allowed (the process may gain privileges: no_new_privs is not set), as Pod Security
            # Standards read it: only an explicit false keeps a container from escalating.
            shown = "true" if escalation is True else "unset (allowed)"
            yield Finding(
                "allowPrivilegeEscalation", f"{container.path}.securityContext.allowPrivilegeEscalation", shown
            )
        for index, port in enumerate(_list(container.body.get("ports"))):
            if _map(port).get("hostPort"):
                yield Finding("hostPorts", f"{container.path}.ports[{index}].hostPort", str(_map(port)["hostPort"]))
        added = _list(_map(context.get("capabilities")).get("add"))
        for index, capability in enumerate(added):
            yield Finding(
                "capabilities",
                f"{container.path}.securityContext.capabilities.add[{index}]",
                capability_name(capability),
            )


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


_PATTERNS: Final[dict[str, re.Pattern[str]]] = {}


def _search(pattern: str, value: str) -> bool:
    """Patterns were compiled when the rule was (a broken one makes the whole rule broken); kept here by text."""
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        if len(_PATTERNS) > 1024:
            _PATTERNS.clear()
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled.match(value) is not None


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
            if name in declared and _quantity(declared[name]) is None:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]!r} is not a quantity")
        for name, low in (limit.min or {}).items():
            have = _quantity(declared.get(name)) if name in declared else None
            bound = _quantity(low)
            if have is not None and bound is not None and have < bound:
                problems.append(f"{path}.{part}[{name!r}]={declared[name]} is below {low}")
        for name, high in (limit.max or {}).items():
            have = _quantity(declared.get(name)) if name in declared else None
            bound = _quantity(high)
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


class _Planned:
    """What the workload mutations of one Pod CREATE set, and which rule set each field (for messages)."""

    __slots__ = ("containers", "node_selector", "scalars", "tolerations")

    def __init__(self) -> None:
        self.node_selector: dict[str, str] = {}
        self.tolerations: list[dict[str, Any]] = []
        self.scalars: dict[str, str] = {}
        self.containers: dict[tuple[str, int], _ContainerChanges] = {}
        """(list, index) -> what changes in that container."""


class _ContainerChanges:
    __slots__ = ("amounts", "pull")

    def __init__(self) -> None:
        self.pull: str | None = None
        self.amounts: dict[tuple[str, str], str] = {}
        """("requests"|"limits", resource name) -> amount."""


def _plan(review: Review) -> _Planned | None:
    """``mutate[].workloads`` on Pod creation, in rule and entry order, over what earlier entries set: each
    field is set at most once (the first entry wins; later ones see it set), so the result does not depend on
    how often it is computed."""
    request = review.request
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.sub_resource:
        return None
    if request.obj is None or not review.rules.mutations:
        return None
    spec = _map(request.obj.get("spec"))
    planned = _Planned()
    selector = _map(spec.get("nodeSelector"))
    present = _list(spec.get("tolerations"))
    for rule in review.rules.mutations:
        entries = [part for part in rule.mutations if isinstance(part.workloads, WorkloadMutation)]
        if not entries or not review.applies(rule):
            continue
        for part in entries:
            mutation = part.workloads
            assert isinstance(mutation, WorkloadMutation)
            planned.node_selector.update(mutation.node_selector or {})  # in order: a later entry's value wins
            for toleration in mutation.tolerations or ():
                wanted = toleration.to_k8s()
                if wanted not in present and wanted not in planned.tolerations:
                    planned.tolerations.append(wanted)
            for field, scalar in (
                ("schedulerName", mutation.scheduler_name),
                ("priorityClassName", mutation.priority_class_name),
                ("runtimeClassName", mutation.runtime_class_name),
            ):
                if scalar and spec.get(field) in _UNSET.get(field, _NONE) and field not in planned.scalars:
                    planned.scalars[field] = scalar
            for container in containers(spec, "spec", _targets(mutation).get("Pod", ())):
                changes = planned.containers.setdefault((container.list_name, container.position), _ContainerChanges())
                _container_mutation(container, mutation, changes)
    planned.node_selector = {k: v for k, v in planned.node_selector.items() if selector.get(k) != v}
    for (list_name, index), changes in planned.containers.items():
        if changes.pull is not None and changes.pull == _map(_list(spec.get(list_name))[index]).get("imagePullPolicy"):
            changes.pull = None
    return planned


def _container_mutation(container: Container, mutation: WorkloadMutation, changes: _ContainerChanges) -> None:
    body = container.body
    pull = mutation.image_pull_policy
    if pull:
        changes.pull = pull  # forced; in order, a later entry's value wins
    if container.list_name == "ephemeralContainers" or not (mutation.default_requests or mutation.default_limits):
        return
    resources = _map(body.get("resources"))
    requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
    for part, defaults, declared in (
        ("requests", mutation.default_requests, requests),
        ("limits", mutation.default_limits, limits),
    ):
        for name, amount in (defaults or {}).items():
            if name in declared or (part, name) in changes.amounts:
                continue
            # Never a default that makes the container invalid (a request above its limit): kube-apiserver would
            # refuse the Pod for a value the user did not write.
            other = limits.get(name) if part == "requests" else requests.get(name)
            mine, theirs = _quantity(amount), _quantity(other) if other is not None else None
            if mine is not None and theirs is not None and (mine > theirs if part == "requests" else mine < theirs):
                continue
            changes.amounts[(part, name)] = str(amount)


def mutation_patch(review: Review) -> list[JSON]:
    """The JSON patch of the workload mutations: minimal (one operation per key added, lists appended to) and
    idempotent (a Pod that already holds every value gets none)."""
    planned = _plan(review)
    if planned is None or review.request.obj is None:
        return []
    spec = _map(review.request.obj.get("spec"))
    operations: list[JSON] = []
    if planned.node_selector:
        if isinstance(spec.get("nodeSelector"), dict):
            for key, value in planned.node_selector.items():
                operations.append({"op": "add", "path": pointer("spec", "nodeSelector", key), "value": value})
        else:
            operations.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(planned.node_selector)})
    if planned.tolerations:
        if isinstance(spec.get("tolerations"), list):
            operations += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in planned.tolerations]
        else:
            operations.append({"op": "add", "path": "/spec/tolerations", "value": list(planned.tolerations)})
    for field, value in planned.scalars.items():
        operations.append({"op": "add", "path": pointer("spec", field), "value": value})
    for (list_name, index), changes in planned.containers.items():
        body = _map(_list(spec.get(list_name))[index])
        where = ("spec", list_name, str(index))
        if changes.pull is not None:
            operations.append({"op": "add", "path": pointer(*where, "imagePullPolicy"), "value": changes.pull})
        amounts = changes.amounts
        if not amounts:
            continue
        resources = body.get("resources")
        if not isinstance(resources, dict):
            grouped: dict[str, dict[str, str]] = {}
            for (section, name), amount in amounts.items():
                grouped.setdefault(section, {})[name] = amount
            operations.append({"op": "add", "path": pointer(*where, "resources"), "value": grouped})
            continue
        for section in ("requests", "limits"):
            mine = {name: amount for (kind, name), amount in amounts.items() if kind == section}
            if not mine:
                continue
            if isinstance(resources.get(section), dict):
                for name, amount in mine.items():
                    path = pointer(*where, "resources", section, name)
                    operations.append({"op": "add", "path": path, "value": amount})
            else:
                operations.append({"op": "add", "path": pointer(*where, "resources", section), "value": mine})
    return operations


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

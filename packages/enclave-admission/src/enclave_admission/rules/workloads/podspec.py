"""What a workload is made of, read as Kubernetes reads it: where each kind keeps its Pod spec, the image
reference the runtime pulls and the pull policy kube-apiserver defaults, the containers of a spec, its QoS class,
and which kinds and container lists a workload policy or mutation targets. No rule logic: everything here is
what the cluster would compute, so the judges and the mutations agree with it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple

from enclave_core.api.rules import WorkloadMutation, WorkloadsPolicy
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


def dig(obj: Any, path: tuple[str, ...]) -> dict[str, Any]:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


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


class Container(NamedTuple):
    list_name: str
    position: int
    body: dict[str, Any]
    path: str
    """Field path of the container, e.g. ``spec.template.spec.containers[1]``."""


def containers(spec: Mapping[str, Any], base: str, lists: tuple[str, ...] = CONTAINER_LISTS) -> Iterator[Container]:
    for list_name in lists:
        for index, body in enumerate(as_list(spec.get(list_name))):
            if isinstance(body, dict):
                yield Container(list_name, index, body, f"{base}.{list_name}[{index}]")


_QUANTITIES: Final[dict[str, int | None]] = {}
"""Amounts in nano-units by spelling (None: not a quantity): a cluster's Pods repeat a handful of them
(``256Mi``, ``100m``). Quantities compare by this exact integer, as Kubernetes' ``Cmp`` does."""


def nanos(value: Any) -> int | None:
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


def requests_as_stored(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A container's (or the Pod's) requests as kube-apiserver stores them: a limit without a request makes the
    request equal to the limit. Pods arrive defaulted; Pod templates do not (their Pods will be), so a
    Deployment is judged by the Pods it will make."""
    requests = dict(as_map(resources.get("requests")))
    for name, amount in as_map(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def qos_class(spec: Mapping[str, Any]) -> str:
    """BestEffort, Burstable or Guaranteed, as Kubernetes computes it (``ComputePodQOS``): from the Pod-level
    ``resources`` when set, else from init and regular containers (ephemeral ones declare none); only cpu and
    memory count, zero amounts count as unset; Guaranteed needs cpu and memory limits on every container
    and the summed requests equal to the summed limits."""
    pod_level = as_map(spec.get("resources"))
    if pod_level:
        return qos_of([(as_map(pod_level.get("requests")), as_map(pod_level.get("limits")))], True)
    sources = []
    for container in containers(spec, "", ("initContainers", "containers")):
        resources = as_map(container.body.get("resources"))
        sources.append((as_map(resources.get("requests")), as_map(resources.get("limits"))))
    return qos_of(sources, False)


def qos_of(sources: list[tuple[dict[str, Any], dict[str, Any]]], pod_level: bool) -> str:
    """:func:`qos_class` from (declared requests, declared limits) per source (the Pod-level pair, or each init
    and regular container's); a request is as stored (:func:`requests_as_stored`). Sums are in nano-units,
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
    found = nanos(amounts[name])
    return found if found is not None and found > 0 else 0


_TARGETS: Final[dict[int, tuple[WorkloadsPolicy | WorkloadMutation, dict[str, tuple[str, ...]]]]] = {}


def targets_of(policy: WorkloadsPolicy | WorkloadMutation) -> dict[str, tuple[str, ...]]:
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


def has_policies(policy: WorkloadsPolicy) -> bool:
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

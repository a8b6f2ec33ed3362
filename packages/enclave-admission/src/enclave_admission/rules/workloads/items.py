"""The items of a Pod spec a workload rule judges (one image, one container's resources, one security feature,
one placement choice), and why a spec of the wrong JSON shape cannot be judged. Items are independent of the
rule asking: on UPDATE the old object's items are compared with the new one's, and only new items are judged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from enclave_admission.rules.workloads.podspec import CONTAINER_LISTS, Container, as_list, as_map, containers, qos_class
from enclave_core.api.rules import WorkloadsPolicy


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


def all_items(view: View) -> set[Finding]:
    """Every item of a spec, whatever a rule selects: an item of a rule is in the old spec's items of that rule
    exactly when it is among these (its field path names its container list)."""
    found: set[Finding] = set()
    for what in ("qos", "placement"):
        found.update(view.found(what))
    for what in ("registry", "resources", "security"):
        found.update(view.found(what, CONTAINER_LISTS))
    return found


class View:
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
                resources = as_map(container.body.get("resources"))
                yield Finding("resources", f"{container.path}.resources", repr(sorted(resources.items())), resources)
        elif what == "security":
            yield from _security_items(spec, base, list(containers(spec, base, lists)))
        else:
            yield from placement_items(spec, base)


def policy_items(policy: WorkloadsPolicy, view: View, lists: tuple[str, ...]) -> Iterator[Finding]:
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


def placement_items(spec: Mapping[str, Any], base: str) -> Iterator[Finding]:
    yield Finding("scheduler", f"{base}.schedulerName", str(spec.get("schedulerName") or "default-scheduler"))
    if spec.get("priorityClassName"):
        yield Finding("priority", f"{base}.priorityClassName", str(spec["priorityClassName"]))
    if spec.get("runtimeClassName"):
        yield Finding("runtime", f"{base}.runtimeClassName", str(spec["runtimeClassName"]))
    for key in sorted(as_map(spec.get("nodeSelector"))):
        yield Finding("nodeSelector", f"{base}.nodeSelector[{key!r}]", key)
    for index, toleration in enumerate(as_list(spec.get("tolerations"))):
        body = as_map(toleration)
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


def path_shape(obj: Any, path: tuple[str, ...]) -> str:
    """Where the way to the Pod spec is not an object (``spec.template`` a string), or an empty string."""
    for depth, part in enumerate(path):
        value = obj.get(part) if isinstance(obj, dict) else None
        if value is not None and not isinstance(value, dict):
            return f"{'.'.join(path[: depth + 1])} must be an object, not {type(value).__name__}"
        obj = value
    return ""


_CONTAINER_OBJECTS: Final = ("securityContext", "resources")


_CONTAINER_LISTS_OF: Final = ("ports",)


def shape(spec: Mapping[str, Any], base: str) -> str:
    """Why the Pod spec cannot be judged (a field of the wrong JSON type), or an empty string."""
    for name in (*CONTAINER_LISTS, "volumes", "tolerations"):
        if name in spec and spec[name] is not None and not isinstance(spec[name], list):
            return f"{base}.{name} must be a list, not {type(spec[name]).__name__}"
    for name in CONTAINER_LISTS:
        for index, entry in enumerate(as_list(spec.get(name))):
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
            resources = as_map(entry.get("resources"))
            for part in ("requests", "limits"):
                if resources.get(part) is not None and not isinstance(resources[part], dict):
                    return f"{where}.resources.{part} must be an object"
            capabilities = as_map(entry.get("securityContext")).get("capabilities")
            if capabilities is not None and not isinstance(capabilities, dict):
                return f"{where}.securityContext.capabilities must be an object"
            added = as_map(capabilities).get("add")
            if added is not None and not isinstance(added, list):
                return f"{where}.securityContext.capabilities.add must be a list"
    if "nodeSelector" in spec and spec["nodeSelector"] is not None and not isinstance(spec["nodeSelector"], dict):
        return f"{base}.nodeSelector must be an object"
    return ""


def _security_items(spec: Mapping[str, Any], base: str, chosen: list[Container]) -> Iterator[Finding]:
    yield from pod_security(spec, base)
    for container in chosen:
        yield from container_security(container.body, container.path)


def pod_security(spec: Mapping[str, Any], base: str) -> list[Finding]:
    """The security items of the Pod itself: host namespaces and hostPath volumes."""
    found = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag) is True:
            found.append(Finding("hostNamespaces", f"{base}.{flag}", "true"))
    for index, volume in enumerate(as_list(spec.get("volumes"))):
        host_path = as_map(as_map(volume).get("hostPath"))
        if host_path.get("path"):
            path = host_path_of(str(host_path["path"]))
            found.append(Finding("hostPaths", f"{base}.volumes[{index}].hostPath.path", path))
    return found


def container_security(body: Mapping[str, Any], where: str) -> list[Finding]:
    """The security items of one container (``where`` is its field path)."""
    found = []
    context = as_map(body.get("securityContext"))
    if context.get("privileged") is True:
        found.append(Finding("privileged", f"{where}.securityContext.privileged", "true"))
    escalation = context.get("allowPrivilegeEscalation")
    if escalation is not False:
        # Unset means allowed (the process may gain privileges: no_new_privs is not set), as Pod Security
        # Standards read it: only an explicit false keeps a container from escalating.
        shown = "true" if escalation is True else "unset (allowed)"
        found.append(Finding("allowPrivilegeEscalation", f"{where}.securityContext.allowPrivilegeEscalation", shown))
    for index, port in enumerate(as_list(body.get("ports"))):
        if as_map(port).get("hostPort"):
            found.append(Finding("hostPorts", f"{where}.ports[{index}].hostPort", str(as_map(port)["hostPort"])))
    added = as_list(as_map(context.get("capabilities")).get("add"))
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


def path_prefixes(path: str) -> list[str]:
    """``/etc/kubernetes/pki`` -> itself, ``/etc/kubernetes``, ``/etc``, ``/``."""
    found = [path]
    while "/" in path.strip("/"):
        path = path.rsplit("/", 1)[0]
        found.append(path)
    if path != "/" and path.startswith("/"):
        found.append("/")
    return found

"""``mutate[].workloads`` on Pod creation: the entries of the applicable rules merged once per snapshot and
combination of rules, applied as a minimal, idempotent JSON patch; and which fields of a created Pod a mutation
set, so a refusal of such a value names the mutation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from enclave_admission.review import JSON, pointer
from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Review
from enclave_admission.rules.workloads.podspec import as_list, as_map, containers, nanos, targets_of
from enclave_core.api.rules import WorkloadMutation

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


class MutationPlan:
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
                for list_name in targets_of(mutation).get("Pod", ()):
                    pull = pulls.setdefault(list_name, None)
                    pulls[list_name] = mutation.image_pull_policy or pull
                    if list_name == "ephemeralContainers":
                        continue  # Kubernetes forbids resources on them
                    into = defaults.setdefault(list_name, [])
                    for part, amounts in (("requests", mutation.default_requests), ("limits", mutation.default_limits)):
                        for name, amount in (amounts or {}).items():
                            into.append((part, name, str(amount), nanos(amount)))
        self.scalars = tuple(scalars.items())
        self.lists = tuple((name, pull, tuple(defaults.get(name, ()))) for name, pull in pulls.items())
        """(container list, forced pull policy or None, default amounts in order) per list the entries select."""

    def patch(self, spec: Mapping[str, Any]) -> list[JSON]:
        """The JSON patch for one Pod spec: minimal (one operation per key added, lists appended to) and
        idempotent (a Pod that already holds every value gets none)."""
        operations: list[JSON] = []
        present = spec.get("nodeSelector")
        if self.node_selector:
            selector = as_map(present)
            wanted = {key: value for key, value in self.node_selector.items() if selector.get(key) != value}
            if wanted and isinstance(present, dict):
                for key, value in wanted.items():
                    operations.append({"op": "add", "path": pointer("spec", "nodeSelector", key), "value": value})
            elif wanted:
                operations.append({"op": "add", "path": "/spec/nodeSelector", "value": wanted})
        if self.tolerations:
            tolerations = spec.get("tolerations")
            added = [wanted for wanted in self.tolerations if wanted not in as_list(tolerations)]
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
            for index, body in enumerate(as_list(spec.get(list_name))):
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
    stored = as_map(resources)
    requests, limits = as_map(stored.get("requests")), as_map(stored.get("limits"))
    amounts: dict[tuple[str, str], str] = {}
    for part, name, amount, mine in defaults:
        declared, other = (requests, limits) if part == "requests" else (limits, requests)
        if name in declared or (part, name) in amounts:
            continue
        if mine is not None and name in other and other[name] is not None:
            theirs = nanos(other[name])
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


def mutated_fields(review: Review) -> dict[str, str]:
    """Field path -> the mutation that set it, for a Pod being created, so a denial of a value a mutation
    produced says so. Read from the mutated object (what the validating hook gets): a field holding exactly
    what an applicable mutation sets is taken as set by it (the first such mutation is named)."""
    request = review.request
    found: dict[str, str] = {}
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.obj is None:
        return found
    spec = as_map(request.obj.get("spec"))
    selector, tolerations = as_map(spec.get("nodeSelector")), as_list(spec.get("tolerations"))
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
            for container in containers(spec, "spec", targets_of(mutation).get("Pod", ())):
                if mutation.image_pull_policy and container.body.get("imagePullPolicy") == mutation.image_pull_policy:
                    found.setdefault(f"{container.path}.image", who)
                resources = as_map(container.body.get("resources"))
                for section, defaults in (
                    ("requests", mutation.default_requests),
                    ("limits", mutation.default_limits),
                ):
                    declared = as_map(resources.get(section))
                    if any(str(declared.get(name)) == str(amount) for name, amount in (defaults or {}).items()):
                        found.setdefault(f"{container.path}.resources", who)
    return found

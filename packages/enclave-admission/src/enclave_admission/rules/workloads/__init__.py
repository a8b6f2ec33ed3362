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

**Cost**: the rules are compiled once per Rules snapshot and namespace (:class:`plan.Plans`, kept on the
``NamespaceSet``): per target kind the rules that target it with their matchers, parsed bounds and refused
features (:class:`plan.RulePlan`), and the applicable mutation entries merged (:class:`mutation.MutationPlan`).
A request walks its Pod spec once (:class:`plan.Facts`: each container's fields read once, its image normalised
once, QoS computed once), runs every applicable rule's checks over that in rule order, and builds a message only
for an item that yields a finding (through the judge functions of :mod:`judges`, the one source of messages).

**Modules**, in the order a request meets them: :mod:`podspec` (where the Pod spec of each kind is, images,
QoS, what a policy targets), :mod:`items` (what is judged in a spec, and a spec of the wrong shape),
:mod:`plan` (the rules compiled per kind, the one walk of a spec), :mod:`judges` (each item's verdict and its
message), :mod:`budgets` (PodDisruptionBudget rules), :mod:`mutation` (the merged workload mutations).
"""

from __future__ import annotations

from enclave_admission.review import JSON
from enclave_admission.rules.engine import Item, Review
from enclave_admission.rules.workloads.budgets import REPLICATED, coverage, disruption_budgets
from enclave_admission.rules.workloads.items import capability_name, host_path_of, path_shape, shape
from enclave_admission.rules.workloads.mutation import mutated_fields
from enclave_admission.rules.workloads.plan import MAX_MERGED_MUTATIONS, Facts, Judging, plans_of
from enclave_admission.rules.workloads.podspec import (
    CONTAINER_LISTS,
    as_map,
    containers,
    default_pull_policy,
    dig,
    normalize_image,
    qos_class,
    workload_kind,
)

__all__ = [
    "CONTAINER_LISTS",
    "MAX_MERGED_MUTATIONS",
    "REPLICATED",
    "capability_name",
    "containers",
    "default_pull_policy",
    "host_path_of",
    "judge",
    "mutated_fields",
    "mutation_patch",
    "normalize_image",
    "qos_class",
    "workload_kind",
]


def judge(review: Review) -> None:
    """Every workload rule of the namespace on one request: the spec is walked once (:class:`Facts`) and each
    applicable rule's compiled checks (:class:`RulePlan`) run over what the walk read, in rule order."""
    request = review.request
    if request.obj is None or not review.rules.workloads:
        return
    if request.group == "policy" and request.resource == "poddisruptionbudgets":
        disruption_budgets(review)
        return
    located = workload_kind(request.group, request.resource)
    if located is None:
        return
    kind, spec_path = located
    base = ".".join(spec_path)
    spec = dig(request.obj, spec_path)
    plan = plans_of(review.rules).kind(kind)
    facts = Facts(spec, base, plan)
    malformed = path_shape(request.obj, spec_path) or (shape(spec, base) if facts.suspect else "")
    if malformed:
        # Never an allow by mistake: a spec we cannot read is refused (kube-apiserver refuses it first anyway).
        review.malformed = f"cannot judge {kind} {request.name}: {malformed}"
        return
    if not plan.rules:
        return
    old_spec = dig(request.old, spec_path) if request.operation == "UPDATE" and request.old else None
    judging = Judging(review, facts, old_spec)
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
            coverage(review, rule, kind)
        rule_plan.judge(judging)


def mutation_patch(review: Review) -> list[JSON]:
    """``mutate[].workloads`` on Pod creation, in rule and entry order (see :class:`MutationPlan`): the
    entries of the applicable rules are merged once per snapshot, then applied in one walk of the Pod."""
    request = review.request
    if request.operation != "CREATE" or request.group or request.resource != "pods" or request.sub_resource:
        return []
    if request.obj is None or not review.rules.mutations:
        return []
    plans = plans_of(review.rules)
    applicable = tuple(position for position, (rule, _) in enumerate(plans.mutating) if review.applies(rule))
    if not applicable:
        return []
    return plans.mutations(applicable).patch(as_map(request.obj.get("spec")))

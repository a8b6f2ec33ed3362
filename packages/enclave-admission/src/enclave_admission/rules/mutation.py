"""``/resources/mutate``: what rules set on objects before they are judged.

For rules whose audience and conditions match: first each rule's ``mutate[]`` metadata entries in rule and
entry order (``overwrite`` replaces present values), then the ``managed`` label and annotation values of
``enforce.metadata`` (set on CREATE and UPDATE; the last applicable value per key wins, and it wins over any
mutation, since validation enforces it) and their ``default`` values (CREATE, only when the key is still
absent). Workload mutations (``mutate[].workloads``) apply on Pod creation, after the metadata ones. The patch is minimal and idempotent: a key already holding the value
is not touched, so a re-submitted object is not patched again. The validating hook judges the mutated object,
so a mutation can never produce an object the rules deny without that denial saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules import exempt, metadata, workloads
from enclave_admission.rules.engine import Review
from enclave_admission.rules.validation import NO_RULES_FOR_NAMESPACE, finalizers_only, once_named
from enclave_admission.state import State


def answer(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    """The ``/resources/mutate`` route: :func:`mutate`, except that a request in a tenant namespace the Rules
    snapshot does not name yet is mutated once it does (its managed values and defaults set, as the validating
    hook will expect); after :attr:`State.rules_wait` it is left unchanged for the validating hook to refuse."""
    return once_named(mutate, request, state)


def mutate(request: AdmissionRequest, state: State) -> Decision:
    if not request.namespace or request.operation not in ("CREATE", "UPDATE") or request.obj is None:
        return Decision.allow("NotGoverned")
    if exempt.exemption(request, state):
        return Decision.allow("NotGoverned")
    if not state.knows_rules(request.namespace) and not finalizers_only(request):
        return Decision.allow(NO_RULES_FOR_NAMESPACE)  # nothing to set; the validating hook refuses it
    rules = state.rule_set(request.namespace)
    if not rules.managed and not rules.mutations:
        return Decision.allow("NoMutations", tenant=rules.tenant)
    review = Review(request, rules, mutating=True)
    wanted = _mutations(review)
    if rules.managed:
        metadata.managed_and_defaults(review, wanted)
    operations = metadata.set_metadata(request.obj, wanted)
    operations += workloads.mutation_patch(review)
    if not operations:
        return Decision.allow("Unchanged", tenant=rules.tenant)
    return Decision.mutate("Mutated", operations, tenant=rules.tenant)


def _mutations(review: Review) -> dict[tuple[str, str], str]:
    """``mutate[]`` metadata entries, in rule order then entry order: (labels|annotations, key) -> value."""
    request = review.request
    labels = dict(request.labels)
    annotations = dict(request.annotations)
    wanted: dict[tuple[str, str], str] = {}
    for rule in review.rules.mutations:
        entries = [
            part
            for part in rule.mutations
            if part.metadata is not None
            and part.scope is not None
            and part.scope.matches(request.kind, request.api_version)
        ]
        if not entries or not review.applies(rule):
            continue
        for part in entries:
            assert part.metadata is not None
            for name, values, current in (
                ("labels", part.metadata.labels, labels),
                ("annotations", part.metadata.annotations, annotations),
            ):
                for key, value in (values or {}).items():
                    if key in current and (not part.metadata.overwrite or current[key] == value):
                        continue
                    current[key] = value
                    wanted[(name, key)] = value
    return wanted

"""One request through the webhooks kube-apiserver would call, in its order, with admission's own functions.

kube-apiserver runs every matching mutating webhook, applies each patch, then every matching validating
webhook on the final object; the first denial ends the request. The webhooks and their rules are the
defaults admission ships (:func:`enclave_admission.defaults.webhooks`, the same ones the chart renders); the
decision behind each path is :data:`enclave_admission.routes.ROUTES`.

Under ``spec.rules.engine`` native, the compiled ValidatingAdmissionPolicies (:mod:`enclave_cli.native`) are a
step of their own, and the hooks' namespace selectors on the native-rules label are honoured.

What the offline run does not model: other namespace and object selectors and CEL matchConditions of the hooks
(which only narrow *who is sent*; the decision functions pass everyone they do not concern), and the hooks
whose decisions read the snapshot of a controller the offline world does not compile (replication; pools,
shared and custom quotas are compiled, see :mod:`enclave_cli.areas`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from enclave_admission.defaults import url_client, webhooks
from enclave_admission.review import REVIEW_API_VERSION, AdmissionRequest, Decision
from enclave_admission.routes import QUOTAS, ROUTES
from enclave_admission.state import State, Subject
from enclave_cli.native import NativeRules, PolicyVerdict, apply_json_patch
from enclave_core.api import KINDS_BY_NAME
from enclave_core.api.configuration import WebhookRule
from enclave_core.api.names import NATIVE_RULES_LABEL

JSON = dict[str, Any]

CORE_RESOURCES = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "Node": "nodes"}
CLUSTER_KINDS = ("Namespace", "Node", "PersistentVolume")
"""Core kinds that are cluster-scoped; every other non-Enclave kind is taken as namespaced."""
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


@dataclass(frozen=True)
class Hook:
    name: str
    path: str
    mutating: bool
    rules: tuple[WebhookRule, ...]
    native_rules: bool | None = None
    """Its namespaceSelector on :data:`~enclave_core.api.names.NATIVE_RULES_LABEL`: False, it skips the
    namespaces that carry it (the ``resources`` hooks); True, it sees only those; None, the label does not
    matter to it."""

    def matches(self, group: str, resource: str, operation: str, namespaced: bool = True) -> bool:
        for rule in self.rules:
            if rule.scope not in (None, "*", "Namespaced" if namespaced else "Cluster"):
                continue
            if group not in (rule.api_groups or []) and "*" not in (rule.api_groups or []):
                continue
            if operation not in (rule.operations or []) and "*" not in (rule.operations or []):
                continue
            if resource in (rule.resources or []) or "*" in (rule.resources or []):
                return True
        return False


def hooks(namespace: str) -> list[Hook]:
    """Admission's default hooks (mutating first, in order), with the node hook that is off by default and the
    hooks of the components whose snapshots the offline world compiles (pools, global and custom quotas)."""
    rendered = webhooks(
        url_client("https://enclave.offline"),
        namespace=namespace,
        nodes=True,
        pools=True,
        globalquotas=True,
        quotas=True,
    )
    found: list[Hook] = []
    for side, mutating in ((rendered.mutating, True), (rendered.validating, False)):
        for webhook in (side.webhooks or []) if side is not None else []:
            native_rules = None
            selector = webhook.namespace_selector
            for requirement in (selector.match_expressions or []) if selector is not None else []:
                if requirement.key == NATIVE_RULES_LABEL:
                    native_rules = requirement.operator == "Exists"
            found.append(Hook(webhook.name, webhook.path or "", mutating, tuple(webhook.rules or ()), native_rules))
    return found


@dataclass
class Request:
    """A request as a test writes it: who, what operation, the object before and after."""

    user: str
    groups: tuple[str, ...]
    operation: str
    obj: JSON | None
    old: JSON | None
    group: str
    resource: str
    sub_resource: str = ""
    kind: str = ""
    api_version: str = ""
    name: str = ""
    namespace: str = ""

    @property
    def namespaced(self) -> bool:
        """Whether the resource is namespace-scoped (what a hook rule's ``scope`` matches)."""
        if self.kind in CLUSTER_KINDS and "/" not in self.api_version:
            return False
        info = KINDS_BY_NAME.get(self.kind)
        return info.namespaced if info is not None else True

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.sub_resource}" if self.sub_resource else self.resource

    def review(self, obj: JSON | None, *, dry_run: bool = False) -> JSON:
        """The AdmissionReview kube-apiserver would send with ``obj`` as the object."""
        group, _, version = self.api_version.rpartition("/")
        request: JSON = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": self.kind},
            "resource": {"group": self.group, "version": version, "resource": self.resource},
            "operation": self.operation,
            "name": self.name,
            "userInfo": {"username": self.user, "groups": list(self.groups)},
            "object": obj,
            "oldObject": self.old,
            "dryRun": dry_run,
        }
        if self.sub_resource:
            request["subResource"] = self.sub_resource
        if self.namespace:
            request["namespace"] = self.namespace
        return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "request": request}


def plural(kind: str) -> str:
    """The resource name Kubernetes derives from a kind (``NetworkPolicy`` -> ``networkpolicies``); a test
    names it with ``resource:`` where the kind is irregular."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def resource_of(kind: str, api_version: str) -> tuple[str, str]:
    """(group, plural) of a kind: Enclave's from the API registry, others by Kubernetes' naming rule."""
    if kind in CORE_RESOURCES and "/" not in api_version:
        return "", CORE_RESOURCES[kind]
    info = KINDS_BY_NAME.get(kind)
    if info is not None and api_version.startswith(info.group + "/"):
        return info.group, info.plural
    group = api_version.rpartition("/")[0]
    return group, plural(kind)


@dataclass
class Step:
    """One webhook's answer."""

    hook: str
    path: str
    decision: Decision
    mutating: bool = False
    verdicts: list[PolicyVerdict] = field(default_factory=list)
    """For the native step (path :data:`NATIVE`): each policy's verdict."""


@dataclass
class Outcome:
    """The request's fate: the steps taken, the final object, and the answer the user would see."""

    steps: list[Step] = field(default_factory=list)
    obj: JSON | None = None
    subject: Subject | None = None
    skipped: list[str] = field(default_factory=list)
    """Hooks whose rules do not match the request (for explain)."""
    not_reached: list[str] = field(default_factory=list)
    """Hooks that match but come after a denial (kube-apiserver stops at the first)."""
    notes: list[str] = field(default_factory=list)
    """What the offline run could not do as the cluster would (a policy the local engine could not evaluate)."""
    passed_over: list[str] = field(default_factory=list)
    """Hooks whose namespaceSelector leaves the namespace out for its native-rules label."""
    engine: str = "webhook"
    """The ``spec.rules.engine`` the request was decided under (never ``both``: that is two outcomes)."""

    @property
    def denial(self) -> Step | None:
        return next((step for step in self.steps if not step.decision.allowed), None)

    @property
    def allowed(self) -> bool:
        return self.denial is None

    @property
    def patch(self) -> list[JSON]:
        return [op for step in self.steps for op in step.decision.patch]

    @property
    def result(self) -> str:
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"

    @property
    def decided_by(self) -> Step | None:
        """The denying step; else the last step that patched; else the last step."""
        if self.denial is not None:
            return self.denial
        patched = [step for step in self.steps if step.decision.patch]
        if patched:
            return patched[-1]
        # kube-apiserver calls validating hooks in parallel, so "last" means nothing there: the first validating
        # hook of the request's resource (the default hooks list the resource's own hook before the generic ones),
        # after the policies, which kube-apiserver runs before any validating hook
        validating = [step for step in self.steps if not step.mutating]
        if validating:
            return validating[0]
        return self.steps[-1] if self.steps else None

    @property
    def audits(self) -> list[str]:
        """Audit findings of rules (allowed, but reported): what ``expect.audit`` matches."""
        return [audit for step in self.steps for audit in step.decision.audits]

    @property
    def message(self) -> str:
        denial = self.denial
        return denial.decision.message if denial is not None else ""


class UnsupportedRouteError(Exception):
    """A hook whose decision needs a snapshot the offline world does not compile."""


def apply_patch(obj: JSON, patch: tuple[JSON, ...]) -> JSON:
    """RFC 6902 ``add``/``replace``/``remove`` on objects and arrays: the operations admission emits."""
    found: JSON = apply_json_patch(obj, list(patch))
    return found


Decide = Callable[[Hook, JSON], Decision]
"""One hook's answer to one AdmissionReview (offline: the route's function; in a test: the real server)."""


def decide_locally(state: State) -> Decide:
    """The decision functions of :data:`ROUTES` on ``state``, exactly as the server calls them."""

    def decide(hook: Hook, review: JSON) -> Decision:
        request = AdmissionRequest.from_review(review)
        decided = ROUTES[hook.path](request, state)
        if isinstance(decided, Decision):
            return decided
        if not request.dry_run:  # a reservation would be written: never offline
            close = getattr(decided, "close", None)
            if close is not None:
                close()
            raise UnsupportedRouteError(f"{hook.path} writes quota reservations; it is not evaluated offline")
        # a dry run checks the ledgers admission's client holds (offline: the compiled ones) and writes nothing
        return asyncio.run(_awaited(decided))

    return decide


async def _awaited(pending: Awaitable[Decision]) -> Decision:
    return await pending


def _scoped(found: list[Hook], state: State) -> list[Hook]:
    """The generic quota hook with the rules enclave-quotas gives it in a cluster (exactly the resources the
    quotas count, :func:`enclave_quotas.webhook.rules`); enclave-config writes it with none."""
    from enclave_quotas.webhook import rules

    if state.quotas is None:
        return found
    scoped = tuple(WebhookRule.model_validate(rule) for rule in rules(state.quotas.targets.quotas))
    return [Hook(h.name, h.path, h.mutating, scoped) if h.path == QUOTAS else h for h in found]


def evaluate(
    request: Request,
    state: State,
    namespace: str,
    decide: Decide | None = None,
    native: NativeRules | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> Outcome:
    """Run ``request`` through every matching hook, as kube-apiserver does; ``decide`` answers each (by default
    admission's functions on ``state``, which also classifies the requester for :mod:`enclave_cli.explain`).

    With ``native`` (``spec.rules.engine`` native or both), the compiled ValidatingAdmissionPolicies of the
    request's namespace are judged where kube-apiserver's admission chain has them, after every mutating hook and
    before the validating hooks (whose calls a policy's denial then spares), and in a namespace that carries the
    native-rules label the ``resources`` hooks are not called."""
    decide = decide or decide_locally(state)
    engine = native.engine if native is not None else "webhook"
    outcome = Outcome(obj=request.obj, subject=state.subject(request.user, request.groups), engine=engine)
    labelled = native is not None and native.labelled(request.namespace)
    obj = request.obj
    judged = native is None
    mutated = _mutating_policies(native, request.review(obj, dry_run=True), namespace_labels or {})
    if mutated is not None:
        # kube-apiserver's MutatingAdmissionPolicy plugin runs before the mutating webhooks
        outcome.steps.append(mutated)
        undecided = [verdict.undecided for verdict in mutated.verdicts if verdict.undecided]
        if undecided:
            labelled = False
            outcome.notes.append(
                f"the mutating policies could not be evaluated offline ({undecided[0]}); the webhook stands in"
            )
        elif mutated.decision.allowed and mutated.decision.patch and obj is not None:
            obj = apply_patch(obj, mutated.decision.patch)
    for hook in _scoped(hooks(namespace), state):
        if not hook.mutating and not judged and outcome.denial is None:
            judged = True
            step = _policies(native, request.review(obj, dry_run=True), namespace_labels or {})
            if step is not None:
                outcome.steps.append(step)
            undecided = [verdict.undecided for verdict in step.verdicts if verdict.undecided] if step else []
            if undecided:
                # the policies' answer is not known offline: the webhook, which judges every rule, stands in
                labelled = False
                outcome.notes.append(
                    f"the policies could not be evaluated offline ({undecided[0]}); the webhook's answer stands in"
                )
        if not hook.matches(request.group, request.full_resource, request.operation, request.namespaced):
            outcome.skipped.append(hook.name)
            continue
        if hook.native_rules is not None and hook.native_rules != labelled:
            outcome.passed_over.append(hook.name)
            continue
        if outcome.denial is not None:
            outcome.not_reached.append(hook.name)
            continue
        decided = decide(hook, request.review(obj, dry_run=True))
        outcome.steps.append(Step(hook.name, hook.path, decided, hook.mutating))
        if decided.allowed and decided.patch and obj is not None:
            obj = apply_patch(obj, decided.patch)
    outcome.obj = obj
    return outcome


NATIVE: Final = "ValidatingAdmissionPolicy"
"""The path of the step that stands for the compiled policies."""


MUTATING: Final = "MutatingAdmissionPolicy"
"""The path of the step that stands for the compiled mutating policies."""


def _mutating_policies(native: NativeRules | None, review: JSON, labels: dict[str, str]) -> Step | None:
    """The mutating policies' step: their patches in order, or the first one's failure (policy ``Fail``); None
    when no policy matches or nothing compiled mutates."""
    if native is None or review["request"].get("object") is None:
        return None
    matched = [verdict for verdict in native.judge_mutations(review, labels) if verdict.matched]
    if not matched:
        return None
    tenant = native.namespaces[str(review["request"].get("namespace"))].tenant
    names = ", ".join(verdict.policy for verdict in matched)
    failed = next((verdict for verdict in matched if verdict.denials), None)
    if failed is not None:
        first = failed.denials[0]
        decision = Decision(False, first.reason, first.message, tenant=tenant)
        return Step(f"{MUTATING} {failed.policy}", MUTATING, decision, True, verdicts=matched)
    patch = [op for verdict in matched for op in verdict.patch]
    decision = Decision.mutate("Mutated", patch, tenant=tenant) if patch else Decision.allow("Unchanged", tenant=tenant)
    return Step(f"{MUTATING} {names}", MUTATING, decision, True, verdicts=matched)


def _policies(native: NativeRules | None, review: JSON, labels: dict[str, str]) -> Step | None:
    """The policies' step: the first denial of a ``Deny`` binding (kube-apiserver reports that one), else an
    allow carrying the ``Warn``/``Audit`` bindings' messages as audit findings; None when no policy matches."""
    if native is None:
        return None
    verdicts = native.judge(review, labels)
    matched = [verdict for verdict in verdicts if verdict.matched]
    if not matched:
        return None
    tenant = native.namespaces[str(review["request"].get("namespace"))].tenant
    if any(verdict.undecided for verdict in matched):
        names = ", ".join(verdict.policy for verdict in matched)
        return Step(
            f"{NATIVE} {names}", NATIVE, Decision(True, "NotEvaluatedOffline", tenant=tenant), verdicts=verdicts
        )
    audits = tuple(message for verdict in matched for message in verdict.warnings)
    denying = next((verdict for verdict in matched if verdict.denies), None)
    if denying is not None:
        first = denying.denials[0]
        decision = Decision(False, first.reason, first.message, tenant=tenant, audits=audits)
        return Step(f"{NATIVE} {denying.policy}", NATIVE, decision, verdicts=verdicts)
    decision = Decision(True, "Audited" if audits else "Allowed", tenant=tenant, audits=audits)
    names = ", ".join(verdict.policy for verdict in matched)
    return Step(f"{NATIVE} {names}", NATIVE, decision, verdicts=verdicts)

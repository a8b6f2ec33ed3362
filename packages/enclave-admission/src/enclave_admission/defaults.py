"""Enclave's default webhooks: ``spec.admission`` pointing kube-apiserver at this server's paths.

``webhooks(client)`` is what ``tox -e up`` (and any installation without the Helm chart) writes into the
ServiceConfiguration; the config component renders it into the two webhook configurations and injects the CA.
The hooks are data: :data:`HOOKS` holds one :class:`Hook` per webhook with only what sets it apart, and
:func:`webhooks` makes each with what they all share (AdmissionReview v1, ``matchPolicy: Equivalent``, 5 s,
``sideEffects: None``, the system namespaces excluded unless the hook skips the control plane by user or must
see every namespace). Why each hook is scoped, and fails, as it does is argued in the package README ("Why
each default hook is scoped as it is"); the chart renders the same hooks (a test compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from enclave_admission import routes
from enclave_core import API_GROUP, API_VERSION
from enclave_core.api import names
from enclave_core.api.configuration import (
    TENANT_METADATA_CONDITION,
    Admission,
    FailurePolicy,
    MatchCondition,
    MutatingAdmission,
    MutatingWebhook,
    Operation,
    ReinvocationPolicy,
    RuleScope,
    SideEffects,
    ValidatingAdmission,
    ValidatingWebhook,
    WebhookClient,
    WebhookOptions,
    WebhookRule,
)
from enclave_core.selectors import LabelSelector, LabelSelectorRequirement


def _rule(group: str, resources: list[str], operations: list[Operation], scope: RuleScope) -> WebhookRule:
    """Enclave's own kinds in their stored version only (kube-apiserver converts the others first), anything
    else in every version."""
    versions = [API_VERSION] if group == API_GROUP else ["*"]
    return WebhookRule(
        api_groups=[group], api_versions=versions, operations=operations, resources=resources, scope=scope
    )


def _exists(key: str) -> LabelSelector:
    return LabelSelector(match_expressions=[LabelSelectorRequirement(key=key, operator="Exists")])


SYSTEM_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease")


def skip_control_plane(namespace: str) -> MatchCondition:
    """A matchCondition that keeps the control plane's and Enclave's own requests away from a hook."""
    user = "request.userInfo.username"
    expression = (
        f"!({user}.startsWith('system:') && !{user}.startsWith('system:serviceaccount:'))"
        f" && !{user}.startsWith('system:serviceaccount:kube-system:')"
        f" && !{user}.startsWith('system:serviceaccount:{namespace}:')"
        " && !('system:masters' in request.userInfo.groups)"
    )
    return MatchCondition(name=names.SKIP_CONTROL_PLANE_CONDITION, expression=expression)


ASSIGNABLE: Final = MatchCondition(
    name=names.ASSIGNABLE_CONDITION,
    expression=f"request.operation == 'CREATE' || {TENANT_METADATA_CONDITION}",
)
"""The mutating hook changes only new namespaces and namespaces whose tenant label or owner reference an
administrator sets, moves or removes: an update of a namespace in no tenant, before or after, is not sent."""

SKIP_CONTROLLERS: Final = MatchCondition(
    name=names.SKIP_CONTROLLERS_CONDITION,
    expression="!(request.userInfo.username.startsWith('system:')"
    " && !request.userInfo.username.startsWith('system:serviceaccount:'))"
    " && !request.userInfo.username.startsWith('system:serviceaccount:kube-system:')",
)
"""The cluster's own controllers (the garbage collector's finalizer updates), and no one else: unlike
:func:`skip_control_plane` it sends ``system:masters``, whose rules ``rules.enclave.dev`` must judge too."""

CLUSTER_CONTROLLERS: Final = MatchCondition(
    name=names.SKIP_CLUSTER_CONTROLLERS_CONDITION,
    expression="!(request.userInfo.username.startsWith('system:') && "
    "!request.userInfo.username.startsWith('system:serviceaccount:')) && "
    "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:') && "
    "!('system:masters' in request.userInfo.groups)",
)
"""The cluster's own controllers (``system:`` users, kube-system's service accounts, ``system:masters``):
the garbage collector and the namespace controller clean tenant namespaces and must never wait on Enclave."""

QUOTA_SKIP: Final = MatchCondition(
    name="skip-events-leases-ledgers",
    expression="!((request.resource.group == '' && request.resource.resource == 'events') || "
    "(request.resource.group == 'events.k8s.io' && request.resource.resource == 'events') || "
    "(request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases') || "
    "(request.resource.group == 'enclave.dev' && request.resource.resource == 'quantityledgers'))",
)
"""Objects no quota may count: admission writes ledgers and events itself and must never call itself."""

RESOURCES_SKIPPED: Final = (
    ("", "events"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("", "endpoints"),
    ("discovery.k8s.io", "endpointslices"),
)
"""Resources the rules hooks are never called for (mirrors ``enclave_admission.rules.exempt.UNGOVERNED``)."""


def skip_unjudged(namespace: str) -> MatchCondition:
    """A matchCondition keeping away from the rules hooks what :mod:`enclave_admission.rules.exempt` never
    judges: Enclave's own accounts, ``system:masters``, ``system:`` users that are not service accounts,
    :data:`RESOURCES_SKIPPED`, and the control plane's ``kube-root-ca.crt`` and ``default`` ServiceAccount."""
    user = "request.userInfo.username"
    resources = " || ".join(
        f"(request.resource.group == '{group}' && request.resource.resource == '{resource}')"
        for group, resource in RESOURCES_SKIPPED
    )
    expression = (
        f"!{user}.startsWith('system:serviceaccount:{namespace}:')"
        " && !('system:masters' in request.userInfo.groups)"
        f" && !({user}.startsWith('system:') && !{user}.startsWith('system:serviceaccount:'))"
        f" && !({resources})"
        # request.name is absent for generateName creations: test it before reading it
        " && !(request.resource.group == '' && request.resource.resource == 'configmaps'"
        " && has(request.name) && request.name == 'kube-root-ca.crt')"
        " && !(request.resource.group == '' && request.resource.resource == 'serviceaccounts'"
        " && has(request.name) && request.name == 'default')"
    )
    return MatchCondition(name=names.SKIP_UNJUDGED_CONDITION, expression=expression)


GLOBAL_QUOTA_RESOURCES: Final = [
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
]
"""The kinds whose usage admission evaluates for GlobalResourceQuotas (enclave_core.resourceusage)."""

EVERY_NAMESPACE: Final = frozenset({"globalquotas.enclave.dev"})
"""Hooks that see the system namespaces and Enclave's own too (no ``kubernetes.io/metadata.name NotIn``): a
GlobalResourceQuota counts every namespace it selects, kube-system included, and a namespace the hook did not
see would take the last unit without a reservation. Safe there because the hook fails open, reads nothing from
the API to answer, answers at once from memory where no quota selects the namespace, and writes only
QuantityLedgers, which no hook of Enclave's judges (the chart's ``everyNamespace: true``)."""

MANAGED_ROLE_BINDINGS: Final = LabelSelector(
    match_expressions=[LabelSelectorRequirement(key=names.MANAGED_BY, operator="In", values=[names.TENANTS_MANAGER])]
)
"""The RoleBindings enclave-tenants writes (owners', additional roles', components' namespace grants)."""

Condition = MatchCondition | Callable[[str], MatchCondition]
"""A matchCondition, or what makes one for Enclave's namespace."""

COMPONENTS: Final = ("admission", "pools", "quotas", "globalquotas", "replication")
"""What adds hooks: every installation (``admission``), and each component with kinds of its own to judge."""


@dataclass(frozen=True)
class Hook:
    """One default webhook: what sets it apart from the others."""

    name: str
    path: str
    failure: FailurePolicy
    rules: Sequence[WebhookRule] | None
    """None: written by its component (enclave-quotas sets the generic quota hook's to what its quotas count)."""
    switch: str = "admission"
    """What adds it: ``admission`` (always), a component of :data:`COMPONENTS`, or ``nodes`` (asked for)."""
    conditions: Sequence[Condition] = ()
    opts: WebhookOptions | None = None
    objects: LabelSelector | None = None
    """objectSelector (old or new object)."""
    namespaces: LabelSelector | None = None
    """namespaceSelector, before the system namespaces are excluded."""
    side_effects: SideEffects = "None"
    """``NoneOnDryRun`` for hooks that write (ledger reservations, audit Events), never for a dry run."""
    timeout: int = 5
    """Decisions come from memory in milliseconds; a long timeout only stretches an outage into slow calls."""
    reinvocation: ReinvocationPolicy | None = None
    """Set for a mutating hook."""

    @property
    def every_namespace(self) -> bool:
        """Whether it sees the system namespaces and Enclave's: the hooks that skip the control plane by user
        instead (a namespace hook's selector matches the namespace object itself), and :data:`EVERY_NAMESPACE`."""
        return skip_control_plane in self.conditions or self.name in EVERY_NAMESPACE


_NAMESPACE_RESOURCES = ["namespaces", "namespaces/status", "namespaces/finalize"]
_CREATE_UPDATE: list[Operation] = ["CREATE", "UPDATE"]
_WRITES: list[Operation] = ["CREATE", "UPDATE", "DELETE"]
_JUDGED_NAMESPACES = LabelSelector(
    match_expressions=[
        LabelSelectorRequirement(key=names.TENANT_LABEL, operator="Exists"),
        LabelSelectorRequirement(key=names.NATIVE_RULES_LABEL, operator="DoesNotExist"),
    ]
)
"""Tenant namespaces whose rules the webhook judges: not those where enclave-tenants found every rule enforced
by a ValidatingAdmissionPolicy (``spec.rules.engine: native``) and set :data:`names.NATIVE_RULES_LABEL`."""
_NATIVE_NAMESPACES = LabelSelector(
    match_expressions=[
        LabelSelectorRequirement(key=names.TENANT_LABEL, operator="Exists"),
        LabelSelectorRequirement(key=names.NATIVE_RULES_LABEL, operator="Exists"),
    ]
)
_RESOURCES = [
    WebhookRule(api_groups=["*"], api_versions=["*"], operations=_CREATE_UPDATE, resources=["*"], scope="Namespaced"),
    _rule("", ["pods/ephemeralcontainers"], _CREATE_UPDATE, "Namespaced"),
    _rule("", ["persistentvolumes"], _CREATE_UPDATE, "Cluster"),
]
_TENANT_USERS = WebhookOptions(administrators=True, service_users=True)
_REPLICATED = ["globaltenantresources", "tenantresources"]

HOOKS: Final[tuple[Hook, ...]] = (
    Hook(
        "namespaces.mutate.enclave.dev",
        routes.NAMESPACES_MUTATE,
        "Fail",
        [_rule("", ["namespaces"], _CREATE_UPDATE, "Cluster")],
        conditions=[ASSIGNABLE, skip_control_plane],
        opts=_TENANT_USERS,
        reinvocation="Never",
    ),
    Hook(
        "resources.mutate.enclave.dev",
        routes.RESOURCES_MUTATE,
        "Fail",
        _RESOURCES,
        conditions=[skip_unjudged],
        namespaces=_JUDGED_NAMESPACES,
        reinvocation="IfNeeded",
    ),
    Hook(
        "namespaces.enclave.dev",
        routes.NAMESPACES,
        "Fail",
        [_rule("", _NAMESPACE_RESOURCES, _WRITES, "Cluster")],
        conditions=[skip_control_plane],
        opts=WebhookOptions(administrators=True, service_users=True, tenant_metadata=True),
    ),
    Hook(
        "serviceaccounts.enclave.dev",
        routes.SERVICE_ACCOUNTS,
        "Fail",
        [_rule("", ["serviceaccounts"], _CREATE_UPDATE, "Namespaced")],
        objects=_exists(names.PROMOTED_LABEL),
    ),
    Hook(
        "rolebindings.enclave.dev",
        routes.ROLE_BINDINGS,
        "Fail",
        [_rule("rbac.authorization.k8s.io", ["rolebindings"], _WRITES, "Namespaced")],
        conditions=[skip_control_plane],
        objects=MANAGED_ROLE_BINDINGS,
    ),
    Hook(
        "tenants.enclave.dev",
        routes.TENANTS,
        "Fail",
        [
            _rule(API_GROUP, ["tenants"], _WRITES, "Cluster"),
            _rule(API_GROUP, ["tenantowners"], _CREATE_UPDATE, "Cluster"),
            _rule(API_GROUP, ["rulestatuses"], _CREATE_UPDATE, "Namespaced"),
        ],
        conditions=[skip_control_plane],
    ),
    Hook(
        "rules.enclave.dev",
        routes.RULES,
        "Ignore",
        [
            _rule(API_GROUP, ["tenants"], _CREATE_UPDATE, "Cluster"),
            _rule(API_GROUP, ["rulestatuses"], _CREATE_UPDATE, "Namespaced"),
        ],
        conditions=[SKIP_CONTROLLERS],
    ),
    Hook(
        "serviceconfigurations.enclave.dev",
        routes.SERVICE_CONFIGURATIONS,
        "Ignore",
        [_rule(API_GROUP, ["serviceconfigurations"], _CREATE_UPDATE, "Cluster")],
    ),
    Hook(
        "resources.enclave.dev",
        routes.RESOURCES,
        "Fail",
        _RESOURCES,
        conditions=[skip_unjudged],
        namespaces=_JUDGED_NAMESPACES,
        side_effects="NoneOnDryRun",
    ),
    # The tenant fence on volumes is no rule: in native namespaces claims still go to /resources.
    Hook(
        "volumeclaims.enclave.dev",
        routes.RESOURCES,
        "Fail",
        [_rule("", ["persistentvolumeclaims"], _CREATE_UPDATE, "Namespaced")],
        conditions=[skip_unjudged],
        namespaces=_NATIVE_NAMESPACES,
        side_effects="NoneOnDryRun",
    ),
    Hook(
        "nodes.enclave.dev",
        routes.NODES,
        "Fail",
        [_rule("", ["nodes", "nodes/status"], ["UPDATE"], "Cluster")],
        switch="nodes",
        opts=WebhookOptions(administrators=False, service_users=True),
        timeout=3,
    ),
    Hook(
        "quotas.enclave.dev",
        routes.QUOTAS,
        "Fail",
        None,
        switch="quotas",
        conditions=[QUOTA_SKIP],
        side_effects="NoneOnDryRun",
    ),
    Hook(
        "customquotas.enclave.dev",
        routes.CUSTOM_QUOTAS,
        "Ignore",
        [_rule(API_GROUP, ["customquotas", "globalcustomquotas"], _CREATE_UPDATE, "*")],
        switch="quotas",
    ),
    Hook(
        "globalquotas.enclave.dev",
        routes.GLOBAL_QUOTAS,
        "Ignore",
        [_rule("", GLOBAL_QUOTA_RESOURCES, _CREATE_UPDATE, "Namespaced")],
        switch="globalquotas",
        side_effects="NoneOnDryRun",
    ),
    Hook(
        "globalresourcequotas.enclave.dev",
        routes.GLOBAL_RESOURCE_QUOTAS,
        "Ignore",
        [_rule(API_GROUP, ["globalresourcequotas"], _CREATE_UPDATE, "Cluster")],
        switch="globalquotas",
    ),
    Hook(
        "replication.mutate.enclave.dev",
        routes.REPLICATION_MUTATE,
        "Ignore",
        [_rule(API_GROUP, _REPLICATED, _CREATE_UPDATE, "*")],
        switch="replication",
        reinvocation="Never",
    ),
    Hook(
        "replication.enclave.dev",
        routes.REPLICATION,
        "Fail",
        [_rule("*", ["*"], ["UPDATE", "DELETE"], "Namespaced")],
        switch="replication",
        conditions=[CLUSTER_CONTROLLERS],
        objects=_exists(names.ENCLAVE_MANAGED_BY),
    ),
    # 10 s: a template parse may take a while on a loaded replica
    Hook(
        "replication.spec.enclave.dev",
        routes.REPLICATION_SPEC,
        "Ignore",
        [_rule(API_GROUP, _REPLICATED, _CREATE_UPDATE, "*")],
        switch="replication",
        timeout=10,
    ),
    Hook(
        "resourcepoolclaims.mutate.enclave.dev",
        routes.RESOURCE_POOL_CLAIMS_MUTATE,
        "Fail",
        [_rule(API_GROUP, ["resourcepoolclaims"], ["CREATE"], "Namespaced")],
        switch="pools",
        conditions=[skip_control_plane],
        reinvocation="Never",
    ),
    Hook(
        "resourcepoolclaims.enclave.dev",
        routes.RESOURCE_POOL_CLAIMS,
        "Fail",
        [_rule(API_GROUP, ["resourcepoolclaims"], _WRITES, "Namespaced")],
        switch="pools",
        conditions=[skip_control_plane],
    ),
    Hook(
        "resourcepools.enclave.dev",
        routes.RESOURCE_POOLS,
        "Fail",
        [_rule(API_GROUP, ["resourcepools"], _CREATE_UPDATE, "Cluster")],
        switch="pools",
        conditions=[skip_control_plane],
    ),
)
"""Every default webhook, each side (mutating, validating) in the order it is written."""


def webhooks(
    client: WebhookClient,
    *,
    namespace: str = "enclave-system",
    nodes: bool = False,
    quotas: bool = False,
    pools: bool = False,
    replication: bool = False,
    globalquotas: bool = False,
) -> Admission:
    """The default ``spec.admission`` for an admission server reached through ``client``.

    ``namespace`` is where Enclave runs (its service accounts are skipped); ``nodes`` adds the node-metadata
    hook, off by default; ``quotas`` the custom quota hooks (with enclave-quotas); ``pools`` the ResourcePool
    and ResourcePoolClaim hooks (the chart renders them with the pools component); ``replication`` the
    replication protection and deprecated-settings hooks (with enclave-replication); ``globalquotas`` the
    GlobalResourceQuota reservation and validation hooks (with enclave-globalquotas).
    """
    asked = {"nodes": nodes, "quotas": quotas, "pools": pools, "replication": replication, "globalquotas": globalquotas}
    switches = {"admission", *(switch for switch, on in asked.items() if on)}
    excluded = LabelSelectorRequirement(
        key=names.NAMESPACE_NAME_LABEL, operator="NotIn", values=list(dict.fromkeys([*SYSTEM_NAMESPACES, namespace]))
    )
    mutating: list[MutatingWebhook] = []
    validating: list[ValidatingWebhook] = []
    for hook in HOOKS:
        if hook.switch not in switches:
            continue
        selector = hook.namespaces
        if not hook.every_namespace:
            selector = selector or LabelSelector()
            selector = LabelSelector(
                match_labels=selector.match_labels,
                match_expressions=[*(selector.match_expressions or []), excluded],
            )
        fields = {
            "name": hook.name,
            "path": hook.path,
            "failure_policy": hook.failure,
            "timeout_seconds": hook.timeout,
            "match_conditions": [c if isinstance(c, MatchCondition) else c(namespace) for c in hook.conditions] or None,
            "opts": hook.opts,
            "object_selector": hook.objects,
            "namespace_selector": selector,
            "rules": list(hook.rules) if hook.rules is not None else None,
            "admission_review_versions": ["v1"],
            "side_effects": hook.side_effects,
            "match_policy": "Equivalent",
        }
        if hook.reinvocation is None:
            validating.append(ValidatingWebhook.model_validate(fields).model_copy(deep=True))
        else:
            mutating.append(
                MutatingWebhook.model_validate({**fields, "reinvocation_policy": hook.reinvocation}).model_copy(
                    deep=True
                )
            )
    return Admission(
        mutating=MutatingAdmission(client=client, name="enclave-mutating-webhook-configuration", webhooks=mutating),
        validating=ValidatingAdmission(
            client=client, name="enclave-validating-webhook-configuration", webhooks=validating
        ),
    )


def hooks_by_component() -> dict[str, frozenset[str]]:
    """The webhook names each component needs registered for its kinds to be judged, by component name
    (``admission``: the hooks every install has; a component without hooks of its own is absent). Read from
    :data:`HOOKS`, so ``enclave doctor`` and the tests that compare what runs with what is registered cannot
    drift from what the chart renders."""
    return {
        component: frozenset(hook.name for hook in HOOKS if hook.switch == component)
        for component in COMPONENTS
        if any(hook.switch == component for hook in HOOKS)
    }


def url_client(url: str, ca_bundle: str | None = None) -> WebhookClient:
    """A ``url`` client (local runs: ``https://127.0.0.1:<port>``); the config component injects its CA when
    ``ca_bundle`` is None and the TLS reconciler is on."""
    return WebhookClient(url=url, ca_bundle=ca_bundle)

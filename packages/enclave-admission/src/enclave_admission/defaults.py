"""Enclave's default webhooks: ``spec.admission`` pointing kube-apiserver at this server's paths.

``webhooks(client)`` is what ``tox -e up`` (and any installation without the Helm chart) writes into the
ServiceConfiguration; the config component renders it into the two webhook configurations and injects the CA.
Every choice scopes a hook as tightly as its rule allows:

* **Enclave's kinds are matched in v1beta2 only, with ``matchPolicy: Equivalent``** (every hook): a write
  through v1beta1 is converted by kube-apiserver (through ``/convert``) before the hook sees it, so the
  deciding code reads one shape, the stored one, whatever version the client used.
* **System namespaces are excluded from every hook but the namespace hooks and the global quota
  reservations** (``kube-system``, ``kube-public``, ``kube-node-lease`` and Enclave's own namespace, by
  ``kubernetes.io/metadata.name NotIn``): a webhook outage must never stop the cluster's own machinery there.
* **Namespace hooks see every namespace, system ones included**, and ``namespaces/status`` and
  ``namespaces/finalize``: labelling kube-system into a tenant or adopting an unlabelled namespace are the
  very attacks they stop (a namespace hook's namespaceSelector matches the namespace object itself, so
  excluding kube-system there would leave it to RBAC alone), and both subresources can rewrite labels and
  owner references. They are fail-closed (ownership is the tenant fence). What gives them the same outage
  safety as the exclusion is a matchCondition that never sends the control plane's own requests:
  ``system:`` users that are not service accounts (kube-controller-manager, kubelets, the scheduler),
  kube-system's service accounts (the namespace controller, the garbage collector), Enclave's own service
  accounts, and ``system:masters``. An Enclave outage therefore never blocks namespace finalization or garbage
  collection. They are narrowed further with ``opts`` so that an outage blocks only those the fence is about:
  administrators and service users (``users``, aggregated TenantOwners, promoted service accounts), and, with
  ``tenantMetadata``, anyone whose request touches a namespace that carries, or carried, the tenant label or a
  Tenant owner reference (so a tenant's service account is still checked on its own namespace). A cluster
  operator or a GitOps service account outside those creating or changing a namespace in no tenant is never
  sent: admission would let it pass untouched anyway (docs/architecture.md, "Who an outage blocks").
* **Assignment is a separate mutating hook** with ``reinvocationPolicy: Never``: it depends only on the user and
  the tenant label, which later plugins do not change, and the validating hook sees the final object anyway.
  It receives only what it can change: administrators' and service users' creations, and their updates of
  namespaces with tenant metadata (``enclave.dev/assignable``).
* **Promotion** only sees service accounts that carry the promotion label before or after the change
  (objectSelector matches the old or the new object): other accounts never reach Enclave. It sees them in
  every namespace, not only tenant namespaces: a label written outside a tenant would promote the account the
  moment its namespace joins one. Fail-closed, since a promoted account can create namespaces.
* **Managed RoleBindings** (``rolebindings.enclave.dev``) sees only RoleBindings labelled
  ``app.kubernetes.io/managed-by: enclave-tenants`` (objectSelector, old or new object), skips the control plane
  and Enclave's own accounts by the same matchCondition as the namespace hooks, and fails closed: a tenant
  owner's ``admin`` would otherwise delete or rewrite the bindings that carry owners' and components' rights.
* **Tenants** are fail-closed: an outage must not let an accidental delete of a ``preventDeletion`` tenant
  cascade to its namespaces, nor a Tenant or TenantOwner name an owner the namespace hooks skip (a ``system:``
  user, a kube-system service account). Cluster-scoped, so the namespace exclusion would mean nothing; the
  control plane's own updates (the garbage collector's finalizers) are skipped by the same matchCondition.
* **Tenant rules** also pass through this hook: it refuses a Tenant or RuleStatus whose rules cannot work (CEL,
  regular expressions, CIDRs, naming the field) and a RuleStatus written by a tenant user (whose rules would
  override the tenant's).
* **Rule validity for everyone** (``rules.enclave.dev``, ``/rules``): the tenants hook skips ``system:masters``
  with the rest of the control plane, so a cluster administrator could store a rule that cannot work. This
  hook judges only rule validity (Tenant ``spec.rules``, RuleStatus ``spec``) on CREATE and UPDATE, and its
  matchCondition (:data:`SKIP_CONTROLLERS`) skips only the cluster's controllers (``system:`` users that are
  not service accounts, kube-system's service accounts), not ``system:masters``. It fails open: it must never
  keep an administrator from repairing a Tenant during an outage, and the tenants controller reports a broken
  rule that gets through (``Ready=False``) while admission fails closed on it.
* **ServiceConfiguration** fails open: the config component validates again and refuses to apply a bad
  configuration, and a fail-closed hook would keep you from repairing the configuration during an outage.
* **Nodes** is off unless asked for and narrowed to service users (the set admission treats as tenant users)
  with ``opts.serviceUsers``, so kubelets and controllers never reach it. It covers ``nodes/status`` too (a
  status update can rewrite a node's labels) and fails closed: forbidden node labels are usually the ones the
  tenants' node selectors use, and since only tenant users are sent, an outage stops nothing but their node
  patches.
* **Quotas** (with enclave-quotas, ``quotas=True``): the generic hook ``quotas.enclave.dev`` is written with no
  rules; enclave-quotas sets them to exactly the resources its quotas count (server-side apply, its own field
  manager), so no other write ever waits on Enclave. Fail-closed (a quota that lets objects through during an
  outage is no quota), ``NoneOnDryRun`` (it writes ledger reservations, never for a dry run), and it never
  sees Events, Leases or the ledgers themselves. CustomQuota/GlobalCustomQuota validation fails open, for the
  ServiceConfiguration's reason: the controller validates again and reports.
* **Replication** (``replication=True``, with enclave-replication): protection of replicated objects is
  fail-closed on UPDATE and DELETE of objects carrying ``enclave.dev/managed-by`` only (an objectSelector, so
  no other write waits on Enclave), excludes the system namespaces, and skips the cluster's controllers by a
  matchCondition, so the garbage collector and the namespace controller always clean tenant namespaces. The deprecated-settings conversion on
  GlobalTenantResources and TenantResources fails open: the controller converts the same way.
* **Pools** (``pools=True``, with the pools component): claim assignment (mutating, CREATE), claim and pool
  validation, all fail-closed: a claim admitted while Enclave is down could be moved out from under its usage
  or name a pool that does not select its namespace. Like the namespace hooks they skip the control plane with
  the matchCondition rather than a namespace exclusion, because the pools controller itself deletes bound
  claims when a pool with ``deleteBoundResources`` goes, and the namespace controller deletes claims with
  their namespace: neither may be refused.
* **Global quotas** (``globalquotas=True``, with enclave-globalquotas): reservations on CREATE and UPDATE of the
  kinds whose usage admission evaluates (pods, services, configmaps, secrets, persistentvolumeclaims,
  replicationcontrollers) in every namespace, the system ones and Enclave's own included (a quota counts every
  namespace it selects; :data:`EVERY_NAMESPACE` argues why that is safe), for every requester (cluster
  administrators and the cluster's controllers too: usage counts whoever creates the object, as a native
  ResourceQuota's does), and GlobalResourceQuota validation. Both fail open:
  the provisioned ResourceQuotas keep enforcing every shared limit during an outage (only the race between
  two namespaces for the last unit reopens), and the controller validates a quota again and reports it, so
  a fail-closed hook would stop every pod in the cluster for no safety gained.
* **Tenant rules** (``/resources`` validating, ``/resources/mutate`` mutating) see only namespaces carrying the
  tenant label (plus PersistentVolumes, whose tenant label they guard), every namespaced resource (``*/*``: a
  fixed list rather than one derived from the compiled rules, so kinds served by CRDs installed later, such as
  the Gateway API's Gateways, ListenerSets and routes or OpenShift's Routes, are judged with no configuration
  change and no rule write ever has to wait on a webhook reconfiguration) and ``pods/ephemeralcontainers``,
  on CREATE and UPDATE; no objectSelector, since a label a tenant can write must
  never decide whether its object is judged. A matchCondition (:func:`skip_unjudged`) keeps away what
  :mod:`enclave_admission.rules.exempt` never judges, so those requests cost no call: Enclave's own service
  accounts, ``system:masters``, ``system:`` users that are not service accounts, Events, Leases, Endpoints,
  EndpointSlices and the control plane's ``kube-root-ca.crt`` ConfigMap and ``default`` ServiceAccount.
  kube-system's controller service accounts are *not* skipped: Pods of a ReplicaSet are judged like a
  user's. Both fail closed (docs/architecture.md argues it: rules are what a platform promises, and an
  outage or a slow answer must not be a way around them); the validating one is ``NoneOnDryRun`` because
  it posts audit Events, never for dry runs. The mutating one is reinvoked ``IfNeeded``: managed values must
  survive later mutating plugins, and its patch is idempotent.
* ``timeoutSeconds`` is 5 or less everywhere: decisions come from memory in milliseconds, and a long timeout
  only stretches an outage into slow API calls.
"""

from __future__ import annotations

from typing import Literal

from enclave_admission import routes
from enclave_core import API_GROUP, API_VERSION
from enclave_core.api import names
from enclave_core.api.configuration import (
    TENANT_METADATA_CONDITION,
    Admission,
    MatchCondition,
    MutatingAdmission,
    MutatingWebhook,
    ValidatingAdmission,
    ValidatingWebhook,
    WebhookClient,
    WebhookOptions,
    WebhookRule,
)
from enclave_core.selectors import LabelSelector, LabelSelectorRequirement

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]
_NAMESPACE_RESOURCES = ["namespaces", "namespaces/status", "namespaces/finalize"]


def _rule(
    group: str, resources: list[str], operations: list[Operation], scope: Literal["Cluster", "Namespaced", "*"]
) -> WebhookRule:
    versions = [API_VERSION] if group == API_GROUP else ["*"]
    return WebhookRule(
        api_groups=[group], api_versions=versions, operations=operations, resources=resources, scope=scope
    )


SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def _exclude_system_namespaces(webhook: ValidatingWebhook, namespace: str) -> None:
    """Append ``kubernetes.io/metadata.name NotIn [system namespaces, Enclave's]`` to the namespaceSelector."""
    excluded = list(dict.fromkeys([*SYSTEM_NAMESPACES, namespace]))
    requirement = LabelSelectorRequirement(key=names.NAMESPACE_NAME_LABEL, operator="NotIn", values=excluded)
    selector = webhook.namespace_selector or LabelSelector()
    webhook.namespace_selector = LabelSelector(
        match_labels=selector.match_labels,
        match_expressions=[*(selector.match_expressions or []), requirement],
    )


ASSIGNABLE = MatchCondition(
    name=names.ASSIGNABLE_CONDITION,
    expression=f"request.operation == 'CREATE' || {TENANT_METADATA_CONDITION}",
)
"""The mutating hook changes only new namespaces and namespaces whose tenant label or owner reference an
administrator sets, moves or removes: an update of a namespace in no tenant, before or after, is not sent."""


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


SKIP_CONTROLLERS = MatchCondition(
    name=names.SKIP_CONTROLLERS_CONDITION,
    expression="!(request.userInfo.username.startsWith('system:')"
    " && !request.userInfo.username.startsWith('system:serviceaccount:'))"
    " && !request.userInfo.username.startsWith('system:serviceaccount:kube-system:')",
)
"""The cluster's own controllers (the garbage collector's finalizer updates), and no one else: unlike
:func:`skip_control_plane` it sends ``system:masters``, whose rules ``rules.enclave.dev`` must judge too."""


QUOTA_SKIP = MatchCondition(
    name="skip-events-leases-ledgers",
    expression="!((request.resource.group == '' && request.resource.resource == 'events') || "
    "(request.resource.group == 'events.k8s.io' && request.resource.resource == 'events') || "
    "(request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases') || "
    "(request.resource.group == 'enclave.dev' && request.resource.resource == 'quantityledgers'))",
)
"""Objects no quota may count: admission writes ledgers and events itself and must never call itself."""


def _quota_hooks() -> list[ValidatingWebhook]:
    return [
        ValidatingWebhook(
            name="quotas.enclave.dev",
            path=routes.QUOTAS,
            failure_policy="Fail",
            timeout_seconds=5,
            match_conditions=[QUOTA_SKIP],
            admission_review_versions=["v1"],
            side_effects="NoneOnDryRun",
            match_policy="Equivalent",
        ),
        ValidatingWebhook(
            name="customquotas.enclave.dev",
            path=routes.CUSTOM_QUOTAS,
            failure_policy="Ignore",
            timeout_seconds=5,
            rules=[_rule(API_GROUP, ["customquotas", "globalcustomquotas"], ["CREATE", "UPDATE"], "*")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
    ]


GLOBAL_QUOTA_RESOURCES = [
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
]
"""The kinds whose usage admission evaluates for GlobalResourceQuotas (enclave_core.resourceusage)."""


EVERY_NAMESPACE = frozenset({"globalquotas.enclave.dev"})
"""Hooks that see the system namespaces and Enclave's own too (no ``kubernetes.io/metadata.name NotIn``): a
GlobalResourceQuota counts every namespace it selects, kube-system included, and a namespace the hook did not
see would take the last unit without a reservation. Safe there because the hook fails open, reads nothing from
the API to answer, answers at once from memory where no quota selects the namespace, and writes only
QuantityLedgers, which no hook of Enclave's judges (the chart's ``everyNamespace: true``)."""


def _globalquota_hooks() -> list[ValidatingWebhook]:
    return [
        ValidatingWebhook(
            name="globalquotas.enclave.dev",
            path=routes.GLOBAL_QUOTAS,
            failure_policy="Ignore",
            timeout_seconds=5,
            rules=[_rule("", GLOBAL_QUOTA_RESOURCES, ["CREATE", "UPDATE"], "Namespaced")],
            admission_review_versions=["v1"],
            side_effects="NoneOnDryRun",
            match_policy="Equivalent",
        ),
        ValidatingWebhook(
            name="globalresourcequotas.enclave.dev",
            path=routes.GLOBAL_RESOURCE_QUOTAS,
            failure_policy="Ignore",
            timeout_seconds=5,
            rules=[_rule(API_GROUP, ["globalresourcequotas"], ["CREATE", "UPDATE"], "Cluster")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
    ]


def _replication_settings_hook(namespace: str) -> MutatingWebhook:
    """Deprecated settings -> per-block policy. Ignore: the controller applies the same conversion."""
    hook = MutatingWebhook(
        name="replication.mutate.enclave.dev",
        path=routes.REPLICATION_MUTATE,
        failure_policy="Ignore",
        timeout_seconds=5,
        reinvocation_policy="Never",
        rules=[_rule(API_GROUP, ["globaltenantresources", "tenantresources"], ["CREATE", "UPDATE"], "*")],
        admission_review_versions=["v1"],
        side_effects="None",
        match_policy="Equivalent",
    )
    _exclude_system_namespaces(hook, namespace)
    return hook


def _replication_spec_hook() -> ValidatingWebhook:
    """GlobalTenantResource/TenantResource fields that cannot work (enclave_admission.replication.spec).
    Ignore: the controller checks the same and reports in status; 10s since a template parse may take a while
    on a loaded replica."""
    return ValidatingWebhook(
        name="replication.spec.enclave.dev",
        path=routes.REPLICATION_SPEC,
        failure_policy="Ignore",
        timeout_seconds=10,
        rules=[_rule(API_GROUP, ["globaltenantresources", "tenantresources"], ["CREATE", "UPDATE"], "*")],
        admission_review_versions=["v1"],
        side_effects="None",
        match_policy="Equivalent",
    )


CLUSTER_CONTROLLERS = MatchCondition(
    name=names.SKIP_CLUSTER_CONTROLLERS_CONDITION,
    expression="!(request.userInfo.username.startsWith('system:') && "
    "!request.userInfo.username.startsWith('system:serviceaccount:')) && "
    "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:') && "
    "!('system:masters' in request.userInfo.groups)",
)
"""The cluster's own controllers (``system:`` users, kube-system's service accounts, ``system:masters``):
the garbage collector and the namespace controller clean tenant namespaces and must never wait on Enclave."""


def _replication_protection_hook() -> ValidatingWebhook:
    """Managed objects (label ``enclave.dev/managed-by``, old or new object), UPDATE and DELETE, fail-closed:
    replicated objects are often the fence itself (NetworkPolicies, LimitRanges). System namespaces are
    excluded like every hook's, and the cluster's controllers are skipped wherever they clean up."""
    return ValidatingWebhook(
        name="replication.enclave.dev",
        path=routes.REPLICATION,
        failure_policy="Fail",
        timeout_seconds=5,
        match_conditions=[CLUSTER_CONTROLLERS],
        object_selector=LabelSelector(
            match_expressions=[LabelSelectorRequirement(key=names.ENCLAVE_MANAGED_BY, operator="Exists")]
        ),
        rules=[_rule("*", ["*"], ["UPDATE", "DELETE"], "Namespaced")],
        admission_review_versions=["v1"],
        side_effects="None",
        match_policy="Equivalent",
    )


MANAGED_ROLE_BINDINGS = LabelSelector(
    match_expressions=[LabelSelectorRequirement(key=names.MANAGED_BY, operator="In", values=[names.TENANTS_MANAGER])]
)
"""The RoleBindings enclave-tenants writes (owners', additional roles', components' namespace grants)."""


def _managed_role_bindings_hook(skip: MatchCondition) -> ValidatingWebhook:
    """RoleBindings labelled as enclave-tenants', old or new object, CREATE/UPDATE/DELETE, fail-closed: they are
    the fence's own rights in tenant namespaces. Enclave's components and the control plane are skipped by user
    (``skip``), so enclave-tenants and the namespace controller never wait on it; every other RoleBinding write
    never reaches Enclave (the objectSelector)."""
    return ValidatingWebhook(
        name="rolebindings.enclave.dev",
        path=routes.ROLE_BINDINGS,
        failure_policy="Fail",
        timeout_seconds=5,
        match_conditions=[skip],
        object_selector=MANAGED_ROLE_BINDINGS,
        rules=[_rule("rbac.authorization.k8s.io", ["rolebindings"], ["CREATE", "UPDATE", "DELETE"], "Namespaced")],
        admission_review_versions=["v1"],
        side_effects="None",
        match_policy="Equivalent",
    )


RESOURCES_SKIPPED = (
    ("", "events"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("", "endpoints"),
    ("discovery.k8s.io", "endpointslices"),
)
"""Resources the rules hooks are never called for (mirrors ``enclave_admission.rules.exempt.UNGOVERNED``)."""


def skip_unjudged(namespace: str) -> MatchCondition:
    """A matchCondition keeping away from the rules hooks what they never judge (see the module doc)."""
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


def _resources_rules() -> list[WebhookRule]:
    return [
        WebhookRule(
            api_groups=["*"], api_versions=["*"], operations=["CREATE", "UPDATE"], resources=["*"], scope="Namespaced"
        ),
        _rule("", ["pods/ephemeralcontainers"], ["CREATE", "UPDATE"], "Namespaced"),
        _rule("", ["persistentvolumes"], ["CREATE", "UPDATE"], "Cluster"),
    ]


def _tenant_namespaces() -> LabelSelector:
    return LabelSelector(match_expressions=[LabelSelectorRequirement(key=names.TENANT_LABEL, operator="Exists")])


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
    skip = skip_control_plane(namespace)
    mutating = [
        MutatingWebhook(
            name="namespaces.mutate.enclave.dev",
            path=routes.NAMESPACES_MUTATE,
            failure_policy="Fail",
            timeout_seconds=5,
            reinvocation_policy="Never",
            match_conditions=[ASSIGNABLE, skip],
            opts=WebhookOptions(administrators=True, service_users=True),
            rules=[_rule("", ["namespaces"], ["CREATE", "UPDATE"], "Cluster")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
        MutatingWebhook(
            name="resources.mutate.enclave.dev",
            path=routes.RESOURCES_MUTATE,
            failure_policy="Fail",
            timeout_seconds=5,
            reinvocation_policy="IfNeeded",
            namespace_selector=_tenant_namespaces(),
            match_conditions=[skip_unjudged(namespace)],
            rules=_resources_rules(),
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
    ]
    validating = [
        ValidatingWebhook(
            name="namespaces.enclave.dev",
            path=routes.NAMESPACES,
            failure_policy="Fail",
            timeout_seconds=5,
            match_conditions=[skip],
            opts=WebhookOptions(administrators=True, service_users=True, tenant_metadata=True),
            rules=[_rule("", _NAMESPACE_RESOURCES, ["CREATE", "UPDATE", "DELETE"], "Cluster")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
        ValidatingWebhook(
            name="serviceaccounts.enclave.dev",
            path=routes.SERVICE_ACCOUNTS,
            failure_policy="Fail",
            timeout_seconds=5,
            # every namespace (but the system ones): a label written outside a tenant would promote the account
            # the moment its namespace joins one, so only cluster administrators may write it there
            object_selector=LabelSelector(
                match_expressions=[LabelSelectorRequirement(key=names.PROMOTED_LABEL, operator="Exists")]
            ),
            rules=[_rule("", ["serviceaccounts"], ["CREATE", "UPDATE"], "Namespaced")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
        _managed_role_bindings_hook(skip),
        ValidatingWebhook(
            name="tenants.enclave.dev",
            path=routes.TENANTS,
            failure_policy="Fail",
            timeout_seconds=5,
            match_conditions=[skip],
            rules=[
                _rule(API_GROUP, ["tenants"], ["CREATE", "UPDATE", "DELETE"], "Cluster"),
                _rule(API_GROUP, ["tenantowners"], ["CREATE", "UPDATE"], "Cluster"),
                _rule(API_GROUP, ["rulestatuses"], ["CREATE", "UPDATE"], "Namespaced"),
            ],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
        ValidatingWebhook(
            name="rules.enclave.dev",
            path=routes.RULES,
            failure_policy="Ignore",
            timeout_seconds=5,
            match_conditions=[SKIP_CONTROLLERS],
            rules=[
                _rule(API_GROUP, ["tenants"], ["CREATE", "UPDATE"], "Cluster"),
                _rule(API_GROUP, ["rulestatuses"], ["CREATE", "UPDATE"], "Namespaced"),
            ],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
        ValidatingWebhook(
            name="serviceconfigurations.enclave.dev",
            path=routes.SERVICE_CONFIGURATIONS,
            failure_policy="Ignore",
            timeout_seconds=5,
            rules=[_rule(API_GROUP, ["serviceconfigurations"], ["CREATE", "UPDATE"], "Cluster")],
            admission_review_versions=["v1"],
            side_effects="None",
            match_policy="Equivalent",
        ),
    ]
    validating.append(
        ValidatingWebhook(
            name="resources.enclave.dev",
            path=routes.RESOURCES,
            failure_policy="Fail",
            timeout_seconds=5,
            namespace_selector=_tenant_namespaces(),
            match_conditions=[skip_unjudged(namespace)],
            rules=_resources_rules(),
            admission_review_versions=["v1"],
            side_effects="NoneOnDryRun",
            match_policy="Equivalent",
        )
    )
    if nodes:
        validating.append(
            ValidatingWebhook(
                name="nodes.enclave.dev",
                path=routes.NODES,
                failure_policy="Fail",
                timeout_seconds=3,
                opts=WebhookOptions(administrators=False, service_users=True),
                rules=[_rule("", ["nodes", "nodes/status"], ["UPDATE"], "Cluster")],
                admission_review_versions=["v1"],
                side_effects="None",
                match_policy="Equivalent",
            )
        )
    if quotas:
        validating += _quota_hooks()
    if globalquotas:
        validating += _globalquota_hooks()
    if replication:
        mutating.append(_replication_settings_hook(namespace))
        validating.append(_replication_protection_hook())
        validating.append(_replication_spec_hook())
    for webhook in validating:  # every hook but those that skip the control plane by user instead
        if skip not in (webhook.match_conditions or []) and webhook.name not in EVERY_NAMESPACE:
            _exclude_system_namespaces(webhook, namespace)
    for hook in mutating:
        if hook.name == "resources.mutate.enclave.dev":
            _exclude_system_namespaces(hook, namespace)
    if pools:
        mutating.append(
            MutatingWebhook(
                name="resourcepoolclaims.mutate.enclave.dev",
                path=routes.RESOURCE_POOL_CLAIMS_MUTATE,
                failure_policy="Fail",
                timeout_seconds=5,
                reinvocation_policy="Never",
                match_conditions=[skip],
                rules=[_rule(API_GROUP, ["resourcepoolclaims"], ["CREATE"], "Namespaced")],
                admission_review_versions=["v1"],
                side_effects="None",
                match_policy="Equivalent",
            )
        )
        validating += [
            ValidatingWebhook(
                name="resourcepoolclaims.enclave.dev",
                path=routes.RESOURCE_POOL_CLAIMS,
                failure_policy="Fail",
                timeout_seconds=5,
                match_conditions=[skip],
                rules=[_rule(API_GROUP, ["resourcepoolclaims"], ["CREATE", "UPDATE", "DELETE"], "Namespaced")],
                admission_review_versions=["v1"],
                side_effects="None",
                match_policy="Equivalent",
            ),
            ValidatingWebhook(
                name="resourcepools.enclave.dev",
                path=routes.RESOURCE_POOLS,
                failure_policy="Fail",
                timeout_seconds=5,
                match_conditions=[skip],
                rules=[_rule(API_GROUP, ["resourcepools"], ["CREATE", "UPDATE"], "Cluster")],
                admission_review_versions=["v1"],
                side_effects="None",
                match_policy="Equivalent",
            ),
        ]
    return Admission(
        mutating=MutatingAdmission(client=client, name="enclave-mutating-webhook-configuration", webhooks=mutating),
        validating=ValidatingAdmission(
            client=client, name="enclave-validating-webhook-configuration", webhooks=validating
        ),
    )


def hooks_by_component() -> dict[str, frozenset[str]]:
    """The webhook names each component needs registered for its kinds to be judged, by component name.

    Derived from :func:`webhooks` itself (the hooks one switch adds to the defaults), so ``enclave doctor``
    and the tests that compare what runs with what is registered cannot drift from what the chart renders.
    ``admission`` lists the hooks every install has; a component without hooks of its own is absent."""
    probe = url_client("https://enclave.invalid")

    def names(admission: Admission) -> frozenset[str]:
        found: set[str] = set()
        for side in (admission.mutating, admission.validating):
            found.update(hook.name for hook in ((side.webhooks or []) if side is not None else []))
        return frozenset(found)

    base = names(webhooks(probe))
    switches = {
        "pools": webhooks(probe, pools=True),
        "quotas": webhooks(probe, quotas=True),
        "globalquotas": webhooks(probe, globalquotas=True),
        "replication": webhooks(probe, replication=True),
    }
    found = {"admission": base}
    found.update({component: names(admission) - base for component, admission in switches.items()})
    return found


def url_client(url: str, ca_bundle: str | None = None) -> WebhookClient:
    """A ``url`` client (local runs: ``https://127.0.0.1:<port>``); the config component injects its CA when
    ``ca_bundle`` is None and the TLS reconciler is on."""
    return WebhookClient(url=url, ca_bundle=ca_bundle)

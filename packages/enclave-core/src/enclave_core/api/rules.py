"""Admission rules: the rule body shared by Tenant.spec.rules and RuleStatus, and RuleStatus itself.

A rule selects requests (namespace selection, ``audience``, ``enforce.conditions``), may mutate them
(``mutate``), constrains them (``enforce``) and provisions native quota (``quota``). The tenants
controller accumulates the rules that apply to a namespace into that namespace's RuleStatus, so
admission reads one object per request. Sub-objects the specification leaves open (workloads
policies, mutations, quota entries) follow a first design documented in docs/api.md.

List and map sizes are bounded because kube-apiserver estimates the worst-case cost of every CEL
rule from those bounds and refuses a CRD whose estimate exceeds its budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Final, Literal, TypeAlias

from pydantic import Field

from enclave_core.api.meta import (
    ApiModel,
    Condition,
    Count,
    Generation,
    Int32,
    Int64,
    KubeObject,
    LabelSelector,
    ScopeSelector,
    StatusModel,
    ValueMatcher,
)
from enclave_core.api.schema import Extra, Rule, TypeExtras
from enclave_core.quantity import IntOrString, QuantityValue
from enclave_core.resourcequota import ScopeName

__all__ = [
    "AppliedRule",
    "Audience",
    "CidrList",
    "Cidrs",
    "DisruptionBudgetPolicy",
    "Enforce",
    "EnforceCondition",
    "HostnameList",
    "IngressPolicy",
    "KindScope",
    "MetadataMutation",
    "MetadataRule",
    "MetadataValue",
    "Mutation",
    "NetworkPolicies",
    "NetworkPolicy",
    "NetworkRules",
    "NodePortRange",
    "NodePorts",
    "PlacementPolicy",
    "RegistryRule",
    "ResourceBounds",
    "ResourcesPolicy",
    "RuleBody",
    "RuleOrigin",
    "RuleQuota",
    "RuleStatus",
    "RuleStatusStatus",
    "SecurityPolicy",
    "ServicesPolicy",
    "StoragePolicy",
    "Toleration",
    "VolumeAccess",
    "WorkloadMutation",
    "WorkloadsPolicy",
]

Action: TypeAlias = Literal["allow", "deny", "audit"]
AudienceKind: TypeAlias = Literal["User", "Group", "ServiceAccount", "Custom"]
IngressType: TypeAlias = Literal["Ingress", "Route", "ListenerSet", "HTTPRoute", "Gateway", "TLSRoute", "GRPCRoute"]
ServiceType: TypeAlias = Literal["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]
QosClass: TypeAlias = Literal["Guaranteed", "Burstable", "BestEffort"]
PullPolicy: TypeAlias = Literal["Always", "IfNotPresent", "Never"]

WORKLOAD_TARGET: Final = (
    r"^(Pod|Deployment|StatefulSet|DaemonSet|ReplicaSet|ReplicationController|Job|CronJob)"
    r"(/(containers|initContainers|ephemeralContainers))?$"
)
"""``<Kind>`` or ``<Kind>/<container list>``: which workloads, and which part of their Pod spec."""

_Matchers = Annotated[list[ValueMatcher] | None, Field(max_length=64)]
_Keys = Annotated[list[Annotated[str, Field(max_length=317)]] | None, Field(max_length=64)]
_Resources = Annotated[dict[str, QuantityValue] | None, Field(max_length=32)]


Cidrs = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=64)]] | None,
    Field(max_length=256),
]
"""CIDRs (a single address counts as a host CIDR)."""

_CIDR_RULES: Final = (
    Rule(
        rule="self.all(c, isCIDR(c) || isIP(c))",
        message="cidrs: every entry must be an IP address or a CIDR such as 10.0.0.0/8 or 2001:db8::/32",
    ),
)


class Audience(ApiModel):
    """A request subject a rule is limited to."""

    kind: AudienceKind
    """User, Group, ServiceAccount (`<namespace>:<name>` or the full `system:serviceaccount:...` username), or Custom."""
    name: Annotated[str, Field(min_length=1, max_length=512)]
    """Name of the subject; for Custom a CEL boolean over `request` (`request.userInfo.username`, `request.userInfo.groups`, `request.operation`, `request.namespace`, `request.kind`), true to include the requester (an error includes it too: the rule then applies)."""


class EnforceCondition(ApiModel):
    """A CEL boolean gating a whole rule."""

    expression: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL boolean; a false condition skips the rule, an error rejects the request unless another is false."""
    name: Annotated[str | None, Field(max_length=63)] = None
    """Name, unique within the rule, reported in denials and events."""


class IngressPolicy(ApiModel):
    """Hostnames allowed on (or denied to) ingress-like resources."""

    hostnames: _Matchers = None
    """Hostname matchers."""
    types: Annotated[list[IngressType] | None, Field(max_length=7)] = None
    """Resource types the rule applies to; empty means all of them."""


class MetadataValue(ApiModel):
    """Constraints on one label or annotation key."""

    default: Annotated[str | None, Field(max_length=4096)] = None
    """Value set by admission when the key is absent (not reconciled later)."""
    managed: Annotated[str | None, Field(max_length=4096)] = None
    """Value enforced by admission and reconciled by the controller when the rule changes."""
    required: bool = False
    """The key must be present (meaningful only with action allow)."""
    values: Annotated[list[ValueMatcher] | None, Field(max_length=16)] = None
    """Allowed (allow) or matched (deny, audit) values."""


_MetadataMap = Annotated[dict[str, MetadataValue] | None, Field(max_length=64)]


class MetadataRule(ApiModel):
    """Metadata constraints on namespaced resources of some kinds."""

    kinds: Annotated[list[Annotated[str, Field(min_length=1, max_length=63)]], Field(min_length=1, max_length=64)]
    """Kinds the rule applies to; `*` for all."""
    api_groups: Annotated[list[Annotated[str, Field(max_length=316)]] | None, Field(max_length=64)] = None
    """`<group>` or `<group>/<version>`; empty means core v1; `*` for all."""
    annotations: _MetadataMap = None
    """Constraints per annotation key."""
    labels: _MetadataMap = None
    """Constraints per label key."""


class NetworkPolicy(ApiModel):
    """Address grants allowed in one direction."""

    crd: ClassVar[TypeExtras] = TypeExtras(field_rules={"cidrs": _CIDR_RULES})

    cidrs: Cidrs = None
    """Address ranges; empty or omitted imposes no constraint."""


class NetworkPolicies(ApiModel):
    """Native NetworkPolicy address grants, per direction."""

    egress: NetworkPolicy | None = None
    """Egress `ipBlock` grants."""
    ingress: NetworkPolicy | None = None
    """Ingress `ipBlock` grants."""


class NetworkRules(ApiModel):
    """Network enforcement."""

    policies: NetworkPolicies | None = None
    """NetworkPolicy address grants."""


class CidrList(ApiModel):
    """A list of address ranges."""

    crd: ClassVar[TypeExtras] = TypeExtras(field_rules={"cidrs": _CIDR_RULES})

    cidrs: Cidrs = None
    """Address ranges; single addresses are host CIDRs."""


class HostnameList(ApiModel):
    """A list of hostname matchers."""

    hostnames: _Matchers = None
    """Hostname matchers; empty means no extra restriction."""


class NodePortRange(ApiModel):
    """An inclusive range of node ports."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(Rule(rule="self.from <= self.to", message="nodePorts: from must be <= to", field_path=".from"),)
    )

    from_: Annotated[int, Field(ge=1, le=65535, alias="from"), Extra(format="int32")]
    """First port, 1 to 65535."""
    to: Annotated[int, Field(ge=1, le=65535), Extra(format="int32")]
    """Last port, 1 to 65535, not below `from`."""


class NodePorts(ApiModel):
    """Explicitly requested node ports."""

    ports: Annotated[list[NodePortRange] | None, Field(max_length=64)] = None
    """Port ranges; empty means no extra restriction."""


class ServicesPolicy(ApiModel):
    """Service constraints."""

    types: Annotated[list[ServiceType] | None, Field(max_length=4)] = None
    """Service types the rule applies to."""
    external_i_ps: CidrList | None = Field(None, alias="externalIPs")
    """spec.externalIPs; for deny an empty list denies every external IP."""
    external_names: HostnameList | None = None
    """spec.externalName of ExternalName services."""
    load_balancers: CidrList | None = None
    """spec.loadBalancerIP and spec.loadBalancerSourceRanges."""
    node_ports: NodePorts | None = None
    """Explicitly requested nodePorts."""


class VolumeAccess(ApiModel):
    """Persistent volumes (without a tenant ownership label) the rule grants or denies."""

    selector: LabelSelector
    """Volumes selected; an explicit empty selector matches all volumes."""
    name: Annotated[str | None, Field(max_length=63)] = None
    """Name of the entry, for messages."""


class StoragePolicy(ApiModel):
    """Storage access."""

    volumes: Annotated[list[VolumeAccess] | None, Field(max_length=64)] = None
    """Entries are ORed; the last matching allow or deny decides."""


class DisruptionBudgetPolicy(ApiModel):
    """PodDisruptionBudget expectations for selected workloads."""

    required: bool = False
    """Selected Deployments, StatefulSets, ReplicaSets and ReplicationControllers with more than one replica must be
    covered by a PodDisruptionBudget of their namespace selecting their Pod template's labels (create it first)."""
    max_unavailable: IntOrString | None = None
    """Largest maxUnavailable (number or percentage) a PodDisruptionBudget may declare."""


class Toleration(ApiModel):
    """A Pod toleration (core/v1 shape)."""

    key: Annotated[str | None, Field(max_length=317)] = None
    """Taint key; empty with operator Exists tolerates everything."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists or Equal."""
    value: Annotated[str | None, Field(max_length=63)] = None
    """Taint value for Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect; empty matches all effects."""
    toleration_seconds: Int64 | None = None
    """How long a NoExecute taint is tolerated."""


class PlacementPolicy(ApiModel):
    """Where Pods may run."""

    schedulers: _Matchers = None
    """spec.schedulerName values."""
    priority_classes: _Matchers = None
    """spec.priorityClassName values."""
    runtime_classes: _Matchers = None
    """spec.runtimeClassName values."""
    node_selector_keys: _Keys = None
    """nodeSelector keys the rule applies to (for example keys a tenant may not override)."""
    tolerations: Annotated[list[Toleration] | None, Field(max_length=32)] = None
    """Tolerations the rule applies to."""


class RegistryRule(ApiModel):
    """Container image registries and the pull policies allowed with them."""

    url: Annotated[str, Field(min_length=1, max_length=1024)]
    """Regular expression matched against the whole image reference, e.g. `^registry\\.example\\.com/`."""
    pull_policies: Annotated[list[PullPolicy] | None, Field(max_length=3)] = None
    """imagePullPolicy values allowed for images of this registry; empty means any."""


class ResourceBounds(ApiModel):
    """Bounds on container requests or limits."""

    required: _Keys = None
    """Resource names every selected container must declare."""
    min: _Resources = None
    """Lowest allowed amount per resource."""
    max: _Resources = None
    """Highest allowed amount per resource."""


class ResourcesPolicy(ApiModel):
    """Container resource requests and limits."""

    requests: ResourceBounds | None = None
    """Bounds on requests."""
    limits: ResourceBounds | None = None
    """Bounds on limits."""


class SecurityPolicy(ApiModel):
    """Pod security features; a workload matches when it uses any listed feature."""

    privileged: bool | None = None
    """Privileged containers."""
    allow_privilege_escalation: bool | None = None
    """Containers allowing privilege escalation (unset counts as allowed: only an explicit false does not)."""
    host_namespaces: bool | None = None
    """hostNetwork, hostPID or hostIPC."""
    host_ports: bool | None = None
    """Containers binding host ports."""
    host_paths: _Matchers = None
    """hostPath volumes by path, normalised (`//etc/./x/` is `/etc/x`); exact values are directory prefixes."""
    capabilities: _Keys = None
    """Added Linux capabilities, e.g. NET_ADMIN (with or without `CAP_`, any case); `ALL` for any."""


class WorkloadsPolicy(ApiModel):
    """Workload enforcement."""

    qos_classes: Annotated[list[QosClass] | None, Field(max_length=3)] = None
    """Pod QoS classes the rule applies to."""
    targets: Annotated[
        list[Annotated[str, Field(pattern=WORKLOAD_TARGET, max_length=64)]] | None, Field(max_length=32)
    ] = None
    """`<Kind>` or `<Kind>/<containers|initContainers|ephemeralContainers>`; omitted means Pod only."""
    schedulers: _Matchers = None
    """Deprecated: use placement.schedulers (a match in either counts)."""
    disruption_budgets: DisruptionBudgetPolicy | None = None
    """PodDisruptionBudget expectations."""
    placement: PlacementPolicy | None = None
    """Scheduling constraints."""
    registries: Annotated[list[RegistryRule] | None, Field(max_length=64)] = None
    """Image registries."""
    resources: ResourcesPolicy | None = None
    """Requests and limits."""
    security: SecurityPolicy | None = None
    """Security features."""


class Enforce(ApiModel):
    """What a rule checks and what it does on a match."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        field_rules={
            "conditions": (
                Rule(
                    rule="self.all(c, !has(c.name) || self.filter(d, has(d.name) && d.name == c.name).size() == 1)",
                    message="enforce.conditions: names must be unique within a rule",
                ),
            )
        }
    )

    action: Action = "deny"
    """allow, deny or audit (post an event instead of denying)."""
    conditions: Annotated[list[EnforceCondition] | None, Field(max_length=16)] = None
    """CEL booleans that must all be true for the rule to apply; empty means apply."""
    ingress: IngressPolicy | None = None
    """Hostname enforcement."""
    metadata: Annotated[list[MetadataRule] | None, Field(max_length=16)] = None
    """Metadata constraints."""
    network: NetworkRules | None = None
    """NetworkPolicy address grants."""
    services: ServicesPolicy | None = None
    """Service constraints."""
    storage: StoragePolicy | None = None
    """Persistent volume access."""
    workloads: WorkloadsPolicy | None = None
    """Workload constraints."""


class MetadataMutation(ApiModel):
    """Set labels and annotations on created or updated namespaced resources."""

    kinds: Annotated[list[Annotated[str, Field(min_length=1, max_length=63)]], Field(min_length=1, max_length=64)]
    """Kinds mutated; `*` for all."""
    api_groups: Annotated[list[Annotated[str, Field(max_length=316)]] | None, Field(max_length=64)] = None
    """`<group>` or `<group>/<version>`; empty means core v1; `*` for all."""
    labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels to set."""
    annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Annotations to set."""
    overwrite: bool = False
    """Replace values already present; otherwise only absent keys are set."""


class WorkloadMutation(ApiModel):
    """Defaults applied to Pods when they are created (CREATE of `pods` only): never on UPDATE, never to a
    controller's Pod template (its Pods get them when the controller creates them), never through the
    `pods/ephemeralcontainers` subresource. Targets naming another kind than Pod select nothing."""

    targets: Annotated[
        list[Annotated[str, Field(pattern=WORKLOAD_TARGET, max_length=64)]] | None, Field(max_length=32)
    ] = None
    """Parts of the Pod spec mutated (`Pod/containers`...); omitted means every container list."""
    node_selector: Annotated[dict[str, str] | None, Field(max_length=32)] = None
    """nodeSelector entries added."""
    tolerations: Annotated[list[Toleration] | None, Field(max_length=32)] = None
    """Tolerations added."""
    scheduler_name: Annotated[str | None, Field(max_length=253)] = None
    """schedulerName set when absent (a Pod naming none arrives as `default-scheduler`, which counts as absent)."""
    priority_class_name: Annotated[str | None, Field(max_length=253)] = None
    """priorityClassName set when absent; kube-apiserver then resolves the class's priority (with a globalDefault
    PriorityClass it names that class before webhooks run, so the field is never absent)."""
    runtime_class_name: Annotated[str | None, Field(max_length=253)] = None
    """runtimeClassName set when absent; kube-apiserver then adds the class's overhead and scheduling."""
    image_pull_policy: PullPolicy | None = None
    """imagePullPolicy forced on every selected container."""
    default_requests: _Resources = None
    """Requests set on containers that declare none for the resource (never above the container's limit)."""
    default_limits: _Resources = None
    """Limits set on containers that declare none for the resource (never below the container's request)."""


class Mutation(ApiModel):
    """One typed mutation; exactly one of `metadata` or `workloads`."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="has(self.metadata) != has(self.workloads)",
                message="mutate[]: exactly one of metadata or workloads must be set",
            ),
        )
    )

    name: Annotated[str | None, Field(max_length=63)] = None
    """Name, reported in events."""
    metadata: MetadataMutation | None = None
    """Metadata mutation."""
    workloads: WorkloadMutation | None = None
    """Workload mutation, applied to Pods on CREATE only."""


class RuleQuota(ApiModel):
    """A native quota shared by every namespace the rule selects (a GlobalResourceQuota per entry)."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    """Name of the entry, unique within the rule; part of the name of the quota objects Enclave creates."""
    hard: Annotated[dict[str, QuantityValue], Field(min_length=1, max_length=64)]
    """Hard limit per resource name."""
    scopes: Annotated[list[ScopeName] | None, Field(max_length=16)] = None
    """Quota scopes; absent matches all objects."""
    scope_selector: ScopeSelector | None = None
    """Quota scope selector; scopes and scopeSelector must both match."""


class RuleBody(ApiModel):
    """An admission rule: who it applies to, what it mutates, enforces and provisions."""

    audience: Annotated[list[Audience] | None, Field(max_length=64)] = None
    """Request subjects the rule is limited to; empty matches every request."""
    enforce: Enforce | None = None
    """Enforcement."""
    mutate: Annotated[list[Mutation] | None, Field(max_length=32)] = None
    """Ordered mutations applied before enforcement."""
    quota: Annotated[
        list[RuleQuota] | None,
        Field(max_length=16),
        Extra(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    ] = None
    """Native quotas shared by the selected namespaces; accounting ignores the audience."""


class RuleOrigin(StatusModel):
    """Where an accumulated rule comes from."""

    kind: Literal["Tenant", "RuleStatus"]
    """Tenant (spec.rules) or RuleStatus (spec)."""
    name: str
    """Name of the source object."""
    namespace: str | None = None
    """Namespace of a RuleStatus source."""
    index: Int32
    """Position of the rule in the source list."""


class AppliedRule(RuleBody):
    """A rule in effect for the namespace, with its origin."""

    model_config = RuleBody.model_config | {"extra": "ignore"}

    origin: RuleOrigin
    """Where the rule was declared."""


class RuleStatusStatus(StatusModel):
    """The rules in effect for the namespace, in evaluation order."""

    rules: list[AppliedRule] | None = None
    """Accumulated rules: the tenant's rules selecting this namespace, then this object's own spec."""
    size: Count = 0
    """Number of accumulated rules."""
    conditions: list[Condition] | None = None
    """Ready: the rules were accumulated and validated."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""


class RuleStatus(KubeObject):
    """Admission rules for the namespace it lives in (namespaced; the controller names it `default`)."""

    kind: Literal["RuleStatus"] = "RuleStatus"
    spec: Annotated[list[RuleBody] | None, Field(max_length=32)] = None
    """Rules declared directly for this namespace (reserved for users managing rules themselves)."""
    status: RuleStatusStatus | None = None
    """Accumulated rules."""


@dataclass(frozen=True, slots=True)
class KindScope:
    """``kinds`` + ``apiGroups`` of a metadata rule or mutation, as the specification reads them: ``*`` for all,
    ``<group>`` (any version), ``<group>/<version>``, empty or omitted for core ``v1`` (``""`` or ``core`` for
    the core group in any version). Shared by admission (what a request is about) and the tenants controller
    (which existing objects managed metadata is reconciled onto)."""

    any_kind: bool
    kinds: frozenset[str]
    any_group: bool
    groups: frozenset[str]
    versions: frozenset[str]

    @classmethod
    def of(cls, kinds: list[str], api_groups: list[str] | None) -> KindScope:
        groups: set[str] = set()
        versions: set[str] = set()
        if not api_groups:
            versions.add("v1")
        for entry in api_groups or ():
            if entry in ("", "core"):
                groups.add("")
            elif "/" in entry or entry == "v1":
                versions.add(entry)
            elif entry != "*":
                groups.add(entry)
        return cls("*" in kinds, frozenset(kinds), "*" in (api_groups or ()), frozenset(groups), frozenset(versions))

    def matches(self, kind: str, api_version: str) -> bool:
        """Whether an object of ``kind`` in ``api_version`` (``v1``, ``apps/v1``) is in scope."""
        if not (self.any_kind or kind in self.kinds):
            return False
        if self.any_group:
            return True
        return api_version.rpartition("/")[0] in self.groups or api_version in self.versions

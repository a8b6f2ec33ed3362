"""ServiceConfiguration: the cluster-scoped global configuration (one object, normally ``default``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal, TypeAlias

from pydantic import Field

from enclave_core.api.meta import (
    DNS1123_SUBDOMAIN,
    ApiModel,
    Condition,
    Duration,
    Entity,
    Generation,
    KubeObject,
    LabelSelector,
    Name,
    Port,
    StatusModel,
)
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.proxy import ProxySettings
from enclave_core.api.schema import REQUIRED, Extra, Rule, TypeExtras

__all__ = [
    "Admission",
    "ForbiddenMetadata",
    "Impersonation",
    "MatchCondition",
    "MutatingAdmission",
    "MutatingWebhook",
    "NodeMetadata",
    "Overrides",
    "Rbac",
    "RulesSettings",
    "ServiceConfiguration",
    "ServiceConfigurationSpec",
    "ServiceConfigurationStatus",
    "ServiceEvents",
    "ValidatingAdmission",
    "ValidatingWebhook",
    "WebhookClient",
    "WebhookOptions",
    "WebhookRule",
    "WebhookService",
]

NAMESPACE_DELETER: Final = "enclave-namespace-deleter"
NAMESPACE_PROVISIONER: Final = "enclave-namespace-provisioner"

FULLY_QUALIFIED_NAME: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}$"
"""A DNS subdomain with at least three labels, what admissionregistration/v1 requires of webhook names."""
MATCH_CONDITION_NAME: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)
"""A qualified name: optional DNS-subdomain prefix and ``/``, then at most 63 name characters."""

FailurePolicy: TypeAlias = Literal["Ignore", "Fail"]
MatchPolicy: TypeAlias = Literal["Exact", "Equivalent"]
SideEffects: TypeAlias = Literal["None", "NoneOnDryRun", "Some", "Unknown"]
ReinvocationPolicy: TypeAlias = Literal["Never", "IfNeeded"]
Operation: TypeAlias = Literal["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]
RuleScope: TypeAlias = Literal["Cluster", "Namespaced", "*"]


def _star_alone(field: str) -> tuple[Rule, ...]:
    return (
        Rule(
            rule="!('*' in self) || size(self) == 1",
            message=f"{field}: '*' must be the only element of the list",
        ),
    )


_RuleList = Annotated[list[Annotated[str, Field(max_length=253)]] | None, Field(max_length=64)]


class Rbac(ApiModel):
    """Names of the cluster roles Enclave manages and binds."""

    administration_cluster_roles: Annotated[list[Name], Field(max_length=64)] = Field(
        default_factory=lambda: [NAMESPACE_DELETER]
    )
    """Cluster roles bound to administrators in every tenant namespace."""
    deleter: Name = NAMESPACE_DELETER
    """Name of the cluster role that grants namespace deletion."""
    promotion_cluster_roles: Annotated[list[Name], Field(max_length=64)] = Field(
        default_factory=lambda: [NAMESPACE_PROVISIONER, NAMESPACE_DELETER]
    )
    """Cluster roles bound to promoted service accounts."""
    provisioner: Name = NAMESPACE_PROVISIONER
    """Name of the cluster role that grants namespace creation."""


class ServiceEvents(ApiModel):
    """Where Enclave posts Events that have no namespaced object to attach to."""

    namespace: Annotated[str, Field(min_length=1, max_length=63)] = "default"
    """Namespace for events about cluster-scoped resources and for deny events."""


class WebhookService(ApiModel):
    """An in-cluster Service through which kube-apiserver reaches the webhook."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Service."""
    namespace: Annotated[str, Field(min_length=1, max_length=63)]
    """Namespace of the Service."""
    path: Annotated[str | None, Field(max_length=2048)] = None
    """URL path prefix sent with every request to this Service."""
    port: Port = 443
    """Service port, 1 to 65535."""


class WebhookClient(ApiModel):
    """How kube-apiserver reaches the webhook: exactly one of `url` or `service`."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="has(self.url) != has(self.service)",
                message="exactly one of client.url or client.service must be set",
            ),
        ),
        field_rules={
            "url": (
                Rule(rule="self.startsWith('https://')", message="client.url must begin with https://"),
                Rule(
                    rule="!self.matches('^https://[^/?#]*@')",
                    message="client.url must not contain user info (user:password@)",
                ),
                Rule(rule="!self.contains('?')", message="client.url must not contain a query"),
                Rule(rule="!self.contains('#')", message="client.url must not contain a fragment"),
            )
        },
    )

    ca_bundle: Annotated[str | None, Extra(format="byte")] = None
    """PEM CA bundle (base64) to verify the webhook's certificate; the API server's trust roots when absent."""
    service: WebhookService | None = None
    """Reach the webhook through an in-cluster Service."""
    url: Annotated[str | None, Field(max_length=2048)] = None
    """`https://host[:port][/path]`; no user info, query or fragment; not an in-cluster Service host."""


class MatchCondition(ApiModel):
    """A CEL precondition: the webhook is called only when every condition is true."""

    name: Annotated[str, Field(min_length=1, max_length=316, pattern=MATCH_CONDITION_NAME)]
    """Unique name; `[<dns-subdomain>/]<name>` with a name of at most 63 characters."""
    expression: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL boolean over object, oldObject, request, authorizer and authorizer.requestResource."""


def _carries_tenant_metadata(variable: str) -> str:
    meta = f"{variable}.metadata"
    return (
        f"({variable} != null && has({meta}.labels) && '{TENANT_LABEL}' in {meta}.labels)"
        f" || ({variable} != null && has({meta}.ownerReferences) && {meta}.ownerReferences.exists(r,"
        " r.kind == 'Tenant' && r.apiVersion.startsWith('enclave.dev/')))"
    )


TENANT_METADATA_CONDITION = f"{_carries_tenant_metadata('object')} || {_carries_tenant_metadata('oldObject')}"
"""CEL over a webhook's ``object`` and ``oldObject`` (null on CREATE, DELETE): the request touches an object that
is, or was, in a tenant (the tenant label, or an owner reference to a Tenant). What ``opts.tenantMetadata`` adds."""


class WebhookOptions(ApiModel):
    """Narrow a webhook to requests of some users; rendered as matchConditions on request.userInfo."""

    administrators: Annotated[bool, REQUIRED] = False
    """Send the request only when the user is an Enclave administrator."""
    service_users: Annotated[bool, REQUIRED] = False
    """Send the request only when the user is an Enclave service user: in `users`, a TenantOwner with `aggregate`, or a promoted service account."""
    tenant_metadata: bool | None = None
    """Also send the request, whoever makes it, when the object or the old object carries the tenant label or an owner reference to a Tenant (ORed with the users above)."""


class WebhookRule(ApiModel):
    """Operations and resources a webhook is called for."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        field_rules={
            "apiGroups": _star_alone("apiGroups"),
            "apiVersions": _star_alone("apiVersions"),
            "operations": _star_alone("operations"),
            "resources": _star_alone("resources"),
        }
    )

    api_groups: _RuleList = None
    """API groups; `*` alone for all."""
    api_versions: _RuleList = None
    """API versions; `*` alone for all."""
    operations: Annotated[list[Operation] | None, Field(max_length=5)] = None
    """CREATE, UPDATE, DELETE, CONNECT, or `*` alone for all."""
    resources: _RuleList = None
    """Resources and subresources: `pods`, `pods/log`, `pods/*`, `*/scale`, `*/*`, or `*` alone."""
    scope: RuleScope = "*"
    """Cluster, Namespaced or `*`."""


class ValidatingWebhook(ApiModel):
    """One webhook of the generated ValidatingWebhookConfiguration."""

    name: Annotated[str, Field(max_length=253, pattern=FULLY_QUALIFIED_NAME)]
    """Fully qualified name, `<webhook>.<organization-domain>` (at least three DNS labels)."""
    path: Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^/")]
    """URL path Enclave serves this webhook on; begins with `/`."""
    admission_review_versions: Annotated[list[Annotated[str, Field(max_length=16)]], Field(min_length=1, max_length=8)]
    """Preferred AdmissionReview versions in order; the first one kube-apiserver supports is used."""
    side_effects: SideEffects
    """None or NoneOnDryRun; Some and Unknown are only valid for admissionregistration/v1beta1."""
    failure_policy: FailurePolicy = "Fail"
    """What an unreachable or failing endpoint means: Ignore or Fail."""
    match_policy: MatchPolicy = "Equivalent"
    """Exact, or Equivalent to also match the same resource through other groups or versions."""
    match_conditions: Annotated[
        list[MatchCondition] | None,
        Field(max_length=64),
        Extra(**{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    ] = None
    """At most 64 CEL preconditions, names unique; empty matches every request."""
    namespace_selector: LabelSelector | None = None
    """Namespaces whose requests are sent; for a Namespace object, its own labels. Empty matches all."""
    object_selector: LabelSelector | None = None
    """Objects whose requests are sent (old or new object matching suffices). Empty matches all."""
    opts: WebhookOptions | None = None
    """Enclave's user-based narrowing."""
    rules: Annotated[list[WebhookRule] | None, Field(max_length=64)] = None
    """Operations and resources of interest; any matching rule suffices."""
    timeout_seconds: Annotated[int, Field(ge=1, le=30), Extra(format="int32")] = 10
    """Seconds kube-apiserver waits for an answer, 1 to 30."""


class MutatingWebhook(ValidatingWebhook):
    """One webhook of the generated MutatingWebhookConfiguration."""

    reinvocation_policy: ReinvocationPolicy = "Never"
    """Never, or IfNeeded to be called again when a later plugin modified the object."""


class _AdmissionSide(ApiModel):
    client: WebhookClient
    """How kube-apiserver reaches the webhooks."""
    annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Annotations of the generated webhook configuration."""
    labels: Annotated[dict[str, str] | None, Field(max_length=64)] = None
    """Labels of the generated webhook configuration."""
    name: Annotated[str | None, Field(max_length=253, pattern=DNS1123_SUBDOMAIN)] = None
    """Name of the generated webhook configuration."""


class MutatingAdmission(_AdmissionSide):
    """The MutatingWebhookConfiguration Enclave maintains."""

    webhooks: Annotated[list[MutatingWebhook] | None, Field(max_length=64)] = None
    """Webhook entries."""


class ValidatingAdmission(_AdmissionSide):
    """The ValidatingWebhookConfiguration Enclave maintains."""

    webhooks: Annotated[list[ValidatingWebhook] | None, Field(max_length=64)] = None
    """Webhook entries."""


class Admission(ApiModel):
    """Dynamic admission: the webhook configurations Enclave creates and keeps in sync."""

    service_name: Annotated[str, Field(min_length=1, max_length=63)] = "enclave-webhook-service"
    """Name of the Service in front of Enclave's admission server."""
    mutating: MutatingAdmission | None = None
    """The mutating webhook configuration."""
    validating: ValidatingAdmission | None = None
    """The validating webhook configuration."""


class Impersonation(ApiModel):
    """Client settings for acting as service accounts (replication)."""

    ca_secret_key: Annotated[str, Field(min_length=1, max_length=253)] = "ca.crt"
    """Key of the CA certificate in the CA secret."""
    ca_secret_name: Annotated[str | None, Field(max_length=253)] = None
    """Secret holding the CA of the impersonation endpoint."""
    ca_secret_namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of that secret."""
    endpoint: Annotated[str | None, Field(max_length=2048)] = None
    """API endpoint used for impersonation."""
    global_default_service_account: Annotated[str | None, Field(max_length=253)] = None
    """Default service account for GlobalTenantResource; when set, users must use it unless they give their own."""
    global_default_service_account_namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of the global default service account."""
    skip_tls_verify: bool = False
    """Skip TLS verification of the endpoint (never in production)."""
    tenant_default_service_account: Annotated[str | None, Field(max_length=253)] = None
    """Default service account for TenantResource, taken in the TenantResource's own namespace."""


class ForbiddenMetadata(ApiModel):
    """Keys that may not be set: an exact list and a regular expression."""

    denied: Annotated[list[Annotated[str, Field(max_length=317)]] | None, Field(max_length=256)] = None
    """Keys refused exactly."""
    denied_regex: Annotated[str | None, Field(max_length=1024)] = None
    """Keys matching this regular expression are refused."""


class NodeMetadata(ApiModel):
    """Node metadata tenant owners may not set (only when they may patch nodes)."""

    forbidden_annotations: ForbiddenMetadata | None = None
    """Annotation keys that may not be set."""
    forbidden_labels: ForbiddenMetadata | None = None
    """Label keys that may not be set."""


class Overrides(ApiModel):
    """Alternative names for Enclave's own objects."""

    tls_secret_name: Annotated[Name, REQUIRED] = Field("enclave-tls", alias="TLSSecretName")
    """Secret with the webhook server's certificate, in the namespace of Enclave's deployment."""
    mutating_webhook_configuration_name: Annotated[Name, REQUIRED] = "enclave-mutating-webhook-configuration"
    """Deprecated: use admission.mutating.name. Name of the generated mutating configuration."""
    validating_webhook_configuration_name: Annotated[Name, REQUIRED] = "enclave-validating-webhook-configuration"
    """Deprecated: use admission.validating.name. Name of the generated validating configuration."""


class RulesSettings(ApiModel):
    """How tenant rules are enforced."""

    engine: Literal["webhook", "native", "both"] = "webhook"
    """`webhook`: admission judges every rule (no policies). `native`: rules that compile to ValidatingAdmissionPolicies are enforced by kube-apiserver itself, through an Enclave outage (docs/rules.md, "Native policies"); a namespace whose rules all compile (no mutations, managed or default values) is labelled `enclave.dev/native-rules` and the rules webhooks skip it, so its writes cost no network hop; the rest stays on the webhook. `both`: as native, and the webhook keeps judging every rule, so a difference shows as the webhook refusing what the policies admitted."""


class ServiceConfigurationSpec(ApiModel):
    """Global configuration of Enclave."""

    cache_invalidation: Annotated[Duration, REQUIRED] = "24h"
    """Period after which every cache is rebuilt from a fresh read (Go duration): each component relists each watched kind and re-takes each snapshot once per period, less a random part of up to a fifth so caches do not all relist at once."""
    enable_tls_reconciler: Annotated[bool, REQUIRED] = Field(False, alias="enableTLSReconciler")
    """Generate a CA and serving certificates for the webhooks when not provided externally."""
    rbac: Annotated[Rbac, REQUIRED] = Field(default_factory=Rbac)
    """Managed cluster roles."""
    administrators: Annotated[list[Entity] | None, Field(max_length=256)] = None
    """Entities that own every tenant; they must use the tenant label when acting on namespaces."""
    admission: Admission | None = None
    """Dynamic admission webhooks."""
    allow_service_account_promotion: bool = False
    """Tenant owners may promote service accounts of their namespaces to tenant owners by labelling them."""
    events: ServiceEvents = Field(default_factory=ServiceEvents)
    """Where events are posted."""
    force_tenant_prefix: bool = False
    """Namespaces created by tenant owners must be named `<tenant>-...`."""
    ignore_user_with_groups: Annotated[list[Name] | None, Field(max_length=256)] = None
    """Requests of users in any of these groups are ignored."""
    impersonation: Impersonation | None = None
    """Service account client settings."""
    node_metadata: NodeMetadata | None = None
    """Forbidden node metadata."""
    overrides: Overrides = Field(default_factory=Overrides)
    """Alternative names for Enclave's own objects."""
    proxy: ProxySettings | None = None
    """What enclave-proxy shows every tenant's users of cluster-scoped kinds, unless a Tenant's own spec.proxy names the kind (docs/proxy.md)."""
    protected_namespace_regex: Annotated[str | None, Field(max_length=1024)] = None
    """Creation of namespaces whose name matches this regular expression is refused."""
    rules: RulesSettings | None = None
    """How tenant rules are enforced (the webhook, native admission policies, or both)."""
    user_groups: Annotated[list[Name] | None, Field(max_length=256)] = None
    """Deprecated: use users. Groups whose members are service users."""
    user_names: Annotated[list[Name] | None, Field(max_length=256)] = None
    """Deprecated: use users. User names that are service users."""
    users: Annotated[list[Entity] | None, Field(max_length=256)] = None
    """Entities that are service users; everyone else is ignored. Default: the group `enclave.dev`."""


class ServiceConfigurationStatus(StatusModel):
    """Observed state of the configuration."""

    conditions: list[Condition] | None = None
    """Ready tells whether the configuration was validated and applied."""
    observed_generation: Generation | None = None
    """metadata.generation last acted upon."""
    tenants: list[str] | None = None
    """Sorted names of the existing tenants."""
    users: list[Entity] | None = None
    """Effective service users (deprecated fields converted, TenantOwners aggregated)."""


class ServiceConfiguration(KubeObject):
    """Global configuration of Enclave (cluster-scoped; the controller reads the object named `default`)."""

    kind: Literal["ServiceConfiguration"] = "ServiceConfiguration"
    spec: ServiceConfigurationSpec
    """Desired configuration."""
    status: ServiceConfigurationStatus | None = None
    """Observed state."""

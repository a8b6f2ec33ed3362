"""Every label, annotation, finalizer, matchCondition and field-manager name Enclave writes or selects on.

These strings are a contract with what is already in a cluster: a selector in one component finds what another
component labelled, admission's hooks select on what the controllers write, and the Helm chart
(``charts/enclave/values.yaml``, ``templates/_helpers.tpl``) spells several of them again (a unit test keeps
the chart's ``enclave.dev/`` keys among these). Renaming one strands the objects a running release labelled
with the old one, so they are defined here once and every component imports them.

Field managers: each component writes with its own name (``enclave-<component>``), and the objects it owns
carry ``app.kubernetes.io/managed-by: <that name>``, so one constant serves both. enclave-replication is the
exception on the label: what it replicates belongs to the tenant, so it marks it with Enclave's own
:data:`ENCLAVE_MANAGED_BY` instead of the well-known label, and writes with one field manager per
replication object (``enclave_replication.names.Owner.field_manager``).
"""

from __future__ import annotations

from typing import Final

# -- field managers (also the app.kubernetes.io/managed-by value of what each component owns) -----------------
CONFIG_MANAGER: Final = "enclave-config"
TENANTS_MANAGER: Final = "enclave-tenants"
ADMISSION_MANAGER: Final = "enclave-admission"
QUOTAS_MANAGER: Final = "enclave-quotas"
GLOBALQUOTAS_MANAGER: Final = "enclave-globalquotas"
POOLS_MANAGER: Final = "enclave-pools"
REPLICATION_MANAGER: Final = "enclave-replication"
PROXY_MANAGER: Final = "enclave-proxy"

# -- well-known Kubernetes keys ----------------------------------------------------------------------------
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
"""Which component keeps an object: every controller selects its own objects (and only those) by it."""
PART_OF: Final = "app.kubernetes.io/part-of"
APP_NAME: Final = "app.kubernetes.io/name"
PART_OF_ENCLAVE: Final = "enclave"
"""The value of :data:`PART_OF` (and :data:`APP_NAME`) on Enclave's CRDs: what the chart's clean-up selects."""
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
"""Set by kube-apiserver on every namespace to its name: the only way a label selector names a namespace."""
NODE_SELECTOR_ANNOTATION: Final = "scheduler.alpha.kubernetes.io/node-selector"
"""The PodNodeSelector admission plugin's namespace annotation, which a tenant's nodeSelector becomes."""

# -- tenancy -----------------------------------------------------------------------------------------------
TENANT_LABEL: Final = "enclave.dev/tenant"
"""Namespace label naming its tenant; also how a TenantOwner joins a tenant."""
PROMOTED_LABEL: Final = "enclave.dev/promoted"
"""Service-account label (value ``"true"``) by which a tenant owner promotes an account to owner."""
CONFIGURATION_LABEL: Final = "enclave.dev/service-configuration"
"""On what enclave-config writes for a ServiceConfiguration: its name (several may coexist in tests)."""
NATIVE_RULES_TENANT_LABEL: Final = "enclave.dev/native-rules-tenant"
"""On each ValidatingAdmissionPolicy (and binding) compiled from a tenant's rules: the tenant whose rules it holds
(so a tenant's objects are found and pruned)."""
NATIVE_RULES_LABEL: Final = "enclave.dev/native-rules"
"""Namespace label (value ``"true"``) enclave-tenants sets, with ``spec.rules.engine: native``, where every rule
the ``resources`` hooks would judge is enforced by a live ValidatingAdmissionPolicy: those hooks'
namespaceSelectors skip such namespaces (no webhook round trip). Only Enclave writes it; admission refuses it
from tenant users."""

# -- ServiceConfiguration, CRDs, conversion -----------------------------------------------------------------
CRD_DIGEST_ANNOTATION: Final = "enclave.dev/crd-digest"
"""Digest of the generated definition a CRD was last applied from (conversion client excluded)."""
CONVERSION_ANNOTATION: Final = "conversion.enclave.dev/saved"
"""Holds ``{"apiVersion": <version>, "spec": <spec in that version>}`` where the target version cannot hold
everything of the source: written by conversion, read back by conversion, meaningless to anyone else."""

# -- Events ------------------------------------------------------------------------------------------------
EVENT_COMPONENT_LABEL: Final = "enclave.dev/component"
"""On every Event Enclave posts: the component that posted it."""
EVENT_INVOLVED_KIND_LABEL: Final = "enclave.dev/involved-kind"
"""On every Event Enclave posts: the involved object's kind, lower case (``kubectl get events -l``)."""

# -- quotas and pools --------------------------------------------------------------------------------------
GLOBALQUOTA_LABEL: Final = "enclave.dev/globalresourcequota"
"""On provisioned ResourceQuotas and ledgers: the GlobalResourceQuota (its name, hashed past 63 characters)."""
GLOBALQUOTA_ANNOTATION: Final = "enclave.dev/globalresourcequota"
"""The GlobalResourceQuota's full name, for people reading a provisioned ResourceQuota."""
RULE_QUOTA_LABEL: Final = "enclave.dev/rule-quota"
"""On GlobalResourceQuotas made from a tenant rule: the entry name."""
RULE_QUOTA_NAMESPACE_LABEL: Final = "enclave.dev/rule-quota-namespace"
"""On GlobalResourceQuotas made from a namespace's RuleStatus: that namespace."""
POOL_LABEL: Final = "enclave.dev/pool"
"""On ResourceQuotas a ResourcePool provisioned: the pool (its name, hashed past 63 characters)."""
POOL_FINALIZER: Final = "enclave.dev/pool-cleanup"
"""Held on every pool so its deletion waits until bound claims are released and its quotas removed."""

# -- replication -------------------------------------------------------------------------------------------
ENCLAVE_MANAGED_BY: Final = "enclave.dev/managed-by"
"""On every object enclave-replication manages (value :data:`REPLICATION_MANAGER`): what its informers and
admission's replication-protection hook select on."""
REPLICATION_OWNER_ANNOTATION: Final = "enclave.dev/replicated-by"
"""Which (Global)TenantResource manages the object (``enclave_replication.names.Owner.key``)."""
REPLICATION_CREATED_ANNOTATION: Final = "enclave.dev/replication-created"
"""``"true"`` when replication created the object, ``"false"`` when it adopted it (pruning deletes only the
first kind)."""
REPLICATION_HASH_ANNOTATION: Final = "enclave.dev/replication-hash"
"""A hash of what was last applied, so a changed manifest is noticed without comparing every field."""
REPLICATION_FINALIZER: Final = "enclave.dev/replication"

# -- admission matchCondition names (the chart's values.yaml spells the same hooks) ---------------------------
ASSIGNABLE_CONDITION: Final = "enclave.dev/assignable"
SKIP_CONTROL_PLANE_CONDITION: Final = "enclave.dev/skip-control-plane"
SKIP_CONTROLLERS_CONDITION: Final = "enclave.dev/skip-controllers"
SKIP_CLUSTER_CONTROLLERS_CONDITION: Final = "enclave.dev/skip-cluster-controllers"
SKIP_UNJUDGED_CONDITION: Final = "enclave.dev/skip-unjudged"
AUDIENCE_CONDITION: Final = "enclave.dev/audience"
"""The matchCondition enclave-config adds to a hook whose ``opts`` narrow it to administrators, service users
or tenant metadata."""

"""The webhook paths this server answers, and the decision function behind each.

This table is the map from an HTTP request to its decision: the server looks the path up here and calls the
function, which is the whole decision for that webhook, writes included: the quota hooks (``/quotas``,
``/globalquotas``) and ``/namespaces`` (a tenant's namespace quota) hold their reservations themselves, through
:mod:`enclave_admission.reservation`, before they return. The server adds only the answer around it (metrics,
the log line, deny and audit Events). The paths are the ones the default configuration
(:mod:`enclave_admission.defaults`) and the Helm chart point kube-apiserver at; any other path is answered with
an error, never with an allow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from enclave_admission.configuration import validation as configuration
from enclave_admission.globalquotas import validation as globalquotas
from enclave_admission.namespaces import mutation as namespace_mutation
from enclave_admission.namespaces import validation as namespace_validation
from enclave_admission.nodes import validation as nodes
from enclave_admission.pools import mutation as pool_mutation
from enclave_admission.pools import validation as pools
from enclave_admission.quotas import validation as quotas
from enclave_admission.replication import mutation as replication_mutation
from enclave_admission.replication import spec as replication_spec
from enclave_admission.replication import validation as replication
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rolebindings import validation as rolebindings
from enclave_admission.rules import mutation as rules_mutation
from enclave_admission.rules import validation as rules_validation
from enclave_admission.serviceaccounts import validation as serviceaccounts
from enclave_admission.state import State
from enclave_admission.tenants import validation as tenants
from enclave_core.snapshots.globalquotas import GLOBALQUOTAS_KIND
from enclave_core.snapshots.pools import POOLS_KIND
from enclave_core.snapshots.quotas import QUOTAS_KIND
from enclave_core.snapshots.replication import REPLICATION_KIND

Handler = Callable[[AdmissionRequest, State], Decision | Awaitable[Decision]]
"""A decision from memory, or an awaitable of one: quota reservations, which write a ledger (a counted object,
a namespace admitted into a tenant with a namespace-quota ledger); a request in a tenant namespace whose rules
are not published yet, and a namespace request naming a tenant admission has not seen yet, which wait for
them."""

NAMESPACES_MUTATE: Final = "/namespaces/mutate"
NAMESPACES: Final = "/namespaces"
SERVICE_ACCOUNTS: Final = "/serviceaccounts"
ROLE_BINDINGS: Final = "/rolebindings"
NODES: Final = "/nodes"
TENANTS: Final = "/tenants"
RULES: Final = "/rules"
SERVICE_CONFIGURATIONS: Final = "/serviceconfigurations"
QUOTAS: Final = "/quotas"
CUSTOM_QUOTAS: Final = "/customquotas"
REPLICATION: Final = "/replication"
REPLICATION_MUTATE: Final = "/replication/mutate"
REPLICATION_SPEC: Final = "/replication/spec"
RESOURCE_POOLS: Final = "/resourcepools"
GLOBAL_QUOTAS: Final = "/globalquotas"
GLOBAL_RESOURCE_QUOTAS: Final = "/globalresourcequotas"
RESOURCE_POOL_CLAIMS: Final = "/resourcepoolclaims"
RESOURCE_POOL_CLAIMS_MUTATE: Final = "/resourcepoolclaims/mutate"
RESOURCES_MUTATE: Final = "/resources/mutate"
RESOURCES: Final = "/resources"

ROUTES: Final[dict[str, Handler]] = {
    NAMESPACES_MUTATE: namespace_mutation.answer,
    NAMESPACES: namespace_validation.answer,
    SERVICE_ACCOUNTS: serviceaccounts.validate,
    ROLE_BINDINGS: rolebindings.validate,
    NODES: nodes.validate,
    TENANTS: tenants.validate,
    RULES: tenants.validate_rules,
    SERVICE_CONFIGURATIONS: configuration.validate,
    QUOTAS: quotas.validate,
    CUSTOM_QUOTAS: quotas.validate_quota,
    REPLICATION: replication.validate,
    REPLICATION_MUTATE: replication_mutation.mutate,
    REPLICATION_SPEC: replication_spec.validate,
    RESOURCE_POOLS: pools.validate_pool,
    GLOBAL_QUOTAS: globalquotas.validate,
    GLOBAL_RESOURCE_QUOTAS: globalquotas.validate_quota,
    RESOURCE_POOL_CLAIMS: pools.validate_claim,
    RESOURCE_POOL_CLAIMS_MUTATE: pool_mutation.mutate,
    RESOURCES_MUTATE: rules_mutation.answer,
    RESOURCES: rules_validation.answer,
}
"""Path -> decision. ``/namespaces/mutate``, ``/resourcepoolclaims/mutate``, ``/replication/mutate`` and
``/resources/mutate`` mutate; every other path only validates."""

SNAPSHOTS: Final[dict[str, tuple[str, ...]]] = {
    REPLICATION: (REPLICATION_KIND,),
    QUOTAS: (QUOTAS_KIND,),
    RESOURCE_POOLS: (POOLS_KIND,),
    RESOURCE_POOL_CLAIMS: (POOLS_KIND,),
    RESOURCE_POOL_CLAIMS_MUTATE: (POOLS_KIND,),
    GLOBAL_QUOTAS: (GLOBALQUOTAS_KIND,),
    GLOBAL_RESOURCE_QUOTAS: (GLOBALQUOTAS_KIND,),
}
"""Path -> the optional snapshots its decision reads (besides the core ones, configuration, Tenancy and Rules,
which every replica needs to be ready at all). While one of them is missing or stale, that path alone stops
deciding: see :data:`FAILS_OPEN` for how (docs/architecture.md, "Who an outage blocks")."""

SPARES_COMPONENTS: Final = frozenset({REPLICATION})
"""Paths whose decision lets Enclave's own service accounts and ignored users through without reading their
snapshot (replication protection): those requests are decided even while the snapshot is stale."""

FAILS_OPEN: Final = frozenset(
    {
        SERVICE_CONFIGURATIONS,
        CUSTOM_QUOTAS,
        GLOBAL_QUOTAS,
        GLOBAL_RESOURCE_QUOTAS,
        REPLICATION_MUTATE,
        REPLICATION_SPEC,
        RULES,
    }
)
"""Paths whose hooks are registered with ``failurePolicy: Ignore`` (``enclave_admission.defaults``; a unit test
keeps the two in step). Without their snapshot they answer 503, so kube-apiserver does what it does when the
hook is down: lets the request through. Every other path denies, naming the snapshot (fail closed)."""

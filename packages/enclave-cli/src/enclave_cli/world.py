"""The objects of a directory compiled exactly as the controllers compile them, into admission's state.

* The ServiceConfiguration goes through the model, :func:`enclave_core.api.validation.service_configuration_problems`
  and :func:`enclave_core.snapshots.configuration.effective`, as enclave-config does before publishing it.
* Tenants, TenantOwners, Namespaces and promoted ServiceAccounts go through
  :func:`enclave_tenants.plan.build_plan`, the function every enclave-tenants replica runs to publish the
  Tenancy snapshot; the tenants' ``spec.rules``, the namespaces' ``RuleStatus/default`` and PersistentVolumes
  through :func:`enclave_tenants.rules.compile_namespaces` and :func:`enclave_tenants.rules.snapshot`, which
  make the Rules snapshot.
* ResourcePools and ResourcePoolClaims go through enclave-pools' plan, GlobalResourceQuotas through
  enclave-globalquotas', custom quotas through enclave-quotas' count (:mod:`enclave_cli.areas`), with the usage
  a test manifest states.
* The results are handed to :class:`enclave_admission.state.State` through the same setters the admission
  process calls when a snapshot arrives.

Nothing is re-implemented here: a difference between this and the cluster would be a bug in the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from enclave_admission.state import State
from enclave_cli.areas import (
    NO_USAGE,
    PoolObjects,
    Usage,
    custom_quotas,
    global_quotas,
    offline_ledgers,
    pools_snapshot,
)
from enclave_cli.documents import Document, InputError
from enclave_cli.native import NativeRules
from enclave_core.api import KINDS_BY_NAME
from enclave_core.api.configuration import ServiceConfiguration, ServiceConfigurationSpec
from enclave_core.api.names import PROMOTED_LABEL
from enclave_core.api.tenancy import Tenant
from enclave_core.api.validation import service_configuration_problems
from enclave_core.snapshots.configuration import EffectiveConfiguration, effective
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot
from enclave_core.snapshots.pools import PoolsSnapshot
from enclave_core.snapshots.quotas import QuotaTargets
from enclave_core.snapshots.rules import RULE_STATUS_NAME, RulesSnapshot
from enclave_tenants import rules as rl
from enclave_tenants.plan import Plan, build_plan
from enclave_tenants.policy import Policy

TEST_KIND = "EnclaveTest"
CORE_KINDS = ("Namespace", "ServiceAccount", "Node", "PersistentVolume")
"""Kubernetes kinds a directory may hold: the namespaces (and promoted accounts) tenants already have."""
DEFAULT_NAMESPACE = "enclave-system"


def validation_message(err: ValidationError, document: Document, loc: tuple[str | int, ...] = ()) -> InputError:
    first = err.errors()[0]
    where = (*loc, *first["loc"])
    path = ".".join(str(p) for p in where)
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return document.error(f"{document.kind} {document.name!r}: {path}: {first['msg']}{more}", where)


@dataclass
class World:
    """Everything a directory declares, grouped by kind, plus the test manifests."""

    configuration: Document | None = None
    tenants: list[Document] = field(default_factory=list)
    owners: list[Document] = field(default_factory=list)
    namespaces: list[Document] = field(default_factory=list)
    accounts: list[Document] = field(default_factory=list)
    rule_statuses: list[Document] = field(default_factory=list)
    volumes: list[Document] = field(default_factory=list)
    tests: list[Document] = field(default_factory=list)
    pools: list[Document] = field(default_factory=list)
    claims: list[Document] = field(default_factory=list)
    global_quotas: list[Document] = field(default_factory=list)
    custom_quotas: list[Document] = field(default_factory=list)
    others: list[Document] = field(default_factory=list)
    """Enclave kinds whose compilers are not part of the offline world (quotas, pools, replication): checked,
    never used for a decision (a request on a route that needs them is reported, not guessed)."""

    @classmethod
    def collect(cls, documents: list[Document]) -> World:
        world = cls()
        for document in documents:
            kind = document.kind
            if not kind:
                raise document.error("object has no kind")
            if kind == TEST_KIND:
                world.tests.append(document)
            elif kind == "ServiceConfiguration":
                if world.configuration is not None:
                    raise document.error(
                        f"a second ServiceConfiguration ({document.name!r}); the first is at "
                        f"{world.configuration.path}:{world.configuration.line}"
                    )
                world.configuration = document
            elif kind == "Tenant":
                world.tenants.append(document)
            elif kind == "TenantOwner":
                world.owners.append(document)
            elif kind == "Namespace":
                world.namespaces.append(document)
            elif kind == "ServiceAccount":
                world.accounts.append(document)
            elif kind == "RuleStatus":
                world.rule_statuses.append(document)
            elif kind == "PersistentVolume":
                world.volumes.append(document)
            elif kind == "ResourcePool":
                world.pools.append(document)
            elif kind == "ResourcePoolClaim":
                world.claims.append(document)
            elif kind == "GlobalResourceQuota":
                world.global_quotas.append(document)
            elif kind in ("CustomQuota", "GlobalCustomQuota"):
                world.custom_quotas.append(document)
            elif kind in KINDS_BY_NAME or kind == "Node":
                world.others.append(document)
            else:
                known = ", ".join(sorted({*KINDS_BY_NAME, *CORE_KINDS, TEST_KIND}))
                raise document.error(f"unknown kind {kind!r} (known: {known})", ("kind",))
            if kind != TEST_KIND and not document.name:
                raise document.error(f"{kind} has no metadata.name", ("metadata",))
        return world

    def tenant_names(self) -> set[str]:
        return {document.name for document in self.tenants}


@dataclass
class Compiled:
    config: EffectiveConfiguration
    plan: Plan
    namespace: str
    rules: RulesSnapshot = field(default_factory=RulesSnapshot)
    namespace_labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Labels of the directory's namespaces (what the tenant rules' ``namespaceSelector`` was matched against)."""
    pool_objects: PoolObjects = field(default_factory=lambda: PoolObjects([], [], []))
    _pools: dict[str, PoolsSnapshot] = field(default_factory=dict)
    quota_documents: tuple[list[Document], list[Document], list[Document]] = ([], [], [])
    """(GlobalResourceQuotas, custom quotas, Namespaces): compiled per usage by :mod:`enclave_cli.areas`."""
    _global: dict[str, tuple[GlobalQuotasSnapshot, list[dict[str, Any]]]] = field(default_factory=dict)
    _custom: dict[str, tuple[QuotaTargets, list[dict[str, Any]]]] = field(default_factory=dict)
    _native: dict[str, NativeRules] = field(default_factory=dict)

    def tenant(self, name: str) -> Tenant | None:
        found = self.plan.tenants.get(name)
        return found.tenant if found is not None else None

    def pools(self, usage: Usage = NO_USAGE) -> PoolsSnapshot:
        found = self._pools.get(usage.key)
        if found is None:
            found = self._pools[usage.key] = pools_snapshot(self.pool_objects, usage)
        return found

    def global_quotas(self, usage: Usage = NO_USAGE) -> tuple[GlobalQuotasSnapshot, list[dict[str, Any]]]:
        found = self._global.get(usage.key)
        if found is None:
            grqs, _, namespaces = self.quota_documents
            found = self._global[usage.key] = global_quotas(grqs, namespaces, usage)
        return found

    def custom_quotas(self, usage: Usage = NO_USAGE) -> tuple[QuotaTargets, list[dict[str, Any]]]:
        found = self._custom.get(usage.key)
        if found is None:
            _, quotas, namespaces = self.quota_documents
            found = self._custom[usage.key] = custom_quotas(quotas, namespaces, usage)
        return found

    @property
    def engine(self) -> str:
        """The configuration's ``spec.rules.engine``."""
        return Policy.from_configuration(self.config).rules_engine

    def native(self, engine: str) -> NativeRules:
        """The policies enclave-tenants would compile from the Rules snapshot, running under ``engine``."""
        found = self._native.get(engine)
        if found is None:
            policy = Policy.from_configuration(self.config)
            found = self._native[engine] = NativeRules.compile(self.rules, policy, self.namespace, engine)
        return found

    def state(self, usage: Usage = NO_USAGE) -> State:
        """A fresh admission state (fresh per request: no reservation of one case leaks into the next), with
        the pools the usage of ``usage``. The pools component counts as installed (its hooks are on)."""
        state = State(
            expect_tenancy=True,
            namespace=self.namespace,
            expect_pools=True,
            expect_globalquotas=True,
            expect_quotas=True,
        )
        state.tenancy_wait = 0.0  # offline: no newer Tenancy snapshot can come, a miss is decided at once
        state.set_config(self.config)
        state.set_tenancy(self.plan.snapshot)
        state.set_rules(self.rules)
        state.set_pools(self.pools(usage))
        snapshot, ledgers = self.global_quotas(usage)
        state.set_globalquotas(snapshot)
        targets, quota_ledgers = self.custom_quotas(usage)
        state.set_quotas(targets)
        state.ledgers = offline_ledgers(ledgers + quota_ledgers)
        return state


def compile_configuration(document: Document | None) -> EffectiveConfiguration:
    if document is None:
        return effective("default", 0, ServiceConfigurationSpec())
    try:
        config = ServiceConfiguration.model_validate(document.data)
    except ValidationError as err:
        raise validation_message(err, document) from None
    problems = service_configuration_problems(config.spec)
    if problems:
        first = problems[0]
        loc = tuple(first.field.split("."))
        raise document.error(f"ServiceConfiguration {document.name!r}: {first}", loc)
    generation = int((document.data.get("metadata") or {}).get("generation") or 0)
    return effective(document.name, generation, config.spec)


def _with_uid(document: Document) -> dict[str, object]:
    """Tenants in files rarely carry a uid; the cluster always does. A stable stand-in keeps owner references
    (which name the uid) consistent between the mutation and the validation of one request."""
    raw = dict(document.data)
    meta = dict(raw.get("metadata") or {})
    meta.setdefault("uid", f"offline-{document.name}")
    raw["metadata"] = meta
    return raw


def compile_world(world: World, namespace: str = DEFAULT_NAMESPACE) -> Compiled:
    config = compile_configuration(world.configuration)
    for document in world.tenants + world.owners:
        # build_plan would report these too, without a line: parse first, so the error names the field's line
        try:
            KINDS_BY_NAME[document.kind].model.model_validate(document.data)
        except ValidationError as err:
            raise validation_message(err, document) from None
    promoted = [
        document.data
        for document in world.accounts
        if ((document.data.get("metadata") or {}).get("labels") or {}).get(PROMOTED_LABEL) == "true"
    ]
    for document in world.accounts:
        if not (document.data.get("metadata") or {}).get("namespace"):
            raise document.error(f"ServiceAccount {document.name!r} has no metadata.namespace", ("metadata",))
    plan = build_plan(
        [_with_uid(document) for document in world.tenants],
        [document.data for document in world.owners],
        [document.data for document in world.namespaces],
        promoted,
        Policy.from_configuration(config),
    )
    by_name = {document.name: document for document in world.tenants + world.owners}
    for name, tenant_plan in plan.tenants.items():
        if tenant_plan.problems and tenant_plan.tenant is None:
            raise by_name[name].error(f"Tenant {name!r}: {tenant_plan.problems[0].message}")
    for name, owner_plan in plan.owners.items():
        if owner_plan.problems:
            raise by_name[name].error(f"TenantOwner {name!r}: {owner_plan.problems[0].message}")
    own = {}
    for document in world.rule_statuses:
        meta = document.data.get("metadata") or {}
        if not meta.get("namespace"):
            raise document.error(f"RuleStatus {document.name!r} has no metadata.namespace", ("metadata",))
        if document.name == RULE_STATUS_NAME:
            own[str(meta["namespace"])] = document.data
    rule_plans = rl.compile_namespaces(
        {name: tenant_plan.tenant for name, tenant_plan in plan.tenants.items()},
        plan.namespace_tenant,
        {document.name: document.data for document in world.namespaces},
        own,
    )
    rules = rl.snapshot(rule_plans, [document.data for document in world.volumes])
    labels = {
        document.name: dict((document.data.get("metadata") or {}).get("labels") or {}) for document in world.namespaces
    }
    for document in world.claims:
        if not (document.data.get("metadata") or {}).get("namespace"):
            raise document.error(f"ResourcePoolClaim {document.name!r} has no metadata.namespace", ("metadata",))
    pool_objects = PoolObjects.of(world.pools, world.claims, world.namespaces)
    compiled = Compiled(config, plan, namespace, rules, labels, pool_objects)
    compiled.quota_documents = (world.global_quotas, world.custom_quotas, world.namespaces)
    return compiled

"""What every decision reads: the latest snapshots, who the requester is, and this replica's reservations.

Admission decides from memory (no API read on the hot path). The snapshots arrive over gRPC and replace the
state atomically: a decision sees one configuration and one tenancy, never a mix of two revisions. Derived
things (compiled regular expressions, the subject of a (user, groups) pair) are computed once per snapshot,
not once per request.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache

from enclave_admission.quotas.index import QuotaIndex
from enclave_admission.rules.compiled import EMPTY, NamespaceSet, compile_namespace
from enclave_core.api.configuration import ForbiddenMetadata
from enclave_core.ledger import DEFAULT_TTL, LedgerClient
from enclave_core.patterns import Pattern, PatternError, compile_pattern
from enclave_core.selectors import matches
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot
from enclave_core.snapshots.pools import PoolsSnapshot
from enclave_core.snapshots.quotas import QuotaTargets
from enclave_core.snapshots.replication import ReplicationSnapshot
from enclave_core.snapshots.rules import NamespaceRules, RulesSnapshot
from enclave_core.snapshots.tenancy import (
    SERVICE_ACCOUNT_PREFIX,
    Forbidden,
    TenancySnapshot,
    TenantView,
    entity_matches,
)

log = logging.getLogger(__name__)

RESERVATION_TTL = 30.0
"""Seconds an admitted namespace counts toward its tenant's quota before the snapshot must show it.

Long enough for the tenants controller to see the namespace and publish (normally well under a second); short
enough that a namespace admitted here but refused by a later webhook does not hold a quota slot for long.
"""


RULES_WAIT = 2.0
"""Seconds a request in a tenant namespace the Rules snapshot does not name waits for a snapshot that does
before it is refused: a namespace's rules are published milliseconds after it is created, and an
administrator's objects created right behind it should be judged, not refused. Well under the hooks' 5 s
timeout, with the mutating hook's own wait before the validating hook's."""


TENANCY_WAIT = RULES_WAIT
"""Seconds a namespace request that names no tenant the requester owns, or a tenant the Tenancy snapshot lacks,
waits for a newer Tenancy snapshot before it is refused: a Tenant is published milliseconds after
kube-apiserver stores it, and a script that creates a tenant and then its namespaces must not fail at random."""


class Arrivals:
    """Waits, bounded, for snapshots of one kind until a condition holds (a name they show, a decision they
    change). Every waiter shares one future, resolved by the next snapshot: a thousand waiting requests cost
    one future, not a thousand polls."""

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def arrived(self) -> None:
        """A snapshot of this kind replaced the previous one: wake every waiter to look again."""
        waiting = self._next
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def until(self, settled: Callable[[], bool], bound: float) -> bool:
        """Wait at most ``bound`` seconds for ``settled()``, looking again after each snapshot; its last value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while not settled():
            left = deadline - loop.time()
            if left <= 0:
                return False
            waiting = self._next
            if waiting is None or waiting.done():
                waiting = self._next = loop.create_future()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation (the request's handler
            # cancelled at shutdown) that meets the snapshot's arrival in the same loop step.
            try:
                async with asyncio.timeout(left):
                    await asyncio.shield(waiting)
            except TimeoutError:
                return settled()
        return True


class Role(enum.Enum):
    """How Enclave treats a requester."""

    IGNORED = "ignored"
    """In ``ignoreUserWithGroups``: passes untouched, whatever else it is."""
    ADMINISTRATOR = "administrator"
    """In ``administrators``: acts on any tenant, through the tenant label."""
    TENANT_USER = "tenant-user"
    """In ``users`` (tenant users), or an owner of a tenant (promoted service accounts, TenantOwners)."""
    TENANT_SERVICE_ACCOUNT = "tenant-service-account"
    """A service account of a tenant namespace that owns no tenant: may not touch its namespace's ownership."""
    OTHER = "other"
    """Everyone else (the control plane, Enclave's own controllers, cluster operators): passes untouched."""


@dataclass(frozen=True, slots=True)
class Subject:
    username: str
    groups: tuple[str, ...]
    role: Role
    owned: tuple[TenantView, ...] = ()
    """Tenants the requester owns, sorted by name."""
    home_tenant: str = ""
    """For a service account: the tenant owning its namespace."""
    by_name: dict[str, TenantView] = field(init=False, repr=False, compare=False)
    """``owned`` by tenant name (a subject is classified once per snapshot, then asked per request)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {tenant.name: tenant for tenant in self.owned})

    @property
    def owned_names(self) -> list[str]:
        return list(self.by_name)

    @property
    def is_service_account(self) -> bool:
        return self.username.startswith(SERVICE_ACCOUNT_PREFIX)

    @property
    def tenant_subject(self) -> bool:
        """Subject to the tenant fence (ownership rules), as opposed to passing untouched or administering."""
        return self.role in (Role.TENANT_USER, Role.TENANT_SERVICE_ACCOUNT)

    def may_act_in(self, tenant: str) -> bool:
        """A tenant whose namespaces this subject may act on (its own tenants; a service account's home)."""
        return tenant in self.by_name or (bool(tenant) and tenant == self.home_tenant)


@dataclass(frozen=True, slots=True)
class Keys:
    """Forbidden metadata keys, compiled once: exact names and a regular expression searched in the key."""

    exact: frozenset[str]
    regex: Pattern | None

    def refuses(self, key: str) -> str:
        """Why ``key`` is refused (empty when it is not)."""
        if key in self.exact:
            return f"{key!r} is a denied key"
        if self.regex is not None and self.regex.search(key):
            return f"{key!r} matches the denied regular expression {self.regex.pattern!r}"
        return ""


NO_KEYS = Keys(frozenset(), None)


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Pattern | None:
    """Compile on the linear-time engine (cached there); an empty pattern, or one that does not compile, matches
    nothing (the webhook refuses such configurations, so this only guards against an object admitted while the
    webhook was down)."""
    if not pattern:
        return None
    try:
        return compile_pattern(pattern)
    except PatternError:
        log.warning("ignoring a regular expression that does not compile", extra={"pattern": pattern})
        return None


def keys(forbidden: Forbidden | ForbiddenMetadata | None) -> Keys:
    if forbidden is None or not (forbidden.denied or forbidden.denied_regex):
        return NO_KEYS
    return Keys(frozenset(forbidden.denied or ()), compile_regex(forbidden.denied_regex or ""))


class Reservations:
    """Namespaces this replica admitted into a tenant that the Tenancy snapshot does not show yet.

    Without them, two quick creations would both see "2 of 3" in the same snapshot and both pass. They are
    per replica (admission is stateless across replicas; the tenants controller is the durable count) and
    expire after :data:`RESERVATION_TTL`.
    """

    def __init__(self, ttl: float = RESERVATION_TTL) -> None:
        self.ttl = ttl
        self._pending: dict[str, dict[str, float]] = {}

    def add(self, tenant: str, namespace: str, now: float | None = None) -> None:
        self._pending.setdefault(tenant, {})[namespace] = (now if now is not None else time.monotonic()) + self.ttl

    def pending(
        self, tenant: TenantView, now: float | None = None, owners: Mapping[str, str] | None = None
    ) -> set[str]:
        """Reserved namespaces of ``tenant`` not yet in its snapshot view. ``owners`` is the snapshot's
        namespace -> tenant index; given it, a check costs a lookup per reservation instead of a set of all
        the tenant's namespaces per call (this runs for every namespace creation in a tenant with a quota)."""
        entries = self._pending.get(tenant.name)
        if not entries:
            return set()
        moment = now if now is not None else time.monotonic()
        shown = owners if owners is not None else dict.fromkeys(tenant.namespaces, tenant.name)
        for name in [n for n, expiry in entries.items() if expiry <= moment or shown.get(n) == tenant.name]:
            del entries[name]
        return set(entries)

    def forget_seen(self, tenancy: TenancySnapshot) -> None:
        """Drop reservations the new snapshot shows."""
        for tenant in tenancy.tenants:
            self.pending(tenant, owners=tenancy.namespace_owner)


class State:
    """The in-memory world of one admission replica."""

    def __init__(
        self,
        *,
        expect_tenancy: bool = True,
        expect_quotas: bool = False,
        expect_pools: bool = False,
        expect_globalquotas: bool = False,
        namespace: str = "",
        expect_replication: bool = False,
        expect_rules: bool = False,
    ) -> None:
        self.expect_replication = expect_replication
        """True when ``--replication-endpoint`` is given: no decision before the first Replication snapshot."""
        self.replication = ReplicationSnapshot()
        self.replication_received = False
        self.expect_tenancy = expect_tenancy
        self.namespace = namespace
        """Enclave's own namespace (``--namespace``): its service accounts are skipped by the namespace hooks."""
        self.expect_quotas = expect_quotas
        """True when ``--quotas-endpoint`` is given: no decision before the first QuotaTargets snapshot."""
        self.quotas: QuotaIndex | None = None
        self.ledgers: LedgerClient | None = None
        """Writes quota reservations (set by the process; None in unit tests that write nothing)."""
        self.reservation_ttl: timedelta = DEFAULT_TTL
        """How long a quota reservation holds before the quota controller drops it unconfirmed."""
        """False when no tenants component is configured: decide with no tenants instead of waiting."""
        self.expect_pools = expect_pools
        """True when the pools component is configured: wait for its snapshot, then decide claims from it."""
        self.pools = PoolsSnapshot()
        self.pools_received = False
        self.expect_rules = expect_rules
        """True when the tenants component publishes Rules: no decision before they arrive."""
        self.rules = RulesSnapshot()
        self.rules_received = False
        self._rule_sets: dict[str, NamespaceSet] = {}
        self._namespace_rule_sets: dict[tuple[str, tuple[int, ...]], NamespaceSet] = {}
        self._rules_arrivals = Arrivals()
        self.rules_wait = RULES_WAIT
        self.config: EffectiveConfiguration | None = None
        self.tenancy = TenancySnapshot()
        self.tenancy_received = False
        self._tenancy_arrivals = Arrivals()
        self.tenancy_wait = TENANCY_WAIT
        """0 offline (``enclave explain``), where no newer snapshot can come: a miss is decided at once."""
        self.globalquotas = GlobalQuotasSnapshot()
        """Shared quotas (enclave-globalquotas); empty without ``--globalquotas-endpoint``."""
        self.expect_globalquotas = expect_globalquotas
        self.globalquotas_received = False
        self.reservations = Reservations()
        self.protected_namespaces: Pattern | None = None
        self.node_labels = NO_KEYS
        self.node_annotations = NO_KEYS
        self._subjects: dict[tuple[str, tuple[str, ...]], Subject] = {}
        self._tenant_keys: dict[str, tuple[Keys, Keys]] = {}

    @property
    def ready(self) -> bool:
        """Both snapshots arrived: before that no decision can be right, so none is made."""
        return (
            self.config is not None
            and (self.tenancy_received or not self.expect_tenancy)
            and (self.quotas is not None or not self.expect_quotas)
            and (self.replication_received or not self.expect_replication)
            and (self.pools_received or not self.expect_pools)
            and (self.globalquotas_received or not self.expect_globalquotas)
            and (self.rules_received or not self.expect_rules)
        )

    def set_config(self, config: EffectiveConfiguration) -> None:
        spec = config.spec
        self.protected_namespaces = compile_regex(spec.protected_namespace_regex or "")
        metadata = spec.node_metadata
        self.node_labels = keys(metadata.forbidden_labels if metadata else None)
        self.node_annotations = keys(metadata.forbidden_annotations if metadata else None)
        self.config = config
        self._subjects = {}

    def set_quotas(self, targets: QuotaTargets) -> None:
        """Compile the quota targets once per snapshot (selectors, paths, CEL)."""
        self.quotas = QuotaIndex(targets)

    def set_replication(self, replication: ReplicationSnapshot) -> None:
        self.replication = replication
        self.replication_received = True

    def set_tenancy(self, tenancy: TenancySnapshot) -> None:
        self.tenancy = tenancy
        self.tenancy_received = True
        self.reservations.forget_seen(tenancy)
        self._subjects = {}
        self._tenant_keys = {}
        self._tenancy_arrivals.arrived()

    async def wait_for_tenancy(self, settled: Callable[[], bool]) -> bool:
        """Wait at most :attr:`tenancy_wait` seconds for a Tenancy snapshot after which ``settled()`` holds;
        whether it came. For a namespace request refused only because this replica has not seen a Tenant yet
        (a tenant created milliseconds before its first namespace)."""
        return await self._tenancy_arrivals.until(settled, self.tenancy_wait)

    def set_pools(self, pools: PoolsSnapshot) -> None:
        self.pools = pools
        self.pools_received = True

    def set_globalquotas(self, quotas: GlobalQuotasSnapshot) -> None:
        self.globalquotas = quotas
        self.globalquotas_received = True

    def set_rules(self, rules: RulesSnapshot) -> None:
        self.rules = rules
        self.rules_received = True
        self._rule_sets = {}
        self._namespace_rule_sets = {}
        self._rules_arrivals.arrived()

    def knows_rules(self, namespace: str) -> bool:
        """Whether the Rules snapshot names this tenant namespace (with rules or without). A tenant namespace
        it does not name is one whose rules are not published yet (just created) or are gone (its tenant was
        deleted): requests there are refused, never judged as if it had no rules. True without a tenants
        component (there are no tenant rules at all) and with a publisher that does not name namespaces
        without rules (:attr:`RulesSnapshot.complete`)."""
        rules = self.rules
        return not self.expect_rules or not rules.complete or namespace in rules.known

    async def wait_for_rules(self, namespace: str) -> bool:
        """Wait at most :attr:`rules_wait` seconds for a Rules snapshot that names ``namespace``; whether it came.
        For the moments between a namespace's creation and its rules' publication (normally milliseconds):
        an administrator's ``kubectl create namespace`` followed at once by its objects is decided, not refused.
        Every waiting request waits on one shared future, resolved by the next snapshot."""
        return await self._rules_arrivals.until(lambda: self.knows_rules(namespace), self.rules_wait)

    def rule_set(self, namespace: str) -> NamespaceSet:
        """The namespace's rules, compiled on first use after each Rules snapshot (CEL programs, matchers,
        address ranges), then read from memory by every request."""
        found = self._rule_sets.get(namespace)
        if found is None:
            item = self.rules.by_namespace.get(namespace)
            budgets = tuple(self.rules.budgets_by_namespace.get(namespace, ()))
            found = EMPTY if item is None else compile_namespace(item, budgets)
            self._rule_sets[namespace] = found
        return found

    def namespace_rule_set(self, tenant: str, name: str, labels: Mapping[str, str]) -> NamespaceSet:
        """The tenant's rules that judge namespace ``name`` itself, with these (final) labels: those whose
        ``namespaceSelector`` selects them (absent: every namespace of the tenant). Compiled once per snapshot
        and selection (a tenant has few such rules, so few distinct selections)."""
        found = self.rules.namespace_rules_by_tenant.get(tenant)
        if found is None:
            return EMPTY
        chosen = tuple(
            index
            for index, item in enumerate(found.rules)
            if item.namespace_selector is None or matches(item.namespace_selector, labels)
        )
        if not chosen:
            return EMPTY
        key = (tenant, chosen)
        compiled = self._namespace_rule_sets.get(key)
        if compiled is None:
            rules = [found.rules[index].rule for index in chosen]
            compiled = compile_namespace(NamespaceRules(namespace=name, tenant=tenant, rules=rules))
            if len(self._namespace_rule_sets) > 10_000:
                self._namespace_rule_sets = {}
            self._namespace_rule_sets[key] = compiled
        return compiled

    def subject(self, username: str, groups: tuple[str, ...]) -> Subject:
        """Who is asking, memoised per snapshot (a handful of distinct users make most requests)."""
        key = (username, groups)
        found = self._subjects.get(key)
        if found is None:
            found = self._classify(username, groups)
            if len(self._subjects) > 10_000:
                self._subjects = {}
            self._subjects[key] = found
        return found

    def _classify(self, username: str, groups: tuple[str, ...]) -> Subject:
        config = self.config
        if config is None:
            return Subject(username, groups, Role.OTHER)
        spec = config.spec
        if spec.ignore_user_with_groups and set(spec.ignore_user_with_groups) & set(groups):
            return Subject(username, groups, Role.IGNORED)
        if any(entity_matches(admin, username, groups) for admin in spec.administrators or ()):
            return Subject(username, groups, Role.ADMINISTRATOR)
        owned = tuple(self.tenancy.owned_by(username, groups))
        home = ""
        if username.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
            home = self.tenancy.namespace_owner.get(namespace, "")
        if owned or any(entity_matches(user, username, groups) for user in config.users):
            return Subject(username, groups, Role.TENANT_USER, owned, home)
        if home:
            return Subject(username, groups, Role.TENANT_SERVICE_ACCOUNT, (), home)
        return Subject(username, groups, Role.OTHER)

    def forbidden_metadata(self, tenant: TenantView) -> tuple[Keys, Keys]:
        """The tenant's forbidden (labels, annotations), compiled once per snapshot."""
        found = self._tenant_keys.get(tenant.name)
        if found is None:
            found = self._tenant_keys[tenant.name] = (
                keys(tenant.forbidden_labels),
                keys(tenant.forbidden_annotations),
            )
        return found

    def force_prefix(self, tenant: TenantView) -> bool:
        """The tenant's forceTenantPrefix, or the global one when the tenant leaves it unset."""
        if tenant.force_tenant_prefix is not None:
            return tenant.force_tenant_prefix
        return bool(self.config and self.config.spec.force_tenant_prefix)

    def namespace_count(self, tenant: TenantView) -> int:
        """Namespaces the tenant has, including those this replica admitted that the snapshot lacks."""
        return len(tenant.namespaces) + len(self.reservations.pending(tenant, owners=self.tenancy.namespace_owner))

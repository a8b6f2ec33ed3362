"""From observed state to what should be: one pure function every replica runs on every change.

``build_plan`` takes the informers' objects and the policy and returns everything the controller acts on:
the Tenancy snapshot (published by every replica), and for the Lease holder the namespace bodies,
RoleBindings, statuses and what to leave alone. Keeping it pure makes the rules testable without a cluster
and makes "level-based" literal: the plan depends on nothing but the current objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from enclave_core.api.meta import Entity, ValueMatcher
from enclave_core.api.names import TENANTS_MANAGER
from enclave_core.api.tenancy import ForbiddenList, Tenant, TenantOwner
from enclave_core.api.validation import forbidden_problems, validation_message
from enclave_core.snapshots.tenancy import Forbidden, TenancySnapshot, TenantView
from enclave_tenants.bindings import BindingTemplates, Grant, binding_templates, bindings_for
from enclave_tenants.namespaces import is_terminating, namespace_body, namespace_metadata, owns_anything, tenant_of
from enclave_tenants.owners import Owner, entity_problem, resolve_owners, selects, unlisted_owners
from enclave_tenants.policy import Policy
from enclave_tenants.status import Problem

JSON = dict[str, Any]


class TenantPlan(BaseModel):
    """One Tenant: parsed (or why not), its owners, namespaces and the view admission gets."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    raw: JSON
    tenant: Tenant | None = None
    """None when the object does not parse: then nothing of it is written or removed."""
    owners: list[Owner] = Field(default_factory=list)
    unlisted: list[Entity] = Field(default_factory=list)
    """Owners the effective users do not name (status.unlistedOwners): fenced because they own the tenant."""
    namespaces: list[str] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)
    view: TenantView | None = None

    @property
    def writable(self) -> bool:
        """Valid and not being deleted: its namespaces get metadata and RoleBindings."""
        return self.tenant is not None and not self.raw.get("metadata", {}).get("deletionTimestamp")


class OwnerPlan(BaseModel):
    """One TenantOwner: the tenants it joined and what is wrong with it."""

    name: str
    raw: JSON
    tenants: list[str] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)


class NamespaceBodies(Mapping[str, JSON]):
    """Namespace -> its apply body, built when read from what its tenant's namespaces share. The write loop
    keeps its plan between rounds; 10,000 namespaces' bodies held at once were megabytes it reads one at a time."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[str, str, dict[str, str], dict[str, str], JSON]] = {}

    def add(
        self, namespace: str, tenant: str, uid: str, labels: dict[str, str], annotations: dict[str, str], live: JSON
    ) -> None:
        self._of[namespace] = (tenant, uid, labels, annotations, live)

    def __getitem__(self, namespace: str) -> JSON:
        tenant, uid, labels, annotations, live = self._of[namespace]
        return namespace_body(namespace, tenant, uid, labels, annotations, live)

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._of

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)


class BindingBodies(Mapping[str, dict[str, JSON]]):
    """Namespace -> RoleBinding name -> body, built when read from its tenant's templates (20,000 RoleBinding
    bodies held in a plan were ~25 MB at 10,000 namespaces)."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[str, BindingTemplates]] = {}

    def add(self, namespace: str, tenant: str, templates: BindingTemplates) -> None:
        self._of[namespace] = (tenant, templates)

    def __getitem__(self, namespace: str) -> dict[str, JSON]:
        tenant, templates = self._of[namespace]
        return bindings_for(namespace, tenant, templates)

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._of

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)


class Plan(BaseModel):
    """Everything one reconcile converges on."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tenants: dict[str, TenantPlan] = Field(default_factory=dict)
    owners: dict[str, OwnerPlan] = Field(default_factory=dict)
    namespace_tenant: dict[str, str] = Field(default_factory=dict)
    """Namespace -> tenant, for every namespace of an existing tenant (terminating ones included)."""
    namespace_bodies: NamespaceBodies = Field(default_factory=NamespaceBodies)
    """Apply bodies of the live namespaces of writable tenants."""
    bindings: BindingBodies = Field(default_factory=BindingBodies)
    """Namespace -> RoleBinding name -> body, for the same namespaces."""
    frozen: set[str] = Field(default_factory=set)
    """Namespaces whose RoleBindings stay as they are: terminating, or of a tenant that cannot be read or is
    being deleted (revoking access because of a typo in a Tenant would be worse than waiting)."""
    release: list[str] = Field(default_factory=list)
    """Namespaces that left their tenant but still carry fields we applied."""
    snapshot: TenancySnapshot = Field(default_factory=TenancySnapshot)


def _forbidden(value: ForbiddenList | None, where: str, problems: list[Problem]) -> Forbidden:
    if value is None:
        return Forbidden()
    # The same check as the Tenant webhook's: a pattern the linear-time engine cannot compile.
    problems += [Problem(reason="InvalidSpec", message=str(p)) for p in forbidden_problems(where, value)]
    return Forbidden(denied=list(value.denied or []), denied_regex=value.denied_regex)


def tenant_view(
    tenant: Tenant,
    uid: str,
    owners: list[Owner],
    namespaces: list[str],
    problems: list[Problem],
    namespace_ledger: str | None = None,
) -> TenantView:
    """What admission needs of one tenant (owners resolved, namespaces sorted)."""
    options = tenant.spec.namespace_options
    where = "spec.namespaceOptions"
    return TenantView(
        name=tenant.metadata.name or "",
        uid=uid,
        owners=[owner.entity for owner in owners],
        promoted=[owner.entity for owner in owners if owner.promoted_only],
        namespaces=sorted(namespaces),
        namespace_quota=options.quota if options else None,
        namespace_ledger=namespace_ledger if options and options.quota is not None else None,
        force_tenant_prefix=tenant.spec.force_tenant_prefix,
        cordoned=tenant.spec.cordoned,
        prevent_deletion=tenant.spec.prevent_deletion,
        node_selector=dict(tenant.spec.node_selector or {}),
        forbidden_labels=_forbidden(
            options.forbidden_labels if options else None, f"{where}.forbiddenLabels", problems
        ),
        forbidden_annotations=_forbidden(
            options.forbidden_annotations if options else None, f"{where}.forbiddenAnnotations", problems
        ),
        proxy=list(tenant.spec.proxy.kinds or []) if tenant.spec.proxy else [],
        priority_classes=_allowed_classes(tenant, "priority"),
        runtime_classes=_allowed_classes(tenant, "runtime"),
    )


def _allowed_classes(tenant: Tenant, which: str) -> list[ValueMatcher]:
    """The class matchers of the tenant's ``allow`` rules (``placement.priorityClasses`` or ``runtimeClasses``):
    the classes its users may name somewhere, which enclave-proxy shows them. Audiences, conditions and
    namespace selectors narrow where a class may be used, not whether the tenant may see it; deny rules hide
    nothing (a class denied in one namespace may be allowed in another)."""
    found: list[ValueMatcher] = []
    for rule in tenant.spec.rules or []:
        enforce = rule.enforce
        placement = enforce.workloads.placement if enforce and enforce.workloads else None
        if enforce is None or enforce.action != "allow" or placement is None:
            continue
        found += (placement.priority_classes if which == "priority" else placement.runtime_classes) or []
    return found


def _parse_owners(raw_owners: Iterable[JSON]) -> tuple[list[TenantOwner], dict[str, OwnerPlan]]:
    valid: list[TenantOwner] = []
    plans: dict[str, OwnerPlan] = {}
    for raw in raw_owners:
        name = raw["metadata"]["name"]
        plan = OwnerPlan(name=name, raw=raw)
        plans[name] = plan
        try:
            owner = TenantOwner.model_validate(raw)
        except ValidationError as err:
            plan.problems.append(Problem(reason="InvalidSpec", message=validation_message(err)))
            continue
        problem = entity_problem(owner.spec.kind, owner.spec.name)
        if problem:
            plan.problems.append(Problem(reason="InvalidOwner", message=f"spec.name: {problem}"))
            continue
        valid.append(owner)
    return valid, plans


def build_plan(
    tenants: Iterable[JSON],
    tenant_owners: Iterable[JSON],
    namespaces: Iterable[JSON],
    promoted_accounts: Iterable[JSON],
    policy: Policy,
    previous_views: Mapping[str, TenantView] | None = None,
    ledgers: Mapping[str, str] | None = None,
    writes: bool = True,
    parsed: dict[str, tuple[JSON, Tenant]] | None = None,
    grants: Sequence[Grant] = (),
) -> Plan:
    """Compile the observed objects into a :class:`Plan`.

    ``writes=False`` leaves out what only the write loop needs (namespace bodies, RoleBindings, metadata
    problems): the snapshot loop compiles on every change and at 10,000 namespaces those were most of a plan.

    ``previous_views`` are the last good views by tenant name: a Tenant that stops parsing keeps its last
    good rules in the snapshot (with current namespaces), so admission does not suddenly forget its owners.
    ``ledgers`` names the initialised namespace-quota ledger of each tenant (see :mod:`enclave_tenants.ledgers`).
    ``parsed`` (tenant name -> the cached object and its model), kept by the caller between plans, spares
    parsing a Tenant whose cached object is the very same one, and lets the write loop's plan and the
    snapshot loop's share one model per tenant instead of each holding its own; a view equal to the previous
    one is that same object, so its JSON is not encoded again. ``grants`` are bound in every tenant namespace to
    Enclave's own service accounts (:class:`~enclave_tenants.bindings.Grant`).
    """
    plan = Plan()
    valid_owners, plan.owners = _parse_owners(tenant_owners)
    # aggregated TenantOwners count as service users (ServiceConfiguration status.users), as listed ones
    users = [*policy.users, *(Entity(kind=o.spec.kind, name=o.spec.name) for o in valid_owners if o.spec.aggregate)]
    live_namespaces = {item["metadata"]["name"]: item for item in namespaces}
    tenant_raws = {item["metadata"]["name"]: item for item in tenants}
    members: dict[str, list[str]] = {}
    for name, item in live_namespaces.items():
        if is_terminating(item):
            plan.frozen.add(name)  # whatever tenant it was in: its RoleBindings stay until it is gone
        label = tenant_of(item)
        if label is not None and label in tenant_raws:
            members.setdefault(label, []).append(name)
            plan.namespace_tenant[name] = label
        elif label is None and not is_terminating(item) and owns_anything(item, TENANTS_MANAGER):
            plan.release.append(name)
    promoted_by_namespace: dict[str, list[tuple[str, str]]] = {}
    for account in promoted_accounts:
        meta = account["metadata"]
        promoted_by_namespace.setdefault(meta["namespace"], []).append((meta["namespace"], meta["name"]))

    views: list[TenantView] = []
    for name in sorted(tenant_raws):
        raw = tenant_raws[name]
        tenant_plan = TenantPlan(name=name, raw=raw, namespaces=sorted(members.get(name, [])))
        plan.tenants[name] = tenant_plan
        hit = parsed.get(name) if parsed is not None else None
        try:
            if hit is not None and hit[0] is raw:
                tenant = hit[1]
            else:
                # Its status is ours and never read back: parsing it too doubled the models a plan keeps
                # (1,000 tenants' statuses of 10 namespaces were ~4 MB), and a malformed one must not block.
                tenant = Tenant.model_validate({**raw, "status": None})
                if parsed is not None:
                    parsed[name] = (raw, tenant)
        except ValidationError as err:
            if parsed is not None:
                parsed.pop(name, None)
            tenant_plan.problems.append(Problem(reason="InvalidSpec", message=validation_message(err)))
            previous = (previous_views or {}).get(name)
            if previous is not None:
                tenant_plan.view = previous.model_copy(update={"namespaces": tenant_plan.namespaces})
                views.append(tenant_plan.view)
            plan.frozen.update(tenant_plan.namespaces)
            continue
        tenant_plan.tenant = tenant
        promoted = [pair for namespace in tenant_plan.namespaces for pair in promoted_by_namespace.get(namespace, [])]
        owners, owner_problems = resolve_owners(tenant, valid_owners, promoted, policy)
        tenant_plan.owners = owners
        tenant_plan.unlisted = unlisted_owners(owners, users)
        tenant_plan.problems += [Problem(reason="InvalidOwner", message=m) for m in owner_problems]
        uid = str(raw["metadata"].get("uid", ""))
        tenant_plan.view = tenant_view(
            tenant, uid, owners, tenant_plan.namespaces, tenant_plan.problems, (ledgers or {}).get(name)
        )
        previous = (previous_views or {}).get(name)
        if previous is not None and previous == tenant_plan.view:
            tenant_plan.view = previous
        views.append(tenant_plan.view)
        for owner in valid_owners:
            if selects(name, tenant.spec.permissions, owner.metadata.labels):
                plan.owners[owner.metadata.name or ""].tenants.append(name)
        if not tenant_plan.writable:
            plan.frozen.update(tenant_plan.namespaces)
            continue
        if writes:
            _plan_namespaces(plan, tenant_plan, tenant, uid, live_namespaces, policy, grants)
    plan.snapshot = TenancySnapshot(tenants=views)
    if parsed is not None:
        for gone in set(parsed) - set(tenant_raws):
            del parsed[gone]
    return plan


def _plan_namespaces(
    plan: Plan,
    tenant_plan: TenantPlan,
    tenant: Tenant,
    uid: str,
    live: Mapping[str, JSON],
    policy: Policy,
    grants: Sequence[Grant],
) -> None:
    # The metadata problems depend on the spec alone: report them even when no namespace is written.
    labels, annotations, metadata_problems = namespace_metadata(tenant_plan.name, tenant.spec)
    templates = binding_templates(
        tenant_plan.owners,
        tenant.spec.additional_role_bindings or (),
        policy.administrators,
        policy.administration_cluster_roles,
        grants,
    )
    for namespace in tenant_plan.namespaces:
        item = live[namespace]
        if is_terminating(item):
            plan.frozen.add(namespace)
            continue
        plan.namespace_bodies.add(namespace, tenant_plan.name, uid, labels, annotations, item)
        plan.bindings.add(namespace, tenant_plan.name, templates)
    tenant_plan.problems += [Problem(reason="InvalidMetadata", message=m) for m in metadata_problems]


def stale_bindings(plan: Plan, live_bindings: Iterable[JSON]) -> list[JSON]:
    """Managed RoleBindings to delete: not wanted, and not in a namespace we leave alone."""
    stale = []
    for item in live_bindings:
        meta = item["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if namespace in plan.frozen:
            continue
        if name not in plan.bindings.get(namespace, {}):
            stale.append(item)
    return stale

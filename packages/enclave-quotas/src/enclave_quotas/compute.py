"""One quota, counted: pure, from the watch caches (no API call), the same on every replica.

For a quota it resolves the sources, selects namespaces (a CustomQuota's own; a GlobalCustomQuota's matched by
any ``namespaceSelectors``, every namespace when none), selects objects (scope selectors, then the source's
selectors) and sums their usage into ``used`` (never below zero). The result is the admission snapshot entry,
the status to write and the claims the ledger fold settles reservations against.

Bad input never stops a quota: a spec that does not validate keeps the last good entry in force; a source
kind that is not served, or an object whose usage cannot be read, is a problem reported in ``Ready`` (and an
Event), and that object keeps the usage its last good claim had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from enclave_core import API_GROUP
from enclave_core.api.ledger import TargetRef
from enclave_core.api.quotas import CustomQuotaSpec, GlobalCustomQuotaSpec, QuotaClaim, QuotaTarget, QuotaUsage
from enclave_core.conditions import Condition, new_condition, set_condition
from enclave_core.ledger import ledger_name
from enclave_core.quantity import Quantity
from enclave_core.quotas import UsageError, compile_source, custom_quota_problems, scope_matches
from enclave_core.selectors import matches_any
from enclave_core.snapshots.quotas import QuotaEntry, TargetSource
from enclave_quotas.discovery import ApiResource, Catalogue

JSON = dict[str, Any]
ClaimKey = tuple[str, str, str, str]
"""(group, kind, namespace, name) of a counted object: what a reservation's objectRef names."""

CONDITION_MESSAGE_LIMIT: Final = 1024
ZERO = Quantity(0)


@dataclass
class QuotaView:
    """Everything one pass knows about one quota."""

    kind: str
    raw: JSON
    target: TargetRef
    entry: QuotaEntry | None = None
    """None when the spec does not validate: the caller keeps the last good entry."""
    resources: list[ApiResource] = field(default_factory=list)
    """What must be watched to count it."""
    complete: bool = True
    """Every watched resource was synced: ``used`` is a full count (else no fold, no status write)."""
    claims: dict[ClaimKey, Quantity] = field(default_factory=dict)
    used: Quantity = ZERO
    status: JSON | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) per problem, for Ready and Events."""

    @property
    def key(self) -> str:
        meta = self.raw.get("metadata", {})
        return f"{self.kind}/{meta.get('namespace', '')}/{meta.get('name', '')}"

    @property
    def display(self) -> str:
        return (
            f"{self.kind} {self.target.namespace}/{self.target.name}"
            if self.target.namespace
            else (f"{self.kind} {self.target.name}")
        )


def target_ref(kind: str, raw: JSON) -> TargetRef:
    meta = raw.get("metadata", {})
    return TargetRef(
        kind=kind,
        name=str(meta.get("name", "")),
        api_group=API_GROUP,
        namespace=str(meta["namespace"]) if kind == "CustomQuota" and meta.get("namespace") else None,
        uid=str(meta.get("uid", "")) or None,
    )


def _previous_claims(raw: JSON) -> dict[str, Quantity]:
    """Last good usage per object uid, from the quota's current status."""
    found: dict[str, Quantity] = {}
    for claim in (raw.get("status") or {}).get("claims") or ():
        try:
            found[str(claim["uid"])] = Quantity.parse(claim["usage"])
        except (KeyError, TypeError, ValueError):
            continue
    return found


def count(
    kind: str,
    raw: JSON,
    catalogue: Catalogue,
    objects: Callable[[ApiResource], Iterable[JSON] | None],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    now: datetime,
) -> QuotaView:
    """Count one CustomQuota or GlobalCustomQuota (``raw`` as the watch holds it)."""
    view = QuotaView(kind, raw, target_ref(kind, raw))
    model = GlobalCustomQuotaSpec if kind == "GlobalCustomQuota" else CustomQuotaSpec
    try:
        spec = model.model_validate(raw.get("spec") or {})
        limit = Quantity.parse(spec.limit)
    except (ValidationError, ValueError) as err:
        view.problems.append(("InvalidSpec", f"spec does not validate: {err}"))
        return _finish(view, None, now)
    problems = custom_quota_problems(spec)
    if problems:
        view.problems.append(("InvalidSpec", "; ".join(problems)))
        return _finish(view, None, now)

    own_namespace = view.target.namespace
    if isinstance(spec, GlobalCustomQuotaSpec):
        selected = sorted(
            name
            for name, labels in namespaces.items()
            if not spec.namespace_selectors or matches_any(spec.namespace_selectors, labels)
        )
    else:
        selected = [own_namespace] if own_namespace else []
    chosen = frozenset(selected)

    sources: list[TargetSource] = []
    targets: list[QuotaTarget] = []
    for index, source in enumerate(spec.sources):
        resolved = [r for r in catalogue.resolve(source) if r.namespaced or kind == "GlobalCustomQuota"]
        if not resolved:
            view.problems.append(
                (
                    "SourceNotFound",
                    f"spec.sources[{index}]: no {source.kind} is served in apiVersion {source.api_version or 'v1'!r}"
                    " (is its CustomResourceDefinition installed?)",
                )
            )
        for resource in resolved:
            view.resources.append(resource)
            path = source.path if source.op != "count" else None
            cel = source.cel if source.op != "count" else None
            sources.append(
                TargetSource(
                    group=resource.group,
                    version=resource.version,
                    kind=resource.kind,
                    resource=resource.plural,
                    namespaced=resource.namespaced,
                    op=source.op,
                    path=path,
                    cel=cel,
                    selectors=source.selectors,
                )
            )
            targets.append(
                QuotaTarget(
                    group=resource.group,
                    kind=resource.kind,
                    version=resource.version,
                    cel=cel,
                    op=source.op,
                    path=path,
                    scope="Namespaced" if resource.namespaced else "Cluster",
                    selectors=source.selectors,
                )
            )

    previous = _previous_claims(raw)
    claims: dict[ClaimKey, tuple[Quantity, str, str]] = {}
    """key -> (usage, uid, version)"""
    for target, resource in zip(sources, view.resources, strict=True):
        listed = objects(resource)
        if listed is None:
            view.complete = False
            continue
        compiled = compile_source(target)
        for obj in listed:
            meta = obj.get("metadata") or {}
            namespace = str(meta.get("namespace") or "")
            if resource.namespaced and namespace not in chosen:
                continue
            labels = meta.get("labels") or {}
            if not scope_matches(spec.scope_selectors, labels) or not compiled.selects(obj, labels):
                continue
            uid = str(meta.get("uid", ""))
            try:
                usage = compiled.usage(obj)
            except UsageError as err:
                view.problems.append(
                    (
                        "UsageUnreadable",
                        f"{resource.kind} {namespace + '/' if namespace else ''}{meta.get('name')}: {err}",
                    )
                )
                if uid not in previous:
                    continue
                usage = previous[uid]
            key = (resource.group, resource.kind, namespace, str(meta.get("name", "")))
            before = claims.get(key)
            claims[key] = ((before[0] if before else ZERO) + usage, uid, resource.version)

    view.claims = {key: usage for key, (usage, _, _) in claims.items()}
    total = sum(view.claims.values(), ZERO)
    view.used = total if total.sign() >= 0 else ZERO
    available = limit - view.used
    status_claims = [
        QuotaClaim(
            group=key[0],
            kind=key[1],
            name=key[3],
            uid=uid,
            version=version,
            usage=str(usage),
            namespace=key[2] or None,
        )
        for key, (usage, uid, version) in sorted(claims.items())
    ]
    view.entry = QuotaEntry(
        kind="GlobalCustomQuota" if kind == "GlobalCustomQuota" else "CustomQuota",
        name=view.target.name,
        namespace=own_namespace,
        uid=view.target.uid or "",
        ledger=ledger_name(view.target),
        limit=str(limit),
        namespaces=selected,
        scope_selectors=spec.scope_selectors,
        sources=sources,
    )
    status: JSON = {
        "targets": [t.to_k8s() for t in targets],
        "claims": [c.to_k8s() for c in status_claims],
        "usage": QuotaUsage(used=str(view.used), available=str(available if available.sign() > 0 else ZERO)).to_k8s(),
    }
    if kind == "GlobalCustomQuota":
        status["namespaces"] = selected
    return _finish(view, status, now)


def _finish(view: QuotaView, status: JSON | None, now: datetime) -> QuotaView:
    """Ready with a reason; ``observedGeneration``; the last good counts stay when the spec is bad."""
    current = view.raw.get("status") or {}
    generation = int(view.raw.get("metadata", {}).get("generation") or 0)
    if view.problems:
        reason = view.problems[0][0]
        message = "; ".join(message for _, message in view.problems)
        ready = new_condition(
            "Ready", "False", reason, message[:CONDITION_MESSAGE_LIMIT], now=now, observed_generation=generation
        )
    else:
        ready = new_condition("Ready", "True", "Counted", "usage counted", now=now, observed_generation=generation)
    existing = [Condition.model_validate(c) for c in current.get("conditions") or ()]
    conditions = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in set_condition(existing, ready)]
    if status is None:  # a bad spec: keep what was last counted, say why it is not current
        status = {k: v for k, v in current.items() if k not in ("conditions", "observedGeneration")}
        status.setdefault("targets", [])
    view.status = {**status, "conditions": conditions, "observedGeneration": generation}
    return view

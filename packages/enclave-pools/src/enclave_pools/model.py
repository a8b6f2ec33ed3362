"""What the pools plan reads and what it says: claims and the bindings a pool's status records (parsed once
per object version), the verdict for each claim, and the plan of each pool (its committed and new bindings,
selected namespaces and wanted ResourceQuotas). Pure data and parsing; :mod:`enclave_pools.plan` decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from enclave_core.api.pools import ResourcePoolSpec
from enclave_core.quantity import Quantity, add_maps, max0, parse_map, sub_maps
from enclave_core.resourcenames import resource_list_problems

JSON = dict[str, Any]
Amounts = dict[str, Quantity]

# Claim Bound reasons.
BOUND: Final = "Bound"
POOL_EXHAUSTED: Final = "PoolExhausted"
QUEUE_EXHAUSTED: Final = "QueueExhausted"
POOL_NOT_FOUND: Final = "PoolNotFound"
POOL_DELETED: Final = "PoolDeleted"
POOL_DELETING: Final = "PoolDeleting"
POOL_INVALID: Final = "PoolInvalid"
NAMESPACE_NOT_SELECTED: Final = "NamespaceNotSelected"
RESOURCE_NOT_OFFERED: Final = "ResourceNotOffered"
INVALID_SPEC: Final = "InvalidSpec"
RESIZE_PENDING: Final = "ResizePending"


def fmt(amounts: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical strings, sorted by resource name (statuses compare equal across passes)."""
    return {key: str(amounts[key]) for key in sorted(amounts)}


@dataclass(frozen=True)
class Claim:
    """One ResourcePoolClaim as the plan reads it."""

    raw: JSON
    key: str
    namespace: str
    name: str
    uid: str
    pool: str
    request: Amounts
    problems: tuple[str, ...]
    order: tuple[str, str, str]
    deleting: bool

    @classmethod
    def read(cls, raw: JSON) -> Claim:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        request, problems = _parse_claim(spec, str(meta.get("uid", "")), meta.get("resourceVersion"))
        return cls(
            raw=raw,
            key=f"{namespace}/{name}",
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid", "")),
            pool=str(spec.get("pool") or ""),
            request=request,
            problems=problems,
            order=(str(meta.get("creationTimestamp", "")), namespace, name),
            deleting=bool(meta.get("deletionTimestamp")),
        )


_PARSED: dict[tuple[str, str], tuple[Amounts, tuple[str, ...]]] = {}
"""Parsed ``spec.claim`` by (uid, resourceVersion): a pass re-reads every claim, but a claim's amounts are
parsed once per version of the object instead of once per pass (quantity parsing dominated a pass)."""
_RECORDS: dict[tuple[str, str], dict[str, Record]] = {}
"""Parsed ``status.claims`` by (pool uid, resourceVersion), for the same reason."""
_CACHE_LIMIT = 50_000


def _remember(cache: dict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()  # old versions are never asked for again; starting over is cheaper than tracking them
    cache[key] = value


def _parse_claim(spec: JSON, uid: str, version: object) -> tuple[Amounts, tuple[str, ...]]:
    key = (uid, str(version)) if version else None
    if key is not None and key in _PARSED:
        return _PARSED[key]
    raw_claim = spec.get("claim")
    wanted: dict[str, Any] = raw_claim if isinstance(raw_claim, dict) else {}
    problems = resource_list_problems(wanted, "spec.claim")
    if not wanted:
        problems.append("spec.claim: must name at least one resource")
    parsed = ({} if problems else parse_map(wanted)), tuple(problems)
    if key is not None:
        _remember(_PARSED, key, parsed)
    return parsed


@dataclass(frozen=True)
class Record:
    """A committed binding: one entry of a pool's ``status.claims``."""

    namespace: str
    name: str
    uid: str
    claims: Amounts

    def to_status(self) -> JSON:
        return {"name": self.name, "namespace": self.namespace, "uid": self.uid, "claims": fmt(self.claims)}


@dataclass(frozen=True)
class Verdict:
    """What a claim's status should say."""

    reason: str
    message: str
    pool: str = ""
    pool_uid: str = ""
    allocation: Amounts | None = None
    """The amounts bound; None when the claim is not bound."""
    used: Amounts | None = None
    """The part of ``allocation`` the namespace uses (see :func:`claim_usage`); None when not bound or not yet
    counted by kube-controller-manager."""

    @property
    def bound(self) -> bool:
        return self.allocation is not None


@dataclass
class PoolPlan:
    raw: JSON
    name: str
    uid: str
    spec: ResourcePoolSpec | None
    problems: list[str]
    namespaces: list[str]
    committed: dict[str, Record]
    """uid -> binding as the pool's status holds it now (only claims that still exist)."""
    records: dict[str, Record]
    """uid -> binding after this pass (committed plus new bindings and resizes)."""
    deleting: bool
    exhaustions: dict[str, tuple[Quantity, Quantity]] = field(default_factory=dict)
    """Resource -> (available, requested by waiting claims), for resources some waiting claim lacks."""
    quotas: dict[str, JSON] = field(default_factory=dict)
    """Namespace -> the ResourceQuota ``spec`` wanted there."""

    @property
    def hard(self) -> Amounts:
        if self.spec is None or not self.spec.quota.hard:
            return {}
        return parse_map(self.spec.quota.hard)

    def claimed(self, records: Iterable[Record] | None = None) -> Amounts:
        return add_maps(*(r.claims for r in (self.records.values() if records is None else records)))

    @property
    def available(self) -> Amounts:
        hard = self.hard
        return max0({key: value for key, value in sub_maps(hard, self.claimed()).items() if key in hard})


@dataclass
class Plan:
    pools: dict[str, PoolPlan]
    verdicts: dict[str, Verdict]
    """Claim key (``namespace/name``) -> status."""
    claims: dict[str, Claim]


def read_records(raw: JSON) -> dict[str, Record]:
    """The bindings in a pool's ``status.claims``; an entry we cannot read is dropped (the pool's next status
    write no longer lists it, so a hand-edited entry never crashes a pass)."""
    meta = raw.get("metadata") or {}
    key = (str(meta.get("uid", "")), str(meta["resourceVersion"])) if meta.get("resourceVersion") else None
    if key is not None and key in _RECORDS:
        return dict(_RECORDS[key])
    records = _read_records(raw)
    if key is not None:
        _remember(_RECORDS, key, records)
    return dict(records)


def _read_records(raw: JSON) -> dict[str, Record]:
    records: dict[str, Record] = {}
    claims = (raw.get("status") or {}).get("claims") or {}
    if not isinstance(claims, dict):
        return records
    for namespace, entries in claims.items():
        for entry in entries if isinstance(entries, list) else []:
            try:
                record = Record(
                    namespace=str(entry.get("namespace") or namespace),
                    name=str(entry["name"]),
                    uid=str(entry["uid"]),
                    claims=parse_map(entry.get("claims") or {}),
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            records[record.uid] = record
    return records

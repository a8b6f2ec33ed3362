"""Snapshots of the controllers beyond config and tenants, compiled offline with those controllers' own code.

* **ResourcePools** (enclave-pools): the directory's ResourcePools, ResourcePoolClaims and Namespaces go
  through :func:`enclave_pools.plan.build_plan` as the controller's reconcile runs it, which binds the claims
  that fit (oldest first, as in the cluster); the bindings are written into each pool's status with
  :func:`enclave_pools.status.pool_status`, exactly what the controller stores, and the publish pass
  (``build_plan(bind=False)`` then :func:`enclave_pools.plan.snapshot`) compiles the snapshot from that, so
  only committed bindings count, as admission sees them. The ResourceQuotas the pools provision are built
  with :func:`enclave_pools.resourcequotas.quota_body`; their ``status.used`` (what the namespace's objects use, which
  kube-apiserver reports in a cluster) is the usage the test manifest gives (:class:`Usage`), zero otherwise.

* **GlobalResourceQuotas** (enclave-globalquotas): :func:`enclave_globalquotas.plan.build_plan` selects the
  namespaces and plans the ResourceQuotas it provisions; their ``status.used`` is the manifest's usage (zero
  for what it leaves out), and a second pass reads them back as the controller does, which gives the snapshot
  and each quota's usage. The quota's QuantityLedger is :func:`enclave_globalquotas.ledger.ledger_body` with
  the status the controller folds into it (:func:`enclave_core.ledger.resources.fold_resources`: used, no
  reservation pending). Admission's reservation hook is asked as a dry run, as ``enclave test`` always asks,
  so it checks against that ledger through admission's own ledger client and writes nothing.

* **CustomQuotas and GlobalCustomQuotas** (enclave-quotas): :func:`enclave_quotas.compute.count`, the
  controller's own count of one quota, compiles each into its QuotaTargets entry (sources resolved against a
  catalogue of exactly the kinds the sources name, since there is no discovery offline: ``*`` forms resolve to
  nothing and the quota is left out), with no object listed; the used amount is the manifest's usage, folded
  into the quota's QuantityLedger by :func:`enclave_core.ledger.fold` as the controller folds its count. The
  generic hook ``quotas.enclave.dev`` gets exactly the rules :func:`enclave_quotas.webhook.rules` derives from
  the entries (what enclave-quotas applies to it in a cluster). Reservations are asked as dry runs.

The usage model: what objects in a cluster consume is not computed from objects offline; a test manifest
states it (``usage:`` at the top of an ``EnclaveTest`` or in one case, the case's entries winning).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from enclave_cli.documents import Document
from enclave_core.ledger import LedgerClient, fold, new_ledger
from enclave_core.ledger.resources import fold_resources
from enclave_core.quantity import Quantity
from enclave_core.snapshots.globalquotas import GlobalQuotasSnapshot
from enclave_core.snapshots.pools import PoolsSnapshot
from enclave_core.snapshots.quotas import QuotaTargets

JSON = dict[str, Any]
USAGE_KEYS = ("pools", "globalResourceQuotas", "customQuotas")
LEDGER_NAMESPACE = "enclave-system"
"""Where offline ledgers live (admission's own namespace in a cluster; offline only a name)."""


Amounts = Mapping[str, Mapping[str, Mapping[str, str]]]
"""Name -> namespace -> resource -> quantity."""


@dataclass(frozen=True)
class Usage:
    """What a test manifest says objects use in the cluster (the part offline runs cannot count)."""

    pools: Amounts = field(default_factory=dict)
    """Pool -> namespace -> what the namespace's objects use against the ResourceQuota the pool provisions
    there (its ``status.used``)."""
    global_resource_quotas: Amounts = field(default_factory=dict)
    """GlobalResourceQuota -> namespace -> what the namespace's objects use against the ResourceQuota the
    quota provisions there."""
    custom_quotas: Mapping[str, str] = field(default_factory=dict)
    """``namespace/name`` of a CustomQuota, or the name of a GlobalCustomQuota -> its used amount."""

    def merged(self, other: Usage) -> Usage:
        return Usage(
            pools=_merge(self.pools, other.pools),
            global_resource_quotas=_merge(self.global_resource_quotas, other.global_resource_quotas),
            custom_quotas={**self.custom_quotas, **other.custom_quotas},
        )

    @property
    def key(self) -> str:
        """A stable text of the whole usage (what compiled snapshots are cached by)."""
        return json.dumps(
            {"pools": self.pools, "grq": self.global_resource_quotas, "cq": self.custom_quotas}, sort_keys=True
        )


def _merge(first: Amounts, second: Amounts) -> Amounts:
    merged = {name: dict(per) for name, per in first.items()}
    for name, per in second.items():
        merged.setdefault(name, {}).update(per)
    return merged


NO_USAGE = Usage()


def _amounts(document: Document, raw: Any, loc: tuple[str | int, ...], what: str) -> Amounts:
    ok = isinstance(raw, dict) and all(
        isinstance(per, dict)
        and all(isinstance(amounts, dict) and all(isinstance(k, str) for k in amounts) for amounts in per.values())
        for per in raw.values()
    )
    if not ok:
        raise document.error(
            f"usage.{what} maps {what[:-1] if what == 'pools' else 'quota'} -> namespace -> {{resource: quantity}}", loc
        )
    return {
        str(name): {str(ns): {str(k): str(v) for k, v in amounts.items()} for ns, amounts in per.items()}
        for name, per in raw.items()
    }


def parse_usage(document: Document, raw: Any, loc: tuple[str | int, ...]) -> Usage:
    if raw is None:
        return NO_USAGE
    if not isinstance(raw, dict):
        raise document.error("usage must be a mapping", loc)
    unknown = sorted(set(raw) - set(USAGE_KEYS))
    if unknown:
        known = ", ".join(USAGE_KEYS)
        raise document.error(f"unknown field {unknown[0]!r} in usage (known: {known})", (*loc, unknown[0]))
    custom = raw.get("customQuotas") or {}
    if not isinstance(custom, dict) or not all(isinstance(v, str | int) for v in custom.values()):
        raise document.error(
            "usage.customQuotas maps namespace/name (CustomQuota) or name (GlobalCustomQuota) -> quantity",
            (*loc, "customQuotas"),
        )
    return Usage(
        pools=_amounts(document, raw.get("pools") or {}, (*loc, "pools"), "pools"),
        global_resource_quotas=_amounts(
            document, raw.get("globalResourceQuotas") or {}, (*loc, "globalResourceQuotas"), "globalResourceQuotas"
        ),
        custom_quotas={str(k): str(v) for k, v in custom.items()},
    )


def _with_uid(raw: JSON, uid: str) -> JSON:
    meta = dict(raw.get("metadata") or {})
    meta.setdefault("uid", uid)
    return {**raw, "metadata": meta}


@dataclass
class PoolObjects:
    """The directory's pools and claims, with the stand-in uids objects in files lack."""

    pools: list[JSON]
    claims: list[JSON]
    namespaces: list[JSON]

    @classmethod
    def of(cls, pools: list[Document], claims: list[Document], namespaces: list[Document]) -> PoolObjects:
        return cls(
            [_with_uid(d.data, f"offline-pool-{d.name}") for d in pools],
            [
                _with_uid(d.data, f"offline-claim-{(d.data.get('metadata') or {}).get('namespace', '')}-{d.name}")
                for d in claims
            ],
            [d.data for d in namespaces],
        )


def pools_snapshot(objects: PoolObjects, usage: Usage) -> PoolsSnapshot:
    """The ResourcePools snapshot enclave-pools would publish once it has bound what fits (see the module)."""
    from enclave_pools import plan as pools
    from enclave_pools.resourcequotas import quota_body
    from enclave_pools.status import pool_status

    now = datetime.now(UTC)
    bound = pools.build_plan(objects.pools, objects.claims, objects.namespaces, bind=True)
    written = [
        {**raw, "status": pool_status(bound.pools[str(raw["metadata"]["name"])], problems=[], now=now)}
        for raw in objects.pools
    ]
    published = pools.build_plan(written, objects.claims, objects.namespaces, bind=False)
    quotas = []
    for pool in bound.pools.values():
        for namespace in pool.quotas:
            body = quota_body(pool, namespace)
            used = usage.pools.get(pool.name, {}).get(namespace, {})
            body["status"] = {"hard": body["spec"]["hard"], "used": dict(used)}
            quotas.append(body)
    return pools.snapshot(published, quotas)


def global_quotas(
    quotas: list[Document], namespaces: list[Document], usage: Usage
) -> tuple[GlobalQuotasSnapshot, list[JSON]]:
    """The GlobalQuotas snapshot and the quotas' ledgers, as enclave-globalquotas keeps them (see the module)."""
    from enclave_globalquotas.ledger import ledger_body
    from enclave_globalquotas.plan import build_plan

    raws = [_with_uid(d.data, f"offline-grq-{d.name}") for d in quotas]
    by_name = {d.name: d.data for d in namespaces}
    planned = build_plan(raws, by_name, {}, ledger_namespace=LEDGER_NAMESPACE)
    reported: dict[str, JSON] = {}
    for quota in planned.quotas.values():
        stated = usage.global_resource_quotas.get(quota.name, {})
        for namespace, body in quota.desired.items():
            used = {key: stated.get(namespace, {}).get(key, "0") for key in quota.hard}
            reported[f"{namespace}/{body['metadata']['name']}"] = {
                **body,
                "status": {"hard": body["spec"]["hard"], "used": used},
            }
    plan = build_plan(raws, by_name, reported, ledger_namespace=LEDGER_NAMESPACE)
    now = datetime.now(UTC)
    ledgers = []
    for quota in plan.quotas.values():
        if not quota.valid:
            continue
        body = ledger_body(quota.name, quota.uid, LEDGER_NAMESPACE)
        status = fold_resources(
            None,
            used=quota.used,
            namespaces=quota.namespaces,
            initialized=quota.initialized,
            generation=quota.generation,
            settled=lambda _: True,
            now=now,
        )
        body["metadata"]["resourceVersion"] = "1"
        body["status"] = status.to_k8s()
        ledgers.append(body)
    return plan.snapshot, ledgers


def offline_ledgers(ledgers: list[JSON]) -> LedgerClient:
    """Admission's own ledger client holding ``ledgers`` as if it had read them: decisions read them from its
    cache (a dry run writes nothing). It has no API client: a ledger it does not hold cannot be fetched."""
    client = LedgerClient(None, LEDGER_NAMESPACE)  # type: ignore[arg-type]  # never used: every ledger is held
    for ledger in ledgers:
        client.observe(ledger)
    return client


def _catalogue(quotas: list[Document]) -> Any:
    """The resources the quotas' sources name exactly (``apiVersion`` and ``kind`` both spelled out)."""
    from enclave_quotas.discovery import ApiResource, Catalogue

    from enclave_cli.engine import Request, resource_of

    found: dict[tuple[str, str, str], ApiResource] = {}
    preferred: dict[str, str] = {"": "v1"}
    for document in quotas:
        for source in (document.data.get("spec") or {}).get("sources") or []:
            api_version, kind = str(source.get("apiVersion") or "v1"), str(source.get("kind") or "")
            if "*" in api_version or kind in ("", "*") or ("/" not in api_version and api_version != "v1"):
                continue
            group, plural = resource_of(kind, api_version)
            version = api_version.rpartition("/")[2]
            probe = Request("", (), "CREATE", None, None, group, plural, kind=kind, api_version=api_version)
            found[(group, version, kind)] = ApiResource(group, version, kind, plural, probe.namespaced)
            preferred.setdefault(group, version)
    return Catalogue(tuple(found.values()), tuple(sorted(preferred.items())))


def custom_quotas(quotas: list[Document], namespaces: list[Document], usage: Usage) -> tuple[QuotaTargets, list[JSON]]:
    """The QuotaTargets snapshot and the quotas' ledgers, as enclave-quotas keeps them (see the module)."""
    from enclave_quotas.compute import count

    now = datetime.now(UTC)
    catalogue = _catalogue(quotas)
    labels = {d.name: dict((d.data.get("metadata") or {}).get("labels") or {}) for d in namespaces}
    entries = []
    ledgers = []
    for document in quotas:
        raw = _with_uid(document.data, f"offline-quota-{document.name}")
        view = count(document.kind, raw, catalogue, lambda _: [], labels, now=now)
        if view.entry is None or not view.entry.sources:
            continue
        entries.append(view.entry)
        key = f"{view.target.namespace}/{view.target.name}" if view.target.namespace else view.target.name
        used = Quantity.parse(usage.custom_quotas.get(key, "0"))
        status = fold(None, used, settled=lambda _: True, gone=lambda _: True, now=now)
        body = new_ledger(view.target, LEDGER_NAMESPACE).to_k8s()
        body["metadata"]["resourceVersion"] = "1"
        body["status"] = status.to_k8s()
        ledgers.append(body)
    return QuotaTargets(quotas=entries), ledgers

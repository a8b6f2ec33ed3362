"""The custom quota controller: watches -> one count per quota -> snapshot on every replica, writes on the leader.

One loop. Any watched change (a quota, a counted object, a namespace, a ledger, a CRD) triggers a pass that
counts every quota from the watch caches (:mod:`enclave_quotas.compute`) and publishes the QuotaTargets
snapshot at once, on every replica. On the Lease holder the same pass then converges the cluster: each
quota's QuantityLedger exists (recreated when its quota was), is folded (reservations whose objects are now
counted, or past ``expiresAt``, dropped; ``allocated = used + reserved``), the quota's status is written,
Events say what is wrong, ledgers of deleted quotas are removed, and the generic quota hook's rules follow the
targets. Each write is decided by comparing with the caches, so a steady state costs no API call.

The set of watched resources follows the quotas: an informer per resolved (group, version, resource), started
when a quota first names it and stopped when none does. Discovery is re-read when a CRD changes and, while a
source does not resolve, every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.ledger import Reservation
from enclave_core.kube import projections, shared
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.ledger import LedgerClient, LedgerMissingError, fold, new_ledger
from enclave_core.quantity import Quantity
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.loops import ControllerLoop, Result
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.quotas import QUOTAS_KIND, QuotaEntry, QuotaTargets
from enclave_quotas import webhook
from enclave_quotas.compute import ClaimKey, QuotaView, count
from enclave_quotas.discovery import ApiResource, Catalogue, discover

log = logging.getLogger(__name__)

DEFAULT_CONFIGURATION = "enclave-validating-webhook-configuration"
WRITES = Counter("enclave_quotas_writes_total", "Writes to the cluster", ["kind", "operation"])
USED = Gauge("enclave_quotas_used", "Usage counted per quota", ["kind", "namespace", "name"])
LIMIT = Gauge("enclave_quotas_limit", "Limit per quota", ["kind", "namespace", "name"])
CLAIM = Gauge(
    "enclave_quotas_claim_usage",
    "Usage per counted object (only quotas with options.emitMetricPerClaimUsage)",
    ["kind", "namespace", "name", "claim_kind", "claim_namespace", "claim_name"],
)
WATCHED = Gauge("enclave_quotas_watched_resources", "Resources watched for counting")

SETTLE_SECONDS = 0.02
"""After a wake, let a burst of watch events land so one pass handles them all."""
MIN_WAIT_SECONDS = 0.05
"""The least time between two passes that no change asked for (a fold due in a millisecond waits this long)."""

QUOTA_PATHS = {
    "CustomQuota": f"/apis/{GROUP_VERSION}/customquotas",
    "GlobalCustomQuota": f"/apis/{GROUP_VERSION}/globalcustomquotas",
}


@dataclass(frozen=True)
class Settings:
    namespace: str = "enclave-system"
    """Where the ledgers live."""
    webhook_configuration: str = ""
    """Where the generic quota hook lives (``--webhook-configuration``); empty: the one the ServiceConfiguration
    names, followed from enclave-config's stream, and :data:`DEFAULT_CONFIGURATION` until it says."""
    webhook_name: str = "quotas.enclave.dev"
    resync_seconds: float = 60.0
    fold_interval: float = 0.5
    """Least time between two folds of one ledger (each fold is a write admission may conflict with)."""
    rediscover_seconds: float = 5.0
    """While a source does not resolve: how often discovery is re-read."""
    metrics_tenant_labels: bool = False
    """Series whose labels carry tenants' names (namespaced CustomQuotas, per-claim usage): ``/metrics`` may be
    scraped by anyone the NetworkPolicy lets in, tenants' pods included, so they are opt-in."""


def _number(value: Quantity) -> float:
    return float(value.as_decimal())


class QuotasController(ControllerBase[Settings]):
    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)  # events_namespace: where a GlobalCustomQuota's Events go
        self.ledgers = LedgerClient(kube, settings.namespace)
        self.catalogue = Catalogue()
        self._rediscover = asyncio.Event()
        self.discovered = asyncio.Event()
        """Set once the API's resources are known (:func:`enclave_quotas.discovery.discover`): no pass before."""
        self._last_discovery = 0.0
        self._good: dict[str, QuotaEntry] = {}
        """Last good entry per quota, kept while its spec is invalid."""
        self._folded_at: dict[str, float] = {}
        self._claim_labels: set[tuple[str, ...]] = set()
        self._objects: dict[ApiResource, tuple[Informer, asyncio.Task[None]]] = {}
        change = self._changed
        self.quotas = {
            kind: Informer(kube, path, on_change=change, name=kind.lower()) for kind, path in QUOTA_PATHS.items()
        }
        # As every controller caches them (one copy in a host): enclave_core.kube.projections.
        self.namespaces = shared.informer(
            kube, "/api/v1/namespaces", on_change=change, name="namespaces", transform=projections.namespace
        )
        self.ledger_cache = self.ledgers.informer(names.QUOTAS_MANAGER, on_change=change)
        self.crds = Informer(
            kube,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            on_change=lambda key: self._rediscover.set(),
            name="crds",
        )
        self.webhook_configuration = settings.webhook_configuration or DEFAULT_CONFIGURATION
        self.hooks = Informer(
            kube,
            webhook.ADMISSION_PATH,
            label_selector=f"{names.MANAGED_BY}={names.CONFIG_MANAGER}",
            on_change=change,
            name="webhook-configurations",
        )
        # Every replica counts and publishes; only the Lease holder's pass writes (``leading``).
        self.loop = ControllerLoop(
            "quotas",
            self.informers(),
            self.reconcile,
            settings.resync_seconds,
            leader_only=False,
            synced_after=[self.discovered],
            settle_seconds=SETTLE_SECONDS,
        )
        self.synced, self.reconciled = self.loop.synced, self.loop.reconciled

    @property
    def leading(self) -> bool:
        return self.loop.leading

    def informers(self) -> list[Informer]:
        return [*self.quotas.values(), self.namespaces, self.ledger_cache, self.crds, self.hooks]

    def _changed(self, _key: str = "") -> None:
        self.loop.changed()

    def configure(self, config: EffectiveConfiguration) -> None:
        """Besides where a GlobalCustomQuota's Events go (the base's): the hook lives in the configuration the
        ServiceConfiguration names, unless ``--webhook-configuration`` said where."""
        if not self.settings.webhook_configuration:
            self.set_webhook_configuration(config.validating_configuration_name)

    def set_webhook_configuration(self, name: str) -> None:
        if name != self.webhook_configuration:
            log.info("quota hook configuration", extra={"configuration": name})
        self.webhook_configuration = name
        self.loop.changed()

    def set_leading(self, leading: bool) -> None:
        self.loop.set_leading(leading)

    # -- loops ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        discovery = asyncio.create_task(self._discovery_loop(), name="discovery")
        try:
            await self.loop.run()
        finally:
            discovery.cancel()
            self.close()

    def close(self) -> None:
        """Stop the watches of counted objects (the end of :meth:`run`; a test driving the loop alone calls it)."""
        for _, task in self._objects.values():
            task.cancel()
        self._objects.clear()

    async def _discovery_loop(self) -> None:
        backoff = 0.5
        while True:
            try:
                self.catalogue = await discover(self.kube)
                self._last_discovery = time.monotonic()
                self.discovered.set()
                backoff = 0.5
                self.loop.changed()
            except Exception as err:
                log.warning("discovery failed", extra={"error": str(err)})
                await asyncio.sleep(backoff)
                backoff = min(30.0, backoff * 2)
                continue
            self._rediscover.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(300):  # not wait_for: see enclave_core.runtime.loops (a lost cancel)
                    await self._rediscover.wait()
            await asyncio.sleep(0.5)  # a CRD is Established a moment before discovery serves it

    # -- one pass --------------------------------------------------------------------------------------------

    def _listed(self, resource: ApiResource) -> list[JSON] | None:
        found = self._objects.get(resource)
        if found is None or not found[0].synced.is_set():
            return None
        return found[0].values()

    def count_all(self) -> list[QuotaView]:
        now = datetime.now(UTC)
        namespaces = {
            str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {}) for ns in self.namespaces.values()
        }
        views = [
            count(kind, raw, self.catalogue, self._listed, namespaces, now=now)
            for kind, informer in self.quotas.items()
            for raw in sorted(
                informer.values(), key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
            )
        ]
        self._watch({resource for view in views for resource in view.resources})
        return views

    def _watch(self, wanted: set[ApiResource]) -> None:
        for resource in wanted - set(self._objects):
            informer = Informer(self.kube, resource.path, on_change=self._changed, name=f"objects:{resource.path}")
            self._objects[resource] = (informer, asyncio.create_task(informer.run(), name=informer.name))
            log.info("counting objects", extra={"resource": resource.path})
        for resource in set(self._objects) - wanted:
            _, task = self._objects.pop(resource)
            task.cancel()
            log.info("no quota counts objects any more", extra={"resource": resource.path})
        WATCHED.set(len(self._objects))

    def publish(self, views: list[QuotaView]) -> list[QuotaEntry]:
        entries = []
        seen = set()
        for view in views:
            seen.add(view.key)
            if view.entry is not None and view.complete:
                self._good[view.key] = view.entry
            entry = self._good.get(view.key)
            if entry is not None:
                entries.append(entry)
        for key in set(self._good) - seen:
            del self._good[key]
        snapshot = QuotaTargets(quotas=entries)
        self.hub.publish(QUOTAS_KIND, snapshot.model_dump_json().encode())
        return entries

    async def reconcile(self) -> Result:
        """Count, publish, and (leader) write; come back when a fold or an expiry is due regardless of events
        (and, on a replica that does not write, to re-read discovery while a source does not resolve)."""
        views = self.count_all()
        entries = self.publish(views)
        self._metrics(views)
        unresolved = any(problem == "SourceNotFound" for view in views for problem, _ in view.problems)
        if unresolved and time.monotonic() - self._last_discovery > self.settings.rediscover_seconds:
            self._rediscover.set()
        if not self.leading:
            return Result(requeue_after=self.settings.rediscover_seconds)
        wait = self.settings.resync_seconds
        for view in views:
            try:
                wait = min(wait, await self._write(view))
            except Exception as err:  # one quota never stops the others
                log.warning("quota write failed", extra={"quota": view.key, "error": str(err)})
                wait = min(wait, 1.0)
        await self._prune_ledgers(views)
        await self._scope_hook(entries)
        return Result(requeue_after=max(wait, MIN_WAIT_SECONDS))

    def _metrics(self, views: list[QuotaView]) -> None:
        claims: set[tuple[str, ...]] = set()
        for view in views:
            if view.target.namespace and not self.settings.metrics_tenant_labels:
                continue  # a CustomQuota: its namespace (and name) are a tenant's
            labels = (view.kind, view.target.namespace or "", view.target.name)
            USED.labels(*labels).set(_number(view.used))
            if view.entry is not None:
                LIMIT.labels(*labels).set(_number(Quantity.parse(view.entry.limit)))
            options = ((view.raw.get("spec") or {}).get("options") or {}).get("emitMetricPerClaimUsage")
            if options and self.settings.metrics_tenant_labels:
                for (_, kind, namespace, name), usage in view.claims.items():
                    key = (*labels, kind, namespace, name)
                    claims.add(key)
                    CLAIM.labels(*key).set(_number(usage))
        for stale in self._claim_labels - claims:
            with contextlib.suppress(KeyError):
                CLAIM.remove(*stale)
        self._claim_labels = claims

    # -- leader writes ---------------------------------------------------------------------------------------

    async def _write(self, view: QuotaView) -> float:
        """Ledger, fold, status, events for one quota; returns when the next fold is due (an expiry)."""
        await self._report(view)
        if view.entry is None or not view.complete:
            return self.settings.resync_seconds
        name = view.entry.ledger
        ledger = self.ledger_cache.get(f"{self.settings.namespace}/{name}")
        stale = ledger is not None and (ledger.get("spec") or {}).get("targetRef", {}).get("uid") != view.target.uid
        if stale:  # a ledger left over from a deleted quota of the same name
            await self.ledgers.delete(name)
            WRITES.labels("QuantityLedger", "delete").inc()
            ledger = None
        if ledger is None:
            body = new_ledger(view.target, self.settings.namespace, {names.MANAGED_BY: names.QUOTAS_MANAGER})
            await self.ledgers.ensure(body)
            WRITES.labels("QuantityLedger", "create").inc()
        claims = view.claims
        now = datetime.now(UTC)
        since = time.monotonic() - self._folded_at.get(name, 0.0)
        if since < self.settings.fold_interval:  # a burst: let admission have the ledger, fold a bit later
            await self._write_status(view)
            return self.settings.fold_interval - since

        def settled(reservation: Reservation) -> bool:
            ref = reservation.object_ref
            key: ClaimKey = (ref.api_group or "", ref.kind, ref.namespace or "", ref.name or "")
            counted = claims.get(key)
            return counted is not None and counted == Quantity.parse(reservation.usage)

        def gone(hint: Any) -> bool:
            ref = hint.object_ref
            return (ref.api_group or "", ref.kind, ref.namespace or "", ref.name or "") not in claims

        try:
            _, stored = await self.ledgers.update(
                name, lambda status: fold(status, view.used, settled=settled, gone=gone, now=now)
            )
        except LedgerMissingError:
            return 0.5
        if stored is not None:
            WRITES.labels("QuantityLedger", "fold").inc()
            self._folded_at[name] = time.monotonic()
        cached = self.ledgers.cached(name)
        wait = self.settings.resync_seconds
        for reservation in (cached.status.reservations or []) if cached and cached.status else []:
            if reservation.expires_at is not None:
                wait = min(wait, max((reservation.expires_at - now).total_seconds(), 0.0) + 0.1)
        await self._write_status(view)
        return wait

    async def _write_status(self, view: QuotaView) -> None:
        informer = self.quotas[view.kind]
        meta = view.raw["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        live = informer.get(key)
        if live is None or live.get("status") == view.status:
            return
        path = resource_path(
            GROUP_VERSION,
            "customquotas" if view.kind == "CustomQuota" else "globalcustomquotas",
            namespace=meta.get("namespace"),
            name=meta["name"],
            subresource="status",
        )
        try:
            stored = await self.kube.replace(path, {**live, "status": view.status})
        except KubeError as err:
            if err.conflict or err.not_found:
                self.loop.again()  # a newer copy is on its way through the watch
                return
            raise
        informer.items[key] = stored
        WRITES.labels(view.kind, "status").inc()

    async def _report(self, view: QuotaView) -> None:
        """One Event per distinct problem state of a quota (:meth:`EventRecorder.warn_once`), not one per pass."""
        if not view.problems:
            self.events.fine(view.key)
            return
        await self.events.warn_once(
            view.key,
            {**view.raw, "apiVersion": GROUP_VERSION, "kind": view.kind},
            view.problems[0][0],
            "; ".join(m for _, m in view.problems),
            namespace=self.events_namespace,  # a cluster-scoped quota's: spec.events.namespace
        )

    async def _prune_ledgers(self, views: list[QuotaView]) -> None:
        wanted = {view.entry.ledger for view in views if view.entry is not None} | {
            entry.ledger for entry in self._good.values()
        }
        for key, ledger in list(self.ledger_cache.items.items()):
            name = ledger["metadata"]["name"]
            if name not in wanted:
                await self.ledgers.delete(name)
                self.ledger_cache.items.pop(key, None)
                WRITES.labels("QuantityLedger", "delete").inc()
                log.info("ledger of a deleted quota removed", extra={"ledger": name})

    async def _scope_hook(self, entries: list[QuotaEntry]) -> None:
        """Set the generic quota hook's rules to the targets (when the hook exists)."""
        live = self.hooks.get(self.webhook_configuration)
        current = webhook.live_rules(live, self.settings.webhook_name)
        if current is None:
            return  # no quota hook configured (yet): enclave-config writes it, then the watch brings us back
        wanted = webhook.rules(entries)
        if current == wanted:
            return
        path = f"{webhook.ADMISSION_PATH}/{self.webhook_configuration}"
        body = webhook.apply_body(self.webhook_configuration, self.settings.webhook_name, wanted)
        stored = await self.kube.apply(path, body)
        self.hooks.items[self.webhook_configuration] = stored
        WRITES.labels("ValidatingWebhookConfiguration", "apply").inc()
        log.info("quota hook scoped", extra={"resources": sum(len(rule["resources"]) for rule in wanted)})

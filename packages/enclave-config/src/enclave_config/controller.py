"""The configuration controller: one level-based reconcile of everything ServiceConfiguration implies.

Every replica watches the same objects and computes the effective configuration, so every replica can serve
ConfigService (subscribers may reach any of them through the Service). Only the Lease holder writes: the
default object when missing, the TLS Secret, webhook configurations, RBAC and status. Any change to a watched
object (including drift someone made to what we own) triggers a full reconcile from observed state.

No work where the output does not change: of a Tenant only its name matters here (``status.tenants``) and of
a TenantOwner only the entity it aggregates, so the far more frequent changes to everything else (a tenant's
status moves on every namespace event) wake nothing. A reconcile writes a generated object only when this
replica has not applied that exact body yet or the live object no longer holds it (drift), so a resync of an
unchanged configuration makes no API call at all.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import Gauge
from pydantic import ValidationError

from enclave_config import crds, policies, rbac, tls, webhooks
from enclave_config.secrets import NamedSecrets, SecretsUnreadableError
from enclave_core import GROUP_VERSION, invalidation
from enclave_core.api import names
from enclave_core.api.configuration import ServiceConfiguration, ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.api.validation import service_configuration_problems as problems
from enclave_core.api.validation import validation_message
from enclave_core.conditions import Condition, new_condition, set_condition
from enclave_core.durations import parse_duration
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.holds import holds
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.loops import DONE, ControllerLoop, Result
from enclave_core.snapshots import access
from enclave_core.snapshots.configuration import CONFIG_KIND, EffectiveConfiguration, effective
from enclave_core.snapshots.hub import SnapshotHub

log = logging.getLogger(__name__)

READY = Gauge("enclave_config_ready", "1 when the ServiceConfiguration is validated and applied")
ADMISSION_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}
RBAC_PATHS = {
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}
RETRY_SECONDS = 5.0
"""How soon an apply that failed (or a storage migration not done yet) is tried again without a change."""


@dataclass(frozen=True)
class Settings:
    name: str
    namespace: str
    tls_validity: timedelta
    extra_tls_ips: tuple[str, ...] = ("127.0.0.1",)
    extra_tls_names: tuple[str, ...] = ("localhost",)
    resync_seconds: float = 60.0
    owner_cluster_role: str = ""
    """ClusterRole whose deletion garbage-collects what this controller generates (the chart passes its own
    ClusterRole, which ``helm uninstall`` deletes); empty: generated objects have no owner."""
    manage_crds: bool = False
    """Keep Enclave's CRDs' conversion webhook client and CA, and migrate their storage (one process per cluster)."""


class ApplyError(Exception):
    """Applying the configuration failed in a way the user must fix (reason, message)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ConfigController(ControllerBase[Settings]):
    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)  # the configuration is its own: never waits for it
        self.last_good: EffectiveConfiguration | None = None
        self._owner: list[JSON] | None = None
        self._tenant_names: frozenset[str] = frozenset()
        self._aggregated: frozenset[tuple[str, str]] = frozenset()
        self._promoted_namespaces: frozenset[str] = frozenset()
        """Namespaces holding a service account labelled promoted (a handful): which tenants' namespaces matter."""
        self._homes: dict[str, frozenset[str]] = {}
        """Tenant -> those of ``_promoted_namespaces`` its status lists: a change wakes a reconcile."""
        self._applied: dict[tuple[str, str], JSON] = {}
        """(kind, name) -> the body this replica last applied: what tells a changed desired state from drift."""
        base = f"/apis/{GROUP_VERSION}"
        change = self._changed
        self.configs = Informer(kube, f"{base}/serviceconfigurations", on_change=change, name="configs")
        self.tenants = Informer(kube, f"{base}/tenants", on_change=self._tenants_changed, name="tenants")
        self.owners = Informer(kube, f"{base}/tenantowners", on_change=self._owners_changed, name="tenantowners")
        self.secrets = NamedSecrets(kube, settings.namespace, on_change=change)
        # Only objects generated for *this* ServiceConfiguration are ours to prune.
        managed = f"{names.MANAGED_BY}={names.CONFIG_MANAGER},{names.CONFIGURATION_LABEL}={settings.name}"
        self.managed = {
            kind: Informer(kube, path, label_selector=managed, on_change=change, name=kind)
            for kind, path in {**ADMISSION_PATHS, **RBAC_PATHS, **policies.PATHS}.items()
        }
        self.promoted = Informer(
            kube,
            "/api/v1/serviceaccounts",
            label_selector=f"{names.PROMOTED_LABEL}=true",
            on_change=self._promoted_changed,
            name="sa",
        )
        self.crds = Informer(
            kube,
            crds.CRD_PATH,
            label_selector=f"{names.PART_OF}={names.PART_OF_ENCLAVE}",
            on_change=change,
            name="crds",
        )
        self._optional = [self.crds] if settings.manage_crds else []
        # Every replica reconciles (each serves ConfigService from the configuration it computes); only the
        # Lease holder's reconcile writes (``leading``).
        self.loop = ControllerLoop(
            "config", self._informers(), self.reconcile, settings.resync_seconds, leader_only=False
        )
        self.reconciled = self.loop.reconciled

    @property
    def leading(self) -> bool:
        return self.loop.leading

    def _informers(self) -> list[Informer]:
        return [
            self.configs,
            self.tenants,
            self.owners,
            self.promoted,
            *self._optional,
            *self.managed.values(),
        ]

    def _changed(self, _key: str) -> None:
        self.loop.changed()

    def _tenants_changed(self, key: str) -> None:
        """Only the set of names is ours (``status.tenants``), and which namespaces holding promoted service
        accounts a tenant lists: a tenant's spec or the rest of its status changing is not. The check costs the
        tenant's own namespaces, not every tenant's (a tenant's status moves on every namespace event)."""
        names = frozenset(self.tenants.items)
        if names != self._tenant_names:
            self._tenant_names = names
            self.loop.changed()
        homes = self._tenant_homes(self.tenants.get(key))
        if homes != self._homes.get(key, frozenset()):
            if homes:
                self._homes[key] = homes
            else:
                self._homes.pop(key, None)
            self.loop.changed()

    def _owners_changed(self, _key: str) -> None:
        """Only the entities aggregated into the tenant users are ours (``status.users``, serviceUsers)."""
        aggregated = frozenset(entity for owner in self.owners.values() if (entity := _aggregated(owner)))
        if aggregated != self._aggregated:
            self._aggregated = aggregated
            self.loop.changed()

    def _promoted_changed(self, _key: str) -> None:
        """A labelled service account came, went or changed: which tenants hold one is worked out again."""
        namespaces = frozenset(sa["metadata"]["namespace"] for sa in self.promoted.values())
        if namespaces != self._promoted_namespaces:
            self._promoted_namespaces = namespaces
            homes = {key: self._tenant_homes(tenant) for key, tenant in self.tenants.items.items()}
            self._homes = {key: found for key, found in homes.items() if found}
        self.loop.changed()

    def _tenant_homes(self, tenant: JSON | None) -> frozenset[str]:
        """The namespaces holding promoted accounts that ``tenant``'s status lists as its own."""
        if tenant is None or not self._promoted_namespaces:
            return frozenset()
        listed = (tenant.get("status") or {}).get("namespaces") or ()
        return frozenset(name for name in listed if name in self._promoted_namespaces)

    def _promoted_accounts(self) -> list[tuple[str, str]]:
        return rbac.promoted_in_tenants(self.promoted.values(), self.tenants.values())

    def set_leading(self, leading: bool) -> None:
        self.loop.set_leading(leading)

    async def run(self) -> None:
        """Watch, then reconcile on every change and at least every resync period (:mod:`enclave_core.runtime.loops`)."""
        try:
            await self.loop.run()
        finally:
            self.secrets.stop()

    # -- one reconcile -------------------------------------------------------------------------------------

    async def reconcile(self) -> Result:
        """Converge on the observed state; come back when a certificate needs a look or a failed apply a retry."""
        raw = self.configs.get(self.settings.name)
        if raw is None:
            if self.leading:
                await self._create_default()
            return DONE
        generation = int(raw.get("metadata", {}).get("generation", 0))
        try:
            config = ServiceConfiguration.model_validate(raw)
        except ValidationError as err:
            await self._not_ready(raw, generation, "InvalidSpec", validation_message(err))
            return DONE
        found = problems(config.spec)
        if found:
            await self._not_ready(raw, generation, "InvalidConfiguration", "; ".join(str(p) for p in found))
            return DONE
        current = effective(self.settings.name, generation, config.spec)
        self._publish(current)
        if not self.leading:
            return DONE
        try:
            if self._owner is None:
                self._owner = await self._anchor()
            ca_pem, next_tls = await self._reconcile_tls(config.spec)
            await self._apply_admission(current, ca_pem)
            await self._apply_policies()
            await self._apply_conversion(config.spec, ca_pem)
            await self._apply_rbac(current)
        except ApplyError as err:
            await self._not_ready(raw, generation, err.reason, str(err))
            return Result(requeue_after=RETRY_SECONDS)
        except KubeError as err:
            await self._not_ready(raw, generation, "ApplyFailed", str(err))
            return Result(requeue_after=RETRY_SECONDS)
        await self._write_status(raw, generation, "True", "Applied", "configuration validated and applied", current)
        READY.set(1)
        if self.settings.manage_crds and not await self._migrate_storage():
            return Result(requeue_after=min(next_tls, RETRY_SECONDS))
        return Result(requeue_after=next_tls)

    def _own(self, body: JSON) -> JSON:
        """Mark a generated object as ours: the labels find it for pruning.

        Deliberately *not* owned by the ServiceConfiguration: deleting that object (a ``kubectl delete`` of the
        wrong thing, a GitOps tool pruning it) would let the garbage collector take the webhook configurations,
        and the tenant fence, down with it. Generated objects are owned by the anchor ClusterRole instead when
        one is configured (``--owner-cluster-role``: the chart's own ClusterRole, gone only on uninstall)."""
        meta = body["metadata"]
        meta["labels"] = {**meta.get("labels", {}), names.CONFIGURATION_LABEL: self.settings.name}
        if self._owner:
            meta["ownerReferences"] = self._owner
        return body

    async def _anchor(self) -> list[JSON]:
        """The ownerReferences generated objects carry: to ``--owner-cluster-role``, read once (its uid)."""
        name = self.settings.owner_cluster_role
        if not name:
            return []
        role = await self.kube.get_or_none(f"{RBAC_PATHS['ClusterRole']}/{name}")
        if role is None:
            raise ApplyError("OwnerNotFound", f"ClusterRole {name} (--owner-cluster-role) does not exist")
        return [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "name": name,
                "uid": role["metadata"]["uid"],
            }
        ]

    def _publish(self, current: EffectiveConfiguration) -> None:
        self.last_good = current
        # This process's own caches follow the period it publishes (its subscribers do in runtime.grpc).
        invalidation.set_period(parse_duration(current.spec.cache_invalidation).total_seconds())
        self.hub.publish(CONFIG_KIND, current.model_dump_json(by_alias=True).encode())

    async def _create_default(self) -> None:
        """Recreate the object: with the last spec this replica applied when it has one (a deleted configuration
        comes back as it was, webhooks and all), else with the spec's defaults."""
        spec = self.last_good.spec if self.last_good is not None else ServiceConfigurationSpec()
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": CONFIG_KIND,
            "metadata": {"name": self.settings.name},
            "spec": spec.to_k8s(),
        }
        with contextlib.suppress(KubeError):
            created = await self.kube.create(f"/apis/{GROUP_VERSION}/serviceconfigurations", body)
            await self.events.emit(created, "Normal", "Created", "created the default configuration")
            log.info("created the default ServiceConfiguration", extra={"configuration": self.settings.name})

    async def _reconcile_tls(self, spec: ServiceConfigurationSpec) -> tuple[bytes | None, float]:
        """The CA to inject, and seconds until a certificate (serving, or a component's client one) needs a look
        again."""
        secret_name = spec.overrides.tls_secret_name
        clients = {component: tls.client_secret_name(secret_name, component) for component in access.CLIENT_COMPONENTS}
        try:
            await self.secrets.watch([secret_name, *(clients.values() if spec.enable_tls_reconciler else ())])
        except SecretsUnreadableError as err:
            raise ApplyError("SecretsUnreadableError", str(err)) from None
        existing = tls.decode(self.secrets.get(secret_name))
        if not spec.enable_tls_reconciler:
            # Externally managed certificates (the serving Secret and every component's client Secret): read the
            # CA if there is one, never write.
            return existing.get(tls.CA_CERT), self.settings.resync_seconds
        service = spec.admission.service_name if spec.admission else "enclave-webhook-service"
        names = tls.service_names(service, self.settings.namespace) + list(self.settings.extra_tls_names)
        planned = tls.plan(
            existing,
            dns_names=names,
            ip_addresses=list(self.settings.extra_tls_ips),
            validity=self.settings.tls_validity,
        )
        await self._write_tls_secret(secret_name, planned, "webhook TLS")
        next_check = tls.next_check(planned.data)
        for component, name in clients.items():
            current = tls.decode(self.secrets.get(name))
            client = tls.plan_client(current, planned.data, component, validity=self.settings.tls_validity)
            await self._write_tls_secret(name, client, f"client certificate of {component}")
            next_check = min(next_check, tls.next_check(client.data))
        return planned.ca_pem, next_check

    async def _write_tls_secret(self, name: str, planned: tls.TlsPlan, what: str) -> None:
        """Write a ``kubernetes.io/tls`` Secret when its plan changed it, or to take ownership of one."""
        secret = self.secrets.get(name)
        adopt = secret is not None and not _owned_by(secret, self._owner or [])
        if not (planned.reason or adopt):
            return
        metadata: JSON = {
            "name": name,
            "namespace": self.settings.namespace,
            "labels": {names.MANAGED_BY: names.CONFIG_MANAGER},
        }
        if self._owner:
            # Like the webhook configurations: gone with the chart's ClusterRole (helm uninstall), and
            # namespaced-dependent-of-cluster-scoped-owner is a shape the garbage collector supports.
            metadata["ownerReferences"] = self._owner
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "kubernetes.io/tls",
            "data": {key: base64.b64encode(value).decode() for key, value in sorted(planned.data.items())},
        }
        path = resource_path("v1", "secrets", namespace=self.settings.namespace, name=name)
        stored = await self.kube.apply(path, body)
        self.secrets.stored(name, stored)
        if planned.reason:
            await self.events.emit(stored, "Normal", planned.reason, f"{what}: {planned.reason}")
        log.info("TLS secret written", extra={"reason": planned.reason or "Owned", "secret": name})

    async def _apply_admission(self, current: EffectiveConfiguration, ca_pem: bytes | None) -> None:
        if current.spec.admission is None:
            # No admission section (a default recreated by a replica that never saw the old spec): leave the
            # generated configurations as they are rather than take the fence down. Removing a side
            # (admission.mutating: null) or renaming one is how configurations are deleted.
            return
        desired = webhooks.render(current, ca_pem, self._service_users(current))
        for kind, body in desired.items():
            name = body["metadata"]["name"]
            path = f"{ADMISSION_PATHS[kind]}/{name}"
            if self.managed[kind].get(name) is None:
                existing = await self.kube.get_or_none(path)
                if existing is not None:
                    raise ApplyError(
                        "ConflictingWebhookConfiguration",
                        f"{kind} {name} exists and was not created by Enclave; choose another name "
                        "(spec.admission.*.name) or delete it",
                    )
            await self._apply_once(kind, path, self._own(body))
        for kind in ADMISSION_PATHS:
            wanted = desired.get(kind, {}).get("metadata", {}).get("name")
            for name in [n for n in self.managed[kind].items if n != wanted]:
                await self.kube.delete(f"{ADMISSION_PATHS[kind]}/{name}")
                self.managed[kind].items.pop(name, None)
                log.info("pruned webhook configuration", extra={"kind": kind, "name": name})

    async def _apply_policies(self) -> None:
        """The native admission policies (:mod:`enclave_config.policies`): kept whatever ``spec.admission``
        says, since they guard against mistakes the webhooks deliberately let administrators make."""
        desired = policies.render(self.settings.name)
        wanted = {(body["kind"], body["metadata"]["name"]) for body in desired}
        for body in desired:
            kind, name = body["kind"], body["metadata"]["name"]
            await self._apply_once(kind, f"{policies.PATHS[kind]}/{name}", self._own(body))
        for kind, path in reversed(policies.PATHS.items()):  # bindings before the policies they name
            for name in [n for n in self.managed[kind].items if (kind, n) not in wanted]:
                await self.kube.delete(f"{path}/{name}")
                self.managed[kind].items.pop(name, None)

    async def _apply_conversion(self, spec: ServiceConfigurationSpec, ca_pem: bytes | None) -> None:
        """Point every Enclave CRD's conversion webhook at the admission server, with its CA (the CRD bundle)."""
        if not self.settings.manage_crds:
            return
        for name, body in crds.definitions(self.crds.items, spec, ca_pem).items():
            self.crds.items[name] = await self.kube.apply(f"{crds.CRD_PATH}/{name}", body)
            log.info("CRD applied from this release's models", extra={"crd": name})
        for name, crd in sorted(self.crds.items.items()):
            patch = crds.conversion_patch(crd, spec, ca_pem)
            if patch is None:
                continue
            stored = await self.kube.merge_patch(f"{crds.CRD_PATH}/{name}", patch)
            self.crds.items[name] = stored
            log.info("conversion webhook client of a CRD updated", extra={"crd": name})

    async def _migrate_storage(self) -> bool:
        """Rewrite objects still stored in an old version, then trim ``storedVersions``; False to retry soon.

        Best effort: listing needs the conversion webhook (objects stored as v1beta1 are converted on the way
        out), which may not answer yet while the admission server starts.
        """
        done = True
        for crd in sorted(self.crds.items.values(), key=lambda c: str(c["metadata"]["name"])):
            plan = crds.migration(crd)
            if plan is None:
                continue
            try:
                listed = await self.kube.list(plan.list_path)
                for obj in listed.get("items") or []:
                    patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}}
                    try:
                        await self.kube.merge_patch(plan.object_path(obj), patch)
                    except KubeError as err:
                        if err.status not in (404, 409):  # deleted or written since: stored anew anyway
                            raise
                status = {"status": {"storedVersions": [plan.storage]}}
                self.crds.items[plan.crd] = await self.kube.merge_patch(plan.status_path, status)
            except KubeError as err:
                log.warning("storage migration will be retried", extra={"crd": plan.crd, "error": str(err)})
                done = False
                continue
            message = (
                f"{len(listed.get('items') or [])} objects rewritten in {plan.storage}; "
                f"no longer stored as {', '.join(plan.stale)}"
            )
            target = {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": self.crds.items[plan.crd]["metadata"],
            }
            await self.events.emit(target, "Normal", "StorageMigrated", message)
            log.info("storage migrated", extra={"crd": plan.crd, "from": list(plan.stale), "to": plan.storage})
        return done

    async def _apply_rbac(self, current: EffectiveConfiguration) -> None:
        desired = rbac.render(current, self._promoted_accounts())
        wanted: dict[str, set[str]] = {kind: set() for kind in RBAC_PATHS}
        for body in desired:
            kind, name = body["kind"], body["metadata"]["name"]
            wanted[kind].add(name)
            live = self.managed[kind].get(name)
            if kind == "ClusterRoleBinding" and live is not None and live.get("roleRef") != body["roleRef"]:
                await self.kube.delete(f"{RBAC_PATHS[kind]}/{name}")  # roleRef is immutable
                self.managed[kind].items.pop(name, None)
            await self._apply_once(kind, f"{RBAC_PATHS[kind]}/{name}", self._own(body))
        for kind, path in RBAC_PATHS.items():
            for name in [n for n in self.managed[kind].items if n not in wanted[kind]]:
                await self.kube.delete(f"{path}/{name}")
                self.managed[kind].items.pop(name, None)

    async def _apply_once(self, kind: str, path: str, body: JSON) -> None:
        """Server-side apply ``body`` unless this replica applied exactly it already and the live object still
        holds every field of it (what the apiserver defaults on top is not a difference)."""
        name = body["metadata"]["name"]
        live = self.managed[kind].get(name)
        if live is not None and self._applied.get((kind, name)) == body and holds(live, body):
            return
        stored = await self.kube.apply(path, body)
        self.managed[kind].items[name] = stored
        self._applied[(kind, name)] = body

    # -- status --------------------------------------------------------------------------------------------

    def _service_users(self, current: EffectiveConfiguration) -> list[Entity]:
        """Who ``opts.serviceUsers`` sends: ``status.users`` plus, with promotion on, the promoted service
        accounts that count (tenant owners admission fences like any tenant user)."""
        users = self._status_users(current)
        if current.spec.allow_service_account_promotion:
            for namespace, name in self._promoted_accounts():
                entity = Entity(kind="ServiceAccount", name=f"system:serviceaccount:{namespace}:{name}")
                if entity not in users:
                    users.append(entity)
        return users

    def _status_users(self, current: EffectiveConfiguration | None) -> list[Entity]:
        users = list(current.users if current else [])
        for owner in self.owners.values():
            spec = owner.get("spec", {})
            if spec.get("aggregate") and spec.get("kind") and spec.get("name"):
                entity = Entity(kind=spec["kind"], name=spec["name"])
                if entity not in users:
                    users.append(entity)
        return users

    async def _not_ready(self, raw: JSON, generation: int, reason: str, message: str) -> None:
        READY.set(0)
        log.warning("configuration not applied", extra={"reason": reason, "detail": message})
        if not self.leading:
            return
        events_namespace = (raw.get("spec") or {}).get("events", {}).get("namespace") or "default"
        await self.events.warn_once(self.settings.name, raw, reason, message, namespace=events_namespace)
        await self._write_status(raw, generation, "False", reason, message, self.last_good)

    async def _write_status(
        self,
        raw: JSON,
        generation: int,
        status: str,
        reason: str,
        message: str,
        current: EffectiveConfiguration | None,
    ) -> None:
        if status == "True":
            self.events.fine(self.settings.name)
        old = raw.get("status") or {}
        conditions = [Condition.model_validate(c) for c in old.get("conditions") or []]
        ready = new_condition(
            "Ready",
            "True" if status == "True" else "False",
            reason,
            message[:32000],
            now=datetime.now(UTC),
            observed_generation=generation,
        )
        conditions = set_condition(conditions, ready)
        new_status: dict[str, Any] = {
            "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions],
            "observedGeneration": generation,
            "tenants": sorted(t["metadata"]["name"] for t in self.tenants.values()),
            "users": [u.to_k8s() for u in self._status_users(current)],
        }
        if new_status == {k: old.get(k) for k in new_status}:
            return
        path = f"/apis/{GROUP_VERSION}/serviceconfigurations/{self.settings.name}/status"
        stored = await self.kube.merge_patch(path, {"status": new_status})
        self.configs.items[self.settings.name] = stored


def _aggregated(owner: JSON) -> tuple[str, str] | None:
    spec = owner.get("spec") or {}
    if spec.get("aggregate") and spec.get("kind") and spec.get("name"):
        return (str(spec["kind"]), str(spec["name"]))
    return None


def _owned_by(obj: JSON, owners: list[JSON]) -> bool:
    """Whether ``obj`` already carries every owner reference it should (by uid; none expected: always)."""
    present = {ref.get("uid") for ref in obj.get("metadata", {}).get("ownerReferences") or []}
    return all(owner["uid"] in present for owner in owners)

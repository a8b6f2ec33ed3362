"""Applying one plan: compare each desired object with the cache, dry-run, apply, and prune what is no longer wanted.

Every desired object is compared with the watch cache of managed objects: it is applied only when its content is
not already there (or its hash annotation changed), so a steady state makes no API write. Objects that exist and
are not ours are adopted only as ``policy.creation`` and :mod:`enclave_replication.adoption` allow. What this
object managed and no longer wants is removed or orphaned per the policy snapshot reported when it was applied.
This is the write half of a reconcile; :mod:`enclave_replication.controller` decides when to run it and reports
the outcome in status.

``Applier`` is a base of :class:`enclave_replication.controller.ReplicationController`.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp
from prometheus_client import Counter

from enclave_core import cel
from enclave_core.api.names import (
    ENCLAVE_MANAGED_BY,
    REPLICATION_CREATED_ANNOTATION,
    REPLICATION_HASH_ANNOTATION,
    REPLICATION_OWNER_ANNOTATION,
)
from enclave_core.api.replication import ItemPolicy
from enclave_core.kube.holds import holds
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, KubeError
from enclave_replication import adoption
from enclave_replication import plan as planning
from enclave_replication import status as st
from enclave_replication.acting import ActingKube
from enclave_replication.discovery import Resource
from enclave_replication.names import LIFECYCLE_ANNOTATIONS, Owner, split_api_version
from enclave_replication.watches import Watches, _annotations

if TYPE_CHECKING:
    from enclave_replication.controller import Settings

WRITES = Counter("enclave_replication_writes_total", "Writes to the cluster", ["operation"])


@dataclass
class _Work:
    """One object's pending write, decided against the cache."""

    desired: planning.DesiredObject
    resource: Resource
    body: JSON
    result: st.ItemResult
    previous_policy: ItemPolicy | None = None
    """The policy snapshot reported before: a failed update keeps it (protection and cleanup follow it)."""


@dataclass
class _Pass:
    results: list[st.ItemResult] = field(default_factory=list)
    writes: list[_Work] = field(default_factory=list)
    keep: set[tuple[str, str, str, str]] = field(default_factory=set)
    """Managed objects not to prune although not applied this pass (condition false, failed checks)."""
    forbidden: list[str] = field(default_factory=list)
    """Reads or writes the actor may not make: any one stops every write of the pass."""


class Applier(Watches):
    """Decide, dry-run, apply and prune one replication object's plan."""

    settings: Settings
    writes: int
    _applied: dict[tuple[str, tuple[str, str, str, str]], tuple[str, str]]

    async def _decide(self, owner: Owner, raw: JSON, built: planning.Plan, acting: ActingKube) -> _Pass:
        now = datetime.now(UTC).replace(microsecond=0)
        previous = st.previous_items(raw)
        work = _Pass()
        work.forbidden += [f"{p.origin}: {p.message}" for p in built.problems if p.reason == "Forbidden"]
        for problem in built.problems:
            work.results.append(
                st.ItemResult(
                    origin=problem.origin,
                    status="False",
                    reason=problem.reason,
                    message=problem.message,
                    tenant=problem.tenant,
                    group=split_api_version(problem.api_version)[0] if problem.api_version else "",
                    version=split_api_version(problem.api_version)[1] if problem.api_version else "",
                    kind=problem.kind,
                    name=problem.name,
                    namespace=problem.namespace,
                )
            )
        for key, desired in built.objects.items():
            result = st.ItemResult(
                origin=desired.origin,
                status="True",
                reason="Applied",
                tenant=desired.tenant,
                group=desired.group,
                version=desired.version,
                kind=desired.kind,
                name=desired.name,
                namespace=desired.namespace,
                cluster_scoped=desired.cluster_scoped,
                policy=desired.policy,
            )
            before = previous.get(key)
            if before is not None and before.status is not None:
                result.last_apply = before.status.last_apply
                result.created = before.status.created
            work.results.append(result)
            try:
                previous_policy = before.status.policy if before is not None and before.status else None
                await self._decide_one(owner, desired, result, work, acting, now, previous_policy)
            except planning.ReadError as err:
                result.status, result.reason, result.message = "False", err.reason, err.message
            except KubeError as err:
                result.status, result.reason, result.message = "False", _reason(err), f"reading the object: {err}"
                if err.status == 403:
                    work.forbidden.append(f"{desired.origin}: {planning.describe(key)}: {err.message}")
            if result.status == "False" and before is not None and before.status is not None:
                result.policy = before.status.policy  # a failed update keeps the previous policy snapshot
            if result.status == "False" and _ours(owner, before):
                work.keep.add(key)
                result.managed = True
        return work

    async def _decide_one(
        self,
        owner: Owner,
        desired: planning.DesiredObject,
        result: st.ItemResult,
        work: _Pass,
        acting: ActingKube,
        now: datetime,
        previous_policy: ItemPolicy | None = None,
    ) -> None:
        resource = await self.discovery.resource(desired.api_version, desired.kind)
        informer = await self._managed_informer(resource, desired.namespace)
        cached_key = f"{desired.namespace}/{desired.name}" if desired.namespace else desired.name
        live = informer.get(cached_key) if informer is not None else None
        if live is None:
            # Not carrying our label: it may still exist (someone else's, or one we are to adopt).
            live = await acting.get_or_none(resource.path(desired.namespace, desired.name))
        marked_by = _annotations(live).get(REPLICATION_OWNER_ANNOTATION) if live else None
        if live is not None and marked_by != owner.key:
            if marked_by:
                result.status, result.reason = "False", "ManagedElsewhere"
                result.message = f"{planning.describe(desired.key)} is managed by {marked_by}"
                return
            if desired.policy.creation == "Owner":
                result.status, result.reason = "False", "AlreadyExists"
                result.message = (
                    f"{planning.describe(desired.key)} exists and was not created by {owner.key} "
                    "(policy.creation Owner; use Merge to adopt it)"
                )
                return
            created = False
        elif live is not None:
            created = _annotations(live).get(REPLICATION_CREATED_ANNOTATION) != "false"
        else:
            created = True
        if desired.policy.condition:
            verdict = _condition(desired.policy.condition, live, now)
            if verdict is None or isinstance(verdict, str):
                result.status, result.reason = "False", "ConditionFailed"
                result.message = f"policy.condition: {verdict or 'did not evaluate to a bool'}"
                result.created = created if marked_by == owner.key else None
                result.managed = marked_by == owner.key
                if result.managed:
                    work.keep.add(desired.key)
                return
            if not verdict:
                result.status, result.reason = "Unknown", "Skipped"
                result.message = "policy.condition is false"
                result.managed = marked_by == owner.key
                result.created = created if result.managed else None
                if result.managed:
                    work.keep.add(desired.key)
                return
        if live is not None and marked_by != owner.key:
            why = adoption.conflict(live, self.settings.adoptable_managers)
            if why:
                result.status, result.reason = "False", "AdoptionConflict"
                result.message = (
                    f"{planning.describe(desired.key)} exists and is not adopted (policy.creation Merge): {why}"
                )
                return
        body = copy.deepcopy(desired.body)
        body["metadata"]["annotations"][REPLICATION_CREATED_ANNOTATION] = "true" if created else "false"
        result.created = created
        result.managed = True
        if live is not None and marked_by == owner.key:
            memo = self._applied.get((owner.key, desired.key))
            version = str(live.get("metadata", {}).get("resourceVersion"))
            if holds(live, body) or memo == (version, body["metadata"]["annotations"][REPLICATION_HASH_ANNOTATION]):
                return
        result.last_apply = now
        keep = previous_policy if marked_by == owner.key else None
        work.writes.append(_Work(desired, resource, body, result, keep or desired.policy))

    async def _dry_run(self, work: _Pass, acting: ActingKube) -> list[str]:
        """Try every write as a dry run; the writes the actor may not make (empty: go ahead)."""
        forbidden: list[str] = []
        for item in work.writes:
            try:
                await acting.apply_object(
                    item.resource.path(item.desired.namespace, item.desired.name),
                    item.body,
                    force=item.desired.policy.force,
                    dry_run=True,
                )
            except KubeError as err:
                if err.status == 403:
                    forbidden.append(f"{item.desired.origin}: {planning.describe(item.desired.key)}: {err.message}")
        return forbidden

    async def _apply(self, owner: Owner, work: _Pass, acting: ActingKube) -> None:
        semaphore = asyncio.Semaphore(self.settings.writes)

        async def one(item: _Work) -> None:
            async with semaphore:
                path = item.resource.path(item.desired.namespace, item.desired.name)
                try:
                    stored = await acting.apply_object(path, item.body, force=item.desired.policy.force)
                except KubeError as err:
                    item.result.status, item.result.reason = "False", _reason(err)
                    item.result.message = f"apply failed: {err.message}"
                    item.result.policy = item.previous_policy
                    if err.conflict:
                        item.result.message += " (another field manager owns these fields; policy.force takes them)"
                    return
                self.writes += 1
                WRITES.labels("apply").inc()
                version = stored.get("metadata", {}).get("resourceVersion")
                if version:
                    digest = item.body["metadata"]["annotations"][REPLICATION_HASH_ANNOTATION]
                    self._applied[(owner.key, item.desired.key)] = (str(version), digest)

        await asyncio.gather(*(one(item) for item in work.writes))

    def _managed_by(self, owner: Owner) -> list[tuple[Informer, JSON]]:
        found: list[tuple[Informer, JSON]] = []
        for informer in self.managed.values():
            for obj in informer.values():
                if _annotations(obj).get(REPLICATION_OWNER_ANNOTATION) == owner.key:
                    found.append((informer, obj))
        return found

    async def _prune(self, owner: Owner, raw: JSON, work: _Pass, acting: ActingKube) -> None:
        """Remove or orphan what this resource manages but no longer wants (per the item's policy snapshot)."""
        wanted = {(r.group, r.kind, r.namespace, r.name) for r in work.results if r.managed} | work.keep
        previous = st.previous_items(raw)
        for _informer, obj in self._managed_by(owner):
            key = _object_key(obj)
            if key in wanted:
                continue
            item = previous.get(key)
            policy = item.status.policy if item and item.status and item.status.policy else ItemPolicy()
            error = await self._release(owner, obj, policy, acting)
            if error:
                group, kind, namespace, name = key
                work.results.append(
                    st.ItemResult(
                        origin=(item.origin if item else None) or "pruned",
                        status="False",
                        reason="PruneFailed",
                        message=error,
                        group=group,
                        kind=kind,
                        namespace=namespace,
                        name=name,
                        version=split_api_version(str(obj.get("apiVersion", "")))[1],
                        policy=policy,
                        created=_annotations(obj).get(REPLICATION_CREATED_ANNOTATION) != "false",
                        managed=True,
                    )
                )

    async def _release(self, owner: Owner, obj: JSON, policy: ItemPolicy, acting: ActingKube) -> str:
        """Delete (Remove, and we created it) or strip our marks and field ownership; an error message or ''."""
        meta = obj["metadata"]
        resource = await self.discovery.resource(str(obj["apiVersion"]), str(obj["kind"]))
        path = resource.path(meta.get("namespace") or "", meta["name"])
        created = _annotations(obj).get(REPLICATION_CREATED_ANNOTATION) != "false"
        what = planning.describe(_object_key(obj))
        try:
            if policy.deletion == "Remove" and created:
                await acting.delete_object(path)
                WRITES.labels("delete").inc()
            else:
                await acting.json_patch(path, _orphan_patch(obj, owner))
                WRITES.labels("orphan").inc()
            self.writes += 1
        except KubeError as err:
            if err.not_found:
                return ""
            return f"releasing {what}: {err.message}"
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            return f"releasing {what}: {acting.api.host} cannot be reached: {err}"
        self._applied.pop((owner.key, _object_key(obj)), None)
        return ""


def _object_key(obj: JSON) -> tuple[str, str, str, str]:
    group = split_api_version(str(obj.get("apiVersion", "")))[0]
    meta = obj.get("metadata", {})
    return (group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))


def _ours(owner: Owner, item: Any) -> bool:
    return bool(item is not None and item.status is not None and item.status.created is not None)


def _reason(err: KubeError) -> str:
    if err.status == 403:
        return "Forbidden"
    if err.conflict:
        return "Conflict"
    if err.status == 422:
        return "Invalid"
    return "ApplyFailed"


def _condition(expression: str, live: JSON | None, now: datetime) -> bool | str | None:
    """True/False, or a message when the expression does not compile or fails."""
    try:
        program = cel.default().condition(expression, cel.POLICY_CONDITION_ENV)
    except cel.CelCompileError as err:
        return str(err)
    outcome = program.evaluate({"object": live, "now": now})
    if isinstance(outcome, cel.Ok):
        return bool(outcome.value)
    return str(outcome.error)


def _orphan_patch(obj: JSON, owner: Owner) -> list[JSON]:
    """Strip our label, annotations and managedFields entries; keep every value (guarded by resourceVersion)."""
    meta = obj["metadata"]
    operations: list[JSON] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
    if ENCLAVE_MANAGED_BY in (meta.get("labels") or {}):
        operations.append({"op": "remove", "path": f"/metadata/labels/{_escape(ENCLAVE_MANAGED_BY)}"})
    for key in LIFECYCLE_ANNOTATIONS:
        if key in (meta.get("annotations") or {}):
            operations.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
    fields = meta.get("managedFields") or []
    kept = [entry for entry in fields if entry.get("manager") != owner.field_manager]
    if kept and len(kept) != len(fields):
        operations.append({"op": "replace", "path": "/metadata/managedFields", "value": kept})
    return operations


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")

"""Managed metadata reconciled onto existing objects when a namespace's rules change (Lease holder only).

Admission sets a rule's ``managed`` label and annotation values on every write; objects that existed before the
rule (or before it changed) are brought to the same values here. Only rules that apply to every request
qualify (empty audience, no conditions): a conditional rule's managed value applies on matching requests only,
so there is nothing to reconcile for it. The last applicable value per key wins, as at admission.

Cost: a namespace is reconciled when its managed set changes (and once after a restart), never in a steady
state: discovery of the resources the rules name, one list per resource, a merge patch per drifted object.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from enclave_core.api.rules import AppliedRule, KindScope
from enclave_core.kube.rest import Kube, KubeError

log = logging.getLogger(__name__)

SKIPPED_RESOURCES = frozenset(
    {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("coordination.k8s.io", "leases"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
    }
)
"""What the control plane rewrites constantly and admission never judges: not reconciled either."""


@dataclass(frozen=True)
class Entry:
    scope: KindScope
    part: str
    """``labels`` or ``annotations``."""
    key: str
    value: str


@dataclass(frozen=True)
class Resource:
    """A namespaced resource that can be listed and patched."""

    api_version: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str, name: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" + (f"/{name}" if name else "")


def entries(rules: Iterable[AppliedRule]) -> list[Entry]:
    """Managed values of the rules that apply to every request, in rule order."""
    found: list[Entry] = []
    for rule in rules:
        enforce = rule.enforce
        if enforce is None or rule.audience or enforce.conditions:
            continue
        for metadata in enforce.metadata or ():
            scope = KindScope.of(metadata.kinds, metadata.api_groups)
            for part, values in (("labels", metadata.labels), ("annotations", metadata.annotations)):
                for key, value in (values or {}).items():
                    if value.managed is not None:
                        found.append(Entry(scope, part, key, value.managed))
    return found


def signature(found: list[Entry]) -> str:
    """Equal for equal managed sets: the namespace is reconciled again only when this changes."""
    text = json.dumps(
        [
            [
                sorted(e.scope.kinds),
                e.scope.any_group,
                sorted(e.scope.groups),
                sorted(e.scope.versions),
                e.part,
                e.key,
                e.value,
            ]
            for e in found
        ]
    )
    # Interned: every namespace of a tenant usually has the same one, and one is remembered per namespace.
    return sys.intern(hashlib.sha256(text.encode()).hexdigest())


def wanted(found: list[Entry], kind: str, api_version: str) -> dict[str, dict[str, str]]:
    """``{"labels": {...}, "annotations": {...}}`` an object of ``kind`` must carry (last value wins)."""
    result: dict[str, dict[str, str]] = {}
    for entry in found:
        if entry.scope.matches(kind, api_version):
            result.setdefault(entry.part, {})[entry.key] = entry.value
    return result


def drift(obj: Mapping[str, Any], want: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """The part of ``want`` the object does not carry yet (empty when it is in line)."""
    meta = obj.get("metadata") or {}
    patch: dict[str, dict[str, str]] = {}
    for part, values in want.items():
        have = meta.get(part) or {}
        missing = {key: value for key, value in values.items() if have.get(key) != value}
        if missing:
            patch[part] = missing
    return patch


async def discover(kube: Kube) -> list[Resource]:
    """Namespaced resources (preferred versions) that support list and patch."""
    versions = ["v1"]
    groups = await kube.get("/apis")
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            versions.append(preferred)
    found: list[Resource] = []
    for version in versions:
        path = "/api/v1" if version == "v1" else f"/apis/{version}"
        try:
            listing = await kube.get(path)
        except KubeError as err:
            log.warning("discovery failed", extra={"groupVersion": version, "error": str(err)})
            continue
        for item in listing.get("resources") or []:
            name = str(item.get("name") or "")
            verbs = set(item.get("verbs") or [])
            if "/" in name or not item.get("namespaced") or not {"list", "patch"} <= verbs:
                continue
            resource = Resource(version, str(item.get("kind") or ""), name)
            if (resource.group, name) not in SKIPPED_RESOURCES:
                found.append(resource)
    return found


async def reconcile(kube: Kube, namespace: str, found: list[Entry], resources: list[Resource]) -> tuple[int, list[str]]:
    """Patch every object of ``namespace`` that lacks a managed value; (objects patched, errors)."""
    patched, errors = 0, []
    for resource in resources:
        if not any(entry.scope.matches(resource.kind, resource.api_version) for entry in found):
            continue
        want = wanted(found, resource.kind, resource.api_version)
        try:
            listing = await kube.get(resource.path(namespace))
        except KubeError as err:
            if not err.not_found:
                errors.append(f"list {resource.plural}: {err}")
            continue
        for obj in listing.get("items") or []:
            missing = drift(obj, want)
            if not missing:
                continue
            name = obj["metadata"]["name"]
            try:
                await kube.merge_patch(resource.path(namespace, name), {"metadata": missing})
            except KubeError as err:
                if not err.not_found:
                    errors.append(f"{resource.kind} {name}: {err}")
                continue
            patched += 1
    return patched, errors

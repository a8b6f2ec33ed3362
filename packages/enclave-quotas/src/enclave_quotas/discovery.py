"""Which resources a quota source names: its ``apiVersion``/``kind`` forms resolved through API discovery.

Forms (spec): ``apiVersion`` empty or ``v1`` is the core group; ``*`` every group; ``<group>`` and
``<group>/*`` the group at its preferred version; ``<group>/<version>`` exactly that; ``kind: *`` every kind
there. Versions of one group are views of the same stored objects, so a source that names a group without a
version counts each object once, at the group's preferred version.

Only resources that can be listed and watched are counted; subresources never. Events, Leases and
QuantityLedgers are never counted (admission writes ledgers and events itself and must never call itself,
and Leases churn every few seconds). Discovery is refreshed at start, when a CustomResourceDefinition changes,
and while some source does not resolve, so a quota on a kind whose CRD is installed later starts counting
once the kind is served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from enclave_core.api.quotas import Source
from enclave_core.kube.rest import JSON, Kube, KubeError

log = logging.getLogger(__name__)

NEVER_COUNTED: Final = frozenset(
    {("", "events"), ("events.k8s.io", "events"), ("coordination.k8s.io", "leases"), ("enclave.dev", "quantityledgers")}
)


@dataclass(frozen=True, slots=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """Collection path across namespaces (what an informer lists and watches)."""
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/{self.plural}"


@dataclass(frozen=True)
class Catalogue:
    """One discovery pass: every countable resource, and each group's preferred version."""

    resources: tuple[ApiResource, ...] = ()
    preferred: tuple[tuple[str, str], ...] = ()

    def resolve(self, source: Source) -> list[ApiResource]:
        """The resources ``source`` names, sorted; empty when none is served (yet)."""
        api_version = source.api_version or "v1"
        preferred = dict(self.preferred)
        if api_version == "v1":
            wanted = {("", "v1")}
        elif api_version == "*":
            wanted = set(preferred.items())
        else:
            group, _, version = api_version.partition("/")
            if version in ("", "*"):
                wanted = {(group, preferred[group])} if group in preferred else set()
            else:
                wanted = {(group, version)}
        found = [
            r
            for r in self.resources
            if (r.group, r.version) in wanted and (source.kind == "*" or r.kind == source.kind)
        ]
        return sorted(found, key=lambda r: (r.group, r.version, r.kind))


def _countable(group: str, version: str, items: Iterable[JSON]) -> list[ApiResource]:
    found = []
    for item in items:
        name = str(item.get("name", ""))
        verbs = set(item.get("verbs") or ())
        if "/" in name or not {"list", "watch"} <= verbs or (group, name) in NEVER_COUNTED:
            continue
        found.append(ApiResource(group, version, str(item.get("kind", "")), name, bool(item.get("namespaced"))))
    return found


async def discover(kube: Kube) -> Catalogue:
    """Read discovery (core, then every group version in parallel); a group version that does not answer
    (an aggregated API that is down) is left out rather than failing the pass."""
    core = await kube.get("/api/v1")
    resources = _countable("", "v1", core.get("resources") or ())
    groups = (await kube.get("/apis")).get("groups") or ()
    preferred = [("", "v1")]
    versions: list[tuple[str, str]] = []
    for group in groups:
        name = str(group.get("name", ""))
        best = (group.get("preferredVersion") or {}).get("version")
        if best:
            preferred.append((name, str(best)))
        versions += [(name, str(v.get("version"))) for v in group.get("versions") or ()]

    async def one(group: str, version: str) -> list[ApiResource]:
        try:
            listing = await kube.get(f"/apis/{group}/{version}")
        except (TimeoutError, KubeError, OSError) as err:
            log.info(
                "discovery skipped a group version", extra={"group_version": f"{group}/{version}", "error": str(err)}
            )
            return []
        return _countable(group, version, listing.get("resources") or ())

    for found in await asyncio.gather(*(one(g, v) for g, v in versions)):
        resources += found
    return Catalogue(tuple(resources), tuple(sorted(preferred)))

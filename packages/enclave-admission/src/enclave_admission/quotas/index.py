"""The QuotaTargets snapshot compiled for lookups: (group, resource) -> the quota sources that count it.

Built once per snapshot (selectors, paths and CEL compiled then), so a review costs one dictionary lookup
when no quota counts its resource, which is every review the hook is not scoped to anyway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from enclave_core.quantity import Quantity
from enclave_core.quotas import CompiledSource, compile_source
from enclave_core.snapshots.quotas import QuotaEntry, QuotaTargets

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Counted:
    """One quota source that counts a resource."""

    quota: QuotaEntry
    namespaces: frozenset[str] | None
    """Namespaces whose objects count; None for every namespace (or a cluster-scoped resource)."""
    source: CompiledSource
    limit: Quantity


class QuotaIndex:
    """Every quota source by the (group, resource) it counts."""

    def __init__(self, targets: QuotaTargets) -> None:
        self.targets = targets
        self.by_resource: dict[tuple[str, str], list[Counted]] = {}
        for quota in targets.quotas:
            try:
                limit = Quantity.parse(quota.limit)
                compiled = [compile_source(source) for source in quota.sources]
            except Exception as err:  # the controller publishes only valid quotas; never take the server down
                log.warning("quota left out: it does not compile", extra={"quota": quota.display, "error": str(err)})
                continue
            namespaces = frozenset(quota.namespaces) if quota.namespaces is not None else None
            for source in compiled:
                scoped = namespaces if source.source.namespaced else None
                key = (source.source.group, source.source.resource)
                self.by_resource.setdefault(key, []).append(Counted(quota, scoped, source, limit))

    def counting(self, group: str, resource: str, namespace: str) -> list[Counted]:
        """The sources that count an object of ``group``/``resource`` in ``namespace``."""
        found = self.by_resource.get((group, resource))
        if not found:
            return []
        return [c for c in found if c.namespaces is None or namespace in c.namespaces]
